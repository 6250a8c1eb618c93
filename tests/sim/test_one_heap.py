"""One event heap for the core engine and the hooks riding on it: the order of one instant.

Per instant the simulator applies the core events due (in (time, kind, push order)), the arrivals,
the services' wake-ups, the provisioning hooks' (those pushed at that instant meanwhile included),
then the scheduling pass, then ``after_schedule``. A core event a hook causes at that instant waits
for the next iteration of the loop, at the same time. Fake hooks log what they see.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpuq.api.loader import load
from gpuq.core.decisions import CycleResult
from gpuq.core.model import Workload
from gpuq.sim.events import Event, EventKind, EventQueue
from gpuq.sim.jobs import to_sim_jobs
from gpuq.sim.simulator import SimRun, SimSettings, Simulation
from gpuq.sim.traces.model import TraceJob

CLUSTER = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: team-a}
---
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {name: box}
spec:
  machineType: box-8g
  count: 1
  cpu: "64"
  memory: 512Gi
  gpu: {model: A100-80GB, count: 8}
"""

Action = Callable[[float, Simulation], None]


def nothing(now: float, sim: Simulation) -> None:
    pass


def seen(label: str, now: float, sim: Simulation) -> str:
    states = " ".join(f"{key.split('/')[1]}={run.status.value}" for key, run in sorted(sim.runs.items()))
    return f"{now:g} {label} [{sim.events}]: {states}"  # [core events and arrivals applied so far]


class FakeServices:
    """ServiceHooks: syncs at planned times (the event's version names the sync)."""

    def __init__(self, log: list[str], wakes: list[tuple[float, int]], actions: dict[str, Action]) -> None:
        self.log, self.wakes, self.actions = log, wakes, actions

    def template_workloads(self) -> list[Workload]:
        return []

    def start(self, sim: Simulation) -> None:
        for at, name in self.wakes:
            sim.schedule(at, EventKind.SERVICE_SYNC, version=name)

    def on_event(self, event: Event, now: float, sim: Simulation) -> None:
        label = f"sync {event.version}"
        self.actions.get(label, nothing)(now, sim)
        self.log.append(seen(label, now, sim))

    def startup_s(self, run: SimRun, now: float, default: float, sim: Simulation) -> float:
        return default

    def on_ready(self, run: SimRun, now: float) -> None:
        pass

    def on_stopped(self, run: SimRun, now: float, was_ready: bool, was_bound: bool) -> None:
        self.log.append(f"{now:g} stopped {run.job.key.split('/')[1]}")

    def filter_preemptions(self, result: CycleResult, sim: Simulation) -> CycleResult:
        return result

    def close(self, end: float) -> None:
        pass


class FakeProvisioning:
    """ProvisioningHooks: wake-ups at planned times (the event's tag names it); busy while a
    workload is left, as the provisioner counts it."""

    def __init__(
        self, log: list[str], wakes: list[tuple[float, str, bool]], actions: dict[str, Action]
    ) -> None:
        self.log, self.wakes, self.actions = log, wakes, actions
        self.sim: Simulation | None = None

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        for at, tag, background in self.wakes:
            sim.schedule(at, EventKind.PROVISIONING, tag=tag, background=background)

    def busy(self) -> bool:
        sim = self.sim
        assert sim is not None
        if len(sim.queue) or sim.arrived < len(sim.jobs):
            return True
        return any(run.ended is None for run in sim.runs.values())

    def on_event(self, event: Event, now: float, sim: Simulation) -> None:
        label = f"prov {event.tag}"
        if event.background and not self.busy():
            self.log.append(f"{now:g} {label} ignored")
            return
        self.actions.get(label, nothing)(now, sim)
        self.log.append(seen(label, now, sim))

    def after_schedule(self, now: float, sim: Simulation) -> None:
        self.log.append(seen("after_schedule", now, sim))

    def hold_checks(self, run: SimRun, checks: tuple[str, ...], now: float, sim: Simulation) -> set[str]:
        return set()

    def on_stopped(self, run: SimRun, now: float) -> None:
        pass

    def close(self, end: float, sim: Simulation) -> None:
        pass


def chain(now: float, sim: Simulation) -> None:
    sim.schedule(now, EventKind.PROVISIONING, tag="chained")


def evict_a1(now: float, sim: Simulation) -> None:
    """A Retry's eviction with its backoff over at once: the REQUEUE timer is a core event at now."""
    sim.evict("team-a/a1", now, "test", requeue_at=now)


