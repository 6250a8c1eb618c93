"""What a step of the live loop costs and when things are recorded: one commit per step, intake
from the feed (never a list of every workload), starts outside the step, the times things happened.

The executor is a fake of the port (``gpuq.run.executors.base.Executor``): its starts can be made
slow, and the tests decide when pods exit and at what time."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.run.executors.base import ExecutorError, PodExit, PodLaunch
from gpuq.run.gpus import local_node, virtual_devices
from gpuq.run.loop import ControlLoop
from gpuq.run.store import Store

CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
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
"""


class FakeExecutor:
    """The executor port in memory: ``start`` waits for ``gate`` (a slow start), exits are queued by
    the test with the time they happened."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.started: list[str] = []
        self.refuse: set[str] = set()
        self.exits: list[PodExit] = []
        self.terminated: list[str] = []
        self._lock = threading.Lock()
        self._pid = 1000

    def start(self, pod: PodLaunch) -> int:
        self.gate.wait(30)
        if pod.key in self.refuse:
            raise ExecutorError(f"{pod.key}: no such command")
        with self._lock:
            self.started.append(pod.key)
            self._pid += 1
            return self._pid

    def poll(self) -> list[PodExit]:
        with self._lock:
            exits, self.exits = self.exits, []
            return exits

    def terminate(self, key: str, grace_s: float) -> None:
        with self._lock:
            self.terminated.append(key)
            self.exits.append(PodExit(key, -15, time.time()))

    def running(self) -> set[str]:
        return set(self.started)

    def close(self) -> None:
        self.gate.set()

    def exit(self, key: str, code: int, at: float) -> None:
        with self._lock:
            self.exits.append(PodExit(key, code, at))


def job(name: str, gpus: int = 1) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "command": ["true"]}
    container["resources"] = {"requests": {"nvidia.com/gpu": gpus}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"backoffLimit": 0, "template": {"spec": {"containers": [container]}}},
    }


@pytest.fixture
def plane(tmp_path: Path):  # type: ignore[no-untyped-def]
    store = Store(f"sqlite:///{tmp_path / 'gpuq.db'}")
    store.migrate()
    for document in yaml.safe_load_all(CONFIG):
        store.apply_object(document)
    node = local_node(virtual_devices(4, "A100-80GB"), name="box", cpu_milli=16_000, memory_bytes=64 << 30)
    executor = FakeExecutor()
    loop = ControlLoop(store, executor, [node], workdir=tmp_path / "work", restart_backoff_s=0)
    yield store, loop, executor
    loop.close()
    store.close()


def submit(store: Store, name: str, at: float = 0.0, gpus: int = 1) -> None:
    store.add_workload("team-a", name, "q", "Job", job(name, gpus), 0, at or time.time())


def state(store: Store, name: str) -> str:
    record = store.get_workload("team-a", name)
    assert record is not None
    return record.state


def step_until(loop: ControlLoop, done: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        loop.step()
        if done():
            return
        time.sleep(0.01)
    raise AssertionError("timed out")


def test_a_step_commits_its_decisions_in_one_transaction(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, _ = plane
    loop.step()  # configuration, recovery
    for i in range(4):
        submit(store, f"j{i}")
    before = store.resource_version()
    loop.step()  # takes in four, admits four, binds their pods: one write
    assert store.resource_version() == before + 1
    assert {state(store, f"j{i}") for i in range(4)} == {"Admitted"}
    records = [store.get_workload("team-a", f"j{i}") for i in range(4)]
    assert all(r is not None and len(store.pods_of(r.id)) == 1 for r in records)


def test_intake_reads_the_feed_never_every_workload(plane, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    store, loop, _ = plane
    loop.step()
    listed: list[Any] = []
    original = store.list_workloads
    monkeypatch.setattr(store, "list_workloads", lambda *a, **k: listed.append(a or k) or original(*a, **k))
    for i in range(3):
        submit(store, f"j{i}")
        loop.step()
    assert {state(store, f"j{i}") for i in range(3)} <= {"Admitted", "Running"}
    assert listed == []


def test_a_slow_start_never_stalls_admission(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, executor = plane
    loop.step()
    executor.gate.clear()  # every start now hangs until released
    submit(store, "first")
    started = time.monotonic()
    loop.step()
    submit(store, "second")
    loop.step()
    assert time.monotonic() - started < 5.0  # the steps did not wait for the starts
    assert (state(store, "first"), state(store, "second")) == ("Admitted", "Admitted")
    executor.gate.set()
    step_until(loop, lambda: state(store, "first") == state(store, "second") == "Running")


def test_times_are_when_things_happened(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, executor = plane
    loop.step()
    submitted = time.time() - 50
    submit(store, "timed", at=submitted)
    step_until(loop, lambda: state(store, "timed") == "Running")
    record = store.get_workload("team-a", "timed")
    assert record is not None and record.created_at == submitted
    exited_at = time.time() - 5  # the executor saw the exit five seconds before the loop hears of it
    executor.exit("team-a/timed/main-0", 0, exited_at)
    step_until(loop, lambda: state(store, "timed") == "Succeeded")
    record = store.get_workload("team-a", "timed")
    assert record is not None and record.finished_at == exited_at
    (pod,) = store.pods_of(record.id)
    assert (pod.state, pod.finished_at, pod.exit_code) == ("Succeeded", exited_at, 0)
    assert record.started_at is not None and pod.started_at is not None and pod.started_at <= exited_at + 5


def test_a_pod_that_cannot_start_fails_its_workload(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, executor = plane
    loop.step()
    executor.refuse.add("team-a/broken/main-0")
    submit(store, "broken")
    step_until(loop, lambda: state(store, "broken") == "Failed")
    record = store.get_workload("team-a", "broken")
    assert record is not None and "cannot start: team-a/broken/main-0: no such command" in record.message


def test_a_workload_deleted_while_its_pod_starts_has_the_pod_stopped(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, executor = plane
    loop.step()
    executor.gate.clear()
    submit(store, "gone")
    loop.step()  # admitted, its start hangs
    assert store.delete_workload("team-a", "gone")
    loop.step()  # the tombstone withdraws it
    assert "team-a/gone" not in loop.tracked
    executor.gate.set()
    step_until(loop, lambda: "team-a/gone/main-0" in executor.terminated)


def test_a_deleted_workload_frees_its_quota_for_the_next(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, _ = plane
    loop.step()
    submit(store, "big", gpus=4)
    step_until(loop, lambda: state(store, "big") == "Running")
    submit(store, "next", gpus=4)
    loop.step()
    assert state(store, "next") == "Pending"
    store.delete_workload("team-a", "big")
    step_until(loop, lambda: state(store, "next") in ("Admitted", "Running"))
