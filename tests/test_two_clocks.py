"""One lifecycle, two clocks: the simulator and the live loop decide the same on the same input.

For random submissions (team, size, priority, duration), the simulator and a live
:class:`~gpuq.run.loop.ControlLoop` over a SQLite store with a fake executor (pods that run for
their duration on a fake clock and stop the instant they are told to) produce the same admissions
and preemptions in the same order, and the same effects per workload at the same times.
"""

from __future__ import annotations

import dataclasses
import heapq
import sys
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuq.api.loader import load_texts
from gpuq.core.lifecycle import (
    Effect,
    Ended,
    Preempted,
    Requeued,
    Reserved,
    StartPods,
    StateChanged,
    StopPods,
)
from gpuq.run.executors.base import PodExit, PodLaunch
from gpuq.run.gpus import local_node, virtual_devices
from gpuq.run.loop import ControlLoop
from gpuq.run.store import Store
from gpuq.sim.jobs import SimJob
from gpuq.sim.simulator import Simulation

CONFIG = """
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
kind: WorkloadPriorityClass
metadata: {name: low}
value: 10
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: shared}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
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
START = 1_000_000.0  # the live clock's epoch; the simulator counts from 0


def job_doc(name: str, team: str, gpus: int, priority: str) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "python:3.11",
        "command": [sys.executable, "-c", "pass"],
        "resources": {"requests": {"nvidia.com/gpu": gpus}},
    }
    labels = {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/priority-class": priority}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": team, "labels": labels},
        "spec": {"template": {"spec": {"containers": [container], "terminationGracePeriodSeconds": 0}}},
    }


class FakeExecutor:
    """Pods that exit ``duration`` after they start, on the loop's clock; a stop is instant."""

    def __init__(self, clock: list[float], durations: dict[str, float]) -> None:
        self.clock, self.durations = clock, durations
        self.due: list[tuple[float, int, str, int]] = []
        self.alive: dict[str, int] = {}
        self.seq = 0

    def start(self, pod: PodLaunch) -> int:
        workload = pod.key.rsplit("/", 1)[0]
        self.seq += 1
        self.alive[pod.key] = self.seq
        heapq.heappush(self.due, (self.clock[0] + self.durations[workload], self.seq, pod.key, 0))
        return self.seq

    def poll(self) -> list[PodExit]:
        exits = []
        while self.due and self.due[0][0] <= self.clock[0]:
            _, seq, key, code = heapq.heappop(self.due)
            if self.alive.get(key) == seq:
                del self.alive[key]
                exits.append(PodExit(key, code, self.clock[0]))
        return exits

    def terminate(self, key: str, grace_s: float) -> None:
        seq = self.alive.get(key)
        if seq is not None:
            heapq.heappush(self.due, (self.clock[0], seq, key, -15))

    def next_due(self) -> float | None:
        live = [at for at, seq, key, _ in self.due if self.alive.get(key) == seq]
        return min(live) if live else None

    def running(self) -> set[str]:
        return set(self.alive)

    def close(self) -> None:
        self.alive.clear()


def describe(effect: Effect, origin: float) -> tuple[Any, ...] | None:
    """What must agree between the shells: the decision, its subject, its details, its time."""
    if not isinstance(effect, Reserved | StartPods | Preempted | StopPods | Requeued | StateChanged | Ended):
        return None
    at = round(effect.at - origin, 6)
    if isinstance(effect, Reserved):
        return ("Reserved", effect.key, effect.admit.cluster_queue, effect.state.value, at)
    if isinstance(effect, StartPods):
        return ("StartPods", effect.key, tuple((b.node, b.gpus) for b in effect.bindings), at)
    if isinstance(effect, Preempted):
        return ("Preempted", effect.key, effect.by, effect.reason, at)
    if isinstance(effect, StopPods | Requeued):
        return (type(effect).__name__, effect.key, effect.reason, at)
    if isinstance(effect, StateChanged):
        return ("StateChanged", effect.key, effect.state.value, at)
    return ("Ended", effect.key, effect.state.value, at)


class RecordingSimulation(Simulation):
    def effect(self, effect: Effect) -> None:
        self.seen.append(effect)
        super().effect(effect)


class RecordingLoop(ControlLoop):
    def effect(self, effect: Effect) -> None:
        self.seen.append(effect)
        super().effect(effect)


Job = tuple[str, int, str, int]  # team, gpus, priority, duration (tens of seconds)
jobs_strategy = st.lists(
    st.tuples(
        st.sampled_from(["team-a", "team-b"]),
        st.integers(1, 4),
        st.sampled_from(["high", "low"]),
        st.integers(1, 6),
    ),
    min_size=1,
    max_size=8,
)
gaps_strategy = st.lists(st.integers(0, 3), min_size=8, max_size=8)


def plan(jobs: list[Job], gaps: list[int]) -> list[tuple[float, float, dict[str, Any]]]:
    """Arrivals at whole tens of seconds, durations ending at distinct odd offsets: no two events at
    one instant but those the shells must order the same way."""
    at, planned = 0.0, []
    for index, (team, gpus, priority, tens) in enumerate(jobs):
        at += 10.0 * gaps[index]
        planned.append((at, 10.0 * tens + 1 + index / 100, job_doc(f"j{index}", team, gpus, priority)))
    return planned


def simulate(
    planned: list[tuple[float, float, dict[str, Any]]], tmp: Path, config: str = CONFIG
) -> list[Effect]:
    texts = [("config.yaml", config)] + [
        (f"j{i}.yaml", yaml.safe_dump(doc)) for i, (_, _, doc) in enumerate(planned)
    ]
    result = load_texts(texts)
    assert result.config is not None, result.diagnostics
    jobs = []
    for index, ((at, duration, doc), converted) in enumerate(zip(planned, result.workloads, strict=True)):
        name = doc["metadata"]["name"]  # the live loop names a workload after its record, as here
        workload = dataclasses.replace(converted, name=name, creation_time=at, uid=f"{index + 1:012d}")
        jobs.append(SimJob(workload, duration, float(workload.pod_sets[0].requests.get("nvidia.com/gpu", 0))))
    sim = RecordingSimulation(result.config, [node()], jobs)
    sim.seen = []
    sim.run()
    return sim.seen


