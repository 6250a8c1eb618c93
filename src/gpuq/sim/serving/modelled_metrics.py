"""What the servers' metrics read at a load: the observation an HPA or KEDA sync is given.

From the current step's rate ``λ``, the ``R`` ready replicas and the queued requests ``B``
(:mod:`gpuq.sim.serving.replica_model`), with ``ρ = λ / (R·μ)``:

| metric | kind | value |
| --- | --- | --- |
| ``vllm:num_requests_running``, ``tgi_batch_current_size`` | per pod | busy slots ``c·ρ`` (at most c) |
| ``vllm:gpu_cache_usage_perc`` (``vllm:kv_cache_usage_perc``) | per pod | ``running / c`` |
| ``DCGM_FI_DEV_GPU_UTIL`` | per pod | ``100·min(1, ρ)`` |
| ``cpu`` (Resource, Utilization) | per pod | ``min(1, ρ)`` of the pod's CPU request |
| ``vllm:generation_tokens_total`` (its rate) | per pod | ``min(λ/R, μ)·tokensPerRequest`` |
| ``vllm:num_requests_waiting``, ``tgi_queue_size``,
  ``nv_inference_pending_request_count`` | total | ``R·Lq + B`` |
| ``nv_inference_queue_duration_us`` | total | mean queue wait in µs |
| ``concurrency`` (KServe), ``ongoing_requests`` (Ray Serve) | total | ``R·running + R·Lq + B`` |
| ``rps`` (KServe) | total | ``λ`` |

Requests held at a gateway while no replica is ready count as waiting, so a queue metric can
wake a service from zero (as a KEDA HTTP add-on or gateway metric does). A per-pod metric used as
an External / Object metric is summed over ready pods; a total used as a Pods metric is split
evenly over them. A KEDA ``prometheus`` trigger reads the metric its ``query`` names; a query
starting with ``avg`` reads the per-pod mean, any other the total.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpuq.core.autoscaling import serving_metrics
from gpuq.core.autoscaling.keda import ScaledObjectSpec
from gpuq.core.autoscaling.replicas import MetricReading, ObjectMetric, Pod, PodMetrics, PodPhase
from gpuq.core.autoscaling.serving_metrics import SERVICE_TOTALS
from gpuq.core.autoscaling.spec import MetricSourceType
from gpuq.sim.serving.replica_model import steady

if TYPE_CHECKING:
    from gpuq.sim.serving.fleet import Replica, ServiceRun

PER_POD = (
    "vllm:num_requests_running",
    "tgi_batch_current_size",
    "vllm:gpu_cache_usage_perc",
    "vllm:kv_cache_usage_perc",
    "DCGM_FI_DEV_GPU_UTIL",
    "cpu",
    "vllm:generation_tokens_total",
)
KNOWN = PER_POD + SERVICE_TOTALS


def resolve(name: str, query: str = "") -> tuple[str, bool] | None:
    """``(metric, per_pod)`` a metric or KEDA trigger reads; None when the simulator does not produce it."""
    return serving_metrics.resolve(name, query, PER_POD)


def loads(svc: ServiceRun, now: float, step_s: float) -> dict[str, float]:
    """Every metric of :data:`KNOWN` at ``now``: per-pod values per ready pod, totals for the service."""
    assert svc.plan.traffic is not None  # only services with traffic run an autoscaler
    model = svc.plan.traffic.replica
    rate = svc.rate_at(now, step_s)
    ready = svc.ready
    queued = sum(chunk[1] for chunk in svc.backlog)
    capacity = ready * model.max_rps
    if ready and not svc.backlog and rate < capacity:
        state = steady(rate / ready, model.max_rps, model.concurrency)
        running, waiting, wait_s = state.running, state.waiting * ready, state.mean_wait_s
    else:
        running = float(model.concurrency) if ready else 0.0
        waiting = queued
        wait_s = queued / capacity if capacity else (now - svc.backlog[0][0] if svc.backlog else 0.0)
    util = min(1.0, rate / capacity) if capacity else 0.0
    served = min(rate / ready, model.max_rps) if ready else 0.0
    return {
        "vllm:num_requests_running": running,
        "tgi_batch_current_size": running,
        "vllm:gpu_cache_usage_perc": running / model.concurrency,
        "vllm:kv_cache_usage_perc": running / model.concurrency,
        "DCGM_FI_DEV_GPU_UTIL": 100 * util,
        "cpu": util,
        "vllm:generation_tokens_total": served * model.tokens_per_request,
        "vllm:num_requests_waiting": waiting,
        "tgi_queue_size": waiting,
        "nv_inference_pending_request_count": waiting,
        "nv_inference_queue_duration_us": wait_s * 1e6,
        "concurrency": running * ready + waiting,
        "ongoing_requests": running * ready + waiting,
        "rps": rate,
    }


def _pods(svc: ServiceRun, replicas: list[Replica]) -> tuple[Pod, ...]:
    cpu = svc.plan.spec.pod_set.requests.get("cpu", 0)
    out = []
    for r in replicas:
        if r.bound_at is None:
            out.append(Pod(r.key, PodPhase.PENDING, None, start_time_s=None, requests_milli={"cpu": cpu}))
        elif r.ready_at is None:
            out.append(Pod(r.key, PodPhase.RUNNING, False, False, r.bound_at, r.bound_at, {"cpu": cpu}))
        else:
            out.append(Pod(r.key, PodPhase.RUNNING, True, False, r.bound_at, r.ready_at, {"cpu": cpu}))
    return tuple(out)


def _total(values: Mapping[str, float], metric: str, ready: int) -> float:
    return values[metric] * ready if metric in PER_POD else values[metric]


def _per_pod(values: Mapping[str, float], metric: str, ready: int) -> float:
    if metric in PER_POD:
        return values[metric]
    return values[metric] / ready if ready else 0.0


def observe(
    svc: ServiceRun, replicas: list[Replica], now: float, step_s: float
) -> tuple[dict[str, MetricReading | int], tuple[Pod, ...]]:
    """The readings one sync is given (HPA metric readings, or KEDA trigger values in milli-units)."""
    values = loads(svc, now, step_s)
    pods = _pods(svc, replicas)
    ready_pods = [p.name for p in pods if p.ready]
    ready = len(ready_pods)
    autoscaler = svc.plan.spec.autoscaler
    out: dict[str, MetricReading | int] = {}
    if isinstance(autoscaler, ScaledObjectSpec):
        for trigger in autoscaler.triggers:
            found = resolve(trigger.name, svc.plan.trigger_queries.get(trigger.name, ""))
            assert found is not None
            metric, per_pod = found
            value = _per_pod(values, metric, ready) if per_pod else _total(values, metric, ready)
            out[trigger.name] = round(value * 1000)
        return out, pods
    assert autoscaler is not None
    cpu = svc.plan.spec.pod_set.requests.get("cpu", 0)
    for spec in autoscaler.metrics:
        found = resolve(spec.name)
        assert found is not None
        metric = found[0]
        if spec.source in (MetricSourceType.RESOURCE, MetricSourceType.PODS):
            per = _per_pod(values, metric, ready) * (cpu if metric == "cpu" else 1000)
            out[spec.name] = PodMetrics({name: round(per) for name in ready_pods})
        else:
            out[spec.name] = ObjectMetric.of(round(_total(values, metric, ready) * 1000))
    return out, pods
