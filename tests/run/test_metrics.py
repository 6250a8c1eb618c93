"""``/metrics`` content: Kueue's queue metrics from a running loop, DCGM names for GPUs, idle time."""

from __future__ import annotations

from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, generate_latest

from gpuq.run.executors.local import LocalExecutor
from gpuq.run.gpus import GPUTelemetry, local_node, virtual_devices
from gpuq.run.loop import ControlLoop
from gpuq.run.metrics import ControlPlaneCollector, IdleTracker
from gpuq.run.store import Store

from .test_loop import job, plane, run_until, state, submit

__all__ = ["plane"]  # the fixture, imported for pytest


def scrape(collector: ControlPlaneCollector) -> str:
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_queue_metrics_use_kueue_names_and_labels(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, _ = plane
    submit(store, job("a", "team-a", "import time; time.sleep(5)", gpus=2))
    run_until(loop, lambda: state(store, "team-a", "a") == "Running")
    submit(store, job("b", "team-b", "print(1)", gpus=1))
    for _ in range(3):
        loop.step()
    text = scrape(ControlPlaneCollector(lambda: loop, list, hostname="box"))
    assert 'kueue_admitted_workloads_total{cluster_queue="shared"} 1.0' in text
    assert 'kueue_admitted_active_workloads{cluster_queue="shared"} 1.0' in text
    assert 'kueue_pending_workloads{cluster_queue="shared",status="inadmissible"} 1.0' in text
    gpu = 'cluster_queue="shared",cohort="",flavor="gpu",resource="nvidia.com/gpu"'
    assert f"kueue_cluster_queue_nominal_quota{{{gpu}}} 2.0" in text
    assert f"kueue_cluster_queue_resource_usage{{{gpu}}} 2.0" in text
    assert 'kueue_admission_wait_time_seconds_count{cluster_queue="shared"} 1.0' in text


def test_a_follower_without_a_loop_reports_only_gpus() -> None:
    text = scrape(ControlPlaneCollector(lambda: None, list, hostname="box"))
    assert "kueue_pending_workloads" not in text and "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text


def test_gpu_metrics_use_dcgm_names_and_skip_unreadable_values() -> None:
    readings = [
        GPUTelemetry(
            0,
            "GPU-aaa",
            utilization_pct=87,
            memory_used_mib=1000,
            memory_free_mib=80000,
            temperature_c=61,
            power_w=312.5,
        ),
        GPUTelemetry(1, "GPU-bbb", utilization_pct=0, temperature_c=None),
    ]
    clock = iter([100.0, 160.0])
    collector = ControlPlaneCollector(
        lambda: None, lambda: readings, hostname="box", model_name="H100", clock=lambda: next(clock)
    )
    first = scrape(collector)
    assert 'DCGM_FI_DEV_GPU_UTIL{Hostname="box",UUID="GPU-aaa",gpu="0",modelName="H100"} 87.0' in first
    assert 'DCGM_FI_DEV_POWER_USAGE{Hostname="box",UUID="GPU-aaa",gpu="0",modelName="H100"} 312.5' in first
    assert 'DCGM_FI_DEV_GPU_TEMP{Hostname="box",UUID="GPU-bbb"' not in first  # unreadable: no sample
    second = scrape(collector)
    assert 'gpuq_gpu_idle_seconds{Hostname="box",UUID="GPU-bbb",gpu="1",modelName="H100"} 60.0' in second
    assert 'gpuq_gpu_idle_seconds{Hostname="box",UUID="GPU-aaa"' not in second


def test_idle_time_restarts_when_the_gpu_works() -> None:
    tracker = IdleTracker(threshold_pct=5)
    idle = GPUTelemetry(0, "u", utilization_pct=3)
    busy = GPUTelemetry(0, "u", utilization_pct=50)
    assert tracker.observe([idle], 0.0) == {"u": 0.0}
    assert tracker.observe([idle], 30.0) == {"u": 30.0}
    assert tracker.observe([busy], 40.0) == {}
    assert tracker.observe([idle], 50.0) == {"u": 0.0}


def test_xid_events_become_the_last_xid_per_gpu() -> None:
    from gpuq.run.xid import XidWatcher

    from .fake_nvml import FakeEvents, FakeGPU

    gpus = [FakeGPU("NVIDIA H100 80GB HBM3", f"GPU-{i}", 81559) for i in range(2)]
    nvml = FakeEvents(gpus, pending=[(1, 79), (1, 48)])
    watcher = XidWatcher(nvml)
    assert nvml.registered == ["GPU-0", "GPU-1"]
    readings = [GPUTelemetry(0, "GPU-0", utilization_pct=10), GPUTelemetry(1, "GPU-1", utilization_pct=10)]
    text = scrape(ControlPlaneCollector(lambda: None, lambda: readings, hostname="box", xids=watcher.poll))
    assert 'DCGM_FI_DEV_XID_ERRORS{Hostname="box",UUID="GPU-1",gpu="1",modelName=""} 48.0' in text
    assert 'DCGM_FI_DEV_XID_ERRORS{Hostname="box",UUID="GPU-0"' not in text
    assert watcher.counts == {"GPU-1": 2}
    watcher.close()


def test_without_nvml_the_xid_watcher_is_empty_and_says_why() -> None:
    from gpuq.run.xid import XidWatcher

    from .fake_nvml import FakeNvml

    watcher = XidWatcher(FakeNvml([], init_error=9))  # driver not loaded
    assert watcher.poll() == {} and "not available" in watcher.reason


COHORT_CONFIG = """
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
metadata: {name: config}
fairSharing: {}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: org}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: research}
spec:
  cohortName: org
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 1, borrowingLimit: 1, lendingLimit: 0}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: prod}
spec:
  cohortName: org
  namespaceSelector: {}
  stopPolicy: Hold
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 1}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: research}
"""


def test_cohort_labels_limits_status_and_cohort_metrics_as_kueue_names_them(tmp_path: Path) -> None:
    """pkg/metrics/metrics.go: the per-resource ClusterQueue gauges carry ``cohort``; borrowing and lending
    limits where set; ``kueue_cluster_queue_status``; Cohort subtree gauges; weighted shares with fair
    sharing. research (1 GPU, may borrow 1, lends none) runs a 2-GPU job on prod's lent GPU."""
    store = Store(f"sqlite:///{tmp_path / 'gpuq.db'}")
    store.migrate()
    for document in yaml.safe_load_all(COHORT_CONFIG):
        store.apply_object(document)
    node = local_node(virtual_devices(2, "A100-80GB"), name="box", cpu_milli=16_000, memory_bytes=64 << 30)
    loop = ControlLoop(store, LocalExecutor(tmp_path / "work"), [node], workdir=tmp_path / "work")
    try:
        submit(store, job("big", "team-a", "import time; time.sleep(5)", gpus=2))
        run_until(loop, lambda: state(store, "team-a", "big") == "Running")
        text = scrape(ControlPlaneCollector(lambda: loop, list, hostname="box"))
    finally:
        loop.close()
        store.close()
    research = 'cluster_queue="research",cohort="org",flavor="gpu",resource="nvidia.com/gpu"'
    prod = 'cluster_queue="prod",cohort="org",flavor="gpu",resource="nvidia.com/gpu"'
    assert f"kueue_cluster_queue_nominal_quota{{{research}}} 1.0" in text
    assert f"kueue_cluster_queue_resource_usage{{{research}}} 2.0" in text
    assert f"kueue_cluster_queue_resource_reservation{{{research}}} 2.0" in text
    assert f"kueue_cluster_queue_borrowing_limit{{{research}}} 1.0" in text
    assert f"kueue_cluster_queue_lending_limit{{{research}}} 0.0" in text
    assert f"kueue_cluster_queue_borrowing_limit{{{prod}}}" not in text, "no limit set: no sample"
    assert f"kueue_cluster_queue_resource_usage{{{prod}}} 0.0" in text
    assert 'kueue_cluster_queue_status{cluster_queue="research",status="active"} 1.0' in text
    assert 'kueue_cluster_queue_status{cluster_queue="research",status="pending"} 0.0' in text
    assert 'kueue_cluster_queue_status{cluster_queue="prod",status="pending"} 1.0' in text, "stopped"
    assert 'kueue_reserving_active_workloads{cluster_queue="research"} 1.0' in text
    assert 'kueue_quota_reserved_workloads_total{cluster_queue="research"} 1.0' in text
    assert 'kueue_quota_reserved_wait_time_seconds_count{cluster_queue="research"} 1.0' in text
    assert 'kueue_admission_wait_time_seconds_count{cluster_queue="research"} 1.0' in text
    cohort_gpu = 'cohort="org",flavor="gpu",resource="nvidia.com/gpu"'
    assert f"kueue_cohort_subtree_quota{{{cohort_gpu}}} 1.0" in text, "research keeps its GPU (lends 0)"
    assert f"kueue_cohort_subtree_resource_reservations{{{cohort_gpu}}} 1.0" in text, "beyond research's own"
    assert 'kueue_cohort_subtree_admitted_active_workloads{cohort="org"} 1.0' in text
    # research borrows 1 of the 1 GPU its cohort can lend: 1000 / weight 1.
    assert 'kueue_cluster_queue_weighted_share{cluster_queue="research",cohort="org"} 1000.0' in text
    assert 'kueue_cluster_queue_weighted_share{cluster_queue="prod",cohort="org"} 0.0' in text
    assert 'kueue_cohort_weighted_share{cohort="org"} 0.0' in text, "a root cohort borrows from no one"
