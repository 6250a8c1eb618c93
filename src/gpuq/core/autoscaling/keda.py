"""KEDA ScaledObjects: activation, scale to and from zero, cooldown, fallback, and the HPA they drive.

Port of kedacore/keda v2: ``pkg/scaling/executor/scale_scaledobjects.go`` (``RequestScale``,
``scaleToZeroOrIdle``, ``scaleFromZeroOrIdle``, ``getIdleOrMinimumReplicaCount``),
``pkg/scaling/scale_handler.go`` (``getScaledObjectState``: a ScaledObject is active when any
trigger is, an error on any trigger marks it in error), ``pkg/fallback/fallback.go``
(``GetMetricsWithFallback``, ``doFallback``) and ``controllers/keda/hpa.go`` (the generated HPA).
Docs: https://keda.sh/docs/latest/reference/scaledobject-spec/ and
https://keda.sh/docs/latest/concepts/scaling-deployments/#activating-and-scaling-thresholds.

KEDA works in two phases:

1. **Activation (the operator, every ``pollingInterval``).** A trigger is active when its value is
   strictly greater than its activation target (default 0). Active with 0 replicas (or, in idle
   mode, fewer than ``minReplicaCount``): set ``max(minReplicaCount, 1)``. Active otherwise: only
   ``lastActiveTime`` moves to now. Inactive with replicas above the idle count (or above 0 when
   ``minReplicaCount`` is 0): once ``lastActiveTime + cooldownPeriod`` has passed (or, never active,
   ``creation + initialCooldownPeriod``), set ``idleReplicaCount`` if given, else
   ``minReplicaCount``. Inactive with fewer than ``minReplicaCount`` and no idle mode: set
   ``minReplicaCount``. Inactive with a trigger error and a fallback: leave the count to the HPA.
2. **Scaling (the HPA, every 15 s).** KEDA creates an HPA with ``minReplicas =
   max(minReplicaCount, 1)``, ``maxReplicas = maxReplicaCount``, one External metric per trigger
   (``AverageValue`` = the trigger's target unless ``metricType: Value``) and ``behavior`` from
   ``advanced.horizontalPodAutoscalerConfig``. KEDA's metrics server answers the HPA with the
   trigger values; after more than ``failureThreshold`` consecutive failures of a trigger it
   answers ``fallback.replicas × target`` instead, so the HPA lands on the fallback count.

:func:`decide` runs phase 1 when a poll is due and then phase 2 (unless phase 1 just changed the
count), so a shell that calls it on every HPA sync gets both cadences; :func:`poll` and
:func:`hpa_step` expose the phases separately.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from gpuq.core.autoscaling import hpa as hpa_mod
from gpuq.core.autoscaling.replicas import MetricFetchError, MetricReading, ObjectMetric, Pod, go_div
from gpuq.core.autoscaling.spec import (
    ControllerConfig,
    HPABehavior,
    HPASpec,
    MetricSourceType,
    MetricSpec,
    MetricTargetType,
    average_value,
    value,
)


@dataclass(frozen=True)
class Trigger:
    """One ``spec.triggers`` entry, reduced to what scaling reads.

    ``target_milli`` is the scaler's scaling value (Prometheus ``threshold``, RabbitMQ ``value``,
    metrics-api ``targetValue``, ...), ``activation_target_milli`` its ``activation*`` twin
    (:data:`SCALER_PARAMETERS`). ``metric_type`` is the trigger's ``metricType``.
    """

    name: str
    type: str
    target_milli: int
    activation_target_milli: int = 0
    metric_type: MetricTargetType = MetricTargetType.AVERAGE_VALUE


SCALER_PARAMETERS: Mapping[str, tuple[str, str]] = {
    "prometheus": ("threshold", "activationThreshold"),
    "metrics-api": ("targetValue", "activationTargetValue"),
    "rabbitmq": ("value", "activationValue"),
    "aws-sqs-queue": ("queueLength", "activationQueueLength"),
    "azure-servicebus": ("messageCount", "activationMessageCount"),
    "kafka": ("lagThreshold", "activationLagThreshold"),
    "redis": ("listLength", "activationListLength"),
    "gcp-pubsub": ("value", "activationValue"),
}
"""Scaling and activation parameter names of common queue and query scalers (keda.sh/docs/scalers)."""


def trigger_from_metadata(
    name: str, type_: str, metadata: Mapping[str, str], metric_type: str = "AverageValue"
) -> Trigger:
    """Read a trigger's scaling and activation values from its ``metadata`` strings."""
    if type_ not in SCALER_PARAMETERS:
        raise ValueError(
            f"trigger {name!r}: scaler type {type_!r} is not modelled; known: {sorted(SCALER_PARAMETERS)}"
        )
    target_key, activation_key = SCALER_PARAMETERS[type_]
    if target_key not in metadata:
        raise ValueError(f"trigger {name!r}: metadata.{target_key} is required for a {type_} trigger")
    return Trigger(
        name,
        type_,
        target_milli=round(float(metadata[target_key]) * 1000),
        activation_target_milli=round(float(metadata.get(activation_key, "0")) * 1000),
        metric_type=MetricTargetType(metric_type),
    )


