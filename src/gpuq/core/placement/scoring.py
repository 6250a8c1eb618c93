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

from collections.abc import Callable, Sequence
from typing import Protocol

from gpuq.core.placement.capacity import NodeCapacity, PodShape
from gpuq.core.placement.index import CapacityIndex, NodeClass

Admissible = Callable[[NodeCapacity], bool]


class Chooser(Protocol):
    name: str

    def choose(
        self, index: CapacityIndex, classes: Sequence[NodeClass], shape: PodShape, admissible: Admissible
    ) -> str | None: ...


class ScorePolicy(Protocol):
    """A node score for one pod on one feasible node; higher is better."""

    name: str

    def score(self, node: NodeCapacity, shape: PodShape) -> float: ...


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


def _first_in_walk(
    index: CapacityIndex, node_class: NodeClass, shape: PodShape, admissible: Admissible, descending: bool
) -> str | None:
    for bucket in index.buckets(node_class, shape.gpu, descending):
        for name in bucket:
            if admissible(index.capacity[name]):
                return name
    return None


class ScoredBuckets:
    """Any :class:`ScorePolicy`, evaluated on one fitting representative per bucket."""

    def __init__(self, policy: ScorePolicy) -> None:
        self.policy = policy
        self.name = policy.name

    def choose(
        self, index: CapacityIndex, classes: Sequence[NodeClass], shape: PodShape, admissible: Admissible
    ) -> str | None:
        best: tuple[float, int, str] | None = None
        for node_class in classes:
            for bucket in index.buckets(node_class, shape.gpu, descending=True):
                for name in bucket:
                    capacity = index.capacity[name]
                    if admissible(capacity):
                        key = (-self.policy.score(capacity, shape), node_class.id, name)
                        if best is None or key < best:
                            best = key
                        break
        return None if best is None else best[2]


CHOOSERS: dict[str, Callable[[], Chooser]] = {
    "binpack": lambda: BucketWalk("binpack", descending=False),
    "spread": lambda: BucketWalk("spread", descending=True),
}


def chooser_for(name: str) -> Chooser:
    """The chooser registered under ``name``; unknown names list the known ones."""
    factory = CHOOSERS.get(name)
    if factory is None:
        raise ValueError(f"unknown placement policy {name!r}; known: {', '.join(sorted(CHOOSERS))}")
    return factory()
