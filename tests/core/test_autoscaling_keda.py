"""KEDA ScaledObjects: activation, 0 <-> 1, idle and min replicas, cooldown, fallback, the generated HPA.

Expected behaviour comes from keda.sh "Scaling Deployments" (activating and scaling thresholds),
the ScaledObject spec reference, and kedacore/keda scale_scaledobjects.go / fallback.go.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuq.core.autoscaling.hpa import ConditionType
from gpuq.core.autoscaling.keda import (
    Fallback,
    FallbackBehavior,
    KedaAction,
    KedaObservation,
    ScaledObjectSpec,
    ScaledObjectState,
    Trigger,
    decide,
    hpa_spec,
    hpa_step,
    next_poll_s,
    poll,
    trigger_from_metadata,
)
from gpuq.core.autoscaling.replicas import MetricFetchError
from gpuq.core.autoscaling.spec import (
    HPABehavior,
    HPASpec,
    MetricSourceType,
    MetricSpec,
    MetricTargetType,
    average_value,
)

QUEUE = Trigger("queue", "rabbitmq", target_milli=10_000)  # 10 messages per replica


def so(**kwargs: object) -> ScaledObjectSpec:
    return replace(ScaledObjectSpec(triggers=(QUEUE,)), **kwargs)  # type: ignore[arg-type]


def obs(replicas: int, queue: int | MetricFetchError) -> KedaObservation:
    return KedaObservation(replicas, {"queue": queue})


# --- activation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "spec", "replicas", "queue_milli", "expected"),
    [
        ("value 0 with activation 0 is inactive: stays at 0", so(), 0, 0, (KedaAction.NO_CHANGE, None)),
        (
            "value 1 with activation 0 activates (strictly greater): 0 -> 1",
            so(),
            0,
            1000,
            (KedaAction.SCALE_FROM_ZERO_OR_IDLE, 1),
        ),
        (
            "activation from 0 goes to minReplicaCount when it is above 1",
            so(min_replica_count=3),
            0,
            1000,
            (KedaAction.SCALE_FROM_ZERO_OR_IDLE, 3),
        ),
        (
            "a value equal to the activation threshold is not active",
            so(triggers=(replace(QUEUE, activation_target_milli=5000),)),
            0,
            5000,
            (KedaAction.NO_CHANGE, None),
        ),
        (
            "docs: threshold 10, activationThreshold 50, 40 messages: inactive, scaled to zero",
            so(triggers=(replace(QUEUE, activation_target_milli=50_000),)),
            4,
            40_000,
            (KedaAction.SCALE_TO_ZERO_OR_IDLE, 0),
        ),
        (
            "docs: with minReplicaCount >= 1 the activation value is ignored (never scales below min)",
            so(min_replica_count=1, triggers=(replace(QUEUE, activation_target_milli=50_000),)),
            4,
            40_000,
            (KedaAction.NO_CHANGE, None),
        ),
        (
            "active with replicas: only lastActiveTime moves",
            so(),
            3,
            30_000,
            (KedaAction.KEEP_ACTIVE, None),
        ),
        (
            "idle mode: inactive after cooldown goes to idleReplicaCount",
            so(min_replica_count=2, idle_replica_count=0),
            5,
            0,
            (KedaAction.SCALE_TO_ZERO_OR_IDLE, 0),
        ),
        (
            "idle mode: active below minReplicaCount goes to minReplicaCount",
            so(min_replica_count=2, idle_replica_count=0),
            0,
            1000,
            (KedaAction.SCALE_FROM_ZERO_OR_IDLE, 2),
        ),
        (
            "inactive below minReplicaCount without idle mode is raised to minReplicaCount",
            so(min_replica_count=2),
            1,
            0,
            (KedaAction.SET_MIN_REPLICAS, 2),
        ),
    ],
)
def test_activation(
    name: str,
    spec: ScaledObjectSpec,
    replicas: int,
    queue_milli: int,
    expected: tuple[KedaAction, int | None],
) -> None:
    """Activating and Scaling thresholds; RequestScale's cases. Never active before, with the default
    initialCooldownPeriod 0, so an inactive object may scale in on its first poll after creation."""
    action, target, _ = poll(spec, ScaledObjectState(created_at_s=0.0), obs(replicas, queue_milli), 100.0)
    assert (action, target) == expected, name


def test_cooldown_scales_to_zero_only_after_cooldown_period_since_last_active() -> None:
    """ScaledObject spec: cooldownPeriod (default 300 s) is the wait after the last trigger report of
    activity before scaling to 0; polls happen every pollingInterval (30 s)."""
    spec, state = so(), ScaledObjectState()
    actions = []
    for t in range(0, 481, 30):
        action, target, state = poll(spec, state, obs(3, 20_000 if t <= 90 else 0), float(t))
        actions.append((t, action, target))
    assert state.last_active_time_s == 90.0
    assert [a for a in actions if a[1] is not KedaAction.KEEP_ACTIVE][:2] == [
        (120, KedaAction.COOLING_DOWN, None),
        (150, KedaAction.COOLING_DOWN, None),
    ]
    # 90 + 300 = 390 is not *before* 390; the first poll after it scales in
    assert (390, KedaAction.COOLING_DOWN, None) in actions
    assert (420, KedaAction.SCALE_TO_ZERO_OR_IDLE, 0) in actions


def test_cooling_down_reports_the_scaler_cooldown_condition() -> None:
    state = ScaledObjectState(created_at_s=0.0, last_active_time_s=50.0)
    _, _, state = poll(so(), state, obs(2, 0), 100.0)
    active = state.condition("Active")
    assert active is not None and (active.status, active.reason) == (False, "ScalerCooldown")


def test_initial_cooldown_period_holds_a_never_active_object() -> None:
    spec = so(initial_cooldown_period_s=120)
    assert poll(spec, ScaledObjectState(created_at_s=0.0), obs(2, 0), 100.0)[0] is KedaAction.COOLING_DOWN
    assert poll(spec, ScaledObjectState(created_at_s=0.0), obs(2, 0), 121.0)[:2] == (
        KedaAction.SCALE_TO_ZERO_OR_IDLE,
        0,
    )


def test_polls_happen_every_polling_interval() -> None:
    spec = so(polling_interval_s=30)
    assert next_poll_s(spec, ScaledObjectState(), 7.0) == 7.0
    _, _, state = poll(spec, ScaledObjectState(), obs(0, 0), 7.0)
    assert next_poll_s(spec, state, 8.0) == 37.0


# --- errors and fallback -----------------------------------------------------------------------------


def test_trigger_error_without_fallback_marks_the_object_not_ready_and_keeps_replicas() -> None:
    action, target, state = poll(so(), ScaledObjectState(), obs(3, MetricFetchError("timeout")), 0.0)
    ready = state.condition("Ready")
    assert (action, target) == (KedaAction.NO_CHANGE, None)
    assert ready is not None and (ready.status, ready.reason) == (False, "TriggerError")


def test_trigger_error_with_fallback_leaves_the_count_to_the_hpa_even_with_min_zero() -> None:
    spec = so(fallback=Fallback(failure_threshold=3, replicas=6))
    action, target, _ = poll(spec, ScaledObjectState(), obs(3, MetricFetchError("timeout")), 0.0)
    assert (action, target) == (KedaAction.AWAIT_FALLBACK, None)


@pytest.mark.parametrize(
    ("name", "behavior", "expected"),
    [
        ("static: fallback.replicas", FallbackBehavior.STATIC, 6),
        ("currentReplicas: keep the current count", FallbackBehavior.CURRENT_REPLICAS, 2),
        ("currentReplicasIfHigher: the larger of the two", FallbackBehavior.CURRENT_REPLICAS_IF_HIGHER, 6),
        ("currentReplicasIfLower: the smaller of the two", FallbackBehavior.CURRENT_REPLICAS_IF_LOWER, 2),
    ],
)
def test_fallback_replicas_after_failure_threshold_consecutive_errors(
    name: str, behavior: FallbackBehavior, expected: int
) -> None:
    """ScaledObject spec, fallback: "if the scaler fails more than failureThreshold times, use
    fallback.replicas"; KEDA serves the HPA ``replicas × target`` so it lands on that count."""
    spec = so(fallback=Fallback(3, 6, behavior), behavior=HPABehavior())
    state = ScaledObjectState()
    results = []
    for i in range(5):
        decision, state = hpa_step(spec, state, obs(2, MetricFetchError("timeout")), 15.0 * i)
        results.append(decision.desired_replicas)
    assert results == [2, 2, 2, expected, expected], name
    assert state.health["queue"].failures == 5


