"""Placement: filters, choosers, device kinds, gangs and topology, table-driven."""

from __future__ import annotations

from collections import Counter

import pytest

from gpuq.core.model import (
    PodSet,
    PodSetAssignment,
    Requirement,
    ResourceFlavor,
    Taint,
    Toleration,
    TopologyMode,
    TopologyRequest,
    Workload,
)
from gpuq.core.nodes import GPUDemand, GPUSharing, Node, SharingMode, gpu_demand
from gpuq.core.placement.capacity import pod_shape
from gpuq.core.placement.engine import PlacementFailure, Placer, WorkloadPlacement

GIB = 1024**3
EXCLUSIVE = GPUSharing()
BLOCK, RACK, HOST = "block", "rack", "kubernetes.io/hostname"


def node(
    name: str,
    gpus: int = 8,
    *,
    cpu: int = 64,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    sharing: GPUSharing = EXCLUSIVE,
    extra: dict[str, int] | None = None,
    unschedulable: bool = False,
) -> Node:
    allocatable = {"cpu": cpu * 1000, "memory": 512 * GIB, "pods": 110}
    if sharing.mode is SharingMode.FRACTIONAL:
        allocatable |= {"nvidia.com/gpu": gpus, "gpuq.dev/gpu-milli": 1000 * gpus}
    elif sharing.mode is SharingMode.EXCLUSIVE and gpus:
        allocatable["nvidia.com/gpu"] = gpus
    allocatable |= extra or {}
    return Node(
        name,
        allocatable,
        labels={HOST: name, **(labels or {})},
        taints=taints,
        gpu_model="H100-80GB" if gpus else None,
        gpu_count=gpus,
        gpu_memory_mib=81920 if gpus else 0,
        sharing=sharing,
        unschedulable=unschedulable,
    )


def workload(name: str, count: int = 1, **pod: object) -> Workload:
    requests = pod.pop("requests", {"cpu": 1000, "nvidia.com/gpu": 1})
    return Workload("team", name, "q", (PodSet("main", count, requests, **pod),))  # type: ignore[arg-type]


def nodes_of(result: WorkloadPlacement | PlacementFailure) -> list[str]:
    assert isinstance(result, WorkloadPlacement), result
    return [b.node for b in result.bindings]


FILTER_CASES = [
    ("selector matches", {"node_selector": {"pool": "a"}}, ["a"]),
    ("selector misses", {"node_selector": {"pool": "zzz"}}, "didn't match Pod's node affinity/selector"),
    (
        "affinity In",
        {"node_affinity": ((Requirement("pool", "In", ("b",)),),)},
        ["b"],
    ),
    (
        "affinity terms are ORed",
        {"node_affinity": ((Requirement("pool", "In", ("x",)),), (Requirement("pool", "In", ("c",)),))},
        ["c"],
    ),
    ("untolerated taint", {"node_selector": {"pool": "t"}}, "untolerated taint {gpu: h100}"),
    (
        "toleration admits tainted node",
        {"node_selector": {"pool": "t"}, "tolerations": (Toleration("gpu", "Equal", "h100", "NoSchedule"),)},
        ["t"],
    ),
    ("unschedulable node", {"node_selector": {"pool": "u"}}, "were unschedulable"),
    (
        "GPU model through the GFD product label",
        {"node_selector": {"nvidia.com/gpu.product": "NVIDIA-L4"}},
        ["l4"],
    ),
]


