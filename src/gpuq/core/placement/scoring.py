"""Choosing one node for one pod: binpack, spread, and score policies over bucket representatives.

A chooser reads the :class:`CapacityIndex` rather than every node. Binpack
(most-allocated) walks each class's buckets from the least free GPU capacity
upward and stops at the first node that fits; spread (least-allocated) walks
downward. Both compare the per-class winners by free GPU milli left after
placement, then class order, then node name, so the choice is deterministic.
Policies that score a node's exact GPU state (fragmentation-aware FGD and the
other GPU-sharing policies) score the first fitting node of every bucket:
nodes in one bucket share their GPU state, so one representative speaks for
the bucket.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

from gpuq.core.model import Workload
from gpuq.core.nodes import GPU, gpu_demand
from gpuq.core.placement.capacity import NodeCapacity, PodShape
from gpuq.core.placement.fragmentation import TaskType, typical_tasks
from gpuq.core.placement.index import CapacityIndex, NodeClass
from gpuq.core.placement.policies import (
    POLICIES,
    NodeView,
    PlacementPolicy,
    PodView,
    PolicyInputs,
    TieBreak,
    gpu_kind,
)

Admissible = Callable[[NodeCapacity], bool]


class Chooser(Protocol):
    name: str

    def choose(
        self, index: CapacityIndex, classes: Sequence[NodeClass], shape: PodShape, admissible: Admissible
    ) -> str | None: ...

    def pick_gpus(self, node: NodeCapacity, shape: PodShape) -> tuple[int, ...] | None:
        """The GPU indices for the pod on the chosen node; None leaves it to the node (tightest fit)."""
        ...


class BucketWalk:
    """Binpack (``descending=False``) or spread (``descending=True``) by free GPU capacity."""

    def __init__(self, name: str, descending: bool) -> None:
        self.name = name
        self.descending = descending

    def choose(
        self, index: CapacityIndex, classes: Sequence[NodeClass], shape: PodShape, admissible: Admissible
    ) -> str | None:
        best: tuple[int, int, str] | None = None
        for node_class in classes:
            found = _first_in_walk(index, node_class, shape, admissible, self.descending)
            if found is None:
                continue
            free_after = index.capacity[found].gpu_free_milli() - shape.gpu.total_milli
            key = (-free_after if self.descending else free_after, node_class.id, found)
            if best is None or key < best:
                best = key
        return None if best is None else best[2]

    def pick_gpus(self, node: NodeCapacity, shape: PodShape) -> tuple[int, ...] | None:
        return None


def _first_in_walk(
    index: CapacityIndex, node_class: NodeClass, shape: PodShape, admissible: Admissible, descending: bool
) -> str | None:
    for bucket in index.buckets(node_class, shape.gpu, descending):
        for name in bucket:
            if admissible(index.capacity[name]):
                return name
    return None


def node_view(capacity: NodeCapacity) -> NodeView:
    """What the GPU-sharing policies read of a node: per-GPU free milli, CPU, memory, GPU pods."""
    node = capacity.node
    if capacity.per_device:
        gpus = tuple(capacity.gpu_milli)
    else:  # counted GPUs (time-slicing, MIG single): whole free GPUs only
        gpus = tuple(
            1000 if i < capacity.free.get(GPU, 0) else 0 for i in range(node.allocatable.get(GPU, 0))
        )
    kinds = Counter(kind for shape, _ in capacity.bound.values() if (kind := gpu_kind(shape.gpu)) is not None)
    return NodeView(
        gpu_free_milli=gpus,
        cpu_free_milli=capacity.free.get("cpu", 0),
        cpu_total_milli=node.allocatable.get("cpu", 0),
        memory_free_bytes=capacity.free.get("memory", 0),
        memory_total_bytes=node.allocatable.get("memory", 0),
        gpu_model=node.gpu_model,
        gpu_pod_kinds=tuple(sorted(kinds.items())),
    )


def pod_view(shape: PodShape) -> PodView:
    return PodView(shape.counted.get("cpu", 0), shape.counted.get("memory", 0), shape.gpu)


SAMPLES = 32


class ScoredBuckets:
    """A :class:`PlacementPolicy` evaluated on one fitting representative per bucket.

    Among the best ``(score, tie_score)``, ``UNIFORM`` policies draw a node at random (a bucket
    with probability proportional to its size, then a fitting node in it); the others take
    class order, then node name.
    """

    def __init__(self, policy: PlacementPolicy, rng: random.Random) -> None:
        self.policy = policy
        self.name = policy.name
        self.rng = rng

    def choose(
        self, index: CapacityIndex, classes: Sequence[NodeClass], shape: PodShape, admissible: Admissible
    ) -> str | None:
        if self.policy.tie_break is TieBreak.UNIFORM and (drawn := self._sample(index, classes, admissible)):
            return drawn
        pod = pod_view(shape)
        best: list[tuple[int, str, list[str]]] = []
        best_key: tuple[float, float] | None = None
        for node_class in classes:
            for bucket in index.buckets(node_class, shape.gpu, descending=True):
                found = next((name for name in bucket if admissible(index.capacity[name])), None)
                if found is None:
                    continue
                view = node_view(index.capacity[found])
                key = (self.policy.score(view, pod), self.policy.tie_score(view, pod))
                if best_key is None or key > best_key:
                    best_key, best = key, []
                if key == best_key:
                    best.append((node_class.id, found, bucket))
        if not best:
            return None
        if self.policy.tie_break is TieBreak.UNIFORM:
            return self._draw(index, best, admissible)
        return min(best)[1]

    def _sample(
        self, index: CapacityIndex, classes: Sequence[NodeClass], admissible: Admissible
    ) -> str | None:
        """Rejection sampling: a uniformly random node of the matching classes, kept if it fits.

        Uniform over the fitting nodes whenever it succeeds; after ``SAMPLES`` misses (a
        nearly full cluster) the caller falls back to walking the buckets.
        """
        sizes = [c.size for c in classes]
        if not classes or not sum(sizes):
            return None
        for _ in range(SAMPLES):
            node_class = self.rng.choices(classes, weights=sizes)[0]
            name = node_class.members[self.rng.randrange(node_class.size)]
            if admissible(index.capacity[name]):
                return name
        return None

    def _draw(
        self, index: CapacityIndex, best: list[tuple[int, str, list[str]]], admissible: Admissible
    ) -> str:
        _, first, bucket = self.rng.choices(best, weights=[len(b) for _, _, b in best])[0]
        start = self.rng.randrange(len(bucket))
        for offset in range(len(bucket)):
            name = bucket[(start + offset) % len(bucket)]
            if admissible(index.capacity[name]):
                return name
        return first

    def pick_gpus(self, node: NodeCapacity, shape: PodShape) -> tuple[int, ...] | None:
        if not node.per_device or not shape.gpu.count:
            return None
        return self.policy.pick_gpus(node_view(node), pod_view(shape))


def _scored(name: str) -> Callable[[PolicyInputs], Chooser]:
    def build(inputs: PolicyInputs) -> Chooser:
        rng = inputs.rng or random.Random(0)
        return ScoredBuckets(POLICIES[name](PolicyInputs(inputs.typical_tasks, rng)), rng)

    return build


CHOOSERS: dict[str, Callable[[PolicyInputs], Chooser]] = {
    "binpack": lambda _: BucketWalk("binpack", descending=False),
    "spread": lambda _: BucketWalk("spread", descending=True),
    **{
        name: _scored(name)
        for name in ("random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd")
    },
}
"""gpuq's bucket walks, then the FGD paper's policies (``policies.py``) over bucket representatives."""


def inputs_for(workloads: Sequence[Workload], seed: int = 0) -> PolicyInputs:
    """Policy inputs from a snapshot: FGD's typical tasks are the pods of these workloads."""
    tasks = [
        TaskType(pod_set.requests.get("cpu", 0), gpu_demand(pod_set.requests))
        for workload in workloads
        for pod_set in workload.pod_sets
        for _ in range(pod_set.count)
    ]
    return PolicyInputs(typical_tasks(tasks) if tasks else (), random.Random(seed))


def chooser_for(name: str, inputs: PolicyInputs | None = None) -> Chooser:
    """The chooser registered under ``name``; unknown names list the known ones.

    ``inputs`` gives FGD the workload's typical tasks and the random policy its seeded
    generator (default: ``random.Random(0)``).
    """
    factory = CHOOSERS.get(name)
    if factory is None:
        raise ValueError(f"unknown placement policy {name!r}; known: {', '.join(CHOOSERS)}")
    return factory(inputs or PolicyInputs())
