"""Admission Fair Sharing (KEP-4136): the arithmetic, the ledger, the queue order and the sampling.

Ported from Kueue's ``pkg/scheduler/scheduler_afs_test.go`` (``TestScheduleForAFS``,
``TestShouldApplyEntryPenalty``), ``pkg/util/admissionfairsharing/admission_fair_sharing_test.go``
and ``pkg/cache/queue/afs/entry_penalties_test.go``; each case keeps Kueue's name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction

import pytest

from builders import cluster_queue, config, workload
from gpuq.core.admission import Scheduler
from gpuq.core.admission_fairshare import (
    LocalQueueUsage,
    UsageLedger,
    alpha,
    decayed,
    entry_penalty,
    quantity_text,
    status_view,
    usage_value,
)
from gpuq.core.cycles import run_cycles
from gpuq.core.lifecycle import Lifecycle, Timer, WakeAt
from gpuq.core.lifecycle import events as ev
from gpuq.core.model import (
    AdmissionFairSharing,
    AdmissionMode,
    ClusterConfig,
    LocalQueue,
    PreemptionPolicy,
    SchedulerConfig,
    Workload,
)

NOW = 1_000_000.0
# Kueue's TestScheduleForAFS configuration: half-life 10s, sampling 1s.
KUEUE_AFS = AdmissionFairSharing(usage_half_life_s=10.0, usage_sampling_interval_s=1.0)


def afs_config(
    *local_queues: LocalQueue,
    afs: AdmissionFairSharing | None = KUEUE_AFS,
    mode: AdmissionMode | None = AdmissionMode.USAGE_BASED,
    gates: dict[str, bool] | None = None,
    cpu: int = 8,
) -> ClusterConfig:
    """Kueue's cq1 (8 CPUs, 8Gi) with usage-based admission and the given LocalQueues."""
    cq = replace(cluster_queue("cq1").flavor("default", cpu=cpu, memory=8 << 30).build(), admission_mode=mode)
    base = config(cq, local_queues=local_queues)
    scheduler = SchedulerConfig(admission_fair_sharing=afs, feature_gates=gates or {})
    return replace(base, scheduler=scheduler)


def lq(name: str, weight: float = 1, consumed: float | None = None) -> LocalQueue:
    """A LocalQueue of cq1; ``consumed``: its initial CPU usage (Kueue's ``SetForTest``)."""
    seeded = {} if consumed is None else {"cpu": consumed}
    at = None if consumed is None else NOW
    return LocalQueue("default", name, "cq1", fair_weight=Fraction(weight), consumed=seeded, consumed_at=at)


def wl(name: str, queue: str, cpu: float, created: float = 0.0) -> Workload:
    return workload(name).queue(queue).created(NOW + created).request(cpu=cpu).build()


@dataclass(frozen=True)
class ScheduleCase:
    name: str
    queues: tuple[LocalQueue, ...]
    workloads: tuple[Workload, ...]
    admitted: frozenset[str]
    gates: dict[str, bool] = field(default_factory=dict)


LQS = (lq("lq-a"), lq("lq-b"), lq("lq-c"), lq("lq-zero", weight=0))


def queues_with(**consumed: float) -> tuple[LocalQueue, ...]:
    return tuple(lq(q.name, float(q.fair_weight), consumed.get(q.name.replace("-", "_"))) for q in LQS)