class FallbackBehavior(StrEnum):
    STATIC = "static"
    CURRENT_REPLICAS = "currentReplicas"
    CURRENT_REPLICAS_IF_HIGHER = "currentReplicasIfHigher"
    CURRENT_REPLICAS_IF_LOWER = "currentReplicasIfLower"


@dataclass(frozen=True)
class Fallback:
    """``spec.fallback``: after more than ``failure_threshold`` consecutive failures, ``replicas``."""

    failure_threshold: int
    replicas: int
    behavior: FallbackBehavior = FallbackBehavior.STATIC


@dataclass(frozen=True)
class ScaledObjectSpec:
    """``ScaledObject.spec`` with KEDA's defaults (pollingInterval 30 s, cooldownPeriod 300 s,
    initialCooldownPeriod 0, minReplicaCount 0, maxReplicaCount 100).

    ``behavior`` is ``advanced.horizontalPodAutoscalerConfig.behavior`` (None: not set).
    """

    triggers: tuple[Trigger, ...]
    polling_interval_s: int = 30
    cooldown_period_s: int = 300
    initial_cooldown_period_s: int = 0
    min_replica_count: int = 0
    max_replica_count: int = 100
    idle_replica_count: int | None = None
    fallback: Fallback | None = None
    behavior: HPABehavior | None = None
    hpa_config: ControllerConfig = field(default_factory=ControllerConfig)


@dataclass(frozen=True)
class KedaCondition:
    """A ScaledObject condition (``Ready``, ``Active``, ``Fallback``); status None is Unknown."""

    type: str
    status: bool | None
    reason: str
    message: str


@dataclass(frozen=True)
class TriggerHealth:
    """``status.health[metric]``: consecutive failures and ``Happy`` / ``Failing``."""

    failures: int = 0
    failing: bool = False


@dataclass(frozen=True)
class ScaledObjectState:
    """``ScaledObject.status`` fields scaling reads, plus the generated HPA's controller state.

    ``created_at_s`` is ``metadata.creationTimestamp`` (None: set on the first call).
    """

    created_at_s: float | None = None
    last_active_time_s: float | None = None
    last_poll_s: float | None = None
    health: Mapping[str, TriggerHealth] = field(default_factory=dict)
    conditions: tuple[KedaCondition, ...] = ()
    hpa: hpa_mod.HPAState = field(default_factory=hpa_mod.HPAState)

    def condition(self, type_: str) -> KedaCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)


class KedaAction(StrEnum):
    """What the operator did on a poll."""

    SCALE_FROM_ZERO_OR_IDLE = "ScaleFromZeroOrIdle"
    SCALE_TO_ZERO_OR_IDLE = "ScaleToZeroOrIdle"
    SET_MIN_REPLICAS = "SetMinReplicaCount"
    COOLING_DOWN = "CoolingDown"
    KEEP_ACTIVE = "KeepActive"
    AWAIT_FALLBACK = "AwaitFallback"
    NO_CHANGE = "NoChange"


@dataclass(frozen=True)
class KedaDecision:
    """One call's outcome. ``replicas`` is the count to set (equal to ``current_replicas`` when
    nothing changes); ``action`` is None when no poll was due; ``hpa`` is the HPA sync, if one ran."""

    current_replicas: int
    replicas: int
    action: KedaAction | None
    is_active: bool
    is_error: bool
    active_triggers: tuple[str, ...]
    next_poll_s: float
    hpa: hpa_mod.HPADecision | None = None


@dataclass(frozen=True)
class KedaObservation:
    """Trigger values (milli-units) or fetch errors by trigger name, and the target's scale."""

    current_replicas: int
    readings: Mapping[str, int | MetricFetchError]
    pods: tuple[Pod, ...] = ()
    status_replicas: int | None = None


def _set(conditions: tuple[KedaCondition, ...], new: KedaCondition) -> tuple[KedaCondition, ...]:
    return (*(c for c in conditions if c.type != new.type), new)


