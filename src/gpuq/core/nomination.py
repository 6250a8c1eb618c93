"""Nomination: what a head would take if the cycle processed it now.

Kueue: ``nominate`` and ``getInitialAssignments`` in pkg/scheduler/scheduler.go; partial admission
in pkg/scheduler/flavorassigner/podset_reducer.go (keps/420-partial-admission).

1. Heads that cannot be nominated are set aside: a namespace the ClusterQueue
   does not select, admission checks in Retry or Rejected, a requeue backoff
   still running.
2. Flavors are assigned at full size; a fit is taken as it is.
3. Otherwise, if preemption could make room, its targets are computed; a
   non-empty set is taken.
4. Otherwise, with partial admission, the largest reduced counts that fit or
   can preempt are searched for (binary search over Kueue's reduction steps).

With nodes (a :class:`TopologyOracle`), a quota fit whose topology-aware pod
sets cannot be placed is downgraded, as in Kueue's tas_flavorassigner.go: to
NoFit when they would not fit even with every topology-aware workload gone,
otherwise to Preempt, with targets whose eviction makes both the quota and
the placement fit.

Everything is computed against the state as the cycle found it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpuq.core.fair_preemption import preemption_targets
from gpuq.core.flavors import Assignment, FlavorAssigner, Mode
from gpuq.core.model import CheckState, PodSetAssignment, Workload
from gpuq.core.preemption import Preemptor, Target
from gpuq.core.queues import RequeueReason
from gpuq.core.state import ClusterState

ScanProgress = Sequence[dict[str, int]]


class TopologyOracle(Protocol):
    """What nomination asks of the nodes (the :class:`~gpuq.core.placement.engine.Placer`)."""

    def uses_topology(
        self, workload: Workload, pod_sets: Sequence[PodSetAssignment] | None = None
    ) -> bool: ...

    def topology_failure(
        self, workload: Workload, pod_sets: Sequence[PodSetAssignment], without: Collection[str] = ()
    ) -> str | None:
        """Why the pod sets could not be placed with ``without`` evicted, or None when they could."""
        ...

    def topology_failure_when_empty(
        self, workload: Workload, pod_sets: Sequence[PodSetAssignment]
    ) -> str | None:
        """Why the pod sets could not be placed even with every topology-aware workload gone."""
        ...

    def capacity_version(self) -> int:
        """Names the nodes' free state: equal versions, equal answers to every question above."""
        ...


@dataclass(slots=True)
class Entry:
    """A nominated head: its assignment, targets and outcome in this cycle."""

    workload: Workload
    cluster_queue: str
    assignment: Assignment | None = None
    targets: list[Target] = field(default_factory=list)
    inadmissible: str = ""
    requeue: RequeueReason = RequeueReason.NO_FIT
    clear_scan: bool = False  # skipped, overlapping and preempting entries retry every flavor
    topology_blocked: bool = False  # the quota fit but the nodes did not
    is_preemptor: bool = False  # waiting for the evictions it issued (Kueue's Head.IsPreemptor)
    key: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.key = self.workload.key


def nominate(
    state: ClusterState,
    entry: Entry,
    now: float,
    resume: ScanProgress | None = None,
    topology: TopologyOracle | None = None,
) -> None:
    """Kueue's nominate: set ``entry.inadmissible``, or its assignment and targets."""
    workload = entry.workload
    cq = state.config.cluster_queues[entry.cluster_queue]
    labels = state.config.labels_of_namespace(workload.namespace)
    if workload.inadmissible:
        entry.inadmissible = workload.inadmissible
        entry.requeue = RequeueReason.INACTIVE
        return
    if cq.namespace_selector is None or not cq.namespace_selector.matches(labels):
        entry.inadmissible = "Workload namespace doesn't match ClusterQueue selector"
        entry.requeue = RequeueReason.NAMESPACE_MISMATCH
        return
    bad = sorted(
        n for n, s in workload.admission_checks.items() if s in (CheckState.RETRY, CheckState.REJECTED)
    )
    if bad:
        entry.inadmissible = f"admission checks {', '.join(bad)} are in Retry or Rejected"
        entry.requeue = RequeueReason.INACTIVE
        return
    if workload.requeue_at is not None and workload.requeue_at > now:
        entry.inadmissible = f"waiting for requeue backoff until {workload.requeue_at:.0f}"
        entry.requeue = RequeueReason.INACTIVE
        return
    timeless = not state.cluster_queue(entry.cluster_queue).least_lost_work  # lost work grows with time
    if topology is not None and not state.lists_topology(entry.cluster_queue):
        topology = None  # no flavor it can get is topology-aware: the nodes cannot change the outcome
    if not state.config.scheduler.fair_sharing.enable and timeless:
        _reused_or_initial_assignment(state, entry, resume, topology)
    else:
        state.evaluations += 1
        _initial_assignment(state, entry, resume, topology)


