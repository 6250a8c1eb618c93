"""Checks of a NodePool's provisioning fields: autoscaling, limits, delays, scale-down, disruption, stock.

Run by :func:`gpuq.api.machine_checks.pool_problems`; messages name the field path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuq.api import machines
from gpuq.api.diagnostics import FieldPath
from gpuq.api.names import label_value_problem, qualified_name_problem
from gpuq.api.provisioning_prices import validate_price_catalogues

__all__ = ["pool_provisioning_problems", "validate_price_catalogues"]
Findings = Iterator[tuple[FieldPath, str]]
NEGATIVE = "must be greater than or equal to 0"


def pool_provisioning_problems(spec: machines.NodePoolSpec) -> Findings:
    """Every provisioning finding of one NodePool spec."""
    yield from _zone_problems(spec)
    yield from _limit_problems(spec)
    yield from _delay_problems(spec)
    yield from _disruption_problems(spec.disruption)
    yield from _stock_problems(spec)


def _zone_problems(spec: machines.NodePoolSpec) -> Findings:
    for index, zone in enumerate(spec.zones):
        if problem := label_value_problem(zone):
            yield ("spec", "zones", index), f"invalid zone {zone!r}: {problem}"
        if zone in spec.zones[:index]:
            yield ("spec", "zones", index), f"duplicate zone {zone!r}"


def _limit_problems(spec: machines.NodePoolSpec) -> Findings:
    for resource, amount in spec.limits.items():
        at = ("spec", "limits", resource)
        if problem := qualified_name_problem(resource):
            yield at, f"invalid resource name {resource!r}: {problem}"
        if amount < 0:
            yield at, f"{NEGATIVE} (got {amount})"


def _durations(owner: Any, names: tuple[str, ...], at: FieldPath) -> Findings:
    for name in names:
        value = getattr(owner, name)
        if isinstance(value, float) and value < 0:
            camel = name.split("_")[0] + "".join(p.title() for p in name.split("_")[1:])
            yield (*at, camel), f"{NEGATIVE} (got {value:g}s)"


def _delay_problems(spec: machines.NodePoolSpec) -> Findings:
    if spec.provisioning is not None:
        names = ("boot", "driver_install", "image_pull", "model_warmup")
        yield from _durations(spec.provisioning, names, ("spec", "provisioning"))
    if spec.scale_down is not None:
        yield from _durations(spec.scale_down, ("idle_after",), ("spec", "scaleDown"))


def _disruption_problems(disruption: machines.PoolDisruption | None) -> Findings:
    if disruption is None:
        return
    at: FieldPath = ("spec", "disruption")
    yield from _durations(disruption, ("consolidate_after", "expire_after"), at)
    for index, budget in enumerate(disruption.budgets):
        text = str(budget.nodes).strip()
        number = text[:-1] if text.endswith("%") else text
        if not number.isdigit() or (text.endswith("%") and int(number) > 100):
            yield (
                (*at, "budgets", index, "nodes"),
                f'must be a count or a percentage, e.g. "2" or "10%" (got {text!r})',
            )
        if (budget.schedule is None) != (budget.duration is None):
            yield (*at, "budgets", index), "schedule and duration go together"


def _stock_problems(spec: machines.NodePoolSpec) -> Findings:
    zones = spec.known_zones()
    for index, entry in enumerate(spec.stock):
        at = ("spec", "stock", index)
        if entry.available < 0:
            yield (*at, "available"), f"{NEGATIVE} (got {entry.available})"
        if entry.from_ < 0:
            yield (*at, "from"), f"{NEGATIVE} (got {entry.from_:g}s)"
        zone = entry.zone or spec.zone
        if zone is None:
            yield (*at, "zone"), "is required when the pool sets no zone"
        elif zones and zone not in zones:
            yield (*at, "zone"), f"unknown zone {zone!r}: the pool's zones are {', '.join(zones)}"