def trigger_activity(
    spec: ScaledObjectSpec, readings: Mapping[str, int | MetricFetchError]
) -> tuple[tuple[str, ...], bool]:
    """``getScaledObjectState``: (active trigger names in spec order, any error)."""
    active: list[str] = []
    is_error = False
    for trigger in spec.triggers:
        reading = readings.get(trigger.name, MetricFetchError("no reading"))
        if isinstance(reading, MetricFetchError):
            is_error = True
        elif reading > trigger.activation_target_milli:
            active.append(trigger.name)
    return tuple(active), is_error


def next_poll_s(spec: ScaledObjectSpec, state: ScaledObjectState, now: float) -> float:
    """When the operator polls next: now if it never polled, else one interval after the last."""
    return now if state.last_poll_s is None else state.last_poll_s + spec.polling_interval_s


def _cooldown_passed(spec: ScaledObjectSpec, state: ScaledObjectState, created: float, now: float) -> bool:
    if state.last_active_time_s is None:
        return created + spec.initial_cooldown_period_s < now
    return state.last_active_time_s + spec.cooldown_period_s < now


def poll(
    spec: ScaledObjectSpec, state: ScaledObjectState, observation: KedaObservation, now: float
) -> tuple[KedaAction, int | None, ScaledObjectState]:
    """``RequestScale`` (phase 1): (action, replicas to set or None, new state)."""
    created = now if state.created_at_s is None else state.created_at_s
    active, is_error = trigger_activity(spec, observation.readings)
    current, floor = observation.current_replicas, spec.min_replica_count
    idle = spec.idle_replica_count
    conds = _set(
        state.conditions,
        KedaCondition(
            "Ready", True, "ScaledObjectReady", "ScaledObject is defined correctly and is ready for scaling"
        ),
    )
    st = replace(state, created_at_s=created, last_poll_s=now)
    if active:
        conds = _set(
            conds,
            KedaCondition("Active", True, "ScalerActive", "Scaling is performed because triggers are active"),
        )
        if (idle is not None and current < floor) or current == 0:
            return (
                KedaAction.SCALE_FROM_ZERO_OR_IDLE,
                max(floor, 1),
                replace(st, conditions=conds, last_active_time_s=now),
            )
        if is_error:
            conds = _set(
                conds,
                KedaCondition(
                    "Ready",
                    None,
                    "PartialTriggerError",
                    "Some triggers defined in ScaledObject are not working correctly",
                ),
            )
            return KedaAction.NO_CHANGE, None, replace(st, conditions=conds)
        return KedaAction.KEEP_ACTIVE, None, replace(st, conditions=conds, last_active_time_s=now)
    conds = _set(
        conds,
        KedaCondition(
            "Active", False, "ScalerNotActive", "Scaling is not performed because triggers are not active"
        ),
    )
    if is_error and spec.fallback is not None and spec.fallback.replicas != 0:
        return KedaAction.AWAIT_FALLBACK, None, replace(st, conditions=conds)
    if is_error and spec.fallback is None:
        conds = _set(
            conds,
            KedaCondition(
                "Ready", False, "TriggerError", "Triggers defined in ScaledObject are not working correctly"
            ),
        )
        return KedaAction.NO_CHANGE, None, replace(st, conditions=conds)
    if (idle is not None and current > idle) or (current > 0 and floor == 0):
        if _cooldown_passed(spec, state, created, now):
            return (
                KedaAction.SCALE_TO_ZERO_OR_IDLE,
                idle if idle is not None else floor,
                replace(st, conditions=conds),
            )
        conds = _set(
            conds,
            KedaCondition(
                "Active", False, "ScalerCooldown", "Scaler cooling down because triggers are not active"
            ),
        )
        return KedaAction.COOLING_DOWN, None, replace(st, conditions=conds)
    if idle is None and current < floor:
        return KedaAction.SET_MIN_REPLICAS, floor, replace(st, conditions=conds)
    return KedaAction.NO_CHANGE, None, replace(st, conditions=conds)


def hpa_spec(spec: ScaledObjectSpec) -> HPASpec:
    """The HPA KEDA generates (``controllers/keda/hpa.go``): one External metric per trigger."""
    metrics = tuple(
        MetricSpec(
            MetricSourceType.EXTERNAL,
            t.name,
            value(t.target_milli)
            if t.metric_type is MetricTargetType.VALUE
            else average_value(t.target_milli),
        )
        for t in spec.triggers
    )
    return HPASpec(
        max_replicas=spec.max_replica_count,
        metrics=metrics,
        min_replicas=max(spec.min_replica_count, 1),
        behavior=spec.behavior,
        config=spec.hpa_config,
    )


