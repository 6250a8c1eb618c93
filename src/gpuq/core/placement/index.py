"""An index of free capacity: nodes grouped by static class, then bucketed by free GPU state.

Placing one pod must not scan every node. Nodes that are alike in
everything but their name and topology position (same allocatable, taints,
labels, GPU model and sharing) form a class, filtered once per pod set.
Within a class, nodes are bucketed by the GPU part of their free state
(:meth:`NodeCapacity.signature`); buckets are kept sorted by free GPU
capacity, so binpack reads the fullest bucket that fits first and spread
the emptiest. A change to one node moves it between two buckets. Inside a
bucket nodes are kept in name order, so the choice between equals never
depends on the order of earlier binds and releases.

Every refresh is also written to a journal of changed node names, so that
derived views (the topology capacity views of the placer) catch up with the
nodes that changed since they last looked instead of reading every node.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from gpuq.core.nodes import HOSTNAME_LABEL, GPUDemand, Node
from gpuq.core.placement.capacity import NodeCapacity

BucketKey = tuple[int, tuple[int, ...]]  # (free GPU milli, signature)


@dataclass(slots=True)
class NodeClass:
    """Nodes identical up to their varying labels (hostname, topology levels)."""

    id: int
    sample: Node
    per_device: bool = False  # GPUs tracked per device (whole or fractional sharing)
    fractional: bool = False
    size: int = 0
    members: list[str] = field(default_factory=list)  # every node of the class, in name order
    buckets: dict[BucketKey, list[str]] = field(default_factory=dict)  # node names, sorted
    order: list[BucketKey] = field(default_factory=list)  # ascending free GPU capacity

    def add(self, name: str, key: BucketKey) -> None:
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = []
            bisect.insort(self.order, key)
        bisect.insort(bucket, name)

    def remove(self, name: str, key: BucketKey) -> None:
        bucket = self.buckets[key]
        del bucket[bisect.bisect_left(bucket, name)]
        if not bucket:
            del self.buckets[key]
            del self.order[bisect.bisect_left(self.order, key)]


def bucket_key(capacity: NodeCapacity) -> BucketKey:
    return (capacity.gpu_free_milli(), capacity.signature())


def may_fit(capacity_per_device: bool, fractional: bool, key: BucketKey, demand: GPUDemand) -> bool:
    """A cheap test on a bucket's signature that never rejects a bucket holding a fitting node."""
    if demand.count == 0:
        return True
    free_milli, signature = key
    if free_milli < demand.total_milli:
        return False
    if not capacity_per_device:
        return True
    if demand.partial:
        return fractional and len(signature) >= demand.count and signature[demand.count - 1] >= demand.milli
    if fractional:
        return sum(1 for milli in signature if milli == 1000) >= demand.count
    return signature[0] >= demand.count


class CapacityIndex:
    """Node capacities by name, their classes, and the buckets of each class."""

    def __init__(self, nodes: Iterable[Node], varying_labels: Iterable[str] = ()) -> None:
        self.varying = frozenset(varying_labels) | {HOSTNAME_LABEL}
        self.capacity: dict[str, NodeCapacity] = {}
        self.classes: list[NodeClass] = []
        self.class_of: dict[str, NodeClass] = {}
        self._keys: dict[str, BucketKey] = {}
        self._changes: list[str] = []  # names of refreshed nodes, oldest first, repeats kept
        self._changes_start = 0  # the position of _changes[0]
        self.version = 0  # names the free state of every node: see refresh
        self._last_version = 0
        by_signature: dict[tuple[object, ...], NodeClass] = {}
        for node in sorted(nodes, key=lambda n: n.name):
            if node.name in self.capacity:
                raise ValueError(f"duplicate node name {node.name!r}")
            signature = self._static_signature(node)
            node_class = by_signature.get(signature)
            capacity = NodeCapacity(node)
            if node_class is None:
                node_class = NodeClass(len(self.classes), node, capacity.per_device, capacity.fractional)
                by_signature[signature] = node_class
                self.classes.append(node_class)
            self.capacity[node.name] = capacity
            self.class_of[node.name] = node_class
            node_class.size += 1
            node_class.members.append(node.name)
            key = self._keys[node.name] = bucket_key(capacity)
            node_class.add(node.name, key)

    def _static_signature(self, node: Node) -> tuple[object, ...]:
        labels = tuple(sorted((k, v) for k, v in node.labels.items() if k not in self.varying))
        return (
            tuple(sorted(node.allocatable.items())),
            node.taints,
            labels,
            node.gpu_model,
            node.gpu_count,
            node.gpu_memory_mib,
            node.sharing,
            node.unschedulable,
        )

    def refresh(self, name: str) -> None:
        """Re-bucket one node after its free capacity changed, and journal the change.

        Every refresh gives :attr:`version` a number never used before, so one version always
        names one free state of the nodes. A caller that undoes its changes exactly (a what-if
        placement released, tentative placements forgotten) may set the version it saw back
        (:meth:`restore_version`): the nodes are in that state again.

        The journal always keeps the last ``nodes`` changes; past ``2 × nodes`` (plus a little)
        its older half is dropped, so recording costs O(1) amortized whether anyone reads it or
        not, and a reader that fell further behind rebuilds from the nodes, which costs no more.
        """
        self._last_version += 1
        self.version = self._last_version
        self._changes.append(name)
        if len(self._changes) > 2 * len(self.capacity) + 16:
            dropped = len(self._changes) // 2
            del self._changes[:dropped]
            self._changes_start += dropped
        old = self._keys[name]
        new = bucket_key(self.capacity[name])
        if new != old:
            node_class = self.class_of[name]
            node_class.remove(name, old)
            node_class.add(name, new)
            self._keys[name] = new

    def restore_version(self, version: int) -> None:
        """The nodes are back in the free state ``version`` named (the caller undid its changes)."""
        self.version = version

    @property
    def position(self) -> int:
        """The number of changes journaled so far: a bookmark for :meth:`changed_since`."""
        return self._changes_start + len(self._changes)

    def changed_since(self, position: int) -> list[str] | None:
        """The nodes refreshed since ``position`` (oldest first, repeats kept), or None when the
        journal no longer reaches that far back and the reader must start over."""
        if position < self._changes_start:
            return None
        return self._changes[position - self._changes_start :]

    def buckets(self, node_class: NodeClass, demand: GPUDemand, descending: bool) -> Iterator[list[str]]:
        """The class's buckets that may hold ``demand``, emptiest-first when ``descending``."""
        keys: Iterable[BucketKey] = reversed(node_class.order) if descending else node_class.order
        for key in keys:
            if may_fit(node_class.per_device, node_class.fractional, key, demand):
                yield node_class.buckets[key]

    def nodes(self) -> Mapping[str, NodeCapacity]:
        return self.capacity