@pytest.mark.parametrize(("case", "pod", "expected"), FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_filters(case: str, pod: dict[str, object], expected: list[str] | str) -> None:
    nodes = [
        node("a", labels={"pool": "a"}),
        node("b", labels={"pool": "b"}),
        node("c", labels={"pool": "c"}),
        node("t", labels={"pool": "t"}, taints=(Taint("gpu", "h100"),)),
        node("u", labels={"pool": "u"}, unschedulable=True),
        node("l4", labels={"pool": "l4", "nvidia.com/gpu.product": "NVIDIA-L4"}),
    ]
    result = Placer(nodes).place(workload("w", **pod))
    if isinstance(expected, str):
        assert isinstance(result, PlacementFailure)
        assert expected in result.message
        assert result.message.startswith("0/6 nodes are available:")
    else:
        assert nodes_of(result) == expected


def test_prefer_no_schedule_taint_does_not_filter() -> None:
    nodes = [node("soft", taints=(Taint("x", "y", "PreferNoSchedule"),))]
    assert nodes_of(Placer(nodes).place(workload("w"))) == ["soft"]


def test_flavor_node_labels_and_tolerations_are_injected() -> None:
    spot = ResourceFlavor(
        "spot", node_labels={"capacity": "spot"}, tolerations=(Toleration("spot", "Exists"),)
    )
    nodes = [
        node("on-demand", labels={"capacity": "on-demand"}),
        node("spot-1", labels={"capacity": "spot"}, taints=(Taint("spot", "true"),)),
    ]
    placer = Placer(nodes, flavors={"spot": spot})
    admitted = [PodSetAssignment("main", {"nvidia.com/gpu": "spot"}, {"nvidia.com/gpu": 1}, 1)]
    assert nodes_of(placer.place(workload("w"), admitted)) == ["spot-1"]


CHOOSER_CASES = [
    ("binpack takes the fullest node that fits", "binpack", "half"),
    ("spread takes the emptiest node", "spread", "empty"),
]


@pytest.mark.parametrize(("case", "policy", "expected"), CHOOSER_CASES, ids=[c[0] for c in CHOOSER_CASES])
def test_choosers(case: str, policy: str, expected: str) -> None:
    placer = Placer([node("empty"), node("half"), node("most")], policy=policy)
    for name, gpus in (("half", 4), ("most", 7)):
        pinned = PodSet("main", 1, {"nvidia.com/gpu": gpus}, node_selector={HOST: name})
        assert isinstance(placer.place(Workload("team", f"fill-{name}", "q", (pinned,))), WorkloadPlacement)
    expected_node = {"half": "most", "empty": "empty"}[expected]
    assert nodes_of(placer.place(workload("w"))) == [expected_node]
    # a 2-GPU pod no longer fits the node with one GPU left: binpack takes the half-full one
    two = workload("two", requests={"nvidia.com/gpu": 2})
    assert nodes_of(placer.place(two)) == [{"binpack": "half", "spread": "empty"}[policy]]


def test_binpack_fills_one_node_before_the_next_and_spread_alternates() -> None:
    packed = Placer([node("a"), node("b")], policy="binpack")
    spread = Placer([node("a"), node("b")], policy="spread")
    assert [nodes_of(packed.place(workload(f"w{i}")))[0] for i in range(4)] == ["a"] * 4
    assert [nodes_of(spread.place(workload(f"w{i}")))[0] for i in range(4)] == ["a", "b", "a", "b"]


def test_unknown_policy_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="binpack"):
        Placer([node("a")], policy="nope")


FRACTIONAL = GPUSharing(SharingMode.FRACTIONAL)


def share(milli: int, memory_mib: int = 0) -> dict[str, int]:
    requests = {"cpu": 1000, "gpuq.dev/gpu-milli": milli}
    return requests | ({"gpuq.dev/gpu-memory": memory_mib} if memory_mib else {})


FRACTION_CASES = [
    ("two halves share one GPU", [500, 500], [(0,), (0,)]),
    ("best fit: 300 goes to the GPU with 500 left", [500, 300], [(0,), (0,)]),
    ("700 does not fit beside 500", [500, 700], [(0,), (1,)]),
    ("four quarters then a whole GPU", [250, 250, 250, 250, 1000], [(0,), (0,), (0,), (0,), (1,)]),
]