def _fallback_replicas(fallback: Fallback, current: int) -> int:
    if fallback.behavior is FallbackBehavior.CURRENT_REPLICAS:
        return current
    if fallback.behavior is FallbackBehavior.CURRENT_REPLICAS_IF_HIGHER:
        return max(current, fallback.replicas)
    if fallback.behavior is FallbackBehavior.CURRENT_REPLICAS_IF_LOWER:
        return min(current, fallback.replicas)
    return fallback.replicas


def metrics_with_fallback(
    spec: ScaledObjectSpec, state: ScaledObjectState, observation: KedaObservation
) -> tuple[dict[str, MetricReading], ScaledObjectState]:
    """``GetMetricsWithFallback`` per trigger: what KEDA's metrics server answers the HPA.

    Health is tracked only where fallback applies (a ``fallback`` and an AverageValue trigger).
    The Fallback condition is computed from the health *before* this update, as KEDA does
    (``fallbackExistsInScaledObject`` reads the object's stored status).
    """
    fb = spec.fallback
    readings: dict[str, MetricReading] = {}
    health = dict(state.health)
    for t in spec.triggers:
        reading = observation.readings.get(t.name, MetricFetchError("no reading"))
        enabled = fb is not None and t.metric_type is MetricTargetType.AVERAGE_VALUE
        if not isinstance(reading, MetricFetchError):
            readings[t.name] = ObjectMetric.of(reading)
            if enabled:
                health[t.name] = TriggerHealth(0, False)
            continue
        readings[t.name] = reading
        if fb is None or not enabled:
            continue
        failures = health.get(t.name, TriggerHealth()).failures + 1
        health[t.name] = TriggerHealth(failures, True)
        valid = fb.failure_threshold >= 0 and fb.replicas >= 0
        if valid and failures > fb.failure_threshold:
            replicas = _fallback_replicas(fb, observation.current_replicas)
            # doFallback: int64(target.AsApproximateFloat64()) truncates the target to whole units
            readings[t.name] = ObjectMetric.of(go_div(t.target_milli, 1000) * 1000 * replicas)
    conds = state.conditions
    if fb is not None and any(t.metric_type is MetricTargetType.AVERAGE_VALUE for t in spec.triggers):
        falling_back = any(h.failing and h.failures > fb.failure_threshold for h in state.health.values())
        conds = _set(conds, _FALLBACK_EXISTS if falling_back else _NO_FALLBACK)
    return readings, replace(state, health=health, conditions=conds)


_FALLBACK_EXISTS = KedaCondition(
    "Fallback", True, "FallbackExists", "At least one trigger is falling back on this scaled object"
)
_NO_FALLBACK = KedaCondition(
    "Fallback", False, "NoFallbackFound", "No fallbacks are active on this scaled object"
)


def hpa_step(
    spec: ScaledObjectSpec, state: ScaledObjectState, observation: KedaObservation, now: float
) -> tuple[hpa_mod.HPADecision, ScaledObjectState]:
    """Phase 2: one sync of the generated HPA on the metrics KEDA serves it."""
    readings, st = metrics_with_fallback(spec, state, observation)
    hpa_observation = hpa_mod.HPAObservation(
        observation.current_replicas, readings, observation.pods, observation.status_replicas
    )
    decision, hpa_state = hpa_mod.decide(hpa_spec(spec), st.hpa, hpa_observation, now)
    return decision, replace(st, hpa=hpa_state)


def decide(
    spec: ScaledObjectSpec, state: ScaledObjectState, observation: KedaObservation, now: float
) -> tuple[KedaDecision, ScaledObjectState]:
    """Poll if due (phase 1), then sync the HPA (phase 2) unless the poll changed the count."""
    current = observation.current_replicas
    active, is_error = trigger_activity(spec, observation.readings)
    action: KedaAction | None = None
    target: int | None = None
    st = state
    if now >= next_poll_s(spec, state, now):
        action, target, st = poll(spec, state, observation, now)
    if target is not None and target != current:
        return KedaDecision(
            current, target, action, bool(active), is_error, active, next_poll_s(spec, st, now)
        ), st
    hpa_decision, st = hpa_step(spec, st, observation, now)
    return (
        KedaDecision(
            current,
            hpa_decision.desired_replicas,
            action,
            bool(active),
            is_error,
            active,
            next_poll_s(spec, st, now),
            hpa_decision,
        ),
        st,
    )
