"""Admission Fair Sharing on ``gpuq serve``: the usage decays on the wall clock the loop reads, and
``GET /localqueues`` shows it as Kueue's ``status.fairSharing.admissionFairSharingStatus``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from gpuq.run.gpus import local_node, virtual_devices
from gpuq.run.loop import ControlLoop
from gpuq.run.store import Store
from gpuq.server.app import create_app
from gpuq.server.auth import ensure_admin
from gpuq.server.kinds import API_PREFIX
from gpuq.server.runner import fair_sharing_status
from server.conftest import TestClient
from test_two_clocks import FakeExecutor

CONFIG = """
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
metadata: {name: kueue}
admissionFairSharing: {usageHalfLifeTime: 60s, usageSamplingInterval: 10s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: shared}
spec:
  namespaceSelector: {}
  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: shared, fairSharing: {weight: "1"}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team-b}
spec: {clusterQueue: shared}
"""
START = 1_750_000_000.0  # 2025-06-15T15:06:40Z


def job_doc(name: str, gpus: int, namespace: str = "team-a") -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "python:3.11",
        "command": [sys.executable, "-c", "pass"],
        "resources": {"requests": {"nvidia.com/gpu": gpus}},
    }
    labels = {"kueue.x-k8s.io/queue-name": "q"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"template": {"spec": {"containers": [container], "terminationGracePeriodSeconds": 0}}},
    }


def test_local_queue_usage_decays_on_the_wall_clock_and_shows_in_its_status(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'gpuq.db'}")
    store.migrate()
    admin = ensure_admin(store)
    for document in yaml.safe_load_all(CONFIG):
        store.apply_object(document)
    clock = [START]
    executor = FakeExecutor(clock, {"team-a/train": 3600.0, "team-a/sweep": 60.0, "team-b/eval": 60.0})
    node = local_node(virtual_devices(4, "A100-80GB"), name="box", cpu_milli=64_000, memory_bytes=256 << 30)
    loop = ControlLoop(
        store, executor, [node], workdir=tmp_path / "work", clock=lambda: clock[0], start_threads=0
    )
    app = create_app(store, nodes=[node], fair_sharing=lambda: fair_sharing_status(loop))
    client = TestClient(app)

    def status() -> dict[str, Any]:
        response = client.get(f"{API_PREFIX}/localqueues", headers={"Authorization": f"Bearer {admin}"})
        assert response.status_code == 200, response.text
        team_a = next(i for i in response.json()["items"] if i["namespace"] == "team-a")
        return team_a["status"]["fairSharing"]["admissionFairSharingStatus"]

    def pending() -> list[str]:
        path = f"{API_PREFIX}/clusterqueues/shared/pendingworkloads"
        response = client.get(path, headers={"Authorization": f"Bearer {admin}"})
        assert response.status_code == 200, response.text
        return [f"{i['namespace']}/{i['name']}" for i in response.json()["items"]]

    try:
        store.add_workload("team-a", "train", "q", "Job", job_doc("train", 2), 0, START)
        loop.step()
        charged = status()  # the entry penalty, settled on admission: 2 GPUs x (1 - 0.5^(10/60))
        clock[0] = START + 10.0
        loop.step()  # the sampling timer fires on the loop's clock
        sampled = status()
        store.add_workload("team-a", "sweep", "q", "Job", job_doc("sweep", 4), 0, START + 11)
        store.add_workload("team-b", "eval", "q", "Job", job_doc("eval", 4, "team-b"), 0, START + 12)
        loop.step()
        order = pending()  # team-b's LocalQueue has used nothing: its later workload goes first
    finally:
        loop.close()
        store.close()
    assert charged == {"consumedResources": {"nvidia.com/gpu": "218m"}, "lastUpdate": "2025-06-15T15:06:40Z"}
    assert order == ["team-b/eval", "team-a/sweep"]
    assert sampled == {"consumedResources": {"nvidia.com/gpu": "413m"}, "lastUpdate": "2025-06-15T15:06:50Z"}