SCHEDULE_CASES = [
    ScheduleCase(
        "admits workload from less active localqueue",
        queues_with(lq_a=8, lq_b=2),
        (wl("wl-a1", "lq-a", 8), wl("wl-b1", "lq-b", 8, created=1)),
        frozenset({"wl-b1"}),
    ),
    ScheduleCase(
        "does not prioritize a zero-weight localqueue",
        queues_with(lq_a=0, lq_zero=0),
        (wl("wl-z1", "lq-zero", 8), wl("wl-a1", "lq-a", 8, created=1)),
        frozenset({"wl-a1"}),
    ),
    ScheduleCase(
        "without AFS: classic admission decision ignores queue usage",
        queues_with(lq_a=8, lq_b=2),
        (wl("wl-a1", "lq-a", 8), wl("wl-b1", "lq-b", 8, created=1)),
        frozenset({"wl-a1"}),
        gates={"AdmissionFairSharing": False},
    ),
    ScheduleCase(
        "admits one workload from each localqueue when quota is limited",
        queues_with(lq_a=4, lq_b=4),
        (
            wl("wl-a1", "lq-a", 4),
            wl("wl-a2", "lq-a", 4, created=1),
            wl("wl-b1", "lq-b", 4, created=2),
            wl("wl-b2", "lq-b", 4, created=3),
        ),
        frozenset({"wl-a1", "wl-b1"}),
    ),
    ScheduleCase(
        "schedules normally when queues have equal usage",
        queues_with(lq_a=2, lq_b=2, lq_c=2),
        (wl("wl-a1", "lq-a", 4), wl("wl-b1", "lq-b", 3), wl("wl-c1", "lq-c", 1)),
        frozenset({"wl-a1", "wl-b1", "wl-c1"}),
    ),
    ScheduleCase(
        "admits workload from lq-b with uninitialized cache",
        queues_with(lq_a=8),
        (wl("wl-a1", "lq-a", 8), wl("wl-b1", "lq-b", 8, created=1)),
        frozenset({"wl-b1"}),
    ),
]


@pytest.mark.parametrize("c", SCHEDULE_CASES, ids=lambda c: c.name)
def test_schedule_for_afs(c: ScheduleCase) -> None:
    """Kueue runs one scheduling cycle per workload; so does this."""
    scheduler = Scheduler(afs_config(*c.queues, gates=c.gates))
    for w in c.workloads:
        scheduler.submit(w)
    run = run_cycles(scheduler, max_cycles=len(c.workloads), now=NOW)
    assert {key.removeprefix("default/") for key in run.admitted} == c.admitted


@pytest.mark.parametrize(
    ("name", "afs", "mode", "reserved_before", "pushed"),
    [
        (
            "pushes for a first-pass workload on a usage-based ClusterQueue",
            KUEUE_AFS,
            AdmissionMode.USAGE_BASED,
            False,
            True,
        ),
        ("skips when no AdmissionFairSharing config is set", None, AdmissionMode.USAGE_BASED, False, False),
        (
            "skips for a ClusterQueue without usage-based admission mode",
            KUEUE_AFS,
            AdmissionMode.NONE,
            False,
            False,
        ),
        (
            "skips a workload that already holds a quota reservation",
            KUEUE_AFS,
            AdmissionMode.USAGE_BASED,
            True,
            False,
        ),
    ],
)
def test_should_apply_entry_penalty(
    name: str, afs: AdmissionFairSharing | None, mode: AdmissionMode, reserved_before: bool, pushed: bool
) -> None:
    """TestShouldApplyEntryPenalty: only a new reservation in a usage-based ClusterQueue is charged."""
    cfg = afs_config(lq("lq"), afs=afs, mode=mode)
    scheduler = Scheduler(cfg)
    w = workload("wl").queue("lq").request(cpu=4).build()
    if reserved_before:
        w = workload("wl").queue("lq").request(cpu=4).admitted("cq1", {"cpu": "default"}).build()
    scheduler.submit(w)
    result, entries = scheduler.plan_cycle(NOW)
    scheduler.apply(result, entries, NOW)
    fair = scheduler.fair_usage
    entry = fair.ledger.entries.get(("default", "lq")) if fair is not None else None
    assert (entry is not None and "default/wl" in entry.penalties) == pushed


# ------------------------------------------------------------------------------------ arithmetic


