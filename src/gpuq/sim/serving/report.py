"""The serving section of a simulation's metrics, and its table in the HTML report.

Per service (one entry of ``variants[].serving`` in metrics.json):

- ``pending``: why no replica can be admitted (its object has a field gpuq cannot shape a
  replica from; None for a service that runs); such a service keeps 0 ready replicas;
- ``requests``: arrived, served, dropped (waited longer than ``queueTimeout``), queued while no
  replica was ready (``cold_queued``) and dropped among those, still queued at the end;
- ``latency_s``: p50 / p99 over served requests; ``slo``: the share of *all* arrived requests
  served within the SLO latency (dropped ones miss it) and whether the target is met;
- ``replicas``: time-weighted mean ready and bound replicas, the largest count asked for;
  ``series``: desired / ready replicas and GPUs held per bin;
- ``gpu_hours`` and ``cost`` of the replicas (node prices, or ``spec.serving.pricePerGpuHour``);
- ``scale_to_zero``: hours at zero replicas and what one replica would have held meanwhile
  (GPU-hours and cost saved);
- ``cold_starts``: count, mean and max seconds; ``scale_up_waits``: replicas that waited for
  quota and Kueue's last reason; ``decisions``: autoscaler syncs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any

from gpuq.sim.serving.fleet import ServiceRun, ServingFleet
from gpuq.sim.simulator import SimResult


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def _timeline_means(svc: ServiceRun, end: float) -> tuple[float, float, int]:
    """Time-weighted mean ready and bound replicas over ``[0, end]``, and the largest desired."""
    rows = svc.timeline
    ready = bound = 0.0
    for (t, _, r, b), nxt in zip(rows, [*rows[1:], (end, 0, 0, 0)], strict=True):
        span = max(0.0, min(nxt[0], end) - t)
        ready += r * span
        bound += b * span
    most = max((d for _, d, _, _ in rows), default=0)
    return (ready / end if end else 0.0), (bound / end if end else 0.0), most


def _series(svc: ServiceRun, end: float, bins: int) -> dict[str, list[float]]:
    """Desired and ready replicas and GPUs held, sampled at the start of each bin."""
    width = end / bins if end and bins else 0.0
    desired, ready, gpus = [], [], []
    rows, i = svc.timeline, 0
    for k in range(bins if width else 0):
        t = k * width
        while i + 1 < len(rows) and rows[i + 1][0] <= t:
            i += 1
        _, d, r, b = rows[i] if rows else (0.0, 0, 0, 0)
        desired.append(float(d))
        ready.append(float(r))
        gpus.append(b * svc.plan.gpus_per_replica)
    return {
        "t_s": [_r(k * width, 1) or 0.0 for k in range(len(desired))],
        "desired": desired,
        "ready": ready,
        "gpus": gpus,
    }


def service_metrics(svc: ServiceRun, result: SimResult, bins: int) -> dict[str, Any]:
    end = result.span_s
    spec, traffic = svc.plan.spec, svc.plan.traffic
    runs = [result.runs[k] for k in svc.all_keys if k in result.runs]
    gpu_hours = math.fsum(r.gpu_s for r in runs) / 3600
    price = svc.plan.price_per_gpu_hour
    cost = gpu_hours * price if price is not None else math.fsum(r.cost for r in runs)
    per_gpu_hour = cost / gpu_hours if gpu_hours else (price or 0.0)
    book = svc.book
    served = book.served
    slo = traffic.slo if traffic is not None else None
    within = book.within(slo.latency) if slo is not None else 0.0
    attainment = within / svc.arrived if svc.arrived else None
    mean_ready, mean_bound, most = _timeline_means(svc, end)
    zero_h = svc.zero_s / 3600
    saved = zero_h * svc.plan.gpus_per_replica
    waited = sorted({key for _, key, _ in svc.waits})
    colds = svc.cold_starts
    return {
        "name": spec.key,
        "kind": spec.kind,
        "autoscaler": spec.autoscaler_ref or "fixed",
        "pending": spec.pending or None,
        "requests": {
            "arrived": _r(svc.arrived, 1),
            "served": _r(served, 1),
            "dropped": _r(svc.dropped, 1),
            "cold_queued": _r(svc.cold_queued, 1),
            "cold_dropped": _r(svc.cold_dropped, 1),
            "queued_at_end": _r(sum(c[1] for c in svc.backlog), 1),
        },
        "latency_s": {"p50": _r(book.quantile(0.5)), "p99": _r(book.quantile(0.99))},
        "slo": {
            "latency_s": slo.latency if slo is not None else None,
            "target": slo.target if slo is not None else None,
            "attainment": _r(attainment, 6),
            "met": slo is not None and attainment is not None and attainment >= slo.target,
        },
        "replicas": {"mean_ready": _r(mean_ready, 3), "mean_bound": _r(mean_bound, 3), "max_desired": most},
        "gpu_hours": _r(gpu_hours, 3),
        "cost": _r(cost, 2),
        "scale_to_zero": {
            "zero_hours": _r(zero_h, 3),
            "saved_gpu_hours": _r(saved, 3),
            "saved_cost": _r(saved * per_gpu_hour, 2),
        },
        "cold_starts": {
            "count": len(colds),
            "mean_s": _r(math.fsum(colds) / len(colds), 1) if colds else None,
            "max_s": _r(max(colds), 1) if colds else None,
        },
        "scale_up_waits": {"replicas": len(waited), "last_reason": svc.waits[-1][2] if svc.waits else ""},
        "decisions": svc.decisions,
        "series": _series(svc, end, bins),
    }


def serving_metrics(result: SimResult, bins: int = 240) -> list[dict[str, Any]]:
    """One entry per service of the run; empty when the scenario has no services."""
    fleet = result.services
    if not isinstance(fleet, ServingFleet):
        return []
    return [service_metrics(svc, result, bins) for svc in fleet.services]


def batch_only(result: SimResult) -> SimResult:
    """The result without serving replicas, for the batch tables (waits, JCT, slowdown)."""
    fleet = result.services
    if not isinstance(fleet, ServingFleet):
        return result
    keys = fleet.replica_keys
    runs = {k: r for k, r in result.runs.items() if k not in keys}
    return SimResult(
        runs,
        result.recorder,
        result.span_s,
        result.events,
        result.passes,
        result.cycles,
        result.gpus_total,
        fleet,
    )


# (label, format, path in a service entry)
ROWS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("autoscaler", "text", ("autoscaler",)),
    ("pending: no replica admitted", "text", ("pending",)),
    ("latency p50", "s", ("latency_s", "p50")),
    ("latency p99", "s", ("latency_s", "p99")),
    ("SLO attainment", "pct", ("slo", "attainment")),
    ("requests dropped", "int", ("requests", "dropped")),
    ("queued / dropped in cold starts", "pair", ("requests", "cold_queued")),
    ("mean ready replicas", "num", ("replicas", "mean_ready")),
    ("GPU-hours", "num", ("gpu_hours",)),
    ("cost", "money", ("cost",)),
    ("hours at zero / GPU-hours saved", "zero", ("scale_to_zero", "zero_hours")),
    ("replicas that waited for quota", "int", ("scale_up_waits", "replicas")),
)


def _get(entry: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = entry
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def cell(entry: Mapping[str, Any] | None, kind: str, path: tuple[str, ...]) -> str:
    """One service metric as text (the CLI and the HTML report share it)."""
    if entry is None:
        return "-"
    value = _get(entry, path)
    if kind == "pair":
        return f"{entry['requests']['cold_queued']:,.0f} / {entry['requests']['cold_dropped']:,.0f}"
    if kind == "zero":
        zero = entry["scale_to_zero"]
        return f"{zero['zero_hours']:.1f} h / {zero['saved_gpu_hours']:.1f} ({zero['saved_cost']:,.0f})"
    if value is None:
        return "-"
    formats: dict[str, Callable[[Any], str]] = {
        "text": str,
        "s": lambda v: f"{v:.2f}s" if v < 60 else f"{v / 60:.1f}m",
        "pct": lambda v: f"{100 * v:.2f}%",
        "int": lambda v: f"{v:,.0f}",
        "num": lambda v: f"{v:,.1f}",
        "money": lambda v: f"{v:,.2f}",
    }
    return str(formats[kind](value))


def services_table(variants: Sequence[Mapping[str, Any]]) -> str:
    """The report's serving section: one row group per service, one column per variant."""
    names = sorted({s["name"] for v in variants for s in v.get("serving") or []})
    if not names:
        return '<p class="empty">No autoscaled service in this scenario.</p>'
    head = "".join(f"<th>{escape(str(v.get('name')))}</th>" for v in variants)
    rows = []
    for name in names:
        entries = [next((s for s in v.get("serving") or [] if s["name"] == name), None) for v in variants]
        rows.append(f'<tr><th colspan="{len(variants) + 1}">{escape(name)}</th></tr>')
        for label, kind, path in ROWS:
            cells = "".join(f'<td class="num">{escape(cell(e, kind, path))}</td>' for e in entries)
            rows.append(f"<tr><td>{escape(label)}</td>{cells}</tr>")
    return f"<table><thead><tr><th></th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
