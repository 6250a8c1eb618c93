"""The admission engine's side of placement: assume, bind, release, and who waits for nodes.

Kueue admits on quota; pods then wait for the kube-scheduler. With nodes, the
scheduler keeps both in step through this object:

1. while a cycle is planned, every workload about to be admitted is placed
   tentatively (:meth:`Binder.assume`), in processing order, so later entries
   see the nodes earlier ones took; a topology-aware pod set that cannot be
   placed stops the admission (as in Kueue's tas_flavorassigner.go). The tentative placements are forgotten
   when planning ends (:meth:`Binder.forget_assumed`). Each placement is computed once: the
   what-if of nomination, the assumed one and the bound one are the same answer when the
   nodes are in the same state (:attr:`Placer.capacity_version`), and computed anew otherwise;
2. applied admissions are bound for real (:meth:`Binder.bind`); pods that no
   node holds wait in :attr:`Binder.unplaced` with the kube-scheduler's message;
3. a finish or an eviction frees nodes (:meth:`Binder.release`): waiting pods
   are bound if they now fit, and queues whose head was held back by topology
   are woken, whatever cohort they are in (nodes are shared across cohorts).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from itertools import islice

from gpuq.core.model import PodSetAssignment, Workload
from gpuq.core.placement.engine import PlacementFailure, Placer, WorkloadPlacement
from gpuq.core.placement.whatif import TOPOLOGY_FAILED, TopologyWhatIf
from gpuq.core.queues import shape_of


class Binder:
    """Placement bookkeeping for one :class:`~gpuq.core.admission.Scheduler`."""

    def __init__(self, placer: Placer) -> None:
        self.placer = placer
        self.oracle = TopologyWhatIf(placer)
        self.unplaced: dict[str, PlacementFailure] = {}  # admitted, pods waiting for room on a node
        self._waiting: dict[tuple[object, ...], dict[str, None]] = {}  # unplaced keys by shape, in order
        self._shape_of: dict[str, tuple[object, ...]] = {}
        self._order: dict[str, int] = {}  # each unplaced key's rank in ``unplaced``'s order
        self._ranks = 0
        self.placed_waiting: list[str] = []  # keys that waited and were bound by a capacity change
        self.topology_blocked: set[str] = set()  # queues with a head no topology domain held
        self._assumed: list[str] = []
        self._version_before = 0  # the nodes' capacity version before the first assumed placement
        self.explain_failures = True  # a simulator that never shows the messages turns this off

    def assume(self, workload: Workload, pod_sets: Sequence[PodSetAssignment]) -> str:
        """Place tentatively; the reason when a topology-aware pod set cannot be placed, else ""."""
        before = self.placer.index.version
        outcome = self.placer.place(workload, pod_sets, explain=False)
        if isinstance(outcome, WorkloadPlacement):
            if not self._assumed:
                self._version_before = before
            self._assumed.append(workload.key)
            return ""
        if outcome.reason != TOPOLOGY_FAILED:
            return ""  # admitted on quota; its pods will wait for a node
        return f"couldn't assign flavors to pod set {outcome.pod_set}: {outcome.message}"

    def forget_assumed(self) -> None:
        """Release the tentative placements, latest first: the nodes are as the cycle found them, so
        their capacity version is too, and the placements bind reuses stay valid."""
        for key in reversed(self._assumed):
            self.placer.release(key)
        if self._assumed:
            self.placer.index.restore_version(self._version_before)
        self._assumed.clear()

    def bind(self, workload: Workload, pod_sets: Sequence[PodSetAssignment], retry: bool = False) -> None:
        """Bind every pod or record why not. The kube-scheduler's per-node summary reads every node,
        so it is written once, when the workload first fails, and only with ``explain_failures``."""
        explain = self.explain_failures and not (retry and workload.key in self.unplaced)
        outcome = self.placer.place(workload, pod_sets, explain=explain)
        if isinstance(outcome, PlacementFailure):
            if workload.key not in self.unplaced:
                self._wait(workload, pod_sets, outcome)
            elif explain:
                self.unplaced[workload.key] = outcome
        else:
            self.forget(workload.key)

    def _wait(
        self, workload: Workload, pod_sets: Sequence[PodSetAssignment], failure: PlacementFailure
    ) -> None:
        """``workload``'s pods wait for room, indexed by shape (its pod sets and their assignment)."""
        key = workload.key
        self.unplaced[key] = failure
        shape = (
            shape_of(workload),
            tuple((a.name, a.count, tuple(sorted(a.flavors.items())), a.topology) for a in pod_sets),
        )
        self._shape_of[key] = shape
        self._waiting.setdefault(shape, {})[key] = None
        self._ranks += 1
        self._order[key] = self._ranks

    def forget(self, key: str) -> None:
        """``key`` no longer waits for a node (bound, released, restored where it runs)."""
        if self.unplaced.pop(key, None) is None:
            return
        shape = self._shape_of.pop(key)
        del self._order[key]
        members = self._waiting[shape]
        del members[key]
        if not members:
            del self._waiting[shape]

    def release(
        self,
        key: str,
        admitted: Callable[[str], Workload | None],
        wake: Callable[[str], object],
    ) -> None:
        """Free ``key``'s nodes, wake topology-blocked queues, bind what now fits.

        ``admitted`` gives a still-admitted workload (with its admission) by key.
        """
        self.placer.release(key)
        self.forget(key)
        self.capacity_added(admitted, wake)

    def capacity_added(
        self,
        admitted: Callable[[str], Workload | None],
        wake: Callable[[str], object],
    ) -> None:
        """Nodes have more room (a release, a node added): wake topology-blocked queues, bind what fits."""
        for cq_name in sorted(self.topology_blocked):
            wake(cq_name)
        self.topology_blocked.clear()
        self._bind_waiting(admitted)

    def _bind_waiting(self, admitted: Callable[[str], Workload | None]) -> None:
        """Retry the waiting workloads in the order they began to wait; once one of a shape fails,
        the rest of that shape would too (binding only takes room), so they are not visited:
        the first of each shape is taken from a heap in that order, which costs per workload
        bound and per shape, not per workload waiting."""
        skipped: dict[tuple[object, ...], int] = {}  # per shape, leading members with no admission
        heap = [(self._order[key], key) for key in (next(iter(m)) for m in self._waiting.values())]
        heapq.heapify(heap)
        while heap:
            _, key = heapq.heappop(heap)
            shape = self._shape_of[key]
            workload = admitted(key)
            if workload is None or workload.admission is None:
                skipped[shape] = skipped.get(shape, 0) + 1
            else:
                self.bind(workload, workload.admission.pod_set_assignments, retry=True)
                if key in self.unplaced:
                    continue  # this shape does not fit any more
                self.placed_waiting.append(key)
            members = self._waiting.get(shape)
            following = next(islice(members, skipped.get(shape, 0), None), None) if members else None
            if following is not None:
                heapq.heappush(heap, (self._order[following], following))
