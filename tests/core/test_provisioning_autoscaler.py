"""Node pool autoscaling: scale-up limits, gangs, scale-to-zero, idle scale-down, consolidation."""

from __future__ import annotations

import pytest

from gpuq.core.provisioning.autoscaler import PoolSpec, plan_scale_down, plan_scale_up
from gpuq.core.provisioning.disruption import (
    PDB,
    Budget,
    DisruptionPolicy,
    NodeState,
    PodInfo,
    plan_consolidation,
)
from gpuq.core.provisioning.options import GPU, PodGroup, PodShape, Stock

NODE = {"cpu": 96_000, "memory": 1024 * 2**30, GPU: 8, "pods": 110}


def pool(name: str = "h100", **kw: object) -> PoolSpec:
    fields: dict[str, object] = dict(
        machine_type="a3-highgpu-8g", zone="z1", max_nodes=4, node_allocatable=NODE, usd_per_node_hour=88.0
    )
    fields.update(kw)
    return PoolSpec(name, **fields)  # type: ignore[arg-type]


def group(pods: int, gpus: int = 8, gang: bool = False) -> PodGroup:
    return PodGroup("g", pods, PodShape({GPU: gpus}), gang)


SCALE_UP = [
    ("adds the nodes a group needs", [pool()], {}, Stock(), group(2), [("h100", 2)], []),
    ("never goes past max", [pool(max_nodes=3)], {"h100": 2}, Stock(), group(3), [("h100", 1)], ["max"]),
    (
        "pool limits cap the GPUs",
        [pool(limits={GPU: 16})],
        {},
        Stock(),
        group(3),
        [("h100", 2)],
        ["limits"],
    ),
    (
        "stock caps the nodes",
        [pool()],
        {},
        Stock({("a3-highgpu-8g", "z1", "on-demand"): 1}),
        group(2),
        [("h100", 1)],
        ["stock"],
    ),
    (
        "a gang that does not fit whole gets nothing",
        [pool()],
        {},
        Stock({("a3-highgpu-8g", "z1", "on-demand"): 1}),
        group(2, gang=True),
        [],
        ["stock"],
    ),
    (
        "a gang goes to the pool that can hold it all",
        [pool("cheap", usd_per_node_hour=10.0, max_nodes=1), pool("dear", usd_per_node_hour=90.0)],
        {},
        Stock(),
        group(2, gang=True),
        [("dear", 2)],
        [],
    ),
    (
        "the cheapest pool per pod goes first, then the next",
        [pool("cheap", usd_per_node_hour=10.0, max_nodes=1), pool("dear", usd_per_node_hour=90.0)],
        {},
        Stock(),
        group(2),
        [("cheap", 1), ("dear", 1)],
        [],
    ),
    (
        "a pool at zero scales up from zero",
        [pool(min_nodes=0)],
        {"h100": 0},
        Stock(),
        group(1),
        [("h100", 1)],
        [],
    ),
    ("a pod no node holds is not scaled", [pool()], {}, Stock(), group(1, gpus=16), [], ["no-fit"]),
]


@pytest.mark.parametrize(
    ("name", "pools", "now_nodes", "stock", "pending", "ups", "codes"), SCALE_UP, ids=[c[0] for c in SCALE_UP]
)
def test_scale_up(
    name: str,
    pools: list[PoolSpec],
    now_nodes: dict[str, int],
    stock: Stock,
    pending: PodGroup,
    ups: list[tuple[str, int]],
    codes: list[str],
) -> None:
    plan = plan_scale_up([pending], pools, now_nodes, stock, now=100.0)
    assert [(u.pool, u.nodes) for u in plan.scale_ups] == ups
    assert [n.code for n in plan.not_scaled] == codes
    assert all(u.reason for u in plan.scale_ups) and all(n.reason for n in plan.not_scaled)


def test_new_nodes_are_ready_after_the_provisioning_delay() -> None:
    plan = plan_scale_up([group(1)], [pool(provisioning_delay_s=420.0)], {}, Stock(), now=100.0)
    assert plan.scale_ups[0].ready_at == 520.0


def test_groups_share_headroom_in_order() -> None:
    first, second = PodGroup("a", 3, PodShape({GPU: 8})), PodGroup("b", 2, PodShape({GPU: 8}), True)
    plan = plan_scale_up([first, second], [pool()], {}, Stock(), now=0.0)
    assert [(u.group, u.nodes) for u in plan.scale_ups] == [("a", 3)]
    assert [(n.group, n.code) for n in plan.not_scaled] == [("b", "max")]


