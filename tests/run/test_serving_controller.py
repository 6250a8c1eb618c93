"""The service controller inside the control loop: desired replicas become replica workloads admitted
by the Kueue engine (a scale-up beyond quota waits with Kueue's reason), readiness from the probe,
and a scale-down that removes the pending replica first and drains a ready one.

The loop is driven directly (SQLite store, local processes: the demo model server)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.api.loader import load_texts
from gpuq.api.serving import build_services
from gpuq.core.autoscaling.replicas import Pod, PodMetrics
from gpuq.core.autoscaling.sync import sync
from gpuq.run.executors.local import LocalExecutor
from gpuq.run.gpus import local_node
from gpuq.run.loop import ControlLoop
from gpuq.run.serving.controller import LiveReplica, LiveService, ServiceController
from gpuq.run.serving.replica_pod import Probe
from gpuq.run.serving.router import RevisionStats, Router
from gpuq.run.store import Store

CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: cpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: serving}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: cpu
      resources: [{name: cpu, nominalQuota: 200m}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: demo}
spec: {clusterQueue: serving}
"""


def deployment(replicas: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "gpuq.serving_demo", "--port", "$(PORT)"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "embed", "namespace": "demo", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "embed"}},
            "template": {
                "metadata": {"labels": {"app": "embed"}},
                "spec": {
                    "containers": [
                        {
                            "name": "server",
                            "command": command,
                            "ports": [{"containerPort": 8000}],
                            "resources": {"requests": {"cpu": "100m"}},
                            "readinessProbe": {"httpGet": {"path": "/healthz"}, "periodSeconds": 1},
                        }
                    ]
                },
            },
        },
    }


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[ControlLoop]:
    store = Store(f"sqlite:///{tmp_path / 'gpuq.db'}")
    store.migrate()
    for document in yaml.safe_load_all(CONFIG):
        store.apply_object(document)
    node = local_node([], name="node", cpu_milli=8000, memory_bytes=16 * 2**30, pods=110)
    services = ServiceController(store, Router(), sync_period_s=1)
    made = ControlLoop(
        store, LocalExecutor(tmp_path / "work"), [node], workdir=tmp_path / "work", services=services
    )
    try:
        yield made
    finally:
        made.close()
        store.close()


def step_until(loop: ControlLoop, condition: Callable[[], bool], what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        loop.step()
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}: {loop.services.views() if loop.services else None}")


def phases(loop: ControlLoop) -> dict[str, str]:
    assert loop.services is not None
    svc = loop.services.services["demo/embed"]
    return {r.name: ("Draining" if r.draining_since is not None else r.phase) for r in svc.replicas.values()}


def test_replicas_beyond_quota_wait_with_kueues_reason_and_scale_down_removes_pending_then_drains(
    loop: ControlLoop,
) -> None:
    loop.store.apply_object(deployment(3))
    step_until(
        loop, lambda: sorted(phases(loop).values()) == ["Pending", "Ready", "Ready"], "2 ready, 1 pending"
    )
    pending = next(name for name, phase in phases(loop).items() if phase == "Pending")
    record = loop.store.get_workload("demo", pending)
    assert record is not None and record.source_kind == "Pod"
    assert "insufficient" in record.message.lower() and "cpu" in record.message
    ready = sorted(name for name, phase in phases(loop).items() if phase == "Ready")
    assert all(loop.store.get_workload("demo", n).state == "Running" for n in ready)  # type: ignore[union-attr]

    loop.store.apply_object(deployment(1))
    step_until(loop, lambda: len(phases(loop)) == 1, "one replica left")
    assert loop.store.get_workload("demo", pending) is None  # the pending replica went first
    (left,) = phases(loop)
    assert left == ready[0]  # then the newest ready one, drained: the oldest stays
    step_until(loop, lambda: loop.store.get_workload("demo", ready[1]) is None, "the drained replica deleted")


def test_replica_pods_get_a_port_and_expanded_command(loop: ControlLoop) -> None:
    loop.store.apply_object(deployment(1))
    step_until(loop, lambda: list(phases(loop).values()) == ["Ready"], "the replica ready")
    (name,) = phases(loop)
    manifest = loop.store.get_workload("demo", name).manifest  # type: ignore[union-attr]
    port = manifest["metadata"]["annotations"]["gpuq.dev/replica-port"]
    container = manifest["spec"]["containers"][0]
    assert container["command"][-1] == port and container["ports"][0]["containerPort"] == int(port)
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"
    assert {"name": "PORT", "value": port} in container["env"]


HPA_ON_RUNNING = {
    "apiVersion": "autoscaling/v2",
    "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "embed", "namespace": "demo"},
    "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "embed"},
        "maxReplicas": 10,
        "metrics": [
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": "vllm:num_requests_running"},
                    "target": {"type": "AverageValue", "averageValue": "2"},
                },
            }
        ],
    },
}


class _Events:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def add_event(self, *event: Any) -> None:
        self.events.append(event)


class _Measured:
    """A router that measured 3 requests outstanding on each of two ready replicas."""

    def stats(self, key: str) -> RevisionStats:
        in_flight = {"embed-0": 3, "embed-1": 3}
        return RevisionStats(key, 0, 0, in_flight, 0.0, 0, {}, (), 0.0)

    def in_flight(self, key: str, replica: str) -> int:
        return self.stats(key).in_flight[replica]


def test_the_controller_sets_the_count_the_core_sync_decides_as_the_simulator_does() -> None:
    """The observation of tests/sim/test_serving_sim.py's twin: two ready replicas, 3 requests running
    on each, an HPA targeting 2 per pod: core says 3, and so does the live controller."""
    docs = [("d.yaml", yaml.safe_dump(deployment(2))), ("h.yaml", yaml.safe_dump(HPA_ON_RUNNING))]
    (spec,), _ = build_services(load_texts(docs).manifests)
    assert spec.autoscaler is not None
    pods = (Pod("embed-0"), Pod("embed-1"))
    running = {"vllm:num_requests_running": PodMetrics({"embed-0": 3000, "embed-1": 3000})}
    core = sync(spec.autoscaler, None, 2, 2, pods, running, 15.0)
    assert core.replicas == 3

    events = _Events()
    controller = ServiceController(events, _Measured(), sync_period_s=1)  # type: ignore[arg-type]
    try:
        svc = LiveService(spec, spec.autoscaler, {}, Probe(), 30.0, 2)
        for ordinal in (0, 1):
            name = f"embed-{ordinal}"
            svc.replicas[name] = LiveReplica(
                name, ordinal, 0, 0.0, "Ready", seen=True, started_at=0.0, ready_at=0.0
            )
        controller._autoscale(svc, 15.0)
    finally:
        controller.close()
    assert svc.desired == core.replicas == 3
    assert events.events[0][5] == f"New size: 3; reason: {core.reason}"