@pytest.mark.parametrize(("case", "millis", "gpus"), FRACTION_CASES, ids=[c[0] for c in FRACTION_CASES])
def test_fractional_packing(case: str, millis: list[int], gpus: list[tuple[int, ...]]) -> None:
    placer = Placer([node("f", 2, sharing=FRACTIONAL)])
    got = []
    for i, milli in enumerate(millis):
        requests = share(milli) if milli < 1000 else {"cpu": 1000, "nvidia.com/gpu": 1}
        result = placer.place(workload(f"w{i}", requests=requests))
        assert isinstance(result, WorkloadPlacement), result
        got.append(result.bindings[0].gpus)
    assert got == gpus


def test_fractional_memory_limits_sharing() -> None:
    placer = Placer([node("f", 1, sharing=FRACTIONAL)])
    assert isinstance(placer.place(workload("a", requests=share(200, 60000))), WorkloadPlacement)
    failure = placer.place(workload("b", requests=share(200, 30000)))
    assert isinstance(failure, PlacementFailure)
    assert "Insufficient gpuq.dev/gpu-milli" in failure.message


def test_whole_gpu_needs_an_untouched_device_on_a_sharing_node() -> None:
    placer = Placer([node("f", 1, sharing=FRACTIONAL)])
    placer.place(workload("a", requests=share(100)))
    assert isinstance(placer.place(workload("b")), PlacementFailure)


def test_fractional_pod_does_not_fit_an_exclusive_node() -> None:
    failure = Placer([node("x", 8)]).place(workload("a", requests=share(500)))
    assert isinstance(failure, PlacementFailure)
    assert "Insufficient gpuq.dev/gpu-milli" in failure.message


DEVICE_CASES = [
    (
        "time-slicing: 2 GPUs x 4 replicas hold 8 pods",
        node("ts", 0, extra={"nvidia.com/gpu": 8}, sharing=GPUSharing(SharingMode.TIME_SLICING, replicas=4)),
        {"nvidia.com/gpu": 1},
        8,
    ),
    (
        "time-slicing renamed: gpu.shared",
        node(
            "ts",
            0,
            extra={"nvidia.com/gpu.shared": 6},
            sharing=GPUSharing(SharingMode.TIME_SLICING, replicas=3, rename_by_default=True),
        ),
        {"nvidia.com/gpu.shared": 1},
        6,
    ),
    (
        "MIG mixed: seven 1g.10gb slices",
        node("mig", 0, extra={"nvidia.com/mig-1g.10gb": 7}, sharing=GPUSharing(SharingMode.MIG_MIXED)),
        {"nvidia.com/mig-1g.10gb": 1},
        7,
    ),
    (
        "MIG mixed: other profile absent",
        node("mig", 0, extra={"nvidia.com/mig-1g.10gb": 7}, sharing=GPUSharing(SharingMode.MIG_MIXED)),
        {"nvidia.com/mig-3g.40gb": 1},
        0,
    ),
    ("whole GPUs", node("x", 8), {"nvidia.com/gpu": 2}, 4),
    ("CPU bound: 64 cores, 10 per pod", node("x", 8), {"cpu": 10_000}, 6),
]


@pytest.mark.parametrize(
    ("case", "the_node", "requests", "fits"), DEVICE_CASES, ids=[c[0] for c in DEVICE_CASES]
)
def test_device_kinds_count_pods_that_fit(
    case: str, the_node: Node, requests: dict[str, int], fits: int
) -> None:
    placer = Placer([the_node])
    placed = sum(
        isinstance(placer.place(workload(f"w{i}", requests=requests)), WorkloadPlacement) for i in range(10)
    )
    assert placed == fits


def test_gang_is_all_or_nothing() -> None:
    placer = Placer([node("a", 4), node("b", 4)])
    failure = placer.place(workload("big", 3, requests={"nvidia.com/gpu": 3}))
    assert isinstance(failure, PlacementFailure)
    assert all(c.gpu_free_milli() == 4000 for c in placer.nodes.values())
    assert placer.placements == {}
    assert isinstance(placer.place(workload("fits", 2, requests={"nvidia.com/gpu": 3})), WorkloadPlacement)


