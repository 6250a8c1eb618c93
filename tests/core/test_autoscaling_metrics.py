"""Serving-framework metric names and the HPA / KEDA targets they map to."""

from __future__ import annotations

import pytest

from gpuq.core.autoscaling.serving_metrics import (
    SERVING_METRICS,
    Framework,
    Signal,
    keda_query,
    metric_spec,
    serving_metric,
)
from gpuq.core.autoscaling.spec import MetricSourceType, MetricSpec, average_value, value


@pytest.mark.parametrize(
    ("name", "framework", "signal", "source"),
    [
        ("vllm:num_requests_running", Framework.VLLM, Signal.CONCURRENCY, MetricSourceType.PODS),
        ("vllm:num_requests_waiting", Framework.VLLM, Signal.QUEUE, MetricSourceType.EXTERNAL),
        ("vllm:gpu_cache_usage_perc", Framework.VLLM, Signal.SATURATION, MetricSourceType.PODS),
        ("vllm:kv_cache_usage_perc", Framework.VLLM, Signal.SATURATION, MetricSourceType.PODS),
        ("vllm:generation_tokens_total", Framework.VLLM, Signal.THROUGHPUT, MetricSourceType.PODS),
        ("tgi_queue_size", Framework.TGI, Signal.QUEUE, MetricSourceType.EXTERNAL),
        ("tgi_batch_current_size", Framework.TGI, Signal.CONCURRENCY, MetricSourceType.PODS),
        ("nv_inference_queue_duration_us", Framework.TRITON, Signal.LATENCY, MetricSourceType.EXTERNAL),
        ("nv_inference_pending_request_count", Framework.TRITON, Signal.QUEUE, MetricSourceType.EXTERNAL),
        ("DCGM_FI_DEV_GPU_UTIL", Framework.DCGM, Signal.SATURATION, MetricSourceType.PODS),
    ],
)
def test_lookup(name: str, framework: Framework, signal: Signal, source: MetricSourceType) -> None:
    metric = serving_metric(name)
    assert (metric.framework, metric.signal, metric.hpa_source) == (framework, signal, source)


def test_metric_names_are_unique() -> None:
    names = [m.name for m in SERVING_METRICS] + [a for m in SERVING_METRICS for a in m.aliases]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("name", "target", "expected"),
    [
        (
            "vllm:num_requests_waiting",
            5,
            MetricSpec(MetricSourceType.EXTERNAL, "vllm:num_requests_waiting", average_value(5000)),
        ),
        (
            "vllm:gpu_cache_usage_perc",
            0.8,
            MetricSpec(MetricSourceType.PODS, "vllm:gpu_cache_usage_perc", average_value(800)),
        ),
        (
            "DCGM_FI_DEV_GPU_UTIL",
            70,
            MetricSpec(MetricSourceType.PODS, "DCGM_FI_DEV_GPU_UTIL", average_value(70_000)),
        ),
        (
            "nv_inference_queue_duration_us",
            2000,
            MetricSpec(MetricSourceType.EXTERNAL, "nv_inference_queue_duration_us", value(2_000_000)),
        ),
    ],
)
def test_metric_spec(name: str, target: float, expected: MetricSpec) -> None:
    assert metric_spec(name, target) == expected


def test_keda_query_fills_the_selector() -> None:
    assert keda_query("tgi_queue_size", 'service="llama"') == 'sum(tgi_queue_size{service="llama"})'


def test_unknown_metric_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known: DCGM_FI_DEV_GPU_UTIL"):
        serving_metric("vllm:nope")
