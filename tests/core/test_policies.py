"""Placement policies: each one's choice on a small cluster, GPU choice inside a node, tie-breaks."""

from __future__ import annotations

import random

import pytest

from gpuq.core.nodes import NO_GPU, GPUDemand
from gpuq.core.placement.fragmentation import TaskType, TypicalTask
from gpuq.core.placement.policies import (
    POLICIES,
    NodeView,
    PodView,
    PolicyInputs,
    PolicyName,
    TieBreak,
    after_placement,
    choose_node,
    fits,
    make_policy,
)

GIB = 1 << 30
SHARE_300 = PodView(4_000, 8 * GIB, GPUDemand(count=1, milli=300))
FGD_TASKS = (TypicalTask(TaskType(4_000, GPUDemand(count=1, milli=500)), 1.0),)


def node(
    *gpu_free: int,
    cpu_free: int = 32_000,
    memory_free: int = 128 * GIB,
    model: str | None = "T4",
    kinds: tuple[tuple[str, int], ...] = (),
) -> NodeView:
    return NodeView(tuple(gpu_free), cpu_free, 32_000, memory_free, 128 * GIB, model, kinds)


# n0 idle; n1 runs one 600-milli share on GPU 3; n2 runs three whole-GPU pods.
CLUSTER = (
    node(1000, 1000, 1000, 1000),
    node(1000, 1000, 1000, 400, cpu_free=20_000, kinds=(("share-gpu", 1),)),
    node(1000, 0, 0, 0, cpu_free=8_000, kinds=(("1-gpu", 3),)),
)

CHOICES = [
    ("dotprod prefers the node with the least left (scores 98, 98, 99)", PolicyName.DOTPROD, 2),
    ("gpu-clustering prefers the node running only sharing pods (37, 89, 21)", PolicyName.GPU_CLUSTERING, 1),
    ("gpu-packing prefers sharing a used GPU (29, 96, 49)", PolicyName.GPU_PACKING, 1),
    ("bestfit prefers the least CPU and GPU left after placement (65, 74, 94)", PolicyName.BESTFIT, 2),
    ("fgd prefers filling the fragment a 500-milli task cannot use (50, 57, 50)", PolicyName.FGD, 1),
    ("binpack prefers the most GPU-allocated node after placement", PolicyName.BINPACK, 2),
    ("spread prefers the least GPU-allocated node after placement", PolicyName.SPREAD, 0),
]


@pytest.mark.parametrize(("name", "policy", "expected"), CHOICES, ids=[c[0] for c in CHOICES])
def test_policy_choice_on_a_three_node_cluster(name: str, policy: str, expected: int) -> None:
    chosen = make_policy(policy, PolicyInputs(typical_tasks=FGD_TASKS, rng=random.Random(0)))
    assert choose_node(chosen, CLUSTER, SHARE_300, random.Random(0)) == expected


def test_scores_on_the_three_node_cluster() -> None:
    inputs = PolicyInputs(typical_tasks=FGD_TASKS, rng=random.Random(0))
    names = ("dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd")
    scores = {name: [make_policy(name, inputs).score(n, SHARE_300) for n in CLUSTER] for name in names}
    assert scores == {
        "dotprod": [98.0, 98.0, 99.0],
        "gpu-clustering": [37.0, 89.0, 21.0],
        "gpu-packing": [29.0, 96.0, 49.0],
        "bestfit": [65.0, 74.0, 94.0],
        "fgd": [50.0, 57.0, 50.0],
    }


def test_random_policy_draws_every_feasible_node() -> None:
    rng = random.Random(7)
    policy = make_policy(PolicyName.RANDOM, PolicyInputs(rng=rng))
    nodes = (*CLUSTER, node(1000, cpu_free=1_000))  # the last is too short of CPU
    assert {choose_node(policy, nodes, SHARE_300, rng) for _ in range(200)} == {0, 1, 2}


GPU_CASES = [
    ("a share goes to the tightest GPU, lowest index first", "bestfit", (1000, 400, 600, 400), 1, 300, (1,)),
    ("whole GPUs are the lowest-index idle ones", "gpu-packing", (1000, 500, 1000, 1000), 2, 1000, (0, 2)),
    ("spread gives a share the GPU with the most free milli", "spread", (400, 1000, 600, 1000), 1, 300, (1,)),
    ("spread gives whole GPUs the lowest-index idle ones", "spread", (500, 1000, 1000), 1, 1000, (1,)),
    ("binpack gives a share the tightest GPU", "binpack", (1000, 350, 300, 200), 1, 300, (2,)),
    ("fgd gives a share the GPU whose fragment it fills", "fgd", (1000, 1000, 1000, 400), 1, 300, (3,)),
    ("fgd takes the first GPU among equal scores", "fgd", (1000, 1000), 1, 300, (0,)),
    ("fgd gives whole GPUs the lowest-index idle ones", "fgd", (0, 1000, 1000), 1, 1000, (1,)),
    ("a CPU-only pod gets no GPU", "dotprod", (1000, 1000), 0, 0, ()),
]