def test_a_good_reading_resets_the_failure_count_and_the_fallback_condition_lags_one_call() -> None:
    spec = so(fallback=Fallback(1, 6), behavior=HPABehavior())
    state = ScaledObjectState()
    for i in range(2):
        _, state = hpa_step(spec, state, obs(2, MetricFetchError("timeout")), 15.0 * i)
    fallback = state.condition("Fallback")
    assert fallback is not None and fallback.reason == "NoFallbackFound"  # computed from the old status
    _, state = hpa_step(spec, state, obs(2, MetricFetchError("timeout")), 30.0)
    fallback = state.condition("Fallback")
    assert fallback is not None and fallback.reason == "FallbackExists"
    _, state = hpa_step(spec, state, obs(6, 60_000), 45.0)
    assert state.health["queue"].failures == 0


# --- the HPA KEDA drives -----------------------------------------------------------------------------


def test_the_generated_hpa() -> None:
    behavior = HPABehavior()
    spec = so(min_replica_count=0, max_replica_count=20, behavior=behavior)
    assert hpa_spec(spec) == HPASpec(
        max_replicas=20,
        metrics=(MetricSpec(MetricSourceType.EXTERNAL, "queue", average_value(10_000)),),
        min_replicas=1,
        behavior=behavior,
    )
    value_trigger = replace(QUEUE, metric_type=MetricTargetType.VALUE)
    assert hpa_spec(so(triggers=(value_trigger,), min_replica_count=3)).metrics[0].target.type is (
        MetricTargetType.VALUE
    )