def test_gang_with_two_pod_sets_rolls_back_the_first() -> None:
    placer = Placer([node("a", 4)])
    two = Workload(
        "team",
        "two",
        "q",
        (PodSet("driver", 1, {"nvidia.com/gpu": 2}), PodSet("workers", 2, {"nvidia.com/gpu": 2})),
    )
    assert isinstance(placer.place(two), PlacementFailure)
    assert placer.nodes["a"].gpu_free_milli() == 4000


def test_release_and_check_leave_no_trace() -> None:
    placer = Placer([node("a", 2)])
    assert placer.check(workload("w", 2)) is None
    assert placer.nodes["a"].gpu_free_milli() == 2000
    placer.place(workload("w", 2))
    assert placer.check(workload("v")) is not None
    placer.release("team/w")
    assert placer.nodes["a"].gpu_free_milli() == 2000
    placer.release("team/unknown")  # ignored


def test_partial_admission_places_the_admitted_count() -> None:
    placer = Placer([node("a", 8)])
    admitted = [PodSetAssignment("main", {"nvidia.com/gpu": "default"}, {"nvidia.com/gpu": 3}, 3)]
    result = placer.place(workload("w", 10), admitted)
    assert len(nodes_of(result)) == 3


# ---------------------------------------------------------------------------------- topology
TAS = ResourceFlavor("tas", topology_name="default")
LEVELS = (BLOCK, RACK, HOST)


def cluster() -> list[Node]:
    """2 blocks x 2 racks x 2 hosts of 8 GPUs; b1/r1 hosts are half used by the caller when needed."""
    return [
        node(f"{b}-{r}-h{h}", 8, labels={BLOCK: b, RACK: f"{b}-{r}"})
        for b in ("b1", "b2")
        for r in ("r1", "r2")
        for h in (1, 2)
    ]


def tas_workload(name: str, count: int, gpus: int, mode: TopologyMode | None, level: str | None) -> Workload:
    request = TopologyRequest(mode, level) if mode else None
    return Workload("team", name, "q", (PodSet("main", count, {"nvidia.com/gpu": gpus}, topology=request),))


def admitted(count: int, gpus: int) -> list[PodSetAssignment]:
    return [PodSetAssignment("main", {"nvidia.com/gpu": "tas"}, {"nvidia.com/gpu": gpus * count}, count)]


TAS_CASES = [
    ("required rack: 2 pods of 8 GPUs in one rack", 2, 8, TopologyMode.REQUIRED, RACK, {"b1-r1"}),
    ("required rack fails: 3 x 8 GPUs fit in total but in no rack", 3, 8, TopologyMode.REQUIRED, RACK, None),
    ("preferred rack falls back to the block", 3, 8, TopologyMode.PREFERRED, RACK, {"b1-r1", "b1-r2"}),
    ("required block holds 4 x 8", 4, 8, TopologyMode.REQUIRED, BLOCK, {"b1-r1", "b1-r2"}),
    ("required block fails for 5 x 8", 5, 8, TopologyMode.REQUIRED, BLOCK, None),
    ("unconstrained spreads over the whole cluster", 5, 8, TopologyMode.UNCONSTRAINED, None, None),
    ("implied request behaves as unconstrained", 8, 8, None, None, None),
]


@pytest.mark.parametrize(
    ("case", "count", "gpus", "mode", "level", "racks"), TAS_CASES, ids=[c[0] for c in TAS_CASES]
)
def test_topology_aware_gangs(
    case: str, count: int, gpus: int, mode: TopologyMode | None, level: str | None, racks: set[str] | None
) -> None:
    placer = Placer(cluster(), flavors={"tas": TAS}, topologies={"default": LEVELS})
    result = placer.place(tas_workload("g", count, gpus, mode, level), admitted(count, gpus))
    expect_fail = mode in (TopologyMode.REQUIRED,) and racks is None
    if expect_fail:
        assert isinstance(result, PlacementFailure)
        assert result.reason == "TopologyPlacementFailed"
        assert all(c.gpu_free_milli() == 8000 for c in placer.nodes.values())
        return
    assert isinstance(result, WorkloadPlacement), result
    assert len(result.bindings) == count
    used_racks = {placer.nodes[b.node].node.labels[RACK] for b in result.bindings}
    if racks is not None:
        assert used_racks == racks
    topology = result.pod_sets[0].topology
    assert topology is not None and topology.levels == LEVELS
    assert sum(d.count for d in topology.domains) == count


