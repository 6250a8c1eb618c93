"""Autoscalers as their projects write them, converted into :mod:`gpuq.core.autoscaling` specs.

- ``autoscaling/v2`` HorizontalPodAutoscaler → :class:`~gpuq.core.autoscaling.spec.HPASpec`, field by
  field (``metrics[].type`` Resource / Pods / Object / External, targets, ``behavior``).
- ``keda.sh/v1alpha1`` ScaledObject → :class:`~gpuq.core.autoscaling.keda.ScaledObjectSpec`
  (triggers through :func:`gpuq.core.autoscaling.keda.trigger_from_metadata`, fallback, advanced
  HPA behavior).
- KServe's ``minReplicas`` / ``maxReplicas`` / ``scaleMetric`` / ``scaleTarget`` and Ray Serve's
  ``autoscaling_config`` → an HPA spec (a floor of at least one replica) or a KEDA-shaped spec (a
  floor of zero), see :func:`request_autoscaler`.

Every function takes the raw mapping and the field path it sits at, and raises
:class:`ServingError` naming the field on bad input. Quantities become integer milli-units.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from gpuq.api.source_fields import SourceError
from gpuq.core.autoscaling.keda import (
    SCALER_PARAMETERS,
    Fallback,
    FallbackBehavior,
    ScaledObjectSpec,
    Trigger,
)
from gpuq.core.autoscaling.spec import (
    HPABehavior,
    HPAScalingRules,
    HPASpec,
    MetricSourceType,
    MetricSpec,
    MetricTarget,
    MetricTargetType,
    ScalingPolicy,
    ScalingPolicyType,
    SelectPolicy,
)
from gpuq.core.quantity import QuantityError, parse_quantity

Raw = Mapping[str, Any]


class ServingError(SourceError):
    """A serving object that cannot be read; ``field`` is a path in the object as written."""


def mapping(value: object, field: str, *, required: bool = True) -> dict[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        what = "missing" if value is None else f"a {type(value).__name__}"
        raise ServingError(field, f"expected a mapping, got {what}")
    return value


def integer(parent: Raw, key: str, field: str, default: int | None, *, minimum: int = 0) -> int | None:
    """An integer at ``parent[key]`` of at least ``minimum``; ``default`` when absent."""
    value = parent.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ServingError(field, f"expected an integer, got {value!r}")
    if value < minimum:
        raise ServingError(field, f"must be at least {minimum}, got {value}")
    return value


def milli(value: object, field: str) -> int:
    """A quantity (``"500m"``, ``8``, ``"1.5"``) as integer milli-units."""
    try:
        return int(parse_quantity(value) * Decimal(1000))
    except QuantityError as err:
        raise ServingError(field, str(err)) from None


def _enum(value: object, allowed: tuple[str, ...], field: str) -> str:
    if value not in allowed:
        raise ServingError(field, f"expected one of {', '.join(allowed)}, got {value!r}")
    return str(value)


# --- autoscaling/v2 HorizontalPodAutoscaler -----------------------------------------------------

_SOURCES = {s.value: s for s in MetricSourceType}
_SOURCE_KEYS = {
    MetricSourceType.RESOURCE: "resource",
    MetricSourceType.PODS: "pods",
    MetricSourceType.OBJECT: "object",
    MetricSourceType.EXTERNAL: "external",
}
_TARGET_FIELDS = {
    MetricTargetType.UTILIZATION: "averageUtilization",
    MetricTargetType.VALUE: "value",
    MetricTargetType.AVERAGE_VALUE: "averageValue",
}


def metric_target(raw: object, field: str, source: MetricSourceType) -> MetricTarget:
    """``MetricTarget``: exactly the field matching ``type`` is read; it must be there."""
    target = mapping(raw, field)
    kind = MetricTargetType(
        _enum(target.get("type"), tuple(t.value for t in MetricTargetType), f"{field}.type")
    )
    key = _TARGET_FIELDS[kind]
    if target.get(key) is None:
        raise ServingError(f"{field}.{key}", f"is required for a target of type {kind.value}")
    if kind is MetricTargetType.UTILIZATION:
        if source is not MetricSourceType.RESOURCE:
            raise ServingError(f"{field}.type", "Utilization targets are only valid for Resource metrics")
        percent = integer(target, key, f"{field}.{key}", None, minimum=1)
        return MetricTarget(kind, average_utilization_percent=percent)
    amount = milli(target[key], f"{field}.{key}")
    if amount <= 0:
        raise ServingError(f"{field}.{key}", f"must be positive, got {target[key]!r}")
    if kind is MetricTargetType.VALUE:
        if source in (MetricSourceType.RESOURCE, MetricSourceType.PODS):
            raise ServingError(f"{field}.type", f"Value targets are not valid for {source.value} metrics")
        return MetricTarget(kind, value_milli=amount)
    return MetricTarget(kind, average_value_milli=amount)


def metric_spec(raw: object, field: str) -> MetricSpec:
    """One ``spec.metrics`` entry; ContainerResource and unknown types are refused."""
    entry = mapping(raw, field)
    type_ = entry.get("type")
    if type_ not in _SOURCES:
        known = ", ".join(_SOURCES)
        raise ServingError(f"{field}.type", f"unknown metric type {type_!r}; gpuq models {known}")
    source = _SOURCES[str(type_)]
    key = _SOURCE_KEYS[source]
    body = mapping(entry.get(key), f"{field}.{key}")
    if source is MetricSourceType.RESOURCE:
        name = body.get("name")
        name_field = f"{field}.{key}.name"
    else:
        name = mapping(body.get("metric"), f"{field}.{key}.metric").get("name")
        name_field = f"{field}.{key}.metric.name"
    if not isinstance(name, str) or not name:
        raise ServingError(name_field, "is required")
    target = metric_target(body.get("target"), f"{field}.{key}.target", source)
    described = "Service"
    if source is MetricSourceType.OBJECT:
        described = str(
            mapping(body.get("describedObject"), f"{field}.{key}.describedObject").get("kind", "")
        )
    return MetricSpec(source, name, target, described)


def _rules(raw: object, field: str) -> HPAScalingRules | None:
    if raw is None:
        return None
    rules = mapping(raw, field)
    window = integer(rules, "stabilizationWindowSeconds", f"{field}.stabilizationWindowSeconds", None)
    if window is not None and window > 3600:
        raise ServingError(f"{field}.stabilizationWindowSeconds", f"must be at most 3600, got {window}")
    select = rules.get("selectPolicy")
    select_policy = (
        SelectPolicy(_enum(select, tuple(s.value for s in SelectPolicy), f"{field}.selectPolicy"))
        if select is not None
        else None
    )
    policies = None
    if rules.get("policies") is not None:
        items = rules["policies"]
        if not isinstance(items, list):
            raise ServingError(f"{field}.policies", "expected a list")
        policies = tuple(_policy(item, f"{field}.policies[{i}]") for i, item in enumerate(items))
    tolerance = rules.get("tolerance")
    if tolerance is not None:
        tolerance = float(parse_quantity(tolerance))
        if tolerance < 0:
            raise ServingError(f"{field}.tolerance", "must not be negative")
    return HPAScalingRules(window, select_policy, policies, tolerance)


def _policy(raw: object, field: str) -> ScalingPolicy:
    item = mapping(raw, field)
    kind = ScalingPolicyType(_enum(item.get("type"), ("Pods", "Percent"), f"{field}.type"))
    value = integer(item, "value", f"{field}.value", None, minimum=1)
    period = integer(item, "periodSeconds", f"{field}.periodSeconds", None, minimum=1)
    if value is None or period is None:
        missing = "value" if value is None else "periodSeconds"
        raise ServingError(f"{field}.{missing}", "is required")
    if period > 1800:
        raise ServingError(f"{field}.periodSeconds", f"must be at most 1800, got {period}")
    return ScalingPolicy(kind, value, period)


def behavior(raw: object, field: str) -> HPABehavior | None:
    """``spec.behavior``; None when not written (the controller's legacy normalization)."""
    if raw is None:
        return None
    body = mapping(raw, field)
    return HPABehavior(
        _rules(body.get("scaleUp"), f"{field}.scaleUp"), _rules(body.get("scaleDown"), f"{field}.scaleDown")
    )


def hpa_spec(spec: Raw) -> HPASpec:
    """``HorizontalPodAutoscaler.spec`` without the target reference."""
    low = integer(spec, "minReplicas", "spec.minReplicas", 1)
    high = integer(spec, "maxReplicas", "spec.maxReplicas", None, minimum=1)
    if high is None:
        raise ServingError("spec.maxReplicas", "is required")
    assert low is not None
    if low > high:
        raise ServingError("spec.minReplicas", f"minReplicas {low} is above maxReplicas {high}")
    raw_metrics = spec.get("metrics")
    if raw_metrics is None:  # the API server defaults to 80 % CPU
        raw_metrics = [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
            }
        ]
    if not isinstance(raw_metrics, list) or not raw_metrics:
        raise ServingError("spec.metrics", "expected a non-empty list")
    metrics = tuple(metric_spec(m, f"spec.metrics[{i}]") for i, m in enumerate(raw_metrics))
    names = [m.name for m in metrics]
    if len(set(names)) != len(names):
        raise ServingError("spec.metrics", f"metric names must be unique, got {names}")
    if low == 0 and any(m.source in (MetricSourceType.RESOURCE, MetricSourceType.PODS) for m in metrics):
        raise ServingError("spec.minReplicas", "0 (HPAScaleToZero) needs only Object or External metrics")
    return HPASpec(high, metrics, low, behavior(spec.get("behavior"), "spec.behavior"))


