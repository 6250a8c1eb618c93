"""Pod-set groups in the placer: a leader and its workers chosen and bound as one unit.

Kueue groups the topology-aware pod sets of one flavor by ``podSetGroupName``
(``FindTopologyAssignmentsForFlavor``): a group of two is placed together, its pod set with
fewer pods (the second on a tie) being the leader; a pod set alone in its group, or one
admitted with 0 pods (Kueue skips those), is placed as any other. Groups here are keyed by
topology and group name, which is the flavor's grouping whenever the flavor names the topology.

A group's capacities are read from scratch on each attempt (every node with room for a worker
or the leader; the workers beside the leader are probed by binding it and giving it back), not
from the live views: groups are rare, and the tree they need (per domain, the least loss of a
child that may take the leader) would need its own incremental structure. The cost is
O(nodes with room × levels) per attempt, about 3 ms per 500 such nodes (a single pod set's gang
costs some 50 µs at any size).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuq.core.placement.capacity import PodShape
from gpuq.core.topology import TopologyAssignment, TopologyFailure
from gpuq.core.topology_groups import HostRoom, assign_group
from gpuq.core.topology_tree import Values

if TYPE_CHECKING:
    from gpuq.core.placement.engine import (
        PlacementFailure,
        Placer,
        PodBinding,
        PodSetPlacement,
        WorkloadPlacement,
        _PodSetRequest,
    )

Unit = tuple["_PodSetRequest", ...]
"""What the placer places in one step: one pod set, or a group's (workers, leader)."""

_PROBE = "\x00gpuq/leader-probe"  # a pod name no workload can have


def placement_units(key: str, requests: Sequence[_PodSetRequest]) -> list[Unit] | PlacementFailure | None:
    """The workload's pod sets in order, each group as one (workers, leader) unit at its first
    member; None when no two pod sets form a group (the placer's plain path).

    A group of more than two pod sets, or of two with more than one pod each, fails with the
    message of Kueue's validation (which rejects such workloads before they are queued).
    """
    groups: dict[tuple[str, str], list[_PodSetRequest]] = {}
    for request in requests:
        group = _group_key(request)
        if group is not None:
            groups.setdefault(group, []).append(request)
    if not any(len(members) > 1 for members in groups.values()):
        return None
    units: list[Unit] = []
    for request in requests:
        group = _group_key(request)
        members = groups.get(group) if group is not None else None
        if members is None or len(members) == 1:
            units.append((request,))
        elif request is members[0]:
            assert group is not None
            pair = _workers_and_leader(key, group[1], members)
            if not isinstance(pair, tuple):
                return pair
            units.append(pair)
    return units


def place_units(
    placer: Placer,
    key: str,
    requests: Sequence[_PodSetRequest],
    units: list[Unit] | PlacementFailure,
    explain: bool,
) -> WorkloadPlacement | PlacementFailure:
    """:meth:`Placer.place` for a workload with a group: every unit bound, or none (rolled back).

    The placement lists the pod sets in the workload's order, whatever the order of the units.
    """
    from gpuq.core.placement.engine import PlacementFailure, WorkloadPlacement

    if isinstance(units, PlacementFailure):
        return units
    taken: list[PodBinding] = []
    placed: dict[str, PodSetPlacement] = {}
    for unit in units:
        outcome = (
            placer._place_pod_set(key, unit[0], taken, explain)
            if len(unit) == 1
            else place_group(placer, key, unit[0], unit[1], taken)
        )
        if isinstance(outcome, PlacementFailure):
            placer._unbind(taken)
            return outcome
        for done in outcome if isinstance(outcome, tuple) else (outcome,):
            placed[done.name] = done
    result = WorkloadPlacement(key, tuple(placed[request.pod_set.name] for request in requests))
    placer.placements[key] = result
    return result


def _group_key(request: _PodSetRequest) -> tuple[str, str] | None:
    wants = request.pod_set.topology
    if wants is None or not wants.group or request.topology is None:
        return None
    if request.recorded is not None or request.count == 0:
        return None
    return request.topology[0], wants.group


def _workers_and_leader(
    key: str, group: str, members: list[_PodSetRequest]
) -> tuple[_PodSetRequest, _PodSetRequest] | PlacementFailure:
    """Kueue's ``findLeaderAndWorkers``: the first member leads unless it has more pods."""
    from gpuq.core.placement.engine import PlacementFailure

    first = members[0].pod_set.name
    if len(members) != 2:
        message = f"can only define groups of exactly 2 pod sets, got {len(members)} in group {group!r}"
        return PlacementFailure(key, first, "TopologyPlacementFailed", message)
    workers, leader = members
    if leader.count > workers.count:
        workers, leader = leader, workers
    if leader.count != 1:
        message = (
            "can only define groups where at least one pod set has only 1 replica, "
            f"got {workers.count} and {leader.count} replicas in group {group!r}"
        )
        return PlacementFailure(key, first, "TopologyPlacementFailed", message)
    return workers, leader


