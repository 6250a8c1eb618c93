"""gpuq's ComputeClass strategy presets: priority rules generated from the known machine options.

A ComputeClass may name a ``strategy`` instead of (or besides) writing ``priorities``. With no
``priorities``, :func:`expand` writes them from the options (node pools) and prices:

* ``obtainability``: get capacity somewhere. Spot first, then on-demand, then flex-start, each
  across every machine type (cheapest first) and every zone: one rule per machine type and
  capacity type, so a stock-out of one falls through to the next;
* ``cost``: cheapest per GPU-hour first (spot, on-demand, reserved alike), one rule per machine
  type and capacity type; options without a price come last;
* ``performance``: fastest GPU first (:data:`~.compute_class.GPU_SPEED_RANK`), reserved then
  on-demand only (never spot, which can be preempted mid-step).

With ``priorities`` written, the strategy only breaks ties inside a tier
(:func:`~.compute_class.strategy_key`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuq.core.provisioning.compute_class import GPU_SPEED_RANK, Rule, Strategy
from gpuq.core.provisioning.options import MachineOption
from gpuq.core.provisioning.prices import PriceCatalogue

_OBTAIN_ORDER = {"spot": 0, "on-demand": 1, "flex-start": 2, "reserved": 3, "calendar": 4}


def _rule_for(option: MachineOption) -> Rule:
    capacity = option.capacity_type
    return Rule(
        machine_type=option.machine_type,
        spot=True if capacity == "spot" else None,
        flex_start=capacity == "flex-start",
        reservation_affinity="Specific" if capacity in ("reserved", "calendar") else None,
    )


def _per_gpu_hour(option: MachineOption, prices: PriceCatalogue) -> float | None:
    price = prices.price(option.machine_type, option.capacity_type)
    if price is None:
        return None
    return price / max(option.gpu_count, 1)


def expand(strategy: Strategy, options: Sequence[MachineOption], prices: PriceCatalogue) -> tuple[Rule, ...]:
    """The priority rules of ``strategy`` for ``options`` (one per machine type and capacity type).

    Sort keys: obtainability ``(capacity order, price per GPU-hour, machine type)``; cost
    ``(price per GPU-hour unknown last, price, machine type, capacity type)``; performance
    ``(-GPU speed rank, reserved before on-demand, price, machine type)``.
    """
    seen: dict[tuple[str, str], MachineOption] = {}
    for option in options:
        seen.setdefault((option.machine_type, option.capacity_type), option)
    kinds = list(seen.values())

    def price(o: MachineOption) -> tuple[bool, float]:
        value = _per_gpu_hour(o, prices)
        return (value is None, value or 0.0)

    if strategy == "obtainability":
        ordered = sorted(kinds, key=lambda o: (_OBTAIN_ORDER[o.capacity_type], *price(o), o.machine_type))
    elif strategy == "cost":
        ordered = sorted(kinds, key=lambda o: (*price(o), o.machine_type, o.capacity_type))
    else:
        allowed = [o for o in kinds if o.capacity_type in ("reserved", "calendar", "on-demand")]
        ordered = sorted(
            allowed,
            key=lambda o: (
                -GPU_SPEED_RANK.get(o.gpu_type or "", 0),
                o.capacity_type == "on-demand",
                *price(o),
                o.machine_type,
            ),
        )
    return tuple(_rule_for(o) for o in ordered)
