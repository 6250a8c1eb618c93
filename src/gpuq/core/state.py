"""The engine's cache: quota tree plus the workloads that hold quota, updated incrementally.

Shells apply decisions to a :class:`ClusterState` (``reserve`` on admission,
``release`` on eviction or completion); a scheduling cycle reads it and
performs only reversible what-ifs (:meth:`ClusterState.simulate_removal`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gpuq.core.model import Admission, ClusterConfig, ClusterQueue, Workload
from gpuq.core.quota import FlavorResource, QuotaNode, QuotaTree
from gpuq.core.usage_history import QueueHistory

OrderEntry = tuple[int, float, str, str]
"""(priority, -quota reservation time, uid or key, key): sorts as Kueue orders preemption candidates."""


@dataclass(frozen=True, slots=True)
class AdmittedWorkload:
    """A workload holding quota in ``cluster_queue``; ``usage`` is its total per (flavor, resource)."""

    workload: Workload
    cluster_queue: str
    usage: Mapping[FlavorResource, int]
    quota_reserved_time: float
    frs: frozenset[FlavorResource] = field(default=frozenset(), compare=False)
    key: str = field(init=False, compare=False, repr=False)
    order: OrderEntry = field(init=False, compare=False, repr=False)
    """Where it sorts among preemption candidates (:func:`_order_entry`), worked out once."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "frs", frozenset(fr for fr, amount in self.usage.items() if amount))
        key = self.workload.key
        object.__setattr__(self, "key", key)
        order = (self.workload.priority, -self.quota_reserved_time, self.workload.uid or key, key)
        object.__setattr__(self, "order", order)

    @property
    def priority(self) -> int:
        return self.workload.priority

    def lost_work(self, now: float, frs: Set[FlavorResource]) -> float:
        """What evicting it at ``now`` throws away: the time since its last checkpoint (since its
        reservation without checkpoints) times its usage of ``frs``."""
        ran = max(0.0, now - self.quota_reserved_time)
        interval = self.workload.checkpoint_interval_s
        since = ran % interval if interval > 0 else ran
        return since * sum(self.usage.get(fr, 0) for fr in frs)

    def loss_rate(self, now: float, frs: Set[FlavorResource]) -> float:
        """:meth:`lost_work` per unit of ``frs`` it frees: the seconds since its last checkpoint."""
        held = sum(self.usage.get(fr, 0) for fr in frs)
        return self.lost_work(now, frs) / held if held else 0.0

    def protected_at(self, now: float) -> bool:
        """Within its ``min_runtime_s`` at ``now``: no preemption may take it."""
        return now < self.quota_reserved_time + self.workload.min_runtime_s


def admission_usage(admission: Admission) -> dict[FlavorResource, int]:
    """Total usage per (flavor, resource) recorded in a workload's admission."""
    usage: dict[FlavorResource, int] = {}
    for assignment in admission.pod_set_assignments:
        for resource, amount in assignment.resource_usage.items():
            flavor = assignment.flavors.get(resource)
            if flavor is None or not amount:
                continue
            fr = (flavor, resource)
            usage[fr] = usage.get(fr, 0) + amount
    return usage


