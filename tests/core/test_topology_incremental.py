"""Topology placement on live domain trees makes exactly the decisions of the from-scratch code.

Three oracles: the pre-tree algorithm kept verbatim (``kueue_tas_reference``) for ``assign``; a
freshly built tree for a tree kept up to date leaf by leaf; and a ``Placer`` without live views
(every node with room read per gang, as Kueue's snapshot) for a ``Placer`` that keeps them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq.core.model import PodSet, PodSetAssignment, ResourceFlavor, TopologyMode, TopologyRequest, Workload
from gpuq.core.nodes import GPUSharing, Node, SharingMode
from gpuq.core.placement import engine
from gpuq.core.placement.capacity import NodeCapacity, PodShape
from gpuq.core.placement.engine import PlacementFailure, Placer, WorkloadPlacement
from gpuq.core.topology import TopologyAssignment, assign
from gpuq.core.topology_tree import DomainTree

from .kueue_tas_reference import assign as reference_assign

BLOCK, RACK, HOST = "block", "rack", "kubernetes.io/hostname"
MODES = [None, TopologyMode.REQUIRED, TopologyMode.PREFERRED, TopologyMode.UNCONSTRAINED]


@st.composite
def topology_requests(draw: st.DrawFn, levels: tuple[str, ...]) -> TopologyRequest | None:
    """Any request on ``levels``: implied, or a mode with or without slices (some invalid)."""
    mode = draw(st.sampled_from(MODES))
    if mode is None:
        return None
    level = None if mode is TopologyMode.UNCONSTRAINED else draw(st.sampled_from(levels))
    if draw(st.booleans()):
        return TopologyRequest(mode, level)
    slice_level = draw(st.sampled_from(levels[levels.index(level) if level else 0 :]))
    return TopologyRequest(mode, level, slice_level, draw(st.integers(1, 3)))


def whole_slices(count: int, request: TopologyRequest | None, exact: bool) -> int:
    """``count`` rounded down to whole slices when ``exact`` (else left to fail as it may)."""
    size = request.slice_size if request is not None and request.slice_size else 1
    return count - count % size if exact else count


# --- assign against the pre-tree algorithm ----------------------------------------------------


@st.composite
def leaf_sets(draw: st.DrawFn) -> tuple[tuple[str, ...], dict[tuple[str, ...], int]]:
    depth = draw(st.integers(1, 4))
    levels = tuple(f"level-{i}" for i in range(depth))
    value = st.sampled_from("abcde"[: draw(st.integers(1, 5))])
    leaves = draw(st.dictionaries(st.tuples(*[value] * depth), st.integers(0, 9), max_size=30))
    return levels, leaves


@settings(max_examples=600, deadline=None)
@given(data=st.data(), count=st.integers(0, 40), least_free=st.booleans(), exact=st.booleans())
def test_assign_decides_as_the_pre_tree_algorithm(
    data: st.DataObject, count: int, least_free: bool, exact: bool
) -> None:
    levels, leaves = data.draw(leaf_sets())
    request = data.draw(topology_requests(levels))
    count = whole_slices(count, request, exact)
    got = assign(levels, leaves, count, request, profile_least_free_for_unconstrained=least_free)
    want = reference_assign(levels, leaves, count, request, profile_least_free_for_unconstrained=least_free)
    assert got == want


def test_assign_on_two_thousand_random_leaves_decides_as_the_pre_tree_algorithm() -> None:
    rng = random.Random(11)
    levels = (BLOCK, RACK, HOST)
    for _ in range(30):
        leaves: dict[tuple[str, ...], int] = {
            (f"b{i % 4}", f"r{i % 40}", f"h{i}"): rng.choice((0, 0, 1, 2, 3, 8)) for i in range(2000)
        }
        mode = rng.choice(MODES)
        level = rng.choice(levels) if mode not in (None, TopologyMode.UNCONSTRAINED) else None
        slicing = (
            rng.choice(((None, None), (RACK, 2), (HOST, 2)))
            if level != BLOCK or mode is None
            else (None, None)
        )
        request = None if mode is None else TopologyRequest(mode, level, *slicing)
        count = rng.choice((2, 8, 64, 600))
        for least_free in (True, False):
            got = assign(levels, leaves, count, request, profile_least_free_for_unconstrained=least_free)
            want = reference_assign(
                levels, leaves, count, request, profile_least_free_for_unconstrained=least_free
            )
            assert got == want


# --- a tree kept up to date against a fresh one -----------------------------------------------


def snapshot(tree: DomainTree) -> tuple[object, ...]:
    children = tuple(tuple(tree.children(key[2])) for level in tree.ranked[: tree.depth - 1] for key in level)
    return tuple(tuple(level) for level in tree.ranked), children, tree.total_slices


@settings(max_examples=300, deadline=None)
@given(
    depth=st.integers(1, 3),
    slicing=st.tuples(st.integers(0, 2), st.integers(1, 3)),
    changes=st.lists(st.tuples(st.tuples(*[st.sampled_from("abc")] * 3), st.integers(-4, 6)), max_size=40),
)
def test_a_tree_updated_leaf_by_leaf_equals_one_built_from_its_leaves(
    depth: int, slicing: tuple[int, int], changes: list[tuple[tuple[str, ...], int]]
) -> None:
    slice_level_idx, slice_size = min(slicing[0], depth - 1), slicing[1]
    tree = DomainTree(depth, slice_level_idx, slice_size)
    leaves: dict[tuple[str, ...], int] = {}
    for values, delta in changes:
        leaf = values[:depth]
        delta = max(delta, -leaves.get(leaf, 0))
        leaves[leaf] = leaves.get(leaf, 0) + delta
        tree.add(leaf, delta)
        assert snapshot(tree) == snapshot(DomainTree.build(depth, leaves, slice_level_idx, slice_size))


def test_a_leaf_may_not_go_below_zero_pods() -> None:
    tree = DomainTree.build(2, {("r", "h"): 1}, 1, 1)
    with pytest.raises(ValueError, match="would hold -1 pods"):
        tree.add(("r", "h"), -2)


# --- the placer with and without live views ---------------------------------------------------

TAS = ResourceFlavor("tas", topology_name="default")
TAS_POOL = ResourceFlavor("tas-pool", node_labels={"pool": "a"}, topology_name="default")
PLAIN = ResourceFlavor("plain")
FLAVORS = {f.name: f for f in (TAS, TAS_POOL, PLAIN)}
LEVEL_SETS = [(BLOCK, RACK, HOST), (RACK, HOST), (BLOCK, RACK)]  # the last: several nodes per leaf
FRACTIONAL = GPUSharing(SharingMode.FRACTIONAL)


@st.composite
def nodes(draw: st.DrawFn) -> list[Node]:
    """2-9 nodes in 2 blocks x 2 racks, some without a rack label, of mixed size and sharing."""
    out = []
    for i in range(draw(st.integers(2, 9))):
        gpus = draw(st.sampled_from([0, 1, 2, 4]))
        sharing = draw(st.sampled_from([GPUSharing(), FRACTIONAL])) if gpus else GPUSharing()
        allocatable = {"cpu": 1000 * draw(st.integers(1, 8)), "pods": draw(st.sampled_from([2, 110]))}
        if gpus:
            allocatable["nvidia.com/gpu"] = gpus
        if gpus and sharing.mode is SharingMode.FRACTIONAL:
            allocatable["gpuq.dev/gpu-milli"] = 1000 * gpus
        block = draw(st.sampled_from(["b1", "b2"]))
        labels = {HOST: f"n{i}", BLOCK: block, "pool": draw(st.sampled_from(["a", "b"]))}
        if draw(st.integers(0, 9)):  # one node in ten misses its rack label
            labels[RACK] = f"{block}-{draw(st.sampled_from(['r1', 'r2']))}"
        model = "H100-80GB" if gpus else None
        out.append(
            Node(f"n{i}", allocatable, labels=labels, gpu_model=model, gpu_count=gpus, sharing=sharing)
        )
    return out


@st.composite
def pod_requests(draw: st.DrawFn) -> dict[str, int]:
    requests = {"cpu": 500 * draw(st.integers(1, 4))}
    gpu = draw(st.sampled_from(["none", "1", "2", "share"]))
    if gpu == "share":
        requests["gpuq.dev/gpu-milli"] = draw(st.sampled_from([250, 500]))
    elif gpu != "none":
        requests["nvidia.com/gpu"] = int(gpu)
    return requests


@dataclass(frozen=True)
class Op:
    kind: str  # place | check | release
    workload: Workload
    admitted: tuple[PodSetAssignment, ...] | None


@st.composite
def gang_templates(draw: st.DrawFn, levels: tuple[str, ...]) -> tuple[tuple[PodSet, str], ...]:
    """One or two pod sets, each with a TAS flavor, sometimes a selector on a topology label."""
    pod_sets = []
    for name in ("main", "side")[: draw(st.integers(1, 2))]:
        request = draw(topology_requests(levels))
        count = whole_slices(draw(st.integers(0, 6)), request, draw(st.integers(0, 4)) > 0)
        selector = {BLOCK: "b1"} if draw(st.integers(0, 4)) == 0 else {}
        pod_set = PodSet(name, count, draw(pod_requests()), node_selector=selector, topology=request)
        pod_sets.append((pod_set, draw(st.sampled_from(["tas", "tas", "tas-pool"]))))
    return tuple(pod_sets)


@st.composite
def operations(draw: st.DrawFn, levels: tuple[str, ...]) -> list[Op]:
    """Gangs of a few templates (so views are reused), single pods, checks and releases."""
    templates = draw(st.lists(gang_templates(levels), min_size=1, max_size=3))
    singles = draw(st.lists(pod_requests(), min_size=1, max_size=2))
    ops: list[Op] = []
    for i in range(draw(st.integers(1, 24))):
        kind = draw(st.sampled_from(["place", "place", "place", "check", "single", "single", "release"]))
        if kind == "release":
            ops.append(Op("release", Workload("t", f"w{draw(st.integers(0, max(i - 1, 0)))}", "q", ()), None))
        elif kind == "single":
            pod_set = PodSet("main", draw(st.integers(1, 3)), draw(st.sampled_from(singles)))
            ops.append(Op("place", Workload("t", f"w{i}", "q", (pod_set,)), None))
        else:
            template = draw(st.sampled_from(templates))
            admitted = tuple(PodSetAssignment(ps.name, {"cpu": f}, {}, ps.count) for ps, f in template)
            workload = Workload("t", f"w{i}", "q", tuple(ps for ps, _ in template))
            ops.append(Op(kind, workload, admitted))
    return ops


def free_state(placer: Placer) -> dict[str, tuple[object, ...]]:
    return {
        name: (sorted(c.free.items()), tuple(c.gpu_milli), tuple(sorted(c.bound)))
        for name, c in placer.nodes.items()
    }


def apply(placer: Placer, op: Op) -> WorkloadPlacement | PlacementFailure | None:
    if op.kind == "release":
        placer.release(op.workload.key)
        return None
    if op.kind == "check":
        return placer.check(op.workload, op.admitted)
    return placer.place(op.workload, op.admitted)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), levels=st.sampled_from(LEVEL_SETS), filler=pod_requests(), fill=st.integers(0, 6))
def test_gangs_through_live_views_are_placed_as_from_scratch(
    data: st.DataObject, levels: tuple[str, ...], filler: dict[str, int], fill: int
) -> None:
    """Without views the placer reads every node with room and, patched here, runs the pre-tree
    ``assign``: the code before live views. With one view (rebuilt whenever the key changes)
    and with many, every outcome and every node's free state must be the same."""
    cluster = data.draw(nodes())
    ops = data.draw(operations(levels))
    placers = [
        Placer(cluster, flavors=FLAVORS, topologies={"default": levels}, topology_views=views)
        for views in (0, 1, 64)
    ]
    warm_up = Workload("t", "fill", "q", (PodSet("main", fill, filler),))  # random free capacities
    with mock.patch.object(engine, "assign", reference_assign):
        for op in [Op("place", warm_up, None), *ops]:
            want, *got = [apply(placer, op) for placer in placers]
            assert got == [want, want], op
            assert [free_state(p) for p in placers[1:]] == [free_state(placers[0])] * 2


