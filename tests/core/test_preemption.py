"""Classical preemption (Kueue: pkg/scheduler/preemption/), observed through one scheduling cycle.

Several cases are ported from Kueue's ``pkg/scheduler/preemption/preemption_test.go``
(its ``standalone``, ``c1``/``c2`` and ``preventStarvation`` queues); their
expected victims are Kueue's.
"""

from __future__ import annotations

import pytest

from builders import Case, case, cluster_queue, cohort, config, run_case, workload
from gpuq.core.model import ClusterQueue, FungibilityPolicy, PreemptionPolicy, Workload

NEVER = PreemptionPolicy.NEVER
LOWER = PreemptionPolicy.LOWER_PRIORITY
NEWER_EQUAL = PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
ANY = PreemptionPolicy.ANY

STANDALONE = cluster_queue("standalone").flavor("default", cpu=6).preemption(within=LOWER).build()
C1 = (
    cluster_queue("c1")
    .cohort("cohort")
    .flavor("default", cpu=(6, 6), memory=(3, 3))
    .preemption(within=LOWER, reclaim=LOWER)
    .build()
)
C2 = (
    cluster_queue("c2")
    .cohort("cohort")
    .flavor("default", cpu=(6, 6), memory=(3, 3))
    .preemption(within=NEVER, reclaim=ANY)
    .build()
)
PREVENT_STARVATION = (
    cluster_queue("preventStarvation").flavor("default", cpu=6).preemption(within=NEWER_EQUAL).build()
)
KUEUE_QUEUES = config(STANDALONE, C1, C2, PREVENT_STARVATION)


def cpu(name: str, cq: str, n: float, prio: int = 0, created: float = 0.0, **kw: float) -> Workload:
    return workload(name).queue(cq).priority(prio).created(created).request(1, cpu=n, **kw).build()


def running(name: str, cq: str, n: float, prio: int = 0, at: float = 0.0, created: float = 0.0) -> Workload:
    """A workload holding ``n`` CPUs of flavor ``default`` in ``cq`` since ``at``."""
    return (
        workload(name)
        .queue(cq)
        .priority(prio)
        .created(created)
        .request(1, cpu=n)
        .admitted(cq, {"cpu": "default"}, at=at)
        .build()
    )


def gpu_running(name: str, cq: str, n: int, prio: int = 0, at: float = 0.0, on: str = "f") -> Workload:
    return workload(name).queue(cq).priority(prio).request(n, gpu=1).admitted(cq, {"gpu": on}, at=at).build()


def gpus(name: str, cq: str, n: int, prio: int = 0) -> Workload:
    return workload(name).queue(cq).priority(prio).request(n, gpu=1).build()


def waiting_for(*victims: str) -> str:
    return "Waiting for preempted workloads to be evicted: " + ", ".join(f"default/{v}" for v in victims)


NO_CANDIDATES = "and no workload can be preempted to free it"


def gpu_cohort(
    a_quota: int = 2,
    bwc: PreemptionPolicy | None = None,
    threshold: int | None = None,
) -> tuple[ClusterQueue, ...]:
    """``a`` (reclaim Any, optional borrowWithinCohort) and ``b`` (4 GPUs) share cohort ``c``."""
    a = (
        cluster_queue("a")
        .cohort("c")
        .flavor("f", gpu=a_quota)
        .preemption(reclaim=ANY, borrow_within_cohort=bwc, max_priority_threshold=threshold)
        .build()
    )
    return a, cluster_queue("b").cohort("c").flavor("f", gpu=4).build()


THREE_QUEUES = config(
    cluster_queue("a").cohort("c").flavor("f", gpu=4).preemption(reclaim=ANY).build(),
    cluster_queue("b").cohort("c").flavor("f", gpu=4).build(),
    cluster_queue("z").cohort("c").flavor("f", gpu=4).build(),
)

HIERARCHY = config(
    cluster_queue("a").cohort("team").flavor("f", gpu=2).preemption(reclaim=ANY).build(),
    cluster_queue("b").cohort("team").flavor("f", gpu=2).build(),
    cluster_queue("x").cohort("org").flavor("f", gpu=4).build(),
    cohorts=(cohort("org").build(), cohort("team").parent("org").build()),
)

NESTED_LENDER = config(
    cluster_queue("x").cohort("org").flavor("f", gpu=2).preemption(reclaim=ANY).build(),
    cluster_queue("b1").cohort("team").flavor("f", gpu=2).build(),
    cluster_queue("b2").cohort("team").flavor("f", gpu=2).build(),
    cohorts=(cohort("org").build(), cohort("team").parent("org").build()),
)

TWO_FLAVORS = config(
    cluster_queue("s")
    .flavor("f1", gpu=2)
    .flavor("f2", gpu=2)
    .preemption(within=LOWER)
    .fungibility(when_can_preempt=FungibilityPolicy.MAY_STOP_SEARCH)
    .build()
)

