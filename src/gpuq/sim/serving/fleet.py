"""Autoscaled services inside the simulator: traffic in, replicas out, through the batch engine.

A :class:`ServingFleet` plugs into :class:`~gpuq.sim.simulator.Simulation` (its ``services``
hooks). For every service it:

1. submits each replica as its own Kueue workload (one pod set: the replica's pods), so quota,
   cohorts, priorities and preemption are shared with training; a replica that waits for quota
   keeps the reason Kueue gives (``Simulation.scheduler.why``), and one that is preempted queues
   again, as a Deployment's recreated pod would;
2. gives each bound replica its cold start: node provisioning (only where
   ``spec.serving.provisioning`` sets a delay for the node's pool and the node held no pod, i.e.
   a node the cluster autoscaler would have had to create), image pull (skipped where the node
   already pulled the image), model load (``cachedModelLoad`` where the node's cache holds the
   model, or every node when ``preloaded``) and the readiness delay;
3. integrates the traffic over time with the replica model (:mod:`gpuq.sim.serving.replica_model`), in
   segments bounded by traffic steps and by changes in ready replicas;
4. every sync period (``--horizontal-pod-autoscaler-sync-period``, 15 s; KEDA polls inside it
   per ``pollingInterval``) reads the servers' metrics from the current load and calls
   :func:`gpuq.core.autoscaling.hpa.decide` or :func:`gpuq.core.autoscaling.keda.decide`; a new
   count adds replicas or removes them in the ReplicaSet's order (unscheduled, then not ready,
   then ready; newest first);
5. vetoes a cycle's preemptions that would take a service below its PodDisruptionBudget
   (:meth:`ServingFleet.filter_preemptions`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuq.api.serving import ServiceSpec
from gpuq.api.serving_scenario import ServiceTraffic
from gpuq.core.autoscaling import hpa
from gpuq.core.autoscaling.keda import ScaledObjectSpec, ScaledObjectState
from gpuq.core.autoscaling.sync import ReplicaPhase, ReplicaView, scale_plan, sync
from gpuq.core.decisions import CycleResult
from gpuq.core.disruption_budgets import Protected, vet_preemptions
from gpuq.core.model import Workload
from gpuq.core.nodes import GPU, GPU_MILLI
from gpuq.sim.events import Event, EventKind
from gpuq.sim.jobs import SimJob
from gpuq.sim.serving.modelled_metrics import observe
from gpuq.sim.serving.replica_model import LatencyBook, steady

if TYPE_CHECKING:
    from gpuq.sim.simulator import SimRun, Simulation

REPLICA_CHECKPOINT_S = 1e-6
"""A preempted replica loses no work (a server has none to lose): checkpointed continuously."""


@dataclass(frozen=True)
class ServicePlan:
    """One service as the simulation runs it: its spec, traffic per step and replica model."""

    spec: ServiceSpec
    traffic: ServiceTraffic | None  # None: a pending service the scenario gives no traffic
    rates: tuple[float, ...]  # requests/s per step, traffic share applied
    priority: int
    trigger_queries: Mapping[str, str] = field(default_factory=dict)
    price_per_gpu_hour: float | None = None

    @property
    def gpus_per_replica(self) -> float:
        pod_set = self.spec.pod_set
        per_pod = pod_set.requests.get(GPU, 0) + pod_set.requests.get(GPU_MILLI, 0) / 1000
        return per_pod * pod_set.count


@dataclass(frozen=True)
class ServingPlan:
    services: tuple[ServicePlan, ...]
    step_s: float
    provisioning: Mapping[str, float] = field(default_factory=dict)  # pool -> delay


@dataclass(slots=True)
class Replica:
    key: str
    ordinal: int
    created: float
    bound_at: float | None = None
    ready_at: float | None = None
    node: str = ""


@dataclass
class ServiceRun:
    """The mutable life of one service."""

    plan: ServicePlan
    index: int
    desired: int = 0
    replicas: dict[str, Replica] = field(default_factory=dict)
    ready: int = 0
    holding: int = 0  # replicas bound to nodes (holding GPUs)
    next_ordinal: int = 0
    state: hpa.HPAState | ScaledObjectState | None = None
    backlog: deque[list[float]] = field(default_factory=deque)  # [arrived_t, requests, cold]
    book: LatencyBook = field(default_factory=LatencyBook)
    last_t: float = 0.0
    arrived: float = 0.0
    dropped: float = 0.0
    cold_queued: float = 0.0
    cold_dropped: float = 0.0
    decisions: int = 0
    zero_s: float = 0.0
    timeline: list[tuple[float, int, int, int]] = field(default_factory=list)  # t, desired, ready, bound
    waits: list[tuple[float, str, str]] = field(default_factory=list)  # t, replica, Kueue's reason
    cold_starts: list[float] = field(default_factory=list)
    all_keys: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.plan.spec.key

    def rate_at(self, t: float, step_s: float) -> float:
        k = int(t // step_s)
        rates = self.plan.rates
        return rates[k] if 0 <= k < len(rates) else 0.0


class ServingFleet:
    """The services of one simulation (steps 1-5 of the module docstring)."""

    def __init__(self, plan: ServingPlan) -> None:
        self.plan = plan
        self.services = [ServiceRun(p, i) for i, p in enumerate(plan.services)]
        self._by_key: dict[str, tuple[ServiceRun, Replica]] = {}
        self._images: set[tuple[str, str]] = set()  # (node, service) pulled
        self._models: set[tuple[str, str]] = set()  # (node, service) cached
        self.decisions = 0

    # -------------------------------------------------------------- simulator hooks
    def template_workloads(self) -> list[Workload]:
        return [self._workload(s, 0, 0.0) for s in self.services if not s.plan.spec.pending]

    def start(self, sim: Simulation) -> None:
        """Time 0: submit each service's starting replicas and schedule its first sync."""
        for svc in self.services:
            spec = svc.plan.spec
            if spec.pending:  # no replica can be admitted: requests arrive and wait, then drop
                self._mark(svc, 0.0)
                continue
            self._scale(svc, spec.replicas, 0.0, sim)
            self._push(0.0, svc.index, sim)  # an instant at 0, so the starting replicas are scheduled

    def on_event(self, event: Event, now: float, sim: Simulation) -> None:
        """A service's sync is due (the event's version is its index); the next one is scheduled."""
        svc = self.services[event.version]
        if svc.plan.spec.autoscaler is None:
            return
        self._sync(svc, now, sim)
        self._push(now + _sync_period(svc.plan.spec), svc.index, sim)

    def is_replica(self, key: str) -> bool:
        return key in self._by_key

    def startup_s(self, run: SimRun, now: float, default: float, sim: Simulation) -> float:
        """The cold start of a replica bound now (step 2); ``default`` for other workloads."""
        found = self._by_key.get(run.job.key)
        if found is None:
            return default
        svc, replica = found
        self._advance(svc, now)
        replica.bound_at = now
        svc.holding += 1
        self._mark(svc, now)
        if now == 0.0 and replica.created == 0.0:
            return 0.0  # the replicas the day starts with are already running (warm)
        assert svc.plan.traffic is not None  # a bound replica belongs to a service with traffic
        cold = svc.plan.traffic.cold_start
        node = self._node_of(run.job.key, sim)
        replica.node = node
        delay = 0.0
        if node and self._fresh_node(node, run.job.key, sim):
            delay += (
                self.plan.provisioning.get(sim.placer.nodes[node].node.pool or "", 0.0) if sim.placer else 0.0
            )
            if delay:  # a new machine: nothing cached on it
                self._images = {x for x in self._images if x[0] != node}
                self._models = {x for x in self._models if x[0] != node}
        cache_key = (node, svc.name)
        delay += 0.0 if cache_key in self._images else cold.image_pull
        cached = cold.cached_model_load is not None and (cold.preloaded or cache_key in self._models)
        delay += cold.cached_model_load if cached and cold.cached_model_load is not None else cold.model_load
        delay += cold.readiness
        self._images.add(cache_key)
        self._models.add(cache_key)
        svc.cold_starts.append(delay)
        return delay

    def on_ready(self, run: SimRun, now: float) -> None:
        found = self._by_key.get(run.job.key)
        if found is None:
            return
        svc, replica = found
        self._advance(svc, now)
        replica.ready_at = now
        svc.ready += 1
        self._mark(svc, now)

    def on_stopped(self, run: SimRun, now: float, was_ready: bool, was_bound: bool) -> None:
        found = self._by_key.get(run.job.key)
        if found is None:
            return
        svc, replica = found
        self._advance(svc, now)
        svc.ready -= was_ready
        svc.holding -= was_bound
        replica.bound_at = replica.ready_at = None
        self._mark(svc, now)

    def filter_preemptions(self, result: CycleResult, sim: Simulation) -> CycleResult:
        """Step 5: drop every preemptor's evictions if one of them breaks a disruption budget.

        Also keeps Kueue's reason for each replica the cycle left waiting (when it changes)."""
        for waiting in result.pending:
            found = self._by_key.get(waiting.workload)
            if found is not None:
                self._note_wait(found[0], waiting.workload, waiting.message, sim.now)

        def protected(key: str) -> Protected | None:
            found = self._by_key.get(key)
            budget = found[0].plan.spec.disruption if found is not None else None
            if found is None or budget is None:
                return None
            svc, replica = found
            return Protected(
                service=svc.name,
                budget=budget.name,
                healthy=svc.ready,
                required=budget.desired_healthy(svc.desired),
                ready=replica.ready_at is not None,
                unhealthy_may_go=budget.always_allow_unhealthy,
            )

        return vet_preemptions(result, protected, lambda by: sim.runs[by].cluster_queue)

    def close(self, end: float) -> None:
        for svc in self.services:
            self._advance(svc, end)
            self._mark(svc, end)

    # -------------------------------------------------------------- scaling
    def _push(self, at: float, index: int, sim: Simulation) -> None:
        """Service ``index``'s next sync, on the simulation's event heap."""
        sim.schedule(at, EventKind.SERVICE_SYNC, version=index)

    def _sync(self, svc: ServiceRun, now: float, sim: Simulation) -> None:
        """Step 4: one autoscaler sync on the metrics of the current load."""
        self._advance(svc, now)
        spec = svc.plan.spec
        autoscaler = spec.autoscaler
        assert autoscaler is not None
        readings, pods = observe(svc, self._replica_rows(svc), now, self.plan.step_s)
        result = sync(autoscaler, svc.state, svc.desired, len(svc.replicas), pods, readings, now)
        svc.state = result.state
        svc.decisions += 1
        self.decisions += 1
        if result.replicas != svc.desired:
            self._scale(svc, result.replicas, now, sim)

    def _replica_rows(self, svc: ServiceRun) -> list[Replica]:
        return list(svc.replicas.values())

    def _scale(self, svc: ServiceRun, wanted: int, now: float, sim: Simulation) -> None:
        """Reach ``wanted`` replicas by the core's plan: new workloads submitted, victims withdrawn."""
        self._advance(svc, now)
        views = [ReplicaView(r.key, r.ordinal, r.created, _rank(r, sim)) for r in svc.replicas.values()]
        plan = scale_plan(views, wanted, svc.next_ordinal)
        for ordinal in plan.add:
            svc.next_ordinal = ordinal + 1
            workload = self._workload(svc, ordinal, now)
            replica = Replica(workload.key, ordinal, now)
            svc.replicas[workload.key] = replica
            svc.all_keys.append(workload.key)
            self._by_key[workload.key] = (svc, replica)
            job = SimJob(workload, math.inf, svc.plan.gpus_per_replica, REPLICA_CHECKPOINT_S)
            sim.submit(job, now)
        for key in plan.remove:
            del svc.replicas[key]
            sim.withdraw(key, now, f"ScaledDown: {svc.name} to {wanted} replicas")
            self._by_key.pop(key, None)
        svc.desired = wanted
        self._mark(svc, now)

    def _workload(self, svc: ServiceRun, ordinal: int, now: float) -> Workload:
        spec = svc.plan.spec
        return Workload(
            namespace=spec.namespace,
            name=f"{spec.name}-{ordinal}",
            queue_name=spec.queue_name,
            pod_sets=(spec.pod_set,),
            priority=svc.plan.priority,
            creation_time=now,
            uid=f"s{svc.index:04d}-{ordinal:07d}",
        )

    def _note_wait(self, svc: ServiceRun, key: str, message: str, now: float) -> None:
        if not any(w[1] == key and w[2] == message for w in svc.waits[-max(1, len(svc.replicas)) :]):
            svc.waits.append((now, key, message))

    # -------------------------------------------------------------- traffic
    def _mark(self, svc: ServiceRun, now: float) -> None:
        row = (now, svc.desired, svc.ready, svc.holding)
        if svc.timeline and svc.timeline[-1][0] == now:
            svc.timeline[-1] = row
        elif not svc.timeline or svc.timeline[-1][1:] != row[1:]:
            svc.timeline.append(row)

    def _advance(self, svc: ServiceRun, now: float) -> None:
        """Step 3: integrate the traffic from the last instant to ``now``, step by step."""
        step = self.plan.step_s
        t = svc.last_t
        if svc.plan.traffic is None:
            svc.zero_s += max(0.0, now - t)
            svc.last_t = max(t, now)
            return
        while t < now:
            upto = min(now, (math.floor(t / step + 1e-9) + 1) * step)
            self._segment(svc, t, upto, svc.rate_at(t, step))
            t = upto
        svc.last_t = max(svc.last_t, now)

    def _segment(self, svc: ServiceRun, t0: float, t1: float, rate: float) -> None:
        assert svc.plan.traffic is not None
        model = svc.plan.traffic.replica
        dt = t1 - t0
        arrivals = rate * dt
        ready = svc.ready
        svc.arrived += arrivals
        if svc.desired == 0:
            svc.zero_s += dt
        if ready == 0:
            svc.cold_queued += arrivals
        if not svc.backlog and ready > 0 and rate / ready < model.max_rps:
            svc.book.add_steady(
                arrivals, model.latency, steady(rate / ready, model.max_rps, model.concurrency)
            )
            return
        if arrivals > 0:
            svc.backlog.append([t0 + dt / 2, arrivals, 1.0 if ready == 0 else 0.0])
        capacity = ready * model.max_rps * dt
        served = 0.0
        while svc.backlog and capacity > 1e-12:
            chunk = svc.backlog[0]
            take = min(chunk[1], capacity)
            done = t0 + (served + take / 2) / (ready * model.max_rps)
            svc.book.add_point(max(0.0, done - chunk[0]) + model.latency, take)
            chunk[1] -= take
            capacity -= take
            served += take
            if chunk[1] <= 1e-12:
                svc.backlog.popleft()
        timeout = svc.plan.traffic.queue_timeout
        while svc.backlog and svc.backlog[0][0] < t1 - timeout:
            _, requests, cold = svc.backlog.popleft()
            svc.dropped += requests
            svc.cold_dropped += requests * cold

    # -------------------------------------------------------------- helpers
    def _node_of(self, key: str, sim: Simulation) -> str:
        placement = sim.placer.placements.get(key) if sim.placer is not None else None
        return placement.bindings[0].node if placement is not None and placement.bindings else ""

    def _fresh_node(self, node: str, key: str, sim: Simulation) -> bool:
        """The node held no pod before this replica's (a node the autoscaler would have added)."""
        assert sim.placer is not None
        return all(pod.rsplit("/", 1)[0] == key for pod in sim.placer.nodes[node].bound)

    @property
    def replica_keys(self) -> frozenset[str]:
        return frozenset(k for svc in self.services for k in svc.all_keys)


def _rank(replica: Replica, sim: Simulation) -> ReplicaPhase:
    """A replica's phase as the scale plan ranks it: ready, bound (cold starting), admitted, pending."""
    run = sim.runs.get(replica.key)
    if replica.ready_at is not None:
        return ReplicaPhase.READY
    if replica.bound_at is not None:
        return ReplicaPhase.STARTING
    admitted = run is not None and run.first_admitted is not None and run.status.value == "Admitted"
    return ReplicaPhase.ADMITTED if admitted else ReplicaPhase.PENDING


def _sync_period(spec: ServiceSpec) -> float:
    autoscaler = spec.autoscaler
    if isinstance(autoscaler, ScaledObjectSpec):
        return float(autoscaler.hpa_config.sync_period_s)
    assert autoscaler is not None
    return float(autoscaler.config.sync_period_s)


def services_of(fleet: object) -> Sequence[ServiceRun]:
    return fleet.services if isinstance(fleet, ServingFleet) else ()