@pytest.mark.parametrize(
    ("name", "consumed", "penalty", "lq_weight", "weights", "want"),
    [
        ("resource with default weight", {"gpu-logical": 2.0}, {}, 1.0, {}, 2.0),
        ("resource with explicit weight", {"gpu-logical": 2.0}, {}, 1.0, {"gpu-logical": 3.0}, 6.0),
        (
            "mixed CPU and other resources",
            {"cpu": 4.0, "gpu-logical": 2.0},
            {},
            1.0,
            {"cpu": 1.0, "gpu-logical": 5.0},
            14.0,
        ),
        (
            "resource with weight zero contributes nothing",
            {"gpu-logical": 10.0},
            {},
            1.0,
            {"gpu-logical": 0.0},
            0.0,
        ),
        ("resource in penalty only", {}, {"gpu-logical": 3.0}, 1.0, {}, 3.0),
        (
            "resource in both consumed and penalty",
            {"gpu-logical": 2.0},
            {"gpu-logical": 1.0},
            2.0,
            {"gpu-logical": 4.0},
            6.0,
        ),
        ("zero weight sorts last, not first (not NaN)", {}, {}, 0.0, {}, math.inf),
        ("negative weight sorts last", {"cpu": 1.0}, {}, -1.0, {}, math.inf),
    ],
)
def test_calculate_usage(
    name: str,
    consumed: dict[str, float],
    penalty: dict[str, float],
    lq_weight: float,
    weights: dict[str, float],
    want: float,
) -> None:
    assert usage_value(consumed, penalty, lq_weight, weights) == want


def test_calculate_decayed_consumed_converges_to_usage() -> None:
    """1 - 0.5^n of the way to the usage after n half-lives, never above it (168h sampled every 5m)."""
    half_life, sampling = 168 * 3600.0, 300.0
    consumed: dict[str, float] = {}
    seen = []
    for _ in range(3):
        for _ in range(2016):
            consumed = decayed(consumed, {"cpu": 2.0}, sampling, half_life)
        seen.append(quantity_text(consumed["cpu"]))
    assert seen == ["1", "1500m", "1750m"]
    assert consumed["cpu"] <= 2.0


def test_calculate_decayed_consumed_accumulates_sub_milli() -> None:
    """A per-sample contribution below one milli-unit still accumulates."""
    consumed: dict[str, float] = {}
    grown = []
    for _ in range(3):
        before = consumed.get("cpu", 0.0)
        consumed = decayed(consumed, {"cpu": 2.0, "nvidia.com/gpu": 1.0}, 300.0, 168 * 3600.0)
        grown.append(consumed["cpu"] > before)
    assert grown == [True, True, True]


@pytest.mark.parametrize(
    ("name", "sampling_s", "half_life_s", "want"),
    [
        ("entry penalty with a long half-life is positive", 300.0, 168 * 3600.0, True),
        ("a half-life of 0 charges nothing", 300.0, 0.0, False),
    ],
)
def test_calculate_entry_penalty(name: str, sampling_s: float, half_life_s: float, want: bool) -> None:
    penalty = entry_penalty(
        {"cpu": 2.0, "nvidia.com/gpu": 1.0}, AdmissionFairSharing(half_life_s, sampling_s)
    )
    assert [v > 0 for v in penalty.values()] == [want, want]


def test_alpha_halves_after_one_half_life() -> None:
    assert (alpha(3600.0, 3600.0), alpha(0.0, 3600.0), alpha(5.0, 0.0)) == (0.5, 0.0, 0.0)


# ------------------------------------------------------------------------------------ the ledger


def test_a_re_pushed_penalty_replaces_the_workloads_record_rather_than_stacking() -> None:
    ledger = UsageLedger(AdmissionFairSharing(3600.0, 3600.0))  # alpha 0.5
    ledger.push_penalty(("ns", "lq"), "ns/wl", {"cpu": 4.0}, NOW)
    ledger.push_penalty(("ns", "lq"), "ns/wl", {"cpu": 4.0}, NOW)
    ledger.push_penalty(("ns", "lq"), "ns/other", {"cpu": 2.0}, NOW)
    assert ledger.entries[("ns", "lq")].pending_penalty == {"cpu": 3.0}


def test_sub_penalty_drops_exactly_the_workloads_record_and_nothing_else() -> None:
    ledger = UsageLedger(AdmissionFairSharing(3600.0, 3600.0))
    ledger.push_penalty(("ns", "lq"), "ns/wl", {"cpu": 4.0}, NOW)
    ledger.push_penalty(("ns", "lq"), "ns/other", {"cpu": 2.0}, NOW)
    ledger.sub_penalty(("ns", "lq"), "ns/wl")
    ledger.sub_penalty(("ns", "lq"), "ns/never-pushed")
    ledger.sub_penalty(("ns", "gone"), "ns/wl")
    assert (ledger.entries[("ns", "lq")].pending_penalty, ("ns", "gone") in ledger.entries) == (
        {"cpu": 1.0},
        False,
    )


