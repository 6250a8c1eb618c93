"""From a finished run to the figures a platform team reads: waits, use, borrowing, fairness, cost.

The shape is the documented ``metrics.json`` schema (docs/simulate.md). Every
number comes from the run's per-workload records and the recorder's series;
nothing is sampled, so the same run gives the same bytes.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuq.core.lifecycle import WorkloadState
from gpuq.core.model import ClusterConfig
from gpuq.sim.recorder import Recorder, nominal_gpus
from gpuq.sim.series import StepSeries, binned, ratio
from gpuq.sim.simulator import SimResult, SimRun
from gpuq.sim.waits import deadline_table, reason_text, wait_table
from gpuq.sim.windows import window_metrics

SCHEMA = "gpuq.dev/v1alpha1/SimulationMetrics"
CDF_POINTS = 101
ENDED = (WorkloadState.SUCCEEDED, WorkloadState.FAILED)


def quantiles(values: Sequence[float]) -> dict[str, Any]:
    """count, mean, p50, p90, p99 (linear interpolation, as numpy's default) and max."""
    if not values:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "mean": _round(math.fsum(ordered) / len(ordered)),
        "p50": _round(percentile(ordered, 50)),
        "p90": _round(percentile(ordered, 90)),
        "p99": _round(percentile(ordered, 99)),
        "max": _round(ordered[-1]),
    }


def percentile(ordered: Sequence[float], pct: float) -> float:
    position = (len(ordered) - 1) * pct / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def wait_of(run: SimRun) -> float | None:
    """Queueing delay: submission until every pod first had a node (admitted and placed)."""
    if run.first_bound is None:
        return None
    return run.first_bound - run.job.workload.creation_time


def completed(run: SimRun) -> bool:
    """Its pods completed: Succeeded by its own work, not deleted on the way."""
    return run.status == WorkloadState.SUCCEEDED and not run.deleted


def jct_of(run: SimRun) -> float | None:
    if run.status not in ENDED or run.ended is None or run.deleted:
        return None
    return run.ended - run.job.workload.creation_time


def group_stats(runs: Sequence[SimRun]) -> dict[str, Any]:
    waits = [w for r in runs if (w := wait_of(r)) is not None]
    jcts = [(j, r.job.duration_s) for r in runs if (j := jct_of(r)) is not None]
    return {
        "wait_s": quantiles(waits),
        "jct_s": quantiles([j for j, _ in jcts]),
        "slowdown": quantiles([j / d for j, d in jcts if d > 0]),
        "gpu_hours": _round(math.fsum(r.gpu_s for r in runs) / 3600),
        "lost_gpu_hours": _round(math.fsum(r.lost_gpu_s for r in runs) / 3600),
        "submitted": len(runs),
        "admitted": sum(1 for r in runs if r.first_admitted is not None),
        "finished": sum(1 for r in runs if completed(r)),
        "failed": sum(1 for r in runs if r.status == WorkloadState.FAILED),
        "preempted": sum(r.preempted for r in runs),
        "pending_at_end": sum(1 for r in runs if r.status == WorkloadState.PENDING),
    }


