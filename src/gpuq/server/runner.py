"""The control loop beside the API: leader election, and ``ControlLoop.step()`` only while leader.

Two background threads over a store of their own:

1. the lease thread campaigns (``LeaderElector.try_acquire``; a leader renews) every
   ``lease_s / 3``, whatever the loop is doing, so a slow step never lets the lease lapse
   (a frozen process freezes both: then the lease does lapse, as it must);
2. on winning, fence the store (``store.fence``: every write the loop makes checks this
   tenure's fencing token in its transaction) and build a fresh loop (executor included):
   its first step recovers what a previous leader left running (``ControlLoop._recover``
   kills leftovers and requeues);
3. while leader, step whenever the store says something changed (a submission, a deletion, an
   object: PostgreSQL ``NOTIFY``, or this process's own API, :class:`~gpuq.run.store.Wakeup`),
   when a pod start returns, at once again while the loop has a backlog, and otherwise every
   ``interval_s`` (``busy_interval_s`` while pods run, whose exits are polled); an exception
   in a step is logged and the next step runs (adapter failures are the next reconcile's business), except
   :class:`~gpuq.run.store.LeaseLost`: a write found the lease taken over or expired (this
   replica was frozen, or too slow to renew), so nothing was written and the runner
   steps down at once (4), then campaigns again as a follower;
4. on losing leadership (the lease, or a new tenure with another token), close the loop
   (its pods are terminated: the new leader requeues them; the loop's writes from then on
   fail the fence); on :meth:`LoopRunner.stop`, close it and release the lease so a
   follower takes over at its next try;
5. while leader, every ``GpuMonitor.check_interval_s``, read GPU telemetry and record
   one ``GPUIdle`` Warning event per idle spell longer than the idle threshold.
6. while leader, with ``finished_ttl_s``, every ``cleanup_interval_s`` (at once again after
   a full batch), delete the workloads finished longer ago, their logs and pod directories
   (:mod:`gpuq.run.retention`), through the fenced store.

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

from gpuq.core.admission_fairshare import status_view
from gpuq.run.gpus import GPUTelemetry
from gpuq.run.loop import ControlLoop
from gpuq.run.metrics import ControlPlaneCollector
from gpuq.run.retention import clean_finished
from gpuq.run.store import Fence, LeaderElector, LeaseLost, Store, Wakeup
from gpuq.run.store.leader import LEASE_NAME
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


class FairSharingStatus(NamedTuple):
    """Admission Fair Sharing per (namespace, LocalQueue) of a usage-based ClusterQueue: its
    ``status.fairSharing`` and the usage its workloads are ordered by."""

    status: dict[tuple[str, str], dict[str, object]]
    usage: dict[tuple[str, str], float]


def fair_sharing_status(loop: ControlLoop | None) -> FairSharingStatus | None:
    """Each LocalQueue's Admission Fair Sharing from the leader's scheduler (what Kueue's LocalQueue
    controller writes to ``status.fairSharing``, and the queue order's usage); None without a
    configured loop."""
    if loop is None or loop.scheduler is None:
        return None
    fair = loop.scheduler.fair_usage
    if fair is None:
        return FairSharingStatus({}, {})
    views = {lq: status_view(fair, lq) for lq in sorted(fair.local_queues)}
    status = {lq: view for lq, view in views.items() if view is not None}
    return FairSharingStatus(status, {lq: fair.value_of(lq) for lq in sorted(fair.local_queues)})


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
    """Runs leader election and the loop on two daemon threads; :meth:`status` is safe from any thread.

    The lease thread campaigns and renews every ``lease_s / 3``, so a long step never lets the lease
    run out; the loop thread leads only under the tenure the lease thread last confirmed.
    """

    def __init__(
        self,
        url: str,
        identity: str,
        make_loop: MakeLoop,
        *,
        lease_s: float = 5.0,
        interval_s: float = 0.2,
        busy_interval_s: float = 0.02,
        coalesce_s: float = 0.01,
        gpus: GpuMonitor | None = None,
        finished_ttl_s: float | None = None,
    ) -> None:
        """``finished_ttl_s``: while leader, delete workloads finished longer ago than this, with their logs
        and pod directories (:mod:`gpuq.run.retention`), every ``cleanup_interval_s``; None keeps them.

        ``coalesce_s``: a step woken by a change starts at least this long after the previous step
        started, so a burst of submissions (each one a wakeup) is taken in by one step, not one step
        each: under load a step's fixed cost (the feed read, the cycle, the commit) is paid once per
        ``coalesce_s``, at the price of at most that much added latency to admission."""
        self.url, self.identity, self.lease_s, self.interval_s = url, identity, lease_s, interval_s
        self.busy_interval_s, self.coalesce_s = busy_interval_s, coalesce_s
        self._step_started = 0.0  # time.monotonic() when the last step began
        self._wakeup: Wakeup | None = None
        self.finished_ttl_s = finished_ttl_s
        self.cleanup_interval_s = min(60.0, max(1.0, (finished_ttl_s or 0.0) / 10))
        self.gpus = gpus or GpuMonitor()
        self._make_loop = make_loop
        self._stop = threading.Event()  # the loop thread's
        self._lease_stop = threading.Event()  # the lease thread's: set once the loop is closed
        self._campaign_now = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuq-loop", daemon=True)
        self._lease_thread = threading.Thread(target=self._campaigns, name="gpuq-lease", daemon=True)
        self._lock = threading.Lock()
        self._step_lock = threading.Lock()  # held while the loop is built, stepped or closed
        self._loop: ControlLoop | None = None
        self._store: Store | None = None
        self._tenure: tuple[int, float] | None = None  # (fencing token, lease expiry) while leading
        self._tenure_changed = threading.Condition()  # guards _tenure; notified at every campaign
        self._fenced_token = 0  # the newest tenure a write found lost: never led under again
        self._state: dict[str, Any] = {
            "identity": identity,
            "leader": False,
            "leaderSince": None,
            "steps": 0,
            "lastStepAt": None,
            "lastError": "",
            "configProblem": "",
            "fencingToken": None,
        }

    def start(self) -> None:
        self._store = Store(self.url)
        self._wakeup = Wakeup(self._store.url)
        self._lease_thread.start()
        self._thread.start()

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop stepping, terminate the pods, then release leadership; waits for both threads."""
        self._stop.set()
        if self._wakeup is not None:
            self._wakeup.interrupt()
        with self._tenure_changed:
            self._tenure_changed.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self._lease_stop.set()
        self._campaign_now.set()
        if self._lease_thread.is_alive():
            self._lease_thread.join(timeout_s)
        if self._store is not None:
            self._store.close()
        if self._wakeup is not None:
            self._wakeup.close()

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

    def fair_sharing(self) -> FairSharingStatus | None:
        """For ``GET /localqueues``: :func:`fair_sharing_status` of the current loop, between steps."""
        return self.read(fair_sharing_status)

    def _update(self, **fields: Any) -> None:
        with self._lock:
            self._state.update(fields)

    # -- the lease thread ------------------------------------------------------------------------------------

    def _campaigns(self) -> None:
        assert self._store is not None
        elector = LeaderElector(self._store, self.identity, self.lease_s)
        try:
            while not self._lease_stop.is_set():
                leading = self._campaign(elector)
                with self._tenure_changed:
                    self._tenure = (elector.token, elector.expires_at) if leading else None
                    self._tenure_changed.notify_all()
                self._campaign_now.wait(elector.renew_interval_s)
                self._campaign_now.clear()
        finally:
            with self._tenure_changed:
                self._tenure = None
                self._tenure_changed.notify_all()
            try:
                elector.release()
            except Exception:  # the store may be gone; the lease then expires on its own
                _log.exception("could not release the leader lease")

    def _campaign(self, elector: LeaderElector) -> bool:
        """Acquire or renew. A tenure the loop stepped down from (a fenced write found it lapsed) is
        never renewed: the lease is released and acquired again, as a new tenure with a new token, or
        left to whoever takes it first. Renewing it would keep a lease this replica no longer leads
        under, and no replica would lead."""
        try:
            leading = elector.try_acquire()
            if leading and elector.token <= self._fenced_token:
                elector.release()
                leading = elector.try_acquire()
            return leading and elector.token > self._fenced_token
        except Exception as error:
            self._error(f"leader election failed: {error}")
            return False

    def _leading(self) -> int:
        """The fencing token of the tenure this replica leads under now, or 0 (a follower).

        A lease that ran out since the lease thread last renewed it (this process was busy, or frozen)
        is asked about at once, and the answer awaited (at most ``lease_s``): renewed in the same
        tenure when nobody took it, else lost. Time alone never ends a tenure, the lease row does.
        """
        with self._tenure_changed:
            tenure = self._tenure
            if tenure is not None and time.time() >= tenure[1]:
                self._campaign_now.set()
                self._tenure_changed.wait_for(
                    lambda: self._tenure is not tenure or self._stop.is_set(), timeout=self.lease_s
                )
                tenure = self._tenure
        if tenure is None or tenure[0] <= self._fenced_token or time.time() >= tenure[1]:
            return 0
        return tenure[0]

    # -- the loop thread -------------------------------------------------------------------------------------

    def _run(self) -> None:
        assert self._store is not None
        store = self._store
        loop: ControlLoop | None = None
        tenure = 0  # the fencing token the loop was built under
        next_gpu_check = next_cleanup = 0.0
        try:
            while not self._stop.is_set():
                token = self._leading()
                if loop is not None and token != tenure:
                    self._step_down(loop, "lost leadership")
                    loop = None
                if token:
                    if loop is None:
                        tenure = token
                        store.fence = Fence(LEASE_NAME, self.identity, token, time.time)
                        loop = self._lead(store, token)
                        if loop is None:  # it could not be built: tried again at the next interval
                            self._stop.wait(self.interval_s)
                        continue  # building may take long (Ray starts): confirm the lease, then step
                    self._step_started = time.monotonic()
                    lost = self._step(loop)
                    if lost is None and time.monotonic() >= next_gpu_check:
                        lost = self._check_gpus(store)
                        next_gpu_check = time.monotonic() + self.gpus.check_interval_s
                    if lost is None and self.finished_ttl_s is not None and time.monotonic() >= next_cleanup:
                        lost, more = self._clean(store, loop, self.finished_ttl_s)
                        next_cleanup = time.monotonic() + (0.0 if more else self.cleanup_interval_s)
                    if lost is not None:
                        self._fenced_token = tenure
                        self._step_down(loop, f"lost the lease ({lost})")
                        loop = None
                        self._campaign_now.set()  # learn at once who leads now
                    elif loop.backlog:
                        continue
                self._pause(loop)
        finally:
            if loop is not None:
                self._close(loop)
            self._update(leader=False)

    def _pause(self, loop: ControlLoop | None) -> None:
        """Until the next step is due: a change is signalled, or the interval passes."""
        if self._stop.is_set():
            return
        timeout = self.busy_interval_s if loop is not None and loop.busy else self.interval_s
        if self._wakeup is None:
            self._stop.wait(timeout)
            return
        if self._wakeup.wait(timeout) and loop is not None:
            early = self.coalesce_s - (time.monotonic() - self._step_started)
            if early > 0:
                self._stop.wait(early)

    def _lead(self, store: Store, token: int) -> ControlLoop | None:
        """A new loop for this tenure, or None (the error recorded) when it cannot be built."""
        with self._step_lock:
            try:
                self._loop = self._make_loop(store)
                if self._wakeup is not None:
                    self._loop.wake_with(self._wakeup.interrupt)
            except Exception as error:
                self._error(f"cannot start the control loop: {error}")
                return None
        _log.warning("%s is the leader (fencing token %d); running the control loop", self.identity, token)
        self._update(leader=True, leaderSince=time.time(), fencingToken=token)
        return self._loop

    def _step_down(self, loop: ControlLoop, why: str) -> None:
        """Close the loop (its pods stop; the loop writes nothing more: its fence is stale) and follow."""
        _log.warning("%s %s; stepping down and stopping its pods", self.identity, why)
        self._close(loop)
        self._update(leader=False, leaderSince=None)

    def _step(self, loop: ControlLoop) -> LeaseLost | None:
        """One step; the ``LeaseLost`` that stopped it, if a write was fenced off (nothing was written)."""
        try:
            with self._step_lock:
                loop.step()
        except LeaseLost as lost:
            self._error(f"control loop step fenced off: {lost}")
            return lost
        except Exception as error:
            self._error(f"control loop step failed: {error}")
            return None
        with self._lock:
            self._state["steps"] += 1
            self._state["lastStepAt"] = time.time()
            self._state["configProblem"] = loop.config_problem
        return None

    def _close(self, loop: ControlLoop) -> None:
        with self._step_lock:
            self._loop = None
            try:
                loop.close()
            except Exception:
                _log.exception("closing the control loop failed")

    def _clean(self, store: Store, loop: ControlLoop, ttl_s: float) -> tuple[LeaseLost | None, bool]:
        """One retention run (:func:`~gpuq.run.retention.clean_finished`): the ``LeaseLost`` that fenced it
        off, and whether its batch was full (more may be due at once)."""
        try:
            done = clean_finished(store, loop.workdir, ttl_s)
        except LeaseLost as lost:
            self._error(f"retention fenced off: {lost}")
            return lost, False
        except Exception as error:
            self._error(f"retention of finished workloads failed: {error}")
            return None, False
        return None, done.full

    def _check_gpus(self, store: Store) -> LeaseLost | None:
        try:
            self.gpus.check_idle(store)
        except LeaseLost as lost:
            self._error(f"GPU idle check fenced off: {lost}")
            return lost
        except Exception as error:
            self._error(f"GPU idle check failed: {error}")
        return None

    def _error(self, message: str) -> None:
        """Record and log an error; the same message again is not logged again."""
        with self._lock:
            repeated = self._state["lastError"] == message
            self._state["lastError"] = message
        if not repeated:
            _log.error("%s", message)
