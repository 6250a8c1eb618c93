"""Quota accounting: the quota tree and what it lets a cycle admit.

Kueue: pkg/cache/scheduler/resource_node.go.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from builders import GPU, Case, case, cluster_queue, cohort, config, run_case, scheduler_with, workload
from gpuq.core.model import ClusterConfig, Workload
from gpuq.core.quota import available, potential_available

FR = ("f", GPU)


@dataclass(frozen=True)
class TreeCase:
    """Per queue (available, potentialAvailable) and per cohort (subtreeQuota, usage) of ``f/gpu``."""

    name: str
    config: ClusterConfig
    admitted: tuple[Workload, ...]
    queues: dict[str, tuple[int, int]]
    cohorts: dict[str, tuple[int, int]]


def holding(name: str, cq: str, gpus: int) -> Workload:
    return workload(name).queue(cq).request(gpus, gpu=1).admitted(cq, {"gpu": "f"}).build()


DOCS_COHORT = (
    cluster_queue("a").cohort("c").flavor("f", gpu=9).build(),
    cluster_queue("b").cohort("c").flavor("f", gpu=(12, None, 1)).build(),
)

TREE_CASES = [
    TreeCase(
        "a queue without a cohort can use only its own nominal quota",
        config(cluster_queue("a").flavor("f", gpu=4).build()),
        (holding("w", "a", 1),),
        queues={"a": (3, 4)},
        cohorts={},
    ),
    TreeCase(
        "cohort members can use the idle nominal quota of their siblings",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=9).build(),
            cluster_queue("b").cohort("c").flavor("f", gpu=12).build(),
        ),
        (holding("w", "b", 2),),
        queues={"a": (19, 21), "b": (19, 21)},
        cohorts={"c": (21, 2)},
    ),
    TreeCase(
        "lendingLimit hides quota from the cohort: A(9) may use 9 + 1, B(12, lend 1) may use 21",
        config(*DOCS_COHORT),
        (),
        queues={"a": (10, 10), "b": (21, 21)},
        cohorts={"c": (10, 0)},
    ),
    TreeCase(
        "usage within the lender's non-lendable part does not reach the cohort",
        config(*DOCS_COHORT),
        (holding("w", "b", 11),),
        queues={"a": (10, 10), "b": (10, 21)},
        cohorts={"c": (10, 0)},
    ),
    TreeCase(
        "only the usage above the lender's local quota is counted in the cohort",
        config(*DOCS_COHORT),
        (holding("w", "b", 12),),
        queues={"a": (9, 10), "b": (9, 21)},
        cohorts={"c": (10, 1)},
    ),
    TreeCase(
        "borrowingLimit caps what a queue may take from its cohort",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=(4, 2)).build(),
            cluster_queue("b").cohort("c").flavor("f", gpu=8).build(),
        ),
        (),
        queues={"a": (6, 6), "b": (12, 12)},
        cohorts={"c": (12, 0)},
    ),
    TreeCase(
        "borrowingLimit and the cohort's free capacity both cap a queue: the smaller wins",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=(4, 2)).build(),
            cluster_queue("b").cohort("c").flavor("f", gpu=8).build(),
        ),
        (holding("w", "b", 7),),
        queues={"a": (5, 6), "b": (5, 12)},
        cohorts={"c": (12, 7)},
    ),
    TreeCase(
        "a queue declaring nominal 0 can still borrow everything its cohort lends",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=0).build(),
            cluster_queue("b").cohort("c").flavor("f", gpu=4).build(),
        ),
        (),
        queues={"a": (4, 4), "b": (4, 4)},
        cohorts={"c": (4, 0)},
    ),
    TreeCase(
        "hierarchical cohorts: a cohort's own nominal quota is an extra pool on top of its children",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=2).build(),
            cluster_queue("b").cohort("r").flavor("f", gpu=3).build(),
            cohorts=(cohort("r").flavor("f", gpu=5).build(), cohort("c").parent("r").build()),
        ),
        (holding("w", "a", 1),),
        queues={"a": (9, 10), "b": (9, 10)},
        cohorts={"c": (2, 1), "r": (10, 1)},
    ),
    TreeCase(
        "hierarchical cohorts: a cohort's borrowingLimit limits what its subtree borrows from its parent",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=2).build(),
            cluster_queue("b").cohort("r").flavor("f", gpu=5).build(),
            cohorts=(cohort("r").build(), cohort("c").parent("r").flavor("f", gpu=(0, 1)).build()),
        ),
        (),
        queues={"a": (3, 3), "b": (7, 7)},
        cohorts={"c": (2, 0), "r": (7, 0)},
    ),
    TreeCase(
        "hierarchical cohorts: a cohort's lendingLimit keeps part of its subtree from its parent",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=2).build(),
            cluster_queue("b").cohort("r").flavor("f", gpu=5).build(),
            cohorts=(cohort("r").build(), cohort("c").parent("r").flavor("f", gpu=(0, None, 1)).build()),
        ),
        (holding("w", "a", 2),),
        queues={"a": (5, 7), "b": (5, 6)},
        cohorts={"c": (2, 2), "r": (6, 1)},
    ),
]


@pytest.mark.parametrize("tc", TREE_CASES, ids=[c.name for c in TREE_CASES])
def test_quota_tree(tc: TreeCase) -> None:
    scheduler = scheduler_with(tc.config, tc.admitted)
    tree = scheduler.state.tree
    queues = {
        name: (available(node, FR), potential_available(node, FR))
        for name, node in tree.cluster_queues.items()
    }
    cohorts = {
        name: (node.subtree_quota.get(FR, 0), node.usage.get(FR, 0)) for name, node in tree.cohorts.items()
    }
    assert (queues, cohorts) == (tc.queues, tc.cohorts)


TWO_QUEUES = config(
    cluster_queue("a").cohort("c").flavor("f", gpu=4).build(),
    cluster_queue("b").cohort("c").flavor("f", gpu=4).build(),
)
LIMITED = config(
    cluster_queue("a").cohort("c").flavor("f", gpu=(4, 2)).build(),
    cluster_queue("b").cohort("c").flavor("f", gpu=8).build(),
)
PODS = config(cluster_queue("a").flavor("f", gpu=8, pods=3).build())
HIERARCHY = config(
    cluster_queue("a").cohort("c").flavor("f", gpu=0).build(),
    cluster_queue("b").cohort("r").flavor("f", gpu=0).build(),
    cohorts=(cohort("r").flavor("f", gpu=4).build(), cohort("c").parent("r").flavor("f", gpu=(0, 3)).build()),
)


def gpus(name: str, cq: str, n: int, **kw: float) -> Workload:
    return workload(name).queue(cq).request(n, gpu=1, **kw).build()


CASES: list[Case] = [
    case(
        "a workload within nominal quota is admitted without borrowing",
        config(cluster_queue("a").flavor("f", gpu=4).build()),
        gpus("w", "a", 4),
        admitted={"w": "f"},
    ),
    case(
        "borrowing: a workload that exceeds nominal borrows idle cohort quota",
        TWO_QUEUES,
        gpus("w", "a", 6),
        admitted={"w": "f borrowing"},
    ),
    case(
        "without a cohort a request above nominal exceeds the maximum capacity",
        config(cluster_queue("a").flavor("f", gpu=4).build()),
        gpus("w", "a", 5),
        pending={
            "w": "insufficient quota for nvidia.com/gpu in flavor f, request > maximum capacity (5 > 4)"
        },
    ),
    case(
        "potentialAvailable NoFit: a request above nominal plus borrowingLimit can never be admitted",
        LIMITED,
        gpus("w", "a", 7),
        pending={"w": "request > maximum capacity (7 > 6)"},
    ),
    case(
        "borrowingLimit: a request within nominal plus the limit borrows",
        LIMITED,
        gpus("w", "a", 6),
        admitted={"w": "f borrowing"},
    ),
    case(
        "borrowingLimit: the limit also counts what the queue already borrows",
        LIMITED,
        workload("old").queue("a").request(5, gpu=1).admitted("a", {"gpu": "f"}).build(),
        gpus("w", "a", 2),
        pending={"w": "insufficient unused quota for nvidia.com/gpu in flavor f, 1 more needed"},
    ),
    case(
        "lendingLimit hides quota from the cohort: the borrower sees only the lendable part",
        config(*DOCS_COHORT),
        gpus("w", "a", 11),
        pending={"w": "request > maximum capacity (11 > 10)"},
    ),
    case(
        "lendingLimit: the lender keeps its non-lendable quota while the cohort is fully borrowed",
        config(*DOCS_COHORT),
        workload("borrower").queue("a").request(10, gpu=1).admitted("a", {"gpu": "f"}).build(),
        gpus("w", "b", 11),
        admitted={"w": "f"},
    ),
    case(
        "already-admitted workloads from status.admission hold quota",
        config(cluster_queue("a").flavor("f", gpu=4).build()),
        workload("old").queue("a").request(3, gpu=1).admitted("a", {"gpu": "f"}).build(),
        gpus("w", "a", 2),
        pending={
            "w": "insufficient unused quota for nvidia.com/gpu in flavor f, 1 more needed, "
            "and no workload can be preempted"
        },
    ),
    case(
        "a partially admitted workload holds only the count recorded in its admission",
        config(cluster_queue("a").flavor("f", gpu=4).build()),
        workload("old")
        .queue("a")
        .pod_set("main", count=4, min_count=1, gpu=1)
        .admitted("a", {"gpu": "f"}, counts={"main": 2})
        .build(),
        gpus("w", "a", 2),
        admitted={"w": "f"},
    ),
    case(
        "quota a sibling already borrows is not available to the lender without reclaiming",
        TWO_QUEUES,
        workload("old").queue("b").request(6, gpu=1).admitted("b", {"gpu": "f"}).build(),
        gpus("w", "a", 3),
        pending={"w": "1 more needed, and no workload can be preempted"},
    ),
    case(
        "the pods resource: each pod set implicitly requests pods equal to its count",
        PODS,
        gpus("w", "a", 4),
        pending={"w": "insufficient quota for pods in flavor f, request > maximum capacity (4 > 3)"},
    ),
    case(
        "the pods resource gets the group's flavor like any covered resource",
        PODS,
        gpus("w", "a", 3),
        admitted={"w": "f"},
    ),
    case(
        "a non-zero request for a resource the queue does not cover makes the workload NoFit",
        config(cluster_queue("a").flavor("f", gpu=4).build()),
        gpus("w", "a", 1, memory=1),
        pending={"w": "resource memory unavailable in ClusterQueue a"},
    ),
    case(
        "zero requests for resources the queue does not cover are ignored",
        config(cluster_queue("a").flavor("f", gpu=4).build()),
        gpus("w", "a", 1, memory=0),
        admitted={"w": "f"},
    ),
    case(
        "CPU is accounted in milli-units: 2 pods of 1.5 CPU fit a quota of 3",
        config(cluster_queue("a").flavor("f", cpu=3).build()),
        workload("w").queue("a").request(2, cpu=1.5).build(),
        admitted={"w": "f"},
    ),
    case(
        "CPU is accounted in milli-units: 2 pods of 1.6 CPU exceed a quota of 3",
        config(cluster_queue("a").flavor("f", cpu=3).build()),
        workload("w").queue("a").request(2, cpu=1.6).build(),
        pending={"w": "insufficient quota for cpu in flavor f, request > maximum capacity (3200m > 3)"},
    ),
    case(
        "hierarchical cohorts: a queue with nominal 0 borrows the pool of an ancestor cohort",
        HIERARCHY,
        gpus("w", "a", 3),
        admitted={"w": "f borrowing"},
    ),
    case(
        "hierarchical cohorts: a cohort's borrowingLimit caps what its queues can ever get",
        HIERARCHY,
        gpus("w", "a", 4),
        pending={"w": "request > maximum capacity (4 > 3)"},
    ),
]


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_quota_admission(c: Case) -> None:
    assert run_case(c) == c.want
