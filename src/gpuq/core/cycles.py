"""Running scheduling cycles until nothing changes, as ``gpuq admit`` does.

Between cycles, evictions complete (a preempted workload releases its quota
and returns to its queue), as they would on a cluster before the next cycle
sees them. One rule, :class:`ProgressWatch`, decides when a run of cycles ends
(``gpuq admit`` here; the simulator's scheduling passes may use the same):

1. no ClusterQueue has a head to try (``Quiet``);
2. a cycle admits and evicts nothing and no head left the active heap
   (``Quiet``: the next cycle would decide the same);
3. the same admitted set, heads and decisions recur with a fixed period for three
   periods in a row (``Periodic``): a preemption cycle (Kueue's preemptor
   flapping, which a real cluster only escapes through timing) that no
   further cycle resolves;
4. ``window`` cycles in a row make no progress (``NoProgress``): none of them
   tries a workload as a head for the first time, and none admits a workload
   for the first time; workloads only change hands, with no period or one
   too long to see (several cohorts flapping with different periods, for
   instance). :func:`progress_window` sizes the window; or
5. ``max_cycles`` cycles ran (``MaxCycles``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from gpuq.core.admission import Scheduler
from gpuq.core.decisions import Admit, CycleResult, Pending, Preempt
from gpuq.core.model import ClusterConfig, FungibilityPolicy, PreemptionPolicy

MAX_PERIOD = 16
REPEATS = 3
MIN_WINDOW = MAX_PERIOD * (REPEATS + 1)
"""The shortest no-progress window: a fixed period of up to ``MAX_PERIOD`` cycles is seen first."""
CYCLES_PER_QUEUE = 2

IN_CLUSTER_QUEUE = "InClusterQueue"
RECLAIM_REASONS = frozenset({"InCohortReclamation", "InCohortReclaimWhileBorrowing"})
FAIR_SHARING_REASON = "InCohortFairSharing"


class StopKind(StrEnum):
    """Why a run of cycles ended (the ``reason`` ``gpuq admit -o json`` reports)."""

    QUIET = "Quiet"
    PERIODIC = "Periodic"
    NO_PROGRESS = "NoProgress"
    MAX_CYCLES = "MaxCycles"


@dataclass(frozen=True, slots=True)
class Churn:
    """What happened in the cycles a :class:`StopReason` looks back on (the period or the window).

    ``preemptions``: (preemptor's ClusterQueue or "", victim's ClusterQueue, Kueue's reason), each
    once; ``borrowing``: ClusterQueues that admitted a workload borrowing.
    """

    workloads: tuple[str, ...] = ()
    preemptions: tuple[tuple[str, str, str], ...] = ()
    borrowing: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StopReason:
    """Why :class:`ProgressWatch` ended a run, after ``cycles`` cycles.

    ``Periodic``: ``period`` is the period in cycles. ``NoProgress``: ``window`` cycles
    since ``last_progress`` (the last cycle that tried or admitted a workload for the first
    time). For both, ``churn`` holds the workloads admitted or preempted in the last period
    (window), sorted, which keep changing hands; ``why`` (filled by :func:`run_cycles`, see
    :func:`explain_churn`) says, per cohort, which ClusterQueues take quota from each other and
    which policies let them.
    """

    kind: StopKind
    cycles: int
    period: int | None = None
    window: int | None = None
    last_progress: int = 0
    churn: Churn = field(default_factory=Churn)
    why: tuple[str, ...] = ()

    @property
    def churning(self) -> tuple[str, ...]:
        return self.churn.workloads

    @property
    def settled(self) -> bool:
        """Whether more cycles would decide nothing new (``Quiet``)."""
        return self.kind == StopKind.QUIET


def progress_window(cluster_queues: int) -> int:
    """Cycles without progress that end a run: ``max(64, 2 × ClusterQueues)``.

    A chain of preemptions that makes progress may pass through every ClusterQueue once,
    two cycles a step (the preemption, then the admission once the victims are gone),
    before it admits anything new; 64 cycles (``MAX_PERIOD × (REPEATS + 1)``) at least, so
    that a fixed period is always reported as such first.
    """
    return max(MIN_WINDOW, CYCLES_PER_QUEUE * cluster_queues)


class ProgressWatch:
    """The stop rule of a run of cycles, fed one :class:`CycleResult` at a time (pure, deterministic).

    A cycle makes *progress* when it tries a workload as a head that no earlier cycle of the
    run tried, or admits (reserves quota for) a workload that no earlier cycle admitted. Both
    happen at most once per workload, so a run that only moves workloads back and forth
    stops ``window`` cycles after its last progress, whatever its period. A run that converges
    keeps finding new heads and new admissions until it is quiet.

    Costs O(heads + decisions) per cycle; remembers each workload tried or admitted once,
    and the decisions of the last ``window`` cycles.
    """

    def __init__(self, window: int = MIN_WINDOW, max_cycles: int | None = None) -> None:
        self.window = window
        self.max_cycles = max_cycles
        self.cycles = 0
        self.last_progress = 0
        self._tried: set[str] = set()
        self._admitted: set[str] = set()
        self._detector = FlappingDetector()
        self._recent: deque[_CycleRecord] = deque(maxlen=max(window, MAX_PERIOD))

    def observe(self, result: CycleResult, moved: bool = False) -> StopReason | None:
        """Record one applied cycle (its evictions completed); why the run stops now, or None.

        ``moved``: the cycle changed the active queues without a decision (a head went to the
        inadmissible set), so the next cycle may decide differently. A result that considered no
        head is not a cycle: it ends the run (``Quiet``) and is not counted.
        """
        if not result.considered:
            return self._stop(StopKind.QUIET)
        self.cycles += 1
        progress = False
        tried = self._tried
        for key in result.considered:
            if key not in tried:
                tried.add(key)
                progress = True
        for decision in result.admitted:
            if decision.workload not in self._admitted:
                self._admitted.add(decision.workload)
                progress = True
        if progress:
            self.last_progress = self.cycles
        self._recent.append(_record(result))
        if not result.changed and not moved:
            return self._stop(StopKind.QUIET)
        period = self._detector.observe(result)
        if period is not None:
            return self._stop(StopKind.PERIODIC, period=period)
        if self.cycles - self.last_progress >= self.window:
            return self._stop(StopKind.NO_PROGRESS)
        if self.max_cycles is not None and self.cycles >= self.max_cycles:
            return self._stop(StopKind.MAX_CYCLES)
        return None

    def stop_at_limit(self) -> StopReason:
        """The reason for a run that reached ``max_cycles`` before any cycle said otherwise."""
        return self._stop(StopKind.MAX_CYCLES)

    def _stop(self, kind: StopKind, period: int | None = None) -> StopReason:
        if kind == StopKind.PERIODIC:
            assert period is not None
            churn = _churn(list(self._recent)[-period:])
            return StopReason(kind, self.cycles, period=period, last_progress=self.last_progress, churn=churn)
        if kind == StopKind.NO_PROGRESS:
            churn = _churn(list(self._recent)[-self.window :])
            return StopReason(
                kind, self.cycles, window=self.window, last_progress=self.last_progress, churn=churn
            )
        return StopReason(kind, self.cycles, last_progress=self.last_progress)


@dataclass(frozen=True, slots=True)
class _CycleRecord:
    admitted: tuple[tuple[str, str, bool], ...]  # (workload, cluster queue, borrowing)
    preempted: tuple[tuple[str, str, str, str], ...]  # (workload, preemptor's queue, victim's, reason)


def _record(result: CycleResult) -> _CycleRecord:
    admitted = tuple((a.workload, a.cluster_queue, a.borrowing) for a in result.admitted)
    if not result.preempted:
        return _CycleRecord(admitted, ())
    preemptors = {p.by for p in result.preempted}
    queue_of = {p.workload: p.cluster_queue or "" for p in result.pending if p.workload in preemptors}
    preempted = tuple(
        (p.workload, queue_of.get(p.by, ""), p.cluster_queue, p.reason) for p in result.preempted
    )
    return _CycleRecord(admitted, preempted)


def _churn(records: list[_CycleRecord]) -> Churn:
    workloads: set[str] = set()
    edges: set[tuple[str, str, str]] = set()
    borrowing: set[str] = set()
    for record in records:
        for key, cq, borrows in record.admitted:
            workloads.add(key)
            if borrows:
                borrowing.add(cq)
        for key, by_cq, victim_cq, reason in record.preempted:
            workloads.add(key)
            edges.add((by_cq, victim_cq, reason))
    return Churn(tuple(sorted(workloads)), tuple(sorted(edges)), tuple(sorted(borrowing)))


@dataclass(frozen=True, slots=True)
class AdmitRun:
    """The outcome of running cycles: the latest decision per workload, and why the run ended."""

    cycles: int
    admitted: dict[str, Admit]
    preempted: dict[str, Preempt]
    pending: dict[str, Pending]
    quiescent: bool
    flapping_period: int | None = None  # set when the run stopped on a repeating preemption cycle
    stop: StopReason | None = None


class _SnapshotRun:
    """The lifecycle's hooks for a snapshot: decisions kept, checks left Pending (no controller)."""

    def __init__(self) -> None:
        self.admitted: dict[str, Admit] = {}
        self.preempted: dict[str, Preempt] = {}

    def effect(self, effect: object) -> None:
        from gpuq.core.lifecycle.effects import Preempted, Reserved

        if isinstance(effect, Reserved):
            self.admitted[effect.key] = effect.admit
        elif isinstance(effect, Preempted) and effect.decision is not None:
            self.preempted[effect.key] = effect.decision
            self.admitted.pop(effect.key, None)

    def hold_checks(self, key: str, checks: tuple[str, ...], at: float) -> set[str]:
        return set(checks)

    def vet(self, result: CycleResult, at: float) -> CycleResult:
        return result


def run_cycles(
    scheduler: Scheduler, max_cycles: int | None = None, now: float = 0.0, window: int | None = None
) -> AdmitRun:
    """Run cycles until :class:`ProgressWatch` ends the run, completing evictions between cycles:
    the lifecycle's own pass (:meth:`~gpuq.core.lifecycle.machine.Lifecycle.settle`) over the snapshot.

    ``window``: the no-progress window (default :func:`progress_window` of the configuration's
    ClusterQueues).
    """
    from gpuq.core.lifecycle.machine import Lifecycle, LifecycleSettings  # the one cycle loop

    if window is None:
        window = progress_window(len(scheduler.config.cluster_queues))
    snapshot = _SnapshotRun()
    stop: StopReason | None = None
    if max_cycles is not None and max_cycles <= 0:
        stop = ProgressWatch(window, max_cycles).stop_at_limit()
    else:
        settings = LifecycleSettings(instant_stops=True, max_cycles_per_pass=max_cycles, window=window)
        life = Lifecycle(scheduler, snapshot, settings)
        life.take_over()
        life.settle(now)
        stop = life.last_stop
    assert stop is not None
    admitted, preempted = snapshot.admitted, snapshot.preempted
    if stop.kind in (StopKind.PERIODIC, StopKind.NO_PROGRESS):
        stop = replace(stop, why=explain_churn(stop.churn, scheduler.config))
    period = stop.period if stop.kind == StopKind.PERIODIC else None
    return AdmitRun(stop.cycles, admitted, preempted, pending_reasons(scheduler), stop.settled, period, stop)


def explain_churn(churn: Churn, config: ClusterConfig) -> tuple[str, ...]:
    """Per cohort tree, one sentence: the ClusterQueues whose workloads keep changing hands and
    the policy combination that lets them (from the preemption reasons seen)."""
    groups: dict[str, set[str]] = {}
    reasons: dict[str, dict[str, set[str]]] = {}
    for by_cq, victim_cq, reason in churn.preemptions:
        root = _root(config, victim_cq)
        groups.setdefault(root, set()).update(q for q in (by_cq, victim_cq) if q)
        reasons.setdefault(root, {}).setdefault(reason, set()).add(by_cq or victim_cq)
    borrowing: dict[str, set[str]] = {}
    for cq in churn.borrowing:
        borrowing.setdefault(_root(config, cq), set()).add(cq)
    sentences = []
    for root in sorted(groups, key=lambda r: (-len(groups[r]), r)):
        queues = sorted(groups[root] | borrowing.get(root, set()))
        cohort = config.cluster_queues[queues[0]].cohort if queues[0] in config.cluster_queues else None
        where = (f"ClusterQueues {', '.join(queues)}" if len(queues) > 1 else f"ClusterQueue {queues[0]}") + (
            f" in cohort {root}" if cohort else ""
        )
        sentences.append(f"{where}: {_policies(config, reasons[root], borrowing.get(root, set()), queues)}")
    return tuple(sentences)


def _policies(
    config: ClusterConfig, reasons: Mapping[str, set[str]], borrowers: set[str], queues: list[str]
) -> str:
    cqs = config.cluster_queues
    phrases = []
    if IN_CLUSTER_QUEUE in reasons:
        policies = sorted(
            {cqs[q].preemption.within_cluster_queue for q in reasons[IN_CLUSTER_QUEUE] if q in cqs}
        )
        phrases.append(f"withinClusterQueue {'/'.join(policies)}")
    reclaimers = set().union(*(reasons[r] for r in RECLAIM_REASONS if r in reasons))
    if reclaimers:
        policies = sorted({cqs[q].preemption.reclaim_within_cohort for q in reclaimers if q in cqs})
        phrases.append(f"reclaimWithinCohort {'/'.join(policies) or PreemptionPolicy.ANY}")
    if FAIR_SHARING_REASON in reasons:
        phrases.append("fair sharing")
    if borrowers:
        limited = sorted(q for q in borrowers if _has_borrowing_limit(config, q))
        unlimited = sorted(q for q in borrowers if q not in limited)
        detail = []
        if limited:
            detail.append(f"{', '.join(limited)} up to a borrowingLimit")
        if unlimited:
            detail.append(f"{', '.join(unlimited)} without a borrowingLimit")
        phrases.append(f"borrowing ({'; '.join(detail)})")
    text = phrases[0] + (" with " + " and ".join(phrases[1:]) if len(phrases) > 1 else "")
    if reclaimers:
        text += " lets each reclaim what the other borrowed"
    elif FAIR_SHARING_REASON in reasons:
        text += " lets each preempt the other to even out their shares"
    else:
        text += " lets each preempt the other's lower-priority workloads"
    orders = [[f.name for g in cqs[q].resource_groups for f in g.flavors] for q in queues if q in cqs]
    stop_search = any(
        cqs[q].flavor_fungibility.when_can_borrow == FungibilityPolicy.MAY_STOP_SEARCH
        for q in queues
        if q in cqs
    )
    if stop_search and _orders_conflict(orders):
        text += (
            "; they list their flavors in different orders and whenCanBorrow MayStopSearch stops a "
            "flavor search where it can borrow"
        )
    return text


def _orders_conflict(orders: list[list[str]]) -> bool:
    """Whether two queues list two flavors they share in opposite orders."""
    for i, first in enumerate(orders):
        for second in orders[i + 1 :]:
            common = [f for f in first if f in second]
            if common != [f for f in second if f in common]:
                return True
    return False


def _has_borrowing_limit(config: ClusterConfig, cq_name: str) -> bool:
    cq = config.cluster_queues.get(cq_name)
    return cq is not None and any(
        q.borrowing_limit is not None
        for g in cq.resource_groups
        for f in g.flavors
        for q in f.resources.values()
    )


def _root(config: ClusterConfig, cq_name: str) -> str:
    """The root cohort of a ClusterQueue (the queue itself when it has no cohort)."""
    cq = config.cluster_queues.get(cq_name)
    name = cq.cohort if cq is not None and cq.cohort else None
    if name is None:
        return cq_name
    seen = {name}
    while (cohort := config.cohorts.get(name)) is not None and cohort.parent and cohort.parent not in seen:
        name = cohort.parent
        seen.add(name)
    return name


class FlappingDetector:
    """Finds a fixed period in the sequence of (admitted set, heads, decisions) fingerprints.

    The admitted set is tracked as an XOR of key hashes, updated by each
    cycle's decisions, so a cycle costs O(its decisions), not O(admitted).
    :class:`ProgressWatch` uses it for its ``Periodic`` stop.
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
