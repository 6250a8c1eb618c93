"""The control loop: the core engine deciding, an executor running, the store remembering.

Each :meth:`ControlLoop.step`:

1. reads the store's feed when its version moved (``Store.read_feed``: indexed
   reads of what is new, never a list of every workload) and reloads the
   configuration when an object changed (a new ``Scheduler`` and lifecycle, the
   workloads that hold quota adopted with their admission);
2. takes in the workloads submitted since, and withdraws the deleted ones;
3. collects the pod starts that returned (:mod:`gpuq.run.starts`) and the pod
   exits, and hands each to the lifecycle as an event, at the time it happened;
4. fires the lifecycle's timers that are due (waitForPodsReady, requeue
   backoff, pod restart backoff, ``activeDeadlineSeconds``);
5. lets the lifecycle settle: Kueue cycles with the same
   :class:`~gpuq.core.admission.Scheduler` ``gpuq admit`` and ``gpuq simulate``
   use, run by the same :class:`~gpuq.core.lifecycle.Lifecycle` the simulator
   drives, each cycle at the wall-clock time it runs;
6. commits everything the step decided in one transaction
   (:class:`~gpuq.run.store.StepWrites`), then hands the pods to start to the
   start threads: a pod's row names its attempt before any process starts.

The leader's state is in memory and changes by deltas: the cost of a step is
what changed, not what the store holds. A new leader rebuilds it from the store
once (:meth:`ControlLoop._recover`).

Every rule lives in the lifecycle; this loop only translates: store changes and
process exits into events, effects into store writes and executor actions
(start the pods on exactly the devices placement chose, SIGTERM preemption
victims with SIGKILL after their grace). Preemption completes when the victim's
processes are gone: only then is its quota released and the workload requeued,
as a kubelet and Kueue would.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuq.api import convert, kueue
from gpuq.api.loader import load_objects
from gpuq.api.queue_defaulting import QueueDefaults, apply_default_local_queue
from gpuq.api.source_fields import SourceError
from gpuq.api.sources_derived import live_workload
from gpuq.core.admission import Scheduler
from gpuq.core.decisions import CycleResult
from gpuq.core.lifecycle import (
    Effect,
    Ended,
    JobPolicy,
    Lifecycle,
    Noted,
    Preempted,
    Requeued,
    Reserved,
    RestartPod,
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
from gpuq.core.lifecycle.states import ACTIVE as ACTIVE_STATES
from gpuq.core.model import Admission, ClusterConfig, Workload
from gpuq.core.nodes import Node
from gpuq.core.placement.engine import Placer, PodBinding
from gpuq.run.devices import DeviceAllocator
from gpuq.run.executors.base import Executor, NodeWatcher, PodExit, PodLaunch, PodProbe, RecoveringExecutor
from gpuq.run.gpus import GPUDevice
from gpuq.run.jobs import JobRun, job_run
from gpuq.run.pods import PodState, Tracked, kill_leftover, pod_key, pod_launch, pod_record
from gpuq.run.starts import DEFAULT_START_THREADS, PodStarts, StartOutcome
from gpuq.run.store import (
    ConditionRecord,
    Feed,
    PodRecord,
    StepWrites,
    Store,
    WorkloadChange,
    WorkloadRecord,
)

if TYPE_CHECKING:
    from gpuq.run.serving.controller import ServiceController

ACTIVE = tuple(state.value for state in ACTIVE_STATES)
_RESTARTED = ("ControlPlaneRestarted", "the control plane restarted; pods requeued")
DEFAULT_MAX_GRACE_S = 300.0  # gpuq serve --max-grace-period
KUEUE_KINDS = frozenset(
    {
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "Cohort",
        "WorkloadPriorityClass",
        "PriorityClass",
        "AdmissionCheck",
        "Topology",
        "Namespace",
        "Configuration",
    }
)


@dataclass
class LoopCounters:
    """What the loop has done since it started, for /metrics (Kueue's counter names)."""

    admitted: dict[str, int] = field(default_factory=dict)  # cluster queue -> admissions
    preempted: dict[tuple[str, str], int] = field(default_factory=dict)  # (preempting queue, reason)
    evicted: dict[tuple[str, str], int] = field(default_factory=dict)  # (cluster queue, reason)
    admission_waits: dict[str, list[float]] = field(default_factory=dict)  # queue -> seconds, unread

    def bump(self, table: dict[Any, int], key: Any) -> None:
        table[key] = table.get(key, 0) + 1


class ControlLoop:
    """Admission, placement and execution for one store; run it only on the elected leader.

    The loop is the lifecycle's live driver (:class:`~gpuq.core.lifecycle.LifecycleHooks`): it
    applies each effect to the store and the executor as the lifecycle emits it."""

    def __init__(
        self,
        store: Store,
        executor: Executor,
        nodes: Sequence[Node],
        *,
        workdir: Path,
        policy: str = "binpack",
        clock: Callable[[], float] = time.time,
        restart_backoff_s: float = 10.0,
        devices: Mapping[str, Sequence[GPUDevice]] | None = None,
        services: ServiceController | None = None,
        max_grace_s: float = DEFAULT_MAX_GRACE_S,
        start_threads: int = DEFAULT_START_THREADS,
        wake: Callable[[], None] | None = None,
    ) -> None:
        """``devices`` are each node's real or virtual GPUs, for nodes whose MIG slices (or GPUs beside
        them) placement only counts; without them such pods get no device ids. ``services`` runs live
        services (:mod:`gpuq.run.serving`): it steps before intake (its replicas are workloads) and
        vets each cycle's preemptions against PodDisruptionBudgets. ``max_grace_s`` caps the grace
        period a pod asks for (``terminationGracePeriodSeconds``): a victim holds its quota that long
        at most, whatever its author wrote. ``start_threads`` start pods outside the step (0: on the
        loop's thread, after the step's commit); ``wake`` is called when a start returns (the runner's
        wake-up, so the loop steps at once)."""
        self.store = store
        self.executor = executor
        self.nodes = tuple(nodes)
        self.workdir = workdir
        self.policy = policy
        self.clock = clock
        self.restart_backoff_s = restart_backoff_s
        self.max_grace_s = max_grace_s
        self.tracked: dict[str, Tracked] = {}
        self.scheduler: Scheduler | None = None
        self.life: Lifecycle | None = None
        self.config: ClusterConfig | None = None
        self.priorities: convert.PriorityTable | None = None
        self.queue_defaults = QueueDefaults()
        self.config_problem = ""
        self._config_signature: tuple[tuple[str, str, str, int], ...] | None = None
        self._recovered = False
        self.counters = LoopCounters()
        self._seen_version = -1
        self._feed_at = 0  # the store version the feed has been read up to
        self._objects: tuple[int, int] | None = None  # the configuration objects' signature, last read
        self.writes = StepWrites()
        """What this step decided, committed at its end in one transaction."""
        self._to_start: list[PodLaunch] = []  # handed to the start threads once the writes committed
        self._by_pod: dict[str, tuple[Tracked, PodState]] = {}  # pod key -> its workload and state
        self._early_exits: dict[str, PodExit] = {}  # exits polled before their start's outcome
        self.starts = PodStarts(executor, threads=start_threads, clock=clock, on_done=wake)
        self.record_ids: set[int] = set()
        self._allocators = {node: DeviceAllocator(found) for node, found in (devices or {}).items()}
        self.services = services
        self._timers: list[tuple[float, int, WakeAt]] = []
        self._timer_seq = itertools.count()
        self._effects: dict[type, Callable[[Any], None]] = {
            Reserved: self._on_reserved,
            StartPods: self._on_start_pods,
            RestartPod: self._on_restart_pod,
            StateChanged: self._on_state_changed,
            StopPods: self._on_stop_pods,
            Preempted: self._on_preempted,
            Requeued: self._on_requeued,
            Ended: self._on_ended,
            WakeAt: self._on_wake_at,
            WaitReason: self._on_wait_reason,
            Noted: self._on_noted,
        }

    # ------------------------------------------------------------------ step
    def step(self) -> None:
        now = self.clock()
        feed: Feed | None = None
        version = self.store.resource_version()
        if version != self._seen_version and (not self._recovered or self.life is None):
            # No position in the feed yet (a new leader recovers from the store once): the objects only.
            objects = self.store.objects_signature()
            if objects != self._objects or self.life is None:
                self._reload_config(now)
                self._objects = objects
        elif version != self._seen_version:  # nothing was written since the last look: nothing new
            feed = self.store.read_feed(self._feed_at)
            if feed.objects != self._objects:
                self._reload_config(now)
                self._objects = feed.objects
        if self.life is None:
            return
        if not self._recovered:
            self._recover(now)  # reads everything up to its own position in the feed
            self._recovered = True
        if self.services is not None:
            self.services.step(self, now)
        if feed is not None:
            self._intake(feed, now)
            self._seen_version = feed.version if not feed.more else -1
        self._collect_starts()
        self._reap()
        self._node_changes(now)
        self._fire_timers(now)
        self.life.settle(now, clock=self.clock)
        self._commit()

    def wake_with(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever a pod start returns (the runner then steps at once)."""
        self.starts.on_done = callback

    @property
    def objects_seen(self) -> tuple[int, int] | None:
        """The signature of the stored objects as the feed last read it (None before the first read)."""
        return self._objects

    @property
    def backlog(self) -> bool:
        """The last feed read stopped at its limit: more submissions wait to be read (step again now)."""
        return self._recovered and self._seen_version == -1 and self.life is not None

    @property
    def busy(self) -> bool:
        """Pods are starting or running: their outcomes are due soon (the runner steps more often)."""
        return bool(self._by_pod) or self.starts.in_flight > 0 or bool(self._to_start)

    def _commit(self) -> None:
        """Write the step's decisions in one transaction, then start the pods they bound. A failed commit
        keeps both for the next step (nothing was written, nothing starts before it is)."""
        if self.writes:
            self.store.commit(self.writes)
            self.writes = StepWrites()
        launches, self._to_start = self._to_start, []
        for launch in launches:
            self.starts.submit(launch)
        if launches and self.starts.inline:  # started on this thread: their outcomes are known now
            self._collect_starts()
            if self.writes:
                self.store.commit(self.writes)
                self.writes = StepWrites()

    def close(self) -> None:
        if self.services is not None:
            self.services.close()
        self.starts.close()
        self.executor.close()

    # ------------------------------------------------------- the lifecycle's hooks
    def effect(self, effect: Effect) -> None:
        handler = self._effects.get(type(effect))
        if handler is not None:
            handler(effect)

    def hold_checks(self, key: str, checks: tuple[str, ...], at: float) -> set[str]:
        """No admission-check controller runs live: every check is Ready at once."""
        return set()

    def vet(self, result: CycleResult, at: float) -> CycleResult:
        """Disruption budgets protect serving replicas."""
        return self.services.filter_preemptions(result) if self.services is not None else result

    # ---------------------------------------------------------- configuration
    def _reload_config(self, now: float) -> None:
        objects = [o for o in self.store.list_objects() if o.kind in KUEUE_KINDS]
        signature = tuple(sorted((o.kind, o.namespace, o.name, o.resource_version) for o in objects))
        if signature == self._config_signature:
            return
        self._config_signature = signature
        result = load_objects((f"{o.kind}/{o.namespace}/{o.name}", o.manifest) for o in objects)
        if result.errors or result.config is None:
            self.config_problem = "; ".join(str(d) for d in result.errors) or "no configuration"
            return
        self.config_problem = ""
        self.config = result.config
        self.priorities = convert.PriorityTable.from_models([m.model for m in result.manifests])
        self.queue_defaults = QueueDefaults.from_models(m.model for m in result.manifests)
        placer = Placer(
            self.nodes, policy=self.policy, flavors=self.config.flavors, topologies=self.config.topologies
        )
        previous = self.scheduler
        self.scheduler = Scheduler(self.config, placer)
        if previous is not None:
            _carry_fair_usage(previous, self.scheduler)
        settings = LifecycleSettings(
            instant_stops=False, report_waits=True, restart_backoff_s=self.restart_backoff_s
        )
        self.life = Lifecycle(self.scheduler, self, settings)
        self._timers.clear()  # the new lifecycle's tokens start again
        for tracked in self.tracked.values():
            self._resubmit(tracked, now)
        self.life.mark_dirty()

    def _resubmit(self, tracked: Tracked, now: float) -> None:
        """Put a tracked workload into a fresh lifecycle: pending ones queue, admitted ones keep their
        quota and their pods where they run, devices included; running ones also keep their failures,
        their ``activeDeadlineSeconds`` and the pod exits already seen (:meth:`_readopt`). One whose
        quota the new configuration no longer grants (its ClusterQueue gone or draining) loses its pods
        and waits in its queue again."""
        assert self.life is not None
        policy = _policy(tracked.run, self.max_grace_s)
        if tracked.state in ("Pending", "QuotaReserved") or tracked.workload.admission is None:
            tracked.state = WorkloadState.PENDING
            self.life.submit(dataclasses.replace(tracked.workload, admission=None), now, policy)
            return
        if tracked.state != WorkloadState.RUNNING:
            bindings = _bindings(tracked)
            self.life.adopt(
                tracked.workload,
                now,
                placed=bindings or None,
                running=False,
                policy=policy,
                admitted_at=tracked.admitted_at,
            )
            self.life.start(tracked.key, now)
            return
        codes = {row.name: row.exit_code for row in self.store.pods_of(tracked.record_id)}
        seen = [
            (pod.name, 0 if pod.succeeded else codes.get(pod.name) or 1)
            for pod in tracked.pods.values()
            if not pod.running
        ]
        if not self._readopt(tracked, now, seen):
            self._stop_all(tracked, 0.0, now, record=False)
            message = "the new configuration does not grant its quota; pods stopped and requeued"
            self._unhold(tracked, now, "ConfigurationChanged", message)

    # --------------------------------------------------------------- intake
    def _recover(self, now: float) -> None:
        """After a restart (this loop's first step, a new leader): take back what the previous one left.

        Each workload the store says is Admitted or Running is taken back whole or not at all: when
        every pod its rows name as started is the very process recorded and still runs, or is gone
        with its exit recorded (the executor's :meth:`~RecoveringExecutor.probe`), it is adopted as it
        was: Running, holding its quota and its pods' devices; the exits recorded while no loop ran
        are delivered as pod exits at the first reap, so a job that succeeded meanwhile succeeds once
        and a failure counts against its ``backoffLimit``. When any pod is lost (gone without a record,
        never started, another attempt or process) or an eviction was in flight, the workload is
        evicted and requeued (``ControlPlaneRestarted``). Pending ones queue again. Last, the executor
        kills whatever earlier executors started that nothing adopted (:meth:`~RecoveringExecutor.sweep`).

        An executor that cannot take its pods back (Ray) kills them by pid, and every admitted or
        running workload is requeued."""
        assert self.life is not None
        executor = self.executor if isinstance(self.executor, RecoveringExecutor) else None
        self._feed_at = self.store.resource_version()  # the feed goes on from what this read holds
        for record in self.store.list_workloads(states=ACTIVE):
            if record.id in self.record_ids:
                continue
            tracked = self._track(record, now)
            if tracked is None:
                continue
            if record.state in ("Admitted", "Running"):
                if executor is not None and self._take_back(tracked, record, executor, now):
                    continue
                if executor is None:
                    for pod in self.store.pods_of(record.id):
                        kill_leftover(pod.pid)
                self._write_requeued(tracked, now, *_RESTARTED)
            tracked.state = WorkloadState.PENDING
            self.life.submit(tracked.workload, now, _policy(tracked.run, self.max_grace_s))
        if executor is not None:
            executor.sweep()

    def _take_back(
        self, tracked: Tracked, record: WorkloadRecord, executor: RecoveringExecutor, now: float
    ) -> bool:
        """Adopt an admitted or running workload of a previous loop with its pods (see :meth:`_recover`);
        False, with nothing adopted, when it must be requeued instead."""
        assert self.life is not None
        rows = self.store.pods_of(record.id)
        if not rows or record.admission is None or self._was_evicting(record):
            return False
        started = [row for row in rows if row.state not in ("Succeeded", "Failed")]
        for row in started:
            probe = executor.probe(f"{tracked.key}/{row.name}", attempt=row.attempt, pid=row.pid)
            if probe.state == "lost":
                return False
        admission = _stored_admission(record, tracked.workload)
        if admission is None:
            return False
        tracked.workload = dataclasses.replace(
            tracked.workload, admission=admission, quota_reserved_time=record.admitted_at
        )
        self._set_pods(tracked, {row.name: _pod_state(row) for row in rows})
        tracked.state = WorkloadState.RUNNING
        tracked.admitted_at = record.admitted_at
        tracked.started_at = record.started_at or now
        seen = [
            (row.name, 0 if row.state == "Succeeded" else row.exit_code or 1)
            for row in rows
            if row not in started
        ]
        exited = 0
        for row in started:
            taken = executor.adopt(f"{tracked.key}/{row.name}", attempt=row.attempt, pid=row.pid)
            exited += taken.state == "exited"
            if taken.state == "lost":  # it died, unrecorded, since the probe: killed
                seen.append(self._died(tracked, tracked.pods[row.name], taken, now))
        if not self._readopt(tracked, now, seen):
            self._stop_all(tracked, 0.0, now, record=False)
            self._unhold(tracked, now, *_RESTARTED)
            return True
        if record.state != WorkloadState.RUNNING:  # its pods had started, PodsReady was not written yet
            condition = ConditionRecord("PodsReady", "True", "PodsReady", "all pods are running", now)
            fields = {"started_at": tracked.started_at}
            self.writes.change(
                WorkloadChange(record.id, WorkloadState.RUNNING, condition=condition, fields=fields)
            )
        message = f"the control plane restarted; {len(started)} running pod(s) taken back"
        message += f", {exited} of them ended meanwhile" if exited else ""
        self._event(tracked, "Normal", "Adopted", message, now)
        return True

    def _readopt(self, tracked: Tracked, now: float, seen: Sequence[tuple[str, int]]) -> bool:
        """Adopt a running workload into the lifecycle with its pods where they run, as it was: its
        failures (one per restart so far), its ``activeDeadlineSeconds`` timer, its allocator devices,
        and the exits ``seen`` (pod, code) of pods no longer running delivered again. False when the
        lifecycle does not grant it quota (it then waits in its queue)."""
        assert self.life is not None
        policy = _policy(tracked.run, self.max_grace_s)
        bindings = _bindings(tracked)
        adopted = self.life.adopt(
            tracked.workload,
            now,
            placed=bindings or None,
            running=True,
            policy=policy,
            admitted_at=tracked.admitted_at,
        )
        if not adopted:
            return False
        life = self.life.life(tracked.key)
        assert life is not None
        tracked.workload = life.workload
        life.failures = sum(pod.attempt for pod in tracked.pods.values())
        deadline = policy.active_deadline_s
        if deadline is not None and tracked.started_at is not None:
            life.started_at = tracked.started_at
            self._on_wake_at(WakeAt(tracked.key, Timer.DEADLINE, tracked.started_at + deadline, life.token))
        self._claim_devices(tracked)
        for name, code in seen:
            self.life.handle(ev.PodExited(tracked.key, name, code, now))
        return True

    def _was_evicting(self, record: WorkloadRecord) -> bool:
        """Whether the previous loop was evicting the workload (its last condition says Evicted)."""
        conditions = self.store.conditions(record.id)
        return bool(conditions) and conditions[-1].type == "Evicted"

    def _died(self, tracked: Tracked, pod: PodState, probe: PodProbe, now: float) -> tuple[str, int]:
        """A pod found running whose process vanished before it was adopted: a SIGKILLed pod."""
        pod.running = False
        self.writes.update_pod(tracked.record_id, pod.name, state="Failed", exit_code=-9, finished_at=now)
        return pod.name, -9

    def _unhold(self, tracked: Tracked, now: float, reason: str, message: str) -> None:
        """A workload the lifecycle took back as pending (no quota for it now): forget its pods."""
        self._give_devices(tracked)
        self._set_pods(tracked, {})
        tracked.state = WorkloadState.PENDING
        tracked.started_at = None
        tracked.workload = dataclasses.replace(tracked.workload, admission=None)
        self._write_requeued(tracked, now, reason, message)

    def _write_requeued(self, tracked: Tracked, now: float, reason: str, message: str) -> None:
        """The store's side of a workload evicted and requeued here: Pending, no admission, no pods."""
        condition = ConditionRecord("Evicted", "True", reason, message, now)
        fields: dict[str, Any] = {"admission": None, "cluster_queue": None}
        self.writes.change(
            WorkloadChange(tracked.record_id, "Pending", condition=condition, pods=[], fields=fields)
        )

    def _claim_devices(self, tracked: Tracked) -> None:
        """Adopted pods keep the devices a node's allocator gave them (MIG slices): taken again."""
        for pod in tracked.pods.values():
            allocator = self._allocators.get(pod.node)
            if allocator is not None and pod.devices:
                _claim(allocator, pod_key(tracked, pod), pod.devices)

    def _intake(self, feed: Feed, now: float) -> None:
        """The workloads created since the feed's last read join their queues (at the time they were
        submitted); the deleted ones are withdrawn."""
        assert self.life is not None
        for record in feed.workloads:
            if record.id in self.record_ids or record.state != WorkloadState.PENDING:
                continue
            tracked = self._track(record, now)
            if tracked is not None:
                self.life.submit(tracked.workload, now, _policy(tracked.run, self.max_grace_s))
        if feed.deleted:
            by_record = {t.record_id: t for t in self.tracked.values()} if len(feed.deleted) > 8 else None
            for tombstone in feed.deleted:
                tracked = (
                    by_record.get(tombstone.workload_id)
                    if by_record is not None
                    else self.tracked.get(f"{tombstone.namespace}/{tombstone.name}")
                )
                if tracked is not None and tracked.record_id == tombstone.workload_id:
                    self._forget(tracked, now)
            self.writes.tombstones_upto = feed.upto
        self._feed_at = feed.upto

    def _track(self, record: WorkloadRecord, now: float) -> Tracked | None:
        try:
            workload, run = self._convert(record)
        except (SourceError, ValueError) as error:
            message = f"cannot run: {error}"
            condition = ConditionRecord("Finished", "True", "InvalidWorkload", message, now)
            fields = {"finished_at": now, "message": message}
            self.writes.change(WorkloadChange(record.id, "Failed", condition=condition, fields=fields))
            return None
        tracked = Tracked(record.id, workload.key, workload, run, state=WorkloadState(record.state))
        tracked.message = record.message
        self.tracked[workload.key] = tracked
        self.record_ids.add(record.id)
        return tracked

    def _convert(self, record: WorkloadRecord) -> tuple[Workload, JobRun]:
        assert self.priorities is not None
        # Kueue's LocalQueueDefaulting, as its webhook applies it: no queue label, a LocalQueue `default`
        document = live_workload(apply_default_local_queue(record.manifest, self.queue_defaults))
        model = kueue.Workload.model_validate(document)
        workload = convert.workload(model, self.priorities)
        workload = dataclasses.replace(
            workload,
            name=record.name,
            namespace=record.namespace,
            creation_time=record.created_at,
            uid=f"{record.id:012d}",
        )
        return workload, job_run(record.manifest, workdir=self.workdir)

    def _forget(self, tracked: Tracked, now: float) -> None:
        """A workload deleted from the store: the lifecycle withdraws it (its pods stop)."""
        assert self.life is not None
        if self.life.state_of(tracked.key) is None:  # the lifecycle no longer has it: just forget it
            self._stop_all(tracked, 0.0, now, record=False)
            self._give_devices(tracked)
            self._untrack(tracked)
            return
        self.life.handle(ev.Withdrawn(tracked.key, "deleted", now))

    def _untrack(self, tracked: Tracked) -> None:
        self._set_pods(tracked, {})
        self.tracked.pop(tracked.key, None)
        self.record_ids.discard(tracked.record_id)

    def _set_pods(self, tracked: Tracked, pods: dict[str, PodState]) -> None:
        """Replace the workload's pods, keeping the pod-key index (exits and starts find them by key)."""
        for pod in tracked.pods.values():
            self._by_pod.pop(pod_key(tracked, pod), None)
        tracked.pods = pods
        for pod in pods.values():
            self._by_pod[pod_key(tracked, pod)] = (tracked, pod)

    # ------------------------------------------------------------ effects
    def _on_reserved(self, effect: Reserved) -> None:
        assert self.life is not None
        tracked = self.tracked[effect.key]
        decision = effect.admit
        self.counters.bump(self.counters.admitted, decision.cluster_queue)
        waits = self.counters.admission_waits.setdefault(decision.cluster_queue, [])
        waits.append(max(0.0, effect.at - tracked.workload.creation_time))
        life = self.life.life(effect.key)
        if life is not None:
            tracked.workload = life.workload
        tracked.state = effect.state
        tracked.admitted_at = effect.at
        admission = {
            "clusterQueue": decision.cluster_queue,
            "podSetAssignments": [
                {"name": ps.name, "count": ps.count, "flavors": dict(ps.flavors)} for ps in decision.pod_sets
            ],
        }
        reason = "Admitted" if effect.state == WorkloadState.ADMITTED else "QuotaReserved"
        condition = ConditionRecord(reason, "True", reason, decision.message, effect.at)
        fields = {
            "cluster_queue": decision.cluster_queue,
            "admission": admission,
            "admitted_at": effect.at,
            "message": "",
        }
        tracked.message = ""
        self.writes.change(
            WorkloadChange(tracked.record_id, effect.state, condition=condition, fields=fields)
        )
        self._event(tracked, "Normal", reason, decision.message, effect.at)

    def _on_start_pods(self, effect: StartPods) -> None:
        """Record the pods placement bound (their rows, Pending, are in this step's commit) and queue their
        starts; the lifecycle hears that they run once every start has returned (:meth:`_started`)."""
        tracked = self.tracked[effect.key]
        self._set_pods(tracked, self._placed_pods(tracked, effect.bindings))
        pods = [pod_record(p) for p in tracked.pods.values()]
        self.writes.change(WorkloadChange(tracked.record_id, tracked.state, pods=pods))
        tracked.start_failures = []
        for pod in tracked.pods.values():
            self._start(tracked, pod)

    def _on_restart_pod(self, effect: RestartPod) -> None:
        assert self.life is not None
        tracked = self.tracked.get(effect.key)
        pod = tracked.pods.get(effect.pod) if tracked is not None else None
        if tracked is None or pod is None:
            return
        pod.attempt += 1
        self._event(
            tracked, "Normal", "Restarted", f"pod {pod.name} restarted (attempt {pod.attempt})", effect.at
        )
        self._start(tracked, pod)

    def _on_state_changed(self, effect: StateChanged) -> None:
        tracked = self.tracked.get(effect.key)
        if tracked is None:
            return
        tracked.state = effect.state
        fields: dict[str, Any] = {}
        if effect.state == WorkloadState.RUNNING:
            tracked.started_at = tracked.started_at or effect.at
            fields["started_at"] = effect.at
        condition = ConditionRecord(effect.reason, "True", effect.reason, effect.message, effect.at)
        self.writes.change(
            WorkloadChange(tracked.record_id, effect.state, condition=condition, fields=fields)
        )
        if effect.state == WorkloadState.RUNNING:
            self._event(tracked, "Normal", "Started", effect.message, effect.at)

    def _on_preempted(self, effect: Preempted) -> None:
        tracked = self.tracked[effect.key]
        preemptor = self.tracked.get(effect.by)
        by_queue = self._queue_of(preemptor) if preemptor is not None else ""
        self.counters.bump(self.counters.preempted, (by_queue, effect.reason))
        message = f"Preempted to accommodate {effect.by} ({effect.reason})"
        condition = ConditionRecord("Evicted", "True", "Preempted", message, effect.at)
        self.writes.change(WorkloadChange(tracked.record_id, tracked.state, condition=condition))
        self._event(tracked, "Normal", "Preempted", message, effect.at)

    def _on_stop_pods(self, effect: StopPods) -> None:
        """SIGTERM every running pod, SIGKILL after its pod set's grace; their exits complete it."""
        tracked = self.tracked[effect.key]
        tracked.evicting = effect.reason
        self._event(tracked, "Normal", "Evicted", effect.message, effect.at)
        self._stop_all(tracked, None, effect.at, record=False)

    def _on_requeued(self, effect: Requeued) -> None:
        assert self.life is not None
        tracked = self.tracked[effect.key]
        self.counters.bump(self.counters.evicted, (self._queue_of(tracked), effect.reason))
        tracked.evicting = ""
        tracked.state = WorkloadState.PENDING
        tracked.started_at = None  # as a resumed Job's startTime: its next run counts from its next start
        self._give_devices(tracked)
        self._set_pods(tracked, {})
        tracked.workload = dataclasses.replace(tracked.workload, admission=None, requeue_at=effect.requeue_at)
        condition = ConditionRecord(
            "Requeued", "True", effect.reason, f"evicted ({effect.reason}) and requeued", effect.at
        )
        fields: dict[str, Any] = {"admission": None, "cluster_queue": None, "requeue_at": effect.requeue_at}
        self.writes.change(
            WorkloadChange(tracked.record_id, "Pending", condition=condition, pods=[], fields=fields)
        )
        self._event(tracked, "Normal", "Requeued", condition.message, effect.at)

    def _on_ended(self, effect: Ended) -> None:
        """The workload is over: pods still running are killed and their rows say Failed now (the
        workload is forgotten before their exits arrive)."""
        tracked = self.tracked.get(effect.key)
        if tracked is None:
            return
        withdrawn = effect.cause == "withdrawn"
        self._stop_all(tracked, 0.0, effect.at, record=not withdrawn)
        tracked.state = effect.state
        if not withdrawn:
            condition = ConditionRecord("Finished", "True", effect.reason, effect.message, effect.at)
            fields = {"finished_at": effect.at, "message": effect.message}
            self.writes.change(
                WorkloadChange(tracked.record_id, effect.state, condition=condition, fields=fields)
            )
            succeeded = effect.state == WorkloadState.SUCCEEDED
            message = effect.message or effect.reason
            self._event(tracked, "Normal" if succeeded else "Warning", effect.reason, message, effect.at)
        self._give_devices(tracked)
        self._untrack(tracked)

    def _event(self, tracked: Tracked, kind: str, reason: str, message: str, at: float) -> None:
        """A Kubernetes-style event about the workload (``gpuq describe``, the dashboard)."""
        self.writes.event(kind, reason, "Workload", tracked.namespace, tracked.name, message, at)

    def _on_wake_at(self, effect: WakeAt) -> None:
        heapq.heappush(self._timers, (effect.at, next(self._timer_seq), effect))

    def _on_wait_reason(self, effect: WaitReason) -> None:
        tracked = self.tracked.get(effect.key)
        if (
            tracked is not None
            and tracked.state == WorkloadState.PENDING
            and tracked.message != effect.message
        ):
            tracked.message = effect.message  # written once per change, not at every cycle it waits
            self.writes.change(
                WorkloadChange(tracked.record_id, "Pending", fields={"message": effect.message})
            )

    def _on_noted(self, effect: Noted) -> None:
        tracked = self.tracked.get(effect.key)
        if tracked is not None:
            self.writes.event(
                effect.kind,
                effect.reason,
                "Workload",
                tracked.namespace,
                tracked.name,
                effect.message,
                effect.at,
            )

    # ---------------------------------------------------------------- pods
    def _placed_pods(self, tracked: Tracked, bindings: Sequence[PodBinding]) -> dict[str, PodState]:
        """The pods placement bound, each with its devices: the GPU indices placement chose, or, on a node
        that only counts devices (MIG), slices and GPUs the node's allocator picks."""
        requests = {ps.name: ps.requests for ps in tracked.workload.pod_sets}
        pods: dict[str, PodState] = {}
        for binding in bindings:
            name = binding.pod.rsplit("/", 1)[1]
            pod_set = name.rsplit("-", 1)[0]
            devices = tuple(str(g) for g in binding.gpus)
            allocator = self._allocators.get(binding.node)
            if not devices and allocator is not None:
                devices = allocator.take(f"{tracked.key}/{name}", requests.get(pod_set, {}))
            pods[name] = PodState(name, pod_set, binding.node, devices)
        return pods

    def _give_devices(self, tracked: Tracked) -> None:
        for pod in tracked.pods.values():
            allocator = self._allocators.get(pod.node)
            if allocator is not None:
                allocator.give(pod_key(tracked, pod))

    def _start(self, tracked: Tracked, pod: PodState) -> None:
        """Queue one pod's start for after this step's commit.

        Record first: the pod's row names the attempt about to start before any process does (a first
        start's row is in this commit, Pending; a restart's row is set back to Pending with its new
        attempt), and the executor records its intent before it starts the process; a leader taking
        over after a crash in between finds it, to adopt or kill."""
        launch = pod_launch(tracked, pod, self.workdir)
        if pod.attempt > 0:
            self.writes.update_pod(
                tracked.record_id, pod.name, state="Pending", attempt=pod.attempt, pid=None
            )
        pod.starting = True
        pod.log_path = launch.log_path
        self._to_start.append(launch)

    def _collect_starts(self) -> None:
        """The starts that returned: each pod runs (its row gets its pid) or could not start; once all of
        a workload's first starts are back, the lifecycle hears that its pods run, then of each failure.
        A start whose workload moved on meanwhile (evicted, ended, deleted) is stopped at once."""
        assert self.life is not None
        outcomes = self.starts.done()
        ready: dict[str, Tracked] = {}
        for outcome in outcomes:
            found = self._by_pod.get(outcome.key)
            if found is None or found[1].attempt != outcome.attempt or not found[1].starting:
                if outcome.started:
                    self.executor.terminate(outcome.key, 0.0)
                continue
            tracked, pod = found
            pod.starting = False
            if self._started(tracked, pod, outcome):
                ready[tracked.key] = tracked
        for key, tracked in ready.items():
            if any(pod.starting for pod in tracked.pods.values()) or self.tracked.get(key) is not tracked:
                continue
            at = max((p.started_at or 0.0) for p in tracked.pods.values()) or self.clock()
            failures, tracked.start_failures = tracked.start_failures, []
            if tracked.state == WorkloadState.ADMITTED:
                self.life.handle(ev.PodsRunning(key, at))
            for name, message in failures:
                self.life.handle(ev.PodStartFailed(key, name, message, at))
        for outcome in outcomes:
            early = self._early_exits.pop(outcome.key, None)
            if early is not None:
                self._exited(early)

    def _started(self, tracked: Tracked, pod: PodState, outcome: StartOutcome) -> bool:
        """Record one start's outcome; whether the workload waits for its first starts (PodsRunning)."""
        assert self.life is not None
        first = tracked.state == WorkloadState.ADMITTED
        if not outcome.started:
            pod.running = False
            if tracked.evicting:  # it was being stopped anyway: as a pod that exited
                self.life.handle(ev.PodExited(tracked.key, pod.name, 1, outcome.at))
            elif first:
                tracked.start_failures.append((pod.name, outcome.error))
            else:
                self.life.handle(ev.PodStartFailed(tracked.key, pod.name, outcome.error, outcome.at))
            return first
        pod.running = True
        pod.started_at = outcome.at
        self.writes.update_pod(
            tracked.record_id,
            pod.name,
            state="Running",
            pid=outcome.pid,
            started_at=outcome.at,
            attempt=pod.attempt,
            log_path=pod.log_path,
        )
        if tracked.evicting:  # evicted while it started: stop it too (its exit completes the eviction)
            grace = min(tracked.run.pod_set(pod.pod_set).grace_s, self.max_grace_s)
            self.executor.terminate(outcome.key, grace)
        return first

    def _stop_all(self, tracked: Tracked, grace_s: float | None, now: float, *, record: bool) -> None:
        """Terminate every running pod (``grace_s`` None: each pod set's grace); ``record``: their rows
        say Failed now. A pod still starting is stopped when its start returns (:meth:`_collect_starts`)."""
        for pod in tracked.pods.values():
            if not pod.running:
                continue
            grace = (
                min(tracked.run.pod_set(pod.pod_set).grace_s, self.max_grace_s)
                if grace_s is None
                else grace_s
            )
            self.executor.terminate(pod_key(tracked, pod), grace)
            if record:
                self.writes.update_pod(tracked.record_id, pod.name, state="Failed", finished_at=now)

    def _reap(self) -> None:
        for exit_ in self.executor.poll():
            found = self._by_pod.get(exit_.key)
            if found is not None and found[1].starting:  # its start has not been collected yet
                self._early_exits[exit_.key] = exit_
                continue
            self._exited(exit_)

    def _exited(self, exit_: PodExit) -> None:
        """A pod's exit, at the time the executor saw it, to its row and to the lifecycle."""
        assert self.life is not None
        found = self._by_pod.get(exit_.key)
        if found is None:
            return
        tracked, pod = found
        pod.running = False
        state = "Succeeded" if exit_.exit_code == 0 else "Failed"
        self.writes.update_pod(
            tracked.record_id, pod.name, state=state, exit_code=exit_.exit_code, finished_at=exit_.time
        )
        if exit_.exit_code == 0:
            pod.succeeded = True
        self.life.handle(ev.PodExited(tracked.key, pod.name, exit_.exit_code, exit_.time))

    def _node_changes(self, now: float) -> None:
        """Nodes the executor saw die or join (Ray) become the lifecycle's ``NodeLost`` (every workload
        with a pod there is evicted and requeued; placement keeps off the node) and ``NodesAdded``
        (a node that came back). A node this loop was not given is left for the next loop to place on."""
        assert self.life is not None
        if not isinstance(self.executor, NodeWatcher):
            return
        changes = self.executor.node_changes()
        known = {node.name for node in self.nodes}
        for name, reason in changes.lost:
            if name in known:
                self.life.handle(ev.NodeLost(name, reason, now))
        added = tuple(name for name in changes.added if name in known)
        if added:
            self.life.handle(ev.NodesAdded(added, now))

    def _fire_timers(self, now: float) -> None:
        assert self.life is not None
        while self._timers and self._timers[0][0] <= now:
            _, _, wake = heapq.heappop(self._timers)
            self.life.handle(ev.TimerFired(wake.key, wake.timer, wake.token, now, wake.pod))

    def _queue_of(self, tracked: Tracked) -> str:
        """The ClusterQueue the workload is admitted to, or its LocalQueue routes to."""
        if tracked.workload.admission is not None:
            return tracked.workload.admission.cluster_queue
        assert self.scheduler is not None
        target, _ = self.scheduler.route(tracked.workload)
        return target or ""


def _bindings(tracked: Tracked) -> list[PodBinding]:
    """Where a tracked workload's pods run, devices included, as placement restores them."""
    return [
        PodBinding(pod_key(tracked, pod), pod.node, tuple(int(d) for d in pod.devices if d.isdigit()))
        for pod in tracked.pods.values()
    ]


def _pod_state(row: PodRecord) -> PodState:
    """The loop's view of a pod from its row: running unless its exit was seen."""
    finished = row.state in ("Succeeded", "Failed")
    return PodState(
        row.name,
        row.pod_set,
        row.node or "",
        tuple(row.devices),
        attempt=row.attempt,
        running=not finished,
        succeeded=row.state == "Succeeded",
    )


def _seen_exit(row: PodRecord) -> tuple[str, int]:
    """The exit of a pod whose row says it ended (a failed one waits for its restart)."""
    return row.name, 0 if row.state == "Succeeded" else row.exit_code or 1


def _stored_admission(record: WorkloadRecord, workload: Workload) -> Admission | None:
    """The admission the store recorded (``_on_reserved`` wrote it) as the core reads one in a status."""
    try:
        model = kueue.Admission.model_validate(record.admission)
    except ValueError:
        return None
    return convert.admission(model, workload.pod_sets)


def _claim(allocator: DeviceAllocator, owner: str, devices: Sequence[str]) -> None:
    """Mark ``devices`` held by ``owner`` in ``allocator`` (those still free there), as ``take`` would
    have; the allocator has no call for a given device, so its pools are edited here."""
    for resource, pool in allocator._free.items():
        for device in devices:
            if device in pool:
                pool.remove(device)
                allocator._held.setdefault(owner, []).append((resource, device))


def _policy(run: JobRun, max_grace_s: float) -> JobPolicy:
    """The lifecycle's view of a workload source's run rules (grace periods capped)."""
    return JobPolicy(
        backoff_limit=run.backoff_limit,
        active_deadline_s=run.active_deadline_s,
        completion_pod_set=run.completion_pod_set,
        retries=run.retries,
        grace_s={ps.name: min(ps.grace_s, max_grace_s) for ps in run.pod_sets},
    )


def _carry_fair_usage(previous: Scheduler, scheduler: Scheduler) -> None:
    """A reloaded configuration keeps the LocalQueues' Admission Fair Sharing history, as Kueue's
    usage ledger outlives a ClusterQueue or LocalQueue update."""
    if previous.fair_usage is not None and scheduler.fair_usage is not None:
        scheduler.fair_usage.carry_over(previous.fair_usage)