def test_settling_folds_the_penalty_once_and_decays_toward_the_admitted_usage() -> None:
    ledger = UsageLedger(AdmissionFairSharing(3600.0, 3600.0))
    ledger.seed(("ns", "lq"), {"cpu": 8.0}, NOW)
    ledger.push_penalty(("ns", "lq"), "ns/wl", {"cpu": 4.0}, NOW)
    ledger.settle(("ns", "lq"), "ns/wl", {"cpu": 4.0}, NOW + 3600.0)  # half-way to 4, plus the penalty 2
    ledger.settle(("ns", "lq"), "ns/wl", {"cpu": 4.0}, NOW + 3600.0)  # no record left: nothing folds
    entry = ledger.entries[("ns", "lq")]
    assert (entry.consumed, entry.penalties, entry.last_update) == ({"cpu": 8.0}, {}, NOW + 3600.0)


@pytest.mark.parametrize(
    ("name", "half_life_s", "want"),
    [
        ("a sample decays consumed usage toward the admitted usage", 60.0, {"cpu": 3.0}),
        ("a half-life of 0 resets consumed usage at every sample", 0.0, {}),
    ],
)
def test_sampling(name: str, half_life_s: float, want: dict[str, float]) -> None:
    ledger = UsageLedger(AdmissionFairSharing(half_life_s, 60.0))
    ledger.seed(("ns", "lq"), {"cpu": 4.0}, NOW)
    ledger.sample(("ns", "lq"), {"cpu": 2.0}, NOW + 60.0)
    assert ledger.entries[("ns", "lq")].consumed == want


def test_the_status_shows_consumed_resources_and_last_update_as_kueue_writes_them() -> None:
    usage = LocalQueueUsage(afs_config(lq("lq-a", consumed=1.5)))
    assert status_view(usage, ("default", "lq-a")) == {
        "weightedShare": 0,
        "admissionFairSharingStatus": {
            "consumedResources": {"cpu": "1500m"},
            "lastUpdate": "1970-01-12T13:46:40Z",
        },
    }
    assert status_view(usage, ("default", "never-used")) is None


# ------------------------------------------------------------------------------------ queue order


def pending_order(scheduler: Scheduler) -> list[str]:
    """cq1's pending workloads in the order its heads come out."""
    queue, order = scheduler.queues["cq1"], []
    while (head := queue.head()) is not None:
        order.append(head.name)
        queue.delete(head.key)
    return order


@pytest.mark.parametrize(
    ("name", "weights", "want"),
    [
        (
            "lower LocalQueue usage goes before higher priority and earlier creation",
            (1, 1),
            ["b1", "b2", "a1", "a2"],
        ),
        ("a LocalQueue's weight divides its usage", (4, 1), ["a1", "a2", "b1", "b2"]),
    ],
)
def test_queue_order(name: str, weights: tuple[int, int], want: list[str]) -> None:
    cfg = afs_config(lq("lq-a", weights[0], consumed=8), lq("lq-b", weights[1], consumed=3))
    scheduler = Scheduler(cfg)
    for w in (
        workload("a1").queue("lq-a").priority(100).created(1).request(cpu=1).build(),
        workload("a2").queue("lq-a").created(2).request(cpu=1).build(),
        workload("b1").queue("lq-b").created(3).request(cpu=1).build(),
        workload("b2").queue("lq-b").created(4).request(cpu=1).build(),
    ):
        scheduler.submit(w)
    assert pending_order(scheduler) == want


def test_a_reservation_moves_its_local_queue_behind_the_others_at_once() -> None:
    """The entry penalty of an admission reorders the queue before the next cycle (RebuildActiveHeap)."""
    scheduler = Scheduler(afs_config(lq("lq-a", consumed=1), lq("lq-b", consumed=1.05), cpu=100))
    for w in (wl("a1", "lq-a", 8), wl("a2", "lq-a", 8, created=1), wl("b1", "lq-b", 8, created=2)):
        scheduler.submit(w)
    result, entries = scheduler.plan_cycle(NOW)
    scheduler.apply(result, entries, NOW)
    assert [a.workload for a in result.admitted] == ["default/a1"]
    assert pending_order(scheduler) == ["b1", "a2"]