def place_group(
    placer: Placer, key: str, workers: _PodSetRequest, leader: _PodSetRequest, taken: list[PodBinding]
) -> tuple[PodSetPlacement, PodSetPlacement] | PlacementFailure:
    """Choose the group's nodes (:func:`gpuq.core.topology_groups.assign_group`) and bind them.

    1. Read each node's room for the group (:func:`_rooms`).
    2. Place the leader and workers together on the workers' request, or fail with Kueue's words.
    3. Bind the leader first (its node's room for workers was counted beside it), then the
       workers; whatever is bound is appended to ``taken``, for the caller's rollback.
    """
    from gpuq.core.placement.engine import PlacementFailure

    assert workers.topology is not None
    topology_name, levels = workers.topology
    rooms = _rooms(placer, workers, leader, levels)
    outcome = assign_group(
        levels, rooms, workers.count, workers.pod_set.topology, topology_name=topology_name
    )
    if isinstance(outcome, TopologyFailure):
        return PlacementFailure(key, workers.pod_set.name, "TopologyPlacementFailed", outcome.reason)
    bound_leader = _bind(placer, key, leader, ((outcome.leader_host, 1),), outcome.leader, taken)
    if isinstance(bound_leader, PlacementFailure):
        return bound_leader
    bound_workers = _bind(placer, key, workers, outcome.worker_hosts, outcome.workers, taken)
    if isinstance(bound_workers, PlacementFailure):
        return bound_workers
    return bound_leader, bound_workers


def _rooms(
    placer: Placer, workers: _PodSetRequest, leader: _PodSetRequest, levels: tuple[str, ...]
) -> dict[Values, list[HostRoom]]:
    """Per leaf, every node passing the workers' or the leader's filters with room for one of them.

    Workers are counted exactly (as many as fit), as for a single pod set; the leader
    is checked against its own filters and shape, and the workers beside it are counted with it
    bound (then given back: the node ends as it was, and the index never sees the probe).
    """
    positions = placer._positions(levels)
    worker_fit = dict(placer._fits(workers))
    leader_nodes = {node for node, _ in placer._fits(leader)}
    probed: dict[tuple[object, ...], int] = {}
    rooms: dict[Values, list[HostRoom]] = {}
    for node in [*worker_fit, *(n for n in leader_nodes if n not in worker_fit)]:
        leaf = positions.get(node)
        if leaf is None:  # Kueue ignores nodes without every level label
            continue
        fit = worker_fit.get(node, 0)
        holds_leader = node in leader_nodes
        beside = _beside_leader(placer, node, leader.shape, workers, probed) if holds_leader and fit else 0
        rooms.setdefault(leaf, []).append(HostRoom(node, fit, holds_leader, beside))
    return rooms


def _beside_leader(
    placer: Placer,
    node: str,
    leader: PodShape,
    workers: _PodSetRequest,
    probed: dict[tuple[object, ...], int],
) -> int:
    """Workers that fit on ``node`` once the leader is bound there with the GPUs it would get.

    Nodes in the same free state answer alike when the leader takes no GPU device (which GPUs
    it gets could depend on the policy and the pods bound), so those answers are remembered.
    """
    capacity = placer.nodes[node]
    key: tuple[object, ...] | None = None
    if not (leader.gpu.count and capacity.per_device):
        key = (
            capacity.per_device,
            tuple(capacity.free.items()),
            tuple(capacity.gpu_milli),
            tuple(capacity.gpu_memory),
        )
        if key in probed:
            return probed[key]
    capacity.take(_PROBE, leader, placer.chooser.pick_gpus(capacity, leader))
    try:
        beside = capacity.fit_count(workers.shape, sys.maxsize)
    finally:
        capacity.give(_PROBE)
    if key is not None:
        probed[key] = beside
    return beside


def _bind(
    placer: Placer,
    key: str,
    request: _PodSetRequest,
    hosts: Sequence[tuple[str, int]],
    assignment: TopologyAssignment,
    taken: list[PodBinding],
) -> PodSetPlacement | PlacementFailure:
    """Bind ``pods`` per node in order; a node that no longer holds a pod fails the group."""
    from gpuq.core.placement.engine import PlacementFailure, PodSetPlacement

    name = request.pod_set.name
    bindings: list[PodBinding] = []
    for node, pods in hosts:
        for _ in range(pods):
            if placer.nodes[node].shortage(request.shape) is not None:
                taken.extend(bindings)
                message = f"node {node} no longer holds a pod of pod set {name}"
                return PlacementFailure(key, name, "Unschedulable", message)
            bindings.append(placer._bind(f"{key}/{name}-{len(bindings)}", node, request.shape))
    taken.extend(bindings)
    return PodSetPlacement(name, tuple(bindings), assignment)
