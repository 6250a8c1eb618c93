"""Admission and placement agree: TAS workloads are admitted only when a domain holds them."""

from __future__ import annotations

from gpuq.core.admission import Scheduler
from gpuq.core.cycles import run_cycles
from gpuq.core.model import (
    ClusterConfig,
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    TopologyMode,
    TopologyRequest,
    Workload,
)
from gpuq.core.nodes import Node
from gpuq.core.placement.engine import Placer

GPU = "nvidia.com/gpu"
LEVELS = ("rack", "kubernetes.io/hostname")


def config(flavor: ResourceFlavor, gpus: int) -> ClusterConfig:
    cq = ClusterQueue(
        "cq",
        (ResourceGroup((GPU,), (FlavorQuotas(flavor.name, {GPU: ResourceQuota(gpus)}),)),),
        namespace_selector=LabelSelector(),
    )
    return ClusterConfig(
        flavors={flavor.name: flavor},
        cluster_queues={"cq": cq},
        local_queues={("team", "q"): LocalQueue("team", "q", "cq")},
        topologies={"default": LEVELS},
    )


def racks(per_rack: int = 2, gpus: int = 8) -> list[Node]:
    return [
        Node(f"{r}-h{h}", {GPU: gpus, "pods": 110}, labels={"rack": r, "kubernetes.io/hostname": f"{r}-h{h}"})
        for r in ("r1", "r2")
        for h in range(per_rack)
    ]


def gang(name: str, pods: int, created: float, topology: TopologyRequest | None = None) -> Workload:
    return Workload(
        "team", name, "q", (PodSet("main", pods, {GPU: 8}, topology=topology),), creation_time=created
    )


def scheduler(flavor: ResourceFlavor, gpus: int, nodes: list[Node]) -> Scheduler:
    cfg = config(flavor, gpus)
    return Scheduler(cfg, Placer(nodes, flavors=cfg.flavors, topologies=cfg.topologies))


TAS = ResourceFlavor("tas", topology_name="default")
REQUIRED_RACK = TopologyRequest(TopologyMode.REQUIRED, "rack")


def test_quota_fits_but_no_rack_holds_the_gang() -> None:
    s = scheduler(TAS, 64, racks())
    s.submit(gang("big", 3, 0, REQUIRED_RACK))
    run = run_cycles(s)
    assert run.admitted == {}
    message = run.pending["team/big"].message
    assert "couldn't assign flavors to pod set main" in message and "only 2 out of 3" in message
    assert all(c.gpu_free_milli() == 8000 for c in s.placer.nodes.values())  # type: ignore[union-attr]


def test_two_gangs_in_one_cycle_see_each_others_nodes() -> None:
    s = scheduler(TAS, 64, racks())
    for i in range(3):
        s.submit(gang(f"g{i}", 2, float(i), REQUIRED_RACK))
    result, entries = s.plan_cycle()
    # one head per ClusterQueue per cycle; run until quiescent instead
    s.apply(result, entries)
    run = run_cycles(s)
    admitted = {result.admitted[0].workload} | set(run.admitted)
    assert admitted == {"team/g0", "team/g1"}
    assert "team/g2" in run.pending
    placer = s.placer
    assert placer is not None
    used = {
        placer.nodes[b.node].node.labels["rack"] for key in admitted for b in placer.placements[key].bindings
    }
    assert used == {"r1", "r2"}


def test_finishing_frees_nodes_for_the_waiting_gang() -> None:
    s = scheduler(TAS, 64, racks())
    for i in range(3):
        s.submit(gang(f"g{i}", 2, float(i), REQUIRED_RACK))
    run_cycles(s)
    s.finish("team/g0")
    run = run_cycles(s)
    assert "team/g2" in run.admitted
    assert s.placer is not None and "team/g2" in s.placer.placements


def test_planning_leaves_the_nodes_untouched() -> None:
    s = scheduler(TAS, 64, racks())
    s.submit(gang("g", 2, 0, REQUIRED_RACK))
    s.plan_cycle()
    assert s.placer is not None and s.placer.placements == {}


def test_non_tas_workload_admitted_by_quota_waits_for_a_node() -> None:
    plain = ResourceFlavor("plain")
    s = scheduler(plain, 64, racks(per_rack=1))  # 16 GPUs of nodes, 64 of quota
    s.submit(gang("a", 2, 0))
    s.submit(gang("b", 1, 1))
    run = run_cycles(s)
    assert set(run.admitted) == {"team/a", "team/b"}
    assert set(s.unplaced) == {"team/b"}
    assert "0/2 nodes are available: 2 Insufficient nvidia.com/gpu." in s.unplaced["team/b"].message
    s.finish("team/a")
    assert s.unplaced == {}
    assert s.placer is not None and len(s.placer.placements["team/b"].bindings) == 1


def test_eviction_releases_the_nodes() -> None:
    s = scheduler(TAS, 64, racks())
    s.submit(gang("g", 2, 0, REQUIRED_RACK))
    run_cycles(s)
    s.evict("team/g")
    assert s.placer is not None and s.placer.placements == {}


def test_nodes_freed_by_another_cohort_wake_a_topology_blocked_queue() -> None:
    flavor = TAS
    cfg = config(flavor, 64)
    other = ClusterQueue(
        "other",
        (ResourceGroup((GPU,), (FlavorQuotas(flavor.name, {GPU: ResourceQuota(64)}),)),),
        namespace_selector=LabelSelector(),
    )
    cfg = ClusterConfig(
        flavors=cfg.flavors,
        cluster_queues={"cq": cfg.cluster_queues["cq"], "other": other},
        local_queues={**cfg.local_queues, ("ops", "q"): LocalQueue("ops", "q", "other")},
        topologies=cfg.topologies,
    )
    s = Scheduler(cfg, Placer(racks(), flavors=cfg.flavors, topologies=cfg.topologies))
    for rack in ("r1", "r2"):
        s.submit(Workload("ops", f"hog-{rack}", "q", (PodSet("main", 2, {GPU: 8}, topology=REQUIRED_RACK),)))
    run_cycles(s)
    s.submit(gang("wants-a-rack", 2, 10, REQUIRED_RACK))
    assert "team/wants-a-rack" in run_cycles(s).pending
    s.finish("ops/hog-r1")  # another ClusterQueue, no cohort: only the nodes connect them
    assert "team/wants-a-rack" in run_cycles(s).admitted
