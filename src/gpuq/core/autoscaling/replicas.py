"""Per-metric replica proposals: the HPA's replica calculator, exactly.

Port of ``pkg/controller/podautoscaler/replica_calculator.go`` and ``metrics/utilization.go``
(kubernetes/kubernetes, v1.33+ with per-direction tolerances). For each metric:

1. Group the pods (``groupPods``): deleted or failed pods are ignored; pending pods are unready;
   pods without a sample are *missing*; for the ``cpu`` resource only, a pod whose CPU sample
   may still be from its start-up is unready too. The rest are ready.
2. Compute the usage ratio from the ready pods' samples: for Utilization,
   ``utilization = trunc(100 × Σusage / Σrequest)`` and ``ratio = utilization / target``; for
   AverageValue, ``ratio = trunc(Σusage / n) / target``.
3. With no missing or unready pods that matter: inside the tolerance band keep the current count,
   otherwise propose ``ceil(ratio × readyPods)``.
4. Otherwise recompute conservatively: on a scale-up missing pods count as 0 and unready pods as 0;
   on a scale-down missing pods count as 100 % of their request (or the target, if higher; for
   AverageValue exactly the target) and unready pods stay out. If the new ratio is within
   tolerance or flips the direction, keep the current count; else propose
   ``ceil(newRatio × podsCounted)`` unless that count itself goes the wrong way.
5. Object/External ``Value`` targets: ``ratio = value / target``; within tolerance keep, else
   ``ceil(ratio × readyPods)`` (ready = Running and Ready); from zero replicas, ``ceil(ratio)``.
   ``AverageValue`` targets: ``ratio = value / (target × statusReplicas)``; outside tolerance
   propose ``ceil(value / target)``.

Quantities are integer milli-units and integer division truncates toward zero, as in Go; ratios
are IEEE doubles, as in Go, so the same inputs give the same proposals.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from gpuq.core.autoscaling.spec import ControllerConfig, MetricSourceType, MetricSpec, MetricTargetType


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class Pod:
    """One pod of the scale target, as the HPA's pod lister sees it.

    ``ready`` is the ``Ready`` condition (``None``: no such condition yet); ``ready_transition_s``
    its last transition; ``start_time_s`` the pod's start (``None``: not started). The defaults
    describe a pod that started and became ready long ago. ``requests_milli`` maps a resource
    name to the pod's request summed over its containers.
    """

    name: str
    phase: PodPhase = PodPhase.RUNNING
    ready: bool | None = True
    deleting: bool = False
    start_time_s: float | None = -math.inf
    ready_transition_s: float = -math.inf
    requests_milli: Mapping[str, int] | None = None


@dataclass(frozen=True)
class PodSample:
    """One pod's sample: ``value_milli`` taken at ``timestamp_s`` over ``window_s`` (None: at now)."""

    value_milli: int
    timestamp_s: float | None = None
    window_s: float = 0.0


@dataclass(frozen=True)
class PodMetrics:
    """Samples of a Resource or Pods metric, by pod name (a plain int is a sample taken now)."""

    samples: Mapping[str, int | PodSample]


@dataclass(frozen=True)
class ObjectMetric:
    """The value(s) of an Object metric, or of an External metric (summed, as the HPA does)."""

    values_milli: tuple[int, ...]

    @staticmethod
    def of(value_milli: int) -> ObjectMetric:
        return ObjectMetric((value_milli,))


@dataclass(frozen=True)
class MetricFetchError:
    """The metrics API answered with an error for this metric."""

    message: str


MetricReading = PodMetrics | ObjectMetric | MetricFetchError


@dataclass(frozen=True)
class Tolerances:
    """``Tolerances``: no change while ``1 - scale_down <= ratio <= 1 + scale_up``."""

    scale_down: float
    scale_up: float

    def is_within(self, usage_ratio: float) -> bool:
        return (1.0 - self.scale_down) <= usage_ratio <= (1.0 + self.scale_up)


@dataclass(frozen=True)
class Proposal:
    """A metric's replica proposal and its current value as the HPA status reports it."""

    replicas: int
    metric_label: str
    current_value_milli: int | None = None
    current_utilization_percent: int | None = None


class MetricComputeError(Exception):
    """The metric cannot give a replica count; ``reason`` is the ScalingActive condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


MAX_INT32 = 2**31 - 1


def go_div(numerator: int, denominator: int) -> int:
    """Integer division truncating toward zero, as Go's ``/`` on integers."""
    quotient = abs(numerator) // abs(denominator)
    return quotient if (numerator >= 0) == (denominator > 0) else -quotient


def _ceil_int32(x: float) -> int:
    return MAX_INT32 if x > MAX_INT32 else math.ceil(x)


@dataclass(frozen=True)
class _Groups:
    ready_count: int
    unready: frozenset[str]
    missing: frozenset[str]
    ignored: frozenset[str]


