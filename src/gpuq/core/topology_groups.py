"""Cross-pod-set Topology Aware Scheduling: the pod sets of a workload that share a ``podset-group-name``.

Two pod sets of a workload sharing a group name (a LeaderWorkerSet or JobSet leader of one pod
and its workers) are placed as one unit, as Kueue's ``findTopologyAssignment`` does when it is
given a leader (``pkg/cache/scheduler/tas_flavor_snapshot.go``): the leader and every worker go
to one domain of the requested level, and a domain counts the workers it holds *beside* the
leader, whose pod shape and node filters may differ from theirs. Level, mode and slicing are
the workers' request (Kueue's validation makes the leader's the same).

The nodes are a level below the topology's lowest, as Kueue's hostname level (virtual when the
topology lacks it): the leader needs one node, so a leaf's room beside the leader depends on
which of its nodes takes it.

1. Resolve the workers' request (:func:`gpuq.core.topology.resolve`).
2. Phase 1 (``fillInCounts`` with a leader, :func:`_build`): per node, the workers that fit,
   whether the leader fits and the workers that fit beside it; per domain, the workers (summed),
   the slices, whether a node below holds the leader, and the workers beside it: the sum less the
   smallest loss of a child holding the leader (none such: 0).
3. Phase 2a (``findLevelWithFitDomains``, :func:`_fit_domains`): the tightest domain holding
   the leader and every slice beside it; else Required fails, Preferred climbs a level, and at the
   top (or Unconstrained) the leader's domain is taken first, then the workers spread greedily.
4. Phase 2b (``updateCountsToMinimumGeneric``, :func:`_descend`): down to the nodes, each step
   giving the leader to the first child, in order, whose loss its siblings make up.
5. The leader's node and the workers' nodes, each pod set's assignment summed per leaf.

Orders: workers as the single pod set's (:mod:`gpuq.core.topology`); leader first: (holds the
leader, slices beside it descending — ascending for LeastFreeCapacity —, workers beside it
ascending, values). Only domains where a worker or the leader fits are listed.

Kueue's main branch is followed, including its fixes of earlier releases (a domain that cannot
hold the leader is never its best fit; a leader's domain that takes part of the workers keeps
the leader). Without partial slices, multi-layer slices, spreading, node-affinity scores or
balanced placement, like the single pod set's placement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuq.core.model import TopologyRequest
from gpuq.core.nodes import HOSTNAME_LABEL
from gpuq.core.topology import (
    TopologyAssignment,
    TopologyDomain,
    TopologyFailure,
    TopologyPlan,
    not_fit,
    resolve,
)
from gpuq.core.topology_tree import Values


@dataclass(frozen=True, slots=True)
class HostRoom:
    """One node of a leaf, for a group: workers that fit alone, and beside the leader if it fits.

    ``workers_beside_leader`` is read only when ``leader`` is True; it is at most ``workers``.
    """

    name: str
    workers: int
    leader: bool = False
    workers_beside_leader: int = 0


@dataclass(frozen=True, slots=True)
class GroupAssignment:
    """Where a group goes: each pod set's ``topologyAssignment`` and the nodes they use.

    ``worker_hosts`` lists (node, workers) with workers > 0, sorted by the node's leaf values then
    name; ``leader_host`` is the leader's node, which may also hold workers.
    """

    leader: TopologyAssignment
    workers: TopologyAssignment
    leader_host: str
    worker_hosts: tuple[tuple[str, int], ...]


class _Domain:
    """Phase-1 capacities of a domain; ``*_wl`` are the workers (slices) beside the leader."""

    __slots__ = ("children", "leader", "pods", "pods_wl", "slices", "slices_wl", "values")

    def __init__(self, values: Values) -> None:
        self.values = values
        self.children: list[_Domain] = []
        self.leader = False
        self.pods = self.pods_wl = self.slices = self.slices_wl = 0


_Pick = tuple[_Domain, int, bool]
"""A domain given pods (workers) and, if True, the leader."""


def assign_group(
    levels: tuple[str, ...],
    leaves: Mapping[Values, Sequence[HostRoom]],
    count: int,
    request: TopologyRequest | None,
    *,
    topology_name: str = "default",
    profile_least_free_for_unconstrained: bool = True,
) -> GroupAssignment | TopologyFailure:
    """Place one leader and ``count`` workers together, or say why not (Kueue's words).

    ``leaves`` maps each leaf (values, widest level first) to its nodes; ``request`` is the
    workers' (None: implied). Never puts more workers on a node than it holds (beside the leader
    on the leader's node); Required keeps both pod sets in one domain of its level. From scratch:
    O(nodes × levels + domains log domains) per call. Steps: see the module.
    """
    plan = resolve(
        levels, count, request, profile_least_free_for_unconstrained=profile_least_free_for_unconstrained
    )
    if isinstance(plan, TopologyFailure):
        return plan
    tree = _build(levels, leaves, plan)
    found = _fit_domains(tree, plan, topology_name)
    if isinstance(found, TopologyFailure):
        return found
    fit_level_idx, chosen = found
    return _result(levels, _descend(tree, chosen, fit_level_idx, plan))


# ------------------------------------------------------------------------------------- phase 1
def _build(
    levels: tuple[str, ...], leaves: Mapping[Values, Sequence[HostRoom]], plan: TopologyPlan
) -> list[list[_Domain]]:
    """Phase 1: the listed domains of every level, nodes last (values: leaf values + name).

    1. Per leaf, a domain per node holding a worker or the leader; the leaf, if any, linked to
       its ancestors.
    2. From the leaves up, each domain's capacities from its children (:func:`_sum_children`).
    """
    depth = len(levels) + 1
    domains: list[dict[Values, _Domain]] = [{} for _ in range(depth)]
    for leaf, hosts in leaves.items():
        if len(leaf) != len(levels):
            raise ValueError(f"leaf {leaf} needs one value per level ({len(levels)})")
        nodes = [_node(leaf, host) for host in hosts if host.workers > 0 or host.leader]
        if nodes:
            domains[-1].update((node.values, node) for node in nodes)
            parent = domains[-2][leaf] = _Domain(leaf)
            parent.children = nodes
            _link(domains, parent)
    leaf_is_node = levels[-1] == HOSTNAME_LABEL
    for idx in range(depth - 2, -1, -1):
        for dom in domains[idx].values():
            _sum_children(dom, idx == plan.slice_level_idx, plan.slice_size)
            if leaf_is_node and idx == depth - 2 and not dom.leader:
                dom.pods_wl, dom.slices_wl = dom.pods, dom.slices
    return [list(level.values()) for level in domains]


def _node(leaf: Values, host: HostRoom) -> _Domain:
    """A node's domain. Kueue's node leaf: without the leader, its workers beside it are its workers."""
    node = _Domain((*leaf, host.name))
    node.pods, node.leader = host.workers, host.leader
    node.pods_wl = min(host.workers_beside_leader, host.workers) if host.leader else host.workers
    return node


def _link(domains: list[dict[Values, _Domain]], leaf: _Domain) -> None:
    """Attach a new leaf to its ancestors, creating those not seen yet."""
    child = leaf
    for idx in range(len(leaf.values) - 2, -1, -1):
        values = child.values[: idx + 1]
        parent = domains[idx].get(values)
        known = parent is not None
        if parent is None:
            parent = domains[idx][values] = _Domain(values)
        parent.children.append(child)
        if known:
            return
        child = parent


def _sum_children(dom: _Domain, at_slice_level: bool, slice_size: int) -> None:
    """``fillInCountsHelper``: workers and slices summed; beside the leader, the smallest loss.

    Only children holding the leader may take it, so only their losses count; a domain where no
    child does holds no worker beside the leader. At the slice level slices are recounted from
    pods; below it every child has none, so the sums are 0.
    """
    pods = slices = 0
    pods_loss = slices_loss = -1  # -1: no child holds the leader
    for child in dom.children:
        pods += child.pods
        slices += child.slices
        if child.leader:
            loss = child.pods - child.pods_wl
            pods_loss = loss if pods_loss < 0 else min(pods_loss, loss)
            loss = child.slices - child.slices_wl
            slices_loss = loss if slices_loss < 0 else min(slices_loss, loss)
    dom.pods, dom.slices = pods, slices
    if pods_loss >= 0:
        dom.leader, dom.pods_wl, dom.slices_wl = True, pods - pods_loss, slices - slices_loss
    if at_slice_level:
        dom.slices, dom.slices_wl = pods // slice_size, dom.pods_wl // slice_size


# ------------------------------------------------------------------------------------ ordering
def _worker_key(dom: _Domain, least_free: bool) -> tuple[int, int, Values]:
    return (dom.slices if least_free else -dom.slices, dom.pods, dom.values)


def _leader_key(dom: _Domain, least_free: bool) -> tuple[int, int, int, Values]:
    return (-dom.leader, dom.slices_wl if least_free else -dom.slices_wl, dom.pods_wl, dom.values)


def _room(dom: _Domain, slices: bool, beside_leader: bool) -> int:
    if slices:
        return dom.slices_wl if beside_leader else dom.slices
    return dom.pods_wl if beside_leader else dom.pods


def _best_fit(doms: Sequence[_Domain], needed: int, slices: bool, leader: bool) -> _Domain:
    """``findBestFitDomainBy``: the first domain with the least room that still holds ``needed``.

    With the leader, only domains holding it qualify and their room is beside it. None holds
    ``needed``: the first domain, as the caller ordered them.
    """
    best: _Domain | None = None
    best_room = 0
    for dom in doms:
        if leader and not dom.leader:
            continue
        room = _room(dom, slices, leader)
        if room >= needed and (best is None or room < best_room):
            best, best_room = dom, room
    return doms[0] if best is None else best


def _leader_first(doms: list[_Domain], needed: int, slices: bool) -> list[_Domain]:
    """``prioritizeLeaderDomain``: move to the front the first domain, in order, that may take
    the leader while the room of all of them, less its loss, still holds ``needed``.

    Phase 1 counted a parent's room beside the leader with its least-loss child; this keeps
    the descent from giving the leader to a child whose loss the others cannot make up.
    """
    if len(doms) < 2:
        return doms
    available = sum(_room(dom, slices, False) for dom in doms)
    for idx, dom in enumerate(doms):
        loss = _room(dom, slices, False) - _room(dom, slices, True)
        if dom.leader and available - loss >= needed:
            return doms if idx == 0 else [dom, *doms[:idx], *doms[idx + 1 :]]
    return doms


# ------------------------------------------------------------------------------------ phase 2a
def _fit_domains(
    tree: list[list[_Domain]], plan: TopologyPlan, topology_name: str
) -> tuple[int, list[_Domain]] | TopologyFailure:
    """Phase 2a: the fit level and its domains, the leader's first.

    1. In leader order, a domain fits when it holds the leader and every slice beside it; the
       chosen one is the tightest (BestFit and LeastFreeCapacity agree on it).
    2. None fits: Required fails with the slices of the first domain in leader order (Kueue's
       number); Preferred retries a level up; at the widest level (or when unconstrained) the
       group spreads (:func:`_spread`).
    """
    needed = plan.slice_count
    for level_idx in range(plan.level_idx, -1, -1):
        ordered = sorted(tree[level_idx], key=lambda dom: _leader_key(dom, plan.least_free))
        if any(dom.leader and dom.slices_wl >= needed for dom in ordered):
            if plan.least_free:
                return level_idx, [next(d for d in ordered if d.leader and d.slices_wl >= needed)]
            return level_idx, [_best_fit(ordered, needed, slices=True, leader=True)]
        if plan.required:
            top = ordered[0].slices if ordered else 0
            return not_fit(topology_name, top, needed, plan.slice_size)
        if level_idx > 0 and not plan.unconstrained:
            continue
        spread = _spread(ordered, plan, topology_name)
        return spread if isinstance(spread, TopologyFailure) else (level_idx, spread)
    raise AssertionError("unreachable: the widest level always decides")


def _spread(
    ordered: list[_Domain], plan: TopologyPlan, topology_name: str
) -> list[_Domain] | TopologyFailure:
    """Several domains of one level: the leader's domain first, then the workers greedily.

    1. The leader goes to the first domain (:func:`_leader_first`) with the slices beside it
       (BestFit: the tightest domain holding the rest, if it holds them all); none holds the
       leader: "doesn't allow to fit any".
    2. The other domains in worker order each give all their slices, BestFit taking the
       tightest for the remainder; fail with the slices found if they fall short.
    """
    needed, least_free = plan.slice_count, plan.least_free
    ordered = _leader_first(ordered, needed, slices=True)
    if not ordered or not ordered[0].leader:
        return not_fit(topology_name, 0, needed, plan.slice_size)
    first = ordered[0]
    if not least_free and first.slices_wl >= needed:
        first = _best_fit(ordered, needed, slices=True, leader=True)
    chosen, remaining = [first], needed - first.slices_wl
    rest = sorted(ordered[1:], key=lambda dom: _worker_key(dom, least_free))
    for idx, dom in enumerate(rest):
        if remaining <= 0:
            break
        if not least_free and dom.slices >= remaining:
            dom = _best_fit(rest[idx:], remaining, slices=True, leader=False)
        chosen.append(dom)
        remaining -= dom.slices
    if remaining > 0:
        return not_fit(topology_name, needed - remaining, needed, plan.slice_size)
    return chosen


# ------------------------------------------------------------------------------------ phase 2b
def _descend(
    tree: list[list[_Domain]], chosen: list[_Domain], level_idx: int, plan: TopologyPlan
) -> list[_Pick]:
    """Phase 2b: from the fit level to the nodes; returns the nodes picked.

    1. Distribute the group over the chosen domains.
    2. Above the slice level, pool the children of every domain picked, in worker order, and
       distribute the whole group again (Kueue does not hold a child to its parent's share).
    3. From the slice level down, each picked domain's own pods and leader over its children.
    """
    size, least_free = plan.slice_size, plan.least_free
    picks = _distribute(chosen, plan.count, True, size, least_free, slices=True)
    while level_idx < plan.slice_level_idx:
        pooled = sorted(
            (c for dom, _, _ in picks for c in dom.children), key=lambda d: _worker_key(d, least_free)
        )
        picks = _distribute(pooled, plan.count, True, size, least_free, slices=True)
        level_idx += 1
    while level_idx < len(tree) - 1:
        below: list[_Pick] = []
        for dom, pods, leader in picks:
            if pods or leader:
                children = sorted(dom.children, key=lambda d: _worker_key(d, least_free))
                below.extend(_distribute(children, pods, leader, 1, least_free, slices=False))
        picks = below
        level_idx += 1
    return picks


def _distribute(
    doms: list[_Domain], pods: int, leader: bool, unit: int, least_free: bool, *, slices: bool
) -> list[_Pick]:
    """``updateCountsToMinimumGeneric``: give ``pods`` (in units of ``unit``) and the leader to
    ``doms`` in order; returns every domain visited with what it got.

    1. With the leader, move its domain to the front (:func:`_leader_first`).
    2. While the leader is to place, a domain gives its room beside the leader and takes the
       leader if it holds it; afterwards each gives all its room.
    3. BestFit: once a domain holds the rest (and the leader, if still to place), the tightest
       domain left that does takes it instead and the walk ends.
    """
    remaining = pods // unit
    if leader:
        doms = _leader_first(doms, remaining, slices)
    picks: list[_Pick] = []
    for idx, dom in enumerate(doms):
        if not least_free and _room(dom, slices, leader) >= remaining and (dom.leader or not leader):
            dom = _best_fit(doms[idx:], remaining, slices, leader)
        room, takes_leader = _room(dom, slices, leader), leader and dom.leader
        if room >= remaining and (takes_leader or not leader):
            picks.append((dom, remaining * unit, takes_leader))
            return picks
        picks.append((dom, min(room, remaining) * unit, takes_leader))
        remaining -= min(room, remaining)
        leader = leader and not takes_leader
    raise AssertionError("unreachable: phase 1 counted the room the descent hands out")


def _result(levels: tuple[str, ...], picks: list[_Pick]) -> GroupAssignment:
    """Each pod set's assignment (pods summed per leaf, sorted by values) and its nodes."""
    leaders = [dom for dom, _, leader in picks if leader]
    if len(leaders) != 1:
        raise AssertionError(f"the descent placed {len(leaders)} leaders")
    hosts = sorted((dom.values, pods) for dom, pods, _ in picks if pods > 0)
    per_leaf: dict[Values, int] = {}
    for values, pods in hosts:
        per_leaf[values[:-1]] = per_leaf.get(values[:-1], 0) + pods
    workers = TopologyAssignment(levels, tuple(TopologyDomain(leaf, n) for leaf, n in per_leaf.items()))
    leader = TopologyAssignment(levels, (TopologyDomain(leaders[0].values[:-1], 1),))
    return GroupAssignment(leader, workers, leaders[0].values[-1], tuple((v[-1], n) for v, n in hosts))