class ClusterState:
    """Quota usage and admitted workloads for one configuration."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.tree = QuotaTree(config)
        self.admitted: dict[str, AdmittedWorkload] = {}
        self.by_queue: dict[str, dict[str, AdmittedWorkload]] = {name: {} for name in config.cluster_queues}
        self.usage_by_priority: dict[str, dict[FlavorResource, dict[int, int]]] = {
            name: {} for name in config.cluster_queues
        }
        """Per queue and (flavor, resource), usage summed by priority: bounds what preemption can free."""
        self.sizes: dict[str, dict[FlavorResource, dict[int, int]]] = {
            name: {} for name in config.cluster_queues
        }
        """Per queue and (flavor, resource), how many admitted workloads use each amount."""
        self._ordered: dict[tuple[str, FlavorResource], list[OrderEntry]] = {}
        self.versions: dict[tuple[QuotaNode, str], int] = {}  # (root, flavor): see version()
        self._flavors: dict[str, tuple[str, ...]] = {}
        self._topology: dict[str, bool] = {}
        self.oracle_answers: dict[tuple[object, ...], tuple[int, Any]] = {}
        """The preemption oracle's answers by question, with the flavor's version when asked."""
        self.history: dict[str, QueueHistory] = {}
        """Decayed usage of the ClusterQueues whose root cohort has a usage half-life."""
        for root in self.tree.roots():
            half_life = self.half_life(root)
            if half_life is not None:
                for cq in self.tree.queues_in_tree(root):
                    self.history[cq.name] = QueueHistory(half_life)
        self.now = 0.0
        """The time of the cycle being planned (preemption protection, ``min_runtime_s``)."""
        self.rank_by_loss = False
        self.fair_usage: Callable[[str], Callable[[Workload], float] | None] = _no_fair_usage
        """ClusterQueue -> its LocalQueues' Admission Fair Sharing usage of a workload, or None
        where the queue does not order by usage (preemption candidates follow it, set by the
        scheduler)."""
        """Rank preemption candidates of one priority by the work each loses per unit it frees
        (while :func:`gpuq.core.fair_preemption.preemption_targets` tries that order)."""
        self.evaluations = 0
        """Nominations worked out (not reused): what the heads of the cycles cost."""
        self.nominations: dict[str, tuple[object, ...]] = {}
        """The latest nomination of each head, for :func:`gpuq.core.nomination.nominate` to reuse
        while nothing it reads changed (:meth:`version`)."""

    def _index(self, workload: AdmittedWorkload, sign: int) -> None:
        per_fr = self.usage_by_priority.setdefault(workload.cluster_queue, {})
        sizes = self.sizes.setdefault(workload.cluster_queue, {})
        for fr, amount in workload.usage.items():
            _bump(per_fr.setdefault(fr, {}), workload.priority, sign * amount)
            _bump(sizes.setdefault(fr, {}), amount, sign)

    def largest(self, cq_name: str, fr: FlavorResource) -> int:
        """The largest usage of one admitted workload of ``cq_name`` in ``fr``."""
        return max(self.sizes.get(cq_name, {}).get(fr, {}), default=0)

    def ordered(self, cq_name: str, fr: FlavorResource) -> list[OrderEntry]:
        """The queue's admitted workloads that use ``fr``, in the order of Kueue's preemption
        candidates (pkg/scheduler/preemption/common/ordering.go): (priority, newest reservation,
        uid) ascending, as ``(priority, -reserved time, uid, key)``."""
        return self._ordered.get((cq_name, fr), [])

    def _hide(self, workload: AdmittedWorkload) -> None:
        self.tree.remove(workload.cluster_queue, workload.usage)
        self._changed(workload)
        del self.admitted[workload.key]
        del self.by_queue[workload.cluster_queue][workload.key]
        self._index(workload, -1)
        entry = _order_entry(workload)
        for fr in workload.frs:
            entries = self._ordered[(workload.cluster_queue, fr)]
            del entries[bisect.bisect_left(entries, entry)]

    def _show(self, workload: AdmittedWorkload) -> None:
        self._changed(workload)
        self.admitted[workload.key] = workload
        self.by_queue.setdefault(workload.cluster_queue, {})[workload.key] = workload
        self.tree.add(workload.cluster_queue, workload.usage)
        self._index(workload, 1)
        entry = _order_entry(workload)
        for fr in workload.frs:
            bisect.insort(self._ordered.setdefault((workload.cluster_queue, fr), []), entry)

    def _changed(self, workload: AdmittedWorkload) -> None:
        root = self.tree.cluster_queues[workload.cluster_queue].root()
        versions = self.versions
        for flavor in {flavor for flavor, _ in workload.frs}:
            key = (root, flavor)
            versions[key] = versions.get(key, 0) + 1

    def unprotect(self, key: str) -> None:
        """``key``'s minimum runtime ended: answers worked out while it could not be a victim are stale."""
        workload = self.admitted.get(key)
        if workload is not None:
            self._changed(workload)

    def version(self, cq_name: str) -> tuple[int, ...]:
        """What changed in ``cq_name``'s cohort tree in the flavors it lists: one counter per
        flavor, bumped whenever a workload using that flavor starts or stops holding quota there."""
        flavors = self._flavors.get(cq_name)
        if flavors is None:
            groups = self.config.cluster_queues[cq_name].resource_groups
            flavors = self._flavors[cq_name] = tuple(dict.fromkeys(f.name for g in groups for f in g.flavors))
        root = self.tree.cluster_queues[cq_name].root()
        versions = self.versions
        return tuple(versions.get((root, flavor), 0) for flavor in flavors)

    def lists_topology(self, cq_name: str) -> bool:
        """Whether ``cq_name`` lists a flavor with a topology: only then can a placement (the
        nodes) change what a nomination there decides (a flavor without one is placed on quota)."""
        lists = self._topology.get(cq_name)
        if lists is None:
            flavors = self.config.flavors
            groups = self.config.cluster_queues[cq_name].resource_groups
            lists = self._topology[cq_name] = any(
                (flavor := flavors.get(f.name)) is not None and bool(flavor.topology_name)
                for g in groups
                for f in g.flavors
            )
        return lists

    def cluster_queue(self, name: str) -> ClusterQueue:
        return self.config.cluster_queues[name]

    def node(self, cq_name: str) -> QuotaNode:
        return self.tree.cluster_queues[cq_name]

    def reserve(self, admitted: AdmittedWorkload, at: float | None = None) -> None:
        """Record that a workload holds quota (admission or quota reservation) from ``at``."""
        if admitted.key in self.admitted:
            raise ValueError(f"workload {admitted.key} already holds quota")
        self._show(admitted)
        self._record(admitted, 1, admitted.quota_reserved_time if at is None else at)

    def release(self, key: str, at: float | None = None) -> AdmittedWorkload:
        """Release a workload's quota (finished, evicted or deleted) at ``at``."""
        admitted = self.admitted[key]
        self._hide(admitted)
        self._record(admitted, -1, self.now if at is None else at)
        return admitted

    def _record(self, admitted: AdmittedWorkload, sign: int, at: float) -> None:
        history = self.history.get(admitted.cluster_queue)
        if history is not None:
            history.change(admitted.usage, sign, at)

    def half_life(self, root: QuotaNode) -> float | None:
        """The ``gpuq.dev/usage-half-life`` of a root cohort, None where its tree has none."""
        cohort = self.config.cohorts.get(root.name)
        return cohort.usage_half_life_s if cohort is not None and root.parent is None else None

    @contextmanager
    def simulate_removal(self, workloads: Iterable[AdmittedWorkload]) -> Iterator[None]:
        """Temporarily remove ``workloads`` (usage and membership); restored on exit, whatever happens."""
        removed = [w for w in workloads if self.admitted.get(w.key) is w]
        for w in removed:
            self._hide(w)
        try:
            yield
        finally:
            for w in reversed(removed):
                self._show(w)

    @contextmanager
    def without_usage(self, workloads: Iterable[AdmittedWorkload]) -> Iterator[None]:
        """Temporarily take the usage of ``workloads`` out of the quota tree only.

        Cheaper than :meth:`simulate_removal` for fit and share questions:
        usage is summed per queue first (tree updates are additive), and the
        workloads stay listed as admitted.
        """
        per_queue: dict[str, dict[FlavorResource, int]] = {}
        for w in workloads:
            total = per_queue.setdefault(w.cluster_queue, {})
            for fr, amount in w.usage.items():
                total[fr] = total.get(fr, 0) + amount
        for cq_name, usage in per_queue.items():
            self.tree.remove(cq_name, usage)
        try:
            yield
        finally:
            for cq_name, usage in per_queue.items():
                self.tree.add(cq_name, usage)

    @contextmanager
    def simulate_usage(self, cq_name: str, usage: Mapping[FlavorResource, int]) -> Iterator[None]:
        """Temporarily add usage to a queue; removed on exit."""
        self.tree.add(cq_name, usage)
        try:
            yield
        finally:
            self.tree.remove(cq_name, usage)


def _order_entry(workload: AdmittedWorkload) -> OrderEntry:
    return workload.order


def _bump(counter: dict[int, int], key: int, delta: int) -> None:
    total = counter.get(key, 0) + delta
    if total:
        counter[key] = total
    else:
        counter.pop(key, None)


def _no_fair_usage(cluster_queue: str) -> Callable[[Workload], float] | None:
    return None
