"""What-if questions about topology placement, asked by admission before it admits or preempts.

Kueue (pkg/scheduler/flavorassigner/tas_flavorassigner.go) downgrades a quota
fit whose topology-aware pod sets cannot be placed: to NoFit when they would
not fit even with every topology-aware workload gone (asked of an empty twin
of the nodes), otherwise to Preempt, keeping only targets whose eviction lets
the placement succeed. A question
about targets releases the named workloads' pods, tries the placement, and
puts every pod back on exactly the node and GPUs it had, so the placer is
unchanged afterwards.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from gpuq.core.model import PodSetAssignment, Workload
from gpuq.core.placement.capacity import PodShape
from gpuq.core.placement.engine import PlacementFailure, Placer, PodBinding, WorkloadPlacement

TOPOLOGY_FAILED = "TopologyPlacementFailed"


class TopologyWhatIf:
    """The :class:`~gpuq.core.nomination.TopologyOracle` of a :class:`Placer`."""

    def __init__(self, placer: Placer) -> None:
        self.placer = placer
        self._empty: Placer | None = None

    def capacity_version(self) -> int:
        return self.placer.capacity_version

    def topology_failure_when_empty(
        self, workload: Workload, pod_sets: Sequence[PodSetAssignment]
    ) -> str | None:
        """Why the pod sets could not be placed even on empty nodes (Kueue: "with all TAS usage
        removed"), or None.

        Asked of a twin placer over the same nodes with nothing bound, built once: releasing
        every topology-aware workload of a busy cluster for each question would cost as much
        as the cluster holds. Unlike Kueue, pods placed without a topology request are left
        out as well; they rarely share nodes with topology-aware flavors.
        """
        if self._empty is None:
            nodes = [capacity.node for capacity in self.placer.nodes.values()]
            self._empty = Placer(nodes, flavors=self.placer.flavors, topologies=self.placer.topologies)
        return _topology_message(self._empty.check(workload, pod_sets))

    def uses_topology(self, workload: Workload, pod_sets: Sequence[PodSetAssignment] | None = None) -> bool:
        return self.placer.uses_topology(workload, pod_sets)

    def topology_failure(
        self, workload: Workload, pod_sets: Sequence[PodSetAssignment], without: Collection[str] = ()
    ) -> str | None:
        version = self.placer.index.version
        saved = [self._take_out(key) for key in sorted(without) if key in self.placer.placements]
        try:
            failure = self.placer.check(workload, pod_sets)
        finally:
            for placement, shapes in reversed(saved):
                self._put_back(placement, shapes)
        if saved:
            self.placer.index.restore_version(version)  # every pod is back on its node and GPUs
        return _topology_message(failure)

    def _take_out(self, key: str) -> tuple[WorkloadPlacement, list[PodShape]]:
        placement = self.placer.placements[key]
        capacity = self.placer.nodes
        shapes = [capacity[b.node].bound[b.pod][0] for b in placement.bindings]
        self.placer.release(key)
        return placement, shapes

    def _put_back(self, placement: WorkloadPlacement, shapes: list[PodShape]) -> None:
        bindings: list[PodBinding] = list(placement.bindings)
        for binding, shape in zip(bindings, shapes, strict=True):
            self.placer.nodes[binding.node].take(binding.pod, shape, binding.gpus)
            self.placer.index.refresh(binding.node)
        self.placer.placements[placement.workload] = placement


def _topology_message(failure: PlacementFailure | None) -> str | None:
    """The message of a topology failure; None for success or for pods merely waiting for a node."""
    if failure is None or failure.reason != TOPOLOGY_FAILED:
        return None
    return failure.message
