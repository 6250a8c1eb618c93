"""Live services: serving manifests in the store become replica workloads, probed, routed and autoscaled.

A :class:`ServiceController` rides on the leader's :class:`~gpuq.run.loop.ControlLoop` (its
``services`` hook) and, at every loop step:

1. reloads the services when a serving object changed: the stored Deployments, StatefulSets,
   HPAs, ScaledObjects, InferenceServices and PodDisruptionBudgets are read by the same
   :func:`gpuq.api.serving.build_services` the simulator uses; a new service adopts the replica
   workloads a previous leader left in the store, a deleted one loses its replicas;
2. follows each replica (a ``v1`` Pod workload, :mod:`gpuq.run.serving.replica_pod`) through the
   loop: Pending (waiting for quota, with Kueue's reason in the workload's message), Admitted,
   Starting (its process runs), Ready (its readiness probe passed); a replica whose workload ended
   is forgotten (and replaced, as a ReplicaSet replaces a pod);
3. probes the starting and ready replicas on a small thread pool (never blocking the step);
4. activates a service at zero whose requests the router holds, at once, and otherwise every sync
   period runs its HPA or KEDA sync on the router's measurements (:mod:`gpuq.run.serving.autoscale`);
   the count is decided in core (:mod:`gpuq.core.autoscaling.sync`), as in the simulator;
5. reconciles the count by the core's scale plan: new replicas are submitted to the store as Pending
   workloads (the loop admits them through the Kueue engine, so they count against their
   ClusterQueue and a scale-up beyond quota waits with Kueue's reason); on scale-down, replicas are
   removed in the ReplicaSet's order (pending, admitted, starting, then ready; newest first): the
   ones not ready at once, the ready ones drained (no new request; deleted, hence stopped, once
   their requests are answered or ``terminationGracePeriodSeconds`` passed);
6. hands the router each service's revisions (a KServe canary's traffic split) and ready replicas.

PodDisruptionBudgets veto preemptions that would take a service below its budget
(:meth:`ServiceController.filter_preemptions`, called by the loop between planning a cycle and
applying it, as the simulator does).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from gpuq.api import kueue
from gpuq.api.loader import load_texts
from gpuq.api.serving import Autoscaler, ServiceSpec, build_services
from gpuq.core.autoscaling.replicas import Pod, PodPhase
from gpuq.core.autoscaling.sync import (
    AutoscalerState,
    ReplicaPhase,
    ReplicaView,
    activate,
    scale_plan,
    sync,
    sync_period_s,
)
from gpuq.core.decisions import CycleResult
from gpuq.core.disruption_budgets import Protected, vet_preemptions
from gpuq.core.lifecycle.states import ACTIVE
from gpuq.run.serving.autoscale import live_autoscaler, readings
from gpuq.run.serving.replica_pod import (
    PORT_ANNOTATION,
    REVISION_LABEL,
    Probe,
    ReplicaError,
    free_port,
    pod_template,
    probe_of,
    probe_once,
    replica_manifest,
)
from gpuq.run.serving.router import Router
from gpuq.run.serving.router_metrics import Load
from gpuq.run.store import Store, StoreConflict

if TYPE_CHECKING:
    from gpuq.run.loop import ControlLoop

SERVING_KINDS = frozenset(
    {
        "Deployment",
        "StatefulSet",
        "HorizontalPodAutoscaler",
        "ScaledObject",
        "InferenceService",
        "RayService",
        "PodDisruptionBudget",
    }
)
ACTIVE_STATES = tuple(s.value for s in ACTIVE)
_PHASES = {
    "Pending": ReplicaPhase.PENDING,
    "Admitted": ReplicaPhase.ADMITTED,
    "Starting": ReplicaPhase.STARTING,
}
_log = logging.getLogger("gpuq.serving")


@dataclass
class LiveReplica:
    name: str
    ordinal: int
    port: int
    created: float
    phase: str = "Pending"  # Pending | Admitted | Starting | Ready
    seen: bool = False  # the loop has tracked it
    started_at: float | None = None
    ready_at: float | None = None
    successes: int = 0
    failures: int = 0
    next_probe_at: float = 0.0
    draining_since: float | None = None
    probing: Future[bool] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def view(self) -> ReplicaView:
        """The replica as the core's scale plan ranks it."""
        return ReplicaView(self.name, self.ordinal, self.created, _PHASES.get(self.phase, ReplicaPhase.READY))


