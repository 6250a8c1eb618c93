"""The domains of one topology with their pod and slice capacities, each level kept sorted.

Kueue's TAS phase 1 (``fillInCounts``) as a data structure that is built once and then kept up
to date one leaf at a time, so that a placement reads only the domains it considers instead of
rebuilding the tree from every leaf (:func:`gpuq.core.topology.assign_in` runs on it).

A domain is named by its label values, widest level first; a leaf has one value per level.
Every domain's key is ``(slices, pods, values)``:

* ``pods``: the sum of its leaves' capacities;
* ``slices``: ``pods // slice_size`` at the slice level, the sum of its children's slices above
  it, 0 below it.

Only domains with pods are listed (a domain without pods does not exist for Kueue, whose
domains come from the nodes with room): in ``ranked[level]`` and in their parent's
``children``, both ascending by key. Values are unique within a level, so the order is total.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

Values = tuple[str, ...]
Key = tuple[int, int, Values]
"""(slices, pods, values) of a domain."""


class _Domain:
    __slots__ = ("children", "pods", "slices")

    def __init__(self) -> None:
        self.pods = 0
        self.slices = 0
        self.children: list[Key] = []  # listed children, ascending by key


class DomainTree:
    """Pod and slice capacities of every domain of a ``depth``-level topology (see the module).

    ``total_slices`` is the sum of the slices of every domain of any level at or above the
    slice level. Costs: :meth:`build` O(leaves × depth + leaves log leaves); :meth:`add`
    O(depth) list updates, each a binary search plus a shift of one sorted list.
    """

    def __init__(self, depth: int, slice_level_idx: int, slice_size: int) -> None:
        if depth < 1 or not 0 <= slice_level_idx < depth or slice_size < 1:
            raise ValueError(f"bad tree: depth {depth}, slice level {slice_level_idx}, size {slice_size}")
        self.depth = depth
        self.slice_level_idx = slice_level_idx
        self.slice_size = slice_size
        self.total_slices = 0
        self.ranked: list[list[Key]] = [[] for _ in range(depth)]
        self._domains: list[dict[Values, _Domain]] = [{} for _ in range(depth)]

    @classmethod
    def build(
        cls, depth: int, leaves: Mapping[Values, int], slice_level_idx: int, slice_size: int
    ) -> DomainTree:
        """A tree of ``leaves`` (values -> pods that fit); leaves without pods are left out.

        1. Sum each leaf's pods into it and every ancestor.
        2. Slices at the slice level, summed into every ancestor.
        3. List and sort each level and each domain's children.
        """
        tree = cls(depth, slice_level_idx, slice_size)
        domains = tree._domains
        for values, pods in leaves.items():
            if len(values) != depth:
                raise ValueError(f"leaf {values} needs one value per level ({depth})")
            if pods <= 0:
                continue
            for idx in range(depth):
                prefix = values[: idx + 1]
                dom = domains[idx].get(prefix)
                if dom is None:
                    dom = domains[idx][prefix] = _Domain()
                dom.pods += pods
        for values, dom in domains[slice_level_idx].items():
            dom.slices = dom.pods // slice_size
            for idx in range(slice_level_idx):
                domains[idx][values[: idx + 1]].slices += dom.slices
        for idx in range(depth):
            ranked = tree.ranked[idx]
            ranked.extend((dom.slices, dom.pods, values) for values, dom in domains[idx].items())
            ranked.sort()
            if idx > 0:
                for key in ranked:  # in order, so every children list comes out sorted
                    domains[idx - 1][key[2][:-1]].children.append(key)
        tree.total_slices = sum(key[0] for key in tree.ranked[0])
        return tree

    def children(self, values: Values) -> list[Key]:
        """The listed children of a listed domain, ascending by key (read only)."""
        return self._domains[len(values) - 1][values].children

    def pods(self, values: Values) -> int:
        """The pods that fit in a domain (0 for one never seen)."""
        dom = self._domains[len(values) - 1].get(values)
        return 0 if dom is None else dom.pods

    def _domain(self, values: Values) -> _Domain:
        level = self._domains[len(values) - 1]
        dom = level.get(values)
        if dom is None:
            dom = level[values] = _Domain()
        return dom

    def add(self, leaf: Values, delta: int) -> None:
        """Change a leaf's pods by ``delta`` and update its ancestors, leaf first.

        1. Make sure the leaf and its ancestors exist (unlisted while they have no pods).
        2. From the leaf up: new pods; new slices (recomputed at the slice level, shifted by the
           change below it above); move the key in its level's and its parent's sorted lists.
        """
        if len(leaf) != self.depth:
            raise ValueError(f"leaf {leaf} needs one value per level ({self.depth})")
        if delta == 0:
            return
        path = [self._domain(leaf[: idx + 1]) for idx in range(self.depth)]
        if path[-1].pods + delta < 0:
            raise ValueError(f"leaf {leaf} would hold {path[-1].pods + delta} pods")
        slice_delta = 0
        for idx in range(self.depth - 1, -1, -1):
            dom, values = path[idx], leaf[: idx + 1]
            old = (dom.slices, dom.pods, values) if dom.pods else None
            dom.pods += delta
            if idx == self.slice_level_idx:
                slices = dom.pods // self.slice_size
                slice_delta = slices - dom.slices
                dom.slices = slices
            elif idx < self.slice_level_idx:
                dom.slices += slice_delta
            new = (dom.slices, dom.pods, values) if dom.pods else None
            _move(self.ranked[idx], old, new)
            if idx > 0:
                _move(path[idx - 1].children, old, new)
        self.total_slices += slice_delta


def _move(keys: list[Key], old: Key | None, new: Key | None) -> None:
    """Replace ``old`` by ``new`` in the sorted ``keys`` (None: absent)."""
    if old is not None:
        del keys[bisect.bisect_left(keys, old)]
    if new is not None:
        bisect.insort(keys, new)
