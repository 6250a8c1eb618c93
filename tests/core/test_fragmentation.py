"""The FGD paper's fragmentation measure on hand-computed nodes."""

from __future__ import annotations

import itertools

import pytest

from gpuq.core.nodes import NO_GPU, GPUDemand
from gpuq.core.placement.fragmentation import (
    FragmentationMeter,
    NodeView,
    TaskType,
    TypicalTask,
    cluster_fragmentation,
    node_fragmentation,
    task_fragment_milli,
    typical_tasks,
)

GIB = 1 << 30


def node(*gpu_free: int, cpu: int = 32_000, model: str | None = "T4") -> NodeView:
    return NodeView(tuple(gpu_free), cpu, 64_000, 100 * GIB, 100 * GIB, model)


def task(
    cpu: int = 4_000, count: int = 1, milli: int = 500, models: tuple[str, ...] | None = None
) -> TaskType:
    return TaskType(cpu, GPUDemand(count=count, milli=milli) if count else NO_GPU, models)


FRAGMENT_CASES = [
    (
        "a fitting task counts only the GPUs with less free milli than it asks",
        node(1000, 600, 300, 0),
        task(),
        300,
    ),
    ("a task asking exactly a GPU's free milli can use that GPU", node(500, 499), task(milli=500), 499),
    ("a whole-GPU task counts every partly used GPU", node(1000, 999, 1000), task(milli=1000), 999),
    (
        "a task needing more GPUs than have enough free counts all idle milli",
        node(1000, 600, 300),
        task(count=2, milli=1000),
        1900,
    ),
    ("a task short of CPU counts all idle milli", node(1000, 600, 300, cpu=3_999), task(cpu=4_000), 1900),
    ("a task with exactly the free CPU fits", node(1000, 300, cpu=4_000), task(cpu=4_000), 300),
    ("a CPU-only task counts all idle milli", node(1000, 600, 300), task(count=0), 1900),
    (
        "a task restricted to another model counts all idle milli",
        node(1000, 300),
        task(models=("A10",)),
        1300,
    ),
    ("a task allowed the node's model fits as usual", node(1000, 300), task(models=("A10", "T4")), 300),
    (
        "a model-restricted task never fits a node without a model",
        node(1000, model=None),
        task(models=("T4",)),
        1000,
    ),
    ("a node without GPUs has nothing to fragment", node(model=None), task(count=0), 0),
    ("a full node has nothing to fragment", node(0, 0), task(), 0),
]


@pytest.mark.parametrize(
    ("name", "state", "kind", "expected"), FRAGMENT_CASES, ids=[c[0] for c in FRAGMENT_CASES]
)
def test_task_fragment_milli(name: str, state: NodeView, kind: TaskType, expected: int) -> None:
    assert task_fragment_milli(state, kind) == expected


def test_node_fragmentation_is_the_weighted_sum_over_task_types() -> None:
    tasks = (TypicalTask(task(count=0), 0.25), TypicalTask(task(milli=500), 0.75))
    # CPU-only: all 1900 idle; 500-milli share: only the 300 left on GPU 2.
    assert node_fragmentation(node(1000, 600, 300), tasks) == 0.25 * 1900 + 0.75 * 300
    assert cluster_fragmentation([node(1000, 600, 300), node(0, 1000)], tasks) == (
        0.25 * 1900 + 0.75 * 300 + 0.25 * 1000
    )


TYPICAL_CASES = [
    (
        "weights are the share of pods when every type is needed to reach the threshold",
        [task(milli=500)] * 3 + [task(count=0)],
        [(task(milli=500), 0.75), (task(count=0), 0.25)],
    ),
    (
        "rare types beyond 95 % of pods are dropped and the rest renormalised",
        [task(cpu=1)] * 10 + [task(cpu=2)] * 6 + [task(cpu=3)] * 3 + [task(cpu=4)],
        [
            (task(cpu=1), 10 / 20 / (19 / 20)),
            (task(cpu=2), 6 / 20 / (19 / 20)),
            (task(cpu=3), 3 / 20 / (19 / 20)),
        ],
    ),
    (
        "equal counts are ordered by CPU, milli, GPU count and spec, largest first",
        [task(cpu=1), task(cpu=2), task(cpu=2, milli=700), task(cpu=2, models=("T4",))],
        [
            (task(cpu=2, milli=700), 0.25),
            (task(cpu=2, models=("T4",)), 0.25),
            (task(cpu=2), 0.25),
            (task(cpu=1), 0.25),
        ],
    ),
    ("no pods give no task types", [], []),
]


@pytest.mark.parametrize(("name", "pods", "expected"), TYPICAL_CASES, ids=[c[0] for c in TYPICAL_CASES])
def test_typical_tasks(name: str, pods: list[TaskType], expected: list[tuple[TaskType, float]]) -> None:
    assert typical_tasks(pods) == tuple(TypicalTask(kind, weight) for kind, weight in expected)


def test_the_meter_agrees_with_the_definition_on_every_small_state() -> None:
    tasks = (
        TypicalTask(task(cpu=0, count=0), 0.2),
        TypicalTask(task(cpu=4_000, milli=500), 0.3),
        TypicalTask(task(cpu=8_000, count=2, milli=1000), 0.4),
        TypicalTask(task(cpu=2_000, milli=250, models=("A10",)), 0.1),
    )
    meter = FragmentationMeter(tasks)
    for free in itertools.product((0, 250, 500, 750, 1000), repeat=3):
        for cpu in (0, 1_999, 2_000, 4_000, 7_999, 8_000, 50_000):
            for model in ("T4", "A10", None):
                state = node(*free, cpu=cpu, model=model)
                assert meter.fragmentation(state) == node_fragmentation(state, tasks), (free, cpu, model)
