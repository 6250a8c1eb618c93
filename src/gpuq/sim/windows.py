"""The run cut at its arrivals: the trace window (first to last arrival) apart from the drain after it.

A run's span ends when its last workload does, often hours after the last arrival, with the
cluster nearly empty: means and cost over the whole span blend the load the trace describes
with that tail. The ``windows`` block of a variant gives, for each part of the span:

- ``before``: from 0 to the first arrival (workloads of an initial state run there);
- ``arrival``: from the first to the last arrival, the window the headline figures use;
- ``drain``: from the last arrival to the end of the run;

each with GPU-hours in service and held, mean allocation, occupancy and fragmentation (ratios of
integrals over the part), and its cost: paid for nodes in service (``total``), priced GPU share
held by pods (``used``), the rest (``idle``), per team and per group of nodes
(:class:`gpuq.sim.recorder.CostGroup`: flavor, pool, capacity type, GPU model). Integrals are
exact, from the recorder's change points, never from the binned series.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from gpuq.sim.recorder import Recorder
from gpuq.sim.series import StepSeries
from gpuq.sim.simulator import SimRun

PARTS = ("before", "arrival", "drain")


def arrival_window(runs: Sequence[SimRun], span_s: float) -> tuple[float, float]:
    """``(first, last)`` arrival (creation times before 0 arrive at 0), within the span; ``(0, 0)``
    without workloads."""
    times = [max(r.job.workload.creation_time, 0.0) for r in runs]
    if not times:
        return 0.0, 0.0
    return min(min(times), span_s), min(max(times), span_s)


def window_metrics(runs: Sequence[SimRun], recorder: Recorder, span_s: float) -> dict[str, Any]:
    """The ``windows`` block (module docstring)."""
    first, last = arrival_window(runs, span_s)
    bounds = {"before": (0.0, first), "arrival": (first, last), "drain": (last, span_s)}
    return {part: _part(recorder, *bounds[part]) for part in PARTS}


def between(series: StepSeries, start_s: float, end_s: float) -> float:
    """∫ value dt over [start_s, end_s)."""
    if end_s <= start_s:
        return 0.0
    return series.integral(end_s) - (series.integral(start_s) if start_s > 0 else 0.0)


def _part(recorder: Recorder, start_s: float, end_s: float) -> dict[str, Any]:
    capacity = between(recorder.capacity, start_s, end_s)
    allocated = between(recorder.allocated, start_s, end_s)
    occupied = between(recorder.occupied, start_s, end_s)
    fragmented = between(recorder.fragmented, start_s, end_s)
    groups = []
    for group, series in sorted(recorder.cost_groups.items()):
        paid = between(series.paid_rate, start_s, end_s) / 3600
        used = between(series.used_rate, start_s, end_s) / 3600
        groups.append(
            {
                "flavor": group.flavor,
                "pool": group.pool,
                "capacity_type": group.capacity_type,
                "gpu_model": group.gpu_model,
                "paid": _r(paid),
                "used": _r(used),
                "idle": _r(paid - used),
                "gpu_hours": _r(between(series.gpus, start_s, end_s) / 3600),
                "allocated_gpu_hours": _r(between(series.allocated, start_s, end_s) / 3600),
            }
        )
    total = between(recorder.node_cost_rate, start_s, end_s) / 3600
    by_team = {
        team: _r(between(rate, start_s, end_s) / 3600)
        for team, rate in sorted(recorder.team_used_rate.items())
    }
    used_total = math.fsum(between(s.used_rate, start_s, end_s) for s in recorder.cost_groups.values()) / 3600
    return {
        "start_s": _r(start_s),
        "end_s": _r(end_s),
        "duration_s": _r(max(end_s - start_s, 0.0)),
        "gpu_hours_capacity": _r(capacity / 3600),
        "gpu_hours_allocated": _r(allocated / 3600),
        "gpu_allocation": _share(allocated, capacity),
        "gpu_occupancy": _share(occupied, capacity),
        "fragmentation": _share(fragmented, capacity - allocated),
        "cost": {
            "total": _r(total),
            "used": _r(used_total),
            "idle": _r(total - used_total),
            "by_team": by_team,
            "by_group": groups,
        },
    }


def _share(part: float, whole: float) -> float | None:
    return _r(part / whole) if whole > 1e-9 else None


def _r(value: float) -> float:
    rounded = round(value, 6)
    return 0.0 if rounded == 0 else rounded
