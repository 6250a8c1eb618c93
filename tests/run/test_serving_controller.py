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

from gpuq.run.executors.local import LocalExecutor
from gpuq.run.gpus import local_node
from gpuq.run.loop import ControlLoop
from gpuq.run.serving.controller import ServiceController
from gpuq.run.serving.router import Router
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
