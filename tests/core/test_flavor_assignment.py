"""Flavor assignment: eligibility, modes and the fungibility-driven search.

Kueue: pkg/scheduler/flavorassigner/flavorassigner.go.
"""

from __future__ import annotations

import pytest

from builders import Case, ClusterQueueBuilder, case, cluster_queue, config, flavor, run_case, workload
from gpuq.core.model import (
    ClusterConfig,
    FungibilityPolicy,
    FungibilityPreference,
    PreemptionPolicy,
    Requirement,
    Taint,
    Toleration,
    Workload,
)

LOWER = PreemptionPolicy.LOWER_PRIORITY
TRY_NEXT = FungibilityPolicy.TRY_NEXT_FLAVOR
STOP = FungibilityPolicy.MAY_STOP_SEARCH

GPU_TAINT = Taint("gpu", "true", "NoSchedule")
A100 = flavor("f1", labels={"type": "a100"})
H100 = flavor("f2", labels={"type": "h100"})


def gpus(name: str, cq: str = "a", n: int = 1, prio: int = 0) -> Workload:
    return workload(name).queue(cq).priority(prio).request(n, gpu=1).build()


def holding(name: str, cq: str, n: int, on: str, prio: int = 0) -> Workload:
    return workload(name).queue(cq).priority(prio).request(n, gpu=1).admitted(cq, {"gpu": on}).build()


def two_flavors(first: int = 4, second: int = 4) -> ClusterQueueBuilder:
    return cluster_queue("a").flavor("f1", gpu=first).flavor("f2", gpu=second)


BORROW_COHORT = (cluster_queue("b").cohort("c").flavor("f1", gpu=4).flavor("f2", gpu=4).build(),)


def borrow_config(borrow: FungibilityPolicy, second: int = 4) -> ClusterConfig:
    a = (
        cluster_queue("a")
        .cohort("c")
        .flavor("f1", gpu=2)
        .flavor("f2", gpu=second)
        .fungibility(when_can_borrow=borrow)
        .build()
    )
    return config(a, *BORROW_COHORT)


def preempt_config(when_can_preempt: FungibilityPolicy) -> ClusterConfig:
    a = (
        cluster_queue("a")
        .flavor("f1", gpu=4)
        .flavor("f2", gpu=4)
        .preemption(within=LOWER)
        .fungibility(when_can_preempt=when_can_preempt)
        .build()
    )
    return config(a)


def preference_config(preference: FungibilityPreference) -> ClusterConfig:
    a = (
        cluster_queue("a")
        .cohort("c")
        .flavor("f1", gpu=4)
        .flavor("f2", gpu=0)
        .preemption(within=LOWER)
        .fungibility(TRY_NEXT, TRY_NEXT, preference)
        .build()
    )
    b = cluster_queue("b").cohort("c").flavor("f1", gpu=0).flavor("f2", gpu=4).build()
    return config(a, b)


