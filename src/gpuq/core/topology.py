"""Topology Aware Scheduling placement: where a pod set's pods go in the topology.

Kueue: pkg/cache/scheduler/tas_flavor_snapshot.go, keps/2724-topology-aware-scheduling.

A pure function of per-leaf pod capacities, re-implementing Kueue's ``findTopologyAssignment``
(``pkg/cache/scheduler/tas_flavor_snapshot.go``) for one pod set, without node affinity scores,
multi-layer slices or balanced placement (a leader placed with its workers, Kueue's pod-set
groups: :mod:`gpuq.core.topology_groups`):

1. Validate the request and resolve its level, slice level and slice size (:func:`resolve`).
2. Phase 1 (``fillInCounts``): per domain, the pods that fit (sum of its leaves) and the slices
   that fit (``pods // slice_size`` at the slice level, summed above it, 0 below it); held by a
   :class:`~gpuq.core.topology_tree.DomainTree`, built from the leaves by :func:`assign` or kept
   up to date by the caller for :func:`assign_in`.
3. Phase 2a (``findLevelWithFitDomains``): choose the domains of the requested level, going up a
   level for Preferred requests when no single domain fits, spreading greedily at the top.
4. Phase 2b (``updateCountsToMinimum``): descend level by level to the leaves, filling the
   children of the chosen domains greedily in sorted order with a best fit for the remainder.
5. ``buildAssignment``: the leaves that got pods, sorted by their label values.

Deliberate differences from Kueue: ``levels`` and each domain's ``values`` always span every
level (Kueue keeps only the hostname when it is the lowest level); zero pods get an empty
assignment even on an empty topology; a topology with no capacity left reports "doesn't allow to
fit any" rather than "no topology domains at level"; a slice size without a slice level, a slice
size below 1 and a count that is not a whole number of slices are failures (Kueue's placement
code does not check them).

Domains sort, BestFit: (slice capacity descending, pod capacity ascending, values ascending);
LeastFreeCapacity (Unconstrained or implied requests, gate TASProfileMixed): (slice capacity
ascending, pod capacity ascending, values ascending). Values are unique, so every order is total.
The tree keeps each level ascending by (slices, pods, values); BestFit order reads its groups of
equal slices from the top down. Domains without slices never take any, and domains without pods
do not exist, so phase 2 skips both; it reads only the domains it may choose, which makes its
cost independent of the number of leaves except where it must pick among them.
"""

from __future__ import annotations

import bisect
import heapq
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from gpuq.core.model import TopologyMode, TopologyRequest
from gpuq.core.topology_tree import DomainTree, Key, Values


@dataclass(frozen=True, slots=True)
class TopologyDomain:
    """A leaf domain of an assignment: its label values (widest level first) and pods placed in it."""

    values: tuple[str, ...]
    count: int


@dataclass(frozen=True, slots=True)
class TopologyAssignment:
    """Kueue's ``topologyAssignment``: every level key and the leaves used, sorted by values."""

    levels: tuple[str, ...]
    domains: tuple[TopologyDomain, ...]


@dataclass(frozen=True, slots=True)
class TopologyFailure:
    """Why no placement exists, worded as Kueue's TAS failure reasons."""

    reason: str


@dataclass(frozen=True, slots=True)
class TopologyPlan:
    """A validated request (:func:`resolve`), in level indexes (0 is the widest level)."""

    count: int
    level_idx: int
    slice_level_idx: int
    slice_size: int
    required: bool
    unconstrained: bool
    least_free: bool

    @property
    def slice_count(self) -> int:
        return self.count // self.slice_size


_Chosen = list[tuple[Key, int]]
"""Domains picked in order, each with the units (pods or slices) it takes."""