# --- keda.sh/v1alpha1 ScaledObject --------------------------------------------------------------


def trigger(raw: object, field: str, index: int) -> Trigger:
    """One ``spec.triggers`` entry; the name is the trigger's ``name`` or ``s<index>-<type>``."""
    entry = mapping(raw, field)
    type_ = entry.get("type")
    if not isinstance(type_, str) or type_ not in SCALER_PARAMETERS:
        known = ", ".join(sorted(SCALER_PARAMETERS))
        raise ServingError(f"{field}.type", f"scaler type {type_!r} is not modelled; known: {known}")
    metadata = mapping(entry.get("metadata"), f"{field}.metadata")
    target_key, activation_key = SCALER_PARAMETERS[type_]
    if metadata.get(target_key) is None:
        raise ServingError(f"{field}.metadata.{target_key}", f"is required for a {type_} trigger")
    metric_type = entry.get("metricType", "AverageValue")
    _enum(metric_type, ("AverageValue", "Value"), f"{field}.metricType")
    target = milli(str(metadata[target_key]), f"{field}.metadata.{target_key}")
    if target <= 0:
        raise ServingError(f"{field}.metadata.{target_key}", "must be positive")
    activation = milli(str(metadata.get(activation_key, "0")), f"{field}.metadata.{activation_key}")
    name = str(entry.get("name") or f"s{index}-{type_}")
    return Trigger(name, type_, target, activation, MetricTargetType(str(metric_type)))


