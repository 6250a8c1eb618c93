"""Pod-set groups (``podset-group-name``): a leader and its workers placed together.

The pure algorithm (:func:`gpuq.core.topology_groups.assign_group`) is checked on hand-computed
cases and properties; the placer on clusters, binding the pair as one unit.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq.core.model import PodSet, PodSetAssignment, ResourceFlavor, TopologyMode, TopologyRequest, Workload
from gpuq.core.nodes import Node
from gpuq.core.placement.engine import PlacementFailure, Placer, WorkloadPlacement
from gpuq.core.topology import TopologyAssignment, TopologyDomain, TopologyFailure, assign
from gpuq.core.topology_groups import GroupAssignment, HostRoom, assign_group

BLOCK, RACK, HOST = "block", "rack", "kubernetes.io/hostname"
BR = (BLOCK, RACK)  # racks are leaves of several nodes
BRH = (BLOCK, RACK, HOST)  # one node per leaf, as on a cluster labelled by hostname

Rooms = dict[tuple[str, ...], list[HostRoom]]


def rooms(spec: str) -> Rooms:
    """``"b1/r1/n1=4:3 b1/r1/n2=2"``: node n1 of leaf (b1, r1) holds 4 workers, or the leader
    and 3 workers beside it; n2 holds 2 workers and not the leader."""
    leaves: Rooms = {}
    for item in spec.split():
        path, room = item.split("=")
        *leaf, name = path.split("/")
        workers, _, beside = room.partition(":")
        host = HostRoom(name, int(workers), bool(beside), int(beside or 0))
        leaves.setdefault(tuple(leaf), []).append(host)
    return leaves


def placed(levels: tuple[str, ...], leader: str, workers: str) -> GroupAssignment:
    """The expected result: the leader's node path, and ``"path=pods ..."`` for the workers."""
    *leader_leaf, leader_host = leader.split("/")
    hosts = [(tuple(path.split("/")), int(n)) for path, n in (item.split("=") for item in workers.split())]
    per_leaf = Counter[tuple[str, ...]]()
    for path, n in hosts:
        per_leaf[path[:-1]] += n
    return GroupAssignment(
        leader=TopologyAssignment(levels, (TopologyDomain(tuple(leader_leaf), 1),)),
        workers=TopologyAssignment(
            levels, tuple(TopologyDomain(leaf, n) for leaf, n in sorted(per_leaf.items()))
        ),
        leader_host=leader_host,
        worker_hosts=tuple((path[-1], n) for path, n in sorted(hosts)),
    )


def required(level: str, slice_level: str | None = None, slice_size: int | None = None) -> TopologyRequest:
    return TopologyRequest(TopologyMode.REQUIRED, level, slice_level, slice_size, group="g")


def preferred(level: str, slice_level: str | None = None, slice_size: int | None = None) -> TopologyRequest:
    return TopologyRequest(TopologyMode.PREFERRED, level, slice_level, slice_size, group="g")


UNCONSTRAINED = TopologyRequest(TopologyMode.UNCONSTRAINED, group="g")


def fail(message: str) -> TopologyFailure:
    return TopologyFailure(message.replace("T ", 'topology "default" ', 1))


@dataclass(frozen=True)
class Case:
    name: str
    levels: tuple[str, ...]
    rooms: str
    count: int
    request: TopologyRequest | None
    want: GroupAssignment | TopologyFailure
    least_free: bool = True