def test_the_hpa_does_nothing_at_zero_replicas() -> None:
    decision, _ = hpa_step(so(), ScaledObjectState(), obs(0, 90_000), 0.0)
    active = decision.condition(ConditionType.SCALING_ACTIVE)
    assert active is not None and active.reason == "ScalingDisabled"


def test_queue_from_zero_to_n_and_back_to_zero() -> None:
    """Sync every 15 s (HPA), poll every 30 s (KEDA): KEDA activates 0 -> 1, the HPA takes it to
    ceil(50 / 10) = 5 within the default rate, a drained queue brings the HPA to minReplicas (1)
    after its 300 s window and KEDA to 0 after the 300 s cooldown."""
    spec = so(behavior=HPABehavior())
    state, replicas = ScaledObjectState(), 0
    changes = [(0.0, 0)]
    for step in range(0, 40):
        t = 15.0 * step
        queue = 50_000 if 15 <= t < 120 else 0
        decision, state = decide(spec, state, obs(replicas, queue), t)
        if decision.replicas != replicas:
            replicas = decision.replicas
            changes.append((t, replicas))
    assert changes == [(0.0, 0), (30.0, 1), (45.0, 5), (405.0, 1), (420.0, 0)]


# --- trigger metadata --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_", "metadata", "expected"),
    [
        (
            "prometheus",
            {"threshold": "10", "activationThreshold": "50", "query": "sum(x)"},
            Trigger("t", "prometheus", 10_000, 50_000),
        ),
        ("rabbitmq", {"value": "2.5"}, Trigger("t", "rabbitmq", 2500, 0)),
        (
            "metrics-api",
            {"targetValue": "100", "activationTargetValue": "1"},
            Trigger("t", "metrics-api", 100_000, 1000),
        ),
    ],
)
def test_trigger_from_metadata(type_: str, metadata: dict[str, str], expected: Trigger) -> None:
    assert trigger_from_metadata("t", type_, metadata) == expected


def test_trigger_from_metadata_names_the_missing_field() -> None:
    with pytest.raises(ValueError, match=r"metadata\.threshold is required"):
        trigger_from_metadata("t", "prometheus", {"query": "sum(x)"})
