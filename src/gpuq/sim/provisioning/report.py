"""The provisioning and cost blocks of a variant's metrics, and their rows in the CLI summary.

``provisioning``: counts (scale-ups, nodes added, scale-downs, consolidations, fallbacks,
migrations, ProvisioningRequests and their waits, spot notices and interruptions), spot money
saved against the GPU-hours interruptions lost, and a timeline (nodes in service per pool and per
capacity type, requests waiting, fallbacks and spot interruptions, per bin).
``cost_attribution``: :func:`gpuq.sim.cost.cost_section`.

Both are simulated figures only, so that ``metrics.json`` is byte-identical from run to run: the
wall-clock seconds spent in provisioning decisions (:attr:`Provisioner.decision_s`) are not
in them; ``gpuq simulate`` prints them with the variant's wall time on stderr.
"""

from __future__ import annotations

import math
from typing import Any

from gpuq.sim.cost import cost_section
from gpuq.sim.metrics import quantiles
from gpuq.sim.provisioning.provisioner import Provisioner
from gpuq.sim.series import binned
from gpuq.sim.simulator import SimResult

LOG_SHOWN = 200


def provisioning_metrics(prov: Provisioner, result: SimResult, bins: int) -> dict[str, Any]:
    span = result.span_s
    bins = bins if span > 0 else 0
    width = span / bins if bins else 0.0
    c = prov.counters
    q = prov.queued
    spot_node_h = sum(
        prov.cost.pool_node_s.get(name, 0.0)
        for name, f in prov.pools.items()
        if f.spec.capacity_type == "spot"
    )
    spot_cost = sum(
        prov.cost.pool_cost.get(name, 0.0) for name, f in prov.pools.items() if f.spec.capacity_type == "spot"
    )
    on_demand_equiv = sum(
        prov.cost.pool_node_s.get(name, 0.0)
        / 3600
        * (prov.setup.prices.price(f.spec.machine_type, "on-demand") or 0.0)
        for name, f in prov.pools.items()
        if f.spec.capacity_type == "spot"
    )
    return {
        "scale_ups": c.scale_ups,
        "nodes_added": c.nodes_added,
        "scale_downs": c.scale_downs,
        "consolidated": c.consolidated,
        "fallbacks": c.fallbacks,
        "migrations": c.migrations,
        "not_scaled": c.not_scaled,
        "requests": dict(q.counts) | {"wait_s": quantiles(q.waits_s)},
        "spot": {
            "notices": c.spot_notices,
            "interruptions": c.spot_interruptions,
            "node_hours": _r(spot_node_h / 3600),
            "cost": _r(spot_cost),
            "on_demand_equivalent": _r(on_demand_equiv),
            "saved": _r(on_demand_equiv - spot_cost),
            "lost_gpu_hours": _r(c.spot_lost_gpu_s / 3600),
            "checkpoint_overhead_gpu_hours": _r(
                math.fsum(r.checkpoint_overhead_s * r.job.gpus for r in result.runs.values()) / 3600
            ),
        },
        "timeline": {
            "bin_s": _r(width),
            "nodes_by_pool": {k: _rs(binned(s, span, bins)) for k, s in sorted(prov.nodes_series.items())},
            "nodes_by_capacity_type": {
                k: _rs(binned(s, span, bins)) for k, s in sorted(prov.capacity_series.items())
            },
            "requests_waiting": _rs(binned(q.waiting, span, bins)),
            "fallbacks": _counted(prov, "fallback", width, bins),
            "spot_interruptions": _counted(prov, "spot-interrupt", width, bins),
        },
        "log": [list(e) for e in prov.log[:LOG_SHOWN]],
        "log_entries": len(prov.log),
    }


def _counted(prov: Provisioner, kind: str, width: float, bins: int) -> list[int]:
    """How many log entries of ``kind`` fall in each bin (the last bin takes the end instant)."""
    counts = [0] * bins
    for at, logged, _subject, _detail in prov.log:
        if logged == kind and bins:
            counts[min(int(at / width), bins - 1)] += 1
    return counts


def cost_metrics(prov: Provisioner, result: SimResult) -> dict[str, Any]:
    capacity = {name: f.spec.capacity_type for name, f in prov.pools.items()}
    return cost_section(list(result.runs.values()), result.recorder, result.span_s, prov.cost, capacity)


ROWS: tuple[tuple[str, Any], ...] = (
    ("nodes added / removed", lambda p, c: f"{p['nodes_added']} / {p['scale_downs'] + p['consolidated']}"),
    ("fallbacks / migrations", lambda p, c: f"{p['fallbacks']} / {p['migrations']}"),
    (
        "requests provisioned / retried / rejected",
        lambda p, c: (
            f"{p['requests']['provisioned']} / {p['requests']['retries']} / {p['requests']['rejected']}"
        ),
    ),
    (
        "spot interruptions / lost GPU-h",
        lambda p, c: f"{p['spot']['interruptions']} / {p['spot']['lost_gpu_hours']:.1f}",
    ),
    (
        "checkpoint overhead GPU-h",
        lambda p, c: f"{p['spot']['checkpoint_overhead_gpu_hours']:.1f}",
    ),
    ("spot saved vs on-demand", lambda p, c: f"{p['spot']['saved']:,.0f} {c['currency']}"),
    ("bill (idle share)", lambda p, c: f"{c['total']:,.0f} ({_share(c['idle'], c['total'])})"),
    (
        "idle GPU-h unallocated / alerts",
        lambda p, c: f"{c['idle_gpu_hours']['provisioned_unallocated']:.0f} / {c['idle_alerts']['count']}",
    ),
)


def cells(variant: dict[str, Any]) -> list[str]:
    p, c = variant.get("provisioning"), variant.get("cost_attribution")
    if not p or not c:
        return ["-" for _ in ROWS]
    return [get(p, c) for _label, get in ROWS]


def _share(part: float, total: float) -> str:
    return f"{100 * part / total:.0f}%" if total else "-"


def _r(value: float) -> float:
    rounded = round(value, 6)
    return 0.0 if rounded == 0 or math.isnan(rounded) else rounded


def _rs(values: list[float]) -> list[float]:
    return [round(v, 6) + 0.0 for v in values]