CASES = [
    Case(
        "the group goes to the only rack holding the leader and the workers together",
        BR,
        "b1/r1/n1=4 b1/r1/n2=4 b1/r2/n3=3:2 b1/r2/n4=3:2",
        5,
        required(RACK),
        placed(BR, "b1/r2/n3", "b1/r2/n3=2 b1/r2/n4=3"),
    ),
    Case(
        "a tighter rack whose nodes hold the workers but not the leader is skipped",
        BR,
        "b1/r1/n1=4 b1/r1/n2=1 b1/r2/n3=4:3 b1/r2/n4=4:3",
        5,
        required(RACK),
        placed(BR, "b1/r2/n3", "b1/r2/n3=3 b1/r2/n4=2"),
    ),
    Case(
        "best fit takes the tightest rack holding the workers beside the leader",
        BR,
        "b1/r1/n1=6:5 b1/r2/n2=9:8",
        4,
        required(RACK),
        placed(BR, "b1/r1/n1", "b1/r1/n1=4"),
    ),
    Case(
        "a node holding only the leader serves it, the workers fill the rest of the rack",
        BR,
        "b1/r1/n1=0:0 b1/r1/n2=3 b1/r2/n3=2:2",
        3,
        required(RACK),
        placed(BR, "b1/r1/n1", "b1/r1/n2=3"),
    ),
    Case(
        "preferred rack falls back to the block, leader and workers together",
        BR,
        "b1/r1/n1=2:1 b1/r2/n2=2 b2/r3/n3=1:1",
        3,
        preferred(RACK),
        placed(BR, "b1/r1/n1", "b1/r1/n1=1 b1/r2/n2=2"),
    ),
    Case(
        "required fails with Kueue's message: the workers-only slices of the first leader domain",
        BR,
        "b1/r1/n1=2:1 b1/r2/n2=2 b2/r3/n3=1:1",
        3,
        required(RACK),
        fail("T allows to fit only 2 out of 3 pod(s)"),
    ),
    Case(
        "no node holds the leader: nothing fits",
        BR,
        "b1/r1/n1=4 b1/r2/n2=4",
        2,
        preferred(RACK),
        fail("T doesn't allow to fit any of 2 pod(s)"),
    ),
    Case(
        "spreading counts only the workers beside the leader in its domain",
        BR,
        "b1/r1/n1=1:0 b1/r2/n2=1",
        3,
        preferred(BLOCK),
        fail("T allows to fit only 1 out of 3 pod(s)"),
    ),
    Case(
        "unconstrained, least free capacity: the leader takes the emptiest rack that holds it",
        BR,
        "b1/r1/n1=1:0 b1/r2/n2=3 b1/r3/n3=2:2",
        4,
        UNCONSTRAINED,
        placed(BR, "b1/r1/n1", "b1/r2/n2=2 b1/r3/n3=2"),
    ),
    Case(
        "unconstrained with best fit keeps the leader with the most workers it holds",
        BR,
        "b1/r1/n1=1:0 b1/r2/n2=3 b1/r3/n3=2:2",
        4,
        UNCONSTRAINED,
        placed(BR, "b1/r3/n3", "b1/r2/n2=2 b1/r3/n3=2"),
        least_free=False,
    ),
    Case(
        "the leader goes to the rack whose loss of a slice the other rack can make up",
        BR,
        "b1/r1/n1=2:1 b1/r2/n2=2:2",
        4,
        preferred(BLOCK, RACK, 2),
        placed(BR, "b1/r2/n2", "b1/r1/n1=2 b1/r2/n2=2"),
    ),
    Case(
        "on hostname leaves the leader and the workers share the one host that holds both",
        BRH,
        "b1/r1/h1/h1=4 b1/r1/h2/h2=4:1 b1/r2/h3/h3=5:4",
        4,
        required(HOST),
        placed(BRH, "b1/r2/h3/h3", "b1/r2/h3/h3=4"),
    ),
    Case(
        "a request error is the workers' (Kueue reads the group's request from them)",
        BR,
        "b1/r1/n1=4:3",
        2,
        TopologyRequest(TopologyMode.REQUIRED, None, group="g"),
        TopologyFailure("topology level not specified"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_assign_group(case: Case) -> None:
    got = assign_group(
        case.levels,
        rooms(case.rooms),
        case.count,
        case.request,
        profile_least_free_for_unconstrained=case.least_free,
    )
    assert got == case.want


def test_failure_names_the_topology() -> None:
    got = assign_group(BR, rooms("b1/r1/n1=1:0"), 2, required(RACK), topology_name="lab")
    assert got == TopologyFailure('topology "lab" allows to fit only 1 out of 2 pod(s)')


# ---------------------------------------------------------------------------------- properties
@st.composite
def topologies(draw: st.DrawFn) -> tuple[tuple[str, ...], Rooms]:
    """Up to 2 blocks × 3 racks; racks of 1-3 nodes (BR) or hostname leaves of one node (BRH)."""
    by_host = draw(st.booleans())
    leaves: Rooms = {}
    for b in range(draw(st.integers(1, 2))):
        for r in range(draw(st.integers(1, 3))):
            for n in range(1 if by_host else draw(st.integers(1, 3))):
                workers = draw(st.integers(0, 5))
                leader = draw(st.booleans())
                beside = draw(st.integers(0, workers)) if leader else 0
                name = f"n{b}{r}{n}"
                leaf = (f"b{b}", f"r{b}{r}", name) if by_host else (f"b{b}", f"r{b}{r}")
                leaves.setdefault(leaf, []).append(HostRoom(name, workers, leader, beside))
    return (BRH if by_host else BR), leaves


@st.composite
def group_requests(draw: st.DrawFn, levels: tuple[str, ...]) -> tuple[TopologyRequest | None, int]:
    """A request and a count it can be (slices: a whole number of them)."""
    mode = draw(
        st.sampled_from([TopologyMode.REQUIRED, TopologyMode.PREFERRED, TopologyMode.UNCONSTRAINED, None])
    )
    level_idx = draw(st.integers(0, len(levels) - 1))
    level = None if mode in (TopologyMode.UNCONSTRAINED, None) else levels[level_idx]
    size = draw(st.sampled_from([1, 1, 2]))
    slice_level = None
    if size > 1 and mode is not None:
        slice_level = levels[draw(st.integers(level_idx if level else len(levels) - 1, len(levels) - 1))]
    count = size * draw(st.integers(1, 8 // size))
    if mode is None:
        return None, count
    return TopologyRequest(mode, level, slice_level, size if slice_level else None, group="g"), count


@settings(max_examples=500, deadline=None)
@given(data=st.data(), topology=topologies(), least_free=st.booleans())
def test_a_group_placement_respects_every_node_and_the_request(
    data: st.DataObject, topology: tuple[tuple[str, ...], Rooms], least_free: bool
) -> None:
    levels, leaves = topology
    request, count = data.draw(group_requests(levels))
    got = assign_group(levels, leaves, count, request, profile_least_free_for_unconstrained=least_free)
    if isinstance(got, TopologyFailure):
        return
    room = {host.name: host for hosts in leaves.values() for host in hosts}
    leaf_of = {host.name: leaf for leaf, hosts in leaves.items() for host in hosts}
    assert room[got.leader_host].leader
    assert got.leader.domains == (TopologyDomain(leaf_of[got.leader_host], 1),)
    assert sum(n for _, n in got.worker_hosts) == count
    for name, n in got.worker_hosts:
        limit = room[name].workers_beside_leader if name == got.leader_host else room[name].workers
        assert 0 < n <= limit
    per_leaf = Counter[tuple[str, ...]]()
    for name, n in got.worker_hosts:
        per_leaf[leaf_of[name]] += n
    assert got.workers == TopologyAssignment(
        levels, tuple(TopologyDomain(k, v) for k, v in sorted(per_leaf.items()))
    )
    if request is not None and request.mode is TopologyMode.REQUIRED:
        depth = levels.index(request.level or "") + 1
        assert len({leaf[:depth] for leaf in [*per_leaf, leaf_of[got.leader_host]]}) == 1
    if request is not None and request.slice_level is not None:
        depth = levels.index(request.slice_level) + 1
        per_slice_domain = Counter[tuple[str, ...]]()
        for leaf, n in per_leaf.items():
            per_slice_domain[leaf[:depth]] += n
        assert all(n % (request.slice_size or 1) == 0 for n in per_slice_domain.values())


@settings(max_examples=500, deadline=None)
@given(
    data=st.data(),
    topology=topologies(),
    mode=st.sampled_from([TopologyMode.REQUIRED, TopologyMode.PREFERRED, TopologyMode.UNCONSTRAINED]),
    least_free=st.booleans(),
)
def test_a_group_fits_exactly_when_a_node_can_take_the_leader_at_a_loss_the_domain_makes_up(
    data: st.DataObject, topology: tuple[tuple[str, ...], Rooms], mode: TopologyMode, least_free: bool
) -> None:
    levels, leaves = topology
    level = None if mode is TopologyMode.UNCONSTRAINED else data.draw(st.sampled_from(levels))
    count = data.draw(st.integers(1, 12))
    # Required: one domain of the level; otherwise (climbing, then spreading) the whole cluster.
    depth = levels.index(level) + 1 if mode is TopologyMode.REQUIRED and level else 0
    total = Counter[tuple[str, ...]]()
    for leaf, hosts in leaves.items():
        total[leaf[:depth]] += sum(h.workers for h in hosts)
    feasible = any(
        host.leader and total[leaf[:depth]] - (host.workers - host.workers_beside_leader) >= count
        for leaf, hosts in leaves.items()
        for host in hosts
    )
    request = TopologyRequest(mode, level, group="g")
    got = assign_group(levels, leaves, count, request, profile_least_free_for_unconstrained=least_free)
    assert isinstance(got, GroupAssignment) == feasible, got


@settings(max_examples=500, deadline=None)
@given(data=st.data(), topology=topologies(), least_free=st.booleans())
def test_a_leader_that_fits_everywhere_at_no_cost_changes_nothing_for_the_workers(
    data: st.DataObject, topology: tuple[tuple[str, ...], Rooms], least_free: bool
) -> None:
    levels, leaves = topology
    request, count = data.draw(group_requests(levels))
    free = {
        leaf: [HostRoom(h.name, h.workers, True, h.workers) for h in hosts] for leaf, hosts in leaves.items()
    }
    sums = {leaf: sum(h.workers for h in hosts) for leaf, hosts in leaves.items()}
    alone = assign(levels, sums, count, request, profile_least_free_for_unconstrained=least_free)
    got = assign_group(levels, free, count, request, profile_least_free_for_unconstrained=least_free)
    assert (got if isinstance(got, TopologyFailure) else got.workers) == alone


@settings(max_examples=200, deadline=None)
@given(data=st.data(), topology=topologies(), seed=st.integers(0, 1000))
def test_the_order_leaves_and_nodes_are_listed_in_does_not_matter(
    data: st.DataObject, topology: tuple[tuple[str, ...], Rooms], seed: int
) -> None:
    levels, leaves = topology
    request, count = data.draw(group_requests(levels))
    rng = random.Random(seed)
    items = [(leaf, rng.sample(hosts, len(hosts))) for leaf, hosts in leaves.items()]
    rng.shuffle(items)
    assert assign_group(levels, dict(items), count, request) == assign_group(levels, leaves, count, request)


# ------------------------------------------------------------------------------------- placer
TAS = ResourceFlavor("tas", topology_name="default")
LEVELS = (BLOCK, RACK, HOST)
GIB = 1024**3


def gpu_node(name: str, block: str, rack: str, *, gpus: int = 8, cpu: int = 64) -> Node:
    allocatable = {"cpu": cpu * 1000, "memory": 512 * GIB, "pods": 110, "nvidia.com/gpu": gpus}
    labels = {HOST: name, BLOCK: block, RACK: rack}
    return Node(name, allocatable, labels=labels, gpu_model="H100-80GB", gpu_count=gpus, gpu_memory_mib=81920)


def placer(nodes: list[Node], views: int = 64) -> Placer:
    return Placer(nodes, flavors={"tas": TAS}, topologies={"default": LEVELS}, topology_views=views)


def pod_set(name: str, count: int, request: TopologyRequest | None, **resources: int) -> PodSet:
    return PodSet(name, count, resources, topology=request)


def admitted(wl: Workload) -> list[PodSetAssignment]:
    return [
        PodSetAssignment(
            ps.name,
            dict.fromkeys(ps.requests, "tas"),
            {r: v * ps.count for r, v in ps.requests.items()},
            ps.count,
        )
        for ps in wl.pod_sets
    ]


def group(
    name: str, workers: int, request: TopologyRequest, *, leader_cpu: int = 4000, gpus: int = 4
) -> Workload:
    """A LeaderWorkerSet: a CPU-only leader and ``workers`` pods of ``gpus`` GPUs, one group."""
    return Workload(
        "team",
        name,
        "q",
        (
            pod_set("leader", 1, request, cpu=leader_cpu),
            pod_set("workers", workers, request, **{"nvidia.com/gpu": gpus, "cpu": 1000}),
        ),
    )


def racks_of(p: Placer, result: WorkloadPlacement | PlacementFailure) -> dict[str, Counter[str]]:
    assert isinstance(result, WorkloadPlacement), result
    return {
        ps.name: Counter(p.nodes[b.node].node.labels[RACK] for b in ps.bindings) for ps in result.pod_sets
    }


def free_state(p: Placer) -> dict[str, tuple[object, ...]]:
    return {name: (dict(c.free), tuple(c.gpu_milli), tuple(sorted(c.bound))) for name, c in p.nodes.items()}


@pytest.mark.parametrize("views", [64, 0], ids=["views", "no views"])
def test_a_leader_and_workers_go_to_the_only_rack_holding_both(views: int) -> None:
    # r1 holds the 4 workers of 4 GPUs exactly, with no GPU left for a 1-GPU leader; r2 holds both.
    nodes = [gpu_node(f"r1-h{i}", "b1", "r1") for i in (1, 2)] + [
        gpu_node(f"r2-h{i}", "b1", "r2") for i in (1, 2, 3)
    ]
    p = placer(nodes, views)
    wl = Workload(
        "team",
        "lws",
        "q",
        (
            pod_set("leader", 1, required(RACK), **{"nvidia.com/gpu": 1}),
            pod_set("workers", 4, required(RACK), **{"nvidia.com/gpu": 4}),
        ),
    )
    assert racks_of(p, p.place(wl, admitted(wl))) == {"leader": Counter(r2=1), "workers": Counter(r2=4)}


def test_a_rack_holding_the_workers_but_not_the_leaders_shape_is_skipped() -> None:
    # r1 nodes have 16 CPUs: the 4 workers fit there (tighter), the 32-CPU leader does not.
    nodes = [gpu_node(f"r1-h{i}", "b1", "r1", cpu=16) for i in (1, 2)]
    nodes += [gpu_node(f"r2-h{i}", "b1", "r2") for i in (1, 2, 3)]
    p = placer(nodes)
    wl = group("lws", 4, required(RACK), leader_cpu=32000)
    result = p.place(wl, admitted(wl))
    assert racks_of(p, result) == {"leader": Counter(r2=1), "workers": Counter(r2=4)}
    assert isinstance(result, WorkloadPlacement)
    leader_ps, workers_ps = result.pod_sets
    assert leader_ps.topology is not None and workers_ps.topology is not None
    assert [d.count for d in leader_ps.topology.domains] == [1]
    assert sum(d.count for d in workers_ps.topology.domains) == 4


def test_preferred_falls_back_to_the_block_with_the_leader_and_workers_together() -> None:
    # A rack holds at most 4 workers of 4 GPUs (2 nodes): 6 need a block, and of the two the
    # tighter one, b2 (a node half used), holds them beside the leader.
    nodes = [
        gpu_node(f"{b}-{r}-h{i}", b, f"{b}-{r}") for b in ("b1", "b2") for r in ("r1", "r2") for i in (1, 2)
    ]
    p = placer(nodes)
    filler = Workload(
        "team", "fill", "q", (PodSet("main", 1, {"nvidia.com/gpu": 4}, node_selector={HOST: "b2-r1-h1"}),)
    )
    assert isinstance(p.place(filler), WorkloadPlacement)
    wl = group("lws", 6, preferred(RACK))
    result = p.place(wl, admitted(wl))
    assert isinstance(result, WorkloadPlacement), result
    blocks = {p.nodes[b.node].node.labels[BLOCK] for b in result.bindings}
    assert blocks == {"b2"}
    assert sum(racks_of(p, result)["workers"].values()) == 6


def test_required_fails_with_kueues_message_and_binds_nothing() -> None:
    nodes = [gpu_node(f"r1-h{i}", "b1", "r1") for i in (1, 2)] + [gpu_node("r2-h1", "b1", "r2")]
    p = placer(nodes)
    before = free_state(p)
    wl = group("lws", 5, required(RACK))  # 5 x 4 GPUs: no rack holds them
    result = p.place(wl, admitted(wl))
    assert result == PlacementFailure(
        "team/lws",
        "workers",
        "TopologyPlacementFailed",
        'topology "default" allows to fit only 4 out of 5 pod(s)',
    )
    assert free_state(p) == before


def test_a_failed_group_rolls_back_the_pod_sets_bound_before_it() -> None:
    nodes = [gpu_node(f"r1-h{i}", "b1", "r1") for i in (1, 2)]
    p = placer(nodes)
    before = free_state(p)
    wl = Workload(
        "team",
        "mixed",
        "q",
        (
            pod_set("solo", 2, None, **{"nvidia.com/gpu": 4}),
            pod_set("leader", 1, required(RACK), cpu=4000),
            pod_set("workers", 3, required(RACK), **{"nvidia.com/gpu": 4}),
        ),
    )
    result = p.place(wl, admitted(wl))
    assert isinstance(result, PlacementFailure) and result.pod_set == "workers"
    assert free_state(p) == before
    assert p.check(wl, admitted(wl)) == result
    assert free_state(p) == before


def test_a_workload_with_a_group_and_an_ungrouped_pod_set() -> None:
    nodes = [gpu_node(f"{r}-h{i}", "b1", r) for r in ("r1", "r2") for i in (1, 2)]
    p = placer(nodes)
    wl = Workload(
        "team",
        "mixed",
        "q",
        (
            pod_set("leader", 1, required(RACK), cpu=4000),
            pod_set("solo", 2, TopologyRequest(TopologyMode.REQUIRED, HOST), **{"nvidia.com/gpu": 4}),
            pod_set("workers", 3, required(RACK), **{"nvidia.com/gpu": 4}),
        ),
    )
    result = p.place(wl, admitted(wl))
    assert isinstance(result, WorkloadPlacement), result
    assert [ps.name for ps in result.pod_sets] == ["leader", "solo", "workers"]
    racks = racks_of(p, result)
    assert sum(racks["workers"].values()) == 3 and racks["leader"].keys() == racks["workers"].keys()
    assert len({b.node for b in result.pod_sets[1].bindings}) == 1
    assert not any(name.startswith("\x00") for c in p.nodes.values() for name in c.bound)


def test_a_group_of_three_pod_sets_is_refused_with_kueues_validation_message() -> None:
    p = placer([gpu_node("h1", "b1", "r1")])
    wl = Workload("team", "bad", "q", tuple(pod_set(n, 1, required(RACK), cpu=1000) for n in ("a", "b", "c")))
    result = p.place(wl, admitted(wl))
    assert result == PlacementFailure(
        "team/bad",
        "a",
        "TopologyPlacementFailed",
        "can only define groups of exactly 2 pod sets, got 3 in group 'g'",
    )


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Node], list[Workload]]:
    """Racks of 1-3 nodes with 16-64 CPUs, and single pods already bound on some nodes."""
    nodes = [
        gpu_node(f"{b}-r{r}-h{h}", b, f"{b}-r{r}", cpu=draw(st.sampled_from([16, 32, 64])))
        for b in ("b1", "b2")[: draw(st.integers(1, 2))]
        for r in range(draw(st.integers(1, 3)))
        for h in range(draw(st.integers(1, 3)))
    ]
    fillers = [
        Workload(
            "team",
            f"fill-{i}",
            "q",
            (PodSet("main", 1, {"nvidia.com/gpu": gpus}, node_selector={HOST: n.name}),),
        )
        for i, (n, gpus) in enumerate((n, draw(st.sampled_from([0, 0, 2, 4, 7]))) for n in nodes)
        if gpus
    ]
    return nodes, fillers


@settings(max_examples=150, deadline=None)
@given(cluster=clusters(), data=st.data())
def test_the_placer_binds_a_group_within_every_node_and_gives_it_all_back(
    cluster: tuple[list[Node], list[Workload]], data: st.DataObject
) -> None:
    nodes, fillers = cluster
    mode = data.draw(
        st.sampled_from([TopologyMode.REQUIRED, TopologyMode.PREFERRED, TopologyMode.UNCONSTRAINED])
    )
    level = None if mode is TopologyMode.UNCONSTRAINED else data.draw(st.sampled_from(LEVELS))
    request = TopologyRequest(mode, level, group="g")
    leader = data.draw(st.sampled_from([{"cpu": 24000}, {"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 8}]))
    workers = data.draw(st.integers(1, 6))
    gpus = data.draw(st.sampled_from([1, 2, 4, 8]))
    wl = Workload(
        "team",
        "lws",
        "q",
        (
            pod_set("workers", workers, request, **{"nvidia.com/gpu": gpus}),
            pod_set("leader", 1, request, **leader),
        ),
    )
    outcomes = []
    for views in (64, 0):
        p = placer(nodes, views)
        for filler in fillers:
            assert isinstance(p.place(filler), WorkloadPlacement)
        before = free_state(p)
        outcomes.append(result := p.place(wl, admitted(wl)))
        if isinstance(result, WorkloadPlacement):
            assert [len(ps.bindings) for ps in result.pod_sets] == [workers, 1]
            assert all(v >= 0 for c in p.nodes.values() for v in (*c.free.values(), *c.gpu_milli))
            if mode is TopologyMode.REQUIRED:
                depth = LEVELS.index(level or "") + 1
                domains = {
                    tuple(p.nodes[b.node].node.labels[k] for k in LEVELS[:depth]) for b in result.bindings
                }
                assert len(domains) == 1
            p.release(wl.key)
        assert free_state(p) == before
    assert outcomes[0] == outcomes[1]
