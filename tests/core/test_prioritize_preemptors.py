"""PrioritizePreemptorWorkloads (alpha gate, Kueue v0.19): a head waiting for the evictions it
issued is ordered first in a cycle and holds its quota, so that a desynchronised eviction does not
let another workload take what was freed (Kueue#14682; pkg/scheduler/scheduler.go,
pkg/scheduler/fair_sharing_iterator.go, pkg/cache/queue/cluster_queue.go). The table names are
Kueue's own: TestEntryOrdering and TestEntryComparerLess in pkg/scheduler/scheduler_test.go."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from builders import cluster_queue, config, workload
from gpuq.core.admission import Scheduler, _classical_key
from gpuq.core.fairshare import DominantShare, _Tournament
from gpuq.core.flavors import Assignment
from gpuq.core.model import PreemptionPolicy, QueueingStrategy, SchedulerConfig, Workload
from gpuq.core.nomination import Entry
from gpuq.core.queues import ClusterQueueQueue, RequeueReason

GATE = "PrioritizePreemptorWorkloads"
LOWER = PreemptionPolicy.LOWER_PRIORITY
ANY = PreemptionPolicy.ANY


def entry(
    name: str, priority: int = 0, created: float = 0.0, borrowing: int = 0, preemptor: bool = False
) -> Entry:
    wl = workload(name).queue("a").priority(priority).created(created).request(1, gpu=1).build()
    return Entry(wl, "a", assignment=Assignment(borrowing=borrowing), is_preemptor=preemptor)


ORDERING_PREEMPTORS = [
    entry("preemptor-borrowing", priority=1, created=1, borrowing=1, preemptor=True),
    entry("preemptor-not-borrowing", priority=1, created=2, preemptor=True),
    entry("not-preemptor-not-borrowing", priority=2, created=0),
]

ENTRY_ORDERING = [
    (
        "Some workloads are preemptors; PrioritizePreemptorWorkloads is disabled",
        False,
        ["not-preemptor-not-borrowing", "preemptor-not-borrowing", "preemptor-borrowing"],
    ),
    (
        "Some workloads are preemptors; PrioritizePreemptorWorkloads is enabled",
        True,
        ["preemptor-not-borrowing", "preemptor-borrowing", "not-preemptor-not-borrowing"],
    ),
]


@pytest.mark.parametrize(
    ("gate", "want"), [c[1:] for c in ENTRY_ORDERING], ids=[c[0] for c in ENTRY_ORDERING]
)
def test_entry_ordering(gate: bool, want: list[str]) -> None:
    ordered = sorted(ORDERING_PREEMPTORS, key=lambda e: _classical_key(e, gate))
    assert [e.workload.name for e in ordered] == want


COHORT = "cohort"
CPU = ("default", "cpu")
BORROWING = DominantShare(Fraction(1), Fraction(500), "cpu", True, (CPU,))
NOMINAL = DominantShare(Fraction(1), Fraction(0), "", False)

COMPARER_LESS = [
    (
        "a is preemptor, b not, feature enabled",
        True,
        ("preemptor-borrowing", True),
        ("not-preemptor-nominal", False),
        True,
    ),
    (
        "a is preemptor, b not, feature disabled",
        False,
        ("preemptor-borrowing", True),
        ("not-preemptor-nominal", False),
        False,
    ),
    (
        "both are preemptors, feature enabled",
        True,
        ("preemptor-borrowing", True),
        ("preemptor-nominal", True),
        False,
    ),
]


@pytest.mark.parametrize(
    ("gate", "a", "b", "want"), [c[1:] for c in COMPARER_LESS], ids=[c[0] for c in COMPARER_LESS]
)
def test_entry_comparer_less(gate: bool, a: tuple[str, bool], b: tuple[str, bool], want: bool) -> None:
    """a borrows on the flavor it requests, b does not (FairSharingPrioritizeNonBorrowing on)."""
    first = Entry(workload(a[0]).build(), "a", Assignment(usage={CPU: 1}), is_preemptor=a[1])
    second = Entry(workload(b[0]).build(), "b", Assignment(usage={CPU: 1}), is_preemptor=b[1])
    shares = {(COHORT, first.key): BORROWING, (COHORT, second.key): NOMINAL}
    tournament = _Tournament(shares, prefer_non_borrowing=True, by_priority=True, preemptors_first=gate)
    assert tournament.less(first, second, COHORT) is want


def queued(name: str) -> Workload:
    return workload(name).queue("a").request(1, gpu=1).build()


PREEMPTOR_TRACKING = [
    (
        "a head requeued pending preemption is the preemptor under StrictFIFO",
        QueueingStrategy.STRICT_FIFO,
        [],
        True,
    ),
    (
        "a head requeued pending preemption is the preemptor under BestEffortFIFO",
        QueueingStrategy.BEST_EFFORT_FIFO,
        [],
        True,
    ),
    (
        "deleting the preemptor (admitted or gone) clears it",
        QueueingStrategy.BEST_EFFORT_FIFO,
        ["delete"],
        False,
    ),
    ("a later preemptor of the queue replaces it", QueueingStrategy.STRICT_FIFO, ["other"], False),
]


@pytest.mark.parametrize(
    ("strategy", "then", "want"), [c[1:] for c in PREEMPTOR_TRACKING], ids=[c[0] for c in PREEMPTOR_TRACKING]
)
def test_preemptor_is_tracked_per_cluster_queue(
    strategy: QueueingStrategy, then: list[str], want: bool
) -> None:
    queue = ClusterQueueQueue("a", strategy)
    wl, other = queued("wl"), queued("other")
    queue.push(wl)
    queue.push(other)
    queue.requeue(wl, RequeueReason.PENDING_PREEMPTION)
    for step in then:
        if step == "delete":
            queue.delete(wl.key)
        else:
            queue.requeue(other, RequeueReason.PENDING_PREEMPTION)
    assert queue.is_preemptor(wl.key) is want


def _stealing_cluster(gate: bool) -> Scheduler:
    """Kueue's integration test "Should prevent other workloads from stealing quota when a preemptor
    is waiting for multiple evictions" (test/integration/singlecluster/scheduler/preemption_test.go):
    alpha (2 CPUs, reclaimWithinCohort Any), beta and gamma (1 each) in one cohort; wl-a (1) and
    wl-b (3) hold all 4; a low-priority wl-c waits
    in gamma; a high-priority preemptor of alpha needs all 4."""
    queues = [
        cluster_queue(name).cohort("all").flavor("one", cpu=cpu).preemption(LOWER, reclaim, LOWER).build()
        for name, cpu, reclaim in (("alpha", 2, ANY), ("beta", 1, LOWER), ("gamma", 1, LOWER))
    ]
    cfg = config(*queues)
    cfg = replace(cfg, scheduler=SchedulerConfig(feature_gates={GATE: gate}))
    scheduler = Scheduler(cfg)
    for name, queue, cpu in (("wl-a", "alpha", 1), ("wl-b", "beta", 3)):
        scheduler.submit(workload(name).queue(queue).priority(5).request(1, cpu=cpu).build())
    admitted: list[str] = []
    for _ in range(2):  # a borrowing workload waits for the cycle after one of its cohort was admitted
        result, entries = scheduler.plan_cycle(0.0)
        scheduler.apply(result, entries, 0.0)
        admitted += [a.workload for a in result.admitted]
    assert sorted(admitted) == ["default/wl-a", "default/wl-b"]
    scheduler.submit(workload("wl-c").queue("gamma").priority(1).created(1).request(1, cpu=1).build())
    scheduler.submit(workload("preemptor").queue("alpha").priority(10).created(2).request(1, cpu=4).build())
    return scheduler


STEALING = [
    ("without the gate wl-c takes quota wl-b freed while wl-a is still evicting", False, ["default/wl-c"]),
    (
        "Should prevent other workloads from stealing quota"
        " when a preemptor is waiting for multiple evictions",
        True,
        [],
    ),
]


@pytest.mark.parametrize(("gate", "admitted"), [c[1:] for c in STEALING], ids=[c[0] for c in STEALING])
def test_preemptor_waiting_for_evictions_keeps_freed_quota(gate: bool, admitted: list[str]) -> None:
    scheduler = _stealing_cluster(gate)
    for _ in range(2):  # the first cycle wl-c holds gamma's quota (it cannot always reclaim it)
        result, entries = scheduler.plan_cycle(1.0)
        scheduler.apply(result, entries, 1.0)
    assert sorted(p.workload for p in result.preempted) == ["default/wl-a", "default/wl-b"]
    scheduler.evict("default/wl-b", 2.0)  # wl-b's eviction completes, wl-a's not yet
    result, entries = scheduler.plan_cycle(2.0)
    scheduler.apply(result, entries, 2.0)
    assert [a.workload for a in result.admitted] == admitted
    scheduler.evict("default/wl-a", 3.0)
    result, _ = scheduler.plan_cycle(3.0)
    assert ("default/preemptor" in [a.workload for a in result.admitted]) is gate  # else wl-c holds a CPU
