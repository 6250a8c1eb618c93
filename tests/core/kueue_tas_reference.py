"""The topology placement of gpuq before domain trees (commit 1e62e13), kept verbatim as an oracle.

``assign`` rebuilds the whole domain tree from a flat leaf mapping on every call, exactly as the
code that was reviewed against Kueue's ``findTopologyAssignment``; the incremental placement
must keep making its decisions. Only the result types come from :mod:`gpuq.core.topology`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpuq.core.model import TopologyMode, TopologyRequest
from gpuq.core.topology import TopologyAssignment, TopologyDomain, TopologyFailure


class _Domain:
    """Scratch state of one domain during one ``assign`` call (Kueue's ``domain``).

    ``state`` is the pods that fit (phase 1), then the pods assigned (phase 2);
    ``slice_state`` likewise in slices.
    """

    __slots__ = ("children", "slice_state", "state", "values")

    def __init__(self, values: tuple[str, ...]) -> None:
        self.values = values
        self.children: list[_Domain] = []
        self.state = 0
        self.slice_state = 0


@dataclass(frozen=True, slots=True)
class _Plan:
    """A validated request, in level indexes (0 is the widest level)."""

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


_Chosen = list[tuple[_Domain, int]]
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
    2. Build the domain tree and fill in capacities (phase 1).
    3. Find the fit level and its domains (phase 2a).
    4. Descend to the leaves (phase 2b) and report the leaves used, sorted by values.
    """
    plan = _plan(levels, count, request, profile_least_free_for_unconstrained)
    if isinstance(plan, TopologyFailure):
        return plan
    if plan.count == 0:
        return TopologyAssignment(levels, ())
    per_level = _fill_in_counts(levels, leaves, plan)
    found = _find_level_with_fit_domains(per_level, plan, topology_name)
    if isinstance(found, TopologyFailure):
        return found
    fit_level_idx, chosen = found
    used = _descend(_apply_slices(chosen, plan.slice_size), fit_level_idx, len(levels), plan)
    used.sort(key=lambda d: d.values)
    return TopologyAssignment(levels, tuple(TopologyDomain(d.values, d.state) for d in used if d.state > 0))


def fits(
    levels: tuple[str, ...],
    leaves: Mapping[tuple[str, ...], int],
    count: int,
    request: TopologyRequest | None,
    *,
    profile_least_free_for_unconstrained: bool = True,
) -> bool:
    """Whether ``assign`` would succeed; skips the descent, which cannot fail once phase 2a has."""
    plan = _plan(levels, count, request, profile_least_free_for_unconstrained)
    if isinstance(plan, TopologyFailure):
        return False
    if plan.count == 0:
        return True
    per_level = _fill_in_counts(levels, leaves, plan)
    return not isinstance(_find_level_with_fit_domains(per_level, plan, "default"), TopologyFailure)


def _plan(
    levels: tuple[str, ...], count: int, request: TopologyRequest | None, least_free_profile: bool
) -> _Plan | TopologyFailure:
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
    return _Plan(
        count=count,
        level_idx=levels.index(level),
        slice_level_idx=levels.index(slice_level),
        slice_size=slice_size,
        required=mode is TopologyMode.REQUIRED,
        unconstrained=unconstrained,
        least_free=unconstrained and least_free_profile,
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


def _fill_in_counts(
    levels: tuple[str, ...], leaves: Mapping[tuple[str, ...], int], plan: _Plan
) -> list[list[_Domain]]:
    """Phase 1: the domain tree, per level, with pod and slice capacities filled in.

    1. Create each leaf with positive capacity and its ancestors (domains exist only through
       leaves; zero-capacity leaves never change a placement, so they are dropped).
    2. Bottom-up, a parent's pods are the sum of its children's; slices are ``pods // size`` at
       the slice level, the children's sum above it and 0 below it.
    """
    depth = len(levels)
    by_values: list[dict[tuple[str, ...], _Domain]] = [{} for _ in levels]
    for values, capacity in leaves.items():
        if len(values) != depth:
            raise ValueError(f"leaf {values} needs one value per level {levels}")
        if capacity <= 0:
            continue
        leaf = by_values[-1][values] = _Domain(values)
        leaf.state = capacity
        child = leaf
        for idx in range(depth - 2, -1, -1):
            parent = by_values[idx].get(values[: idx + 1])
            if parent is not None:
                parent.children.append(child)
                break  # its ancestors are already linked
            parent = by_values[idx][values[: idx + 1]] = _Domain(values[: idx + 1])
            parent.children.append(child)
            child = parent
    per_level = [list(level.values()) for level in by_values]
    for idx in range(depth - 1, -1, -1):
        for dom in per_level[idx]:
            if dom.children:
                dom.state = sum(c.state for c in dom.children)
                dom.slice_state = sum(c.slice_state for c in dom.children)
            if idx == plan.slice_level_idx:
                dom.slice_state = dom.state // plan.slice_size
    return per_level


def _sorted(domains: list[_Domain], least_free: bool) -> list[_Domain]:
    """Kueue's ``sortedDomains``: (slices desc, or asc for LeastFreeCapacity; pods asc; values asc)."""
    sign = 1 if least_free else -1
    return sorted(domains, key=lambda d: (sign * d.slice_state, d.state, d.values))


def _choose(domains: list[_Domain], needed: int, best_fit: bool, units: Callable[[_Domain], int]) -> _Chosen:
    """Greedy fill in the given order, as Kueue's ``updateCountsToMinimum`` picks domains.

    1. Walk ``domains``; each takes all its ``units`` until one can hold the remainder.
    2. With best fit, the one holding the remainder is the first of the smallest among the
       rest that can (``findBestFitDomain``); it takes only the remainder.
    Returns the picks; their units sum to less than ``needed`` only when all domains fall short.
    """
    chosen: _Chosen = []
    remaining = needed
    for idx, dom in enumerate(domains):
        if units(dom) >= remaining:
            if best_fit:
                dom = min((d for d in domains[idx:] if units(d) >= remaining), key=units)
            chosen.append((dom, remaining))
            return chosen
        chosen.append((dom, units(dom)))
        remaining -= units(dom)
    return chosen


def _slices(d: _Domain) -> int:
    return d.slice_state


def _pods(d: _Domain) -> int:
    return d.state


def _find_level_with_fit_domains(
    per_level: list[list[_Domain]], plan: _Plan, topology_name: str
) -> tuple[int, _Chosen] | TopologyFailure:
    """Phase 2a: the fit level and its chosen domains with the slices each takes.

    1. Sort the level's domains. BestFit: the smallest domain holding every slice.
       LeastFreeCapacity: the first domain in ascending order holding every slice.
    2. None holds them: Required fails with the largest domain's capacity; Preferred retries one
       level up; at the widest level (or when unconstrained) spread greedily over the sorted
       domains, best fit for the last one, failing if all of them together fall short.
    """
    needed, best_fit = plan.slice_count, not plan.least_free
    for level_idx in range(plan.level_idx, -1, -1):
        ordered = _sorted(per_level[level_idx], plan.least_free)
        holding = [d for d in ordered if d.slice_state >= needed]
        if holding:
            return level_idx, [(min(holding, key=_slices) if best_fit else holding[0], needed)]
        if plan.required:
            top = ordered[0].slice_state if ordered else 0
            return _not_fit(topology_name, top, needed, plan.slice_size)
        if level_idx == 0 or plan.unconstrained:
            chosen = _choose(ordered, needed, best_fit, _slices)
            placed = sum(taken for _, taken in chosen)
            if placed < needed:
                return _not_fit(topology_name, placed, needed, plan.slice_size)
            return level_idx, chosen
    raise AssertionError("unreachable: the widest level always decides")


def _not_fit(topology_name: str, fit: int, needed: int, slice_size: int) -> TopologyFailure:
    """Kueue's ``notFitMessage``; the name is quoted like Go's ``%q``."""
    unit = "pod" if slice_size == 1 else "slice"
    name = json.dumps(topology_name, ensure_ascii=False)
    if fit == 0:
        return TopologyFailure(f"topology {name} doesn't allow to fit any of {needed} {unit}(s)")
    return TopologyFailure(f"topology {name} allows to fit only {fit} out of {needed} {unit}(s)")


def _apply_slices(chosen: _Chosen, slice_size: int) -> list[_Domain]:
    """Record slice picks as assignments: ``slice_state`` slices, ``state`` their pods."""
    for dom, taken in chosen:
        dom.slice_state = taken
        dom.state = taken * slice_size
    return [dom for dom, _ in chosen]


def _descend(current: list[_Domain], level_idx: int, depth: int, plan: _Plan) -> list[_Domain]:
    """Phase 2b: from the fit level down to the leaves, returning the leaves picked.

    1. Above the slice level, pool the children of all picked domains, sort them and fill all
       slices greedily (Kueue does not cap a child by its parent's pick here).
    2. At and below the slice level, for each picked domain in turn, sort its children and fill
       exactly the pods assigned to it, one pod at a time.
    """
    best_fit = not plan.least_free
    while level_idx < min(depth - 1, plan.slice_level_idx):
        pooled = _sorted([c for d in current for c in d.children], plan.least_free)
        current = _apply_slices(_choose(pooled, plan.slice_count, best_fit, _slices), plan.slice_size)
        level_idx += 1
    while level_idx < depth - 1:
        below: list[_Domain] = []
        for parent in current:
            for dom, taken in _choose(
                _sorted(parent.children, plan.least_free), parent.state, best_fit, _pods
            ):
                dom.state = taken
                below.append(dom)
        current = below
        level_idx += 1
    return current
