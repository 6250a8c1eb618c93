"""What a user writes for an autoscaled service: HPA v2 metric targets, scaling rules and behavior.

The types mirror ``autoscaling/v2`` (``k8s.io/api/autoscaling/v2/types.go``) field by field, with
units in the names: metric quantities are integer milli-units (``value_milli``: ``"500m"`` is 500,
``"2"`` is 2000), as the controller itself works on ``Quantity.MilliValue()``; durations are whole
seconds; utilisation targets are percents of the pod request.

Defaults are the API server's (``pkg/apis/autoscaling/v2/defaults.go``):

- ``minReplicas`` 1;
- a ``behavior`` that is set gets every unset field from the default rules: scale-up
  ``stabilizationWindowSeconds: 0``, ``selectPolicy: Max``, policies ``Pods 4 / 15 s`` and
  ``Percent 100 / 15 s``; scale-down ``selectPolicy: Max``, policy ``Percent 100 / 15 s`` and a
  stabilization window left unset, which the controller fills from
  ``--horizontal-pod-autoscaler-downscale-stabilization`` (300 s, :class:`ControllerConfig`);
- a ``behavior`` that is *not* set is kept unset: the controller then runs its older
  normalization (``normalizeDesiredReplicas``: a 300 s downscale window and a scale-up limit of
  ``max(2 × current, 4)`` per sync) - see :mod:`gpuq.core.autoscaling.behavior`;
- ``tolerance`` per direction (``behavior.scaleUp.tolerance`` / ``scaleDown.tolerance``, KEP-4951,
  the ``HPAConfigurableTolerance`` gate, beta and on by default since Kubernetes 1.35); unset, the
  cluster-wide ``--horizontal-pod-autoscaler-tolerance`` (0.1) applies.

Sources: https://kubernetes.io/docs/concepts/workloads/autoscaling/horizontal-pod-autoscale/
("Configurable scaling behavior", "Default behavior", "Tolerance") and
https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/horizontal-pod-autoscaler-v2/.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class MetricSourceType(StrEnum):
    """Where a metric comes from (``MetricSpec.type``)."""

    RESOURCE = "Resource"  # per-pod resource usage against requests (metrics.k8s.io)
    PODS = "Pods"  # a per-pod custom metric (custom.metrics.k8s.io)
    OBJECT = "Object"  # one value describing one object (custom.metrics.k8s.io)
    EXTERNAL = "External"  # a value from outside the cluster, e.g. a queue length


class MetricTargetType(StrEnum):
    """How the metric is compared (``MetricTarget.type``)."""

    UTILIZATION = "Utilization"  # mean percent of the pod request (Resource only)
    VALUE = "Value"  # the raw total value (Object, External)
    AVERAGE_VALUE = "AverageValue"  # the value per pod


@dataclass(frozen=True)
class MetricTarget:
    """One target: exactly the field that matches ``type`` is read, as the controller does."""

    type: MetricTargetType
    average_utilization_percent: int | None = None
    value_milli: int | None = None
    average_value_milli: int | None = None


def utilization(percent: int) -> MetricTarget:
    """``target: {type: Utilization, averageUtilization: percent}``."""
    return MetricTarget(MetricTargetType.UTILIZATION, average_utilization_percent=percent)


def average_value(milli: int) -> MetricTarget:
    """``target: {type: AverageValue, averageValue: milli/1000}``."""
    return MetricTarget(MetricTargetType.AVERAGE_VALUE, average_value_milli=milli)


def value(milli: int) -> MetricTarget:
    """``target: {type: Value, value: milli/1000}``."""
    return MetricTarget(MetricTargetType.VALUE, value_milli=milli)


@dataclass(frozen=True)
class MetricSpec:
    """One entry of ``spec.metrics``.

    ``name`` is the resource name for Resource metrics (``cpu``, ``memory``, ``nvidia.com/gpu``)
    and the metric name otherwise; it keys the observation, so it is unique within an HPA.
    ``described_kind`` is the kind of the object an Object metric describes (for messages).
    """

    source: MetricSourceType
    name: str
    target: MetricTarget
    described_kind: str = "Service"


class ScalingPolicyType(StrEnum):
    PODS = "Pods"
    PERCENT = "Percent"


class SelectPolicy(StrEnum):
    """Which policy wins when several apply: the largest change (Max), the smallest, or none."""

    MAX = "Max"
    MIN = "Min"
    DISABLED = "Disabled"


@dataclass(frozen=True)
class ScalingPolicy:
    """``HPAScalingPolicy``: at most ``value`` pods (or percent) of change per ``period_s``."""

    type: ScalingPolicyType
    value: int
    period_s: int


@dataclass(frozen=True)
class HPAScalingRules:
    """``HPAScalingRules`` for one direction; ``None`` fields take the direction's default."""

    stabilization_window_s: int | None = None
    select_policy: SelectPolicy | None = None
    policies: tuple[ScalingPolicy, ...] | None = None
    tolerance: float | None = None


