"""The workload lifecycle, once, table-driven: events in, the effects out compared whole.

Each case is a configuration, a list of steps (an event or a ``settle`` at a time) and the
effects expected, reduced to tuples that name the effect, its workload and what matters of it.
The simulator and the live loop each have a thin test of their own; the rules are tested here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest

from builders import cluster_queue, config, workload
from gpuq.core.admission import Scheduler
from gpuq.core.decisions import CycleResult
from gpuq.core.lifecycle import (
    Effect,
    Ended,
    IllegalTransition,
    JobPolicy,
    Lifecycle,
    Preempted,
    Released,
    Requeued,
    Reserved,
    RestartPod,
    StartPods,
    StateChanged,
    StopPods,
    Timer,
    WakeAt,
    WorkloadState,
)
from gpuq.core.lifecycle import events as ev
from gpuq.core.lifecycle.machine import LifecycleSettings
from gpuq.core.lifecycle.states import check_transition
from gpuq.core.model import CheckState, ClusterConfig, PreemptionPolicy, SchedulerConfig, WaitForPodsReady
from gpuq.core.placement.engine import Placer
from gpuq.run.gpus import local_node, virtual_devices

S = WorkloadState


@dataclass
class Recorder:
    """The hooks of a shell that applies nothing: it records, and holds the checks it is told to."""

    held: set[str] = field(default_factory=set)
    seen: list[Effect] = field(default_factory=list)

    def effect(self, effect: Effect) -> None:
        self.seen.append(effect)

    def hold_checks(self, key: str, checks: tuple[str, ...], at: float) -> set[str]:
        return {c for c in checks if c in self.held}

    def vet(self, result: CycleResult, at: float) -> CycleResult:
        return result


def short(effect: Effect) -> tuple[Any, ...] | None:
    """What a case compares: the kind, the workload without its namespace, the detail, the time."""
    key = getattr(effect, "key", "").removeprefix("default/")
    match effect:
        case Reserved():
            return ("Reserved", key, effect.state.value, effect.at)
        case StartPods():
            return ("StartPods", key, len(effect.bindings), effect.at)
        case RestartPod():
            return ("RestartPod", key, effect.pod, effect.at)
        case StateChanged():
            return ("StateChanged", key, effect.state.value, effect.at)
        case StopPods():
            return ("StopPods", key, effect.reason, effect.at)
        case Preempted():
            return ("Preempted", key, effect.by.removeprefix("default/"), effect.at)
        case Requeued():
            return ("Requeued", key, effect.reason, effect.requeue_at, effect.at)
        case Ended():
            return ("Ended", key, effect.state.value, effect.reason, effect.at)
        case WakeAt():
            return ("WakeAt", key, effect.timer.value, effect.at)
        case Released():
            return None  # node bookkeeping, asserted by the simulator's tests
    return None


def gpus(n: int, name: str, priority: int = 0, created: float = 0.0) -> Any:
    return workload(name).queue("cq").priority(priority).created(created).request(1, gpu=n).build()


def cq(quota: int = 4, *checks: str) -> Any:
    builder = cluster_queue("cq").flavor("gpu", gpu=quota).preemption(within=PreemptionPolicy.LOWER_PRIORITY)
    return builder.checks(*checks).build() if checks else builder.build()


def with_wait(cfg: ClusterConfig, limit: int | None = None) -> ClusterConfig:
    wait = WaitForPodsReady(
        enable=True, timeout_s=30, requeuing_backoff_base_s=60, requeuing_backoff_limit_count=limit
    )
    return dataclasses.replace(cfg, scheduler=SchedulerConfig(wait_for_pods_ready=wait))


def settle(at: float) -> tuple[str, float]:
    return ("settle", at)


@dataclass(frozen=True)
class Case:
    name: str
    cfg: ClusterConfig
    steps: tuple[Any, ...]
    want: tuple[tuple[Any, ...], ...]
    held: frozenset[str] = frozenset()
    nodes: bool = False
    instant: bool = True


def run(case: Case) -> list[tuple[Any, ...]]:
    placer = None
    if case.nodes:
        node = local_node(virtual_devices(8, "A100-80GB"), name="n", cpu_milli=64_000, memory_bytes=1 << 38)
        placer = Placer([node], flavors=case.cfg.flavors)
    hooks = Recorder(held=set(case.held))
    settings = LifecycleSettings(instant_stops=case.instant, restart_backoff_s=10)
    life = Lifecycle(Scheduler(case.cfg, placer), hooks, settings)
    for step in case.steps:
        if isinstance(step, tuple) and step[0] == "settle":
            life.settle(step[1])
        elif isinstance(step, tuple) and step[0] == "stale":  # a token handed out before
            _, key, timer, at, token = step
            life.handle(ev.TimerFired(key, timer, token, at))
        elif isinstance(step, tuple) and step[0] == "timer":  # the token the lifecycle last handed out
            _, key, timer, at = step
            wake = next(e for e in reversed(hooks.seen) if isinstance(e, WakeAt) and e.key == key)
            life.handle(ev.TimerFired(key, timer, wake.token, at, wake.pod))
        else:
            life.handle(step)
    return [s for e in hooks.seen if (s := short(e)) is not None]


def submit(name: str, n: int, at: float, priority: int = 0, policy: JobPolicy | None = None) -> ev.Submitted:
    return ev.Submitted(gpus(n, name, priority, at), at, policy or JobPolicy())


def limited(name: str, n: int, at: float, limit: int, past: int = 0) -> ev.Submitted:
    """A workload with ``spec.maximumExecutionTimeSeconds`` (and seconds already admitted)."""
    wl = dataclasses.replace(gpus(n, name, 0, at), maximum_execution_s=limit, past_execution_s=past)
    return ev.Submitted(wl, at, JobPolicy())


def checkpointed(name: str, n: int, at: float, interval: float) -> ev.Submitted:
    """A workload that checkpoints every ``interval`` seconds (what a preemption loses)."""
    wl = dataclasses.replace(gpus(n, name, 0, at), checkpoint_interval_s=interval)
    return ev.Submitted(wl, at, JobPolicy())


def protected(name: str, n: int, at: float, min_runtime: float) -> ev.Submitted:
    """A workload with ``gpuq.dev/min-runtime`` (preemption protection after its reservation)."""
    wl = dataclasses.replace(gpus(n, name, 0, at), min_runtime_s=min_runtime)
    return ev.Submitted(wl, at, JobPolicy())


CASES = [
    Case(
        "a workload that fits is reserved, started, runs and succeeds",
        config(cq()),
        (submit("a", 2, 0), settle(0), ev.PodsRunning("default/a", 5), ev.WorkDone("default/a", False, 50)),
        (
            ("Reserved", "a", "Admitted", 0),
            ("StartPods", "a", 0, 0),
            ("StateChanged", "a", "Running", 5),
            ("Ended", "a", "Succeeded", "JobFinished", 50),
        ),
    ),
    Case(
        "a higher-priority workload preempts; the victim is requeued and admitted again once room frees",
        config(cq()),
        (
            submit("low", 4, 0),
            settle(0),
            ev.PodsRunning("default/low", 0),
            submit("high", 4, 10, priority=100),
            settle(10),
            ev.PodsRunning("default/high", 10),
            ev.WorkDone("default/high", False, 20),
            settle(20),
        ),
        (
            ("Reserved", "low", "Admitted", 0),
            ("StartPods", "low", 0, 0),
            ("StateChanged", "low", "Running", 0),
            ("Preempted", "low", "high", 10),
            ("StopPods", "low", "Preempted", 10),
            ("Requeued", "low", "Preempted", None, 10),
            ("Reserved", "high", "Admitted", 10),
            ("StartPods", "high", 0, 10),
            ("StateChanged", "high", "Running", 10),
            ("Ended", "high", "Succeeded", "JobFinished", 20),
            ("Reserved", "low", "Admitted", 20),
            ("StartPods", "low", 0, 20),
        ),
    ),
    Case(
        "a check a controller carries out keeps the workload QuotaReserved until it is Ready",
        config(cq(4, "prov"), checks=("prov",)),
        (submit("a", 1, 0), settle(0), ev.ChecksChanged("default/a", {"prov": CheckState.READY}, 7)),
        (
            ("Reserved", "a", "QuotaReserved", 0),
            ("StateChanged", "a", "Admitted", 7),
            ("StartPods", "a", 0, 7),
        ),
        held=frozenset({"prov"}),
    ),
    Case(
        "a check nobody carries out is Ready at once",
        config(cq(4, "prov"), checks=("prov",)),
        (submit("a", 1, 0), settle(0)),
        (("Reserved", "a", "Admitted", 0), ("StartPods", "a", 0, 0)),
    ),
    Case(
        "waitForPodsReady evicts with Kueue's backoff, then deactivates past backoffLimitCount",
        with_wait(config(cq()), limit=1),
        (
            submit("a", 1, 0),
            settle(0),
            ("timer", "default/a", Timer.PODS_READY, 30),
            settle(30),
            ("timer", "default/a", Timer.REQUEUE, 90),
            settle(90),
            ("timer", "default/a", Timer.PODS_READY, 120),
        ),
        (
            ("Reserved", "a", "Admitted", 0),
            ("WakeAt", "a", "PodsReadyTimeout", 30),
            ("StartPods", "a", 0, 0),
            ("StopPods", "a", "PodsReadyTimeout", 30),
            ("Requeued", "a", "PodsReadyTimeout", 90, 30),
            ("WakeAt", "a", "Requeue", 90),
            ("Reserved", "a", "Admitted", 90),
            ("WakeAt", "a", "PodsReadyTimeout", 120),
            ("StartPods", "a", 0, 90),
            ("Ended", "a", "Inactive", "PodsReadyTimeout", 120),
        ),
    ),
    Case(
        "the PodsReady timeout counts from Admitted: a workload its checks hold is never timed out",
        with_wait(config(cq(4, "prov"), checks=("prov",))),
        (
            submit("a", 1, 0),
            settle(0),
            ev.ChecksChanged("default/a", {"prov": CheckState.READY}, 100),
            ("timer", "default/a", Timer.PODS_READY, 130),
        ),
        (
            ("Reserved", "a", "QuotaReserved", 0),
            ("StateChanged", "a", "Admitted", 100),
            ("WakeAt", "a", "PodsReadyTimeout", 130),
            ("StartPods", "a", 0, 100),
            ("StopPods", "a", "PodsReadyTimeout", 130),
            ("Requeued", "a", "PodsReadyTimeout", 190, 130),
            ("WakeAt", "a", "Requeue", 190),
        ),
        held=frozenset({"prov"}),
    ),
    Case(
        "a PodsReady timer set before the pods ran is ignored once they run",
        with_wait(config(cq())),
        (
            submit("a", 1, 0),
            settle(0),
            ev.PodsRunning("default/a", 3),
            ("timer", "default/a", Timer.PODS_READY, 30),
        ),
        (
            ("Reserved", "a", "Admitted", 0),
            ("WakeAt", "a", "PodsReadyTimeout", 30),
            ("StartPods", "a", 0, 0),
            ("StateChanged", "a", "Running", 3),
        ),
    ),
    Case(
        "a failed pod restarts after its backoff until backoffLimit, then the workload fails",
        config(cq()),
        (
            submit("a", 1, 0, policy=JobPolicy(backoff_limit=1)),
            settle(0),
            ev.PodsRunning("default/a", 0),
            ev.PodExited("default/a", "main-0", 1, 5),
            ("timer", "default/a", Timer.RESTART, 15),
            ev.PodExited("default/a", "main-0", 2, 20),
        ),
        (
            ("Reserved", "a", "Admitted", 0),
            ("StartPods", "a", 1, 0),
            ("StateChanged", "a", "Running", 0),
            ("WakeAt", "a", "Restart", 15),
            ("RestartPod", "a", "main-0", 15),
            ("Ended", "a", "Failed", "BackoffLimitExceeded", 20),
        ),
        nodes=True,
    ),
    Case(
        "a failed completion pod re-runs the whole workload while its retries last, then fails it",
        config(cq()),
        (
            submit("a", 1, 0, policy=JobPolicy(completion_pod_set="main", retries=1)),
            settle(0),
            ev.PodsRunning("default/a", 0),
            ev.PodExited("default/a", "main-0", 1, 5),
            settle(5),
            ev.PodsRunning("default/a", 6),
            ev.PodExited("default/a", "main-0", 1, 10),
        ),
        (
            ("Reserved", "a", "Admitted", 0),
            ("StartPods", "a", 1, 0),
            ("StateChanged", "a", "Running", 0),
            ("StopPods", "a", "Retrying", 5),
            ("Requeued", "a", "Retrying", None, 5),
            ("Reserved", "a", "Admitted", 5),
            ("StartPods", "a", 1, 5),
            ("StateChanged", "a", "Running", 6),
            ("Ended", "a", "Failed", "JobFailed", 10),
        ),
        nodes=True,
    ),
    Case(
        "a lost node evicts its workload once; live, the eviction ends when its pods are gone",
        config(cq()),
        (
            submit("a", 1, 0),
            settle(0),
            ev.PodsRunning("default/a", 0),
            ev.NodeLost("n", "", 5),
            settle(5),
            ev.PodExited("default/a", "main-0", -9, 6),
            settle(6),
            ev.NodesAdded(("n",), 7),
            settle(7),
        ),
        (
            ("Reserved", "a", "Admitted", 0),
            ("StartPods", "a", 1, 0),
            ("StateChanged", "a", "Running", 0),
            ("StopPods", "a", "NodeFailures", 5),
            ("Requeued", "a", "NodeFailures", None, 6),
            ("Reserved", "a", "Admitted", 6),  # quota, but no node to bind to until the node is back
            ("StartPods", "a", 1, 7),
        ),
        nodes=True,
        instant=False,
    ),
    Case(
        "a pod that cannot start fails the workload at once and releases its quota",
        config(cq(1)),
        (
            submit("a", 1, 0),
            submit("b", 1, 1),
            settle(1),
            ev.PodsRunning("default/a", 1),
            ev.PodStartFailed("default/a", "main-0", "File name too long", 1),
            settle(1),
        ),
        (
            ("Reserved", "a", "Admitted", 1),
            ("StartPods", "a", 1, 1),
            ("StateChanged", "a", "Running", 1),
            ("Ended", "a", "Failed", "StartError", 1),
            ("Reserved", "b", "Admitted", 1),
            ("StartPods", "b", 1, 1),
        ),
        nodes=True,
    ),
    Case(
        "activeDeadlineSeconds since the first start fails the workload",
        config(cq()),
        (
            submit("a", 1, 0, policy=JobPolicy(active_deadline_s=60)),
            settle(0),
            ev.PodsRunning("default/a", 5),
            ("timer", "default/a", Timer.DEADLINE, 65),
        ),
        (
            ("Reserved", "a", "Admitted", 0),
            ("StartPods", "a", 0, 0),
            ("StateChanged", "a", "Running", 5),
            ("WakeAt", "a", "ActiveDeadline", 65),
            ("Ended", "a", "Failed", "DeadlineExceeded", 65),
        ),
    ),
    Case(
        "maximumExecutionTimeSeconds: admitted that long, the workload is deactivated",
        config(cq()),
        (
            limited("a", 1, 0, 100),
            settle(0),
            ev.PodsRunning("default/a", 5),
            ("timer", "default/a", Timer.MAX_EXECUTION, 100),
        ),
        (
            ("Reserved", "a", "Admitted", 0),
            ("WakeAt", "a", "MaximumExecutionTime", 100),
            ("StartPods", "a", 0, 0),
            ("StateChanged", "a", "Running", 5),
            ("Ended", "a", "Inactive", "MaximumExecutionTimeExceeded", 100),
        ),
    ),
    Case(
        "maximumExecutionTimeSeconds sums the admissions: 30 s before a preemption leave 70 s",
        config(cq()),
        (
            limited("low", 4, 0, 100),
            settle(0),
            ev.PodsRunning("default/low", 0),
            submit("high", 4, 30.5, priority=100),
            settle(30.5),
            ev.WorkDone("default/high", False, 50),
            settle(50),
            ("timer", "default/low", Timer.MAX_EXECUTION, 120),
        ),
        (
            ("Reserved", "low", "Admitted", 0),
            ("WakeAt", "low", "MaximumExecutionTime", 100),
            ("StartPods", "low", 0, 0),
            ("StateChanged", "low", "Running", 0),
            ("Preempted", "low", "high", 30.5),
            ("StopPods", "low", "Preempted", 30.5),
            ("Requeued", "low", "Preempted", None, 30.5),
            ("Reserved", "high", "Admitted", 30.5),
            ("StartPods", "high", 0, 30.5),
            ("Ended", "high", "Succeeded", "JobFinished", 50),
            ("Reserved", "low", "Admitted", 50),
            ("WakeAt", "low", "MaximumExecutionTime", 120),
            ("StartPods", "low", 0, 50),
            ("Ended", "low", "Inactive", "MaximumExecutionTimeExceeded", 120),
        ),
    ),
    Case(
        "maximumExecutionTimeSeconds counts status.accumulatedPastExecutionTimeSeconds",
        config(cq()),
        (limited("a", 1, 0, 100, past=90), settle(0)),
        (
            ("Reserved", "a", "Admitted", 0),
            ("WakeAt", "a", "MaximumExecutionTime", 10),
            ("StartPods", "a", 0, 0),
        ),
    ),
    Case(
        "a maximumExecutionTimeSeconds timer of an earlier admission is stale",
        config(cq()),
        (
            limited("low", 4, 0, 100),
            settle(0),
            submit("high", 4, 30, priority=100),
            settle(30),
            ("stale", "default/low", Timer.MAX_EXECUTION, 100, 1),
            ev.WorkDone("default/high", False, 50),
            settle(50),
        ),
        (
            ("Reserved", "low", "Admitted", 0),
            ("WakeAt", "low", "MaximumExecutionTime", 100),
            ("StartPods", "low", 0, 0),
            ("Preempted", "low", "high", 30),
            ("StopPods", "low", "Preempted", 30),
            ("Requeued", "low", "Preempted", None, 30),
            ("Reserved", "high", "Admitted", 30),
            ("StartPods", "high", 0, 30),
            ("Ended", "high", "Succeeded", "JobFinished", 50),
            ("Reserved", "low", "Admitted", 50),
            ("WakeAt", "low", "MaximumExecutionTime", 120),
            ("StartPods", "low", 0, 50),
        ),
    ),
    Case(
        "gpuq.dev/min-runtime: a protected workload is no victim until its minimum runtime ends",
        config(cq()),
        (
            protected("low", 4, 0, 100),
            settle(0),
            ev.PodsRunning("default/low", 0),
            submit("high", 4, 10, priority=100),
            settle(10),
            ("timer", "default/low", Timer.PROTECTION, 100),
            settle(100),
        ),
        (
            ("Reserved", "low", "Admitted", 0),
            ("WakeAt", "low", "PreemptionProtection", 100),
            ("StartPods", "low", 0, 0),
            ("StateChanged", "low", "Running", 0),
            ("Preempted", "low", "high", 100),
            ("StopPods", "low", "Preempted", 100),
            ("Requeued", "low", "Preempted", None, 100),
            ("Reserved", "high", "Admitted", 100),
            ("StartPods", "high", 0, 100),
        ),
    ),
    Case(
        "gpuq.dev/min-runtime: an unprotected workload of the same queue is taken instead",
        config(cq()),
        (
            protected("old", 2, 0, 1000),
            submit("new", 2, 1),
            settle(1),
            submit("high", 2, 10, priority=100),
            settle(10),
        ),
        (
            ("Reserved", "old", "Admitted", 1),
            ("WakeAt", "old", "PreemptionProtection", 1001),
            ("StartPods", "old", 0, 1),
            ("Reserved", "new", "Admitted", 1),
            ("StartPods", "new", 0, 1),
            ("Preempted", "new", "high", 10),
            ("StopPods", "new", "Preempted", 10),
            ("Requeued", "new", "Preempted", None, 10),
            ("Reserved", "high", "Admitted", 10),
            ("StartPods", "high", 0, 10),
        ),
    ),
    *(
        Case(
            f"victim order {order}: of two equal-priority candidates, {victim} goes",
            config(dataclasses.replace(cq(), least_lost_work=order == "lost-work")),
            (
                checkpointed("ckpt", 2, 0, 100),
                settle(0),
                submit("fresh", 2, 50),
                settle(50),
                submit("high", 2, 110, priority=100),
                settle(110),
            ),
            (
                ("Reserved", "ckpt", "Admitted", 0),
                ("StartPods", "ckpt", 0, 0),
                ("Reserved", "fresh", "Admitted", 50),
                ("StartPods", "fresh", 0, 50),
                ("Preempted", victim, "high", 110),
                ("StopPods", victim, "Preempted", 110),
                ("Requeued", victim, "Preempted", None, 110),
                ("Reserved", "high", "Admitted", 110),
                ("StartPods", "high", 0, 110),
            ),
        )
        # Kueue: the most recently admitted ("fresh", 60 s lost); lost work: "ckpt" checkpointed
        # 10 s ago (110 mod 100) loses least.
        for order, victim in (("kueue", "fresh"), ("lost-work", "ckpt"))
    ),
    Case(
        "live: an eviction completes once the victim's pods are gone; other queues admit meanwhile",
        config(cq(), cluster_queue("cq2").flavor("gpu", gpu=4).build()),
        (
            submit("low", 4, 0),
            settle(0),
            ev.PodsRunning("default/low", 0),
            submit("high", 4, 10, priority=100),
            settle(10),
            ev.Submitted(workload("other").queue("cq2").created(11).request(1, gpu=1).build(), 11),
            ev.Submitted(workload("next").queue("cq").created(11).request(1, gpu=1).build(), 11),
            settle(11),
            ev.PodExited("default/low", "main-0", -15, 12),
            settle(12),
        ),
        (
            ("Reserved", "low", "Admitted", 0),
            ("StartPods", "low", 1, 0),
            ("StateChanged", "low", "Running", 0),
            ("Preempted", "low", "high", 10),
            ("StopPods", "low", "Preempted", 10),
            ("Reserved", "other", "Admitted", 11),
            ("StartPods", "other", 1, 11),
            ("Requeued", "low", "Preempted", None, 12),
            ("Reserved", "high", "Admitted", 12),
            ("StartPods", "high", 1, 12),
        ),
        nodes=True,
        instant=False,
    ),
    Case(
        "live: a victim that exits 0 once told to stop (a checkpoint saved) is requeued to resume",
        config(cq()),
        (
            submit("low", 4, 0),
            settle(0),
            ev.PodsRunning("default/low", 0),
            submit("high", 4, 10, priority=100),
            settle(10),
            ev.PodExited("default/low", "main-0", 0, 12),
            settle(12),
        ),
        (
            ("Reserved", "low", "Admitted", 0),
            ("StartPods", "low", 1, 0),
            ("StateChanged", "low", "Running", 0),
            ("Preempted", "low", "high", 10),
            ("StopPods", "low", "Preempted", 10),
            ("Requeued", "low", "Preempted", None, 12),
            ("Reserved", "high", "Admitted", 12),
            ("StartPods", "high", 1, 12),
        ),
        nodes=True,
        instant=False,
    ),
    Case(
        "live: a victim with one pod of two killed while being stopped is requeued, not finished",
        config(cq()),
        (
            ev.Submitted(workload("low").queue("cq").request(2, gpu=2).build(), 0),
            settle(0),
            ev.PodsRunning("default/low", 0),
            submit("high", 4, 10, priority=100),
            settle(10),
            ev.PodExited("default/low", "main-0", 0, 11),
            ev.PodExited("default/low", "main-1", -15, 12),
            settle(12),
        ),
        (
            ("Reserved", "low", "Admitted", 0),
            ("StartPods", "low", 2, 0),
            ("StateChanged", "low", "Running", 0),
            ("Preempted", "low", "high", 10),
            ("StopPods", "low", "Preempted", 10),
            ("Requeued", "low", "Preempted", None, 12),
            ("Reserved", "high", "Admitted", 12),
            ("StartPods", "high", 1, 12),
        ),
        nodes=True,
        instant=False,
    ),
    Case(
        "a pod of a gang that fails before the others run restarts, then fails the workload at its limit",
        config(cq()),
        (
            ev.Submitted(workload("a").queue("cq").request(2, gpu=1).build(), 0, JobPolicy(backoff_limit=1)),
            settle(0),
            ev.PodExited("default/a", "main-0", 126, 1),  # main-1 still starting: the workload is Admitted
            ("timer", "default/a", Timer.RESTART, 11),
            ev.PodsRunning("default/a", 12),
            ev.PodExited("default/a", "main-0", 126, 13),
        ),
        (
            ("Reserved", "a", "Admitted", 0),
            ("StartPods", "a", 2, 0),
            ("WakeAt", "a", "Restart", 11),
            ("RestartPod", "a", "main-0", 11),
            ("StateChanged", "a", "Running", 12),
            ("Ended", "a", "Failed", "BackoffLimitExceeded", 13),
        ),
        nodes=True,
    ),
    Case(
        "a pod of a gang that succeeds before the others run counts toward the Job's success",
        config(cq()),
        (
            ev.Submitted(workload("a").queue("cq").request(2, gpu=1).build(), 0),
            settle(0),
            ev.PodExited("default/a", "main-0", 0, 1),
            ev.PodsRunning("default/a", 2),
            ev.PodExited("default/a", "main-1", 0, 6),
        ),
        (
            ("Reserved", "a", "Admitted", 0),
            ("StartPods", "a", 2, 0),
            ("StateChanged", "a", "Running", 2),
            ("Ended", "a", "Succeeded", "JobFinished", 6),
        ),
        nodes=True,
    ),
    Case(
        "every pod succeeding ends a Job; one pod's success alone does not",
        config(cq()),
        (
            ev.Submitted(workload("a").queue("cq").request(2, gpu=1).build(), 0),
            settle(0),
            ev.PodsRunning("default/a", 0),
            ev.PodExited("default/a", "main-0", 0, 4),
            ev.PodExited("default/a", "main-1", 0, 6),
        ),
        (
            ("Reserved", "a", "Admitted", 0),
            ("StartPods", "a", 2, 0),
            ("StateChanged", "a", "Running", 0),
            ("Ended", "a", "Succeeded", "JobFinished", 6),
        ),
        nodes=True,
    ),
    Case(
        "a requested eviction that deactivates ends the workload Inactive",
        config(cq()),
        (
            submit("a", 1, 0),
            settle(0),
            ev.EvictionRequested("default/a", "check rejected", 9, deactivate=True),
        ),
        (
            ("Reserved", "a", "Admitted", 0),
            ("StartPods", "a", 0, 0),
            ("Ended", "a", "Inactive", "Deactivated", 9),
        ),
    ),
    Case(
        "a requested eviction with a backoff requeues at its time",
        config(cq()),
        (submit("a", 1, 0), settle(0), ev.EvictionRequested("default/a", "retry", 9, requeue_at=70)),
        (
            ("Reserved", "a", "Admitted", 0),
            ("StartPods", "a", 0, 0),
            ("StopPods", "a", "Evicted", 9),
            ("Requeued", "a", "Evicted", 70, 9),
            ("WakeAt", "a", "Requeue", 70),
        ),
    ),
    Case(
        "a withdrawn pending workload is forgotten and never admitted",
        config(cq(1)),
        (
            submit("a", 1, 0),
            submit("b", 1, 1),
            settle(1),
            ev.Withdrawn("default/b", "deleted", 2),
            ev.WorkDone("default/a", False, 5),
            settle(5),
        ),
        (
            ("Reserved", "a", "Admitted", 1),
            ("StartPods", "a", 0, 1),
            ("Ended", "b", "Succeeded", "Deleted", 2),
            ("Ended", "a", "Succeeded", "JobFinished", 5),
        ),
    ),
    Case(
        "a workload no LocalQueue routes is Inadmissible and takes no quota",
        config(cq()),
        (ev.Submitted(workload("a").queue("nope").request(1, gpu=1).build(), 0), settle(0)),
        (),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_lifecycle(case: Case) -> None:
    assert run(case) == list(case.want)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.SUCCEEDED, S.RUNNING),
        (S.INACTIVE, S.PENDING),
        (S.INADMISSIBLE, S.ADMITTED),
        (S.FAILED, S.SUCCEEDED),
    ],
)
def test_an_illegal_transition_is_refused(old: WorkloadState, new: WorkloadState) -> None:
    with pytest.raises(IllegalTransition):
        check_transition("ns/w", old, new)