def idle(name: str, since: float, pool_name: str = "h100") -> NodeState:
    return NodeState(name, pool_name, NODE, (), idle_since=since, since=since)


SCALE_DOWN = [
    ("removes nodes idle past idleAfter", pool(min_nodes=0), [idle("n1", 0.0), idle("n2", 900.0)], ["n1"]),
    ("never below min", pool(min_nodes=2), [idle("n1", 0.0), idle("n2", 0.0)], []),
    (
        "scale to zero when min is 0",
        pool(min_nodes=0, disruption=DisruptionPolicy(budgets=(Budget("100%"),))),
        [idle("n1", 0.0), idle("n2", 0.0)],
        ["n1", "n2"],
    ),
    (
        "the 10% default budget allows one node at a time",
        pool(min_nodes=0),
        [idle("n1", 0.0), idle("n2", 0.0)],
        ["n1"],
    ),
    ("disabled scale-down removes nothing", pool(scale_down_enabled=False), [idle("n1", 0.0)], []),
]


@pytest.mark.parametrize(("name", "spec", "nodes", "removed"), SCALE_DOWN, ids=[c[0] for c in SCALE_DOWN])
def test_scale_down(name: str, spec: PoolSpec, nodes: list[NodeState], removed: list[str]) -> None:
    assert [d.node for d in plan_scale_down(nodes, [spec], now=1000.0)] == removed


def busy(name: str, *pods: PodInfo, since: float = 0.0) -> NodeState:
    return NodeState(name, "h100", NODE, pods, since=since)


def pod(name: str, gpus: int = 2, app: str = "web", keep: bool = False) -> PodInfo:
    return PodInfo(name, "team", {GPU: gpus}, {"app": app}, keep)


LOOSE = DisruptionPolicy(budgets=(Budget("100%"),))
CONSOLIDATION = [
    ("an empty node goes first", LOOSE, [], [busy("a", pod("p1")), busy("b")], ["b"]),
    (
        "an underutilized node's pods move to another node",
        LOOSE,
        [],
        [busy("a", pod("p1")), busy("b", pod("p2"))],
        ["a"],
    ),
    (
        "WhenEmpty keeps busy nodes",
        DisruptionPolicy("WhenEmpty", budgets=(Budget("100%"),)),
        [],
        [busy("a", pod("p1")), busy("b", pod("p2"))],
        [],
    ),
    (
        "a non-preemptible pod pins its node",
        LOOSE,
        [],
        [busy("a", pod("p1", keep=True)), busy("b", pod("p2", keep=True))],
        [],
    ),
    (
        "a PodDisruptionBudget with no disruptions left blocks the move",
        LOOSE,
        [PDB("web", "team", {"app": "web"}, healthy=2, min_available=2)],
        [busy("a", pod("p1")), busy("b", pod("p2"))],
        [],
    ),
    ("pods that fit nowhere else stay", LOOSE, [], [busy("a", pod("p1", 6)), busy("b", pod("p2", 6))], []),
    (
        "a disruption budget of 0 blocks everything",
        DisruptionPolicy(budgets=(Budget("0"),)),
        [],
        [busy("a"), busy("b")],
        [],
    ),
    (
        "consolidateAfter is respected",
        DisruptionPolicy(consolidate_after_s=600, budgets=(Budget("100%"),)),
        [],
        [busy("a", since=500.0), busy("b", since=0.0)],
        ["b"],
    ),
]


@pytest.mark.parametrize(
    ("name", "policy", "pdbs", "nodes", "removed"), CONSOLIDATION, ids=[c[0] for c in CONSOLIDATION]
)
def test_consolidation(
    name: str, policy: DisruptionPolicy, pdbs: list[PDB], nodes: list[NodeState], removed: list[str]
) -> None:
    plan = plan_consolidation(nodes, {"h100": policy}, pdbs, now=1000.0)
    assert [c.node for c in plan.remove] == removed
    assert all(s.reason for s in plan.skipped)


def test_consolidation_does_not_change_its_inputs() -> None:
    nodes = [busy("a", pod("p1")), busy("b", pod("p2"))]
    before = list(nodes)
    plan_consolidation(nodes, {"h100": LOOSE}, [], now=1000.0)
    assert nodes == before
