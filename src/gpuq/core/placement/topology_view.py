"""Live topology capacity views: how many pods of one shape fit on each node and in each domain.

Kueue's TAS snapshot reads every node with room for each pod set it places. A view keeps that
reading alive instead: built once from the nodes that may hold the pods, then brought up to
date, before each use, from the :class:`~gpuq.core.placement.index.CapacityIndex` journal of
nodes whose capacity changed since its last use (each one O(levels) tree updates). A placement
through a view therefore costs what changed plus the domains the algorithm reads, not the
cluster.

A view answers for one key: the pod shape, the node requirements, the topology levels, the cap
on pods per node (the most that fits on an empty node of the candidate classes, which no node
exceeds, so counts are exact and gangs of every size share a view: Kueue's best fit compares
the true capacities) and the slicing (slice level and size). :class:`CapacityViews`
keeps the most recently used ``limit`` views; memory is O(candidate nodes × levels) per view.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gpuq.core.placement.capacity import PodShape
from gpuq.core.placement.filters import NodeRequirements, selector_matches
from gpuq.core.placement.index import CapacityIndex, NodeClass
from gpuq.core.topology_tree import DomainTree, Values


@dataclass(frozen=True, slots=True)
class ViewKey:
    """Everything a view's capacities depend on."""

    shape: tuple[object, ...]  # PodShape.key
    requirements: tuple[object, ...]  # the placer's requirements key
    levels: tuple[str, ...]
    cap: int  # pods counted per node at most
    slice_level_idx: int
    slice_size: int


class CapacityView:
    """Pods of ``shape`` (at most ``cap`` per node) that fit on each member node, summed by domain.

    ``members`` maps each node that passes the static filters and carries every level label to
    its leaf values; membership never changes. Invariant once :meth:`catch_up` returned True:
    ``fit`` holds every member with room and ``tree`` every leaf's sum of them, as of now.
    """

    def __init__(
        self,
        index: CapacityIndex,
        members: Mapping[str, Values],
        shape: PodShape,
        cap: int,
        *,
        slice_level_idx: int,
        slice_size: int,
        depth: int,
    ) -> None:
        self._index = index
        self._members = members
        self._shape = shape
        self._cap = cap
        self._position = index.position
        self._leaf_nodes: dict[Values, list[str]] = {}
        self.fit: dict[str, int] = {}
        leaves: dict[Values, int] = {}
        for name, leaf in members.items():
            self._leaf_nodes.setdefault(leaf, []).append(name)
            fit = index.capacity[name].fit_count(shape, cap)
            if fit:
                self.fit[name] = fit
                leaves[leaf] = leaves.get(leaf, 0) + fit
        self.tree = DomainTree.build(depth, leaves, slice_level_idx, slice_size)

    def catch_up(self) -> bool:
        """Apply the changes journaled since the last call; False when the journal lost some.

        Each changed member is read once however often it changed: its new fit moves its leaf
        and the leaf's ancestors in the tree.
        """
        changed = self._index.changed_since(self._position)
        if changed is None:
            return False
        capacity, members, fit = self._index.capacity, self._members, self.fit
        for name in dict.fromkeys(changed):
            leaf = members.get(name)
            if leaf is None:
                continue
            new = capacity[name].fit_count(self._shape, self._cap)
            old = fit.pop(name, 0)
            if new:
                fit[name] = new
            self.tree.add(leaf, new - old)
        self._position = self._index.position
        return True

    def nodes_with_room(self, leaf: Values) -> list[tuple[str, int]]:
        """A leaf's nodes with room and their fits, fullest first, then by name."""
        nodes = [(name, self.fit[name]) for name in self._leaf_nodes.get(leaf, ()) if name in self.fit]
        return sorted(nodes, key=lambda item: (-item[1], item[0]))


class CapacityViews:
    """The live views of one index, at most ``limit``, the least recently used dropped first."""

    def __init__(self, index: CapacityIndex, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"view limit must not be negative, got {limit}")
        self.limit = limit
        self._index = index
        self._views: dict[ViewKey, CapacityView] = {}  # least recently used first

    def get(self, key: ViewKey, build: Callable[[], CapacityView]) -> CapacityView:
        """The view for ``key``, up to date: caught up, or built when new or too far behind."""
        view = self._views.pop(key, None)
        if view is None or not view.catch_up():
            view = build()
        self._views[key] = view
        while len(self._views) > self.limit:
            del self._views[next(iter(self._views))]
        return view

    def __len__(self) -> int:
        return len(self._views)


def view_members(
    index: CapacityIndex,
    classes: Iterable[NodeClass],
    positions: Mapping[str, Values],
    requirements: NodeRequirements,
) -> dict[str, Values]:
    """A view's members: the nodes of ``classes`` that carry every level label (``positions``,
    as Kueue ignores the others) and pass the per-node part of ``requirements``, with their leaves.
    """
    per_node = bool(requirements.keys() & index.varying)
    members: dict[str, Values] = {}
    for node_class in classes:
        for node in node_class.members:
            leaf = positions.get(node)
            if leaf is None:
                continue
            if per_node and not selector_matches(requirements, index.capacity[node].node.labels):
                continue
            members[node] = leaf
    return members