# ------------------------------------------------------------------------------------ the clock


class Hooks:
    """Lifecycle hooks that keep the timers the lifecycle asks for."""

    def __init__(self) -> None:
        self.wakes: list[WakeAt] = []

    def effect(self, effect: object) -> None:
        if isinstance(effect, WakeAt):
            self.wakes.append(effect)

    def hold_checks(self, key: str, checks: tuple[str, ...], at: float) -> set[str]:
        return set()

    def vet(self, result: object, at: float) -> object:
        return result


def test_the_lifecycle_samples_every_interval_while_a_local_queue_holds_usage_and_stops_when_idle() -> None:
    cfg = afs_config(
        lq("lq-a"), afs=AdmissionFairSharing(usage_half_life_s=60.0, usage_sampling_interval_s=30.0)
    )
    scheduler = Scheduler(cfg)
    hooks = Hooks()
    life = Lifecycle(scheduler, hooks)  # type: ignore[arg-type]
    life.submit(wl("a1", "lq-a", 4), NOW)
    life.settle(NOW)
    samples = [w for w in hooks.wakes if w.timer == Timer.USAGE_SAMPLE]
    assert [w.at for w in samples] == [NOW + 30.0]
    fair = scheduler.fair_usage
    assert fair is not None
    penalty = fair.ledger.entries[("default", "lq-a")].consumed["cpu"]
    life.handle(ev.TimerFired("", Timer.USAGE_SAMPLE, 0, NOW + 30.0))
    after_one = fair.ledger.entries[("default", "lq-a")].consumed["cpu"]
    assert penalty < after_one < 4.0  # decaying toward the 4 CPUs admitted
    life.handle(ev.WorkDone("default/a1", False, NOW + 40.0))
    life.settle(NOW + 40.0)
    life.handle(ev.TimerFired("", Timer.USAGE_SAMPLE, 0, NOW + 60.0))
    samples = [w.at for w in hooks.wakes if w.timer == Timer.USAGE_SAMPLE]
    assert samples == [NOW + 30.0, NOW + 60.0]  # nothing held or pending after 60s: no third sample


# ------------------------------------------------------------------------------------ preemption


@pytest.mark.parametrize(
    ("name", "afs", "want"),
    [
        # TestCandidatesOrdering (pkg/scheduler/preemption/preemption_test.go)
        ("workloads with higher LQ usage first", KUEUE_AFS, "default/mid"),
        ("workloads sorted by priority without admission fair sharing", None, "default/low"),
    ],
)
def test_candidates_ordering(name: str, afs: AdmissionFairSharing | None, want: str) -> None:
    """low (priority 1) runs in a LocalQueue of little usage, mid (priority 10) in a busier one; a
    priority-100 preemptor needs one of their slots."""
    cq = (
        cluster_queue("cq1")
        .flavor("default", cpu=8)
        .preemption(within=PreemptionPolicy.LOWER_PRIORITY)
        .build()
    )
    cq = replace(cq, admission_mode=AdmissionMode.USAGE_BASED)
    queues = (lq("low-usage", consumed=0.1), lq("mid-usage", consumed=0.5), lq("preemptor"))
    cfg = replace(config(cq, local_queues=queues), scheduler=SchedulerConfig(admission_fair_sharing=afs))
    scheduler = Scheduler(cfg)
    for w in (
        workload("low")
        .queue("low-usage")
        .priority(1)
        .request(cpu=4)
        .admitted("cq1", {"cpu": "default"})
        .build(),
        workload("mid")
        .queue("mid-usage")
        .priority(10)
        .request(cpu=4)
        .admitted("cq1", {"cpu": "default"})
        .build(),
        workload("high").queue("preemptor").priority(100).created(NOW).request(cpu=4).build(),
    ):
        scheduler.submit(w)
    result, _ = scheduler.plan_cycle(NOW)
    assert [p.workload for p in result.preempted] == [want]