def test_topology_counts_free_capacity_not_total() -> None:
    placer = Placer(cluster(), flavors={"tas": TAS}, topologies={"default": LEVELS})
    # Half-fill one host of every rack except b2-r2: only b2-r2 still holds 2 x 8 GPUs.
    for rack in ("b1-r1", "b1-r2", "b2-r1"):
        filler = Workload(
            "team",
            f"fill-{rack}",
            "q",
            (PodSet("main", 1, {"nvidia.com/gpu": 4}, node_selector={RACK: rack}),),
        )
        assert isinstance(placer.place(filler), WorkloadPlacement)
    result = placer.place(tas_workload("g", 2, 8, TopologyMode.REQUIRED, RACK), admitted(2, 8))
    assert {placer.nodes[n].node.labels[RACK] for n in nodes_of(result)} == {"b2-r2"}


def test_topology_gang_with_fractional_pods_packs_within_a_host() -> None:
    nodes = [node(f"h{i}", 1, labels={BLOCK: "b", RACK: "r"}, sharing=FRACTIONAL) for i in range(2)]
    placer = Placer(nodes, flavors={"tas": TAS}, topologies={"default": LEVELS})
    wl = Workload(
        "team",
        "g",
        "q",
        (PodSet("main", 4, share(250), topology=TopologyRequest(TopologyMode.REQUIRED, HOST)),),
    )
    pod_sets = [PodSetAssignment("main", {"gpuq.dev/gpu-milli": "tas"}, {"gpuq.dev/gpu-milli": 1000}, 4)]
    assert len(set(nodes_of(placer.place(wl, pod_sets)))) == 1


# ------------------------------------------------------------------------- scored policies
SCORED = ["random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd"]


@pytest.mark.parametrize("policy", SCORED)
def test_paper_policies_place_through_the_engine(policy: str) -> None:
    from gpuq.core.placement.scoring import inputs_for

    batch = [workload(f"s{i}", requests=share(500)) for i in range(4)] + [workload("w", 2)]
    placer = Placer(
        [node("a", 2, sharing=FRACTIONAL), node("b", 2, sharing=FRACTIONAL)],
        policy=policy,
        policy_inputs=inputs_for(batch, seed=7),
    )
    results = [placer.place(w) for w in batch[:4]]
    assert all(isinstance(r, WorkloadPlacement) for r in results)
    free = sorted(c.gpu_free_milli() for c in placer.nodes.values())
    assert sum(free) == 4000 - 2000
    whole = placer.place(batch[4])
    # two shares per GPU; the 2-GPU pod fits only where a node kept both GPUs idle
    assert isinstance(whole, WorkloadPlacement) == (free == [0, 2000])


def test_gpu_packing_keeps_idle_gpus_whole() -> None:
    placer = Placer([node("a", 2, sharing=FRACTIONAL)], policy="gpu-packing")
    first = placer.place(workload("s1", requests=share(300)))
    second = placer.place(workload("s2", requests=share(300)))
    assert isinstance(first, WorkloadPlacement) and isinstance(second, WorkloadPlacement)
    assert first.bindings[0].gpus == second.bindings[0].gpus, "the second share joins the used GPU"


def test_random_policy_is_reproducible_with_its_seed() -> None:
    from gpuq.core.placement.scoring import inputs_for

    def run(seed: int) -> list[str]:
        placer = Placer(
            [node(f"n{i}", 8) for i in range(6)], policy="random", policy_inputs=inputs_for([], seed)
        )
        return [nodes_of(placer.place(workload(f"w{i}")))[0] for i in range(12)]

    assert run(3) == run(3)
    assert len(set(run(3))) > 1


