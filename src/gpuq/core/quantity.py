"""Kubernetes resource quantities, parsed exactly.

A quantity is ``<signed number><suffix>`` where the suffix is a binary SI
suffix (Ki, Mi, Gi, Ti, Pi, Ei), a decimal SI suffix (n, u, m, "", k, M, G, T,
P, E) or a decimal exponent (``e3``, ``E-2``). Values are kept as ``Decimal``
so that ``0.1 + 0.2`` style drift never reaches quota arithmetic; the core
works on integers produced by :func:`to_amount` with Kueue's convention (CPU in
milli-units, every other resource in whole units, fractions rounded up).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_PATTERN = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)
MILLI_RESOURCES = frozenset({"cpu"})
"""Resources the core tracks in milli-units (as Kueue's ``resources.Amount`` does)."""


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """Return the exact value of a quantity such as ``500m``, ``10Gi``, ``1e3`` or ``1.5``.

    Integers and floats from YAML are accepted (floats through their shortest
    repr, so ``1.5`` is exactly 1.5). Raises :class:`QuantityError` otherwise.
    """
    if isinstance(value, bool) or value is None:
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return _bounded(Decimal(value), value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a finite quantity")
        return _bounded(Decimal(repr(value)), value)
    if isinstance(value, Decimal):
        return _bounded(value, value)
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _PATTERN.match(value.strip())
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity (expected e.g. 500m, 10Gi, 1e3, 1.5)")
    try:
        number = Decimal(match["num"])
    except InvalidOperation as err:  # pragma: no cover - the regex admits only valid numbers
        raise QuantityError(f"{value!r} is not a quantity") from err
    if match["exp"]:
        return _bounded(number.scaleb(int(match["exp"][1:])), value)
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return _bounded(number * _BINARY[suffix], value)
    return _bounded(number * _DECIMAL[suffix], value)


MAX_MILLI = 2**63 - 1
"""Kubernetes keeps quantities as int64 milli-values; anything larger is not a usable amount."""


def _bounded(quantity: Decimal, text: object) -> Decimal:
    if abs(quantity) * 1000 > MAX_MILLI:
        raise QuantityError(f"{text!r} is too large (at most {MAX_MILLI // 1000} in any unit)")
    return quantity


def to_amount(resource: str, value: object) -> int:
    """Convert a quantity to the core's integer unit for ``resource``.

    CPU becomes milli-CPU; everything else whole units. Fractions round up,
    as Kubernetes does when it stores a quantity at a coarser scale.
    """
    quantity = parse_quantity(value)
    if resource in MILLI_RESOURCES:
        quantity *= 1000
    return math.ceil(quantity)


def format_amount(resource: str, amount: int) -> str:
    """Render a core amount the way a person writes it (``1500m``, ``2``, ``16Gi``)."""
    if resource in MILLI_RESOURCES:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if amount >= 2**30 and amount % 2**30 == 0 and ("memory" in resource or "storage" in resource):
        return f"{amount // 2**30}Gi"
    if amount >= 2**20 and amount % 2**20 == 0 and ("memory" in resource or "storage" in resource):
        return f"{amount // 2**20}Mi"
    return str(amount)
