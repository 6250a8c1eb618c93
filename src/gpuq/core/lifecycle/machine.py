"""The lifecycle state machine: a :class:`~gpuq.core.admission.Scheduler` and what follows its decisions.

A shell (the simulator, the live loop) owns a clock and a model of nodes and
processes; it hands events to :meth:`Lifecycle.handle` and runs
:meth:`Lifecycle.settle` when time has moved, and applies every effect the
lifecycle emits through :meth:`LifecycleHooks.effect`, in order, at once. The
lifecycle holds no clock: ``at`` comes with every event.

What it decides, and the one place each rule lives:

1. **Cycles until quiet** (:meth:`settle`): Kueue cycles run while something may change; the
   pass ends when :class:`~gpuq.core.cycles.ProgressWatch` says so: no head is left to try, a
   cycle changed nothing, the same decisions come back with a fixed period, no workload was
   tried or admitted for the first time within a window of cycles (churn of any period), or
   ``max_cycles_per_pass``. Where
   stops are not instant (live), a cycle that preempts ends the pass; a victim keeps its quota
   until its pods are gone, and passes go on meanwhile: workloads that fit elsewhere are
   admitted, and a preemptor that picks a victim already stopping issues nothing again
   (Kueue's ``IssuePreemptions`` skips workloads already evicted).
2. **Admission checks**: a reserved workload's checks are asked of the shell
   (:meth:`LifecycleHooks.hold_checks`: the ones a controller carries out stay Pending, the rest
   are Ready); pods start once every check is Ready (QuotaReserved, then Admitted).
3. **Eviction** (preemption, node loss, waitForPodsReady timeout, a requested eviction): the
   pods are stopped with their grace period; quota is released and the workload requeued when
   they are gone (Kueue's ``Evicted`` then ``Requeued``).
4. **waitForPodsReady** (on by default since Kueue v0.19): Admitted (every check Ready) and not
   running ``timeout`` later evicts with Kueue's backoff ``min(base * 2^(n-1), max)``
   (``requeueState.requeueAt``), ordered in its queue by the eviction's time unless the
   requeuing timestamp is Creation; past ``backoffLimitCount`` requeues it is deactivated.
5. **Pods**: a failed pod restarts after an exponential backoff until the Job's
   ``backoffLimit`` is spent; a pod the executor cannot start fails the workload at once; every
   pod succeeding (or the completion pod set's) ends the workload; ``activeDeadlineSeconds``
   since the first start fails it.
6. **maximumExecutionTimeSeconds** (Kueue: ``reconcileMaxExecutionTime`` in
   pkg/controller/core/workload_controller.go, KEP-3125): the seconds a workload has been Admitted,
   summed over its admissions (``status.accumulatedPastExecutionTimeSeconds``, whole seconds as
   Kueue counts them when Admitted turns False), reaching the limit deactivate it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpuq.core.admission import Scheduler
from gpuq.core.cycles import ProgressWatch, StopReason, progress_window
from gpuq.core.decisions import Admit, CycleResult, Pending, Preempt
from gpuq.core.lifecycle import events as ev
from gpuq.core.lifecycle.effects import (
    Effect,
    Ended,
    NodeDown,
    NodeUp,
    Noted,
    Preempted,
    Released,
    Requeued,
    Reserved,
    RestartPod,
    StartPods,
    StateChanged,
    StopPods,
    WaitReason,
    WakeAt,
)
from gpuq.core.lifecycle.events import JobPolicy
from gpuq.core.lifecycle.states import USAGE_SAMPLE_KEY, Timer, WorkloadState, check_transition
from gpuq.core.model import CheckState, RequeuingTimestamp, Workload
from gpuq.core.placement.engine import PodBinding

S = WorkloadState
MAX_EXECUTION_EXCEEDED = "MaximumExecutionTimeExceeded"  # the underlying cause of the deactivation
BACKFILL_LIMIT_EXCEEDED = "BackfillLimitExceeded"  # backfilled, it ran past its declared runtime: evicted


class LifecycleHooks(Protocol):
    """The shell's side: it applies effects and answers the two questions asked inside a cycle."""

    def effect(self, effect: Effect) -> None:
        """Apply one effect now (the next cycle may depend on it: a PDB counts ready replicas)."""

    def hold_checks(self, key: str, checks: tuple[str, ...], at: float) -> set[str]:
        """Which of ``key``'s admission checks a controller carries out (they stay Pending)."""

    def vet(self, result: CycleResult, at: float) -> CycleResult:
        """The cycle's decisions as disruption budgets allow them (identity without services)."""