def test_slices_keep_each_group_of_pods_in_one_rack() -> None:
    nodes = [node(f"{r}-h{h}", 8, labels={BLOCK: "b1", RACK: r}) for r in ("r1", "r2", "r3") for h in (1, 2)]
    placer = Placer(nodes, flavors={"tas": TAS}, topologies={"default": LEVELS})
    # one host of r1 busy: r1 can no longer hold a slice of two 8-GPU pods
    busy = PodSet("main", 1, {"nvidia.com/gpu": 8}, node_selector={HOST: "r1-h1"})
    assert isinstance(placer.place(Workload("team", "busy", "q", (busy,))), WorkloadPlacement)
    sliced = TopologyRequest(TopologyMode.PREFERRED, BLOCK, slice_level=RACK, slice_size=2)
    wl = Workload("team", "g", "q", (PodSet("main", 4, {"nvidia.com/gpu": 8}, topology=sliced),))
    result = placer.place(wl, admitted(4, 8))
    assert isinstance(result, WorkloadPlacement), result
    per_rack = Counter(placer.nodes[b.node].node.labels[RACK] for b in result.bindings)
    assert per_rack == {"r2": 2, "r3": 2}
    too_many = Workload("team", "h", "q", (PodSet("main", 2, {"nvidia.com/gpu": 8}, topology=sliced),))
    failure = placer.place(too_many, admitted(2, 8))
    assert isinstance(failure, PlacementFailure) and "slice" in failure.message


# ----------------------------------------------------------------------------- HAMi-style shares
HAMI_DEMANDS = [
    ("whole GPUs", {"nvidia.com/gpu": 2}, GPUDemand(2, 1000, 0)),
    ("gpu-milli share", {"gpuq.dev/gpu-milli": 300}, GPUDemand(1, 300, 0)),
    ("gpu-milli whole GPUs", {"gpuq.dev/gpu-milli": 2000}, GPUDemand(2, 1000, 0)),
    (
        "HAMi cores and memory",
        {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 30, "nvidia.com/gpumem": 4000},
        GPUDemand(1, 300, 4000),
    ),
    ("HAMi on two GPUs", {"nvidia.com/gpu": 2, "nvidia.com/gpucores": 50}, GPUDemand(2, 500, 0)),
    (
        "HAMi memory only: compute shared",
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000},
        GPUDemand(1, 0, 8000),
    ),
    ("no GPU", {"cpu": 1000}, GPUDemand(0, 0, 0)),
]


@pytest.mark.parametrize(("case", "requests", "expected"), HAMI_DEMANDS, ids=[c[0] for c in HAMI_DEMANDS])
def test_gpu_demand_reads_every_spelling(case: str, requests: dict[str, int], expected: GPUDemand) -> None:
    assert gpu_demand(requests) == expected


HAMI_PACKING = [
    ("two pods at half of both GPUs", {"nvidia.com/gpu": 2, "nvidia.com/gpucores": 50}, 2),
    (
        "a pod at 60% of both GPUs leaves no room for a second",
        {"nvidia.com/gpu": 2, "nvidia.com/gpucores": 60},
        1,
    ),
    (
        "memory bounds compute-free shares: 81920 MiB / 20000",
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000},
        8,
    ),
    ("three GPUs on a two-GPU node", {"nvidia.com/gpu": 3, "nvidia.com/gpucores": 10}, 0),
]


@pytest.mark.parametrize(("case", "requests", "fits"), HAMI_PACKING, ids=[c[0] for c in HAMI_PACKING])
def test_hami_shares_pack_on_distinct_gpus(case: str, requests: dict[str, int], fits: int) -> None:
    placer = Placer([node("f", 2, sharing=FRACTIONAL)])
    shape = pod_shape(requests)
    assert placer.nodes["f"].fit_count(shape, 100) == fits
    placed = [placer.place(workload(f"w{i}", requests=requests)) for i in range(10)]
    ok = [p for p in placed if isinstance(p, WorkloadPlacement)]
    assert len(ok) == fits
    for placement in ok:
        gpus = placement.bindings[0].gpus
        assert len(set(gpus)) == len(gpus) == requests["nvidia.com/gpu"]


