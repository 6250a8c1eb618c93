"""The discrete-event simulator: the core engine driven by a simulated clock.

Each instant, the events due are applied in a fixed order (finishes, node
changes, starts, timeouts, requeues, arrivals); then, only if one of them could
let a workload be admitted or placed, a scheduling pass runs Kueue cycles with
the same :class:`~gpuq.core.admission.Scheduler` ``gpuq admit`` and ``gpuq
serve`` use, until they stop changing anything. Admitted pods are bound by the
:class:`~gpuq.core.placement.engine.Placer`; a workload runs once every pod is
bound (plus the start-up delay) and finishes ``duration`` of work later.

Preemption and node loss evict: the work since the workload's last checkpoint
is lost, and it goes back to its queue (Kueue requeues evicted workloads at
once; after a waitForPodsReady timeout it waits out Kueue's backoff first).

A workload with a checkpoint interval ``I`` and a checkpoint cost ``c`` pauses ``c`` seconds
after every ``I`` seconds of work (not after its last piece): ``R`` seconds of work take
``R + c * (ceil(R / I) - 1)``; evicted ``t`` seconds into a run it keeps ``floor(t / (I + c)) * I``
seconds of work and loses the rest of ``t``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import pairwise
from typing import Protocol

from gpuq.core.admission import Scheduler
from gpuq.core.cycles import FlappingDetector
from gpuq.core.decisions import Admit, CycleResult
from gpuq.core.model import CheckState, ClusterConfig, Workload
from gpuq.core.nodes import Node
from gpuq.core.placement.engine import Placer, PodBinding
from gpuq.core.placement.scoring import inputs_for
from gpuq.core.quota import FlavorResource
from gpuq.sim.events import EventKind, EventQueue
from gpuq.sim.jobs import SimJob
from gpuq.sim.recorder import Recorder

MAX_CYCLES_PER_PASS = 100_000


class JobStatus(StrEnum):
    PENDING = "Pending"  # waiting in its queue
    ADMITTED = "Admitted"  # holds quota; pods not all bound or still starting
    RUNNING = "Running"
    FINISHED = "Finished"
    FAILED = "Failed"
    DEACTIVATED = "Deactivated"  # waitForPodsReady backoff limit reached
    INADMISSIBLE = "Inadmissible"  # no queue routes it (missing LocalQueue, stopped queue...)


@dataclass(frozen=True, slots=True)
class NodeChange:
    """Nodes leaving or joining at ``time``: named nodes, or ``count`` nodes of ``pool``."""

    time: float
    action: str  # "add" | "remove"
    nodes: tuple[str, ...] = ()
    pool: str | None = None
    count: int = 0


@dataclass(frozen=True, slots=True)
class SimSettings:
    horizon_s: float | None = None  # stop at this simulated time (None: when nothing is left to do)
    startup_s: float = 0.0  # from all pods bound to running (image pull, container start)
    policy: str = "binpack"
    checkpoint_s: float | None = None  # default checkpoint interval for workloads without one
    node_changes: tuple[NodeChange, ...] = ()


@dataclass(frozen=True, slots=True)
class Resident:
    """A workload that already holds quota when the simulation starts (a forecast from live state).

    ``job.workload`` carries its admission; ``bindings`` say where its pods run (empty:
    bound anew, or left waiting for room); ``started``: its pods run, else they start
    after the start-up delay; ``remaining_s``: the work left from time 0.
    """

    job: SimJob
    remaining_s: float
    bindings: tuple[PodBinding, ...] = ()
    started: bool = True


@dataclass(slots=True)
class JobRun:
    """The mutable life of one simulated workload."""

    job: SimJob
    status: JobStatus = JobStatus.PENDING
    cluster_queue: str | None = None
    remaining_s: float = 0.0
    first_admitted: float | None = None
    first_bound: float | None = None  # every pod first had a node: the end of queueing
    first_started: float | None = None
    ended: float | None = None
    bound_at: float | None = None  # pods bound since
    started_at: float | None = None  # running since
    version: int = 0
    preempted: int = 0
    evictions: int = 0
    ready_timeouts: int = 0
    gpu_s: float = 0.0  # GPU-seconds held by running pods, lost work included
    lost_gpu_s: float = 0.0
    checkpoints: int = 0  # checkpoints written (and completed)
    checkpoint_overhead_s: float = 0.0  # wall seconds the run paused to write them
    cost: float = 0.0
    usage: Mapping[FlavorResource, int] = field(default_factory=dict)
    reason: str = ""  # the last eviction or why it never ran
    held: bool = False  # holds quota, an admission check the provisioning hooks own is not Ready yet

    @property
    def checkpoint_s(self) -> float | None:
        return self.job.checkpoint_s


class ServiceHooks(Protocol):
    """Autoscaled services riding on the simulation (:class:`gpuq.sim.serving.ServingFleet`).

    They submit and withdraw replica workloads through :meth:`Simulation.submit` and
    :meth:`Simulation.withdraw`, and are told when a replica is bound, ready or stopped.
    """

    def template_workloads(self) -> list[Workload]: ...
    def start(self, sim: Simulation) -> None: ...
    def next_time(self) -> float | None: ...
    def on_time(self, now: float, sim: Simulation) -> None: ...
    def startup_s(self, run: JobRun, now: float, default: float, sim: Simulation) -> float: ...
    def on_ready(self, run: JobRun, now: float) -> None: ...
    def on_stopped(self, run: JobRun, now: float, was_ready: bool, was_bound: bool) -> None: ...
    def filter_preemptions(self, result: CycleResult, sim: Simulation) -> CycleResult: ...
    def close(self, end: float) -> None: ...


class ProvisioningHooks(Protocol):
    """Node provisioning riding on the simulation (:class:`gpuq.sim.provisioning.Provisioner`):
    autoscaled pools, ProvisioningRequest admission checks, spot interruptions. Nodes join and leave
    through :meth:`Simulation.add_node` and :meth:`Simulation.remove_node`."""

    def start(self, sim: Simulation) -> None: ...
    def next_time(self) -> float | None: ...
    def on_time(self, now: float, sim: Simulation) -> None: ...
    def after_schedule(self, now: float, sim: Simulation) -> None: ...
    def hold_checks(self, run: JobRun, checks: tuple[str, ...], now: float, sim: Simulation) -> set[str]: ...
    def on_stopped(self, run: JobRun, now: float) -> None: ...
    def close(self, end: float, sim: Simulation) -> None: ...


@dataclass
class SimResult:
    runs: dict[str, JobRun]
    recorder: Recorder
    span_s: float
    events: int
    passes: int
    cycles: int
    gpus_total: float
    services: ServiceHooks | None = None


class Simulation:
    """One run of one configuration over one list of workloads."""

    def __init__(
        self,
        config: ClusterConfig,
        nodes: Sequence[Node],
        jobs: Sequence[SimJob],
        settings: SimSettings = SimSettings(),
        *,
        prices: Mapping[str, float] | None = None,
        initially_down: Sequence[str] = (),
        on_progress: Callable[[float], None] | None = None,
        residents: Sequence[Resident] = (),
        probes: Sequence[float] = (),
        on_probe: Callable[[float, Simulation], None] | None = None,
        stop_when: Callable[[Simulation], bool] | None = None,
        services: ServiceHooks | None = None,
        provisioning: ProvisioningHooks | None = None,
    ) -> None:
        """``probes``: sorted simulated times at which ``on_probe(t, simulation)`` sees the state, once
        each, before the events of the first instant at or after ``t`` are applied (a live system
        looking at the cluster at ``t``); probes after the simulated span are not called."""
        if any(b < a for a, b in pairwise(probes)):
            raise ValueError("probes must be sorted")
        self.config = config
        self.settings = settings
        self.placer = (
            Placer(
                nodes,
                policy=settings.policy,
                policy_inputs=inputs_for(
                    [job.workload for job in jobs]
                    + [r.job.workload for r in residents]
                    + (services.template_workloads() if services is not None else [])
                ),
                flavors=config.flavors,
                topologies=config.topologies,
            )
            if nodes
            else None
        )
        self.scheduler = Scheduler(config, self.placer)
        if self.scheduler.binder is not None:
            self.scheduler.binder.explain_failures = False
        self.recorder = Recorder(config)
        self.queue = EventQueue()
        self.jobs = sorted(jobs, key=lambda j: (j.workload.creation_time, j.workload.uid, j.key))
        self.runs: dict[str, JobRun] = {}
        self.prices = dict(prices or {})
        self._pool_nodes: dict[str, list[str]] = {}
        for node in nodes:
            if node.pool:
                self._pool_nodes.setdefault(node.pool, []).append(node.name)
        self._down = set(initially_down)
        self._residents = tuple(residents)
        self._on_progress = on_progress
        self._probes = tuple(probes) if on_probe is not None else ()
        self._on_probe = on_probe
        self._stop_when = stop_when
        self.services = services
        self.provisioning = provisioning
        self.stopped_at: float | None = None
        self.first_admissions = 0  # workloads admitted for the first time (residents not counted)
        self._next_probe = 0
        self._next_arrival = 0
        self._dirty = False
        self.passes = self.cycles = self.events = 0
        self._now = 0.0
        wait = config.scheduler.wait_for_pods_ready
        self._ready_timeout = wait.timeout_s if wait.enable else None

    # ------------------------------------------------------------------- run
    def run(self) -> SimResult:
        if self.placer is not None:
            for name, capacity in self.placer.nodes.items():
                if name in self._down:
                    self.placer.set_down(name, True)
                else:
                    self.recorder.node_up(0.0, capacity, self.prices.get(name, 0.0))
        self._seed_residents()
        if self.services is not None:
            self.services.start(self)
        if self.provisioning is not None:
            self.provisioning.start(self)
        for index, change in enumerate(self.settings.node_changes):
            kind = EventKind.NODE_DOWN if change.action == "remove" else EventKind.NODE_UP
            self.queue.push(change.time, kind, str(index))
        horizon = self.settings.horizon_s
        last = 0.0
        while True:
            now = self._next_time()
            if now is None or (horizon is not None and now > horizon):
                break
            if self._next_probe < len(self._probes):
                self._probe(now)
            self._now = last = now
            self._apply_due(now)
            if self.services is not None:
                self.services.on_time(now, self)
            if self.provisioning is not None:
                self.provisioning.on_time(now, self)
            if self._dirty:
                self._dirty = False
                self._schedule(now)
            if self.provisioning is not None:
                self.provisioning.after_schedule(now, self)
            if self._stop_when is not None and self._stop_when(self):
                self.stopped_at = now
                break
            if self._on_progress is not None:
                self._on_progress(now)
        end = horizon if horizon is not None and self.stopped_at is None else last
        if self._next_probe < len(self._probes):
            self._probe(end)
        self._close(end)
        capacity_mean = (
            self.recorder.capacity.integral(end) / end if end > 0 else self.recorder.capacity.value
        )
        return SimResult(
            self.runs, self.recorder, end, self.events, self.passes, self.cycles, capacity_mean, self.services
        )

    @property
    def now(self) -> float:
        """The instant whose events were applied last."""
        return self._now

    @property
    def arrived(self) -> int:
        """How many of ``jobs`` (in arrival order) have arrived."""
        return self._next_arrival

    @property
    def down(self) -> frozenset[str]:
        """Nodes out of service now."""
        return frozenset(self._down)

    def is_down(self, node: str) -> bool:
        """Whether ``node`` is out of service now (without copying :attr:`down`)."""
        return node in self._down

    def _probe(self, until: float) -> None:
        """Show the state to every probe due at or before ``until`` (the next instant)."""
        assert self._on_probe is not None
        probes = self._probes
        while self._next_probe < len(probes) and probes[self._next_probe] <= until:
            at = probes[self._next_probe]
            self._next_probe += 1
            self._on_probe(at, self)

    def _seed_residents(self) -> None:
        """Time 0 of a simulation that starts from a running cluster: residents hold their quota and
        nodes (workloads created before 0 arrive at 0, in their creation order, like a queue)."""
        for resident in self._residents:
            job = resident.job
            admission = job.workload.admission
            assert admission is not None, f"{job.key}: a resident must carry its admission"
            run = JobRun(job, status=JobStatus.ADMITTED, remaining_s=resident.remaining_s)
            run.first_admitted = min(job.workload.quota_reserved_time or 0.0, 0.0)
            self.runs[job.key] = run
            self.scheduler.submit(job.workload, placed=resident.bindings or None)
            admitted = self.scheduler.state.admitted.get(job.key)
            if admitted is None:  # its queue is gone or drains: it queues again
                run.first_admitted = None
                run.cluster_queue = self.scheduler.route(job.workload)[0]
                if run.cluster_queue is None:
                    run.status = JobStatus.INADMISSIBLE
                else:
                    self.recorder.team_pending(0.0, job.team, 1)
                continue
            run.cluster_queue = admitted.cluster_queue
            run.usage = admitted.usage
            self.recorder.queue_usage(0.0, run.cluster_queue, run.usage, 1)
            self.recorder.team_pending(0.0, job.team, 1)
            if job.key in self.scheduler.unplaced:
                continue
            if resident.started:
                run.first_bound = run.first_started = min(job.workload.quota_reserved_time or 0.0, 0.0)
                run.bound_at = 0.0
                self.recorder.team_pending(0.0, job.team, -1)
                self._nodes_changed(job.key, 0.0)
                self.recorder.team_running(0.0, job.team, job.gpus)
                self._running(run, 0.0)
            else:
                self._bound(run, 0.0)
        if self._residents:
            self._dirty = True

    def _next_time(self) -> float | None:
        queued = self.queue.peek_time()
        if self.services is not None and (wake := self.services.next_time()) is not None:
            queued = wake if queued is None else min(queued, wake)
        if self.provisioning is not None and (wake := self.provisioning.next_time()) is not None:
            queued = wake if queued is None else min(queued, wake)
        arrival = (
            max(self.jobs[self._next_arrival].workload.creation_time, 0.0)
            if self._next_arrival < len(self.jobs)
            else None
        )
        if queued is None:
            return arrival
        if arrival is None:
            return queued
        return min(queued, arrival)

    def _apply_due(self, now: float) -> None:
        while (at := self.queue.peek_time()) is not None and at <= now:
            event = self.queue.pop()
            if event.kind > EventKind.ARRIVAL:
                break
            self.events += 1
            self._handle(event.kind, event.key, event.version, now)
        while (
            self._next_arrival < len(self.jobs)
            and self.jobs[self._next_arrival].workload.creation_time <= now
        ):
            self._arrive(self.jobs[self._next_arrival], now)
            self._next_arrival += 1
            self.events += 1

    def _handle(self, kind: EventKind, key: str, version: int, now: float) -> None:
        if kind in (EventKind.NODE_DOWN, EventKind.NODE_UP):
            self._change_nodes(self.settings.node_changes[int(key)], now)
            return
        run = self.runs.get(key)
        if run is None or run.version != version:
            return  # cancelled
        if kind == EventKind.FINISH:
            self._finish(run, now)
        elif kind == EventKind.STARTED:
            self._running(run, now)
        elif kind == EventKind.PODS_READY_TIMEOUT:
            self._pods_ready_timeout(run, now)
        elif kind == EventKind.REQUEUE:
            assert run.cluster_queue is not None
            self.scheduler.queues[run.cluster_queue].requeue_inadmissible()
            self._dirty = True

    # -------------------------------------------------------------- arrivals
    def _arrive(self, job: SimJob, now: float) -> None:
        run = JobRun(job, remaining_s=job.duration_s)
        self.runs[job.key] = run
        target, why = self.scheduler.route(job.workload)
        if target is None:
            run.status, run.reason = JobStatus.INADMISSIBLE, why
            return
        run.cluster_queue = target
        self.scheduler.submit(job.workload)
        self.recorder.team_pending(now, job.team, 1)
        self._dirty = True
        backoff = job.workload.requeue_at
        if backoff is not None and backoff > now:  # a requeue backoff still running: it waits until then
            self.queue.push(backoff, EventKind.REQUEUE, job.key, run.version)

    # ------------------------------------------------------------- scheduling
    def _schedule(self, now: float) -> None:
        self.passes += 1
        detector = FlappingDetector()
        scheduler = self.scheduler
        for _ in range(MAX_CYCLES_PER_PASS):
            before = scheduler.active_count()
            result, entries = scheduler.plan_cycle(now)
            if not entries:
                return
            self.cycles += 1
            if self.services is not None:  # disruption budgets protect serving replicas
                result = self.services.filter_preemptions(result, self)
            scheduler.apply(result, entries, now)
            for decision in result.admitted:
                self._admitted(decision, now)
            for eviction in result.preempted:
                self._evict(
                    self.runs[eviction.workload], now, f"Preempted by {eviction.by} ({eviction.reason})"
                )
            if not result.changed and scheduler.active_count() == before:
                return
            if detector.observe(result) is not None:
                return

    def _admitted(self, decision: Admit, now: float) -> None:
        run = self.runs[decision.workload]
        if decision.checks_pending:
            # Admission checks pass at once (the capacity they stand for is modelled by the nodes),
            # except those the provisioning hooks carry out (ProvisioningRequests): they stay Pending.
            held = (
                self.provisioning.hold_checks(run, decision.checks_pending, now, self)
                if self.provisioning is not None
                else set()
            )
            self.scheduler.reserved_checks[decision.workload] = {
                name: CheckState.PENDING if name in held else CheckState.READY
                for name in decision.checks_pending
            }
            run.held = bool(held)
        run.status = JobStatus.ADMITTED
        run.version += 1
        if run.first_admitted is None:
            run.first_admitted = now
            self.first_admissions += 1
        admitted = self.scheduler.state.admitted[decision.workload]
        run.usage = admitted.usage
        self.recorder.queue_usage(now, decision.cluster_queue, run.usage, 1)
        if self._ready_timeout is not None:
            self.queue.push(now + self._ready_timeout, EventKind.PODS_READY_TIMEOUT, run.job.key, run.version)
        if decision.workload not in self.scheduler.unplaced and not run.held:
            self._bound(run, now)

    def _bound(self, run: JobRun, now: float) -> None:
        """Every pod of ``run`` has a node: hold the GPUs, start after the start-up delay."""
        run.bound_at = now
        self.recorder.team_pending(now, run.job.team, -1)
        if run.first_bound is None:
            run.first_bound = now
        self._nodes_changed(run.job.key, now)
        self.recorder.team_running(now, run.job.team, run.job.gpus)
        startup = self.settings.startup_s
        if self.services is not None:  # a serving replica's cold start
            startup = self.services.startup_s(run, now, startup, self)
        if startup > 0:
            self.queue.push(now + startup, EventKind.STARTED, run.job.key, run.version)
        else:
            self._running(run, now)

    def _running(self, run: JobRun, now: float) -> None:
        run.status = JobStatus.RUNNING
        run.started_at = now
        if run.first_started is None:
            run.first_started = now
        if self.services is not None:
            self.services.on_ready(run, now)
        if math.isfinite(run.remaining_s):  # serving replicas run until withdrawn
            self.queue.push(now + self.wall_s(run), EventKind.FINISH, run.job.key, run.version)

    def _checkpointing(self, run: JobRun) -> tuple[float | None, float]:
        """``(interval, cost)`` of ``run``'s checkpoints in seconds (the scenario's default interval)."""
        return run.checkpoint_s or self.settings.checkpoint_s, run.job.checkpoint_cost_s

    def _checkpoints_in(self, run: JobRun, work_s: float) -> int:
        """Checkpoints written while doing ``work_s`` seconds of work (none after the last piece)."""
        interval, cost = self._checkpointing(run)
        if not interval or not cost or not math.isfinite(work_s) or work_s <= 0:
            return 0
        return max(math.ceil(round(work_s / interval, 9)) - 1, 0)

    def wall_s(self, run: JobRun) -> float:
        """Seconds ``run``'s remaining work takes once running, checkpoint pauses included."""
        return run.remaining_s + self._checkpoints_in(run, run.remaining_s) * run.job.checkpoint_cost_s

    def _nodes_changed(self, key: str, now: float) -> None:
        if self.placer is None:
            return
        placement = self.placer.placements.get(key)
        if placement is None:
            return
        nodes = self.placer.nodes
        for name in dict.fromkeys(b.node for b in placement.bindings):
            self.recorder.node_changed(now, nodes[name])

    # ------------------------------------------------------------- stopping
    def _stop(self, run: JobRun, now: float) -> float:
        """Release what ``run`` holds (GPU time and cost accounted); the seconds it ran."""
        ran = now - run.started_at if run.started_at is not None else 0.0
        if self.services is not None:
            self.services.on_stopped(run, now, run.status == JobStatus.RUNNING, run.bound_at is not None)
        if self.provisioning is not None:
            self.provisioning.on_stopped(run, now)
        if run.bound_at is not None:
            held = now - run.bound_at
            run.gpu_s += held * run.job.gpus
            run.cost += self._cost(run.job.key, held)
            self.recorder.team_running(now, run.job.team, -run.job.gpus)
        assert run.cluster_queue is not None
        self.recorder.queue_usage(now, run.cluster_queue, run.usage, -1)
        run.bound_at = run.started_at = None
        run.version += 1
        return ran

    def _cost(self, key: str, held_s: float) -> float:
        if self.placer is None or held_s <= 0:
            return 0.0
        placement = self.placer.placements.get(key)
        if placement is None:
            return 0.0
        total = 0.0
        for binding in placement.bindings:
            shape, _ = self.placer.nodes[binding.node].bound[binding.pod]
            share = shape.gpu.total_milli / 1000
            total += share * self.recorder.price_per_gpu_hour(binding.node)
        return total * held_s / 3600

    def _finish(self, run: JobRun, now: float) -> None:
        written = self._checkpoints_in(run, run.remaining_s)
        run.checkpoints += written
        run.checkpoint_overhead_s += written * run.job.checkpoint_cost_s
        self._stop(run, now)
        run.remaining_s = 0.0
        run.status = JobStatus.FAILED if run.job.failed else JobStatus.FINISHED
        run.ended = now
        self._released(run.job.key, now, lambda: self.scheduler.finish(run.job.key))

    def _evict(self, run: JobRun, now: float, reason: str, requeue_at: float | None = None) -> None:
        was_bound = run.bound_at is not None
        ran = self._stop(run, now)
        checkpoint, cost = self._checkpointing(run)
        if cost and checkpoint:  # k checkpoints completed: k intervals of work kept, k pauses spent
            written = math.floor(ran / (checkpoint + cost))
            run.remaining_s -= written * checkpoint
            run.lost_gpu_s += (ran - written * (checkpoint + cost)) * run.job.gpus
            run.checkpoints += written
            run.checkpoint_overhead_s += written * cost
        else:
            saved = math.floor(ran / checkpoint) * checkpoint if checkpoint else 0.0
            run.remaining_s -= saved
            run.lost_gpu_s += (ran - saved) * run.job.gpus
        run.evictions += 1
        if reason.startswith("Preempted"):
            run.preempted += 1
        run.reason = reason
        if was_bound:
            self.recorder.team_pending(now, run.job.team, 1)
        run.status = JobStatus.PENDING
        self._released(run.job.key, now, lambda: self.scheduler.evict(run.job.key, now, requeue_at))

    def _released(self, key: str, now: float, release: Callable[[], None]) -> None:
        """Free ``key``'s nodes through ``release``; pods waiting for room may now be bound."""
        waiting = set(self.scheduler.unplaced) if self.scheduler.unplaced else set()
        nodes = (
            dict.fromkeys(b.node for b in placement.bindings)
            if self.placer is not None and (placement := self.placer.placements.get(key)) is not None
            else {}
        )
        release()
        if self.placer is not None:
            for name in nodes:
                self.recorder.node_changed(now, self.placer.nodes[name])
        waiting.discard(key)
        for bound in sorted(waiting - set(self.scheduler.unplaced)):
            run = self.runs[bound]
            if run.status == JobStatus.ADMITTED and run.bound_at is None and not run.held:
                self._bound(run, now)
        self._dirty = True

    def _pods_ready_timeout(self, run: JobRun, now: float) -> None:
        """waitForPodsReady: admitted ``timeout`` ago and still not running (kueue-semantics §8.2)."""
        if run.status != JobStatus.ADMITTED:
            return
        wait = self.config.scheduler.wait_for_pods_ready
        run.ready_timeouts += 1
        limit = wait.requeuing_backoff_limit_count
        if limit is not None and run.ready_timeouts > limit:
            self._stop(run, now)
            self.recorder.team_pending(now, run.job.team, -1)
            run.status, run.ended = JobStatus.DEACTIVATED, now
            run.reason = f"deactivated after {limit} requeues for PodsReadyTimeout"
            self._released(run.job.key, now, lambda: self.scheduler.finish(run.job.key))
            return
        backoff = min(
            wait.requeuing_backoff_base_s * 2 ** (run.ready_timeouts - 1), wait.requeuing_backoff_max_s
        )
        self._evict(run, now, "PodsReadyTimeout", requeue_at=now + backoff)
        self.queue.push(now + backoff, EventKind.REQUEUE, run.job.key, run.version)

    # ----------------------------------------------------------------- nodes
    def _change_nodes(self, change: NodeChange, now: float, reason: str = "") -> None:
        assert self.placer is not None
        names = list(change.nodes)
        if change.pool is not None:
            members = self._pool_nodes.get(change.pool, [])
            wanted_down = change.action == "add"
            candidates = [n for n in members if (n in self._down) == wanted_down]
            names += candidates[: change.count] if change.action == "add" else candidates[-change.count :]
        for name in names:
            if change.action == "remove" and name not in self._down:
                self._take_down(name, now, reason)
            elif change.action == "add" and name in self._down:
                self._down.discard(name)
                self.placer.set_down(name, False)
                self.recorder.node_up(now, self.placer.nodes[name], self.prices.get(name, 0.0))
        if change.action == "add":
            self._released("", now, self.scheduler.nodes_added)
        self._dirty = True

    def _take_down(self, name: str, now: float, reason: str = "") -> None:
        assert self.placer is not None
        # Evicting frees the node, and pods waiting for room may be bound to it at once: repeat.
        while holders := sorted({pod.rsplit("/", 1)[0] for pod in self.placer.nodes[name].bound}):
            for key in holders:
                self._evict(self.runs[key], now, reason or f"NodeFailures: node {name} was removed")
        self._down.add(name)
        self.recorder.node_down(now, name)
        self.placer.set_down(name, True)

    # ---------------------------------------------------------- provisioning
    def add_node(self, name: str, now: float) -> None:
        """A node joins (autoscaler, ProvisioningRequest) through the node-change path."""
        self._change_nodes(NodeChange(now, "add", (name,)), now)

    def remove_node(self, name: str, now: float, reason: str) -> None:
        """A node leaves (scale-down, consolidation, spot interruption): its workloads are evicted
        with ``reason`` and requeued, losing the work since their last checkpoint."""
        self._change_nodes(NodeChange(now, "remove", (name,)), now, reason)

    def check_ready(self, key: str, now: float) -> None:
        """The provisioning hooks' admission checks of ``key`` are Ready: its pods start when bound."""
        run = self.runs[key]
        states = self.scheduler.reserved_checks.get(key)
        if states is not None:
            self.scheduler.reserved_checks[key] = dict.fromkeys(states, CheckState.READY)
        run.held = False
        if run.status == JobStatus.ADMITTED and run.bound_at is None and key not in self.scheduler.unplaced:
            self._bound(run, now)

    def evict(
        self, key: str, now: float, reason: str, deactivate: bool = False, requeue_at: float | None = None
    ) -> None:
        """Evict ``key`` (flex-start cap, calendar window end, check Retry); with ``requeue_at`` it
        waits in its queue until then (a Retry's backoff); with ``deactivate`` it leaves its queue for
        good (an admission check Rejected it, as Kueue deactivates it)."""
        run = self.runs[key]
        if run.status not in (JobStatus.ADMITTED, JobStatus.RUNNING):
            return
        run.held = False
        if not deactivate:
            self._evict(run, now, reason, requeue_at=requeue_at)
            if requeue_at is not None:
                self.queue.push(requeue_at, EventKind.REQUEUE, key, run.version)
            return
        if run.bound_at is None:
            self.recorder.team_pending(now, run.job.team, -1)
        self._stop(run, now)
        run.status, run.ended, run.reason = JobStatus.DEACTIVATED, now, reason
        self._released(key, now, lambda: self.scheduler.finish(key))

    # -------------------------------------------------------------- services
    def submit(self, job: SimJob, now: float) -> None:
        """A workload created during the run (a serving replica): it arrives now."""
        self._arrive(job, now)

    def withdraw(self, key: str, now: float, reason: str) -> None:
        """Delete a workload wherever it is (a replica scaled away): it ends as Finished."""
        run = self.runs[key]
        if run.status == JobStatus.PENDING and run.cluster_queue is not None:
            self.scheduler.queues[run.cluster_queue].delete(key)
            self.scheduler.workloads.pop(key, None)
            self.scheduler.why.pop(key, None)
            self.recorder.team_pending(now, run.job.team, -1)
            run.version += 1
        elif run.status in (JobStatus.ADMITTED, JobStatus.RUNNING):
            if run.bound_at is None:
                self.recorder.team_pending(now, run.job.team, -1)
            self._stop(run, now)
            self._released(key, now, lambda: self.scheduler.finish(key))
        run.status, run.ended, run.reason = JobStatus.FINISHED, now, reason

    def _close(self, end: float) -> None:
        """Account for what still runs at the end of the simulated span."""
        if self.services is not None:
            self.services.close(end)
        if self.provisioning is not None:
            self.provisioning.close(end, self)
        for run in self.runs.values():
            if run.bound_at is not None:
                held = end - run.bound_at
                run.gpu_s += held * run.job.gpus
                run.cost += self._cost(run.job.key, held)
        self.recorder.close(end)
