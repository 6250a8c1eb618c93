"""A forecast snapshot from manifests: what-if questions on a file (``gpuq admit --eta``).

A snapshot file is ordinary manifests: the Kueue objects and nodes, and Workloads (or
Jobs...) where those holding quota carry ``status.admission`` and its conditions, as
``kubectl get workloads -o yaml`` prints them. A workload with an admission runs
since its ``PodsReady`` condition (else since its quota reservation); the others wait.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuq.api import kueue
from gpuq.api.loader import LoadResult
from gpuq.api.workload_gates import expected_duration
from gpuq.core.model import Workload
from gpuq.core.nodes import gpu_demand
from gpuq.snapshot.cluster import PendingWorkload, RunningWorkload, Snapshot
from gpuq.snapshot.runtimes import EXPECTED_DURATION, USER_LABEL, Profile

SUBMITTED_BY = "gpuq.dev/submitted-by"


@dataclass(frozen=True, slots=True)
class Declared:
    """What a workload's manifest says about its run; ``problem`` when the annotation is unreadable."""

    user: str = ""
    expected_s: float | None = None
    deadline_s: float | None = None
    problem: str = ""


def declared(model: kueue.Workload, deadline_s: float | None = None) -> Declared:
    """The user, the expected duration and the hard deadline a Workload (or its source) declares.

    ``deadline_s``: the source's own limit (a Job's ``activeDeadlineSeconds``), which
    Kueue's ``maximumExecutionTimeSeconds`` tightens when both are set.
    """
    meta = model.metadata
    user = meta.labels.get(USER_LABEL) or meta.annotations.get(SUBMITTED_BY, "")
    limits = [d for d in (deadline_s, model.spec.maximum_execution_time_seconds) if d is not None]
    deadline = float(min(limits)) if limits else None
    expected, problem = expected_duration(meta.annotations.get(EXPECTED_DURATION))
    return Declared(user, expected, deadline, problem)


def profile_of(workload: Workload, facts: Declared) -> Profile:
    return Profile(
        workload.namespace,
        workload.queue_name,
        facts.user,
        total_gpus(workload),
        facts.expected_s,
        facts.deadline_s,
    )


def total_gpus(workload: Workload) -> float:
    """GPUs of the whole workload: pods × each pod's GPUs (a share of one counts as its fraction)."""
    return sum(ps.count * gpu_demand(ps.requests).total_milli / 1000 for ps in workload.pod_sets)


def snapshot_of(
    result: LoadResult,
    now: float,
    *,
    policy: str = "binpack",
) -> tuple[Snapshot, dict[str, str]]:
    """The snapshot the loaded manifests describe at ``now``, and per workload any declaration problem."""
    assert result.config is not None
    models = {
        f"{m.model.metadata.namespace or 'default'}/{m.model.metadata.name}": m.model
        for m in result.manifests
        if isinstance(m.model, kueue.Workload)
    }
    running: list[RunningWorkload] = []
    pending: list[PendingWorkload] = []
    problems: dict[str, str] = {}
    for workload in result.workloads:
        model = models.get(workload.key)
        facts = declared(model) if model is not None else Declared()
        if facts.problem:
            problems[workload.key] = facts.problem
        profile = profile_of(workload, facts)
        if workload.admission is not None:
            started = _pods_ready(model) if model is not None else None
            started = started if started is not None else workload.quota_reserved_time
            running.append(RunningWorkload(workload, profile, started if started is not None else now))
        else:
            pending.append(PendingWorkload(workload, profile))
    # Every workload is a recent submission too, for forecasts that expect the past's arrivals again.
    recent = tuple(PendingWorkload(r.workload, r.profile) for r in running) + tuple(pending)
    snapshot = Snapshot(
        now, result.config, result.nodes, tuple(running), tuple(pending), recent=recent, policy=policy
    )
    return snapshot, problems


def _pods_ready(model: kueue.Workload) -> float | None:
    return next(
        (
            c.last_transition_time
            for c in model.status.conditions
            if c.type == "PodsReady" and c.status == "True"
        ),
        None,
    )