A1, A2 = (
    TraceJob("a1", "team-a", "q", 0, 100, gpu_milli=8000),
    TraceJob("a2", "team-a", "q", 100, 10, gpu_milli=8000),
)

CASES: list[
    tuple[str, list[tuple[float, int]], list[tuple[float, str, bool]], dict[str, Action], list[str], int]
] = [
    (
        "a finish, an arrival, a sync and a provisioning wake-up at one instant, then the pass",
        [(100, 0)],
        [(100, "p", False)],
        {},
        [
            "0 after_schedule [1]: a1=Running",
            "100 stopped a1",
            "100 sync 0 [3]: a1=Succeeded a2=Pending",  # a1's finish and a2's arrival applied, not yet placed
            "100 prov p [3]: a1=Succeeded a2=Pending",
            "100 after_schedule [3]: a1=Succeeded a2=Running",  # the pass placed a2
            "110 stopped a2",
            "110 after_schedule [4]: a1=Succeeded a2=Succeeded",
        ],
        4,  # two arrivals and two finishes: the hooks' wake-ups are not counted
    ),
    (
        "each hook's wake-ups in (time, push order), whatever order they were pushed in",
        [(100, 1), (100, 0)],
        [(100, "b", False), (50, "a", False), (100, "c", False)],
        {},
        [
            "0 after_schedule [1]: a1=Running",
            "50 prov a [1]: a1=Running",
            "50 after_schedule [1]: a1=Running",
            "100 stopped a1",
            "100 sync 1 [3]: a1=Succeeded a2=Pending",
            "100 sync 0 [3]: a1=Succeeded a2=Pending",
            "100 prov b [3]: a1=Succeeded a2=Pending",
            "100 prov c [3]: a1=Succeeded a2=Pending",
            "100 after_schedule [3]: a1=Succeeded a2=Running",
            "110 stopped a2",
            "110 after_schedule [4]: a1=Succeeded a2=Succeeded",
        ],
        4,
    ),
    (
        "provisioning wake-ups pushed at now (by itself, by a sync) run in its phase, after those due",
        [(100, 9)],
        [(100, "chain", False), (100, "p", False)],
        {
            "prov chain": chain,
            "sync 9": lambda now, sim: sim.schedule(now, EventKind.PROVISIONING, tag="from-sync"),
        },
        [
            "0 after_schedule [1]: a1=Running",
            "100 stopped a1",
            "100 sync 9 [3]: a1=Succeeded a2=Pending",
            "100 prov chain [3]: a1=Succeeded a2=Pending",
            "100 prov p [3]: a1=Succeeded a2=Pending",
            "100 prov from-sync [3]: a1=Succeeded a2=Pending",
            "100 prov chained [3]: a1=Succeeded a2=Pending",
            "100 after_schedule [3]: a1=Succeeded a2=Running",
            "110 stopped a2",
            "110 after_schedule [4]: a1=Succeeded a2=Succeeded",
        ],
        4,
    ),
    (
        "a core event a provisioning wake-up causes at now waits for the next iteration, at the same now",
        [],
        [(50, "evict", False)],
        {"prov evict": evict_a1},
        [
            "0 after_schedule [1]: a1=Running",
            "50 stopped a1",
            "50 prov evict [1]: a1=Pending",
            "50 after_schedule [1]: a1=Running",  # the pass ran before the REQUEUE due at 50 ...
            "50 after_schedule [2]: a1=Running",  # ... which the next iteration, at 50 again, applied
            "100 after_schedule [4]: a1=Running a2=Pending",  # a1's cancelled finish, a2's arrival
            "150 stopped a1",
            "150 after_schedule [5]: a1=Succeeded a2=Running",
            "160 stopped a2",
            "160 after_schedule [6]: a1=Succeeded a2=Succeeded",
        ],
        6,
    ),
    (
        "a core event a sync causes at now waits too, past the provisioning wake-ups of that instant",
        [(50, 7)],
        [(50, "p", False)],
        {"sync 7": evict_a1},
        [
            "0 after_schedule [1]: a1=Running",
            "50 stopped a1",
            "50 sync 7 [1]: a1=Pending",
            "50 prov p [1]: a1=Pending",
            "50 after_schedule [1]: a1=Running",
            "50 after_schedule [2]: a1=Running",
            "100 after_schedule [4]: a1=Running a2=Pending",
            "150 stopped a1",
            "150 after_schedule [5]: a1=Succeeded a2=Running",
            "160 stopped a2",
            "160 after_schedule [6]: a1=Succeeded a2=Succeeded",
        ],
        6,
    ),
    (
        "background wake-ups keep nothing alive once no workload is left; due with other work, they run",
        [],
        [(50, "spot", True), (500, "spot-late", True), (300, "p", False), (200, "spot-idle", True)],
        {},
        [
            "0 after_schedule [1]: a1=Running",
            "50 prov spot [1]: a1=Running",
            "50 after_schedule [1]: a1=Running",
            "100 stopped a1",
            "100 after_schedule [3]: a1=Succeeded a2=Running",
            "110 stopped a2",
            "110 after_schedule [4]: a1=Succeeded a2=Succeeded",
            "300 prov spot-idle ignored",  # no instant at 200; due by 300, handed over (and ignored) then
            "300 prov p [4]: a1=Succeeded a2=Succeeded",
            "300 after_schedule [4]: a1=Succeeded a2=Succeeded",  # spot-late at 500 never comes
        ],
        4,
    ),
]


