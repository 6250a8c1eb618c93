"""The metrics inference servers and GPUs export, and how an HPA or KEDA trigger can target them.

Names are the exporters' own Prometheus names:

- vLLM (``vllm/engine/metrics.py``, ``vllm/v1/metrics/loggers.py``; docs.vllm.ai "Production
  Metrics"): ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:gpu_cache_usage_perc`` (renamed ``vllm:kv_cache_usage_perc`` in the V1 engine, kept here
  as an alias), ``vllm:generation_tokens_total`` (a counter; tokens per second is its ``rate()``).
- Text Generation Inference (``router/src/server.rs``): ``tgi_queue_size``, ``tgi_batch_current_size``.
- Triton Inference Server (docs "Metrics"): ``nv_inference_queue_duration_us`` (a cumulative counter
  of microseconds spent queued), ``nv_inference_pending_request_count`` (a gauge).
- NVIDIA DCGM exporter: ``DCGM_FI_DEV_GPU_UTIL`` (percent of time the GPU was busy, 0-100).

Each entry says which HPA metric source fits it (a per-pod gauge is a ``Pods`` metric through a
Prometheus adapter; a queue summed over the service is an ``External`` metric, which is what a
KEDA Prometheus trigger becomes) and the PromQL a KEDA trigger would query. GPU utilisation is a
``Pods`` metric, not a ``Resource`` one: metrics-server does not report GPUs. This module is data
and a lookup; the simulator produces the values.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpuq.core.autoscaling.spec import MetricSourceType, MetricSpec, MetricTargetType, average_value, value


class Framework(StrEnum):
    VLLM = "vllm"
    TGI = "tgi"
    TRITON = "triton"
    DCGM = "dcgm"


class PromType(StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"


class Signal(StrEnum):
    """What the metric says about load, which decides how to scale on it."""

    QUEUE = "queue"  # work waiting: scale so that each replica's share stays under a target
    CONCURRENCY = "concurrency"  # work in progress per replica
    SATURATION = "saturation"  # a fraction of a finite resource (KV cache, GPU time)
    THROUGHPUT = "throughput"  # work done per second
    LATENCY = "latency"  # time spent waiting


@dataclass(frozen=True)
class ServingMetric:
    """One exported metric and the autoscaling target it suits.

    ``unit`` is the unit of one sample (``1`` for counts); ``scale_to_milli`` converts one sample
    unit into the milli-units a target is written in (a fraction 0-1 → 1000). ``keda_query`` is
    the PromQL a KEDA ``prometheus`` trigger would use, with ``{selector}`` for the label matcher.
    """

    name: str
    framework: Framework
    prom_type: PromType
    signal: Signal
    unit: str
    hpa_source: MetricSourceType
    target_type: MetricTargetType
    keda_query: str
    description: str
    aliases: tuple[str, ...] = ()
    scale_to_milli: int = 1000


SERVING_METRICS: tuple[ServingMetric, ...] = (
    ServingMetric(
        "vllm:num_requests_running", Framework.VLLM, PromType.GAUGE, Signal.CONCURRENCY, "1",
        MetricSourceType.PODS, MetricTargetType.AVERAGE_VALUE,
        "sum(vllm:num_requests_running{{{selector}}})",
        "requests currently in a running batch on the engine",
    ),
    ServingMetric(
        "vllm:num_requests_waiting", Framework.VLLM, PromType.GAUGE, Signal.QUEUE, "1",
        MetricSourceType.EXTERNAL, MetricTargetType.AVERAGE_VALUE,
        "sum(vllm:num_requests_waiting{{{selector}}})",
        "requests queued, waiting to be scheduled",
    ),
    ServingMetric(
        "vllm:gpu_cache_usage_perc", Framework.VLLM, PromType.GAUGE, Signal.SATURATION, "fraction",
        MetricSourceType.PODS, MetricTargetType.AVERAGE_VALUE,
        "avg(vllm:gpu_cache_usage_perc{{{selector}}})",
        "fraction of KV-cache blocks in use (1 = full)",
        aliases=("vllm:kv_cache_usage_perc",),
    ),
    ServingMetric(
        "vllm:generation_tokens_total", Framework.VLLM, PromType.COUNTER, Signal.THROUGHPUT, "tokens",
        MetricSourceType.PODS, MetricTargetType.AVERAGE_VALUE,
        "sum(rate(vllm:generation_tokens_total{{{selector}}}[1m]))",
        "generated tokens; rate() gives generation tokens per second",
    ),
    ServingMetric(
        "tgi_queue_size", Framework.TGI, PromType.GAUGE, Signal.QUEUE, "1",
        MetricSourceType.EXTERNAL, MetricTargetType.AVERAGE_VALUE,
        "sum(tgi_queue_size{{{selector}}})",
        "requests waiting in the router queue",
    ),
    ServingMetric(
        "tgi_batch_current_size", Framework.TGI, PromType.GAUGE, Signal.CONCURRENCY, "1",
        MetricSourceType.PODS, MetricTargetType.AVERAGE_VALUE,
        "sum(tgi_batch_current_size{{{selector}}})",
        "requests in the current batch",
    ),
    ServingMetric(
        "nv_inference_queue_duration_us", Framework.TRITON, PromType.COUNTER, Signal.LATENCY, "us",
        MetricSourceType.EXTERNAL, MetricTargetType.VALUE,
        "sum(rate(nv_inference_queue_duration_us{{{selector}}}[1m]))"
        " / sum(rate(nv_inference_request_success{{{selector}}}[1m]))",
        "cumulative time requests spent queued; over successes, mean queue time per request",
    ),
    ServingMetric(
        "nv_inference_pending_request_count", Framework.TRITON, PromType.GAUGE, Signal.QUEUE, "1",
        MetricSourceType.EXTERNAL, MetricTargetType.AVERAGE_VALUE,
        "sum(nv_inference_pending_request_count{{{selector}}})",
        "requests received and not yet started",
    ),
    ServingMetric(
        "DCGM_FI_DEV_GPU_UTIL", Framework.DCGM, PromType.GAUGE, Signal.SATURATION, "percent",
        MetricSourceType.PODS, MetricTargetType.AVERAGE_VALUE,
        "avg(DCGM_FI_DEV_GPU_UTIL{{{selector}}})",
        "GPU utilisation, percent of time one or more kernels ran",
    ),
)  # fmt: skip

_BY_NAME = {m.name: m for m in SERVING_METRICS} | {a: m for m in SERVING_METRICS for a in m.aliases}


def serving_metric(name: str) -> ServingMetric:
    """Look a metric up by its exported name (or alias); a clear error names the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        known = ", ".join(sorted(m.name for m in SERVING_METRICS))
        raise KeyError(f"unknown serving metric {name!r}; known: {known}") from None