CASES: list[Case] = [
    case(
        "preempt lowest priority",
        KUEUE_QUEUES,
        running("low", "standalone", 2, prio=-1),
        running("mid", "standalone", 2),
        running("high", "standalone", 2, prio=1),
        cpu("in", "standalone", 2, prio=1),
        preempted={"low": "InClusterQueue"},
        pending={"in": waiting_for("low")},
    ),
    case(
        "preempt multiple",
        KUEUE_QUEUES,
        running("low", "standalone", 2, prio=-1),
        running("mid", "standalone", 2),
        running("high", "standalone", 2, prio=1),
        cpu("in", "standalone", 3, prio=1),
        preempted={"low": "InClusterQueue", "mid": "InClusterQueue"},
        pending={"in": waiting_for("low", "mid")},
    ),
    case(
        "LowerPriority never preempts a workload of equal priority",
        KUEUE_QUEUES,
        running("peer", "standalone", 6, prio=1),
        cpu("in", "standalone", 2, prio=1),
        pending={"in": NO_CANDIDATES},
    ),
    case(
        "LowerOrNewerEqualPriority preempts a newer workload of equal priority",
        KUEUE_QUEUES,
        running("newer", "preventStarvation", 6, created=5),
        cpu("in", "preventStarvation", 2, created=1),
        preempted={"newer": "InClusterQueue"},
        pending={"in": waiting_for("newer")},
    ),
    case(
        "LowerOrNewerEqualPriority spares an older workload of equal priority",
        KUEUE_QUEUES,
        running("older", "preventStarvation", 6, created=1),
        cpu("in", "preventStarvation", 2, created=5),
        pending={"in": NO_CANDIDATES},
    ),
    case(
        "among equal priorities the most recently admitted victim goes first",
        KUEUE_QUEUES,
        running("earlier", "standalone", 3, prio=-1, at=1),
        running("later", "standalone", 3, prio=-1, at=2),
        cpu("in", "standalone", 3),
        preempted={"later": "InClusterQueue"},
        pending={"in": waiting_for("later")},
    ),
    case(
        "minimal set: fill-back re-admits an earlier victim that turned out unneeded",
        KUEUE_QUEUES,
        running("lowest", "standalone", 1, prio=-2),
        running("low", "standalone", 4, prio=-1),
        running("high", "standalone", 1, prio=1),
        cpu("in", "standalone", 4),
        preempted={"low": "InClusterQueue"},
        pending={"in": waiting_for("low")},
    ),
    case(
        "minimal set: fill-back never re-adds the last target, only earlier unneeded ones",
        KUEUE_QUEUES,
        running("v1", "standalone", 1, prio=-3),
        running("v2", "standalone", 1, prio=-2),
        running("v3", "standalone", 3, prio=-1),
        running("high", "standalone", 1, prio=1),
        cpu("in", "standalone", 3),
        preempted={"v3": "InClusterQueue"},
        pending={"in": waiting_for("v3")},
    ),
    case(
        "no partial preemption: when all candidates together cannot free enough, nothing is preempted",
        KUEUE_QUEUES,
        running("low", "standalone", 2, prio=-1),
        running("high", "standalone", 4, prio=1),
        cpu("in", "standalone", 5),
        pending={"in": NO_CANDIDATES},
    ),
    case(
        "reclaim quota from borrower",
        KUEUE_QUEUES,
        running("c1-low", "c1", 3, prio=-1),
        running("c2-mid", "c2", 3),
        running("c2-high", "c2", 6, prio=1),
        cpu("in", "c1", 3, prio=1),
        preempted={"c2-mid": "InCohortReclamation"},
        pending={"in": waiting_for("c2-mid")},
    ),
    case(
        "not enough workloads borrowing",
        KUEUE_QUEUES,
        running("c1-high", "c1", 4, prio=1),
        running("c2-low-1", "c2", 4, prio=-1),
        running("c2-low-2", "c2", 4, prio=-1),
        cpu("in", "c1", 4, prio=1),
        pending={"in": NO_CANDIDATES},
    ),
    case(
        "preempting locally and borrowing other resources in cohort, without cohort candidates",
        KUEUE_QUEUES,
        running("c1-low", "c1", 4, prio=-1),
        running("c2-low-1", "c2", 4, prio=-1),
        running("c2-high-2", "c2", 4, prio=1),
        cpu("in", "c1", 4, prio=1, memory=5),
        preempted={"c1-low": "InClusterQueue"},
        pending={"in": waiting_for("c1-low")},
    ),
    case(
        "candidates in other queues are taken before the preemptor's own queue",
        KUEUE_QUEUES,
        running("c1-low", "c1", 2, prio=-1),
        running("c2-low", "c2", 10, prio=-1),
        cpu("in", "c1", 4),
        preempted={"c2-low": "InCohortReclamation"},
        pending={"in": waiting_for("c2-low")},
    ),
    case(
        "reclaimWithinCohort=Any reclaims borrowed quota even from a higher-priority workload",
        KUEUE_QUEUES,
        running("c1-high", "c1", 9, prio=5),
        running("c2-own", "c2", 3),
        cpu("in", "c2", 3),
        preempted={"c1-high": "InCohortReclamation"},
        pending={"in": waiting_for("c1-high")},
    ),
    case(
        "reclaimWithinCohort=LowerPriority does not reclaim from an equal-priority borrower",
        KUEUE_QUEUES,
        running("c1-own", "c1", 3),
        running("c2-borrower", "c2", 9),
        cpu("in", "c1", 3),
        pending={"in": NO_CANDIDATES},
    ),
    case(
        "a queue within its nominal quota is never reclaimed from",
        KUEUE_QUEUES,
        running("c1-own", "c1", 6, prio=1),
        running("c2-low", "c2", 6, prio=-1),
        cpu("in", "c1", 2, prio=1),
        pending={"in": NO_CANDIDATES},
    ),
    case(
        "reclaiming stops for a queue as soon as it drops back to nominal during the greedy pass",
        THREE_QUEUES,
        gpu_running("b1", "b", 3, prio=-2, at=1),
        gpu_running("b2", "b", 3, prio=-2, at=2),
        gpu_running("z1", "z", 3, prio=-1, at=1),
        gpu_running("z2", "z", 3, prio=-1, at=2),
        gpus("in", "a", 4),
        preempted={"b2": "InCohortReclamation", "z2": "InCohortReclamation"},
        pending={"in": waiting_for("b2", "z2")},
    ),
    case(
        "without borrowWithinCohort a preemptor exceeding its nominal quota cannot borrow by preempting",
        config(*gpu_cohort()),
        gpu_running("b-low", "b", 5, prio=-1),
        gpus("in", "a", 3),
        pending={"in": "insufficient unused quota for nvidia.com/gpu in flavor f, 2 more needed"},
    ),
    case(
        "borrowWithinCohort lets a borrowing preemptor reclaim from a lower-priority workload",
        config(*gpu_cohort(bwc=LOWER)),
        gpu_running("b-low", "b", 5, prio=-1),
        gpus("in", "a", 3),
        preempted={"b-low": "InCohortReclaimWhileBorrowing"},
        pending={"in": waiting_for("b-low")},
    ),
    case(
        "borrowWithinCohort with maxPriorityThreshold protects workloads above the threshold",
        config(*gpu_cohort(bwc=LOWER, threshold=-2)),
        gpu_running("b-low", "b", 5, prio=-1),
        gpus("in", "a", 3),
        pending={"in": NO_CANDIDATES},
    ),
    case(
        "borrowWithinCohort with maxPriorityThreshold preempts a workload exactly at the threshold",
        config(*gpu_cohort(bwc=LOWER, threshold=-1)),
        gpu_running("b-low", "b", 5, prio=-1),
        gpus("in", "a", 3),
        preempted={"b-low": "InCohortReclaimWhileBorrowing"},
        pending={"in": waiting_for("b-low")},
    ),
    case(
        "borrowWithinCohort: a candidate above the threshold is still reclaimed when the preemptor stays "
        "within nominal",
        config(*gpu_cohort(a_quota=4, bwc=LOWER, threshold=-5)),
        gpu_running("b-low", "b", 8, prio=-1),
        gpus("in", "a", 4),
        preempted={"b-low": "InCohortReclamation"},
        pending={"in": waiting_for("b-low")},
    ),
    case(
        "borrowWithinCohort never preempts an equal-priority workload while borrowing",
        config(*gpu_cohort(bwc=LOWER)),
        gpu_running("b-peer", "b", 5),
        gpus("in", "a", 3),
        pending={"in": NO_CANDIDATES},
    ),
    case(
        "a candidate that uses no flavor needing preemption is not preempted",
        TWO_FLAVORS,
        gpu_running("on-f1", "s", 2, prio=-1, on="f1"),
        gpu_running("on-f2", "s", 2, prio=-2, on="f2"),
        gpus("in", "s", 2),
        preempted={"on-f1": "InClusterQueue"},
        pending={"in": waiting_for("on-f1")},
    ),
    case(
        "hierarchical reclaim: a preemptor whose request fits its sub-cohort reclaims while borrowing",
        HIERARCHY,
        gpu_running("x1", "x", 4, at=1),
        gpu_running("x2", "x", 3, at=2),
        gpus("in", "a", 3),
        preempted={"x2": "InCohortReclamation"},
        pending={"in": waiting_for("x2")},
    ),
    case(
        "hierarchical: a child cohort within its subtree quota is not searched for candidates",
        NESTED_LENDER,
        gpu_running("x-own", "x", 2),
        gpu_running("b1-borrower", "b1", 4, prio=-1),
        gpus("in", "x", 2, prio=1),
        pending={"in": NO_CANDIDATES},
    ),
]


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_preemption(c: Case) -> None:
    assert run_case(c) == c.want