def variant_metrics(
    name: str,
    result: SimResult,
    config: ClusterConfig,
    *,
    description: str = "",
    bins: int = 240,
    entitlements: Mapping[str, float] | None = None,
    currency: str = "USD",
    queueing: str = "kueue",
) -> dict[str, Any]:
    """One variant's block of ``metrics.json``. With ``queueing`` ``fcfs`` (no Kueue) no workload
    reserves quota: quota held and time to quota reservation are left out (``null``), and the
    wait every variant reports alike is submission until the pods run (``wait_s``)."""
    kueue = queueing != "fcfs"
    runs = list(result.runs.values())
    by_team = _group(runs, lambda r: r.job.team)
    by_queue = _group(runs, lambda r: r.cluster_queue or "")
    recorder = result.recorder
    span = result.span_s
    overall = group_stats(runs)
    shares = entitlements or quota_shares(config, by_team)
    total_gpu_hours = overall["gpu_hours"]
    teams = []
    for team, members in sorted(by_team.items()):
        stats = group_stats(members)
        used = stats["gpu_hours"] / total_gpu_hours if total_gpu_hours else None
        queues = sorted({r.cluster_queue for r in members if r.cluster_queue})
        cost = _round(math.fsum(r.cost for r in members))
        teams.append(
            {"name": team, "cluster_queues": queues, **stats}
            | {"gpu_hours_share": _round(used), "quota_share": _round(shares.get(team)), "cost": cost}
        )
    queues_out = []
    for cq_name, ledger in sorted(recorder.queues.items()):
        stats = group_stats(by_queue.get(cq_name, []))
        queues_out.append(
            {"name": cq_name, "cohort": ledger.cohort, **stats}
            | {
                "nominal_gpus": _round(sum(ledger.nominal.values())),
                "borrowed_gpu_hours": _round(ledger.borrowed_s / 3600),
                "lent_gpu_hours": _round(ledger.lent_s / 3600),
            }
        )
    cohorts = [
        {
            "name": cohort,
            "borrowed_gpu_hours": _round(ledger.borrowed_s / 3600),
            "lent_gpu_hours": _round(ledger.lent_s / 3600),
        }
        for cohort, ledger in sorted(recorder.cohorts.items())
    ]
    total_cost = recorder.node_cost_rate.integral(span) / 3600 if span > 0 else 0.0
    used_cost = math.fsum(r.cost for r in runs)
    extra = {"checkpoints": checkpoint_metrics(runs)} if any(r.job.checkpoint_cost_s for r in runs) else {}
    if (deadlines := deadline_table(runs, span)) is not None:
        extra["deadlines"] = deadlines
    if any(r.reserved_at is not None or r.backfill_spans for r in runs):
        extra["backfill"] = backfill_metrics(runs)
    return {
        "name": name,
        "description": description,
        "queueing": queueing,
        "span_s": _round(span),
        "events": result.events,
        "scheduling_passes": result.passes,
        "scheduling_cycles": result.cycles,
        "gpus_total": _round(result.gpus_total),
        "workloads": _counts(runs),
        "overall": overall,
        "teams": teams,
        "cluster_queues": queues_out,
        "cohorts": cohorts,
        "cost": {
            "currency": currency,
            "priced": recorder.priced,
            "used": _round(used_cost),
            "idle": _round(max(0.0, total_cost - used_cost)),
            "total": _round(total_cost),
        },
        "fairness": {"jain": _round(jain(teams))},
        "quota_utilisation": quota_utilisation(recorder, span) if kueue else None,
        "classes": workload_classes(runs, quota=kueue),
        "series": series(recorder, span, bins),
        "wait_cdf": wait_cdfs(by_team, runs),
        "waits": wait_table(runs, span, workload_class),
        "windows": window_metrics(runs, recorder, span),
        **extra,
    }


def checkpoint_metrics(runs: Sequence[SimRun]) -> dict[str, Any]:
    """Checkpoints written, the GPU-hours their pauses took, and the GPU-hours evictions lost since
    the last checkpoint (only in metrics when some workload has a checkpoint cost)."""
    return {
        "written": sum(r.checkpoints for r in runs),
        "overhead_gpu_hours": _round(math.fsum(r.checkpoint_overhead_s * r.job.gpus for r in runs) / 3600),
        "lost_gpu_hours": _round(math.fsum(r.lost_gpu_s for r in runs) / 3600),
    }


def backfill_metrics(runs: Sequence[SimRun]) -> dict[str, Any]:
    """What backfill did, and the check of its promise: a head reserved to start at R that started
    later had no backfilled workload holding quota at R (``delayed_by_backfill`` counts those that did)."""
    spans = [span for r in runs for span in r.backfill_spans]
    heads = [r for r in runs if r.reserved_at is not None]
    late = [r for r in heads if r.first_admitted is None or r.first_admitted > r.reserved_at + 1e-6]  # type: ignore[operator]
    delayed = [
        r
        for r in late
        if any(start < r.reserved_at < end for start, end in spans)  # type: ignore[operator]
    ]
    overran = sum(1 for r in runs if r.backfill_spans and r.evictions and "backfilled with" in r.reason)
    return {
        "backfilled": len(spans),
        "backfilled_workloads": sum(1 for r in runs if r.backfill_spans),
        "evicted_at_declared_runtime": overran,
        "heads_reserved": len(heads),
        "heads_started_after_reservation": len(late),
        "delayed_by_backfill": len(delayed),
    }


def _counts(runs: Sequence[SimRun]) -> dict[str, int]:
    return {
        "submitted": len(runs),
        "admitted": sum(1 for r in runs if r.first_admitted is not None),
        "started": sum(1 for r in runs if r.first_started is not None),
        "finished": sum(1 for r in runs if completed(r)),
        "failed": sum(1 for r in runs if r.status == WorkloadState.FAILED),
        "running_at_end": sum(1 for r in runs if r.status.holds_quota),
        "pending_at_end": sum(1 for r in runs if r.status == WorkloadState.PENDING),
        "inadmissible": sum(1 for r in runs if r.status == WorkloadState.INADMISSIBLE),
        "deactivated": sum(1 for r in runs if r.status == WorkloadState.INACTIVE),
        "deleted": sum(1 for r in runs if r.deleted),
        "preemptions": sum(r.preempted for r in runs),
        "evictions": sum(r.evictions for r in runs),
    }


GPU_SERIES = frozenset({"gpu_allocation", "gpu_occupancy", "fragmentation"})


