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
from itertools import pairwise
from typing import Any, Protocol

from gpuq.core.admission import Scheduler
from gpuq.core.decisions import CycleResult
from gpuq.core.lifecycle import (
    Effect,
    Ended,
    Lifecycle,
    NodeDown,
    NodeUp,
    Preempted,
    Released,
    Reserved,
    StartPods,
    StateChanged,
    StopPods,
    Timer,
    WaitReason,
    WakeAt,
    WorkloadState,
)
from gpuq.core.lifecycle import events as ev
from gpuq.core.lifecycle.machine import LifecycleSettings
from gpuq.core.model import CheckState, ClusterConfig, Workload
from gpuq.core.nodes import Node
from gpuq.core.placement.engine import Placer, PodBinding
from gpuq.core.placement.scoring import inputs_for
from gpuq.core.quota import FlavorResource
from gpuq.sim.events import CORE_KINDS, Event, EventKind, EventQueue
from gpuq.sim.jobs import SimJob
from gpuq.sim.recorder import Recorder

MAX_CYCLES_PER_PASS = 100_000
FUTILE_TIMEOUTS = 64
"""PodsReady timeouts in a row (plus four per workload) after which a run with nothing left to arrive
stops: Kueue requeues a workload whose pods never get ready in time for ever (backoffLimitCount
unset, the default), so a start-up longer than the timeout would otherwise never end the run."""
UNPLACED_MESSAGE = "quota reserved; its pods wait for a node with room (nodes busy or being provisioned)"
_TIMERS = {
    EventKind.PODS_READY_TIMEOUT: Timer.PODS_READY,
    EventKind.MAX_EXECUTION: Timer.MAX_EXECUTION,
    EventKind.PROTECTION: Timer.PROTECTION,
    EventKind.REQUEUE: Timer.REQUEUE,
    EventKind.USAGE_SAMPLE: Timer.USAGE_SAMPLE,
}
_TIMER_EVENTS = {timer: kind for kind, timer in _TIMERS.items()}
_SERVICE_EVENTS = frozenset({EventKind.SERVICE_SYNC})
_PROVISIONING_EVENTS = frozenset({EventKind.PROVISIONING})
_CRON_EVENTS = frozenset({EventKind.CRON})


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
class SimRun:
    """The mutable life of one simulated workload."""

    job: SimJob
    status: WorkloadState = WorkloadState.PENDING
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
    waits: list[tuple[float, str, str]] = field(default_factory=list)
    """Why it waited, as the engine recorded it: ``(since, reason, message)``, one entry each time
    the message changed (Kueue's Pending condition message, an eviction's, an admission check's)."""
    preempted_by: list[str] = field(default_factory=list)  # the preemptor of each preemption, in order
    behind: str = ""  # the workload at the head of its ClusterQueue, waiting, when it arrived
    requeued_wait_s: float = 0.0  # seconds pending after evictions, until its pods were bound again
    bound_times: list[float] = field(default_factory=list)  # each time every pod got a node
    pending_since: float | None = None  # evicted and waiting again since
    priced: dict[str, float] = field(default_factory=dict)  # node -> price per hour its pods hold now
    held: bool = False  # holds quota, an admission check the provisioning hooks own is not Ready yet
    deleted: bool = False  # withdrawn (a replaced CronJob Job, a replica scaled away): ended, not completed
    bindings: tuple[PodBinding, ...] = ()  # where its pods run now (from the lifecycle's StartPods)
    reserved_at: float | None = None  # a backfill head: the time it was first reserved to start
    backfill_spans: list[list[float]] = field(default_factory=list)  # [admitted, released] per backfill

    @property
    def checkpoint_s(self) -> float | None:
        return self.job.checkpoint_s


