"""One HPA sync: ``decide(spec, state, observation, now) -> (decision, new_state)``.

Port of ``reconcileAutoscaler`` and ``computeReplicasForMetrics`` in
``pkg/controller/podautoscaler/horizontal.go`` (kubernetes/kubernetes, v1.33+). Each call is one
pass of the controller's sync loop (every 15 s by default):

1. The first time, record the current count as a recommendation (``recordInitialRecommendation``).
2. If the target was scaled to 0 while ``minReplicas > 0``, autoscaling is off
   (ScalingActive=False, ``ScalingDisabled``). If the current count is above ``maxReplicas`` or
   below ``minReplicas``, the count is set to that bound without reading metrics.
3. Otherwise each metric proposes a count (:mod:`gpuq.core.autoscaling.replicas`) and the largest
   wins. If every metric failed, or some failed and the others would scale down, nothing changes
   (ScalingActive=False with the first failure's reason); if some failed and the others scale
   up, the HPA scales and reports the error.
4. The proposal is normalized (:mod:`gpuq.core.autoscaling.behavior`): with ``behavior``,
   stabilization windows then policy rate limits then min/max; without, the legacy rules.
5. If the result differs from the current count the decision is a rescale; with ``behavior`` the
   change is stored as a scale event for later rate limits.

State the controller keeps in memory (recommendations, scale events) and the HPA status it writes
(conditions, last scale time) are passed in and returned as new values; nothing is mutated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from gpuq.core.autoscaling.behavior import (
    Normalized,
    ScaleEvent,
    TimestampedRecommendation,
    longest_policy_period_s,
    normalize_legacy,
    normalize_with_behaviors,
    store_scale_event,
)
from gpuq.core.autoscaling.replicas import (
    MetricComputeError,
    MetricFetchError,
    MetricReading,
    ObjectMetric,
    Pod,
    PodMetrics,
    Proposal,
    Tolerances,
    object_metric_replicas,
    pod_metric_replicas,
)
from gpuq.core.autoscaling.spec import HPAScalingRules, HPASpec, MetricSourceType, MetricSpec


class ConditionType(StrEnum):
    ABLE_TO_SCALE = "AbleToScale"
    SCALING_ACTIVE = "ScalingActive"
    SCALING_LIMITED = "ScalingLimited"


@dataclass(frozen=True)
class HPACondition:
    """``HorizontalPodAutoscalerCondition``; ``since_s`` is ``lastTransitionTime``."""

    type: ConditionType
    status: bool
    reason: str
    message: str
    since_s: float


def set_condition(
    conditions: tuple[HPACondition, ...],
    type_: ConditionType,
    status: bool,
    reason: str,
    message: str,
    now: float,
) -> tuple[HPACondition, ...]:
    """``setConditionInList``: replace (or append) the condition; the transition time moves only
    when the status changes."""
    for i, cond in enumerate(conditions):
        if cond.type is type_:
            since = cond.since_s if cond.status == status else now
            new = HPACondition(type_, status, reason, message, since)
            return (*conditions[:i], new, *conditions[i + 1 :])
    return (*conditions, HPACondition(type_, status, reason, message, now))


@dataclass(frozen=True)
class HPAObservation:
    """What one sync reads: the target's scale, its pods and one reading per metric name.

    ``status_replicas`` is ``scale.status.replicas`` (pods that exist), used by AverageValue
    targets on Object/External metrics; it defaults to ``spec_replicas``. A metric absent from
    ``metrics`` is treated as a failed fetch.
    """

    spec_replicas: int
    metrics: Mapping[str, MetricReading]
    pods: tuple[Pod, ...] = ()
    status_replicas: int | None = None


@dataclass(frozen=True)
class HPAState:
    """The controller's memory of one HPA plus the status fields it writes."""

    recommendations: tuple[TimestampedRecommendation, ...] = ()
    scale_up_events: tuple[ScaleEvent, ...] = ()
    scale_down_events: tuple[ScaleEvent, ...] = ()
    conditions: tuple[HPACondition, ...] = ()
    last_scale_time_s: float | None = None

    def condition(self, type_: ConditionType) -> HPACondition | None:
        return next((c for c in self.conditions if c.type is type_), None)


@dataclass(frozen=True)
class MetricStatus:
    """One metric's current value as reported in ``status.currentMetrics`` (None: not computed)."""

    name: str
    current_value_milli: int | None = None
    current_utilization_percent: int | None = None