@pytest.mark.parametrize(
    ("name", "policy", "free", "count", "milli", "expected"), GPU_CASES, ids=[c[0] for c in GPU_CASES]
)
def test_gpu_choice_inside_a_node(
    name: str, policy: str, free: tuple[int, ...], count: int, milli: int, expected: tuple[int, ...]
) -> None:
    pod = PodView(1_000, GIB, GPUDemand(count=count, milli=milli) if count else NO_GPU)
    chosen = make_policy(policy, PolicyInputs(typical_tasks=FGD_TASKS))
    assert chosen.pick_gpus(node(*free), pod) == expected


def test_random_policy_gives_a_share_any_gpu_it_fits_on() -> None:
    policy = make_policy(PolicyName.RANDOM, PolicyInputs(rng=random.Random(3)))
    picks = {policy.pick_gpus(node(1000, 200, 300, 0), SHARE_300) for _ in range(100)}
    assert picks == {(0,), (2,)}


FIT_CASES = [
    ("a pod fits with enough CPU, memory and GPUs", node(1000, 300), SHARE_300, True),
    ("a pod short of CPU does not fit", node(1000, cpu_free=3_999), SHARE_300, False),
    ("a pod short of memory does not fit", node(1000, memory_free=GIB), SHARE_300, False),
    ("a share needs one GPU with enough free milli", node(299, 299), SHARE_300, False),
    (
        "whole GPUs must be distinct idle GPUs",
        node(1000, 999),
        PodView(0, 0, GPUDemand(count=2, milli=1000)),
        False,
    ),
    ("a GPU pod never fits a node without GPUs", node(model=None), SHARE_300, False),
    ("a CPU-only pod fits a node without GPUs", node(model=None), PodView(1_000, GIB), True),
    (
        "a pod restricted to other models does not fit",
        node(1000),
        PodView(0, 0, GPUDemand(count=1), ("V100M16", "V100M32")),
        False,
    ),
    (
        "a pod allowed the node's model fits",
        node(1000),
        PodView(0, 0, GPUDemand(count=1), ("A10", "T4")),
        True,
    ),
]


@pytest.mark.parametrize(("name", "state", "pod", "expected"), FIT_CASES, ids=[c[0] for c in FIT_CASES])
def test_fits(name: str, state: NodeView, pod: PodView, expected: bool) -> None:
    assert fits(state, pod) is expected


def test_upstream_ties_go_to_the_lowest_shuffled_rank_and_gpuq_ties_to_node_order() -> None:
    twins = (node(1000, 1000), node(1000, 1000), node(1000, 1000))
    dotprod = make_policy(PolicyName.DOTPROD)
    assert dotprod.tie_break is TieBreak.SHUFFLED
    assert choose_node(dotprod, twins, SHARE_300, random.Random(0), ranks=(2, 0, 1)) == 1
    assert choose_node(make_policy(PolicyName.BINPACK), twins, SHARE_300, random.Random(0)) == 0


def test_binpack_breaks_gpu_ties_by_cpu_allocated() -> None:
    nodes = (node(1000, 1000, cpu_free=30_000), node(1000, 1000, cpu_free=10_000))
    assert choose_node(make_policy(PolicyName.BINPACK), nodes, SHARE_300, random.Random(0)) == 1
    assert choose_node(make_policy(PolicyName.SPREAD), nodes, SHARE_300, random.Random(0)) == 0


def test_no_feasible_node_gives_none() -> None:
    assert choose_node(make_policy(PolicyName.FGD), (node(100),), SHARE_300, random.Random(0)) is None


def test_after_placement_takes_the_pod_from_the_node() -> None:
    placed = after_placement(CLUSTER[1], SHARE_300, (3,))
    assert placed == node(
        1000, 1000, 1000, 100, cpu_free=16_000, memory_free=120 * GIB, kinds=(("share-gpu", 2),)
    )


def test_registry_names_every_policy_and_rejects_others() -> None:
    assert list(POLICIES) == [name.value for name in PolicyName]
    with pytest.raises(ValueError, match="unknown placement policy 'worst-fit'"):
        make_policy("worst-fit")
    with pytest.raises(ValueError, match=r"needs a seeded random\.Random"):
        make_policy(PolicyName.RANDOM)