DEFAULT_SCALE_UP_RULES = HPAScalingRules(
    stabilization_window_s=0,
    select_policy=SelectPolicy.MAX,
    policies=(
        ScalingPolicy(ScalingPolicyType.PODS, 4, 15),
        ScalingPolicy(ScalingPolicyType.PERCENT, 100, 15),
    ),
)
"""``defaultHPAScaleUpRules`` (pkg/apis/autoscaling/v2/defaults.go)."""

DEFAULT_SCALE_DOWN_RULES = HPAScalingRules(
    stabilization_window_s=None,  # filled by the controller from its downscale flag
    select_policy=SelectPolicy.MAX,
    policies=(ScalingPolicy(ScalingPolicyType.PERCENT, 100, 15),),
)
"""``defaultHPAScaleDownRules`` (pkg/apis/autoscaling/v2/defaults.go)."""


def merged_rules(given: HPAScalingRules | None, default: HPAScalingRules) -> HPAScalingRules:
    """``copyHPAScalingRules``: every field set in ``given`` overrides the default."""
    if given is None:
        return default
    return HPAScalingRules(
        stabilization_window_s=(
            given.stabilization_window_s
            if given.stabilization_window_s is not None
            else default.stabilization_window_s
        ),
        select_policy=given.select_policy if given.select_policy is not None else default.select_policy,
        policies=given.policies if given.policies is not None else default.policies,
        tolerance=given.tolerance if given.tolerance is not None else default.tolerance,
    )


@dataclass(frozen=True)
class HPABehavior:
    """``spec.behavior``; a direction left ``None`` gets the v2 default rules for that direction."""

    scale_up: HPAScalingRules | None = None
    scale_down: HPAScalingRules | None = None

    @property
    def effective_scale_up(self) -> HPAScalingRules:
        return merged_rules(self.scale_up, DEFAULT_SCALE_UP_RULES)

    @property
    def effective_scale_down(self) -> HPAScalingRules:
        return merged_rules(self.scale_down, DEFAULT_SCALE_DOWN_RULES)


@dataclass(frozen=True)
class ControllerConfig:
    """The kube-controller-manager flags the HPA controller reads (cluster-wide, not per HPA).

    ``sync_period_s`` is informative for shells (how often they call ``decide``); the decision
    itself depends only on ``now``.
    """

    tolerance: float = 0.1  # --horizontal-pod-autoscaler-tolerance
    downscale_stabilization_s: int = 300  # --horizontal-pod-autoscaler-downscale-stabilization
    cpu_initialization_period_s: int = 300  # --horizontal-pod-autoscaler-cpu-initialization-period
    initial_readiness_delay_s: int = 30  # --horizontal-pod-autoscaler-initial-readiness-delay
    sync_period_s: int = 15  # --horizontal-pod-autoscaler-sync-period


@dataclass(frozen=True)
class HPASpec:
    """``HorizontalPodAutoscalerSpec`` without the target reference.

    ``behavior=None`` is an HPA written without ``behavior`` (the controller's legacy path);
    ``HPABehavior()`` is one written with ``behavior: {}`` (all v2 defaults).
    ``min_replicas=0`` is the ``HPAScaleToZero`` feature (Object/External metrics only).
    """

    max_replicas: int
    metrics: tuple[MetricSpec, ...]
    min_replicas: int = 1
    behavior: HPABehavior | None = None
    config: ControllerConfig = field(default_factory=ControllerConfig)

    def __post_init__(self) -> None:
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise ValueError(f"metric names must be unique within an HPA, got {names}")
        if self.min_replicas < 0 or self.max_replicas < max(self.min_replicas, 1):
            raise ValueError(
                f"need 0 <= minReplicas <= maxReplicas and maxReplicas >= 1, "
                f"got min={self.min_replicas} max={self.max_replicas}"
            )
