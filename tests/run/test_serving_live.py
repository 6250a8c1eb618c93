"""Live services end to end: ``gpuq serve`` runs the demo model server as autoscaled replicas.

One server process (SQLite, virtual GPUs, autoscaler syncs every second). An embedding service
(Deployment + KEDA ScaledObject, 0 to 4 replicas on requests outstanding) starts at zero: the first
requests are held by the router while it activates, a bounded load scales it above one replica, and
it returns to zero after the load. A chat InferenceService splits its traffic 75/25 with a canary.
Every request must get a 200. Conditions are polled with generous timeouts, never timed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml

from gpuq.run.store import Store
from gpuq.server.kinds import API_PREFIX
from server.test_serve import Serve, servers, wait_for  # noqa: F401 - servers is a fixture

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
      resources: [{name: cpu, nominalQuota: 2}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: demo}
spec: {clusterQueue: serving}
"""


def container(model: str, delay_ms: int) -> dict[str, Any]:
    return {
        "name": "server",
        "image": "gpuq/serving-demo",
        "command": [sys.executable, "-m", "gpuq.serving_demo", "--port", "$(PORT)", "--model", model],
        "args": ["--delay-ms", str(delay_ms)],
        "ports": [{"containerPort": 8000}],
        "resources": {"requests": {"cpu": "100m"}},
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8000}, "periodSeconds": 1},
    }


def services() -> str:
    embed = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "embed", "namespace": "demo", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "embed"}},
            "template": {
                "metadata": {"labels": {"app": "embed"}},
                "spec": {"terminationGracePeriodSeconds": 10, "containers": [container("embed", 300)]},
            },
        },
    }
    scaler = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "embed", "namespace": "demo"},
        "spec": {
            "scaleTargetRef": {"name": "embed"},
            "pollingInterval": 1,
            "cooldownPeriod": 4,
            "minReplicaCount": 0,
            "maxReplicaCount": 4,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 2}}
                }
            },
            "triggers": [
                {
                    "type": "prometheus",
                    "metadata": {
                        "serverAddress": "http://prometheus:9090",
                        "query": 'sum(vllm:num_requests_running{model_name="embed"})',
                        "threshold": "2",
                    },
                }
            ],
        },
    }
    chat = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "demo", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "predictor": {
                "minReplicas": 1,
                "maxReplicas": 1,
                "canaryTrafficPercent": 25,
                "containers": [container("chat", 0)],
            }
        },
    }
    return yaml.safe_dump_all([embed, scaler, chat])


class Watcher:
    """Polls the services API in the background: (time, service, desired, ready) rows."""

    def __init__(self, serve: Serve) -> None:
        self.serve, self.rows = serve, []  # type: list[tuple[float, str, int, int]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def services(self) -> dict[str, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {self.serve.token()}"}
        body = httpx.get(f"{self.serve.url}{API_PREFIX}/services", headers=headers, timeout=10).json()
        return {s["name"]: s for s in body["items"]}

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            try:
                for name, s in self.services().items():
                    self.rows.append(
                        (time.monotonic() - start, name, s["desiredReplicas"], s["replicas"]["Ready"])
                    )
            except httpx.HTTPError:
                pass
            self._stop.wait(0.5)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


def load(
    serve: Serve, path: str, body: Callable[[int], dict[str, Any]], count: int, concurrency: int
) -> list[tuple[int, str]]:
    """``count`` requests at a fixed concurrency; each (status, revision that answered)."""
    headers = {"Authorization": f"Bearer {serve.token()}"}
    with httpx.Client(base_url=serve.url, headers=headers, timeout=180) as client:

        def one(i: int) -> tuple[int, str]:
            response = client.post(path, json=body(i))
            return response.status_code, response.headers.get("x-gpuq-revision", "")

        with ThreadPoolExecutor(concurrency) as pool:
            return list(pool.map(one, range(count)))


