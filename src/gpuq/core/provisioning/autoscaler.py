"""Node pool autoscaling: scale up for unschedulable pods, scale down idle nodes.

Pools are plain data (:class:`PoolSpec`, built from NodePool manifests by
:func:`gpuq.api.nodes_convert.pool_specs`); decisions are :class:`ScaleUp`, :class:`ScaleDown`
and :class:`NotScaled`, each with a reason a person can read.

:func:`plan_scale_up`, for each pending group in the order given:

1. list the pools whose nodes hold one pod of the group (``pools`` selects them by name when the
   group names some), ordered by ``(price per pod-hour, unknown last; pool name)``;
2. the headroom of a pool is the least of: ``max`` minus its nodes, each pool ``limits`` entry
   divided by a node's share of it, and the stock of its (machine type, zone, capacity type);
3. a gang (``all_or_nothing``) takes its nodes from the first pool whose headroom holds them all,
   or nothing; another group takes what the pools can give, first pool first;
4. headroom and stock used by one group are gone for the next (the plan is a what-if on copies:
   the inputs are never changed).

:func:`plan_scale_down` removes nodes empty for at least ``idleAfter`` (oldest idle first), never
below ``min``, within the pool's disruption budgets (:mod:`.disruption`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuq.core.provisioning.disruption import DisruptionPolicy, NodeState, allowed_disruptions
from gpuq.core.provisioning.options import PodGroup, Stock


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """A node pool as the autoscaler sees it. ``node_allocatable`` in core units; ``limits`` caps the
    whole pool's allocatable (Karpenter's ``spec.limits``); delays in seconds."""

    name: str
    machine_type: str
    zone: str = ""
    capacity_type: str = "on-demand"
    min_nodes: int = 0
    max_nodes: int = 0
    node_allocatable: Mapping[str, int] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)
    usd_per_node_hour: float | None = None
    provisioning_delay_s: float = 0.0
    scale_down_enabled: bool = True
    idle_after_s: float = 600.0
    disruption: DisruptionPolicy = field(default_factory=DisruptionPolicy)


@dataclass(frozen=True, slots=True)
class ScaleUp:
    """Add ``nodes`` to ``pool`` for ``group``; they are ready at ``ready_at``."""

    pool: str
    group: str
    nodes: int
    ready_at: float
    reason: str


@dataclass(frozen=True, slots=True)
class NotScaled:
    """Pods of ``group`` that no pool can take now: ``code`` (max, limits, stock, no-fit) and why."""

    group: str
    pods: int
    code: str
    reason: str


@dataclass(frozen=True, slots=True)
class ScaleUpPlan:
    scale_ups: tuple[ScaleUp, ...]
    not_scaled: tuple[NotScaled, ...]


def _per_pod_price(pool: PoolSpec, group: PodGroup) -> tuple[bool, float]:
    per_node = group.shape.per_node(pool.node_allocatable)
    if pool.usd_per_node_hour is None or per_node == 0:
        return (True, 0.0)
    return (False, pool.usd_per_node_hour / per_node)


def headroom(pool: PoolSpec, nodes_now: int, stock: Stock) -> tuple[int, str]:
    """Nodes the pool may still add and what binds it (``max``, ``limits[...]`` or ``stock``)."""
    room, why = pool.max_nodes - nodes_now, f"max {pool.max_nodes}"
    for resource, limit in sorted(pool.limits.items()):
        per_node = pool.node_allocatable.get(resource, 0)
        if per_node > 0:
            allowed = limit // per_node - nodes_now
            if allowed < room:
                room, why = allowed, f"limits[{resource}] {limit}"
    have = stock.available.get((pool.machine_type, pool.zone, pool.capacity_type))
    if have is not None and have < room:
        room, why = (
            have,
            f"stock {have} of {pool.machine_type} {pool.capacity_type} in {pool.zone or 'any zone'}",
        )
    return max(room, 0), why


def plan_scale_up(
    groups: Sequence[PodGroup],
    pools: Sequence[PoolSpec],
    nodes_now: Mapping[str, int],
    stock: Stock,
    now: float,
    pool_choice: Mapping[str, Sequence[str]] | None = None,
) -> ScaleUpPlan:
    """Scale-up decisions for ``groups`` (steps 1-4 of the module docstring).

    ``nodes_now`` maps pool name to its node count; ``pool_choice`` optionally restricts a group
    (by name) to some pools (from its node selector or ComputeClass).
    """
    counts = {p.name: nodes_now.get(p.name, 0) for p in pools}
    ups: list[ScaleUp] = []
    missed: list[NotScaled] = []
    for group in groups:
        allowed = (pool_choice or {}).get(group.name)
        fitting = [
            p
            for p in pools
            if group.shape.per_node(p.node_allocatable) > 0 and (allowed is None or p.name in allowed)
        ]
        fitting.sort(key=lambda p: (*_per_pod_price(p, group), p.name))
        if not fitting:
            missed.append(
                NotScaled(group.name, group.pods, "no-fit", f"no pool's node holds one pod of {group.name}")
            )
            continue
        got, stock = _place(group, fitting, counts, stock, now)
        ups += got
        placed = sum(
            min(u.nodes * group.shape.per_node(_pool(fitting, u.pool).node_allocatable), group.pods)
            for u in got
        )
        if placed < group.pods:
            missed.append(_why_not(group, group.pods - placed, fitting, counts, stock))
    return ScaleUpPlan(tuple(ups), tuple(missed))


def _pool(pools: Sequence[PoolSpec], name: str) -> PoolSpec:
    return next(p for p in pools if p.name == name)


def _place(
    group: PodGroup, pools: Sequence[PoolSpec], counts: dict[str, int], stock: Stock, now: float
) -> tuple[list[ScaleUp], Stock]:
    """Steps 3-4: nodes per pool for one group; updates ``counts`` and returns the stock left."""
    left = group.pods
    ups: list[ScaleUp] = []
    for pool in pools:
        per_node = group.shape.per_node(pool.node_allocatable)
        needed = math.ceil(left / per_node)
        room, _ = headroom(pool, counts[pool.name], stock)
        if group.all_or_nothing and room < needed:
            continue
        nodes = min(needed, room)
        if nodes <= 0:
            continue
        counts[pool.name] += nodes
        stock = _take(stock, pool, nodes)
        pods = min(left, nodes * per_node)
        reason = (
            f"{pods} pod(s) of {group.name} unschedulable: add {nodes} node(s) to {pool.name} "
            f"({pool.machine_type} {pool.capacity_type}, "
            f"now {counts[pool.name] - nodes}, max {pool.max_nodes})"
        )
        ups.append(ScaleUp(pool.name, group.name, nodes, now + pool.provisioning_delay_s, reason))
        left -= pods
        if left <= 0:
            break
    return ups, stock


def _take(stock: Stock, pool: PoolSpec, nodes: int) -> Stock:
    key = (pool.machine_type, pool.zone, pool.capacity_type)
    have = stock.available.get(key)
    return stock if have is None else Stock({**stock.available, key: max(have - nodes, 0)})


def _why_not(
    group: PodGroup, pods: int, pools: Sequence[PoolSpec], counts: Mapping[str, int], stock: Stock
) -> NotScaled:
    binds = [f"{p.name}: {headroom(p, counts[p.name], stock)[1]}" for p in pools]
    code = (
        "stock"
        if any("stock" in b for b in binds)
        else ("limits" if any("limits" in b for b in binds) else "max")
    )
    gang = "all-or-nothing: " if group.all_or_nothing else ""
    return NotScaled(
        group.name, pods, code, f"{gang}{pods} pod(s) of {group.name} cannot get nodes ({'; '.join(binds)})"
    )


# --- scale down ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScaleDown:
    """Remove ``node`` from ``pool``."""

    pool: str
    node: str
    reason: str


def plan_scale_down(
    nodes: Sequence[NodeState],
    pools: Sequence[PoolSpec],
    now: float,
    sizes: Mapping[str, tuple[int, int]] | None = None,
) -> tuple[ScaleDown, ...]:
    """Idle nodes to remove: empty for ``idle_after_s`` or longer, oldest idle first
    (key ``(idle_since, name)``), never below ``min_nodes``, within the disruption budgets.

    ``sizes`` (pool -> nodes, nodes being deleted) lets a caller pass only the idle nodes instead
    of every node of a large pool."""
    out: list[ScaleDown] = []
    for pool in sorted(pools, key=lambda p: p.name):
        mine = [n for n in nodes if n.pool == pool.name]
        if not pool.scale_down_enabled:
            continue
        size, deleting = (
            sizes[pool.name]
            if sizes is not None and pool.name in sizes
            else (len(mine), sum(n.deleting for n in mine))
        )
        idle = sorted(
            (
                n
                for n in mine
                if not n.pods and n.idle_since is not None and now - n.idle_since >= pool.idle_after_s
            ),
            key=lambda n: (n.idle_since, n.name),
        )
        above_min = size - pool.min_nodes
        budget = allowed_disruptions(pool.disruption, size, deleting, "Empty", now)
        for node in idle[: max(min(above_min, budget), 0)]:
            idle_s = now - (node.idle_since or now)
            reason = (
                f"{node.name} idle for {idle_s:.0f}s >= idleAfter {pool.idle_after_s:.0f}s: remove "
                f"({size} nodes, min {pool.min_nodes})"
            )
            out.append(ScaleDown(pool.name, node.name, reason))
    return tuple(out)