def _cpu_sample_unready(pod: Pod, sample: PodSample, now: float, config: ControllerConfig) -> bool:
    """The CPU-only readiness rule of ``groupPods`` (start-up samples are set aside)."""
    if pod.ready is None or pod.start_time_s is None:
        return True
    if pod.start_time_s + config.cpu_initialization_period_s > now:
        timestamp = now if sample.timestamp_s is None else sample.timestamp_s
        return pod.ready is False or timestamp < pod.ready_transition_s + sample.window_s
    return pod.ready is False and pod.start_time_s + config.initial_readiness_delay_s > pod.ready_transition_s


def group_pods(
    pods: tuple[Pod, ...],
    samples: Mapping[str, PodSample],
    resource: str,
    now: float,
    config: ControllerConfig,
) -> _Groups:
    """``groupPods``: ready count and the unready, missing and ignored pod names."""
    ready = 0
    unready: set[str] = set()
    missing: set[str] = set()
    ignored: set[str] = set()
    for pod in pods:
        if pod.deleting or pod.phase is PodPhase.FAILED:
            ignored.add(pod.name)
            continue
        if pod.phase is PodPhase.PENDING:
            unready.add(pod.name)
            continue
        sample = samples.get(pod.name)
        if sample is None:
            missing.add(pod.name)
            continue
        if resource == "cpu" and _cpu_sample_unready(pod, sample, now, config):
            unready.add(pod.name)
            continue
        ready += 1
    return _Groups(ready, frozenset(unready), frozenset(missing), frozenset(ignored))


def _normalized(samples: Mapping[str, int | PodSample]) -> dict[str, PodSample]:
    return {name: s if isinstance(s, PodSample) else PodSample(s) for name, s in samples.items()}


def _requests(pods: tuple[Pod, ...], resource: str) -> dict[str, int]:
    requests: dict[str, int] = {}
    for pod in pods:
        request = (pod.requests_milli or {}).get(resource)
        if request is None:
            raise MetricComputeError(
                "FailedGetResourceMetric", f"missing request for {resource} in Pod {pod.name}"
            )
        requests[pod.name] = request
    return requests


def utilization_ratio(
    values: Mapping[str, int], requests: Mapping[str, int], target_percent: int
) -> tuple[float, int, int]:
    """``GetResourceUtilizationRatio``: (ratio, utilization percent, raw average milli)."""
    total = requested = entries = 0
    for name, usage in values.items():
        if name not in requests:
            continue  # extraneous sample: no such pod
        total += usage
        requested += requests[name]
        entries += 1
    if requested == 0:
        raise MetricComputeError("FailedGetResourceMetric", "no metrics returned matched known pods")
    current = go_div(total * 100, requested)
    return current / target_percent, current, go_div(total, entries)


def usage_ratio(values: Mapping[str, int], target_milli: int) -> tuple[float, int]:
    """``GetMetricUsageRatio``: (ratio, mean usage milli)."""
    current = go_div(sum(values.values()), len(values))
    return current / target_milli, current


def _no_samples_error(reason: str) -> MetricComputeError:
    return MetricComputeError(reason, "did not receive metrics for targeted pods (pods might be unready)")


def _conservative_replicas(
    current: int, ratio: float, new_ratio: float, counted: int, tolerances: Tolerances
) -> int:
    """Step 4: keep ``current`` if the recomputed ratio is in band or changes direction."""
    if tolerances.is_within(new_ratio) or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current
    proposed = math.ceil(new_ratio * counted)
    if (new_ratio < 1.0 and proposed > current) or (new_ratio > 1.0 and proposed < current):
        return current
    return proposed


def pod_metric_replicas(
    current: int,
    spec: MetricSpec,
    reading: PodMetrics,
    pods: tuple[Pod, ...],
    tolerances: Tolerances,
    now: float,
    config: ControllerConfig,
) -> Proposal:
    """Resource (Utilization or AverageValue) and Pods (AverageValue) metrics: steps 1-4."""
    is_resource = spec.source is MetricSourceType.RESOURCE
    reason = "FailedGetResourceMetric" if is_resource else "FailedGetPodsMetric"
    if not pods:
        raise MetricComputeError(reason, "no pods returned by selector while calculating replica count")
    samples = _normalized(reading.samples)
    groups = group_pods(pods, samples, spec.name if is_resource else "", now, config)
    values = {
        n: s.value_milli for n, s in samples.items() if n not in groups.ignored and n not in groups.unready
    }
    if not values:
        raise _no_samples_error(reason)
    target = spec.target
    if target.type is MetricTargetType.UTILIZATION and is_resource:
        return _utilization_replicas(current, spec, values, pods, groups, tolerances)
    if target.type is not MetricTargetType.AVERAGE_VALUE or target.average_value_milli is None:
        raise MetricComputeError(reason, f"invalid {spec.source} metric source: no usable target")
    ratio, usage = usage_ratio(values, target.average_value_milli)
    label = f"{spec.name} resource" if is_resource else f"pods metric {spec.name}"
    replicas = _plain_replicas(current, ratio, values, groups, target.average_value_milli, tolerances)
    return Proposal(replicas, label, current_value_milli=usage)