def scaled_object_spec(spec: Raw) -> ScaledObjectSpec:
    """``ScaledObject.spec`` with KEDA's defaults (see :class:`ScaledObjectSpec`)."""
    low = integer(spec, "minReplicaCount", "spec.minReplicaCount", 0)
    high = integer(spec, "maxReplicaCount", "spec.maxReplicaCount", 100, minimum=1)
    idle = integer(spec, "idleReplicaCount", "spec.idleReplicaCount", None)
    assert low is not None and high is not None
    if low > high:
        raise ServingError("spec.minReplicaCount", f"minReplicaCount {low} is above maxReplicaCount {high}")
    if idle is not None and idle >= low:
        raise ServingError("spec.idleReplicaCount", f"must be below minReplicaCount ({low}), got {idle}")
    raw_triggers = spec.get("triggers")
    if not isinstance(raw_triggers, list) or not raw_triggers:
        raise ServingError("spec.triggers", "expected a non-empty list")
    triggers = tuple(trigger(t, f"spec.triggers[{i}]", i) for i, t in enumerate(raw_triggers))
    fallback = None
    if spec.get("fallback") is not None:
        fb = mapping(spec["fallback"], "spec.fallback")
        threshold = integer(fb, "failureThreshold", "spec.fallback.failureThreshold", None)
        replicas = integer(fb, "replicas", "spec.fallback.replicas", None)
        if threshold is None or replicas is None:
            raise ServingError("spec.fallback", "needs failureThreshold and replicas")
        kind = fb.get("behavior", "static")
        _enum(kind, tuple(b.value for b in FallbackBehavior), "spec.fallback.behavior")
        fallback = Fallback(threshold, replicas, FallbackBehavior(kind))
    advanced = mapping(spec.get("advanced"), "spec.advanced", required=False)
    hpa_config = mapping(
        advanced.get("horizontalPodAutoscalerConfig"),
        "spec.advanced.horizontalPodAutoscalerConfig",
        required=False,
    )
    field = "spec.advanced.horizontalPodAutoscalerConfig.behavior"
    return ScaledObjectSpec(
        triggers=triggers,
        polling_interval_s=integer(spec, "pollingInterval", "spec.pollingInterval", 30, minimum=1) or 30,
        cooldown_period_s=integer(spec, "cooldownPeriod", "spec.cooldownPeriod", 300) or 0,
        initial_cooldown_period_s=integer(spec, "initialCooldownPeriod", "spec.initialCooldownPeriod", 0)
        or 0,
        min_replica_count=low,
        max_replica_count=high,
        idle_replica_count=idle,
        fallback=fallback,
        behavior=behavior(hpa_config.get("behavior"), field),
    )


