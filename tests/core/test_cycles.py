"""run_cycles: evictions complete between cycles, and the run ends when nothing more can change."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from builders import cluster_queue, config, scheduler_with, workload
from gpuq.core.admission import Scheduler
from gpuq.core.cycles import (
    MIN_WINDOW,
    FlappingDetector,
    ProgressWatch,
    StopKind,
    progress_window,
    run_cycles,
)
from gpuq.core.decisions import Admit, CycleResult, Preempt
from gpuq.core.model import ClusterConfig, ClusterQueue, PreemptionPolicy, StopPolicy, Workload

ANY = PreemptionPolicy.ANY
LOWER = PreemptionPolicy.LOWER_PRIORITY
NEVER = PreemptionPolicy.NEVER

# Each queue reclaims its nominal quota in one flavor, then, once the victim is
# gone, stops its flavor search at an earlier flavor where it can borrow
# (whenCanBorrow=MayStopSearch); the reclaimed quota goes to the next borrower
# and the four workloads preempt each other in a loop of four cycles.
FLAPPING = config(
    cluster_queue("q0").cohort("c").flavor("f2", gpu=0).flavor("f1", gpu=2).preemption(reclaim=ANY).build(),
    cluster_queue("q1").cohort("c").flavor("f1", gpu=2).flavor("f2", gpu=1).preemption(reclaim=ANY).build(),
    cluster_queue("q2").cohort("c").flavor("f1", gpu=0).flavor("f2", gpu=2).preemption(reclaim=ANY).build(),
)
FLAPPING_WORKLOADS = [
    workload(name).queue(queue).priority(priority).created(i).request(gpu=2).build()
    for i, (name, queue, priority) in enumerate(
        [("w0", "q1", 0), ("w1", "q0", 1), ("w2", "q2", 1), ("w3", "q0", 1), ("w4", "q2", 0)]
    )
]


def test_preemption_flapping_stops_the_run_with_its_period() -> None:
    run = run_cycles(scheduler_with(FLAPPING, FLAPPING_WORKLOADS))
    assert not run.quiescent
    assert run.flapping_period == 4
    assert run.cycles == 17  # one cycle of admissions, then four full periods observed
    assert set(run.preempted) == {"default/w1", "default/w2", "default/w3", "default/w4"}


def test_a_run_without_flapping_ends_quiescent() -> None:
    cfg = config(cluster_queue("a").flavor("f", gpu=4).build())
    run = run_cycles(
        scheduler_with(
            cfg, [workload(f"w{i}").queue("a").created(i).request(gpu=2).build() for i in range(3)]
        )
    )
    assert run.quiescent
    assert run.flapping_period is None
    assert sorted(run.admitted) == ["default/w0", "default/w1"]
    assert "insufficient unused quota" in run.pending["default/w2"].message


def test_max_cycles_bounds_the_run() -> None:
    run = run_cycles(scheduler_with(FLAPPING, FLAPPING_WORKLOADS), max_cycles=3)
    assert run.cycles == 3
    assert not run.quiescent
    assert run.flapping_period is None


@pytest.mark.parametrize(
    ("policy", "holds_quota", "why"),
    [
        (StopPolicy.HOLD, True, "waiting in ClusterQueue"),
        (StopPolicy.HOLD_AND_DRAIN, False, "evicted: ClusterQueue a is stopped (HoldAndDrain)"),
    ],
    ids=[
        "stopPolicy Hold keeps admitted workloads and admits nothing new",
        "stopPolicy HoldAndDrain also evicts the workloads it admitted",
    ],
)
def test_stopped_cluster_queue(policy: StopPolicy, holds_quota: bool, why: str) -> None:
    cfg = config(cluster_queue("a").flavor("f", gpu=4).stop(policy).build())
    running = workload("running").queue("a").request(gpu=2).admitted("a", {"gpu": "f"}).build()
    waiting = workload("waiting").queue("a").created(5).request(gpu=1).build()
    scheduler = scheduler_with(cfg, [running, waiting])
    run = run_cycles(scheduler)
    assert ("default/running" in scheduler.state.admitted) is holds_quota
    assert run.admitted == {}
    assert "is stopped" in run.pending["default/waiting"].message
    if not holds_quota:
        assert why in run.pending["default/running"].message


# ------------------------------------------------------------------ the stop rule (ProgressWatch)
# Two small flaps found by search, each alone periodic: in cohort "a" a higher-priority workload
# of a0 preempts a lower one (withinClusterQueue LowerPriority), a1 borrows the freed quota, and
# the evicted workload reclaims it (reclaimWithinCohort Any), every 5 cycles; in cohort "b" the
# same combination, both queues listing their flavors in one order, repeats every 7 cycles.
# Together the run has no period the detector can see (35 > MAX_PERIOD): only the no-progress
# window ends it.


def _flap(cohort: str, queues: list[ClusterQueue], jobs: list[tuple[str, int, int, int]]) -> list[Workload]:
    return [
        workload(f"{cohort}-w{i}")
        .queue(f"{cohort}{q}")
        .priority(priority)
        .created(i)
        .request(gpu=gpu)
        .build()
        for i, q, priority, gpu in jobs
    ]


PERIOD_5_QUEUES = [
    cluster_queue("a0").cohort("a").flavor("f1", gpu=2).flavor("f2", gpu=3).preemption(LOWER, ANY).build(),
    cluster_queue("a1").cohort("a").flavor("f2", gpu=1).flavor("f1", gpu=0).preemption(LOWER, ANY).build(),
]
PERIOD_5 = _flap(
    "a",
    PERIOD_5_QUEUES,
    [(0, 1, 1, 2), (1, 1, 2, 2), (2, 0, 1, 2), (3, 0, 2, 1), (4, 0, 0, 1), (5, 0, 2, 1), (6, 0, 2, 2)],
)
PERIOD_7_QUEUES = [
    cluster_queue("b0")
    .cohort("b")
    .flavor("f3", gpu=3)
    .flavor("f1", gpu=1)
    .flavor("f2", gpu=1)
    .preemption(NEVER, ANY)
    .build(),
    cluster_queue("b1")
    .cohort("b")
    .flavor("f3", gpu=0)
    .flavor("f1", gpu=3)
    .flavor("f2", gpu=0)
    .preemption(LOWER, ANY)
    .build(),
]
PERIOD_7 = _flap(
    "b",
    PERIOD_7_QUEUES,
    [
        (0, 1, 2, 1),
        (1, 1, 0, 2),
        (2, 1, 0, 1),
        (3, 0, 2, 2),
        (4, 1, 1, 2),
        (5, 1, 0, 1),
        (6, 1, 2, 2),
        (7, 0, 2, 2),
        (8, 1, 2, 2),
    ],
)


@dataclass(frozen=True)
class StopCase:
    name: str
    config: ClusterConfig
    workloads: tuple[Workload, ...]
    kind: StopKind
    cycles: int
    period: int | None = None
    churning: tuple[str, ...] = ()
    why: tuple[str, ...] = ()  # phrases the explanation contains, in its sentences' order


STOP_CASES = [
    StopCase(
        "a fixed-period flap stops Periodic and names the workloads that change hands",
        FLAPPING,
        tuple(FLAPPING_WORKLOADS),
        StopKind.PERIODIC,
        17,
        period=4,
        churning=("default/w1", "default/w2", "default/w3", "default/w4"),
        why=(
            "ClusterQueues q0, q2 in cohort c: reclaimWithinCohort Any with borrowing (q0, q2 without a "
            "borrowingLimit) lets each reclaim what the other borrowed; they list their flavors in "
            "different orders and whenCanBorrow MayStopSearch",
        ),
    ),
    StopCase(
        "a period-5 flap alone is periodic",
        config(*PERIOD_5_QUEUES),
        tuple(PERIOD_5),
        StopKind.PERIODIC,
        24,
        period=5,
        churning=("default/a-w1", "default/a-w4"),
        why=(
            "ClusterQueues a0, a1 in cohort a: withinClusterQueue LowerPriority with reclaimWithinCohort Any "
            "and borrowing (a1 without a borrowingLimit) lets each reclaim what the other borrowed",
        ),
    ),
    StopCase(
        "two flaps of periods 5 and 7 have no period: the run stops on no progress and names both",
        config(*PERIOD_5_QUEUES, *PERIOD_7_QUEUES),
        tuple(PERIOD_5 + PERIOD_7),
        StopKind.NO_PROGRESS,
        0,  # checked against the last progress below
        churning=("default/a-w1", "default/a-w4", "default/b-w5", "default/b-w7"),
        why=(
            "ClusterQueues a0, a1 in cohort a: withinClusterQueue LowerPriority with reclaimWithinCohort Any",
            "ClusterQueues b0, b1 in cohort b: withinClusterQueue LowerPriority with reclaimWithinCohort Any "
            "and borrowing (b0 without a borrowingLimit) lets each reclaim what the other borrowed",
        ),
    ),
    StopCase(
        "a run that settles stops Quiet with nothing to report",
        config(cluster_queue("q").flavor("f", gpu=4).build()),
        tuple(workload(f"w{i}").queue("q").created(i).request(gpu=2).build() for i in range(3)),
        StopKind.QUIET,
        3,
    ),
]


@pytest.mark.parametrize("c", STOP_CASES, ids=[c.name for c in STOP_CASES])
def test_the_run_stops_and_says_why(c: StopCase) -> None:
    run = run_cycles(scheduler_with(c.config, c.workloads))
    stop = run.stop
    assert stop is not None
    assert stop.kind == c.kind
    assert run.quiescent is (c.kind == StopKind.QUIET)
    assert run.flapping_period == c.period
    assert stop.period == c.period
    assert stop.churning == c.churning
    assert len(stop.why) == len(c.why)
    for sentence, phrase in zip(stop.why, c.why, strict=True):
        assert phrase in sentence
    if c.kind == StopKind.NO_PROGRESS:
        assert stop.window == MIN_WINDOW
        assert run.cycles == stop.last_progress + MIN_WINDOW
    else:
        assert run.cycles == c.cycles


def test_no_progress_is_seen_in_a_run_the_period_detector_never_ends() -> None:
    scheduler = scheduler_with(config(*PERIOD_5_QUEUES, *PERIOD_7_QUEUES), PERIOD_5 + PERIOD_7)
    detector = FlappingDetector()
    for _ in range(400):
        result, entries = scheduler.plan_cycle(0.0)
        scheduler.apply(result, entries, 0.0)
        for eviction in result.preempted:
            scheduler.evict(eviction.workload, 0.0)
        assert detector.observe(result) is None


def _admit(key: str, cq: str = "q", borrowing: bool = False) -> Admit:
    return Admit(key, cq, (), borrowing)


@pytest.mark.parametrize(
    ("cycles", "kind", "at"),
    [
        # the same head tried again and again, decisions changing: stops `window` cycles after progress
        (
            [CycleResult((_admit("w1"),), considered=("w1", "w2"))]
            + [CycleResult(preempted=(Preempt("w1", "q", "w2", "InClusterQueue"),), considered=("w2",))]
            + [CycleResult((_admit("w1"),), considered=("w1",))] * 200,
            StopKind.NO_PROGRESS,
            1 + 8,
        ),
        # a new head every cycle is progress, however long
        (
            [
                CycleResult(preempted=(Preempt("x", "q", f"w{i}", "InClusterQueue"),), considered=(f"w{i}",))
                for i in range(30)
            ],
            None,
            0,
        ),
        # a new admission every cycle is progress too
        ([CycleResult((_admit(f"w{i}"),), considered=("w",)) for i in range(30)], None, 0),
        # a cycle that decides nothing and moves no head is quiet
        (
            [CycleResult((_admit("w1"),), considered=("w1",)), CycleResult(considered=("w2",))],
            StopKind.QUIET,
            2,
        ),
        # no head at all is quiet, and not a cycle
        ([CycleResult((_admit("w1"),), considered=("w1",)), CycleResult()], StopKind.QUIET, 1),
    ],
    ids=["re-admissions only", "new heads", "new admissions", "nothing changed", "no head"],
)
def test_progress_watch(cycles: list[CycleResult], kind: StopKind | None, at: int) -> None:
    watch = ProgressWatch(window=8)
    stop = None
    for result in cycles:
        stop = watch.observe(result, moved=True) if result.changed else watch.observe(result)
        if stop is not None:
            break
    if kind is None:
        assert stop is None
        return
    assert stop is not None
    assert (stop.kind, stop.cycles) == (kind, at)


def test_the_window_scales_with_the_cluster_queues() -> None:
    assert progress_window(3) == MIN_WINDOW == 64
    assert progress_window(200) == 400


# ------------------------------------------------------------------ decisions as before
# The loop as it was before the no-progress rule (quiet, fixed period, max cycles): every run it
# ended gets the very same decisions from run_cycles.


def _reference(
    scheduler: Scheduler, max_cycles: int
) -> tuple[int, dict[str, Admit], dict[str, Preempt], bool]:
    admitted: dict[str, Admit] = {}
    preempted: dict[str, Preempt] = {}
    detector = FlappingDetector()
    cycles, settled = 0, False
    while cycles < max_cycles:
        before = scheduler.active_count()
        result, entries = scheduler.plan_cycle(0.0)
        if not entries:
            settled = True
            break
        cycles += 1
        scheduler.apply(result, entries, 0.0)
        admitted.update((a.workload, a) for a in result.admitted)
        for eviction in result.preempted:
            preempted[eviction.workload] = eviction
            admitted.pop(eviction.workload, None)
            scheduler.evict(eviction.workload, 0.0)
        if not result.changed and scheduler.active_count() == before:
            settled = True
            break
        if detector.observe(result) is not None:
            break
    return cycles, admitted, preempted, settled


def _random_case(seed: int) -> tuple[ClusterConfig, list[Workload]]:
    rng = random.Random(seed)
    queues, flavors = rng.randint(2, 4), ["f1", "f2", "f3"][: rng.randint(2, 3)]
    cqs = []
    for q in range(queues):
        builder = cluster_queue(f"q{q}").cohort("c")
        for flavor in rng.sample(flavors, len(flavors)):
            builder = builder.flavor(flavor, gpu=(rng.randint(0, 3), rng.choice([None, 1, 2])))
        cqs.append(builder.preemption(rng.choice([LOWER, NEVER]), rng.choice([ANY, LOWER, NEVER])).build())
    jobs = [
        workload(f"w{i}")
        .queue(f"q{rng.randrange(queues)}")
        .priority(rng.randint(0, 2))
        .created(i)
        .request(gpu=rng.randint(1, 2))
        .build()
        for i in range(rng.randint(3, 12))
    ]
    return config(*cqs), jobs


@pytest.mark.parametrize("seed", [*range(60), 323])  # seed 323 flaps with a fixed period
def test_runs_that_ended_before_get_the_same_decisions(seed: int) -> None:
    cfg, jobs = _random_case(seed)
    cycles, admitted, preempted, settled = _reference(scheduler_with(cfg, jobs), 300)
    run = run_cycles(scheduler_with(cfg, jobs), max_cycles=300)
    assert run.cycles == cycles
    assert run.admitted == admitted
    assert run.preempted == preempted
    assert run.quiescent is settled
