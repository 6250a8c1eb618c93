"""Partial admission (Kueue: keps/420-partial-admission): shrinking pod sets towards minCount."""

from __future__ import annotations

import pytest

from builders import Case, case, cluster_queue, config, run_case, workload
from gpuq.core.model import ClusterConfig, PreemptionPolicy, Workload


def single(gpus: int = 4, partial: bool = True) -> ClusterConfig:
    cq = cluster_queue("a").flavor("f", gpu=gpus).preemption(within=PreemptionPolicy.LOWER_PRIORITY).build()
    return config(cq, partial_admission=partial)


def running(name: str, n: int, prio: int) -> Workload:
    return workload(name).queue("a").priority(prio).request(n, gpu=1).admitted("a", {"gpu": "f"}).build()


def elastic(count: int, min_count: int | None, prio: int = 0) -> Workload:
    return workload("w").queue("a").priority(prio).pod_set("main", count, min_count, gpu=1).build()


CASES: list[Case] = [
    case(
        "partial admission shrinks to the largest count that fits",
        single(),
        running("high", 1, prio=5),
        elastic(6, 2),
        admitted={"w": "f*3"},
    ),
    case(
        "partial admission is not tried when the configuration disables it",
        single(partial=False),
        running("high", 1, prio=5),
        elastic(6, 2),
        pending={"w": "request > maximum capacity (6 > 4)"},
    ),
    case(
        "partial admission never goes below minCount",
        single(),
        running("high", 1, prio=5),
        elastic(6, 4),
        pending={"w": "request > maximum capacity (6 > 4)"},
    ),
    case(
        "partial admission applies only when a pod set has minCount below its count",
        single(),
        elastic(6, 6),
        pending={"w": "request > maximum capacity (6 > 4)"},
    ),
    case(
        "preemption at full size is preferred over shrinking",
        single(),
        running("low", 2, prio=-1),
        elastic(4, 1, prio=1),
        preempted={"low": "InClusterQueue"},
        pending={"w": "Waiting for preempted workloads to be evicted: default/low"},
    ),
    case(
        "partial admission may shrink to the largest count that fits by preempting",
        single(),
        running("low", 2, prio=-1),
        running("high", 1, prio=5),
        elastic(6, 1, prio=1),
        preempted={"low": "InClusterQueue"},
        pending={"w": "Waiting for preempted workloads to be evicted: default/low"},
    ),
    case(
        "pod sets shrink together in proportion to how far each may shrink",
        single(gpus=10),
        workload("w").queue("a").pod_set("a", 8, 2, gpu=1).pod_set("b", 4, 2, gpu=1).build(),
        admitted={"w": "a:f*6 b:f"},
    ),
    case(
        "a pod set without minCount keeps its full count while others shrink",
        single(gpus=6),
        workload("w").queue("a").pod_set("main", 4, gpu=1).pod_set("workers", 6, 1, gpu=1).build(),
        admitted={"w": "main:f workers:f*2"},
    ),
    case(
        "the partially admitted count is what the workload holds once admitted",
        single(),
        running("high", 1, prio=5),
        elastic(6, 2),
        workload("next").queue("a").created(1).request(1, gpu=1).build(),
        admitted={"w": "f*3"},
        pending={"next": "1 more needed, and no workload can be preempted"},
        cycles=None,
    ),
]


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_partial_admission(c: Case) -> None:
    assert run_case(c) == c.want