def _plain_replicas(
    current: int,
    ratio: float,
    values: dict[str, int],
    groups: _Groups,
    target_milli: int,
    tolerances: Tolerances,
) -> int:
    """``calcPlainMetricReplicas`` steps 3-4 for per-pod raw values."""
    scale_up_with_unready = bool(groups.unready) and ratio > 1.0
    if not scale_up_with_unready and not groups.missing:
        return current if tolerances.is_within(ratio) else math.ceil(ratio * groups.ready_count)
    if groups.missing and ratio != 1.0:
        fill = target_milli if ratio < 1.0 else 0
        values.update(dict.fromkeys(groups.missing, fill))
    if scale_up_with_unready:
        values.update(dict.fromkeys(groups.unready, 0))
    new_ratio, _ = usage_ratio(values, target_milli)
    return _conservative_replicas(current, ratio, new_ratio, len(values), tolerances)


def _utilization_replicas(
    current: int,
    spec: MetricSpec,
    values: dict[str, int],
    pods: tuple[Pod, ...],
    groups: _Groups,
    tolerances: Tolerances,
) -> Proposal:
    """``GetResourceReplicas`` steps 2-4 for a Utilization target."""
    target = spec.target.average_utilization_percent
    if target is None:
        raise MetricComputeError("FailedGetResourceMetric", "averageUtilization is not set")
    requests = _requests(pods, spec.name)
    ratio, percent, raw = utilization_ratio(values, requests, target)
    label = f"{spec.name} resource utilization (percentage of request)"

    def proposal(replicas: int) -> Proposal:
        return Proposal(replicas, label, current_value_milli=raw, current_utilization_percent=percent)

    scale_up_with_unready = bool(groups.unready) and ratio > 1.0
    if not scale_up_with_unready and not groups.missing:
        return proposal(current if tolerances.is_within(ratio) else math.ceil(ratio * groups.ready_count))
    if groups.missing and ratio < 1.0:
        fallback_percent = max(100, target)
        values.update({n: go_div(requests[n] * fallback_percent, 100) for n in groups.missing})
    elif groups.missing and ratio > 1.0:
        values.update(dict.fromkeys(groups.missing, 0))
    if scale_up_with_unready:
        values.update(dict.fromkeys(groups.unready, 0))
    new_ratio, _, _ = utilization_ratio(values, requests, target)
    return proposal(_conservative_replicas(current, ratio, new_ratio, len(values), tolerances))


def ready_pod_count(pods: tuple[Pod, ...], reason: str) -> int:
    """``getReadyPodsCount``: Running pods whose Ready condition is true."""
    if not pods:
        raise MetricComputeError(
            reason,
            "unable to calculate ready pods: no pods returned by selector while calculating replica count",
        )
    return sum(1 for p in pods if p.phase is PodPhase.RUNNING and p.ready is True)


def object_metric_replicas(
    spec_replicas: int,
    status_replicas: int,
    spec: MetricSpec,
    reading: ObjectMetric,
    pods: tuple[Pod, ...],
    tolerances: Tolerances,
) -> Proposal:
    """Object and External metrics: step 5 (``GetObject*Replicas``, ``GetExternal*Replicas``)."""
    is_external = spec.source is MetricSourceType.EXTERNAL
    reason = "FailedGetExternalMetric" if is_external else "FailedGetObjectMetric"
    label = (
        f"external metric {spec.name}(<nil>)"
        if is_external or spec.target.type is MetricTargetType.AVERAGE_VALUE
        else f"{spec.described_kind} metric {spec.name}"
    )
    usage = sum(reading.values_milli)
    target = spec.target
    if target.type is MetricTargetType.AVERAGE_VALUE and target.average_value_milli is not None:
        per_pod_target = target.average_value_milli
        denominator = per_pod_target * status_replicas
        ratio = usage / denominator if denominator else (math.inf if usage > 0 else math.nan)
        replicas = status_replicas
        if not tolerances.is_within(ratio):
            replicas = _ceil_int32(usage / per_pod_target)
        average = math.ceil(usage / status_replicas) if status_replicas else usage
        return Proposal(replicas, label, current_value_milli=average)
    if target.type is MetricTargetType.VALUE and target.value_milli is not None:
        ratio = usage / target.value_milli
        if spec_replicas == 0:
            return Proposal(math.ceil(ratio), label, current_value_milli=usage)
        if tolerances.is_within(ratio):
            return Proposal(spec_replicas, label, current_value_milli=usage)
        ready = ready_pod_count(pods, reason)
        return Proposal(_ceil_int32(ratio * ready), label, current_value_milli=usage)
    kind = "external" if is_external else "object"
    raise MetricComputeError(
        reason, f"invalid {kind} metric source: neither a value target nor an average value target was set"
    )