def assign(
    levels: tuple[str, ...],
    leaves: Mapping[tuple[str, ...], int],
    count: int,
    request: TopologyRequest | None,
    *,
    topology_name: str = "default",
    profile_least_free_for_unconstrained: bool = True,
) -> TopologyAssignment | TopologyFailure:
    """Place ``count`` pods on ``leaves`` (full value tuple -> pods that fit there now).

    Returns an assignment placing exactly ``count`` pods, never more on a leaf than its capacity,
    or the reason none exists. ``request`` None is an implied (unconstrained) request. Leaves
    absent from ``leaves`` have capacity 0; the result does not depend on whether the caller
    lists zero-capacity leaves. Runs in O(leaves × levels + leaves log leaves).

    1. Resolve the request; zero pods get an empty assignment.
    2. Build the domain tree with its capacities (phase 1).
    3. Place on the tree (:func:`assign_in`).
    """
    plan = resolve(
        levels, count, request, profile_least_free_for_unconstrained=profile_least_free_for_unconstrained
    )
    if isinstance(plan, TopologyFailure):
        return plan
    if plan.count == 0:
        return TopologyAssignment(levels, ())
    tree = DomainTree.build(len(levels), leaves, plan.slice_level_idx, plan.slice_size)
    return assign_in(levels, tree, plan, topology_name=topology_name)


def assign_in(
    levels: tuple[str, ...], tree: DomainTree, plan: TopologyPlan, *, topology_name: str = "default"
) -> TopologyAssignment | TopologyFailure:
    """Place a resolved request on ``tree``, whose slicing must be the plan's; ``tree`` is only read.

    The same decisions as :func:`assign` on the tree's leaves. Reads the domains of the levels
    tried in phase 2a (a binary search per level, a walk only when spreading), then only the
    children of the domains chosen: O(levels × log domains) plus the domains that take pods.

    1. Find the fit level and its domains (phase 2a).
    2. Descend to the leaves (phase 2b) and report the leaves used, sorted by values.
    """
    slicing = (plan.slice_level_idx, plan.slice_size)
    if tree.depth != len(levels) or (tree.slice_level_idx, tree.slice_size) != slicing:
        raise ValueError("the tree's levels or slicing differ from the plan's")
    if plan.count == 0:
        return TopologyAssignment(levels, ())
    found = _find_level_with_fit_domains(tree, plan, topology_name)
    if isinstance(found, TopologyFailure):
        return found
    fit_level_idx, chosen = found
    used = sorted((values, pods) for values, pods in _descend(tree, chosen, fit_level_idx, plan) if pods > 0)
    return TopologyAssignment(levels, tuple(TopologyDomain(values, pods) for values, pods in used))


def fits(
    levels: tuple[str, ...],
    leaves: Mapping[tuple[str, ...], int],
    count: int,
    request: TopologyRequest | None,
    *,
    profile_least_free_for_unconstrained: bool = True,
) -> bool:
    """Whether ``assign`` would succeed; skips the descent, which cannot fail once phase 2a has."""
    plan = resolve(
        levels, count, request, profile_least_free_for_unconstrained=profile_least_free_for_unconstrained
    )
    if isinstance(plan, TopologyFailure):
        return False
    if plan.count == 0:
        return True
    tree = DomainTree.build(len(levels), leaves, plan.slice_level_idx, plan.slice_size)
    return not isinstance(_find_level_with_fit_domains(tree, plan, "default"), TopologyFailure)


def resolve(
    levels: tuple[str, ...],
    count: int,
    request: TopologyRequest | None,
    *,
    profile_least_free_for_unconstrained: bool = True,
) -> TopologyPlan | TopologyFailure:
    """Resolve levels and slicing as Kueue's ``findTopologyAssignment`` preamble does.

    1. The requested level: Required/Preferred name it; a slice-only request means the widest
       level; Unconstrained and implied requests mean the leaf level.
    2. The slice level (default: the leaf level) and slice size (default 1); the slice level may
       not be above the requested level, and ``count`` must be a whole number of slices.
    """
    if not levels:
        raise ValueError("a topology needs at least one level")
    if count < 0:
        raise ValueError(f"pod count must not be negative, got {count}")
    mode = TopologyMode.UNCONSTRAINED if request is None else request.mode
    level = _requested_level(levels, request)
    if isinstance(level, TopologyFailure):
        return level
    slicing = _slicing(levels, request)
    if isinstance(slicing, TopologyFailure):
        return slicing
    slice_level, slice_size = slicing
    if levels.index(level) > levels.index(slice_level):
        return TopologyFailure(f"podset slice topology {slice_level} is above the podset topology {level}")
    if count % slice_size != 0:
        return TopologyFailure(f"pod count {count} is not a multiple of slice size {slice_size}")
    unconstrained = mode is TopologyMode.UNCONSTRAINED
    return TopologyPlan(
        count=count,
        level_idx=levels.index(level),
        slice_level_idx=levels.index(slice_level),
        slice_size=slice_size,
        required=mode is TopologyMode.REQUIRED,
        unconstrained=unconstrained,
        least_free=unconstrained and profile_least_free_for_unconstrained,
    )