def _reused_or_initial_assignment(
    state: ClusterState, entry: Entry, resume: ScanProgress | None, topology: TopologyOracle | None
) -> None:
    """:func:`_initial_assignment`, or the very same outcome as the head's previous nomination
    when nothing it reads has changed since: the same workload object in the same ClusterQueue,
    resuming its flavor scan at the same place, no workload admitted or released in its cohort
    tree in a flavor the queue lists (:meth:`ClusterState.version`) and, with a topology oracle,
    the nodes in the same free state (``capacity_version``). Flavor assignment and preemption read
    only those flavors of that tree (quota, usage, the workloads holding quota there and their
    order), and a topology check only the nodes' free state and where those workloads run, so
    they would come out equal: a head that cannot fit (a StrictFIFO head blocking its queue, one
    whose scan resumes) costs a lookup until something it needs frees. (Not with fair sharing,
    whose shares span every flavor.)"""
    version = state.version(entry.cluster_queue)
    nodes = topology.capacity_version() if topology is not None else None
    scan = None if resume is None else tuple(tuple(tried.items()) for tried in resume)
    previous = state.nominations.get(entry.key)
    if (
        previous is not None
        and previous[0] is entry.workload
        and previous[1] == entry.cluster_queue
        and previous[2] == version
        and previous[3] == scan
        and previous[4] == nodes
    ):
        assignment, targets = previous[5], previous[6]
        assert isinstance(assignment, Assignment) and isinstance(targets, tuple)
        entry.assignment, entry.targets = assignment, list(targets)
        entry.topology_blocked = previous[7] is True
        return
    state.evaluations += 1
    _initial_assignment(state, entry, resume, topology)
    state.nominations[entry.key] = (
        entry.workload,
        entry.cluster_queue,
        version,
        scan,
        nodes,
        entry.assignment,
        tuple(entry.targets),
        entry.topology_blocked,
    )


def _initial_assignment(
    state: ClusterState, entry: Entry, resume: ScanProgress | None, topology: TopologyOracle | None
) -> None:
    """getInitialAssignments: full size first; shrink only if neither fit nor preemption works."""
    assigner = FlavorAssigner(state, entry.workload, entry.cluster_queue)
    full = assigner.assign(resume=resume, lazy=topology is None)
    entry.assignment = full
    if full.mode == Mode.FIT and topology is not None and _topology_downgrade(state, entry, full, topology):
        return
    if full.mode == Mode.FIT:
        return
    if full.mode in (Mode.PREEMPT, Mode.RECLAIM):
        entry.targets = preemption_targets_for(state, entry.workload, entry.cluster_queue, full)
        if entry.targets:
            return
    if state.config.scheduler.partial_admission:
        reduced = _partial(state, entry, assigner, resume, lazy=topology is None)
        if reduced is not None:
            entry.assignment, entry.targets = reduced


def _topology_downgrade(
    state: ClusterState, entry: Entry, full: Assignment, topology: TopologyOracle
) -> bool:
    """The topology check of a quota fit; True when the outcome is settled (placed, no fit, or
    targets found)."""
    workload = entry.workload
    pod_sets = full.pod_set_assignments()
    if not topology.uses_topology(workload, pod_sets):
        return False
    why = topology.topology_failure(workload, pod_sets)
    if why is None:
        return True
    entry.topology_blocked = True
    if topology.topology_failure_when_empty(workload, pod_sets) is not None:
        full.mode = Mode.NO_FIT
        full.reasons.append(why)
        return True
    full.mode = Mode.PREEMPT
    full.frs_need_preemption = set(full.usage)
    full.reasons.append(why)

    def placed(removed: frozenset[str]) -> bool:
        return topology.topology_failure(workload, pod_sets, removed) is None

    needed = frozenset(full.frs_need_preemption)
    preemptor = Preemptor(workload, entry.cluster_queue, dict(full.usage), needed, placed)
    entry.targets = preemption_targets(state, preemptor)
    return True


def _partial(
    state: ClusterState,
    entry: Entry,
    assigner: FlavorAssigner,
    resume: ScanProgress | None,
    lazy: bool = False,
) -> tuple[Assignment, list[Target]] | None:
    """podset_reducer.go: binary search for the largest counts (smallest step) that fit or can preempt."""
    pod_sets = entry.workload.pod_sets
    deltas = [ps.count - (ps.min_count if ps.min_count is not None else ps.count) for ps in pod_sets]
    total = sum(deltas)
    if total <= 0:
        return None

    def attempt(step: int) -> tuple[Assignment, list[Target]] | None:
        counts = {ps.name: ps.count - (d * step) // total for ps, d in zip(pod_sets, deltas, strict=True)}
        assignment = assigner.assign(counts, resume, lazy=lazy)
        if assignment.mode == Mode.FIT:
            return assignment, []
        if assignment.mode in (Mode.PREEMPT, Mode.RECLAIM):
            targets = preemption_targets_for(state, entry.workload, entry.cluster_queue, assignment)
            if targets:
                return assignment, targets
        return None

    low, high, best = 1, total, None
    while low <= high:
        mid = (low + high) // 2
        found = attempt(mid)
        if found is not None:
            best, high = found, mid - 1
        else:
            low = mid + 1
    return best


def preemption_targets_for(
    state: ClusterState, workload: Workload, cq_name: str, assignment: Assignment
) -> list[Target]:
    """The victims that would let ``assignment`` be admitted (classical or fair, per the config)."""
    needed = frozenset(assignment.frs_need_preemption)
    return preemption_targets(state, Preemptor(workload, cq_name, dict(assignment.usage), needed))
