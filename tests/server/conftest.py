"""A control plane's API over a fresh store: SQLite in tmp_path, or PostgreSQL in a private schema.

The PostgreSQL fixtures are those of ``tests/run/conftest.py`` (one schema per test,
dropped afterwards; an unreachable server fails the test, never skips it).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpuq.run.gpus import local_node, virtual_devices
from gpuq.run.store import Store
from gpuq.server.app import create_app
from gpuq.server.auth import add_user, ensure_admin
from gpuq.server.kinds import API_PREFIX
from gpuq.server.limits import Limits
from run.conftest import postgres_admin, postgres_url  # noqa: F401  (fixtures)

with warnings.catch_warnings():  # starlette's note about httpx2; the TestClient works as documented
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

CONFIG = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: shared}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: shared}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team-b}
spec: {clusterQueue: shared}
"""
"""Quota 4 GPUs on a node of 2: a 3-GPU pod passes the quota check but fits no node."""


def job(
    name: str,
    namespace: str = "team-a",
    script: str = "print('hello')",
    *,
    gpus: int | str = 1,
    queue: str = "q",
    priority: str | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job of one pod running ``script`` with ``gpus`` GPUs."""
    labels = {"kueue.x-k8s.io/queue-name": queue}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    container = {
        "name": "main",
        "image": "python:3.11",
        "command": [sys.executable, "-c", script],
        "resources": {"requests": {"nvidia.com/gpu": gpus}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }


def dump(*documents: dict[str, Any]) -> str:
    return yaml.safe_dump_all(documents, sort_keys=False)


@dataclass
class Plane:
    """An API over a store with an admin and two members (team-a, team-b), and shortcuts to call it."""

    store: Store
    client: TestClient
    admin: str
    team_a: str
    team_b: str
    workdir: Path

    def call(self, method: str, path: str, token: str | None, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self.client.request(method, f"{API_PREFIX}{path}", headers=headers, **kwargs)

    def get(self, path: str, token: str | None, **params: Any) -> httpx.Response:
        return self.call("GET", path, token, params=params)

    def apply(self, text: str, token: str | None, **params: Any) -> httpx.Response:
        return self.call("POST", "/apply", token, content=text.encode(), params=params)

    def snapshot(self) -> tuple[int, list[Any], list[Any]]:
        """What a refused request must leave unchanged: the version, the objects, the workloads."""
        return self.store.resource_version(), self.store.list_objects(), self.store.list_workloads()


def make_plane(url: str, workdir: Path, *, configured: bool = True, limits: Limits | None = None) -> Plane:
    store = Store(url)
    store.migrate()
    admin = ensure_admin(store)
    assert admin is not None
    team_a = add_user(store, "alice", namespaces=["team-a"])
    team_b = add_user(store, "bob", namespaces=["team-b"])
    node = local_node(virtual_devices(2, "A100-80GB"), name="box", cpu_milli=16_000, memory_bytes=64 << 30)
    status = {"identity": "test", "leader": True}
    app = create_app(store, loop_status=lambda: status, nodes=[node], workdir=workdir, limits=limits)
    plane = Plane(store, TestClient(app), admin, team_a, team_b, workdir)
    if configured:
        assert plane.apply(CONFIG, admin).status_code == 200
    return plane


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[Plane]:
    """The API on SQLite, configured with :data:`CONFIG`."""
    made = make_plane(f"sqlite:///{tmp_path / 'gpuq.db'}", tmp_path / "work")
    yield made
    made.store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_plane(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Plane]:
    """The API on each backend, configured with :data:`CONFIG`."""
    url = (
        f"sqlite:///{tmp_path / 'gpuq.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    made = make_plane(url, tmp_path / "work")
    yield made
    made.store.close()