def test_a_service_scales_from_zero_under_load_and_back_and_a_canary_gets_its_share(
    servers: Callable[[], Serve],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    serve = servers()
    serve.start("--hpa-sync-period", "1")
    try:
        _run_scenario(serve, tmp_path)
    finally:
        replicas = _replica_pids(serve)
        if serve.process is not None and serve.process.poll() is None:
            serve.stop()  # SIGTERM: the loop stops its pods
        for pid in replicas:  # and whatever a failed stop left
            _kill_group(pid)


def _run_scenario(serve: Serve, tmp_path: Path) -> None:
    for text in (CONFIG, services()):
        applied = serve.cli("apply", "-f", str(_write(tmp_path, text)), token=serve.token())
        assert applied.returncode == 0, applied.stderr
    with Watcher(serve) as watcher:
        wait_for(lambda: watcher.services().get("embed") is not None, 60, "the services to be loaded")
        assert watcher.services()["embed"]["replicas"]["Ready"] == 0  # starts at zero
        embed = load(serve, "/services/demo/embed/v1/embeddings", lambda i: {"input": f"text {i}"}, 200, 8)
        wait_for(
            lambda: all(
                s["replicas"]["Ready"] == 1 for n, s in watcher.services().items() if n.startswith("chat")
            ),
            120,
            "chat's two revisions to be ready",
        )
        chat = load(
            serve,
            "/services/demo/chat/v1/chat/completions",
            lambda i: {
                "model": "chat",
                "messages": [{"role": "user", "content": f"hello {i}"}],
                "max_tokens": 8,
            },
            100,
            4,
        )
        wait_for(
            lambda: (
                watcher.services()["embed"]["replicas"]
                == dict.fromkeys(("Pending", "Admitted", "Starting", "Ready", "Draining"), 0)
            ),
            120,
            "embed back at zero replicas",
        )
        final = watcher.services()
    assert Counter(status for status, _ in embed) == {200: 200}
    assert Counter(status for status, _ in chat) == {200: 100}
    assert final["embed"]["requests"]["heldTotal"] > 0  # the first requests were held, not dropped
    assert final["embed"]["desiredReplicas"] == 0
    most = max(ready for _, name, _, ready in watcher.rows if name == "embed")
    assert most > 1
    share = Counter(revision for _, revision in chat)
    assert 20 <= share["chat-canary"] <= 30 and share["chat"] + share["chat-canary"] == 100
    timeline = [(round(t, 1), desired, ready) for t, name, desired, ready in watcher.rows if name == "embed"]
    print("embed (t, desired, ready):", _changes(timeline))
    print("chat revisions:", dict(share), "held from zero:", final["embed"]["requests"]["heldTotal"])
    listed = serve.cli("get", "services", token=serve.token())
    assert listed.returncode == 0 and "embed" in listed.stdout and "25% of chat" in listed.stdout, (
        listed.stderr
    )
    page = httpx.get(f"{serve.url}/dashboard/content", headers={"Authorization": f"Bearer {serve.token()}"})
    assert "Live services" in page.text and "chat-canary" in page.text
    metrics = httpx.get(f"{serve.url}/metrics", headers={"Authorization": f"Bearer {serve.token()}"}).text
    assert 'gpuq_service_requests_total{code="200",namespace="demo",service="embed"} 200.0' in metrics


def _replica_pids(serve: Serve) -> list[int]:
    store = Store(serve.database)
    try:
        return [p.pid for w in store.list_workloads() for p in store.pods_of(w.id) if p.pid]
    finally:
        store.close()


def _kill_group(pid: int) -> None:
    """SIGKILL a replica's process group if ``pid`` is still a demo server (pids are reused)."""
    try:
        if b"gpuq.serving_demo" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _changes(rows: list[tuple[float, int, int]]) -> list[tuple[float, int, int]]:
    out: list[tuple[float, int, int]] = []
    for row in rows:
        if not out or out[-1][1:] != row[1:]:
            out.append(row)
    return out


def _write(root: Path, text: str) -> Path:
    path = root / f"manifest-{abs(hash(text))}.yaml"
    path.write_text(text)
    return path