@pytest.mark.parametrize(
    ("slots", "per_pod", "expected"),
    [([3, 1], 2, 1), ([2, 2], 2, 2), ([5, 5, 5], 2, 7), ([4, 0, 0], 1, 4), ([9, 9], 3, 0)],
)
def test_pods_over_distinct_gpus(slots: list[int], per_pod: int, expected: int) -> None:
    from gpuq.core.placement.capacity import _pods_over_distinct_gpus

    assert _pods_over_distinct_gpus(slots, per_pod, 100) == expected


# ------------------------------------------------------------------- recorded topology assignments
def test_a_recorded_topology_assignment_is_honoured() -> None:
    from gpuq.core.model import RecordedTopology

    placer = Placer(cluster(), flavors={"tas": TAS}, topologies={"default": LEVELS})
    recorded = RecordedTopology((HOST,), ((("b2-r2-h2",), 1), (("b1-r1-h1",), 1)))
    pod_sets = [PodSetAssignment("main", {"nvidia.com/gpu": "tas"}, {"nvidia.com/gpu": 16}, 2, recorded)]
    wl = tas_workload("running", 2, 8, TopologyMode.REQUIRED, RACK)  # the algorithm would use one rack
    assert sorted(nodes_of(placer.place(wl, pod_sets))) == ["b1-r1-h1", "b2-r2-h2"]


def test_a_recorded_domain_that_no_longer_holds_its_pods_is_named() -> None:
    from gpuq.core.model import RecordedTopology

    placer = Placer(cluster(), flavors={"tas": TAS}, topologies={"default": LEVELS})
    recorded = RecordedTopology((BLOCK, RACK), ((("b1", "b1-r1"), 3),))
    pod_sets = [PodSetAssignment("main", {"nvidia.com/gpu": "tas"}, {"nvidia.com/gpu": 24}, 3, recorded)]
    failure = placer.place(tas_workload("running", 3, 8, TopologyMode.REQUIRED, RACK), pod_sets)
    assert isinstance(failure, PlacementFailure)
    domain = f"{BLOCK}=b1, {RACK}=b1-r1"
    assert failure.message == f"the recorded topology domain {domain} holds only 2 of 3 pod(s)"
    assert all(c.gpu_free_milli() == 8000 for c in placer.nodes.values())


def test_best_fit_compares_true_capacities_not_capped_at_the_gang_size() -> None:
    """Kueue counts every pod a node holds: a gang of 4 takes the rack holding 5, not the one holding 8."""
    nodes = [
        node("big", 8, labels={BLOCK: "b", RACK: "r-a"}),
        node("small", 5, labels={BLOCK: "b", RACK: "r-b"}),
    ]
    placer = Placer(nodes, flavors={"tas": TAS}, topologies={"default": LEVELS})
    result = placer.place(tas_workload("g", 4, 1, TopologyMode.REQUIRED, RACK), admitted(4, 1))
    assert set(nodes_of(result)) == {"small"}
    scratch = Placer(nodes, flavors={"tas": TAS}, topologies={"default": LEVELS}, topology_views=0)
    assert set(
        nodes_of(scratch.place(tas_workload("g", 4, 1, TopologyMode.REQUIRED, RACK), admitted(4, 1)))
    ) == {"small"}


@pytest.mark.parametrize("policy", ["binpack", "spread", "fgd"])
def test_prefer_no_schedule_taints_are_avoided_while_other_nodes_fit(policy: str) -> None:
    soft = (Taint("maintenance", "soon", "PreferNoSchedule"),)
    placer = Placer([node("a-soft", 8, taints=soft), node("b", 2)], policy=policy)
    assert [nodes_of(placer.place(workload(f"w{i}")))[0] for i in range(3)] == ["b", "b", "a-soft"]
    tolerant = Placer([node("a-soft", 8, taints=soft), node("b", 2)], policy="spread")
    pod = workload("t", tolerations=(Toleration("maintenance", "Exists"),))
    assert nodes_of(tolerant.place(pod)) == ["a-soft"], "tolerated, the emptier node wins again"