@dataclass(frozen=True)
class HPADecision:
    """The outcome of a sync.

    ``desired_replicas`` is what the target should be set to (equal to ``current_replicas`` when
    ``rescale`` is false); ``metric_replicas`` is the raw proposal before normalization (None when
    metrics were not consulted); ``reason`` is the rescale reason the controller's event carries;
    ``error`` the metric errors, if any.
    """

    current_replicas: int
    desired_replicas: int
    rescale: bool
    reason: str
    metric_replicas: int | None
    conditions: tuple[HPACondition, ...]
    metric_statuses: tuple[MetricStatus, ...] = ()
    error: str | None = None

    def condition(self, type_: ConditionType) -> HPACondition | None:
        return next((c for c in self.conditions if c.type is type_), None)


def tolerances_for(spec: HPASpec) -> Tolerances:
    """``tolerancesForHpa``: per-direction ``behavior`` tolerances over the cluster default."""
    default = spec.config.tolerance
    behavior = spec.behavior
    if behavior is None:
        return Tolerances(default, default)
    down = behavior.scale_down.tolerance if behavior.scale_down else None
    up = behavior.scale_up.tolerance if behavior.scale_up else None
    return Tolerances(default if down is None else down, default if up is None else up)


@dataclass(frozen=True)
class _MetricsResult:
    replicas: int  # -1: cannot scale
    label: str
    statuses: tuple[MetricStatus, ...]
    error: str | None
    failed_reason: str | None
    failed_message: str | None


def _propose(
    spec: HPASpec, metric: MetricSpec, observation: HPAObservation, tolerances: Tolerances, now: float
) -> Proposal:
    reading = observation.metrics.get(metric.name)
    fetch_reason = {
        MetricSourceType.RESOURCE: "FailedGetResourceMetric",
        MetricSourceType.PODS: "FailedGetPodsMetric",
        MetricSourceType.OBJECT: "FailedGetObjectMetric",
        MetricSourceType.EXTERNAL: "FailedGetExternalMetric",
    }[metric.source]
    if reading is None or isinstance(reading, MetricFetchError):
        detail = reading.message if reading is not None else "no reading"
        raise MetricComputeError(fetch_reason, f"unable to get metric {metric.name}: {detail}")
    current = observation.spec_replicas
    if metric.source in (MetricSourceType.RESOURCE, MetricSourceType.PODS):
        if not isinstance(reading, PodMetrics):
            raise MetricComputeError(fetch_reason, f"metric {metric.name} needs per-pod samples")
        return pod_metric_replicas(current, metric, reading, observation.pods, tolerances, now, spec.config)
    if not isinstance(reading, ObjectMetric):
        raise MetricComputeError(fetch_reason, f"metric {metric.name} needs an object value")
    status = current if observation.status_replicas is None else observation.status_replicas
    return object_metric_replicas(current, status, metric, reading, observation.pods, tolerances)


def compute_metric_replicas(spec: HPASpec, observation: HPAObservation, now: float) -> _MetricsResult:
    """``computeReplicasForMetrics`` (step 3): the largest proposal, or -1 when it must not scale."""
    tolerances = tolerances_for(spec)
    replicas, label = 0, ""
    statuses: list[MetricStatus] = []
    invalid = 0
    first_reason = first_message = None
    for metric in spec.metrics:
        try:
            proposal = _propose(spec, metric, observation, tolerances, now)
        except MetricComputeError as err:
            invalid += 1
            if first_reason is None:
                first_reason = err.reason
                first_message = f"the HPA was unable to compute the replica count: {err.message}"
            statuses.append(MetricStatus(metric.name))
            continue
        statuses.append(
            MetricStatus(metric.name, proposal.current_value_milli, proposal.current_utilization_percent)
        )
        if replicas == 0 or proposal.replicas > replicas:
            replicas, label = proposal.replicas, proposal.metric_label
    error = None
    if invalid:
        error = (
            f"invalid metrics ({invalid} invalid out of {len(spec.metrics)}), first error is: {first_message}"
        )
    if invalid >= len(spec.metrics) or (invalid > 0 and replicas < observation.spec_replicas):
        return _MetricsResult(-1, "", tuple(statuses), error, first_reason, first_message)
    return _MetricsResult(replicas, label, tuple(statuses), error, None, None)


def _normalize(
    spec: HPASpec,
    state: HPAState,
    recs: tuple[TimestampedRecommendation, ...],
    desired: int,
    current: int,
    now: float,
) -> Normalized:
    if spec.behavior is None:
        window = spec.config.downscale_stabilization_s
        return normalize_legacy(recs, desired, current, spec.min_replicas, spec.max_replicas, window, now)
    up, down = _effective_rules(spec)
    return normalize_with_behaviors(
        recs, desired, current, spec.min_replicas, spec.max_replicas, up, down,
        state.scale_up_events, state.scale_down_events, now,
    )  # fmt: skip