@pytest.mark.parametrize(
    ("title", "syncs", "wakes", "actions", "expected", "events"), CASES, ids=[c[0] for c in CASES]
)
def test_one_instant_applies_core_events_arrivals_syncs_provisioning_then_the_pass(
    tmp_path: Path,
    title: str,
    syncs: list[tuple[float, int]],
    wakes: list[tuple[float, str, bool]],
    actions: dict[str, Action],
    expected: list[str],
    events: int,
) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    loaded = load([str(tmp_path / "cluster.yaml")])
    assert loaded.config is not None, loaded.errors
    jobs, bad = to_sim_jobs([A1, A2], {}, loaded.gpu_catalogue, "test")
    assert not bad
    log: list[str] = []
    sim = Simulation(
        loaded.config,
        loaded.nodes,
        jobs,
        SimSettings(),
        services=FakeServices(log, syncs, actions),
        provisioning=FakeProvisioning(log, wakes, actions),
    )
    result = sim.run()
    assert log == expected, title
    assert result.events == events
    assert result.span_s == float(expected[-1].split()[0])
    assert len(sim.queue) == 0  # counts the core events only


def test_background_events_alone_end_the_run(tmp_path: Path) -> None:
    """Spot notices rescheduling themselves for ever: the run ends with the last workload."""
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    loaded = load([str(tmp_path / "cluster.yaml")])
    assert loaded.config is not None
    jobs, _ = to_sim_jobs([A1], {}, loaded.gpu_catalogue, "test")
    log: list[str] = []

    def again(now: float, sim: Simulation) -> None:
        sim.schedule(now + 30, EventKind.PROVISIONING, tag="spot", background=True)

    provisioning = FakeProvisioning(log, [(0, "spot", True)], {"prov spot": again})
    sim = Simulation(loaded.config, loaded.nodes, jobs, provisioning=provisioning)
    result = sim.run()
    assert result.span_s == 100
    assert [line.split(" [")[0] for line in log if "prov" in line] == [
        "0 prov spot",
        "30 prov spot",
        "60 prov spot",
        "90 prov spot",
    ]
    assert len(sim.queue) == 0 and sim.queue.peek_time() == 120  # left on the heap, never applied


def test_hooks_may_not_schedule_core_events(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    loaded = load([str(tmp_path / "cluster.yaml")])
    assert loaded.config is not None
    sim = Simulation(loaded.config, loaded.nodes, [])
    with pytest.raises(ValueError, match="FINISH"):
        sim.schedule(1.0, EventKind.FINISH, "x")


def test_a_phase_sets_other_kinds_aside_and_puts_them_back_in_their_place() -> None:
    queue = EventQueue()
    queue.push(5.0, EventKind.PROVISIONING, "p1")
    queue.push(5.0, EventKind.FINISH, "f1")
    queue.push(4.0, EventKind.SERVICE_SYNC, "s1")
    queue.push(6.0, EventKind.FINISH, "later")
    assert len(queue) == 2  # core events only
    taken = []
    for event in queue.due(5.0, {EventKind.PROVISIONING}):
        taken.append(event.key)
        if event.key == "p1":  # pushed while iterating: due, so taken in this phase too
            queue.push(5.0, EventKind.PROVISIONING, "p2")
            queue.push(5.0, EventKind.FINISH, "f2")
    assert taken == ["p1", "p2"]
    assert len(queue) == 3  # f1 and f2 were set aside, still counted
    assert [queue.pop().key for _ in range(4)] == ["s1", "f1", "f2", "later"]
    assert len(queue) == 0 and queue.peek_time() is None