def series_mean(variant: Mapping[str, Any], key: str) -> float | None:
    """The time-average of a 0..1 series of a variant's metrics, each bin weighted by the simulated
    time it covers (the run may stop inside its last bin): the one mean the CLI, the report and
    the trade-off sentences show."""
    if variant.get("gpus_total") == 0 and key in GPU_SERIES:
        return None  # a share of no GPUs: undefined, not 0 %
    series = variant.get("series") or {}
    bin_s, span_s = finite_number(series.get("bin_s")) or 0.0, finite_number(variant.get("span_s"))
    pairs = zip(
        map(finite_number, series.get("t_s") or []), map(finite_number, series.get(key) or []), strict=False
    )
    end_s = math.inf if span_s is None else span_s
    weighted = [(max(0.0, min(bin_s, end_s - t)), v) for t, v in pairs if t is not None and v is not None]
    total = math.fsum(w for w, _ in weighted)
    return math.fsum(w * v for w, v in weighted) / total if total > 0 else None


def headline_mean(variant: Mapping[str, Any], key: str, part: str = "arrival") -> float | None:
    """A 0..1 mean as the headline shows it: over the arrival window (``part``: ``drain``, after the
    last arrival), from the ``windows`` block; metrics without one fall back to the whole span's
    :func:`series_mean`, ``None`` for the drain."""
    windows = variant.get("windows")
    if not isinstance(windows, Mapping):
        return series_mean(variant, key) if part == "arrival" else None
    if variant.get("gpus_total") == 0 and key in GPU_SERIES:
        return None
    return finite_number((windows.get(part) or {}).get(key))


def headline_cost(variant: Mapping[str, Any], key: str, part: str = "arrival") -> float | None:
    """``total``, ``used`` or ``idle`` cost over the arrival window (or the drain); the whole span's
    ``cost`` block where the metrics have no ``windows`` (``None`` for the drain)."""
    windows = variant.get("windows")
    if not isinstance(windows, Mapping):
        return finite_number((variant.get("cost") or {}).get(key)) if part == "arrival" else None
    return finite_number(((windows.get(part) or {}).get("cost") or {}).get(key))


def finite_number(value: Any) -> float | None:
    """A metrics field as a float, None for null, booleans, strings and non-finite numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def quota_utilisation(recorder: Recorder, span: float) -> dict[str, float | None]:
    """Per resource: usage held over time ÷ (nominal quota of every queue × span), as Kueue's
    scheduler performance checker computes ClusterQueue utilisation."""
    shares: dict[str, float | None] = {}
    for resource, nominal in sorted(recorder.quota_nominal.items()):
        used = recorder.quota_used.get(resource)
        if nominal <= 0 or span <= 0:
            shares[resource] = None
            continue
        shares[resource] = _round((used.integral(span) if used else 0.0) / (nominal * span))
    return shares


def workload_class(name: str) -> str:
    """A workload's class: its name without the trailing number (``small-00042`` is ``small``)."""
    stem, _, number = name.rpartition("-")
    return stem if stem and number.isdigit() else name


def workload_classes(runs: Sequence[SimRun], *, quota: bool = True) -> list[dict[str, Any]]:
    """Per class: the wait until the pods run (every variant alike) and, where workloads reserve
    quota, the time from submission to first quota reservation, as Kueue's performance checker
    reports it (``None`` without quotas: a first-come-first-served cluster reserves nothing)."""
    by_class = _group(runs, lambda r: workload_class(r.job.workload.name))
    return [
        {
            "name": name,
            "count": len(members),
            "wait_s": quantiles([w for r in members if (w := wait_of(r)) is not None]),
            "time_to_admission_s": quantiles(
                [
                    r.first_admitted - r.job.workload.creation_time
                    for r in members
                    if r.first_admitted is not None
                ]
            )
            if quota
            else None,
        }
        for name, members in sorted(by_class.items())
    ]


def quota_shares(config: ClusterConfig, by_team: Mapping[str, Sequence[SimRun]]) -> dict[str, float]:
    """Each team's share of the nominal GPU quota: its queues' nominal GPUs, split among the teams
    that submit to the same queue; equal shares when no queue has GPU quota."""
    teams_of: dict[str, set[str]] = {}
    for team, runs in by_team.items():
        for run in runs:
            if run.cluster_queue:
                teams_of.setdefault(run.cluster_queue, set()).add(team)
    entitled: dict[str, float] = dict.fromkeys(by_team, 0.0)
    for cq_name, teams in teams_of.items():
        nominal = sum(nominal_gpus(config.cluster_queues[cq_name].resource_groups).values())
        for team in teams:
            entitled[team] += nominal / len(teams)
    total = sum(entitled.values())
    if total <= 0:
        return {team: 1 / len(by_team) for team in by_team} if by_team else {}
    return {team: amount / total for team, amount in entitled.items()}


