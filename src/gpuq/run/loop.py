"""The control loop: the core engine deciding, an executor running, the store remembering.

Each :meth:`ControlLoop.step`:

1. reloads the configuration when an object changed (a new ``Scheduler``, the
   workloads that hold quota resubmitted with their admission);
2. takes in workloads submitted to the store since the last step;
3. reaps pod exits: a failed pod restarts until the Job's ``backoffLimit`` is
   spent, every pod succeeded finishes the workload (or, for a workload with a
   completion pod set such as a RayJob's submitter, that set's pods' exits),
   an evicted workload whose pods are all gone is requeued;
4. enforces time: ``activeDeadlineSeconds``, waitForPodsReady's timeout and
   its requeue backoff, restart backoff;
5. when something changed and no eviction is in flight, runs Kueue cycles with
   the same :class:`~gpuq.core.admission.Scheduler` ``gpuq admit`` and ``gpuq
   simulate`` use, applies the cycle's decisions to the store in one
   transaction, then starts the admitted pods on exactly the devices placement
   chose, and sends preemption victims SIGTERM (SIGKILL after their grace).

Preemption completes when the victim's processes are gone: only then is its
quota released and the workload requeued, as a kubelet and Kueue would. While
an eviction is in flight no new cycle runs, so a preemptor never picks victims
twice.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpuq.api import convert, kueue
from gpuq.api.loader import load_texts
from gpuq.api.source_fields import SourceError
from gpuq.api.sources import to_workload
from gpuq.core.admission import Scheduler
from gpuq.core.decisions import Admit
from gpuq.core.model import CheckState, ClusterConfig, Workload
from gpuq.core.nodes import Node
from gpuq.core.placement.engine import Placer, PodBinding
from gpuq.run.devices import DeviceAllocator
from gpuq.run.executors.base import Executor, ExecutorError, PodExit
from gpuq.run.gpus import GPUDevice
from gpuq.run.jobs import JobRun, job_run
from gpuq.run.pods import PodState, Tracked, kill_leftover, pod_key, pod_launch, pod_record
from gpuq.run.store import ConditionRecord, Store, WorkloadChange, WorkloadRecord

if TYPE_CHECKING:
    from gpuq.run.serving.controller import ServiceController

ACTIVE = ("Pending", "QuotaReserved", "Admitted", "Running")
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
    """Admission, placement and execution for one store; run it only on the elected leader."""

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
    ) -> None:
        """``devices`` are each node's real or virtual GPUs, for nodes whose MIG slices (or GPUs beside
        them) placement only counts; without them such pods get no device ids. ``services`` runs live
        services (:mod:`gpuq.run.serving`): it steps before intake (its replicas are workloads) and
        vets each cycle's preemptions against PodDisruptionBudgets."""
        self.store = store
        self.executor = executor
        self.nodes = tuple(nodes)
        self.workdir = workdir
        self.policy = policy
        self.clock = clock
        self.restart_backoff_s = restart_backoff_s
        self.tracked: dict[str, Tracked] = {}
        self.scheduler: Scheduler | None = None
        self.config: ClusterConfig | None = None
        self.priorities: convert.PriorityTable | None = None
        self.config_problem = ""
        self._config_signature: tuple[tuple[str, str, str, int], ...] | None = None
        self._dirty = True
        self._recovered = False
        self.counters = LoopCounters()
        self._seen_version = -1
        self._allocators = {node: DeviceAllocator(found) for node, found in (devices or {}).items()}
        self.services = services

    # ------------------------------------------------------------------ step
    def step(self) -> None:
        now = self.clock()
        self._reload_config(now)
        if self.scheduler is None:
            return
        if not self._recovered:
            self._recover(now)
            self._recovered = True
        if self.services is not None:
            self.services.step(self, now)
        version = self.store.resource_version()
        if version != self._seen_version:  # nothing was written since the last look: no new workload
            self._intake(now)
            self._seen_version = version
        self._reap(now)
        self._timers(now)
        if self._dirty and not any(t.evicting for t in self.tracked.values()):
            self._dirty = False
            self._schedule(now)

    def close(self) -> None:
        if self.services is not None:
            self.services.close()
        self.executor.close()

    # ---------------------------------------------------------- configuration
    def _reload_config(self, now: float) -> None:
        objects = [o for o in self.store.list_objects() if o.kind in KUEUE_KINDS]
        signature = tuple(sorted((o.kind, o.namespace, o.name, o.resource_version) for o in objects))
        if signature == self._config_signature:
            return
        self._config_signature = signature
        texts = [(f"{o.kind}/{o.namespace}/{o.name}", yaml.safe_dump(o.manifest)) for o in objects]
        result = load_texts(texts)
        if result.errors or result.config is None:
            self.config_problem = "; ".join(str(d) for d in result.errors) or "no configuration"
            return
        self.config_problem = ""
        self.config = result.config
        self.priorities = convert.PriorityTable.from_models([m.model for m in result.manifests])
        placer = Placer(
            self.nodes, policy=self.policy, flavors=self.config.flavors, topologies=self.config.topologies
        )
        self.scheduler = Scheduler(self.config, placer)
        for tracked in self.tracked.values():
            self._resubmit(tracked)
        self._dirty = True

    def _resubmit(self, tracked: Tracked) -> None:
        """Put a tracked workload into a fresh scheduler: pending ones queue, admitted ones hold quota."""
        assert self.scheduler is not None
        if tracked.state in ("Pending", "QuotaReserved"):
            self.scheduler.submit(dataclasses.replace(tracked.workload, admission=None))
        elif tracked.state in ("Admitted", "Running") and tracked.workload.admission is not None:
            # Keep the running pods where they are, devices included.
            bindings = [
                PodBinding(pod_key(tracked, pod), pod.node, tuple(int(d) for d in pod.devices if d.isdigit()))
                for pod in tracked.pods.values()
            ]
            self.scheduler.submit(tracked.workload, placed=bindings or None)

    # --------------------------------------------------------------- intake
    def _recover(self, now: float) -> None:
        """After a restart: pods of a previous loop cannot be reattached, so admitted and running
        workloads are evicted (their leftover processes killed) and requeued; none is lost or doubled."""
        for record in self.store.list_workloads(states=ACTIVE):
            tracked = self._track(record, now)
            if tracked is None:
                continue
            if record.state in ("Admitted", "Running"):
                for pod in self.store.pods_of(record.id):
                    kill_leftover(pod.pid)
                condition = ConditionRecord(
                    "Evicted",
                    "True",
                    "ControlPlaneRestarted",
                    "the control plane restarted; pods requeued",
                    now,
                )
                self.store.apply_decisions(
                    [
                        WorkloadChange(
                            record.id, "Pending", condition=condition, pods=[], fields={"admission": None}
                        )
                    ]
                )
                tracked.state = "Pending"
            assert self.scheduler is not None
            self.scheduler.submit(tracked.workload)

    def _intake(self, now: float) -> None:
        known = {t.record_id for t in self.tracked.values()}
        for record in self.store.list_workloads(states=("Pending",)):
            if record.id in known:
                continue
            tracked = self._track(record, now)
            if tracked is not None:
                assert self.scheduler is not None
                self.scheduler.submit(tracked.workload)
                self._dirty = True
        self._forget_deleted(now)

    def _track(self, record: WorkloadRecord, now: float) -> Tracked | None:
        try:
            workload, run = self._convert(record)
        except (SourceError, ValueError) as error:
            message = f"cannot run: {error}"
            condition = ConditionRecord("Finished", "True", "InvalidWorkload", message, now)
            self.store.apply_decisions(
                [
                    WorkloadChange(
                        record.id,
                        "Failed",
                        condition=condition,
                        fields={"finished_at": now, "message": message},
                    )
                ]
            )
            return None
        tracked = Tracked(record.id, workload.key, workload, run, state=record.state)
        self.tracked[workload.key] = tracked
        return tracked

    def _convert(self, record: WorkloadRecord) -> tuple[Workload, JobRun]:
        assert self.priorities is not None
        document = to_workload(dict(record.manifest))
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

    def _forget_deleted(self, now: float) -> None:
        """Workloads deleted from the store: stop their pods and release what they hold."""
        alive = {(r.namespace, r.name) for r in self.store.list_workloads()}
        for key, tracked in list(self.tracked.items()):
            if (tracked.namespace, tracked.name) in alive:
                continue
            for pod in tracked.pods.values():
                self.executor.terminate(pod_key(tracked, pod), 0.0)
            self._give_devices(tracked)
            self._release(tracked, requeue=False)
            del self.tracked[key]

    # ------------------------------------------------------------ scheduling
    def _schedule(self, now: float) -> None:
        assert self.scheduler is not None
        scheduler = self.scheduler
        for _ in range(1000):
            result, entries = scheduler.plan_cycle(now)
            if not entries:
                return
            if self.services is not None:  # disruption budgets protect serving replicas
                result = self.services.filter_preemptions(result)
            scheduler.apply(result, entries, now)
            changes: list[WorkloadChange] = []
            starts: list[Tracked] = []
            for decision in result.admitted:
                tracked = self.tracked[decision.workload]
                changes.append(self._admitted(tracked, decision, now))
                if tracked.pods:
                    starts.append(tracked)
            for eviction in result.preempted:
                tracked = self.tracked[eviction.workload]
                preemptor = self.tracked.get(eviction.by)
                by_queue = self._queue_of(preemptor) if preemptor is not None else ""
                self.counters.bump(self.counters.preempted, (by_queue, eviction.reason))
                message = f"Preempted to accommodate {eviction.by} ({eviction.reason})"
                condition = ConditionRecord("Evicted", "True", "Preempted", message, now)
                changes.append(WorkloadChange(tracked.record_id, tracked.state, condition=condition))
                self._evict(tracked, "Preempted", now)
            for pending in result.pending:
                waiting = self.tracked.get(pending.workload)
                if waiting is not None and waiting.state == "Pending":
                    changes.append(
                        WorkloadChange(waiting.record_id, "Pending", fields={"message": pending.message})
                    )
            if changes:
                self.store.apply_decisions(changes)
            for tracked in starts:
                self._start_all(tracked, now)
            if result.preempted or not result.changed:
                return

    def _admitted(self, tracked: Tracked, decision: Admit, now: float) -> WorkloadChange:
        assert self.scheduler is not None
        if decision.checks_pending:
            self.scheduler.reserved_checks[decision.workload] = {
                n: CheckState.READY for n in decision.checks_pending
            }
        admitted = self.scheduler.state.admitted[decision.workload]
        self.counters.bump(self.counters.admitted, decision.cluster_queue)
        waits = self.counters.admission_waits.setdefault(decision.cluster_queue, [])
        waits.append(max(0.0, now - tracked.workload.creation_time))
        tracked.workload = admitted.workload
        tracked.state = "Admitted"
        tracked.admitted_at = now
        tracked.pods = self._placed_pods(tracked)
        admission = {
            "clusterQueue": decision.cluster_queue,
            "podSetAssignments": [
                {"name": ps.name, "count": ps.count, "flavors": dict(ps.flavors)} for ps in decision.pod_sets
            ],
        }
        condition = ConditionRecord("Admitted", "True", "Admitted", decision.message, now)
        pods = [pod_record(p) for p in tracked.pods.values()]
        fields = {
            "cluster_queue": decision.cluster_queue,
            "admission": admission,
            "admitted_at": now,
            "message": "",
        }
        return WorkloadChange(tracked.record_id, "Admitted", condition=condition, pods=pods, fields=fields)

    def _placed_pods(self, tracked: Tracked) -> dict[str, PodState]:
        """The pods placement bound, each with its devices: the GPU indices placement chose, or, on a node
        that only counts devices (MIG), slices and GPUs the node's allocator picks."""
        assert self.scheduler is not None and self.scheduler.placer is not None
        placement = self.scheduler.placer.placements.get(tracked.key)
        if placement is None:
            return {}
        requests = {ps.name: ps.requests for ps in tracked.workload.pod_sets}
        pods: dict[str, PodState] = {}
        for pod_set in placement.pod_sets:
            for binding in pod_set.bindings:
                name = binding.pod.rsplit("/", 1)[1]
                devices = tuple(str(g) for g in binding.gpus)
                allocator = self._allocators.get(binding.node)
                if not devices and allocator is not None:
                    devices = allocator.take(f"{tracked.key}/{name}", requests.get(pod_set.name, {}))
                pods[name] = PodState(name, pod_set.name, binding.node, devices)
        return pods

    def _give_devices(self, tracked: Tracked) -> None:
        for pod in tracked.pods.values():
            allocator = self._allocators.get(pod.node)
            if allocator is not None:
                allocator.give(pod_key(tracked, pod))

    # ---------------------------------------------------------------- pods
    def _start_all(self, tracked: Tracked, now: float) -> None:
        """Start every pod (each pod row gets its pid), then mark the workload Running with PodsReady."""
        self.tracked_pods_ids(tracked)
        for pod in tracked.pods.values():
            self._start(tracked, pod, now)
        if tracked.key not in self.tracked:
            return  # a pod could not start and the workload failed
        tracked.state = "Running"
        tracked.started_at = tracked.started_at or now
        condition = ConditionRecord("PodsReady", "True", "PodsReady", "all pods are running", now)
        change = WorkloadChange(tracked.record_id, "Running", condition=condition, fields={"started_at": now})
        self.store.apply_decisions([change])

    def tracked_pods_ids(self, tracked: Tracked) -> None:
        """Learn the store ids of the pods just written, for later updates."""
        for record in self.store.pods_of(tracked.record_id):
            pod = tracked.pods.get(record.name)
            if pod is not None:
                pod.store_id = record.id

    def _start(self, tracked: Tracked, pod: PodState, now: float) -> None:
        launch = pod_launch(tracked, pod, self.workdir)
        try:
            pid = self.executor.start(launch)
        except ExecutorError as error:
            pod.running = False
            self._pod_failed(tracked, pod, now, f"cannot start: {error}")
            return
        pod.running = True
        pod.retry_at = None
        if pod.store_id is not None:
            self.store.update_pod(
                pod.store_id,
                state="Running",
                pid=pid,
                started_at=now,
                attempt=pod.attempt,
                log_path=launch.log_path,
            )

    def _reap(self, now: float) -> None:
        by_key = {pod_key(t, p): (t, p) for t in self.tracked.values() for p in t.pods.values()}
        for exit_ in self.executor.poll():
            found = by_key.get(exit_.key)
            if found is None:
                continue
            tracked, pod = found
            pod.running = False
            self._pod_exited(tracked, pod, exit_, now)

    def _pod_exited(self, tracked: Tracked, pod: PodState, exit_: PodExit, now: float) -> None:
        if pod.store_id is not None:
            state = "Succeeded" if exit_.exit_code == 0 else "Failed"
            self.store.update_pod(
                pod.store_id, state=state, exit_code=exit_.exit_code, finished_at=exit_.time
            )
        if tracked.evicting:
            if not any(p.running for p in tracked.pods.values()):
                self._complete_eviction(tracked, now)
            return
        if tracked.state != "Running":
            return
        if pod.pod_set == tracked.run.completion_pod_set:
            self._completion_pod_exited(tracked, pod, exit_, now)
            return
        if exit_.exit_code == 0:
            pod.succeeded = True
            if all(p.succeeded for p in tracked.pods.values()):
                self._finish(tracked, "Succeeded", "JobFinished", "every pod succeeded", now)
            return
        self._pod_failed(tracked, pod, now, f"pod {pod.name} exited with {exit_.exit_code}")

    def _completion_pod_exited(self, tracked: Tracked, pod: PodState, exit_: PodExit, now: float) -> None:
        """A pod of the workload's completion pod set ended (a RayJob's submitter or head): a failure fails
        the workload, the set's last success completes it; either way :meth:`_finish` kills the others."""
        if exit_.exit_code == 0:
            pod.succeeded = True
            if not all(p.succeeded for p in tracked.pods.values() if p.pod_set == pod.pod_set):
                return
            state, reason, message = "Succeeded", "JobFinished", f"pod set {pod.pod_set} succeeded"
        else:
            state, reason, message = "Failed", "JobFailed", f"pod {pod.name} exited with {exit_.exit_code}"
        self._finish(tracked, state, reason, message, now)

    def _pod_failed(self, tracked: Tracked, pod: PodState, now: float, message: str) -> None:
        tracked.failures += 1
        if tracked.failures > tracked.run.backoff_limit:
            limit = tracked.run.backoff_limit
            self._finish(
                tracked, "Failed", "BackoffLimitExceeded", f"{message}; backoffLimit {limit} reached", now
            )
            return
        pod.attempt += 1
        delay = (
            min(self.restart_backoff_s * 2 ** (tracked.failures - 1), 360.0)
            if self.restart_backoff_s
            else 0.0
        )
        pod.retry_at = now + delay
        self.store.add_event(
            "Warning",
            "BackOff",
            "Workload",
            tracked.namespace,
            tracked.name,
            f"{message}; restarting in {delay:.0f}s",
            now,
        )

    def _finish(self, tracked: Tracked, state: str, reason: str, message: str, now: float) -> None:
        """End the workload; pods still running are killed and their rows say Failed now (the workload is
        forgotten before their exits arrive)."""
        for other in tracked.pods.values():
            if other.running:
                self.executor.terminate(pod_key(tracked, other), 0.0)
                if other.store_id is not None:
                    self.store.update_pod(other.store_id, state="Failed", finished_at=now)
        tracked.state = state
        condition = ConditionRecord("Finished", "True", reason, message, now)
        self.store.apply_decisions(
            [
                WorkloadChange(
                    tracked.record_id,
                    state,
                    condition=condition,
                    fields={"finished_at": now, "message": message},
                )
            ]
        )
        self._give_devices(tracked)
        self._release(tracked, requeue=False)
        del self.tracked[tracked.key]

    # -------------------------------------------------------------- eviction
    def _evict(self, tracked: Tracked, reason: str, now: float) -> None:
        """Stop the pods (SIGTERM, SIGKILL after their grace); the eviction completes when they are gone."""
        tracked.evicting = reason
        running = [p for p in tracked.pods.values() if p.running]
        for pod in running:
            self.executor.terminate(pod_key(tracked, pod), tracked.run.pod_set(pod.pod_set).grace_s)
        if not running:
            self._complete_eviction(tracked, now)

    def _complete_eviction(self, tracked: Tracked, now: float, requeue_at: float | None = None) -> None:
        reason = tracked.evicting
        self.counters.bump(self.counters.evicted, (self._queue_of(tracked), reason))
        tracked.evicting = ""
        tracked.state = "Pending"
        tracked.started_at = None  # as a resumed Job's startTime: its next run counts from its next start
        self._give_devices(tracked)
        tracked.pods = {}
        tracked.failures = 0
        assert self.scheduler is not None
        self._release(tracked, requeue=True, requeue_at=requeue_at)
        tracked.workload = dataclasses.replace(tracked.workload, admission=None, requeue_at=requeue_at)
        condition = ConditionRecord("Requeued", "True", reason, f"evicted ({reason}) and requeued", now)
        fields: dict[str, Any] = {"admission": None, "cluster_queue": None, "requeue_at": requeue_at}
        self.store.apply_decisions(
            [WorkloadChange(tracked.record_id, "Pending", condition=condition, pods=[], fields=fields)]
        )
        self._dirty = True

    def _queue_of(self, tracked: Tracked) -> str:
        """The ClusterQueue the workload is admitted to, or its LocalQueue routes to."""
        if tracked.workload.admission is not None:
            return tracked.workload.admission.cluster_queue
        assert self.scheduler is not None
        target, _ = self.scheduler.route(tracked.workload)
        return target or ""

    def _release(self, tracked: Tracked, *, requeue: bool, requeue_at: float | None = None) -> None:
        assert self.scheduler is not None
        scheduler = self.scheduler
        if tracked.key in scheduler.state.admitted:
            if requeue:
                scheduler.evict(tracked.key, self.clock(), requeue_at)
            else:
                scheduler.finish(tracked.key)
        elif not requeue:
            for queue in scheduler.queues.values():
                queue.delete(tracked.key)
        self._dirty = True

    # ----------------------------------------------------------------- time
    def _timers(self, now: float) -> None:
        wait = self.config.scheduler.wait_for_pods_ready if self.config else None
        for tracked in list(self.tracked.values()):
            if tracked.evicting:
                continue
            deadline = tracked.run.active_deadline_s
            if (
                deadline is not None
                and tracked.started_at is not None
                and now - tracked.started_at >= deadline
            ):
                self._finish(
                    tracked, "Failed", "DeadlineExceeded", f"activeDeadlineSeconds {deadline:g} passed", now
                )
                continue
            for pod in tracked.pods.values():
                if pod.retry_at is not None and pod.retry_at <= now and tracked.state == "Running":
                    self._start(tracked, pod, now)
            if (
                wait is not None
                and wait.enable
                and tracked.state == "Admitted"
                and tracked.admitted_at is not None
                and now - tracked.admitted_at >= wait.timeout_s
            ):
                tracked.ready_timeouts += 1
                backoff = min(
                    wait.requeuing_backoff_base_s * 2 ** (tracked.ready_timeouts - 1),
                    wait.requeuing_backoff_max_s,
                )
                tracked.evicting = "PodsReadyTimeout"
                self._complete_eviction(tracked, now, requeue_at=now + backoff)
        if any(t.state == "Admitted" and not t.pods for t in self.tracked.values()):
            self._bind_waiting(now)
        if any(
            t.workload.requeue_at is not None and t.workload.requeue_at <= now
            for t in self.tracked.values()
            if t.state == "Pending"
        ):
            assert self.scheduler is not None
            for queue in self.scheduler.queues.values():
                queue.requeue_inadmissible()
            for tracked in self.tracked.values():
                if tracked.workload.requeue_at is not None and tracked.workload.requeue_at <= now:
                    tracked.workload = dataclasses.replace(tracked.workload, requeue_at=None)
            self._dirty = True

    def _bind_waiting(self, now: float) -> None:
        """Admitted workloads whose pods found no node: start them once a release made room."""
        assert self.scheduler is not None
        for key, tracked in self.tracked.items():
            if tracked.state == "Admitted" and not tracked.pods and key not in self.scheduler.unplaced:
                tracked.pods = self._placed_pods(tracked)
                if tracked.pods:
                    pods = [pod_record(p) for p in tracked.pods.values()]
                    self.store.apply_decisions([WorkloadChange(tracked.record_id, "Admitted", pods=pods)])
                    self.tracked_pods_ids(tracked)
                    self._start_all(tracked, now)