_PODS_STARTED = frozenset({S.ADMITTED, S.RUNNING})
"""States in which a workload's pods may have started: Admitted while the rest of a gang still starts."""


@dataclass(frozen=True, slots=True)
class LifecycleSettings:
    """``instant_stops``: pods stop the moment they are told to (the simulator does not model
    termination); live, an eviction completes when the executor reports the pods gone.
    ``report_waits``: emit :class:`WaitReason` when a pending workload's message changes."""

    instant_stops: bool = True
    report_waits: bool = False
    max_cycles_per_pass: int | None = 100_000
    window: int | None = None  # the no-progress window (default: progress_window of the ClusterQueues)
    restart_backoff_s: float = 10.0
    restart_backoff_max_s: float = 360.0


@dataclass(slots=True)
class Life:
    """What the lifecycle knows of one workload (the shell keeps its own accounting)."""

    key: str
    workload: Workload
    state: WorkloadState
    cluster_queue: str | None
    policy: JobPolicy = field(default_factory=JobPolicy)
    token: int = 0  # bumped when quota is reserved or released: older timers are stale
    ready_timeouts: int = 0
    retries: int = 0  # whole-workload re-runs so far (JobPolicy.retries); kept across evictions
    held: bool = False  # an admission check a controller carries out is not Ready yet
    bound: bool = False  # StartPods was emitted for the current admission
    pods: tuple[str, ...] = ()  # pod names of the current admission, in binding order
    running_pods: set[str] = field(default_factory=set)
    succeeded_pods: set[str] = field(default_factory=set)
    failures: int = 0
    started_at: float | None = None  # first start of the current admission (activeDeadlineSeconds)
    evicting: str = ""  # the reason of an eviction in flight
    evicting_message: str = ""
    evicting_requeue_at: float | None = None
    evicting_at: float = 0.0  # when the eviction began (Kueue's Evicted condition time)
    message: str = ""  # the last pending message reported
    admitted_at: float | None = None  # Admitted since (maximumExecutionTimeSeconds)
    run_limit_at: float | None = None  # backfilled: its quota is due back by then (gpuq.core.backfill)
    run_limit_s: float = 0.0  # the declared runtime it was backfilled with
    past_execution_s: int = -1  # whole seconds Admitted in earlier admissions (-1: the workload's)

    def __post_init__(self) -> None:
        if self.past_execution_s < 0:
            self.past_execution_s = self.workload.past_execution_s