def node():  # type: ignore[no-untyped-def]
    return local_node(virtual_devices(4, "A100-80GB"), name="box", cpu_milli=64_000, memory_bytes=256 << 30)


def live(planned: list[tuple[float, float, dict[str, Any]]], tmp: Path, config: str = CONFIG) -> list[Effect]:
    store = Store(f"sqlite:///{tmp / 'gpuq.db'}")
    store.migrate()
    for document in yaml.safe_load_all(config):
        store.apply_object(document)
    clock = [START]
    durations = {f"{doc['metadata']['namespace']}/{doc['metadata']['name']}": d for _, d, doc in planned}
    executor = FakeExecutor(clock, durations)
    # Starts on the loop's thread: the fake clock only stands still for a step's own work.
    loop = RecordingLoop(
        store, executor, [node()], workdir=tmp / "work", clock=lambda: clock[0], start_threads=0
    )
    loop.seen = []
    arrivals = list(planned)
    try:
        for _ in range(10_000):
            due = executor.next_due()
            upcoming = [START + arrivals[0][0]] if arrivals else []
            timer = loop._timers[0][0] if loop._timers else None  # the lifecycle's next WakeAt
            times = [t for t in (*upcoming, due, timer) if t is not None]
            if not times:
                break
            clock[0] = max(clock[0], min(times))
            while arrivals and START + arrivals[0][0] <= clock[0]:
                at, _, doc = arrivals.pop(0)
                meta = doc["metadata"]
                store.add_workload(meta["namespace"], meta["name"], "q", "Job", doc, 0, START + at)
            for _ in range(100):  # settle this instant: stops reported, then the next cycle
                loop.step()
                if executor.next_due() != clock[0] and not (loop.life is not None and loop.life.dirty):
                    break
        else:
            raise AssertionError("the live run did not end")
    finally:
        loop.close()
        store.close()
    return loop.seen


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=jobs_strategy, gaps=gaps_strategy)
def test_the_simulator_and_the_live_loop_decide_the_same(
    jobs: list[Job], gaps: list[int], tmp_path_factory
) -> None:  # type: ignore[no-untyped-def]
    planned = plan(jobs, gaps)
    tmp = tmp_path_factory.mktemp("live")
    simulated = [d for e in simulate(planned, tmp) if (d := describe(e, 0.0)) is not None]
    lived = [d for e in live(planned, tmp) if (d := describe(e, START)) is not None]
    decisions = ("Reserved", "Preempted")
    assert [d for d in lived if d[0] in decisions] == [d for d in simulated if d[0] in decisions]
    for key in {d[1] for d in simulated} | {d[1] for d in lived}:
        assert [d for d in lived if d[1] == key] == [d for d in simulated if d[1] == key], key


AFS_CONFIG = (
    CONFIG.replace(
        "  preemption: {withinClusterQueue: LowerPriority}\n",
        "  preemption: {withinClusterQueue: LowerPriority}\n"
        "  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}\n",
    )
    + """---
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
metadata: {name: kueue}
admissionFairSharing: {usageHalfLifeTime: 30s, usageSamplingInterval: 10s}
"""
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=jobs_strategy, gaps=gaps_strategy)
def test_admission_fair_sharing_decides_the_same_on_both_clocks(
    jobs: list[Job], gaps: list[int], tmp_path_factory
) -> None:  # type: ignore[no-untyped-def]
    """The usage decays on simulated time in one shell and on the (fake) wall clock in the other."""
    assert "admissionScope" in AFS_CONFIG
    planned = plan(jobs, gaps)
    tmp = tmp_path_factory.mktemp("live")
    simulated = [d for e in simulate(planned, tmp, AFS_CONFIG) if (d := describe(e, 0.0)) is not None]
    lived = [d for e in live(planned, tmp, AFS_CONFIG) if (d := describe(e, START)) is not None]
    decisions = ("Reserved", "Preempted")
    assert [d for d in lived if d[0] in decisions] == [d for d in simulated if d[0] in decisions]


def test_a_light_local_queue_goes_ahead_of_a_busy_one_on_both_clocks(tmp_path: Path) -> None:
    """team-a holds the GPUs and queues two more; team-b's later job is admitted before them with
    Admission Fair Sharing (and after them without), in the simulator and on the live loop alike."""
    jobs = [
        ("team-a", 4, "low", 3),
        ("team-a", 2, "low", 3),
        ("team-a", 2, "low", 3),
        ("team-b", 2, "low", 3),
    ]
    planned = plan(jobs, [0, 1, 1, 1, 0, 0, 0, 0])
    (tmp_path / "off").mkdir()
    (tmp_path / "on").mkdir()

    def reserved(effects: list[Effect], origin: float) -> list[str]:
        return [d[1] for e in effects if (d := describe(e, origin)) is not None and d[0] == "Reserved"]

    fifo = reserved(simulate(planned, tmp_path / "off"), 0.0)
    simulated = reserved(simulate(planned, tmp_path / "on", AFS_CONFIG), 0.0)
    lived = reserved(live(planned, tmp_path / "on", AFS_CONFIG), START)
    assert fifo == ["team-a/j0", "team-a/j1", "team-a/j2", "team-b/j3"]
    assert simulated == lived == ["team-a/j0", "team-b/j3", "team-a/j1", "team-a/j2"]