class ServiceHooks(Protocol):
    """Autoscaled services riding on the simulation (:class:`gpuq.sim.serving.fleet.ServingFleet`).

    They submit and withdraw replica workloads through :meth:`Simulation.submit` and
    :meth:`Simulation.withdraw`, and are told when a replica is bound, ready or stopped. Their
    timers go on the simulation's event heap (:meth:`Simulation.schedule`, kind
    ``SERVICE_SYNC``); ``on_event`` gets each when it is due.
    """

    def template_workloads(self) -> list[Workload]: ...
    def start(self, sim: Simulation) -> None: ...
    def on_event(self, event: Event, now: float, sim: Simulation) -> None: ...
    def startup_s(self, run: SimRun, now: float, default: float, sim: Simulation) -> float: ...
    def on_ready(self, run: SimRun, now: float) -> None: ...
    def on_stopped(self, run: SimRun, now: float, was_ready: bool, was_bound: bool) -> None: ...
    def filter_preemptions(self, result: CycleResult, sim: Simulation) -> CycleResult: ...
    def close(self, end: float) -> None: ...


class ProvisioningHooks(Protocol):
    """Node provisioning riding on the simulation (:class:`gpuq.sim.provisioning.provisioner.Provisioner`):
    autoscaled pools, ProvisioningRequest admission checks, spot interruptions. Nodes join and leave
    through :meth:`Simulation.add_node` and :meth:`Simulation.remove_node`. Their timers go on the
    simulation's event heap (:meth:`Simulation.schedule`, kind ``PROVISIONING``); ``on_event`` gets
    each when it is due. While ``busy()`` is false (no workload left), background events (spot,
    stock) no longer keep the run alive."""

    def start(self, sim: Simulation) -> None: ...
    def busy(self) -> bool: ...
    def on_event(self, event: Event, now: float, sim: Simulation) -> None: ...
    def after_schedule(self, now: float, sim: Simulation) -> None: ...
    def hold_checks(self, run: SimRun, checks: tuple[str, ...], now: float, sim: Simulation) -> set[str]: ...
    def on_stopped(self, run: SimRun, now: float) -> None: ...
    def close(self, end: float, sim: Simulation) -> None: ...


class CronHooks(Protocol):
    """CronJobs creating Jobs on their schedules (:class:`gpuq.sim.cron_jobs.CronJobs`): timers of
    kind ``CRON`` on the event heap; told when a workload ends (a Forbid'den run may follow)."""

    def template_workloads(self) -> list[Workload]: ...
    def start(self, sim: Simulation) -> None: ...
    def on_event(self, event: Event, now: float, sim: Simulation) -> None: ...
    def on_ended(self, key: str, now: float, sim: Simulation) -> None: ...