def jain(teams: Iterable[Mapping[str, Any]]) -> float | None:
    """Jain's index over teams of (share of GPU-hours ÷ quota share); 1 is perfectly fair."""
    ratios: list[float] = [
        float(t["gpu_hours_share"]) / float(t["quota_share"])
        for t in teams
        if t.get("quota_share") and t.get("gpu_hours_share") is not None
    ]
    if not ratios or not any(ratios):
        return None
    total = sum(ratios)
    return total**2 / (len(ratios) * sum(x * x for x in ratios))


def series(recorder: Recorder, span: float, bins: int) -> dict[str, Any]:
    if span <= 0:
        bins = 0
    capacity = binned(recorder.capacity, span, bins)
    allocated = binned(recorder.allocated, span, bins)
    free = [c - a for c, a in zip(capacity, allocated, strict=True)]
    width = span / bins if bins else 0.0
    return {
        "bin_s": _round(width),
        "t_s": [_round(i * width) for i in range(bins)],
        "gpu_capacity": _rounded(capacity),
        "gpu_allocation": _rounded(ratio(allocated, capacity)),
        "gpu_occupancy": _rounded(ratio(binned(recorder.occupied, span, bins), capacity)),
        "fragmentation": _rounded(ratio(binned(recorder.fragmented, span, bins), free)),
        "pending": _per_team(recorder.pending, span, bins),
        "running_gpus": _per_team(recorder.running, span, bins),
    }


def _per_team(per_team: Mapping[str, StepSeries], span: float, bins: int) -> dict[str, list[float]]:
    return {team: _rounded(binned(s, span, bins)) for team, s in sorted(per_team.items())}


def wait_cdfs(by_team: Mapping[str, Sequence[SimRun]], runs: Sequence[SimRun]) -> dict[str, Any]:
    cdfs = {"all": _cdf(runs)}
    for team, members in sorted(by_team.items()):
        cdfs[team] = _cdf(members)
    return cdfs


def _cdf(runs: Sequence[SimRun]) -> dict[str, list[float | None]]:
    waits = sorted(w for r in runs if (w := wait_of(r)) is not None)
    if not waits:
        return {"wait_s": [], "fraction": []}
    fractions = [i / (CDF_POINTS - 1) for i in range(CDF_POINTS)]
    return {
        "wait_s": [_round(percentile(waits, 100 * f)) for f in fractions],
        "fraction": [_round(f) for f in fractions],
    }


WORKLOAD_COLUMNS = (
    "namespace",
    "name",
    "queue",
    "cluster_queue",
    "priority",
    "pods",
    "gpus",
    "submit_s",
    "admitted_s",
    "started_s",
    "ended_s",
    "status",
    "wait_s",
    "jct_s",
    "duration_s",
    "preemptions",
    "evictions",
    "gpu_hours",
    "lost_gpu_hours",
    "cost",
    "reason",
)


def workloads_csv(runs: Iterable[SimRun], variant: str | None = None, end_s: float = math.inf) -> str:
    """One row per workload, in submission order; ``reason`` says why each that waited waited (its
    longest recorded cause, :func:`gpuq.sim.waits.cause_of`), then its last eviction or end;
    ``end_s`` is the end of the run (the wait of one still waiting)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*(["variant"] if variant is not None else []), *WORKLOAD_COLUMNS])
    for run in runs:
        workload = run.job.workload
        row = [
            workload.namespace,
            workload.name,
            workload.queue_name,
            run.cluster_queue or "",
            workload.priority,
            sum(ps.count for ps in workload.pod_sets),
            _num(run.job.gpus),
            _num(workload.creation_time),
            _num(run.first_admitted),
            _num(run.first_started),
            _num(run.ended),
            "Deleted" if run.deleted else run.status.value,
            _num(wait_of(run)),
            _num(jct_of(run)),
            _num(run.job.duration_s),
            run.preempted,
            run.evictions,
            _num(run.gpu_s / 3600),
            _num(run.lost_gpu_s / 3600),
            _num(run.cost),
            reason_text(run, end_s),
        ]
        writer.writerow(([variant] if variant is not None else []) + row)
    return buffer.getvalue()


def _group(runs: Iterable[SimRun], key: Any) -> dict[str, list[SimRun]]:
    groups: dict[str, list[SimRun]] = {}
    for run in runs:
        groups.setdefault(key(run), []).append(run)
    return groups


def _round(value: float | None) -> float | None:
    if value is None:
        return None
    rounded = round(value, 6)
    return 0.0 if rounded == 0 else rounded


def _rounded(values: Iterable[float]) -> list[float]:
    return [round(v, 6) + 0.0 for v in values]


def _num(value: float | None) -> str:
    if value is None:
        return ""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text