@dataclass
class LiveService:
    spec: ServiceSpec
    autoscaler: Autoscaler | None
    template: dict[str, Any]
    probe: Probe
    grace_s: float
    desired: int
    problem: str = ""
    replicas: dict[str, LiveReplica] = field(default_factory=dict)
    state: AutoscalerState | None = None
    next_sync: float = 0.0
    next_ordinal: int = 0
    last_reason: str = ""
    last_scale_at: float | None = None
    baseline: tuple[float, int, float, int] | None = None  # at the last sync: t, arrived, hold s, holds

    @property
    def key(self) -> str:
        return self.spec.key

    def live(self) -> list[LiveReplica]:
        return [r for r in self.replicas.values() if r.draining_since is None]


class ServiceController:
    """Steps 1-6 of the module docstring, for one leadership term."""

    def __init__(self, store: Store, router: Router, *, sync_period_s: int | None = None) -> None:
        self.store, self.router, self.sync_period_s = store, router, sync_period_s
        self.services: dict[str, LiveService] = {}
        self.problem = ""
        self._signature: tuple[tuple[str, str, str, int], ...] | None = None
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gpuq-probe")
        self._weights: dict[str, list[tuple[str, int]]] = {}
        self._objects_seen: tuple[int, int] | None = None  # the objects' signature last reloaded from

    # ------------------------------------------------------------------ the loop's hooks
    def step(self, loop: ControlLoop, now: float) -> None:
        self._reload(loop, now)
        for svc in self._ordered():
            self._observe(svc, loop)
            self._probe(svc, now)
            self._autoscale(svc, now)
            self._reconcile(svc, loop, now)
            self._drain(svc, now)
        self._route()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for traffic_key in list(self._weights):
            self.router.remove_route(traffic_key)
        self._weights.clear()

    def filter_preemptions(self, result: CycleResult) -> CycleResult:
        """Drop every preemptor's evictions if one of them would break a PodDisruptionBudget."""
        if not result.preempted:
            return result
        replicas = {
            f"{s.spec.namespace}/{r.name}": (s, r)
            for s in self.services.values()
            for r in s.replicas.values()
        }

        def protected(key: str) -> Protected | None:
            found = replicas.get(key)
            budget = found[0].spec.disruption if found is not None else None
            if found is None or budget is None:
                return None
            svc, replica = found
            return Protected(
                service=svc.key,
                budget=budget.name,
                healthy=sum(1 for r in svc.replicas.values() if r.phase == "Ready"),
                required=budget.desired_healthy(svc.desired),
                ready=replica.phase == "Ready",
                unhealthy_may_go=budget.always_allow_unhealthy,
            )

        return vet_preemptions(result, protected)

    # ------------------------------------------------------------------ 1. services
    def _ordered(self) -> list[LiveService]:
        return [self.services[k] for k in sorted(self.services)]

    def _reload(self, loop: ControlLoop, now: float) -> None:
        seen = loop.objects_seen
        if seen is not None and seen == self._objects_seen:
            return  # no object changed since the last look (the loop's feed says so): nothing to reload
        self._objects_seen = seen
        objects = [o for o in self.store.list_objects() if o.kind in SERVING_KINDS]
        signature = tuple(sorted((o.kind, o.namespace, o.name, o.resource_version) for o in objects))
        if signature == self._signature:
            return
        self._signature = signature
        documents = {(o.kind, o.namespace, o.name): o.manifest for o in objects}
        result = load_texts([(f"{k}/{ns}/{n}", yaml.safe_dump(m)) for (k, ns, n), m in documents.items()])
        specs, diagnostics = build_services(result.manifests)
        errors = [d for d in (*result.errors, *diagnostics) if d.severity == "error" and not d.stays_pending]
        if errors:
            self.problem = "; ".join(str(d) for d in errors)
            return
        self.problem = ""
        wanted = {s.key: s for s in specs}
        for key in sorted(set(self.services) - set(wanted)):
            svc = self.services.pop(key)
            for replica in list(svc.replicas.values()):
                self._delete(svc, replica)
        records = [w for w in self.store.list_workloads(states=ACTIVE_STATES) if w.source_kind == "Pod"]
        for key, spec in sorted(wanted.items()):
            owner = documents.get((spec.kind, spec.namespace, spec.traffic_key.split("/", 1)[1]), {})
            self._update(key, spec, owner, records, now)

    def _update(
        self, key: str, spec: ServiceSpec, owner: Mapping[str, Any], records: list[Any], now: float
    ) -> None:
        autoscaler = live_autoscaler(spec.autoscaler, self.sync_period_s) if spec.autoscaler else None
        try:
            template, problem = pod_template(spec.kind, owner), spec.pending
        except ReplicaError as error:
            template, problem = {}, spec.pending or str(error)
        grace = float((template.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
        svc = self.services.get(key)
        if svc is None:
            svc = LiveService(spec, autoscaler, template, probe_of(template), grace, spec.replicas, problem)
            self.services[key] = svc
            self._adopt(svc, records, now)
            return
        if type(svc.autoscaler) is not type(autoscaler):
            svc.state = None
        svc.spec, svc.autoscaler, svc.template, svc.problem = spec, autoscaler, template, problem
        svc.probe, svc.grace_s = probe_of(template), grace
        if autoscaler is None:
            svc.desired = spec.replicas

    def _adopt(self, svc: LiveService, records: list[Any], now: float) -> None:
        """Replica workloads of this service already in the store (a previous leader's) are its own."""
        for record in records:
            metadata = record.manifest.get("metadata") or {}
            labels = metadata.get("labels") or {}
            if record.namespace != svc.spec.namespace or labels.get(REVISION_LABEL) != svc.spec.name:
                continue
            ordinal = int(record.name.rsplit("-", 1)[1]) if record.name.rsplit("-", 1)[-1].isdigit() else 0
            port = int((metadata.get("annotations") or {}).get(PORT_ANNOTATION) or 0)
            svc.replicas[record.name] = LiveReplica(record.name, ordinal, port, record.created_at)
            svc.next_ordinal = max(svc.next_ordinal, ordinal + 1)
        if svc.replicas and svc.autoscaler is not None:
            svc.desired = len(svc.replicas)

    # ------------------------------------------------------------------ 2, 3. replicas and probes
    def _observe(self, svc: LiveService, loop: ControlLoop) -> None:
        for replica in list(svc.replicas.values()):
            tracked = loop.tracked.get(f"{svc.spec.namespace}/{replica.name}")
            if tracked is None:
                record = None if replica.seen else self.store.get_workload(svc.spec.namespace, replica.name)
                if record is None or record.state not in ACTIVE_STATES:
                    self._delete(svc, replica)  # it ended (or was deleted): the ReplicaSet replaces it
                continue
            replica.seen = True
            running = tracked.state == "Running" and any(p.running for p in tracked.pods.values())
            if not running:
                replica.phase = "Admitted" if tracked.state in ("Admitted", "Running") else "Pending"
                replica.started_at, replica.successes = None, 0
            elif replica.phase not in ("Starting", "Ready"):
                replica.phase, replica.started_at = "Starting", tracked.started_at
                replica.next_probe_at = (tracked.started_at or 0.0) + svc.probe.initial_delay_s

    def _probe(self, svc: LiveService, now: float) -> None:
        probe = svc.probe
        for replica in svc.replicas.values():
            if replica.phase not in ("Starting", "Ready") or replica.draining_since is not None:
                continue
            future = replica.probing
            if future is not None and future.done():
                replica.probing = None
                self._probed(replica, probe, future.result() if not future.cancelled() else False, now)
            if replica.probing is None and now >= replica.next_probe_at:
                replica.probing = self._pool.submit(probe_once, probe, replica.port)
                replica.next_probe_at = now + probe.period_s

    def _probed(self, replica: LiveReplica, probe: Probe, ok: bool, now: float) -> None:
        if ok:
            replica.successes, replica.failures = replica.successes + 1, 0
            if replica.phase == "Starting" and replica.successes >= probe.success_threshold:
                replica.phase, replica.ready_at = "Ready", now
        else:
            replica.failures, replica.successes = replica.failures + 1, 0
            if replica.phase == "Ready" and replica.failures >= probe.failure_threshold:
                replica.phase = "Starting"

    # ------------------------------------------------------------------ 4. autoscaling
    def _autoscale(self, svc: LiveService, now: float) -> None:
        if svc.autoscaler is None:
            return
        stats = self.router.stats(svc.key)
        held = stats.held if stats is not None else 0
        if held and svc.desired == 0:
            load = self._load(svc, now)
            observed = readings(svc.spec, svc.autoscaler, load)
            result = activate(svc.autoscaler, svc.state, self._pods(svc), observed, load.held, now)
            if result is not None:
                self._scaled(svc, result.replicas, result.reason, result.state, now)
                svc.next_sync = now + sync_period_s(svc.autoscaler)
            return
        if now < svc.next_sync:
            return
        existing = len(svc.live())
        observed = readings(svc.spec, svc.autoscaler, self._load(svc, now))
        result = sync(svc.autoscaler, svc.state, svc.desired, existing, self._pods(svc), observed, now)
        self._scaled(svc, result.replicas, result.reason, result.state, now)
        svc.next_sync = now + sync_period_s(svc.autoscaler)

    def _scaled(
        self, svc: LiveService, replicas: int, reason: str, state: AutoscalerState, now: float
    ) -> None:
        svc.state = state
        if replicas == svc.desired:
            return
        message = f"New size: {replicas}; reason: {reason}"
        self.store.add_event(
            "Normal", "SuccessfulRescale", svc.spec.kind, svc.spec.namespace, svc.spec.name, message, now
        )
        svc.desired, svc.last_reason, svc.last_scale_at = replicas, reason, now

    def _load(self, svc: LiveService, now: float) -> Load:
        """What the router measured since the last sync (and moves the baseline to now)."""
        stats = self.router.stats(svc.key)
        ready = [r for r in svc.live() if r.phase == "Ready"]
        running = {r.name: (stats.in_flight.get(r.name, 0) if stats else 0) for r in ready}
        if stats is None:
            return Load(running, 0, 0.0, 0.0)
        then, arrived, hold_s, holds = svc.baseline or (
            now,
            stats.arrived,
            stats.hold_s_sum,
            stats.hold_count,
        )
        svc.baseline = (now, stats.arrived, stats.hold_s_sum, stats.hold_count)
        rps = (stats.arrived - arrived) / (now - then) if now > then else 0.0
        mean_hold = (
            (stats.hold_s_sum - hold_s) / (stats.hold_count - holds) if stats.hold_count > holds else 0.0
        )
        return Load(running, stats.held, rps, mean_hold)

    def _pods(self, svc: LiveService) -> tuple[Pod, ...]:
        cpu = svc.spec.pod_set.requests.get("cpu", 0)
        pods = []
        for r in sorted(svc.live(), key=lambda r: r.name):
            if r.started_at is None:
                pods.append(
                    Pod(r.name, PodPhase.PENDING, None, start_time_s=None, requests_milli={"cpu": cpu})
                )
            else:
                ready = r.phase == "Ready"
                since = r.ready_at if ready and r.ready_at is not None else r.started_at
                pods.append(Pod(r.name, PodPhase.RUNNING, ready, False, r.started_at, since, {"cpu": cpu}))
        return tuple(pods)

    # ------------------------------------------------------------------ 5. replicas in the store
    def _reconcile(self, svc: LiveService, loop: ControlLoop, now: float) -> None:
        plan = scale_plan([r.view() for r in svc.live()], svc.desired, svc.next_ordinal)
        for ordinal in () if svc.problem else plan.add:  # a broken template creates nothing
            self._create(svc, loop, now, ordinal)
        for name in plan.remove:
            replica = svc.replicas[name]
            if replica.phase == "Ready":
                replica.draining_since = now
            else:
                self._delete(svc, replica)

    def _create(self, svc: LiveService, loop: ControlLoop, now: float, first: int) -> None:
        """A replica at the planned ordinal ``first``, or the next one whose name is free in the store."""
        spec = svc.spec
        priority_class = spec.priority_class if spec.priority_source == kueue.WPC_SOURCE else ""
        svc.next_ordinal = max(svc.next_ordinal, first)
        for _ in range(100):
            ordinal = svc.next_ordinal
            svc.next_ordinal += 1
            name, port = f"{spec.name}-{ordinal}", free_port()
            try:
                manifest = replica_manifest(spec, svc.template, name, port, priority_class)
            except ReplicaError as error:
                svc.problem = str(error)
                return
            try:
                self.store.add_workload(
                    spec.namespace, name, spec.queue_name, "Pod", manifest, self._priority(spec, loop), now
                )
            except StoreConflict:
                continue  # a workload of that name exists: the next ordinal
            svc.replicas[name] = LiveReplica(name, ordinal, port, now)
            return

    def _priority(self, spec: ServiceSpec, loop: ControlLoop) -> int:
        table = loop.priorities
        if table is None:
            return 0
        return table.classes.get(spec.priority_source, {}).get(spec.priority_class, table.default)

    def _drain(self, svc: LiveService, now: float) -> None:
        for replica in list(svc.replicas.values()):
            if replica.draining_since is None:
                continue
            overdue = now - replica.draining_since >= svc.grace_s
            if overdue or self.router.in_flight(svc.key, replica.name) == 0:
                self._delete(svc, replica)

    def _delete(self, svc: LiveService, replica: LiveReplica) -> None:
        if replica.probing is not None:
            replica.probing.cancel()
        svc.replicas.pop(replica.name, None)
        try:
            self.store.delete_workload(svc.spec.namespace, replica.name)
        except Exception:  # the next step retries through _observe
            _log.exception("could not delete replica %s/%s", svc.spec.namespace, replica.name)

    # ------------------------------------------------------------------ 6. routing
    def _route(self) -> None:
        groups: dict[str, list[tuple[str, int]]] = {}
        for svc in self._ordered():
            groups.setdefault(svc.spec.traffic_key, []).append((svc.key, round(svc.spec.traffic_share * 100)))
        for traffic_key in sorted(set(self._weights) - set(groups)):
            self.router.remove_route(traffic_key)
            del self._weights[traffic_key]
        for traffic_key, weights in groups.items():
            ordered = sorted(weights, key=lambda w: (w[0] != traffic_key, w[0]))  # the default revision first
            if self._weights.get(traffic_key) != ordered:
                self.router.set_route(traffic_key, ordered)
                self._weights[traffic_key] = ordered
        for svc in self.services.values():
            ready = {r.name: r.url for r in svc.live() if r.phase == "Ready"}
            self.router.set_replicas(svc.key, ready)

    # ------------------------------------------------------------------ views
    def views(self) -> list[dict[str, Any]]:
        """Every service with its replicas and the router's counters (the API's and dashboard's view)."""
        out = []
        for svc in self._ordered():
            stats = self.router.stats(svc.key)
            phases = [
                ("Draining" if r.draining_since is not None else r.phase) for r in svc.replicas.values()
            ]
            out.append(
                {
                    "namespace": svc.spec.namespace,
                    "name": svc.spec.name,
                    "kind": svc.spec.kind,
                    "service": svc.spec.traffic_key,
                    "trafficPercent": round(svc.spec.traffic_share * 100),
                    "queue": svc.spec.queue_name,
                    "autoscaler": svc.spec.autoscaler_ref or None,
                    "minReplicas": svc.spec.min_replicas,
                    "maxReplicas": svc.spec.max_replicas,
                    "desiredReplicas": svc.desired,
                    "replicas": {
                        p: phases.count(p) for p in ("Pending", "Admitted", "Starting", "Ready", "Draining")
                    },
                    "replicaList": [
                        {
                            "name": r.name,
                            "state": "Draining" if r.draining_since is not None else r.phase,
                            "port": r.port,
                            "inFlight": stats.in_flight.get(r.name, 0) if stats else 0,
                        }
                        for r in sorted(svc.replicas.values(), key=lambda r: r.ordinal)
                    ],
                    "requests": {
                        "total": stats.requests if stats else 0,
                        "byCode": {str(k): v for k, v in sorted(stats.responses.items())} if stats else {},
                        "inFlight": sum(stats.in_flight.values()) if stats else 0,
                        "waiting": stats.held if stats else 0,
                        "heldTotal": stats.hold_count if stats else 0,
                        "meanLatencySeconds": stats.latency_sum_s / stats.requests
                        if stats and stats.requests
                        else None,
                    },
                    "lastScale": {"at": svc.last_scale_at, "reason": svc.last_reason}
                    if svc.last_scale_at
                    else None,
                    "problem": svc.problem,
                }
            )
        return out