@dataclass
class SimResult:
    runs: dict[str, SimRun]
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
        cron: CronHooks | None = None,
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
                    + (cron.template_workloads() if cron is not None else [])
                ),
                flavors=config.flavors,
                topologies=config.topologies,
            )
            if nodes
            else None
        )
        self.scheduler = Scheduler(config, self.placer, explain_unplaced=False)
        settings_ = LifecycleSettings(
            instant_stops=True, report_waits=True, max_cycles_per_pass=MAX_CYCLES_PER_PASS
        )
        self.life = Lifecycle(self.scheduler, self, settings_)
        self._effects: dict[type, Callable[[Any], None]] = {
            Reserved: self._on_reserved,
            StartPods: self._on_start_pods,
            StateChanged: self._on_state_changed,
            StopPods: self._on_stop_pods,
            Released: self._on_released,
            Ended: self._on_ended,
            WakeAt: self._on_wake_at,
            NodeUp: self._on_node_up,
            NodeDown: self._on_node_down,
            WaitReason: self._on_wait_reason,
            Preempted: self._on_preempted,
        }
        self.recorder = Recorder(config)
        self.queue = EventQueue()
        self.jobs = sorted(jobs, key=lambda j: (j.workload.creation_time, j.workload.uid, j.key))
        self.runs: dict[str, SimRun] = {}
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
        self.cron = cron
        self.stopped_at: float | None = None
        self.first_admissions = 0  # workloads admitted for the first time (residents not counted)
        self._next_probe = 0
        self._waiting: dict[str, dict[str, None]] = {}
        """Per ClusterQueue, the pending workloads that reported why they wait, in order: the first
        is the head a newcomer queues behind (a StrictFIFO head blocks everything after it)."""
        self._next_arrival = 0
        self.settled = 0  # workloads that ended, or were refused a queue when they arrived
        self.events = 0
        self._now = 0.0
        self._futile = 0  # PodsReady timeouts since a workload last ran, ended or arrived, or nodes changed
        self.futile_stop = False  # the run stopped on FUTILE_TIMEOUTS
        self._ready_timers: dict[str, Event] = {}
        """Each workload's PodsReady timer while it may fire: waitForPodsReady is on by default, and
        a timer left queued once its workload runs would stretch the span and keep wake-ups alive."""

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
        if self.cron is not None:
            self.cron.start(self)
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
            self.life.settle(now)
            if self.scheduler.reservations:
                self._note_reservations()
            if self.provisioning is not None:
                self.provisioning.after_schedule(now, self)
            if self._stop_when is not None and self._stop_when(self):
                self.stopped_at = now
                break
            if self._futile > FUTILE_TIMEOUTS + 4 * len(self.runs) and self._next_arrival >= len(self.jobs):
                self.stopped_at, self.futile_stop = now, True
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
    def passes(self) -> int:
        """Scheduling passes run (a pass: cycles until quiet)."""
        return self.life.passes

    @property
    def cycles(self) -> int:
        return self.life.cycles

    @property
    def now(self) -> float:
        """The instant whose events were applied last."""
        return self._now

    @property
    def arrived(self) -> int:
        """How many of ``jobs`` (in arrival order) have arrived."""
        return self._next_arrival

    def progress(self) -> float:
        """How far the run is, in [0, 1]: the horizon's share elapsed when there is one; otherwise
        each workload counts twice, once when it arrives and once when it settles (ends, or is
        refused a queue), so the drain after the last arrival counts too and 1 means every
        workload is done. Workloads created during the run (replicas, CronJob runs) count from
        their creation; one that waits forever keeps the figure below 1 until the run ends."""
        horizon = self.settings.horizon_s
        if horizon is not None and horizon > 0:
            return min(max(self._now / horizon, 0.0), 1.0)
        expected = max(len(self.jobs) + len(self._residents), len(self.runs))
        total = len(self.jobs) + expected
        if total == 0:
            return 1.0
        return min((self._next_arrival + self.settled) / total, 1.0)

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
            run = SimRun(job, status=WorkloadState.ADMITTED, remaining_s=resident.remaining_s)
            run.first_admitted = min(job.workload.quota_reserved_time or 0.0, 0.0)
            self.runs[job.key] = run
            holds = self.life.adopt(
                job.workload, 0.0, placed=resident.bindings or None, running=resident.started
            )
            if not holds:  # its queue is gone or drains: it queues again
                run.first_admitted = None
                run.cluster_queue = self.life.lives[job.key].cluster_queue
                if run.cluster_queue is None:
                    run.status = WorkloadState.INADMISSIBLE
                    self.settled += 1
                else:
                    run.status = WorkloadState.PENDING
                    self.recorder.team_pending(0.0, job.team, 1)
                continue
            cluster_queue = self.scheduler.cluster_queue_of(job.key)
            assert cluster_queue is not None
            run.cluster_queue = cluster_queue
            run.usage = self.scheduler.usage_of(job.key)
            self.recorder.queue_usage(0.0, cluster_queue, run.usage, 1)
            self.recorder.team_pending(0.0, job.team, 1)
            if job.key in self.scheduler.unplaced:
                continue
            if not resident.started:
                self.life.start(job.key, 0.0)
                continue
            run.first_bound = run.first_started = min(job.workload.quota_reserved_time or 0.0, 0.0)
            run.bound_at = 0.0
            run.bindings = self.scheduler.bindings_of(job.key)
            run.priced = self._rates(run)
            self.recorder.pods_priced(0.0, job.team, run.priced, 1)
            self.recorder.team_pending(0.0, job.team, -1)
            self._nodes_changed(job.key, 0.0)
            self.recorder.team_running(0.0, job.team, job.gpus)
            self._running(run, 0.0)

    def schedule(
        self,
        at: float,
        kind: EventKind,
        key: str = "",
        version: int = 0,
        *,
        tag: str = "",
        background: bool = False,
    ) -> Event:
        """Put a hook's timer on the one event heap: when ``at`` comes, the event goes to the
        hook's ``on_event`` (``SERVICE_SYNC``: the services; ``PROVISIONING``: the provisioning
        hooks), in (time, push order) among the events of its kind. ``key``, ``version`` and ``tag``
        are the hook's to read; a ``background`` event does not keep the run alive while the
        provisioning hooks are not ``busy()``."""
        if kind.core:
            raise ValueError(f"{kind.name} is one of the simulation's own events")
        return self.queue.push(at, kind, key, version, tag, background)

    def _next_time(self) -> float | None:
        idle = self.provisioning is not None and not self.provisioning.busy()
        queued = self.queue.peek_time(background=not idle)
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
        """Everything due at ``now``, phase by phase: the core events in (time, kind, push order),
        those pushed meanwhile included; the arrivals; the services' events, the CronJobs', then the
        provisioning hooks' (those pushed at ``now`` meanwhile included), each in (time, push order). A core
        event a hook pushes for ``now`` is set aside by the hooks' phases and applied by the next
        instant of the loop, at the same ``now``."""
        for event in self.queue.due(now, CORE_KINDS):
            self.events += 1
            self._handle(event.kind, event.key, event.version, now)
        while (
            self._next_arrival < len(self.jobs)
            and self.jobs[self._next_arrival].workload.creation_time <= now
        ):
            self._arrive(self.jobs[self._next_arrival], now)
            self._next_arrival += 1
            self.events += 1
        if self.services is not None:
            for event in self.queue.due(now, _SERVICE_EVENTS):
                self.services.on_event(event, now, self)
        if self.cron is not None:
            for event in self.queue.due(now, _CRON_EVENTS):
                self.cron.on_event(event, now, self)
        if self.provisioning is not None:
            for event in self.queue.due(now, _PROVISIONING_EVENTS):
                self.provisioning.on_event(event, now, self)

    def _handle(self, kind: EventKind, key: str, version: int, now: float) -> None:
        if kind in (EventKind.NODE_DOWN, EventKind.NODE_UP):
            self._change_nodes(self.settings.node_changes[int(key)], now)
            return
        timer = _TIMERS.get(kind)
        if timer == Timer.PODS_READY and (ready := self._ready_timers.get(key)) and ready.version == version:
            del self._ready_timers[key]  # fired: no longer in the queue to cancel
        if timer is not None:  # the lifecycle's own timers carry its token
            self.life.handle(ev.TimerFired(key, timer, version, now))
            return
        run = self.runs.get(key)
        if run is None or run.version != version:
            return  # cancelled
        if kind == EventKind.FINISH:
            self.life.handle(ev.WorkDone(key, run.job.failed, now))
        elif kind == EventKind.STARTED:
            self.life.handle(ev.PodsRunning(key, now))

    # -------------------------------------------------------------- arrivals
    def _arrive(self, job: SimJob, now: float) -> None:
        run = SimRun(job, remaining_s=job.duration_s)
        self.runs[job.key] = run
        self._futile = 0
        self.life.submit(job.workload, now)
        life = self.life.lives[job.key]
        run.cluster_queue = life.cluster_queue
        if life.state == WorkloadState.INADMISSIBLE:
            run.status, run.reason = WorkloadState.INADMISSIBLE, life.message
            self.settled += 1
            return
        waiting = self._waiting.get(run.cluster_queue or "")
        run.behind = next(iter(waiting), "") if waiting else ""
        self.recorder.team_pending(now, job.team, 1)

    # ------------------------------------------------- the lifecycle's hooks
    def effect(self, effect: Effect) -> None:
        """Apply one of the lifecycle's effects to the simulated cluster (LifecycleHooks)."""
        handler = self._effects.get(type(effect))
        if handler is not None:
            handler(effect)
        ready = self._ready_timers.get(getattr(effect, "key", ""))
        if ready is not None and not self.life.timer_matters(ready.key, Timer.PODS_READY, ready.version):
            self.queue.cancel(ready)  # running or gone: left queued it would keep the run alive
            del self._ready_timers[ready.key]

    def hold_checks(self, key: str, checks: tuple[str, ...], at: float) -> set[str]:
        """Admission checks pass at once (the capacity they stand for is modelled by the nodes), except
        those the provisioning hooks carry out (ProvisioningRequests): they stay Pending."""
        if self.provisioning is None:
            return set()
        return self.provisioning.hold_checks(self.runs[key], checks, at, self)

    def vet(self, result: CycleResult, at: float) -> CycleResult:
        """Disruption budgets protect serving replicas."""
        return self.services.filter_preemptions(result, self) if self.services is not None else result

    def _note_reservations(self) -> None:
        """Each backfill head's first reservation (for the check that no backfill delayed it)."""
        for key, at in self.scheduler.reservations.items():
            run = self.runs.get(key)
            if run is not None and run.reserved_at is None:
                run.reserved_at = at

    def _on_reserved(self, effect: Reserved) -> None:
        run = self.runs[effect.key]
        if effect.admit.run_limit_s is not None:  # backfilled ahead of a reserved head
            run.backfill_spans.append([effect.at, math.inf])
        run.held = effect.state == WorkloadState.QUOTA_RESERVED
        run.status = effect.state
        run.version += 1
        if run.first_admitted is None:
            run.first_admitted = effect.at
            self.first_admissions += 1
        self._not_waiting(run)
        run.usage = effect.usage
        self.recorder.queue_usage(effect.at, effect.admit.cluster_queue, run.usage, 1)
        if run.held:  # an admission check (a ProvisioningRequest) is not Ready: Kueue's message
            self._waited(run, effect.at, "QuotaReserved", effect.admit.message)
        elif (failure := self.scheduler.unplaced.get(effect.key)) is not None:
            self._waited(run, effect.at, failure.reason, failure.message or UNPLACED_MESSAGE)

    def _waited(self, run: SimRun, at: float, reason: str, message: str) -> None:
        """One entry per change of why ``run`` waits (never one per scheduling pass)."""
        if not run.waits or run.waits[-1][2] != message:
            run.waits.append((at, reason, message))

    def _on_wait_reason(self, effect: WaitReason) -> None:
        run = self.runs.get(effect.key)
        if run is not None:
            self._waited(run, self._now, effect.reason, effect.message)
            self._waiting.setdefault(run.cluster_queue or "", {})[effect.key] = None

    def _not_waiting(self, run: SimRun) -> None:
        waiting = self._waiting.get(run.cluster_queue or "")
        if waiting:
            waiting.pop(run.job.key, None)

    def _on_preempted(self, effect: Preempted) -> None:
        run = self.runs.get(effect.key)
        if run is not None:
            run.preempted_by.append(effect.by)

    def _on_wake_at(self, effect: WakeAt) -> None:
        event = self.queue.push(effect.at, _TIMER_EVENTS[effect.timer], effect.key, effect.token)
        if effect.timer == Timer.PODS_READY:
            stale = self._ready_timers.get(effect.key)
            if stale is not None:  # an earlier admission's, still queued
                self.queue.cancel(stale)
            self._ready_timers[effect.key] = event

    def _on_start_pods(self, effect: StartPods) -> None:
        """Every pod has a node: hold the GPUs, start after the start-up delay."""
        run = self.runs[effect.key]
        now = effect.at
        run.bindings = effect.bindings
        run.bound_at = now
        self.recorder.team_pending(now, run.job.team, -1)
        if run.first_bound is None:
            run.first_bound = now
        run.bound_times.append(now)
        if run.pending_since is not None:
            run.requeued_wait_s += now - run.pending_since
            run.pending_since = None
        run.priced = self._rates(run)
        self.recorder.pods_priced(now, run.job.team, run.priced, 1)
        self._nodes_changed(run.job.key, now)
        self.recorder.team_running(now, run.job.team, run.job.gpus)
        startup = self.settings.startup_s
        if self.services is not None:  # a serving replica's cold start
            startup = self.services.startup_s(run, now, startup, self)
        if startup > 0:
            self.queue.push(now + startup, EventKind.STARTED, run.job.key, run.version)
        else:
            self.life.handle(ev.PodsRunning(run.job.key, now))

    def _on_state_changed(self, effect: StateChanged) -> None:
        run = self.runs[effect.key]
        if effect.state == WorkloadState.RUNNING:
            self._futile = 0
            self._running(run, effect.at)
        else:
            run.status = effect.state
            run.held = effect.state == WorkloadState.QUOTA_RESERVED

    def _running(self, run: SimRun, now: float) -> None:
        run.status = WorkloadState.RUNNING
        run.started_at = now
        if run.first_started is None:
            run.first_started = now
        if self.services is not None:
            self.services.on_ready(run, now)
        if math.isfinite(run.remaining_s):  # serving replicas run until withdrawn
            self.queue.push(now + self.wall_s(run), EventKind.FINISH, run.job.key, run.version)

    def _checkpointing(self, run: SimRun) -> tuple[float | None, float]:
        """``(interval, cost)`` of ``run``'s checkpoints in seconds (the scenario's default interval)."""
        return run.checkpoint_s or self.settings.checkpoint_s, run.job.checkpoint_cost_s

    def _checkpoints_in(self, run: SimRun, work_s: float) -> int:
        """Checkpoints written while doing ``work_s`` seconds of work (none after the last piece)."""
        interval, cost = self._checkpointing(run)
        if not interval or not cost or not math.isfinite(work_s) or work_s <= 0:
            return 0
        return max(math.ceil(round(work_s / interval, 9)) - 1, 0)

    def wall_s(self, run: SimRun) -> float:
        """Seconds ``run``'s remaining work takes once running, checkpoint pauses included."""
        return run.remaining_s + self._checkpoints_in(run, run.remaining_s) * run.job.checkpoint_cost_s

    def _nodes_changed(self, key: str, now: float) -> None:
        if self.placer is None:
            return
        nodes = self.placer.nodes
        for name in dict.fromkeys(b.node for b in self.runs[key].bindings):
            self.recorder.node_changed(now, nodes[name])

    # ------------------------------------------------------------- stopping
    def _stop(self, run: SimRun, now: float) -> float:
        """Release what ``run`` holds (GPU time and cost accounted); the seconds it ran."""
        ran = now - run.started_at if run.started_at is not None else 0.0
        if self.services is not None:
            self.services.on_stopped(run, now, run.status == WorkloadState.RUNNING, run.bound_at is not None)
        if self.provisioning is not None:
            self.provisioning.on_stopped(run, now)
        if run.bound_at is not None:
            held = now - run.bound_at
            run.gpu_s += held * run.job.gpus
            run.cost += self._cost(run, held)
            self.recorder.team_running(now, run.job.team, -run.job.gpus)
            self.recorder.pods_priced(now, run.job.team, run.priced, -1)
            run.priced = {}
        assert run.cluster_queue is not None
        self.recorder.queue_usage(now, run.cluster_queue, run.usage, -1)
        run.bound_at = run.started_at = None
        run.version += 1
        return ran

    def _cost(self, run: SimRun, held_s: float) -> float:
        if self.placer is None or held_s <= 0:
            return 0.0
        total = 0.0
        for binding in run.bindings:
            shape, _ = self.placer.nodes[binding.node].bound[binding.pod]
            share = shape.gpu.total_milli / 1000
            total += share * self.recorder.price_per_gpu_hour(binding.node)
        return total * held_s / 3600

    def _rates(self, run: SimRun) -> dict[str, float]:
        """Per node, the price per hour of the GPU share ``run``'s pods hold there."""
        rates: dict[str, float] = {}
        if self.placer is None:
            return rates
        for binding in run.bindings:
            shape, _ = self.placer.nodes[binding.node].bound[binding.pod]
            rate = shape.gpu.total_milli / 1000 * self.recorder.price_per_gpu_hour(binding.node)
            rates[binding.node] = rates.get(binding.node, 0.0) + rate
        return rates

    def _on_stop_pods(self, effect: StopPods) -> None:
        """An eviction: the work since the last checkpoint is lost; the pods stop at once."""
        run = self.runs[effect.key]
        now = effect.at
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
        if effect.reason == "Preempted":
            run.preempted += 1
        elif effect.reason == "PodsReadyTimeout":
            run.ready_timeouts += 1
            self._futile += 1
        run.reason = effect.message
        self._waited(run, now, effect.reason, effect.message)
        if was_bound:
            run.pending_since = now
            self.recorder.team_pending(now, run.job.team, 1)
        run.status = WorkloadState.PENDING
        run.held = False

    def _on_released(self, effect: Released) -> None:
        run = self.runs.get(effect.key)
        if run is not None:
            run.bindings = ()
            if run.backfill_spans and run.backfill_spans[-1][1] == math.inf:
                run.backfill_spans[-1][1] = effect.at
        if self.placer is not None:
            for name in effect.nodes:
                self.recorder.node_changed(effect.at, self.placer.nodes[name])

    def _on_ended(self, effect: Ended) -> None:
        run = self.runs[effect.key]
        now = effect.at
        self._futile = 0
        if effect.cause == "work":
            written = self._checkpoints_in(run, run.remaining_s)
            run.checkpoints += written
            run.checkpoint_overhead_s += written * run.job.checkpoint_cost_s
            self._stop(run, now)
            run.remaining_s = 0.0
        elif effect.previous == WorkloadState.PENDING:  # withdrawn while it waited
            self.recorder.team_pending(now, run.job.team, -1)
            run.version += 1
        elif effect.previous.holds_quota:
            if run.bound_at is None:
                self.recorder.team_pending(now, run.job.team, -1)
            self._stop(run, now)
        if effect.reason == "PodsReadyTimeout":
            run.ready_timeouts += 1
        if effect.message or effect.cause != "work":
            run.reason = effect.message
        if run.ended is None and run.status != WorkloadState.INADMISSIBLE:  # counted once
            self.settled += 1
        run.status, run.ended, run.held = effect.state, now, False
        run.deleted = effect.cause == "withdrawn"
        self._not_waiting(run)
        if self.cron is not None:
            self.cron.on_ended(effect.key, now, self)

    # ----------------------------------------------------------------- nodes
    def _change_nodes(self, change: NodeChange, now: float, reason: str = "") -> None:
        assert self.placer is not None
        self._futile = 0
        names = list(change.nodes)
        if change.pool is not None:
            members = self._pool_nodes.get(change.pool, [])
            wanted_down = change.action == "add"
            candidates = [n for n in members if (n in self._down) == wanted_down]
            names += candidates[: change.count] if change.action == "add" else candidates[-change.count :]
        if change.action == "add":
            back = [name for name in names if name in self._down]
            self._down.difference_update(back)
            self.life.handle(ev.NodesAdded(tuple(back), now))
        else:
            for name in names:
                if name not in self._down:
                    self.life.handle(ev.NodeLost(name, reason, now))
        self.life.mark_dirty()

    def _on_node_up(self, effect: NodeUp) -> None:
        assert self.placer is not None
        self.recorder.node_up(effect.at, self.placer.nodes[effect.node], self.prices.get(effect.node, 0.0))

    def _on_node_down(self, effect: NodeDown) -> None:
        self._down.add(effect.node)
        self.recorder.node_down(effect.at, effect.node)

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
        states = self.scheduler.checks_of(key)
        run.held = False
        if states:
            self.life.handle(ev.ChecksChanged(key, dict.fromkeys(states, CheckState.READY), now))

    def evict(
        self, key: str, now: float, reason: str, deactivate: bool = False, requeue_at: float | None = None
    ) -> None:
        """Evict ``key`` (flex-start cap, calendar window end, check Retry); with ``requeue_at`` it
        waits in its queue until then (a Retry's backoff); with ``deactivate`` it leaves its queue for
        good (an admission check Rejected it, as Kueue deactivates it)."""
        self.runs[key].held = False
        self.life.handle(ev.EvictionRequested(key, reason, now, requeue_at, deactivate))

    # -------------------------------------------------------------- services
    def submit(self, job: SimJob, now: float) -> None:
        """A workload created during the run (a serving replica): it arrives now."""
        self._arrive(job, now)

    def withdraw(self, key: str, now: float, reason: str) -> None:
        """Delete a workload wherever it is (a replica scaled away): it ends as Succeeded."""
        run = self.runs[key]
        if self.life.state_of(key) is None:  # ended already
            run.status, run.ended, run.reason = WorkloadState.SUCCEEDED, now, reason
            run.deleted = True
            return
        self.life.handle(ev.Withdrawn(key, reason, now))

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
                run.cost += self._cost(run, held)
            if run.pending_since is not None:
                run.requeued_wait_s += max(end - run.pending_since, 0.0)
                run.pending_since = None
        self.recorder.close(end)
