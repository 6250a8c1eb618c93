"""Backfill with reservations (Slurm's backfill scheduler; Kueue has none).

A StrictFIFO ClusterQueue blocks behind its head: while the head cannot be admitted, nothing
later in the queue is, even what would fit and finish long before the head could start. With
``gpuq.dev/backfill: "true"`` on the queue:

1. **The reservation.** A head that is not admitted in a cycle (no fit, or no preemption
   candidates) gets the earliest time its quota would fit if the workloads holding quota in its
   cohort tree released it when their declared runtimes end (admission time plus
   ``gpuq.dev/expected-duration``, else ``maximumExecutionTimeSeconds``): the holders are
   released in order of their ends until a flavor assignment of the head fits. Holders with no
   declared runtime never release in this projection; when the head never fits, it has no
   reservation and nothing is backfilled.
2. **The backfill.** The workloads behind the head, in queue order (at most
   :data:`CANDIDATES`), whose declared runtime ends before the reservation
   (``now + runtime <= reservation``) are nominated as heads are; those that fit without
   preemption are admitted, each counted in the quota of the next.
3. **The promise kept.** A backfilled workload must release its quota by the reservation: its
   admission carries ``run_limit_s`` (its declared runtime), and the lifecycle evicts and requeues
   it at that limit. So no backfilled workload holds quota at a reservation: a head that starts
   later than its reservation was delayed by something else (an estimate of a holder that was
   exceeded, a higher-priority arrival).

A backfill is planned only for a head whose cohort tree saw no admission and no preemption
earlier in the same cycle (the projection reads the admitted workloads; the next cycle plans it
with those counted), so everything here is a function of the cycle's snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuq.core.flavors import FlavorAssigner, Mode
from gpuq.core.model import Workload
from gpuq.core.state import AdmittedWorkload, ClusterState

BACKFILL = "gpuq.dev/backfill"
"""The ClusterQueue annotation that turns backfill on (``"true"``)."""
CANDIDATES = 100
"""Workloads behind a blocked head tried per cycle (Slurm's ``bf_max_job_test`` bounds the same)."""


def declared_runtime_s(workload: Workload) -> float | None:
    """How long the workload holds quota once admitted, as declared: ``gpuq.dev/expected-duration``,
    else ``maximumExecutionTimeSeconds`` (net of what earlier admissions used), else None."""
    if workload.expected_runtime_s is not None:
        return workload.expected_runtime_s
    if workload.maximum_execution_s is not None:
        return float(max(0, workload.maximum_execution_s - workload.past_execution_s))
    return None


def release_time(holder: AdmittedWorkload) -> float | None:
    """When ``holder`` releases its quota by its declared runtime, or None when it declares none."""
    runtime = declared_runtime_s(holder.workload)
    return None if runtime is None else holder.quota_reserved_time + runtime


def reservation(state: ClusterState, head: Workload, cq_name: str, now: float) -> float | None:
    """The earliest time ``head`` fits the quota of ``cq_name`` as the holders of its cohort tree
    release theirs at their declared ends (step 1 of the module docstring), or None: it never does.

    Binary search over how many of the holders, earliest end first, are released: fitting is
    monotone in that count (usage only goes down). The state is unchanged afterwards."""
    root = state.node(cq_name).root()
    tree = [name for name in state.by_queue if state.node(name).root() is root]
    ends: list[tuple[float, str, AdmittedWorkload]] = []
    for name in tree:
        for key, holder in state.by_queue[name].items():
            end = release_time(holder)
            if end is not None:
                ends.append((max(end, now), key, holder))
    ends.sort(key=lambda item: (item[0], item[1]))
    holders = [item[2] for item in ends]

    def fits(count: int) -> bool:
        with state.without_usage(holders[:count]):
            return FlavorAssigner(state, head, cq_name).assign(lazy=True).mode == Mode.FIT

    if not holders or not fits(len(holders)):
        return None
    low, high = 0, len(holders)  # fits(high) holds; find the least count that fits
    while low < high:
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid + 1
    return now if low == 0 else ends[low - 1][0]


def candidates(queued: Sequence[Workload], now: float, reserved_at: float) -> list[tuple[Workload, float]]:
    """The workloads behind the head that would release their quota by ``reserved_at``, in queue
    order, each with its declared runtime (its run limit once backfilled)."""
    chosen = []
    for workload in queued:
        runtime = declared_runtime_s(workload)
        if runtime is not None and now + runtime <= reserved_at:
            chosen.append((workload, runtime))
    return chosen


RESERVED = f"reserved ({BACKFILL}): later workloads that end before it may be admitted first"
"""What a reserved head's Pending message adds (the time is :attr:`Scheduler.reservations`'s, so the
message stays the same while the reservation moves)."""
