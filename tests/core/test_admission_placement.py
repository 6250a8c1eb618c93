"""Admission and placement agree: TAS workloads are admitted only when a domain holds them."""

from __future__ import annotations

import pytest

from gpuq.core.admission import Scheduler
from gpuq.core.cycles import run_cycles
from gpuq.core.model import (
    ClusterConfig,
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    PodSetAssignment,
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


# ------------------------------------------------------------------ preemption for topology
def preempting_scheduler(nodes: list[Node]) -> Scheduler:
    from gpuq.core.model import Preemption, PreemptionPolicy

    cfg = config(TAS, 64)
    cq = cfg.cluster_queues["cq"]
    cq = ClusterQueue(
        cq.name,
        cq.resource_groups,
        namespace_selector=cq.namespace_selector,
        preemption=Preemption(within_cluster_queue=PreemptionPolicy.LOWER_PRIORITY),
    )
    cfg = ClusterConfig(
        flavors=cfg.flavors,
        cluster_queues={"cq": cq},
        local_queues=cfg.local_queues,
        topologies=cfg.topologies,
    )
    return Scheduler(cfg, Placer(nodes, flavors=cfg.flavors, topologies=cfg.topologies))


def pinned(name: str, host: str, priority: int, created: float) -> Workload:
    pod = PodSet("main", 1, {GPU: 8}, node_selector={"kubernetes.io/hostname": host})
    return Workload("team", name, "q", (pod,), priority=priority, creation_time=created)


def high(name: str, pods: int) -> Workload:
    return Workload(
        "team",
        name,
        "q",
        (PodSet("main", pods, {GPU: 8}, topology=REQUIRED_RACK),),
        priority=100,
        creation_time=50,
    )


def test_a_gang_that_fits_the_quota_but_no_rack_preempts_one_rack_free() -> None:
    s = preempting_scheduler(racks())
    s.submit(pinned("low-r1", "r1-h0", 0, 1))
    run_cycles(s, now=1)
    s.submit(pinned("low-r2", "r2-h0", 0, 2))
    run_cycles(s, now=2)
    s.submit(high("urgent", 2))
    result, entries = s.plan_cycle(now=3)
    assert [p.workload for p in result.preempted] == ["team/low-r2"], "one victim frees a rack: the newest"
    assert result.admitted == ()
    s.apply(result, entries)
    for eviction in result.preempted:
        s.evict(eviction.workload)
    run = run_cycles(s)
    assert "team/urgent" in run.admitted
    placer = s.placer
    assert placer is not None
    assert {placer.nodes[b.node].node.labels["rack"] for b in placer.placements["team/urgent"].bindings} == {
        "r2"
    }


def test_no_preemption_when_no_rack_could_ever_hold_the_gang() -> None:
    s = preempting_scheduler(racks())
    s.submit(pinned("low-r1", "r1-h0", 0, 1))
    run_cycles(s)
    s.submit(high("too-big", 3))
    result, _ = s.plan_cycle()
    assert result.preempted == ()
    (waiting,) = result.pending
    assert "only 2 out of 3" in waiting.message


def test_equal_priority_workloads_are_not_preempted_for_topology() -> None:
    s = preempting_scheduler(racks())
    s.submit(pinned("peer-r1", "r1-h0", 100, 1))
    s.submit(pinned("peer-r2", "r2-h0", 100, 2))
    run_cycles(s)
    s.submit(high("urgent", 2))
    run = run_cycles(s)
    assert run.preempted == {}
    assert "team/urgent" in run.pending


def test_what_if_questions_leave_the_placer_unchanged() -> None:
    from gpuq.core.placement.whatif import TopologyWhatIf

    s = preempting_scheduler(racks())
    s.submit(pinned("low-r1", "r1-h0", 0, 1))
    s.submit(pinned("low-r2", "r2-h0", 0, 2))
    run_cycles(s)
    placer = s.placer
    assert placer is not None
    before = {key: p for key, p in placer.placements.items()}
    free = {name: (c.gpu_free_milli(), dict(c.free)) for name, c in placer.nodes.items()}
    oracle = TopologyWhatIf(placer)
    admitted = [PodSetAssignment("main", {GPU: "tas"}, {GPU: 16}, 2)]
    assert oracle.topology_failure(high("urgent", 2), admitted) is not None
    assert oracle.topology_failure(high("urgent", 2), admitted, {"team/low-r1"}) is None
    assert placer.placements == before
    assert {name: (c.gpu_free_milli(), dict(c.free)) for name, c in placer.nodes.items()} == free


# ----------------------------------------------------------------------- TAS flavor matching
PLAIN = ResourceFlavor("plain")
TOPOLOGIES = {"default": LEVELS}
MATCH_CASES = [
    ("plain pod set, plain flavor", None, PLAIN, False, (GPU,), None),
    (
        "plain pod set, TAS flavor",
        None,
        TAS,
        False,
        (GPU,),
        'Flavor "tas" supports only TopologyAwareScheduling',
    ),
    ("implied: every flavor of the queue is TAS", None, TAS, True, (GPU,), None),
    ("TAS pod set, TAS flavor with the level", REQUIRED_RACK, TAS, False, (GPU,), None),
    (
        "TAS pod set, level missing",
        TopologyRequest(TopologyMode.REQUIRED, "zone"),
        TAS,
        False,
        (GPU,),
        'Flavor "tas" does not contain the requested level',
    ),
    (
        "TAS pod set, plain flavor for its resources",
        REQUIRED_RACK,
        PLAIN,
        False,
        (GPU,),
        'Flavor "plain" does not support TopologyAwareScheduling',
    ),
    ("TAS pod set, plain flavor for quota-only resources", REQUIRED_RACK, PLAIN, False, ("licenses",), None),
    (
        "TAS flavor whose topology is unknown",
        REQUIRED_RACK,
        ResourceFlavor("lost", topology_name="gone"),
        False,
        (GPU,),
        'Flavor "lost" information missing in TAS cache',
    ),
]


@pytest.mark.parametrize(
    ("case", "request_", "flavor", "implied", "covered", "expected"),
    MATCH_CASES,
    ids=[c[0] for c in MATCH_CASES],
)
def test_tas_flavor_matching(
    case: str,
    request_: TopologyRequest | None,
    flavor: ResourceFlavor,
    implied: bool,
    covered: tuple[str, ...],
    expected: str | None,
) -> None:
    from gpuq.core.flavors import flavor_matches

    pod_set = PodSet("main", 1, {GPU: 8}, topology=request_)
    assert flavor_matches(flavor, pod_set, TOPOLOGIES, implied, covered) == expected


def test_a_pod_set_group_takes_one_flavor_for_its_summed_requests() -> None:
    """Kueue's podSetGroups: the leader and workers are assigned flavors as one unit."""
    from gpuq.core.flavors import FlavorAssigner
    from gpuq.core.state import ClusterState

    small, large = (
        ResourceFlavor("small", topology_name="default"),
        ResourceFlavor("large", topology_name="default"),
    )
    quotas = {
        "small": {"cpu": ResourceQuota(4000), GPU: ResourceQuota(8)},
        "large": {"cpu": ResourceQuota(100_000), GPU: ResourceQuota(16)},
    }
    group = ResourceGroup(("cpu", GPU), tuple(FlavorQuotas(name, q) for name, q in quotas.items()))
    cq = ClusterQueue("cq", (group,), namespace_selector=LabelSelector())
    cfg = ClusterConfig(
        flavors={"small": small, "large": large},
        cluster_queues={"cq": cq},
        local_queues={("team", "q"): LocalQueue("team", "q", "cq")},
        topologies={"default": LEVELS},
    )
    request = TopologyRequest(TopologyMode.REQUIRED, "rack", group="lws")
    leader = PodSet("leader", 1, {"cpu": 3000}, topology=request)
    workers = PodSet("workers", 1, {"cpu": 2000, GPU: 8}, topology=request)
    alone = PodSet("sidecar", 1, {"cpu": 1000}, topology=TopologyRequest(TopologyMode.REQUIRED, "rack"))
    wl = Workload("team", "lws", "q", (leader, workers, alone))
    assignment = FlavorAssigner(ClusterState(cfg), wl, "cq").assign()
    flavors = {ps.name: set(ps.flavors.values()) for ps in assignment.pod_sets}
    assert flavors == {"leader": {"large"}, "workers": {"large"}, "sidecar": {"small"}}, (
        "5 CPUs together exceed the small flavor's 4; alone, each member would have fitted it"
    )
