"""Properties of the placer under random binds and releases: books balance, nothing overcommits."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq.core.model import PodSet, PodSetAssignment, ResourceFlavor, TopologyMode, TopologyRequest, Workload
from gpuq.core.nodes import GPU, GPU_MILLI, GPUSharing, Node, SharingMode
from gpuq.core.placement.engine import PlacementFailure, Placer, WorkloadPlacement

LEVELS = ("rack", "kubernetes.io/hostname")
TAS = ResourceFlavor("tas", topology_name="default")


def cluster(sizes: list[int], fractional: list[bool]) -> list[Node]:
    nodes = []
    for i, (gpus, shared) in enumerate(zip(sizes, fractional, strict=True)):
        alloc = {"cpu": 32_000, "memory": 256 << 30, "pods": 16, GPU: gpus}
        sharing = GPUSharing(SharingMode.FRACTIONAL if shared else SharingMode.EXCLUSIVE)
        if shared:
            alloc[GPU_MILLI] = 1000 * gpus
        labels = {"rack": f"r{i % 3}", "kubernetes.io/hostname": f"n{i}"}
        nodes.append(
            Node(f"n{i}", alloc, labels=labels, gpu_count=gpus, gpu_memory_mib=16384, sharing=sharing)
        )
    return nodes


pod_requests = st.one_of(
    st.builds(lambda g, c: {"cpu": c, GPU: g}, st.integers(1, 8), st.integers(0, 16_000)),
    st.builds(
        lambda m, c: {"cpu": c, GPU_MILLI: m}, st.sampled_from([100, 250, 500, 750]), st.integers(0, 8000)
    ),
    st.builds(lambda c: {"cpu": c}, st.integers(1, 16_000)),
    st.builds(
        lambda g, p, m: {"cpu": 1000, GPU: g, "nvidia.com/gpucores": p, "nvidia.com/gpumem": m},
        st.integers(1, 3),
        st.sampled_from([10, 25, 50, 100]),
        st.sampled_from([0, 1024, 8192]),
    ),
)
topologies = st.one_of(
    st.none(),
    st.builds(TopologyRequest, st.just(TopologyMode.REQUIRED), st.sampled_from(LEVELS)),
    st.builds(TopologyRequest, st.just(TopologyMode.PREFERRED), st.just("rack")),
)
operations = st.lists(
    st.tuples(st.booleans(), pod_requests, st.integers(1, 4), topologies, st.integers(0, 30)), max_size=30
)


@settings(max_examples=120, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 8), min_size=1, max_size=7),
    shared=st.lists(st.booleans(), min_size=7, max_size=7),
    ops=operations,
    policy=st.sampled_from(["binpack", "spread", "fgd", "gpu-packing"]),
)
def test_books_balance_after_any_sequence_of_binds_and_releases(
    sizes: list[int],
    shared: list[bool],
    ops: list[tuple[bool, dict[str, int], int, TopologyRequest | None, int]],
    policy: str,
) -> None:
    placer = Placer(
        cluster(sizes, shared[: len(sizes)]),
        policy=policy,
        flavors={"tas": TAS},
        topologies={"default": LEVELS},
    )
    live: list[str] = []
    for i, (release, requests, count, topology, pick) in enumerate(ops):
        if release and live:
            placer.release(live.pop(pick % len(live)))
            continue
        workload = Workload("t", f"w{i}", "q", (PodSet("main", count, requests, topology=topology),))
        admitted = None
        if topology is not None:
            admitted = [PodSetAssignment("main", dict.fromkeys(requests, "tas"), {}, count)]
        before = {n: (c.gpu_free_milli(), dict(c.free)) for n, c in placer.nodes.items()}
        outcome = placer.place(workload, admitted, explain=False)
        if isinstance(outcome, PlacementFailure):
            after = {n: (c.gpu_free_milli(), dict(c.free)) for n, c in placer.nodes.items()}
            assert after == before, "a failed gang leaves every node as it was"
            continue
        assert isinstance(outcome, WorkloadPlacement)
        assert len(outcome.bindings) == count
        live.append(workload.key)
    _assert_books_balance(placer)


def _assert_books_balance(placer: Placer) -> None:
    bound = Counter(b.pod for p in placer.placements.values() for b in p.bindings)
    assert all(n == 1 for n in bound.values()), "a pod is bound once"
    for name, capacity in placer.nodes.items():
        node = capacity.node
        assert set(capacity.bound) == {
            b.pod for p in placer.placements.values() for b in p.bindings if b.node == name
        }
        used: Counter[str] = Counter()
        gpu_used = [0] * len(capacity.gpu_milli)
        memory_used = [0] * len(capacity.gpu_milli)
        for shape, gpus in capacity.bound.values():
            used.update(shape.counted)
            for index in gpus:
                gpu_used[index] += shape.gpu.milli
                memory_used[index] += shape.gpu.memory_mib if shape.gpu.partial else capacity.gpu_memory_full
        for resource, free in capacity.free.items():
            assert free >= 0
            assert free + used[resource] == node.allocatable[resource]
        for index, milli in enumerate(capacity.gpu_milli):
            assert 0 <= milli <= 1000
            assert milli + gpu_used[index] == 1000
            assert capacity.gpu_memory[index] >= 0
            assert capacity.gpu_memory[index] + memory_used[index] == capacity.gpu_memory_full