def _requested_level(levels: tuple[str, ...], request: TopologyRequest | None) -> str | TopologyFailure:
    """Kueue's ``levelKey``: Required/Preferred name the level; a slice-only (Unconstrained with a
    slice level) request means the widest level; Unconstrained and implied mean the leaf level."""
    if request is None or request.mode is TopologyMode.UNCONSTRAINED:
        return levels[0] if request is not None and request.slice_level is not None else levels[-1]
    if request.level is None:
        return TopologyFailure("topology level not specified")
    if request.level not in levels:
        return TopologyFailure(f"no requested topology level: {request.level}")
    return request.level


def _slicing(levels: tuple[str, ...], request: TopologyRequest | None) -> tuple[str, int] | TopologyFailure:
    """The slice level and size: the request's pair, or single pods at the leaf level."""
    if request is None or (request.slice_level is None and request.slice_size is None):
        return levels[-1], 1
    if request.slice_level is None:
        return TopologyFailure("slice size provided, but slice topology not requested")
    if request.slice_size is None:
        return TopologyFailure("slice topology requested, but slice size not provided")
    if request.slice_level not in levels:
        return TopologyFailure(f"no requested topology level for slices: {request.slice_level}")
    if request.slice_size < 1:
        return TopologyFailure(f"slice size must be at least 1, got {request.slice_size}")
    return request.slice_level, request.slice_size


def _find_level_with_fit_domains(
    tree: DomainTree, plan: TopologyPlan, topology_name: str
) -> tuple[int, _Chosen] | TopologyFailure:
    """Phase 2a: the fit level and its chosen domains with the slices each takes.

    1. In the level's order, BestFit wants the smallest domain holding every slice, and
       LeastFreeCapacity the first in ascending order holding them: both are the first key at
       or after ``(needed,)`` in the ascending list.
    2. None holds them: Required fails with the largest domain's capacity; Preferred retries one
       level up; at the widest level (or when unconstrained) spread greedily over the sorted
       domains, best fit for the last one, failing if all of them together fall short.
    """
    needed = plan.slice_count
    for level_idx in range(plan.level_idx, -1, -1):
        ranked = tree.ranked[level_idx]
        holding = bisect.bisect_left(ranked, (needed,))
        if holding < len(ranked):
            return level_idx, [(ranked[holding], needed)]
        if plan.required:
            return not_fit(topology_name, ranked[-1][0] if ranked else 0, needed, plan.slice_size)
        if level_idx == 0 or plan.unconstrained:
            if tree.total_slices < needed:  # every level at or above the slice level sums to it
                return not_fit(topology_name, tree.total_slices, needed, plan.slice_size)
            return level_idx, _choose_slices([ranked], needed, plan.least_free)
    raise AssertionError("unreachable: the widest level always decides")


def not_fit(topology_name: str, fit: int, needed: int, slice_size: int) -> TopologyFailure:
    """Kueue's ``notFitMessage``; the name is quoted like Go's ``%q``."""
    unit = "pod" if slice_size == 1 else "slice"
    name = json.dumps(topology_name, ensure_ascii=False)
    if fit == 0:
        return TopologyFailure(f"topology {name} doesn't allow to fit any of {needed} {unit}(s)")
    return TopologyFailure(f"topology {name} allows to fit only {fit} out of {needed} {unit}(s)")