# --- request-based autoscalers: KServe and Ray Serve ---------------------------------------------


def request_autoscaler(
    metric: str,
    target_milli: int,
    low: int,
    high: int,
    *,
    up_window_s: int = 0,
    down_window_s: int = 300,
    to_zero_delay_s: int = 300,
) -> HPASpec | ScaledObjectSpec:
    """A per-replica request target (concurrency, rps, ongoing requests) as a core spec.

    ``ceil(total / target)`` replicas is what KServe's KPA and Ray Serve both aim at; the
    decision windows become HPA stabilization windows and the rate limits are lifted (1000 % per
    15 s). With a floor of zero the spec is KEDA-shaped: activation above 0, scale to zero
    ``to_zero_delay_s`` after the last active poll (polled every 15 s).
    """
    fast = (
        ScalingPolicy(ScalingPolicyType.PERCENT, 1000, 15),
        ScalingPolicy(ScalingPolicyType.PODS, 100, 15),
    )
    rules = HPABehavior(
        HPAScalingRules(up_window_s, SelectPolicy.MAX, fast, 0.0),
        HPAScalingRules(down_window_s, SelectPolicy.MAX, fast, 0.0),
    )
    if low >= 1:
        target = MetricTarget(MetricTargetType.AVERAGE_VALUE, average_value_milli=target_milli)
        return HPASpec(high, (MetricSpec(MetricSourceType.EXTERNAL, metric, target),), low, rules)
    return ScaledObjectSpec(
        triggers=(Trigger(metric, "prometheus", target_milli),),
        polling_interval_s=15,
        cooldown_period_s=to_zero_delay_s,
        min_replica_count=0,
        max_replica_count=high,
        behavior=rules,
    )