# --- cost ----------------------------------------------------------------------------------------


def rack_cluster(size: int) -> list[Node]:
    """``size`` 8-GPU nodes over 4 blocks x 10 racks, as the placement benchmark."""
    allocatable = {"cpu": 192_000, "pods": 110, "nvidia.com/gpu": 8}
    return [
        Node(
            f"node-{i:05d}",
            allocatable,
            labels={BLOCK: f"b{i % 40 // 10}", RACK: f"r{i % 40:02d}", HOST: f"node-{i:05d}"},
            gpu_model="H100-80GB",
            gpu_count=8,
        )
        for i in range(size)
    ]


def gang(name: str, count: int) -> tuple[Workload, list[PodSetAssignment]]:
    request = TopologyRequest(TopologyMode.PREFERRED, RACK)
    pod_set = PodSet("main", count, {"cpu": 8000, "nvidia.com/gpu": 8}, topology=request)
    return Workload("t", name, "q", (pod_set,)), [PodSetAssignment("main", {"cpu": "tas"}, {}, count)]


@pytest.mark.parametrize("size", [200, 2000])
def test_a_warm_view_reads_only_the_nodes_that_changed(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    placer = Placer(rack_cluster(size), flavors={"tas": TAS}, topologies={"default": (BLOCK, RACK, HOST)})
    assert isinstance(placer.place(*gang("first", 4)), WorkloadPlacement)  # builds the view
    single = Workload("t", "single", "q", (PodSet("main", 3, {"cpu": 1000, "nvidia.com/gpu": 1}),))
    assert isinstance(placer.place(single), WorkloadPlacement)
    reads = 0
    fit_count = NodeCapacity.fit_count

    def counting(self: NodeCapacity, shape: PodShape, limit: int) -> int:
        nonlocal reads
        reads += 1
        return fit_count(self, shape, limit)

    monkeypatch.setattr(NodeCapacity, "fit_count", counting)
    second = placer.place(*gang("second", 2))
    assert isinstance(second, WorkloadPlacement)
    assert reads == 4 + 1, "the first gang's four nodes and the single pods' node, nothing else"


def test_a_view_left_behind_by_the_journal_is_rebuilt() -> None:
    levels = (BLOCK, RACK, HOST)
    fresh = Placer(rack_cluster(40), flavors={"tas": TAS}, topologies={"default": levels}, topology_views=0)
    live = Placer(rack_cluster(40), flavors={"tas": TAS}, topologies={"default": levels})
    single = Workload("t", "single", "q", (PodSet("main", 1, {"cpu": 1000, "nvidia.com/gpu": 1}),))
    for placer in (fresh, live):
        placer.place(*gang("first", 4))
        for _ in range(100):  # far more changes than the journal keeps for 40 nodes
            placer.place(single)
            placer.release(single.key)
        placer.place(single)
    assert live.index.changed_since(0) is None
    assert live.place(*gang("second", 4)) == fresh.place(*gang("second", 4))


def test_the_per_node_cap_is_shared_by_gangs_whose_pods_fill_a_node() -> None:
    placer = Placer(rack_cluster(40), flavors={"tas": TAS}, topologies={"default": (BLOCK, RACK, HOST)})
    for name, count in (("two", 2), ("four", 4), ("three", 3)):
        assert isinstance(placer.place(*gang(name, count)), WorkloadPlacement)
    assert len(placer._views) == 1, "one 8-GPU pod fills a node, so every gang size counts 1 per node"


def test_zero_pods_are_placed_without_a_view() -> None:
    placer = Placer(rack_cluster(4), flavors={"tas": TAS}, topologies={"default": (BLOCK, RACK, HOST)})
    result = placer.place(*gang("none", 0))
    assert isinstance(result, WorkloadPlacement)
    assert result.bindings == ()
    assert result.pod_sets[0].topology == TopologyAssignment((BLOCK, RACK, HOST), ())
    assert len(placer._views) == 0