def _choose_slices(lists: list[list[Key]], needed: int, least_free: bool) -> _Chosen:
    """Greedy fill over the keys of ``lists`` merged in sort order, as ``updateCountsToMinimum``.

    1. Walk the keys with slices; each takes all its slices until one can hold the remainder.
    2. BestFit: the one holding the remainder is the smallest of the rest that can
       (``findBestFitDomain``): the rest are the keys with fewer slices than the current one,
       which come later in BestFit order, and the current one, the first of its group left.
    Returns the picks; their slices sum to less than ``needed`` only when all fall short.
    """
    chosen: _Chosen = []
    remaining = needed
    for key in _merged(lists, least_free):
        if key[0] >= remaining:
            if not least_free:
                key = min([key, *_holding_fewer(lists, remaining, key[0])])
            chosen.append((key, remaining))
            return chosen
        chosen.append((key, key[0]))
        remaining -= key[0]
    return chosen


def _holding_fewer(lists: list[list[Key]], remaining: int, below: int) -> Iterator[Key]:
    """Per list, the smallest key with at least ``remaining`` slices if it has fewer than ``below``."""
    for keys in lists:
        idx = bisect.bisect_left(keys, (remaining,))
        if idx < len(keys) and keys[idx][0] < below:
            yield keys[idx]


def _merged(lists: list[list[Key]], least_free: bool) -> Iterator[Key]:
    """The keys with slices in LeastFreeCapacity (ascending) or BestFit order, lazily merged."""
    walks = [_ascending(keys) if least_free else _best_fit_order(keys) for keys in lists]
    if len(walks) == 1:
        return walks[0]
    if least_free:
        return heapq.merge(*walks)
    return heapq.merge(*walks, key=lambda key: (-key[0], key[1], key[2]))


def _ascending(keys: list[Key]) -> Iterator[Key]:
    for idx in range(bisect.bisect_left(keys, (1,)), len(keys)):
        yield keys[idx]


def _best_fit_order(keys: list[Key]) -> Iterator[Key]:
    """Groups of equal slices from the most down to 1, each ascending by (pods, values)."""
    end = len(keys)
    while end and keys[end - 1][0] > 0:
        start = bisect.bisect_left(keys, (keys[end - 1][0],), 0, end)
        for idx in range(start, end):
            yield keys[idx]
        end = start


def _descend(
    tree: DomainTree, chosen: _Chosen, level_idx: int, plan: TopologyPlan
) -> list[tuple[Values, int]]:
    """Phase 2b: from the fit level down to the leaves, returning the leaves picked with their pods.

    1. Above the slice level, pool the children of all picked domains, sort them and fill all
       slices greedily (Kueue does not cap a child by its parent's pick here).
    2. At and below the slice level, for each picked domain in turn, fill exactly the pods
       assigned to it over its children in ascending (pods, values) order: below the slice level
       every child has 0 slices, so both orders agree, and the first child holding the
       remainder is also the best fit.
    """
    while level_idx < plan.slice_level_idx:
        lists = [tree.children(key[2]) for key, taken in chosen if taken > 0]
        chosen = _choose_slices(lists, plan.slice_count, plan.least_free)
        level_idx += 1
    current = [(key[2], taken * plan.slice_size) for key, taken in chosen]
    while level_idx < tree.depth - 1:
        below: list[tuple[Values, int]] = []
        for values, pods in current:
            if pods > 0:
                below.extend(_fill(tree.children(values), pods))
        current = below
        level_idx += 1
    return current


def _fill(children: list[Key], pods: int) -> list[tuple[Values, int]]:
    """Ascending walk: each child takes all its pods until one holds the rest.

    The parent's pods are the sum of its children's, so the walk always ends in a pick."""
    picked = []
    for _, capacity, values in children:
        if capacity >= pods:
            picked.append((values, pods))
            return picked
        picked.append((values, capacity))
        pods -= capacity
    raise AssertionError("unreachable: a domain's pods are the sum of its children's")
