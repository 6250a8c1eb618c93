"""Running scheduling cycles until nothing changes, as ``gpuq admit`` does.

Between cycles, evictions complete (a preempted workload releases its quota
and returns to its queue), as they would on a cluster before the next cycle
sees them. The run ends when:

1. no ClusterQueue has a head to try (quiescent);
2. a cycle admits and evicts nothing and no head left the active heap
   (quiescent: the next cycle would decide the same);
3. the same admitted set, heads and decisions recur with a fixed period for
   three periods in a row: a preemption cycle (Kueue's preemptor flapping,
   which a real cluster only escapes through timing) that no further cycle
   resolves; or
4. ``max_cycles`` cycles ran.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuq.core.admission import Scheduler
from gpuq.core.decisions import Admit, CycleResult, Pending, Preempt

MAX_PERIOD = 16
REPEATS = 3


@dataclass(frozen=True, slots=True)
class AdmitRun:
    """The outcome of running cycles: the latest decision per workload."""

    cycles: int
    admitted: dict[str, Admit]
    preempted: dict[str, Preempt]
    pending: dict[str, Pending]
    quiescent: bool
    flapping_period: int | None = None  # set when the run stopped on a repeating preemption cycle


def run_cycles(scheduler: Scheduler, max_cycles: int | None = None, now: float = 0.0) -> AdmitRun:
    """Run cycles until nothing changes (or ``max_cycles``), completing evictions between cycles."""
    admitted: dict[str, Admit] = {}
    preempted: dict[str, Preempt] = {}
    detector = FlappingDetector()
    cycles, quiescent, period = 0, False, None
    while max_cycles is None or cycles < max_cycles:
        before = scheduler.active_count()
        result, entries = scheduler.plan_cycle(now)
        if not entries:
            quiescent = True
            break
        cycles += 1
        scheduler.apply(result, entries, now)
        for decision in result.admitted:
            admitted[decision.workload] = decision
        for eviction in result.preempted:
            preempted[eviction.workload] = eviction
            admitted.pop(eviction.workload, None)
            scheduler.evict(eviction.workload, now)
        if not result.changed and scheduler.active_count() == before:
            quiescent = True
            break
        period = detector.observe(result)
        if period is not None:
            break
    return AdmitRun(cycles, admitted, preempted, pending_reasons(scheduler), quiescent, period)


class FlappingDetector:
    """Finds a fixed period in the sequence of (admitted set, heads, decisions) fingerprints.

    The admitted set is tracked as an XOR of key hashes, updated by each
    cycle's decisions, so a cycle costs O(its decisions), not O(admitted).
    """

    def __init__(self) -> None:
        self._admitted = 0
        self._history: list[int] = []

    def observe(self, result: CycleResult) -> int | None:
        """Record one applied cycle; return the period once it repeated ``REPEATS`` times."""
        for decision in result.admitted:
            self._admitted ^= hash(decision.workload)
        for eviction in result.preempted:
            self._admitted ^= hash(eviction.workload)
        decisions = (
            tuple(a.workload for a in result.admitted),
            tuple(p.workload for p in result.preempted),
            result.considered,
        )
        self._history.append(hash((self._admitted, decisions)))
        del self._history[: -MAX_PERIOD * (REPEATS + 1)]
        return self._period()

    def _period(self) -> int | None:
        history = self._history
        for period in range(1, MAX_PERIOD + 1):
            span = period * REPEATS
            if len(history) < span + period:
                return None
            if all(history[-k] == history[-k - period] for k in range(1, span + 1)):
                return period
        return None


def pending_reasons(scheduler: Scheduler) -> dict[str, Pending]:
    """Why every workload that holds no (full) admission waits."""
    pending = {**scheduler.unqueued, **scheduler.awaiting_checks()}
    for queue in scheduler.queues.values():
        for workload in queue.pending():
            why = scheduler.why.get(workload.key)
            if why is None:
                if queue.name in scheduler.inactive:
                    why = Pending(workload.key, "Inadmissible", scheduler.inactive[queue.name], queue.name)
                else:
                    message = "waiting in ClusterQueue behind workloads ahead of it"
                    why = Pending(workload.key, "Pending", message, queue.name)
            pending[workload.key] = why
    return pending