CASES: list[Case] = [
    case(
        "the first flavor in queue order that fits is chosen",
        config(two_flavors().build()),
        gpus("w", n=2),
        admitted={"w": "f1"},
    ),
    case(
        "a flavor that can never hold the request is skipped for the next one",
        config(two_flavors(first=2).build()),
        gpus("w", n=3),
        admitted={"w": "f2"},
    ),
    case(
        "all resources of one resource group get the same flavor",
        config(cluster_queue("a").flavor("f1", cpu=8, gpu=0).flavor("f2", cpu=8, gpu=4).build()),
        workload("w").queue("a").request(1, cpu=1, gpu=1).build(),
        admitted={"w": "f2"},
    ),
    case(
        "different resource groups get their flavors independently",
        config(cluster_queue("a").flavor("c1", cpu=8).flavor("g1", gpu=0).flavor("g2", gpu=4).build()),
        workload("w").queue("a").request(1, cpu=1, gpu=1).build(),
        admitted={"w": "cpu=c1,gpu=g2"},
    ),
    case(
        "later pod sets see the usage assumed by earlier pod sets of the same workload",
        config(two_flavors().build()),
        workload("w").queue("a").pod_set("driver", 3, gpu=1).pod_set("workers", 3, gpu=1).build(),
        admitted={"w": "driver:f1 workers:f2"},
    ),
    case(
        "an untolerated NoSchedule taint makes a flavor ineligible",
        config(two_flavors().build(), flavors=(flavor("f1", taints=(GPU_TAINT,)),)),
        gpus("w"),
        admitted={"w": "f2"},
    ),
    case(
        "a pod toleration makes a tainted flavor eligible",
        config(two_flavors().build(), flavors=(flavor("f1", taints=(GPU_TAINT,)),)),
        workload("w")
        .queue("a")
        .pod_set("main", 1, tolerations=(Toleration("gpu", "Exists"),), gpu=1)
        .build(),
        admitted={"w": "f1"},
    ),
    case(
        "a flavor's own tolerations are added to the pod's when checking its taints",
        config(
            two_flavors().build(),
            flavors=(flavor("f1", taints=(GPU_TAINT,), tolerations=(Toleration("gpu", "Equal", "true"),)),),
        ),
        gpus("w"),
        admitted={"w": "f1"},
    ),
    case(
        "a PreferNoSchedule taint does not make a flavor ineligible",
        config(
            two_flavors().build(), flavors=(flavor("f1", taints=(Taint("gpu", "true", "PreferNoSchedule"),)),)
        ),
        gpus("w"),
        admitted={"w": "f1"},
    ),
    case(
        "a nodeSelector value conflicting with the flavor's label makes it ineligible",
        config(two_flavors().build(), flavors=(A100, H100)),
        workload("w").queue("a").pod_set("main", 1, node_selector={"type": "h100"}, gpu=1).build(),
        admitted={"w": "f2"},
    ),
    case(
        "nodeSelector keys the flavor does not define are ignored",
        config(two_flavors().build(), flavors=(A100, H100)),
        workload("w").queue("a").pod_set("main", 1, node_selector={"zone": "z1"}, gpu=1).build(),
        admitted={"w": "f1"},
    ),
    case(
        "required node affinity selects the flavor whose labels match",
        config(two_flavors().build(), flavors=(A100, H100)),
        workload("w")
        .queue("a")
        .pod_set("main", 1, affinity=((Requirement("type", "In", ("h100",)),),), gpu=1)
        .build(),
        admitted={"w": "f2"},
    ),
    case(
        "an affinity term on keys the flavor does not define matches that flavor",
        config(two_flavors().build(), flavors=(A100, H100)),
        workload("w")
        .queue("a")
        .pod_set("main", 1, affinity=((Requirement("zone", "In", ("z1",)),),), gpu=1)
        .build(),
        admitted={"w": "f1"},
    ),
    case(
        "with no eligible flavor the workload waits with the mismatch as its reason",
        config(cluster_queue("a").flavor("f1", gpu=4).build(), flavors=(flavor("f1", taints=(GPU_TAINT,)),)),
        gpus("w"),
        pending={"w": "couldn't assign flavors to pod set main: untolerated taint {gpu: true} in flavor f1"},
    ),
    case(
        "whenCanBorrow=MayStopSearch stops at the first flavor that fits even if it must borrow",
        borrow_config(STOP),
        gpus("w", n=3),
        admitted={"w": "f1 borrowing"},
    ),
    case(
        "whenCanBorrow=TryNextFlavor prefers a later flavor that fits without borrowing",
        borrow_config(TRY_NEXT),
        gpus("w", n=3),
        admitted={"w": "f2"},
    ),
    case(
        "whenCanBorrow=TryNextFlavor keeps the earlier flavor when every flavor must borrow",
        borrow_config(TRY_NEXT, second=2),
        gpus("w", n=3),
        admitted={"w": "f1 borrowing"},
    ),
    case(
        "whenCanPreempt=TryNextFlavor moves past a flavor needing preemption to one that fits",
        preempt_config(TRY_NEXT),
        holding("low", "a", 4, "f1", prio=-1),
        gpus("w", n=2),
        admitted={"w": "f2"},
    ),
    case(
        "whenCanPreempt=MayStopSearch preempts in the first flavor instead of trying the next",
        preempt_config(STOP),
        holding("low", "a", 4, "f1", prio=-1),
        gpus("w", n=2),
        preempted={"low": "InClusterQueue"},
        pending={"w": "Waiting for preempted workloads to be evicted: default/low"},
    ),
    case(
        "a flavor needing preemption without candidates never stops the flavor search",
        preempt_config(STOP),
        holding("high", "a", 4, "f1", prio=5),
        gpus("w", n=2),
        admitted={"w": "f2"},
    ),
    case(
        "when every flavor needs preemption the earliest one is used",
        preempt_config(TRY_NEXT),
        holding("low1", "a", 4, "f1", prio=-1),
        holding("low2", "a", 4, "f2", prio=-1),
        gpus("w", n=2),
        preempted={"low1": "InClusterQueue"},
        pending={"w": "Waiting for preempted workloads to be evicted: default/low1"},
    ),
    case(
        "BorrowingOverPreemption prefers a later flavor that fits by borrowing over preempting",
        preference_config(FungibilityPreference.BORROWING_OVER_PREEMPTION),
        holding("low", "a", 4, "f1", prio=-1),
        gpus("w", n=2),
        admitted={"w": "f2 borrowing"},
    ),
    case(
        "PreemptionOverBorrowing prefers preempting within nominal over a borrowing fit",
        preference_config(FungibilityPreference.PREEMPTION_OVER_BORROWING),
        holding("low", "a", 4, "f1", prio=-1),
        gpus("w", n=2),
        preempted={"low": "InClusterQueue"},
        pending={"w": "Waiting for preempted workloads to be evicted: default/low"},
    ),
    case(
        "reclaiming from another queue ranks above preempting in the own queue",
        config(
            cluster_queue("a")
            .cohort("c")
            .flavor("f1", gpu=4)
            .flavor("f2", gpu=4)
            .preemption(within=LOWER, reclaim=PreemptionPolicy.ANY)
            .build(),
            cluster_queue("b").cohort("c").flavor("f1", gpu=0).flavor("f2", gpu=0).build(),
        ),
        holding("own", "a", 4, "f1", prio=-1),
        holding("borrowed", "b", 4, "f2", prio=5),
        gpus("w", n=4),
        preempted={"borrowed": "InCohortReclamation"},
        pending={"w": "Waiting for preempted workloads to be evicted: default/borrowed"},
    ),
    case(
        "preemption is considered when the request fits nominal though usage plus request does not",
        config(cluster_queue("a").flavor("f1", gpu=4).preemption(within=LOWER).build()),
        holding("low", "a", 3, "f1", prio=-1),
        gpus("w", n=2),
        preempted={"low": "InClusterQueue"},
        pending={"w": "Waiting for preempted workloads to be evicted: default/low"},
    ),
    case(
        "a request above nominal in a flat cohort is NoFit instead of preempting without borrowWithinCohort",
        config(
            cluster_queue("a")
            .cohort("c")
            .flavor("f1", gpu=2)
            .preemption(within=LOWER, reclaim=PreemptionPolicy.ANY)
            .build(),
            cluster_queue("b").cohort("c").flavor("f1", gpu=4).build(),
        ),
        holding("low", "a", 2, "f1", prio=-1),
        holding("other", "b", 3, "f1", prio=-1),
        gpus("w", n=4),
        pending={
            "w": "insufficient unused quota for nvidia.com/gpu in flavor f1, 3 more needed (1 available)"
        },
    ),
]


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_flavor_assignment(c: Case) -> None:
    assert run_case(c) == c.want
