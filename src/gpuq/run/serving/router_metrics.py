"""What a live autoscaler sync reads: the router's measurements as HPA metric readings or KEDA values.

The router (:mod:`gpuq.run.serving.router`) sees every request of a service, so it measures:

| metric | kind | live value |
| --- | --- | --- |
| ``vllm:num_requests_running``, ``tgi_batch_current_size`` | per pod | outstanding on the replica |
| ``vllm:num_requests_waiting``, ``tgi_queue_size``,
  ``nv_inference_pending_request_count`` | total | held at the router (no ready replica) |
| ``concurrency`` (KServe), ``ongoing_requests`` (Ray Serve) | total | outstanding plus held |
| ``rps`` | total | requests arrived per second since the last sync |
| ``nv_inference_queue_duration_us`` | total | mean hold of the requests released since the last sync |

A per-pod metric read as an External / Object metric, or by a KEDA trigger whose query does not
start with ``avg``, is the sum over ready replicas; ``avg(...)`` reads their mean; a total read as
a Pods metric is split evenly over them (as in the simulator). Other metrics (``cpu``, GPU
utilisation, KV-cache usage, token rates) are not observed live: their readings are fetch errors,
which the HPA reports as ``FailedGet...Metric``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuq.api.serving import ServiceSpec
from gpuq.core.autoscaling import serving_metrics
from gpuq.core.autoscaling.keda import ScaledObjectSpec
from gpuq.core.autoscaling.replicas import MetricFetchError, MetricReading, ObjectMetric, PodMetrics
from gpuq.core.autoscaling.serving_metrics import SERVICE_TOTALS
from gpuq.core.autoscaling.spec import MetricSourceType

PER_POD = ("vllm:num_requests_running", "tgi_batch_current_size")
KNOWN = PER_POD + SERVICE_TOTALS

ROUTER_TRIGGER = "gpuq-router"
"""The implicit trigger of a ScaledObject that may scale to zero: active while the router holds
requests (KEDA's HTTP add-on adds the same kind of external-push scaler)."""


@dataclass(frozen=True)
class Load:
    """One sync's measurements of a revision: outstanding requests per ready replica, held ones, the
    arrival rate and the mean hold since the last sync."""

    running: Mapping[str, int]
    held: int
    rps: float
    mean_hold_s: float

    def values(self) -> dict[str, float]:
        ready = len(self.running)
        total = float(sum(self.running.values()))
        mean = total / ready if ready else 0.0
        return {
            "vllm:num_requests_running": mean,
            "tgi_batch_current_size": mean,
            "vllm:num_requests_waiting": float(self.held),
            "tgi_queue_size": float(self.held),
            "nv_inference_pending_request_count": float(self.held),
            "nv_inference_queue_duration_us": self.mean_hold_s * 1e6,
            "concurrency": total + self.held,
            "ongoing_requests": total + self.held,
            "rps": self.rps,
        }


def resolve(name: str, query: str = "") -> tuple[str, bool] | None:
    """``(metric, per_pod)`` a metric or KEDA trigger reads; None when it is not observed live."""
    return serving_metrics.resolve(name, query, PER_POD)


def _total(load: Load, metric: str) -> float:
    if metric in PER_POD:
        return float(sum(load.running.values()))
    return load.values()[metric]


def _per_pod(load: Load, metric: str) -> dict[str, float]:
    if metric in PER_POD:
        return {name: float(v) for name, v in load.running.items()}
    ready = len(load.running)
    share = load.values()[metric] / ready if ready else 0.0
    return dict.fromkeys(load.running, share)


def keda_readings(
    spec: ServiceSpec, autoscaler: ScaledObjectSpec, load: Load
) -> dict[str, int | MetricFetchError]:
    """Each trigger's value in milli-units (the router trigger: held requests), or a fetch error."""
    out: dict[str, int | MetricFetchError] = {}
    for trigger in autoscaler.triggers:
        if trigger.name == ROUTER_TRIGGER:
            out[trigger.name] = load.held * 1000
            continue
        found = resolve(trigger.name, spec.trigger_queries.get(trigger.name, ""))
        if found is None:
            out[trigger.name] = MetricFetchError(f"trigger {trigger.name!r}: no metric the router observes")
            continue
        metric, mean = found
        per_pod = _per_pod(load, metric)
        value = sum(per_pod.values()) / len(per_pod) if mean and per_pod else _total(load, metric)
        out[trigger.name] = round(value * 1000)
    return out


def hpa_readings(
    spec: ServiceSpec, metrics: Sequence[tuple[MetricSourceType, str]], load: Load
) -> dict[str, MetricReading]:
    """Each HPA metric's reading: per-pod samples for Resource / Pods, a value for Object / External."""
    out: dict[str, MetricReading] = {}
    for source, name in metrics:
        found = resolve(name)
        if found is None:
            out[name] = MetricFetchError(f"{name} is not observed by the live router")
        elif source in (MetricSourceType.RESOURCE, MetricSourceType.PODS):
            out[name] = PodMetrics({pod: round(v * 1000) for pod, v in _per_pod(load, found[0]).items()})
        else:
            out[name] = ObjectMetric.of(round(_total(load, found[0]) * 1000))
    return out