class Lifecycle:
    """One workload lifecycle over one :class:`Scheduler`; see the module docstring."""

    def __init__(
        self, scheduler: Scheduler, hooks: LifecycleHooks, settings: LifecycleSettings = LifecycleSettings()
    ) -> None:
        self.scheduler = scheduler
        self.hooks = hooks
        self.settings = settings
        self.lives: dict[str, Life] = {}
        self.passes = self.cycles = 0
        self.last_stop: StopReason | None = None  # why the latest pass ended
        self._window = settings.window or progress_window(len(scheduler.config.cluster_queues))
        self._dirty = False
        self._evicting: set[str] = set()
        self._sampling = False  # the Admission Fair Sharing sampling timer is set
        wait = scheduler.config.scheduler.wait_for_pods_ready
        self._wait = wait
        self._ready_timeout = wait.timeout_s if wait.enable else None
        self._handlers: dict[type, Callable[[ev.Event], None]] = {
            ev.Submitted: self._on_submitted,  # type: ignore[dict-item]
            ev.PodsRunning: self._on_pods_running,  # type: ignore[dict-item]
            ev.PodExited: self._on_pod_exited,  # type: ignore[dict-item]
            ev.PodStartFailed: self._on_pod_start_failed,  # type: ignore[dict-item]
            ev.WorkDone: self._on_work_done,  # type: ignore[dict-item]
            ev.PodsStopped: self._on_pods_stopped,  # type: ignore[dict-item]
            ev.ChecksChanged: self._on_checks_changed,  # type: ignore[dict-item]
            ev.TimerFired: self._on_timer,  # type: ignore[dict-item]
            ev.EvictionRequested: self._on_eviction_requested,  # type: ignore[dict-item]
            ev.Withdrawn: self._on_withdrawn,  # type: ignore[dict-item]
            ev.NodeLost: self._on_node_lost,  # type: ignore[dict-item]
            ev.NodesAdded: self._on_nodes_added,  # type: ignore[dict-item]
        }

    # ------------------------------------------------------------------ input
    def handle(self, event: ev.Event) -> None:
        """Apply one event; its effects reach the hooks before this returns."""
        self._handlers[type(event)](event)

    @property
    def dirty(self) -> bool:
        """Something happened that could let a workload be admitted or placed."""
        return self._dirty

    def mark_dirty(self) -> None:
        self._dirty = True

    def life(self, key: str) -> Life | None:
        return self.lives.get(key)

    def state_of(self, key: str) -> WorkloadState | None:
        life = self.lives.get(key)
        return life.state if life is not None else None

    @property
    def evicting(self) -> frozenset[str]:
        return frozenset(self._evicting)

    def adopt(
        self,
        workload: Workload,
        at: float,
        *,
        placed: Sequence[PodBinding] | None = None,
        running: bool = False,
        policy: JobPolicy | None = None,
        admitted_at: float | None = None,
    ) -> bool:
        """Take in a workload that may already hold quota (``status.admission``): a forecast from
        live state, a control plane rebuilding its view. ``placed``: where its pods run (kept
        exactly); ``running``: they run already, else :meth:`start` starts them; ``admitted_at``:
        when it was Admitted (``at`` when unknown). True when it holds quota."""
        life = Life(workload.key, workload, S.PENDING, None, policy or JobPolicy())
        self.lives[workload.key] = life
        self.scheduler.submit(workload, placed=placed)
        self._dirty = True
        if not self.scheduler.holds(workload.key):
            life.cluster_queue = self.scheduler.route(workload)[0]
            life.workload = self.scheduler.workload_of(workload.key) or workload
            if life.cluster_queue is None:
                life.state = S.INADMISSIBLE
            return False
        life.cluster_queue = self.scheduler.cluster_queue_of(workload.key)
        life.workload = self.scheduler.admitted_workload(workload.key) or workload
        life.held = any(s != CheckState.READY for s in self.scheduler.checks_of(workload.key).values())
        life.state = S.QUOTA_RESERVED if life.held else S.ADMITTED
        if life.state == S.ADMITTED:
            self._admitted(life, at if admitted_at is None else min(at, admitted_at))
        if workload.key in self.scheduler.unplaced:
            return True
        bindings = self.scheduler.bindings_of(workload.key)
        life.pods = tuple(b.pod.rsplit("/", 1)[1] for b in bindings)
        if running:
            life.bound, life.state = True, S.RUNNING
            life.running_pods = set(life.pods)
        return True

    def take_over(self) -> None:
        """Know every workload already submitted to the scheduler (a snapshot loaded for ``gpuq
        admit``): queued ones wait, admitted ones hold quota with their pods where they are."""
        scheduler = self.scheduler
        for key, workload in sorted(scheduler.workloads.items()):
            if key in self.lives:
                continue
            if scheduler.holds(key):
                held = any(s != CheckState.READY for s in scheduler.checks_of(key).values())
                state = S.QUOTA_RESERVED if held else S.ADMITTED
                life = Life(key, workload, state, scheduler.cluster_queue_of(key), held=held, bound=True)
            else:
                target = scheduler.route(workload)[0]
                life = Life(key, workload, S.PENDING if target else S.INADMISSIBLE, target)
            self.lives[key] = life
        self._dirty = True

    def start(self, key: str, at: float) -> None:
        """Start the pods of an adopted workload that is admitted and placed but not running."""
        life = self.lives.get(key)
        if (
            life is not None
            and life.state == S.ADMITTED
            and not life.bound
            and key not in self.scheduler.unplaced
        ):
            self._start(life, at)

    # ------------------------------------------------------------------ cycles
    def settle(self, at: float, clock: Callable[[], float] | None = None) -> None:
        """Run Kueue cycles until quiet when something changed (step 1 of the module docstring).

        ``clock``: a live driver's wall clock, read at each cycle, so that each decision carries the
        time it was made (a simulator's pass happens at one instant: ``at``)."""
        self._arm_sampling(at)
        if not self._dirty:
            return
        self._dirty = False
        self.passes += 1
        scheduler = self.scheduler
        watch = ProgressWatch(self._window, self.settings.max_cycles_per_pass)
        while True:
            if clock is not None:
                at = max(at, clock())
            before = scheduler.active_count()
            result, entries = scheduler.plan_cycle(at)
            if not entries:
                self.last_stop = watch.observe(result)
                return
            self.cycles += 1
            result = self.hooks.vet(result, at)
            scheduler.apply(result, entries, at)
            for decision in result.admitted:
                self._reserve(decision, at)
            if self.settings.report_waits:
                for pending in result.pending:
                    self._report_wait(pending)
            for eviction in result.preempted:
                self._preempt(eviction, at)
            stop = watch.observe(result, scheduler.active_count() != before)
            if stop is not None or (result.preempted and not self.settings.instant_stops):
                self.last_stop = stop
                return

    def _reserve(self, decision: Admit, at: float) -> None:
        """Quota reserved: checks asked, the PodsReady timer set, pods started when placed."""
        key = decision.workload
        life = self.lives[key]
        held: set[str] = set()
        if decision.checks_pending:
            held = self.hooks.hold_checks(key, decision.checks_pending, at)
            self.scheduler.set_checks(
                key,
                {n: CheckState.PENDING if n in held else CheckState.READY for n in decision.checks_pending},
            )
        life.held = bool(held)
        state = S.QUOTA_RESERVED if held else S.ADMITTED
        self._move(life, state)
        life.token += 1
        life.cluster_queue = decision.cluster_queue
        life.workload = self.scheduler.admitted_workload(key) or life.workload
        life.message = ""
        life.run_limit_at = None if decision.run_limit_s is None else at + decision.run_limit_s
        life.run_limit_s = decision.run_limit_s or 0.0
        self.hooks.effect(Reserved(key, decision, state, self.scheduler.usage_of(key), at))
        if life.run_limit_at is not None:
            self.hooks.effect(WakeAt(key, Timer.MAX_EXECUTION, life.run_limit_at, life.token))
        if state == S.ADMITTED:
            self._admitted(life, at)
        if life.workload.min_runtime_s > 0:
            self.hooks.effect(WakeAt(key, Timer.PROTECTION, at + life.workload.min_runtime_s, life.token))
        if key not in self.scheduler.unplaced and not held:
            self._start(life, at)

    def _report_wait(self, pending: Pending) -> None:
        life = self.lives.get(pending.workload)
        if life is None or life.state != S.PENDING or life.message == pending.message:
            return
        life.message = pending.message
        self.hooks.effect(WaitReason(life.key, pending.reason, pending.message))

    def _preempt(self, eviction: Preempt, at: float) -> None:
        life = self.lives[eviction.workload]
        if life.evicting:  # already told to stop; it holds its quota until its pods are gone
            return
        self.hooks.effect(Preempted(life.key, eviction.by, eviction.reason, at, eviction))
        self._evict(life, "Preempted", f"Preempted by {eviction.by} ({eviction.reason})", at)

    # ------------------------------------------------------------------ pods
    def _start(self, life: Life, at: float) -> None:
        bindings = self.scheduler.bindings_of(life.key)
        life.bound = True
        life.pods = tuple(b.pod.rsplit("/", 1)[1] for b in bindings)
        life.running_pods = set(life.pods)
        life.succeeded_pods = set()
        self.hooks.effect(StartPods(life.key, bindings, at))

    def _on_pods_running(self, event: ev.PodsRunning) -> None:
        life = self.lives.get(event.key)
        if life is None or life.state != S.ADMITTED:
            return
        self._move(life, S.RUNNING)
        self.hooks.effect(StateChanged(life.key, S.RUNNING, "PodsReady", "all pods are running", event.at))
        deadline = life.policy.active_deadline_s
        if deadline is not None and life.started_at is None:
            life.started_at = event.at
            self.hooks.effect(WakeAt(life.key, Timer.DEADLINE, event.at + deadline, life.token))

    def _on_pod_exited(self, event: ev.PodExited) -> None:
        life = self.lives.get(event.key)
        if life is None:
            return
        life.running_pods.discard(event.pod)
        if life.evicting:
            # Requeued whatever the exit code: a pod told to stop that saves a checkpoint and exits 0
            # has not finished its work, it resumes from the checkpoint (docs/serve.md, checkpoints).
            if not life.running_pods:
                self._complete_eviction(life, event.at)
            return
        if life.state not in _PODS_STARTED:  # a pod of a gang can end before the last one starts
            return
        pod_set = event.pod.rsplit("-", 1)[0]
        if pod_set == life.policy.completion_pod_set:
            self._completion_pod_exited(life, event, pod_set)
            return
        if event.exit_code == 0:
            life.succeeded_pods.add(event.pod)
            if life.succeeded_pods.issuperset(life.pods):
                self._end(life, S.SUCCEEDED, "pods", "JobFinished", "every pod succeeded", event.at)
            return
        self._pod_failed(life, event.pod, f"pod {event.pod} exited with {event.exit_code}", event.at)

    def _completion_pod_exited(self, life: Life, event: ev.PodExited, pod_set: str) -> None:
        """A pod of the completion pod set ended (a RayJob's submitter): a failure re-runs the whole
        workload while ``retries`` last (KubeRay: a new RayCluster per retry), then fails it; the
        set's last success completes it."""
        if event.exit_code != 0:
            message = f"pod {event.pod} exited with {event.exit_code}"
            limit = life.policy.retries
            if life.retries < limit:
                life.retries += 1
                message += f"; retry {life.retries} of {limit}: every pod starts again"
                self.hooks.effect(Noted(life.key, "Warning", "Retrying", message, event.at))
                self._evict(life, "Retrying", message, event.at)
                return
            if limit:
                message += f"; backoffLimit {limit} reached"
            self._end(life, S.FAILED, "pods", "JobFailed", message, event.at)
            return
        life.succeeded_pods.add(event.pod)
        members = [p for p in life.pods if p.rsplit("-", 1)[0] == pod_set]
        if life.succeeded_pods.issuperset(members):
            self._end(life, S.SUCCEEDED, "pods", "JobFinished", f"pod set {pod_set} succeeded", event.at)

    def _on_pod_start_failed(self, event: ev.PodStartFailed) -> None:
        """A pod the executor cannot start (no such command, a name too long for a path) would fail
        the same way on every retry: the workload fails with the reason and releases its quota."""
        life = self.lives.get(event.key)
        if life is None or life.state.ended:
            return
        life.running_pods.discard(event.pod)
        message = f"pod {event.pod} cannot start: {event.message}"
        self._end(life, S.FAILED, "pods", "StartError", message, event.at)

    def _pod_failed(self, life: Life, pod: str, message: str, at: float) -> None:
        """A Job's pod failure: restart after ``min(base * 2^(n-1), max)`` until ``backoffLimit``."""
        life.failures += 1
        limit = life.policy.backoff_limit
        if life.failures > limit:
            self._end(
                life, S.FAILED, "pods", "BackoffLimitExceeded", f"{message}; backoffLimit {limit} reached", at
            )
            return
        base = self.settings.restart_backoff_s
        delay = min(base * 2 ** (life.failures - 1), self.settings.restart_backoff_max_s) if base else 0.0
        self.hooks.effect(Noted(life.key, "Warning", "BackOff", f"{message}; restarting in {delay:.0f}s", at))
        self.hooks.effect(WakeAt(life.key, Timer.RESTART, at + delay, life.token, pod))

    def _on_work_done(self, event: ev.WorkDone) -> None:
        life = self.lives[event.key]
        state = S.FAILED if event.failed else S.SUCCEEDED
        self._end(life, state, "work", "JobFailed" if event.failed else "JobFinished", "", event.at)

    # ------------------------------------------------------------------ checks
    def _on_checks_changed(self, event: ev.ChecksChanged) -> None:
        """Checks answered; all Ready: the workload is Admitted and its pods start when placed."""
        life = self.lives.get(event.key)
        if life is None or not life.state.holds_quota:
            return
        states = {**self.scheduler.checks_of(event.key), **event.states}
        self.scheduler.set_checks(event.key, states)
        if any(s != CheckState.READY for s in states.values()):
            return
        life.held = False
        if life.state == S.QUOTA_RESERVED:
            self._move(life, S.ADMITTED)
            message = "the admission checks are Ready"
            self.hooks.effect(StateChanged(life.key, S.ADMITTED, "Admitted", message, event.at))
            self._admitted(life, event.at)
        if life.state == S.ADMITTED and not life.bound and event.key not in self.scheduler.unplaced:
            self._start(life, event.at)

    # ------------------------------------------------------------------ timers
    def _arm_sampling(self, at: float) -> None:
        """Admission Fair Sharing samples every usageSamplingInterval while sampling changes
        something (:meth:`Scheduler.samples_due`); a shell that runs out of events then ends."""
        fair = self.scheduler.fair_usage
        if fair is None or self._sampling or not self.scheduler.samples_due():
            return
        self._sampling = True
        interval = fair.afs.usage_sampling_interval_s
        self.hooks.effect(WakeAt(USAGE_SAMPLE_KEY, Timer.USAGE_SAMPLE, at + interval, 0))

    def timer_matters(self, key: str, timer: Timer, token: int) -> bool:
        """Whether a timer set with ``token`` would still act if it fired now: not when the workload
        ended or its quota was reserved / released since (stale), nor a PodsReady timer once the
        workload is running or being evicted. A shell may drop a timer that does not matter."""
        if timer == Timer.USAGE_SAMPLE:
            return True  # Admission Fair Sharing's sampling: not a workload's timer
        life = self.lives.get(key)
        if life is None or life.token != token:
            return False
        return timer != Timer.PODS_READY or (life.state == S.ADMITTED and not life.evicting)

    def _on_timer(self, event: ev.TimerFired) -> None:
        if event.timer == Timer.USAGE_SAMPLE:
            self._sampling = False
            self.scheduler.sample_usage(event.at)
            self._dirty = True  # the order of usage-based queues may have changed
            self._arm_sampling(event.at)
            return
        life = self.lives.get(event.key)
        if life is None or life.token != event.token:
            return  # ended, or quota reserved / released since: the timer is stale
        if event.timer == Timer.PODS_READY:
            self._pods_ready_timeout(life, event.at)
        elif event.timer == Timer.REQUEUE:
            if life.cluster_queue is not None:
                self.scheduler.requeue_inadmissible(life.cluster_queue)
            self._dirty = True
        elif event.timer == Timer.RESTART:
            if life.state in _PODS_STARTED and not life.evicting:
                life.running_pods.add(event.pod)
                self.hooks.effect(RestartPod(life.key, event.pod, event.at))
        elif event.timer == Timer.DEADLINE and life.state.holds_quota and not life.evicting:
            deadline = life.policy.active_deadline_s or 0.0
            message = f"activeDeadlineSeconds {deadline:g} passed"
            self._end(life, S.FAILED, "pods", "DeadlineExceeded", message, event.at)
        elif event.timer == Timer.PROTECTION and life.state.holds_quota:
            self.scheduler.protection_ended(life.key)
            self._dirty = True
        elif (
            event.timer == Timer.MAX_EXECUTION
            and life.run_limit_at is not None
            and event.at >= life.run_limit_at
            and life.state.holds_quota
            and not life.evicting
        ):
            self.scheduler.run_limit_exceeded(life.key)
            message = (
                f"Evicted at the end of the declared runtime it was backfilled with ({life.run_limit_s:g}s): "
                "its quota is reserved for the head of its ClusterQueue"
            )
            self._evict(life, BACKFILL_LIMIT_EXCEEDED, message, event.at)
        elif event.timer == Timer.MAX_EXECUTION and life.admitted_at is not None and not life.evicting:
            message = "The workload is deactivated due to exceeding the maximum execution time"
            self._end(life, S.INACTIVE, "deactivated", MAX_EXECUTION_EXCEEDED, message, event.at)

    def _admitted(self, life: Life, at: float) -> None:
        """Admitted from ``at``: the PodsReady timer (Kueue counts the timeout from the Admitted
        condition, not from the quota reservation: a workload its checks hold is never timed out)
        and the maximumExecutionTimeSeconds timer, for what is left of it."""
        life.admitted_at = at
        self.scheduler.became_admitted(life.key, at)
        if self._ready_timeout is not None:
            self.hooks.effect(WakeAt(life.key, Timer.PODS_READY, at + self._ready_timeout, life.token))
        limit = life.workload.maximum_execution_s
        if limit is not None:
            left = max(0, limit - life.past_execution_s)
            self.hooks.effect(WakeAt(life.key, Timer.MAX_EXECUTION, at + left, life.token))

    def _pods_ready_timeout(self, life: Life, at: float) -> None:
        """waitForPodsReady (Kueue: pkg/controller/core/workload_controller.go): admitted ``timeout``
        ago and not running: evict with backoff, or deactivate past ``backoffLimitCount``."""
        if not self.timer_matters(life.key, Timer.PODS_READY, life.token):
            return
        wait = self._wait
        life.ready_timeouts += 1
        limit = wait.requeuing_backoff_limit_count
        if limit is not None and life.ready_timeouts > limit:
            message = f"deactivated after {limit} requeues for PodsReadyTimeout"
            self._end(life, S.INACTIVE, "deactivated", "PodsReadyTimeout", message, at)
            return
        doubling = min(life.ready_timeouts - 1, 64)  # endless requeues (no limit) must not overflow
        backoff = min(wait.requeuing_backoff_base_s * 2**doubling, wait.requeuing_backoff_max_s)
        self._evict(life, "PodsReadyTimeout", "PodsReadyTimeout", at, requeue_at=at + backoff)
        self.hooks.effect(WakeAt(life.key, Timer.REQUEUE, at + backoff, life.token))

    # ------------------------------------------------------------------ eviction
    def _on_eviction_requested(self, event: ev.EvictionRequested) -> None:
        life = self.lives.get(event.key)
        if life is None or not life.state.holds_quota or life.evicting:
            return
        life.held = False
        if event.deactivate:
            self._end(life, S.INACTIVE, "deactivated", "Deactivated", event.reason, event.at)
            return
        self._evict(life, "Evicted", event.reason, event.at, requeue_at=event.requeue_at)
        if event.requeue_at is not None:
            self.hooks.effect(WakeAt(life.key, Timer.REQUEUE, event.requeue_at, life.token))

    def _on_node_lost(self, event: ev.NodeLost) -> None:
        """Evict every workload with a pod on the node; releasing one may bind a waiting one there, so
        repeat until the node holds nothing but workloads already stopping (live, they hold it until
        their pods are gone), then take it out of service."""
        reason = event.reason or f"NodeFailures: node {event.node} was removed"

        def holders() -> list[Life]:
            lives = (self.lives.get(key) for key in self.scheduler.holders_of(event.node))
            return [life for life in lives if life is not None and not life.evicting]

        while stopping := holders():
            for life in stopping:
                self._evict(life, "NodeFailures", reason, event.at)
        self.hooks.effect(NodeDown(event.node, event.at))
        self.scheduler.set_node_down(event.node, True)
        self._dirty = True

    def _on_nodes_added(self, event: ev.NodesAdded) -> None:
        for name in event.nodes:
            self.scheduler.set_node_down(name, False)
            self.hooks.effect(NodeUp(name, event.at))
        self._freeing("", event.at, self.scheduler.nodes_added)

    def _evict(
        self, life: Life, reason: str, message: str, at: float, requeue_at: float | None = None
    ) -> None:
        """Stop the pods; the eviction completes when they are gone (at once with instant stops)."""
        self.hooks.effect(StopPods(life.key, life.policy.max_grace_s, reason, message, at))
        life.token += 1
        life.evicting, life.evicting_message, life.evicting_requeue_at = reason, message, requeue_at
        life.evicting_at = at
        if self.settings.instant_stops or not (life.bound and life.running_pods):
            self._complete_eviction(life, at)
        else:
            self._evicting.add(life.key)

    def _on_pods_stopped(self, event: ev.PodsStopped) -> None:
        life = self.lives.get(event.key)
        if life is not None and life.evicting:
            life.running_pods.clear()
            self._complete_eviction(life, event.at)

    def _complete_eviction(self, life: Life, at: float) -> None:
        reason, message, requeue_at = life.evicting, life.evicting_message, life.evicting_requeue_at
        self._evicting.discard(life.key)
        life.evicting = life.evicting_message = ""
        life.evicting_requeue_at = None
        self._move(life, S.PENDING)
        if life.admitted_at is not None:  # Admitted turns False: Kueue adds the whole seconds
            life.past_execution_s += int(at - life.admitted_at)
            life.admitted_at = None
        life.held = life.bound = False
        life.pods, life.running_pods, life.succeeded_pods = (), set(), set()
        life.failures = 0
        life.started_at = None  # as a resumed Job's startTime: the next run counts from its next start
        self.hooks.effect(Requeued(life.key, reason, message, requeue_at, at))
        order_at = life.evicting_at if self._orders_by_eviction(reason) else None
        self._freeing(life.key, at, lambda: self.scheduler.evict(life.key, at, requeue_at, order_at))
        life.workload = self.scheduler.workload_of(life.key) or life.workload

    def _orders_by_eviction(self, reason: str) -> bool:
        """Kueue's ``GetQueueOrderTimestamp`` (pkg/workload/workload.go): a workload evicted for
        PodsReadyTimeout waits in its queue from the eviction's time under the Eviction timestamp."""
        return reason == "PodsReadyTimeout" and self._wait.requeuing_timestamp == RequeuingTimestamp.EVICTION

    # ------------------------------------------------------------------ ending
    def _end(
        self, life: Life, state: WorkloadState, cause: str, reason: str, message: str, at: float
    ) -> None:
        previous = life.state
        self._move(life, state)
        life.token += 1
        self._evicting.discard(life.key)
        self.hooks.effect(Ended(life.key, state, previous, cause, reason, message, at))
        self._finish(life, at)

    def _on_withdrawn(self, event: ev.Withdrawn) -> None:
        life = self.lives.get(event.key)
        if life is None or life.state.ended:
            return
        previous = life.state
        if previous == S.PENDING and life.cluster_queue is not None:
            self.scheduler.withdraw(life.key)
        self._move(life, S.SUCCEEDED)
        life.token += 1
        self._evicting.discard(life.key)
        self.hooks.effect(
            Ended(life.key, S.SUCCEEDED, previous, "withdrawn", "Deleted", event.reason, event.at)
        )
        if previous.holds_quota:
            self._finish(life, event.at)
        else:
            del self.lives[life.key]

    def _finish(self, life: Life, at: float) -> None:
        key = life.key
        del self.lives[key]
        if self.scheduler.holds(key):
            self._freeing(key, at, lambda: self.scheduler.finish(key, at))
        else:
            self.scheduler.withdraw(key)
            self._dirty = True

    def _freeing(self, key: str, at: float, release: Callable[[], None]) -> None:
        """Free ``key``'s nodes through ``release``; pods waiting for room may now be bound."""
        self.scheduler.take_placed_waiting()  # bound earlier: started where they were bound
        nodes = self.scheduler.nodes_of(key) if key else ()
        release()
        if key:
            self.hooks.effect(Released(key, nodes, at))
        for bound in sorted(set(self.scheduler.take_placed_waiting()) - {key}):
            other = self.lives.get(bound)
            if other is not None and other.state == S.ADMITTED and not other.bound and not other.held:
                self._start(other, at)
        self._dirty = True

    # ------------------------------------------------------------------ intake
    def _on_submitted(self, event: ev.Submitted) -> None:
        workload = event.workload
        target, why = self.scheduler.route(workload)
        life = Life(workload.key, workload, S.PENDING, target, event.policy)
        self.lives[workload.key] = life
        if target is None:
            life.state = S.INADMISSIBLE
            life.message = why
            return
        self.scheduler.submit(workload)
        self._dirty = True
        backoff = workload.requeue_at
        if backoff is not None and backoff > event.at:  # a requeue backoff still running: wait until then
            self.hooks.effect(WakeAt(workload.key, Timer.REQUEUE, backoff, life.token))

    def submit(self, workload: Workload, at: float, policy: JobPolicy | None = None) -> None:
        self.handle(ev.Submitted(workload, at, policy or JobPolicy()))

    def reason_of(self, key: str) -> str:
        life = self.lives.get(key)
        return life.message if life is not None else ""

    # ------------------------------------------------------------------ helpers
    def _move(self, life: Life, state: WorkloadState) -> None:
        check_transition(life.key, life.state, state)
        life.state = state
