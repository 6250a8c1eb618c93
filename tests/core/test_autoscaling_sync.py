"""The replica count of an autoscaled service, decided once (gpuq.core.autoscaling.sync): one sync of an
HPA or a ScaledObject, activation on held requests, and the ReplicaSet's scale plan - the functions
the simulator's fleet and the live controller both call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import pytest

from gpuq.core.autoscaling.behavior import TimestampedRecommendation
from gpuq.core.autoscaling.hpa import HPAState
from gpuq.core.autoscaling.keda import ScaledObjectSpec, ScaledObjectState, Trigger
from gpuq.core.autoscaling.replicas import MetricFetchError, ObjectMetric, Pod, PodMetrics, PodPhase
from gpuq.core.autoscaling.spec import HPABehavior, HPASpec, MetricSourceType, MetricSpec, average_value
from gpuq.core.autoscaling.sync import (
    Autoscaler,
    AutoscalerState,
    Reading,
    ReplicaPhase,
    ReplicaView,
    ScalePlan,
    activate,
    scale_down_order,
    scale_plan,
    sync,
    sync_period_s,
)

EXTERNAL_Q = MetricSpec(MetricSourceType.EXTERNAL, "q", average_value(1000))
RUNNING = MetricSpec(MetricSourceType.PODS, "vllm:num_requests_running", average_value(2000))  # 2 per pod
HPA = HPASpec(max_replicas=10, metrics=(RUNNING,))
QUEUE = Trigger("queue", "prometheus", target_milli=10_000)  # 10 waiting requests per replica
KEDA = ScaledObjectSpec(triggers=(QUEUE,), cooldown_period_s=300)
SAW_4_AT_0 = HPAState(recommendations=(TimestampedRecommendation(4, 0.0),))
ACTIVE_AT_0 = ScaledObjectState(created_at_s=0.0, last_active_time_s=0.0, last_poll_s=0.0)


def ready(*names: str) -> tuple[Pod, ...]:
    return tuple(Pod(name) for name in names)


def running(**per_pod: int) -> dict[str, Reading]:
    return {RUNNING.name: PodMetrics(per_pod)}


@dataclass(frozen=True)
class Sync:
    name: str
    autoscaler: Autoscaler
    state: AutoscalerState | None
    desired: int
    pods: tuple[Pod, ...]
    readings: Mapping[str, Reading]
    now: float
    replicas: int
    reason: str


SYNCS = [
    Sync(
        "HPA scales up on a metric above target: 2 pods at 3 requests, target 2, want 3",
        HPA, None, 2, ready("a", "b"), running(a=3000, b=3000), 100.0,
        3, "pods metric vllm:num_requests_running above target",
    ),
    Sync(
        "HPA keeps the count while the metric is inside the tolerance",
        HPA, None, 2, ready("a", "b"), running(a=2100, b=2000), 100.0,
        2, "NoChange",
    ),
    Sync(
        "HPA holds a scale-down inside the downscale stabilization window (300 s)",
        HPA, SAW_4_AT_0, 4, ready("a", "b", "c", "d"), running(a=0, b=0, c=0, d=0), 299.0,
        4, "NoChange",
    ),
    Sync(
        "HPA scales down to minReplicas once the window has passed",
        HPA, SAW_4_AT_0, 4, ready("a", "b", "c", "d"), running(a=0, b=0, c=0, d=0), 301.0,
        1, "All metrics below target",
    ),
    Sync(
        "HPA with behavior rate-limits a scale-up to 4 pods per 15 s",
        replace(HPA, max_replicas=50, behavior=HPABehavior()), None, 2, ready("a", "b"),
        running(a=20_000, b=20_000), 100.0,
        6, "pods metric vllm:num_requests_running above target",
    ),
    Sync(
        "HPA whose metric cannot be read keeps the count and says why",
        HPA, None, 2, ready("a", "b"), {RUNNING.name: MetricFetchError("router down")}, 100.0,
        2, "invalid metrics (1 invalid out of 1), first error is: the HPA was unable to compute the replica "
        "count: unable to get metric vllm:num_requests_running: router down",
    ),
    Sync(
        "HPA state of the other kind starts from nothing (the autoscaler was replaced)",
        HPA, ACTIVE_AT_0, 2, ready("a", "b"), running(a=3000, b=3000), 100.0,
        3, "pods metric vllm:num_requests_running above target",
    ),
    Sync(
        "KEDA activates from zero on an active trigger: one replica",
        KEDA, None, 0, (), {"queue": 25_000}, 0.0,
        1, "ScaleFromZeroOrIdle",
    ),
    Sync(
        "KEDA's generated HPA scales up on the trigger value: 35 waiting at 10 per replica, want 4",
        KEDA, ACTIVE_AT_0, 1, ready("a"), {"queue": 35_000}, 30.0,
        4, "external metric queue(<nil>) above target",
    ),
    Sync(
        "KEDA keeps its replica while it cools down after the last activity",
        KEDA, ACTIVE_AT_0, 1, ready("a"), {"queue": 0}, 200.0,
        1, "CoolingDown",
    ),
    Sync(
        "KEDA scales to zero after the cooldown",
        KEDA, ACTIVE_AT_0, 1, ready("a"), {"queue": 0}, 301.0,
        0, "ScaleToZeroOrIdle",
    ),
    Sync(
        "KEDA with minReplicaCount 1 never scales to zero",
        replace(KEDA, min_replica_count=1), ACTIVE_AT_0, 1, ready("a"), {"queue": 0}, 301.0,
        1, "NoChange",
    ),
    Sync(
        "KEDA state of the other kind starts from nothing: the first poll activates",
        KEDA, HPAState(), 0, (), {"queue": 1000}, 0.0,
        1, "ScaleFromZeroOrIdle",
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", SYNCS, ids=[c.name for c in SYNCS])
def test_one_sync(case: Sync) -> None:
    result = sync(
        case.autoscaler, case.state, case.desired, len(case.pods), case.pods, case.readings, case.now
    )
    assert (result.replicas, result.reason) == (case.replicas, case.reason)
    kind = ScaledObjectState if isinstance(case.autoscaler, ScaledObjectSpec) else HPAState
    assert isinstance(result.state, kind)


def test_a_sync_is_pure_the_same_inputs_give_the_same_result() -> None:
    first = sync(HPA, None, 2, 2, ready("a", "b"), running(a=3000, b=3000), 100.0)
    again = sync(HPA, None, 2, 2, ready("a", "b"), running(a=3000, b=3000), 100.0)
    assert first == again
    later = sync(HPA, first.state, 3, 3, ready("a", "b", "c"), running(a=2000, b=2000, c=2000), 115.0)
    assert (later.replicas, later.reason) == (3, "NoChange")


@pytest.mark.parametrize(
    ("name", "autoscaler", "readings"),
    [
        ("a KEDA trigger given an HPA reading is refused", KEDA, {"queue": ObjectMetric.of(1000)}),
        ("an HPA metric given a trigger value is refused", HPA, {RUNNING.name: 3000}),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_readings_of_the_wrong_kind_are_refused(
    name: str, autoscaler: Autoscaler, readings: Mapping[str, Reading]
) -> None:
    with pytest.raises(TypeError, match="got"):
        sync(autoscaler, None, 1, 1, ready("a"), readings, 0.0)


ROUTER = Trigger("gpuq-router", "external-push", 10**12)


@pytest.mark.parametrize(
    ("name", "autoscaler", "state", "readings", "expected"),
    [
        (
            "a ScaledObject at zero activates on held requests though its poll is not due",
            replace(KEDA, triggers=(QUEUE, ROUTER)),
            replace(ACTIVE_AT_0, last_poll_s=399.0),
            {"queue": 0, ROUTER.name: 3000},
            (1, "activated by 3 held request(s): ScaleFromZeroOrIdle"),
        ),
        (
            "an HPA that may scale to zero asks for one replica",
            replace(HPA, min_replicas=0, metrics=(EXTERNAL_Q,)),
            None,
            {},
            (1, "activated by 3 held request(s)"),
        ),
        ("an HPA with minReplicas 1 is not activated", HPA, None, {}, None),
        ("a fixed count of zero is not activated", None, None, {}, None),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_activation_on_held_requests(
    name: str,
    autoscaler: Autoscaler | None,
    state: AutoscalerState | None,
    readings: Mapping[str, Reading],
    expected: tuple[int, str] | None,
) -> None:
    result = activate(autoscaler, state, (), readings, 3, 400.0)
    assert (None if result is None else (result.replicas, result.reason)) == expected


def test_the_sync_period_is_the_hpa_controllers_flag() -> None:
    assert sync_period_s(HPA) == 15.0
    assert sync_period_s(replace(KEDA, hpa_config=replace(KEDA.hpa_config, sync_period_s=1))) == 1.0


P, A, S, R = ReplicaPhase.PENDING, ReplicaPhase.ADMITTED, ReplicaPhase.STARTING, ReplicaPhase.READY


def replicas(*rows: tuple[int, float, ReplicaPhase]) -> list[ReplicaView]:
    return [ReplicaView(f"r{ordinal}", ordinal, created, phase) for ordinal, created, phase in rows]


@dataclass(frozen=True)
class Plan:
    name: str
    replicas: list[ReplicaView]
    wanted: int
    next_ordinal: int
    expected: ScalePlan


PLANS = [
    Plan("the right count plans nothing", replicas((0, 0, R), (1, 0, R)), 2, 2, ScalePlan()),
    Plan("a scale-up adds the next ordinals", replicas((0, 0, R)), 3, 5, ScalePlan(add=(5, 6))),
    Plan("a scale-up from zero starts at the next ordinal", [], 1, 0, ScalePlan(add=(0,))),
    Plan(
        "a scale-down removes not-ready replicas first, the newest ready one last",
        replicas((0, 0, R), (1, 5, R), (2, 9, S)), 1, 3, ScalePlan(remove=("r2", "r1")),
    ),
    Plan(
        "a scale-down removes pending, then admitted, then starting, then ready",
        replicas((0, 0, R), (1, 1, S), (2, 2, A), (3, 3, P)), 0, 4,
        ScalePlan(remove=("r3", "r2", "r1", "r0")),
    ),
    Plan(
        "a pending replica goes before a newer admitted one",
        replicas((0, 0, R), (1, 1, P), (2, 9, A)), 2, 3, ScalePlan(remove=("r1",)),
    ),
    Plan(
        "within a phase the newest goes first",
        replicas((0, 0, R), (1, 30, R), (2, 10, R)), 1, 3, ScalePlan(remove=("r1", "r2")),
    ),
    Plan(
        "created at the same time: the highest ordinal goes first",
        replicas((0, 0, R), (1, 0, R), (2, 0, R)), 1, 3, ScalePlan(remove=("r2", "r1")),
    ),
    Plan(
        "a scale to zero removes every replica",
        replicas((0, 0, R), (1, 0, P)), 0, 2, ScalePlan(remove=("r1", "r0")),
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", PLANS, ids=[c.name for c in PLANS])
def test_the_scale_plan(case: Plan) -> None:
    assert scale_plan(case.replicas, case.wanted, case.next_ordinal) == case.expected


def test_the_scale_down_order_is_the_whole_ranking() -> None:
    rows = replicas((0, 0, R), (1, 1, S), (2, 2, A), (3, 3, P), (4, 3, P))
    assert [r.name for r in scale_down_order(reversed(rows))] == ["r4", "r3", "r2", "r1", "r0"]


def test_pending_pods_from_either_shell_count_as_unready_for_the_hpa() -> None:
    """Both shells give a replica that has not started as a Pending pod: on a scale-up the HPA counts
    it at 0, so 2 ready pods at 1.5x the target with 1 pending come to (3 + 3 + 0) / 3 = the target."""
    pods = (*ready("a", "b"), Pod("c", PodPhase.PENDING, None, start_time_s=None))
    assert sync(HPA, None, 3, 3, pods, running(a=3000, b=3000), 100.0).replicas == 3
    assert sync(HPA, None, 2, 2, pods[:2], running(a=3000, b=3000), 100.0).replicas == 3