def _effective_rules(spec: HPASpec) -> tuple[HPAScalingRules, HPAScalingRules]:
    """Defaulted rules; ``maybeInitScaleDownStabilizationWindow`` fills the scale-down window."""
    assert spec.behavior is not None
    up, down = spec.behavior.effective_scale_up, spec.behavior.effective_scale_down
    if down.stabilization_window_s is None:
        down = HPAScalingRules(
            spec.config.downscale_stabilization_s, down.select_policy, down.policies, down.tolerance
        )
    return up, down


def _with_scale_event(spec: HPASpec, state: HPAState, current: int, desired: int, now: float) -> HPAState:
    """``storeScaleEvent``: only HPAs with ``behavior`` keep scale events."""
    if spec.behavior is None:
        return state
    up, down = _effective_rules(spec)
    if desired > current:
        events = store_scale_event(state.scale_up_events, desired - current, longest_policy_period_s(up), now)
        return HPAState(
            state.recommendations, events, state.scale_down_events, state.conditions, state.last_scale_time_s
        )
    events = store_scale_event(state.scale_down_events, current - desired, longest_policy_period_s(down), now)
    return HPAState(
        state.recommendations, state.scale_up_events, events, state.conditions, state.last_scale_time_s
    )


def decide(
    spec: HPASpec, state: HPAState, observation: HPAObservation, now: float
) -> tuple[HPADecision, HPAState]:
    """One sync of one HPA (steps 1-5 of the module docstring)."""
    current = observation.spec_replicas
    recs = state.recommendations or (TimestampedRecommendation(current, now),)
    conds = state.conditions
    conds = set_condition(
        conds, ConditionType.ABLE_TO_SCALE, True, "SucceededGetScale",
        "the HPA controller was able to get the target's current scale", now,
    )  # fmt: skip
    metric_replicas: int | None = None
    statuses: tuple[MetricStatus, ...] = ()
    error: str | None = None
    reason = ""
    if current == 0 and spec.min_replicas != 0:
        conds = set_condition(
            conds, ConditionType.SCALING_ACTIVE, False, "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero", now,
        )  # fmt: skip
        return _no_scale(current, None, conds, (), None, reason, state, recs, now)
    if current > spec.max_replicas:
        desired, reason = spec.max_replicas, "Current number of replicas above Spec.MaxReplicas"
    elif current < spec.min_replicas:
        desired, reason = spec.min_replicas, "Current number of replicas below Spec.MinReplicas"
    else:
        result = compute_metric_replicas(spec, observation, now)
        statuses, error = result.statuses, result.error
        if result.replicas == -1:
            assert result.failed_reason is not None and result.failed_message is not None
            conds = set_condition(
                conds, ConditionType.SCALING_ACTIVE, False, result.failed_reason, result.failed_message, now
            )
            return _no_scale(current, None, conds, statuses, error, reason, state, recs, now)
        conds = set_condition(
            conds, ConditionType.SCALING_ACTIVE, True, "ValidMetricFound",
            f"the HPA was able to successfully calculate a replica count from {result.label}", now,
        )  # fmt: skip
        metric_replicas = result.replicas
        desired = max(0, result.replicas)
        if desired > current:
            reason = f"{result.label} above target"
        elif desired < current:
            reason = "All metrics below target"
        norm = _normalize(spec, state, recs, desired, current, now)
        recs = norm.recommendations
        conds = set_condition(
            conds, ConditionType.ABLE_TO_SCALE, True, norm.able_reason, norm.able_message, now
        )
        limited = norm.replicas != norm.stabilized
        conds = set_condition(
            conds, ConditionType.SCALING_LIMITED, limited, norm.limited_reason, norm.limited_message, now
        )
        desired = norm.replicas
    if desired == current:
        return _no_scale(current, metric_replicas, conds, statuses, error, reason, state, recs, now)
    conds = set_condition(
        conds, ConditionType.ABLE_TO_SCALE, True, "SucceededRescale",
        f"the HPA controller was able to update the target scale to {desired}", now,
    )  # fmt: skip
    new_state = _with_scale_event(spec, state, current, desired, now)
    new_state = HPAState(recs, new_state.scale_up_events, new_state.scale_down_events, conds, now)
    decision = HPADecision(current, desired, True, reason, metric_replicas, conds, statuses, error)
    return decision, new_state


def _no_scale(
    current: int,
    metric_replicas: int | None,
    conds: tuple[HPACondition, ...],
    statuses: tuple[MetricStatus, ...],
    error: str | None,
    reason: str,
    state: HPAState,
    recs: tuple[TimestampedRecommendation, ...],
    now: float,
) -> tuple[HPADecision, HPAState]:
    new_state = HPAState(recs, state.scale_up_events, state.scale_down_events, conds, state.last_scale_time_s)
    return HPADecision(current, current, False, reason, metric_replicas, conds, statuses, error), new_state
