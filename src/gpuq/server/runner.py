"""The control loop beside the API: leader election, and ``ControlLoop.step()`` only while leader.

One background thread with a store of its own:

1. campaign (``LeaderElector.try_acquire``; a leader renews) every ``lease_s / 3``;
2. on winning, build a fresh loop (executor included): its first step recovers what a
   previous leader left running (``ControlLoop._recover`` kills leftovers and requeues);
3. while leader, step every ``interval_s``; an exception in a step is logged and the
   next step runs (adapter failures are the next reconcile's business);
4. on losing leadership, close the loop (its pods are terminated: the new leader
   requeues them); on :meth:`LoopRunner.stop`, close it and release the lease so a
   follower takes over at its next try;
5. while leader, every ``GpuMonitor.check_interval_s``, read GPU telemetry and record
   one ``GPUIdle`` Warning event per idle spell longer than the idle threshold.

Readers on other threads (``/metrics``, the dashboard) go through :meth:`LoopRunner.read`,
which holds the step lock: they see the loop between steps, never half way through one.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

from prometheus_client import CollectorRegistry, generate_latest

from gpuq.run.gpus import GPUTelemetry
from gpuq.run.loop import ControlLoop
from gpuq.run.metrics import ControlPlaneCollector
from gpuq.run.store import LeaderElector, Store
from gpuq.server.views import HOLDING_QUOTA

_log = logging.getLogger("gpuq.serve")
MakeLoop = Callable[[Store], ControlLoop]
T = TypeVar("T")


class QuotaBar(NamedTuple):
    """One (flavor, resource) of a ClusterQueue in core units (milli-CPU, bytes, counts)."""

    flavor: str
    resource: str
    used: int
    nominal: int


QueueUsage = dict[str, tuple[str, list[QuotaBar]]]
"""ClusterQueue -> (its cohort, its quota bars)."""


def queue_usage(loop: ControlLoop | None) -> QueueUsage | None:
    """Each ClusterQueue's usage against nominal quota from the leader's scheduler (what
    ``kueue_cluster_queue_resource_usage`` reports), as plain data; None without a configured loop."""
    if loop is None or loop.scheduler is None:
        return None
    out: QueueUsage = {}
    for name, node in sorted(loop.scheduler.state.tree.cluster_queues.items()):
        bars = [
            QuotaBar(f, r, node.usage.get((f, r), 0), q.nominal) for (f, r), q in sorted(node.quotas.items())
        ]
        out[name] = (node.parent.name if node.parent is not None else "", bars)
    return out


def due_idle_spells(
    since: Mapping[str, float], reported: Mapping[str, float], now: float, threshold_s: float
) -> list[tuple[str, float]]:
    """Idle spells ``(GPU UUID, idle since)`` longer than ``threshold_s`` with no event yet, by UUID.

    A spell is named by its start: the same GPU idle again after working is a new spell.
    """
    return sorted(
        (u, start) for u, start in since.items() if now - start >= threshold_s and reported.get(u) != start
    )


class GpuMonitor:
    """This machine's GPUs for ``/metrics`` (one :class:`ControlPlaneCollector` in one registry) and for
    ``GPUIdle`` events; thread-safe (scrapes and idle checks share the collector's idle tracker)."""

    def __init__(
        self,
        telemetry: Callable[[], list[GPUTelemetry]] = list,
        *,
        hostname: str = "",
        model_name: str = "",
        idle_threshold_s: float = 1800.0,
        xids: Callable[[], dict[str, int]] | None = None,
        check_interval_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.hostname = hostname or socket.gethostname()
        self.idle_threshold_s, self.check_interval_s = idle_threshold_s, check_interval_s
        self._telemetry, self._clock = telemetry, clock
        self._lock = threading.Lock()
        self._loop: ControlLoop | None = None  # the loop of the scrape in progress
        self.collector = ControlPlaneCollector(
            lambda: self._loop,
            telemetry,
            hostname=self.hostname,
            model_name=model_name,
            xids=xids,
            clock=clock,
        )
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(self.collector)
        self._reported: dict[str, float] = {}  # GPU UUID -> start of the spell already reported

    def scrape(self, loop: ControlLoop | None) -> bytes:
        """The Prometheus text exposition: queue metrics from ``loop`` (None: a follower), GPU metrics."""
        with self._lock:
            self._loop = loop
            try:
                return generate_latest(self._registry)
            finally:
                self._loop = None

    def check_idle(self, store: Store) -> list[int]:
        """Read telemetry; record a ``GPUIdle`` Warning for each spell past the threshold; the event ids.

        The event is about the workload whose pod holds the GPU (its namespace's members see it),
        else about this node.
        """
        with self._lock:
            readings = {r.uuid: r for r in self._telemetry()}
            now = self._clock()
            self.collector.idle.observe(readings.values(), now)
            since = dict(self.collector.idle.since)
            due = due_idle_spells(since, self._reported, now, self.idle_threshold_s)
            self._reported = {u: s for u, s in self._reported.items() if since.get(u) == s}
            self._reported.update(due)
        if not due:
            return []
        ids = []
        try:
            holders = _device_holders(store)
            for uuid, start in due:
                reading = readings.get(uuid)
                index = str(reading.index) if reading is not None else "?"
                kind, namespace, name = holders.get(uuid) or holders.get(index) or ("Node", "", self.hostname)
                held = f"held by workload {namespace}/{name}" if kind == "Workload" else "no pod holds it"
                message = (
                    f"GPU {index} ({uuid}) on {self.hostname} has been idle (utilization at most "
                    f"{self.collector.idle.threshold_pct}%) for {(now - start) / 60:.0f} minutes; {held}"
                )
                ids.append(store.add_event("Warning", "GPUIdle", kind, namespace, name, message, now))
        except Exception:
            with self._lock:  # forget the spells not recorded: the next check retries them
                for uuid, _ in due[len(ids) :]:
                    self._reported.pop(uuid, None)
            raise
        return ids


def _device_holders(store: Store) -> dict[str, tuple[str, str, str]]:
    """Device (index or UUID, as pods name them) -> the workload whose live pod holds it."""
    workloads = {w.id: w for w in store.list_workloads(states=HOLDING_QUOTA)}
    holders: dict[str, tuple[str, str, str]] = {}
    for pod in store.running_pods():
        workload = workloads.get(pod.workload_id)
        if workload is not None:
            holders |= {d: ("Workload", workload.namespace, workload.name) for d in pod.devices}
    return holders


class LoopRunner:
    """Runs leader election and the loop on a daemon thread; :meth:`status` is safe from any thread."""

    def __init__(
        self,
        url: str,
        identity: str,
        make_loop: MakeLoop,
        *,
        lease_s: float = 5.0,
        interval_s: float = 0.2,
        gpus: GpuMonitor | None = None,
    ) -> None:
        self.url, self.identity, self.lease_s, self.interval_s = url, identity, lease_s, interval_s
        self.gpus = gpus or GpuMonitor()
        self._make_loop = make_loop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuq-loop", daemon=True)
        self._lock = threading.Lock()
        self._step_lock = threading.Lock()  # held while the loop is built, stepped or closed
        self._loop: ControlLoop | None = None
        self._state: dict[str, Any] = {
            "identity": identity,
            "leader": False,
            "leaderSince": None,
            "steps": 0,
            "lastStepAt": None,
            "lastError": "",
            "configProblem": "",
        }

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop stepping, terminate the pods, release leadership; waits for the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._state)

    def read(self, reader: Callable[[ControlLoop | None], T]) -> T:
        """``reader(loop)`` between steps: the leader's current loop, or None on a follower."""
        with self._step_lock:
            return reader(self._loop)

    def metrics(self) -> bytes:
        """``/metrics``: queue metrics while leading, this machine's GPU metrics always."""
        return self.read(self.gpus.scrape)

    def queue_usage(self) -> QueueUsage | None:
        """For the dashboard: :func:`queue_usage` of the current loop, between steps."""
        return self.read(queue_usage)

    def _update(self, **fields: Any) -> None:
        with self._lock:
            self._state.update(fields)

    def _run(self) -> None:
        store = Store(self.url)
        elector = LeaderElector(store, self.identity, self.lease_s)
        loop: ControlLoop | None = None
        next_campaign = next_gpu_check = 0.0
        try:
            while not self._stop.is_set():
                leading = elector.is_leader
                if time.monotonic() >= next_campaign:
                    leading = self._campaign(elector)
                    next_campaign = time.monotonic() + elector.renew_interval_s
                if leading:
                    loop = loop or self._lead(store)
                    self._step(loop)
                    if time.monotonic() >= next_gpu_check:
                        self._check_gpus(store)
                        next_gpu_check = time.monotonic() + self.gpus.check_interval_s
                elif loop is not None:
                    _log.warning("%s lost leadership; stopping its pods", self.identity)
                    self._close(loop)
                    loop = None
                    self._update(leader=False, leaderSince=None)
                self._stop.wait(self.interval_s)
        finally:
            if loop is not None:
                self._close(loop)
            try:
                elector.release()
            except Exception:  # the store may be gone; the lease then expires on its own
                _log.exception("could not release the leader lease")
            self._update(leader=False)
            store.close()

    def _campaign(self, elector: LeaderElector) -> bool:
        try:
            return elector.try_acquire()
        except Exception as error:
            self._error(f"leader election failed: {error}")
            return False

    def _lead(self, store: Store) -> ControlLoop:
        _log.warning("%s is the leader; running the control loop", self.identity)
        self._update(leader=True, leaderSince=time.time())
        with self._step_lock:
            self._loop = self._make_loop(store)
            return self._loop

    def _step(self, loop: ControlLoop) -> None:
        try:
            with self._step_lock:
                loop.step()
        except Exception as error:
            self._error(f"control loop step failed: {error}")
            return
        with self._lock:
            self._state["steps"] += 1
            self._state["lastStepAt"] = time.time()
            self._state["configProblem"] = loop.config_problem

    def _close(self, loop: ControlLoop) -> None:
        with self._step_lock:
            self._loop = None
            try:
                loop.close()
            except Exception:
                _log.exception("closing the control loop failed")

    def _check_gpus(self, store: Store) -> None:
        try:
            self.gpus.check_idle(store)
        except Exception as error:
            self._error(f"GPU idle check failed: {error}")

    def _error(self, message: str) -> None:
        """Record and log an error; the same message again is not logged again."""
        with self._lock:
            repeated = self._state["lastError"] == message
            self._state["lastError"] = message
        if not repeated:
            _log.error("%s", message)
