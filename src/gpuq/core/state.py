"""The engine's cache: quota tree plus the workloads that hold quota, updated incrementally.

Shells apply decisions to a :class:`ClusterState` (``reserve`` on admission,
``release`` on eviction or completion); a scheduling cycle reads it and
performs only reversible what-ifs (:meth:`ClusterState.simulate_removal`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from gpuq.core.model import Admission, ClusterConfig, ClusterQueue, Workload
from gpuq.core.quota import FlavorResource, QuotaNode, QuotaTree


@dataclass(frozen=True, slots=True)
class AdmittedWorkload:
    """A workload holding quota in ``cluster_queue``; ``usage`` is its total per (flavor, resource)."""

    workload: Workload
    cluster_queue: str
    usage: Mapping[FlavorResource, int]
    quota_reserved_time: float

    @property
    def key(self) -> str:
        return self.workload.key

    @property
    def priority(self) -> int:
        return self.workload.priority


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

    def cluster_queue(self, name: str) -> ClusterQueue:
        return self.config.cluster_queues[name]

    def node(self, cq_name: str) -> QuotaNode:
        return self.tree.cluster_queues[cq_name]

    def reserve(self, admitted: AdmittedWorkload) -> None:
        """Record that a workload holds quota (admission or quota reservation)."""
        if admitted.key in self.admitted:
            raise ValueError(f"workload {admitted.key} already holds quota")
        self.admitted[admitted.key] = admitted
        self.by_queue.setdefault(admitted.cluster_queue, {})[admitted.key] = admitted
        self.tree.add(admitted.cluster_queue, admitted.usage)

    def release(self, key: str) -> AdmittedWorkload:
        """Release a workload's quota (finished, evicted or deleted)."""
        admitted = self.admitted.pop(key)
        del self.by_queue[admitted.cluster_queue][key]
        self.tree.remove(admitted.cluster_queue, admitted.usage)
        return admitted

    @contextmanager
    def simulate_removal(self, workloads: Iterable[AdmittedWorkload]) -> Iterator[None]:
        """Temporarily remove ``workloads`` (usage and membership); restored on exit, whatever happens."""
        removed = [w for w in workloads if self.admitted.get(w.key) is w]
        for w in removed:
            self.tree.remove(w.cluster_queue, w.usage)
            del self.admitted[w.key]
            del self.by_queue[w.cluster_queue][w.key]
        try:
            yield
        finally:
            for w in reversed(removed):
                self.tree.add(w.cluster_queue, w.usage)
                self.admitted[w.key] = w
                self.by_queue[w.cluster_queue][w.key] = w

    @contextmanager
    def simulate_usage(self, cq_name: str, usage: Mapping[FlavorResource, int]) -> Iterator[None]:
        """Temporarily add usage to a queue; removed on exit."""
        self.tree.add(cq_name, usage)
        try:
            yield
        finally:
            self.tree.remove(cq_name, usage)