def metric_spec(name: str, target: float) -> MetricSpec:
    """An HPA ``MetricSpec`` targeting ``target`` (in the metric's own unit) of a serving metric."""
    metric = serving_metric(name)
    milli = round(target * metric.scale_to_milli)
    spec_target = value(milli) if metric.target_type is MetricTargetType.VALUE else average_value(milli)
    return MetricSpec(metric.hpa_source, metric.name, spec_target)


def keda_query(name: str, selector: str = "") -> str:
    """The PromQL for a KEDA ``prometheus`` trigger on this metric, with a label selector."""
    return serving_metric(name).keda_query.format(selector=selector)


SERVICE_TOTALS = (
    "vllm:num_requests_waiting",
    "tgi_queue_size",
    "nv_inference_pending_request_count",
    "nv_inference_queue_duration_us",
    "concurrency",
    "ongoing_requests",
    "rps",
)
"""Metrics read as one value per service (summed over replicas, or measured in front of them), as a
KEDA trigger or an HPA External metric sees a queue."""


def resolve(name: str, query: str, per_pod: tuple[str, ...]) -> tuple[str, bool] | None:
    """``(metric, per_pod)`` that a metric name or a trigger's query reads, among ``per_pod`` and
    :data:`SERVICE_TOTALS` (the longest name a query mentions; ``avg(...)`` reads it per pod); None
    when it names none of them."""
    known = per_pod + SERVICE_TOTALS
    if name in known:
        return name, name in per_pod
    found = [metric for metric in known if metric in query]
    if not found:
        return None
    return max(found, key=len), query.strip().startswith("avg")
