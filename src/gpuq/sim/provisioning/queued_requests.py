"""Queued provisioning in the simulator: Kueue's ProvisioningRequest admission check, carried out.

A ClusterQueue whose AdmissionCheck uses the ProvisioningRequest controller keeps a workload's
quota reservation while its request waits (:meth:`QueuedProvisioning.hold` keeps the check
Pending). The request moves through :func:`gpuq.core.provisioning.queued.step`:

1. the nodes needed are the workload's pods over one node of the first pool its pods fit;
2. all or nothing: the nodes are taken only when the stock and the pool's ``max`` give all of
   them at once, from one pool (close together); they join together after the pool's delay
   (calendar: at the window start, already provisioned);
3. an attempt that gets no capacity for ``attemptTimeout`` fails. While ``attempt <=
   backoffLimitCount`` the check goes to Retry: the workload is evicted (its quota released) and
   requeued after ``min(backoffBaseSeconds * 2**(attempt-1), backoffMaxSeconds)`` (60, 120,
   240 s...); when it gets quota again the next attempt starts. Past the limit the check is
   Rejected and the workload deactivated (Kueue's provisioning controller and workload
   ``RequeueState``);
4. when the nodes are there the workload is admitted (check Ready); a calendar request refuses a
   workload whose run would end after the window closes (check Rejected, deactivated);
5. flex-start nodes are reclaimed ``maxRunDuration`` after they joined, calendar nodes at the
   window's end: the workload is evicted (losing the work since its last checkpoint) and
   requeued; on finishing, the nodes are released at once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpuq.core.lifecycle import WorkloadState
from gpuq.core.provisioning.options import PodShape
from gpuq.core.provisioning.queued import (
    Capacity,
    Failed,
    Finish,
    InvalidRequest,
    Request,
    State,
    Tick,
    WorkloadAdmitted,
    new_request,
    step,
)
from gpuq.sim.series import StepSeries
from gpuq.sim.simulator import SimRun, Simulation

if TYPE_CHECKING:
    from gpuq.sim.provisioning.provisioner import Provisioner

_ENDED_OK = (WorkloadState.SUCCEEDED, WorkloadState.FAILED)  # ended by its own work


class QueuedProvisioning:
    """ProvisioningRequests of one run, keyed by workload (steps in the module docstring)."""

    def __init__(self, provisioner: Provisioner) -> None:
        self.prov = provisioner
        self.requests: dict[str, Request] = {}
        self.pool: dict[str, str] = {}
        self.nodes: dict[str, list[str]] = {}
        self.first_asked: dict[str, float] = {}
        self.waits_s: list[float] = []
        self.waiting = StepSeries()  # requests waiting for capacity
        self.counts = {"created": 0, "provisioned": 0, "retries": 0, "rejected": 0, "reclaimed": 0}
        self._stopped: list[str] = []

    def owns(self, key: str) -> bool:
        return key in self.requests

    # ---------------------------------------------------------------- intake
    def hold(self, run: SimRun, checks: tuple[str, ...], now: float, sim: Simulation) -> set[str]:
        """Create the request of a workload just given quota; the checks it keeps Pending."""
        mine = [c for c in checks if c in self.prov.setup.checks]
        key = run.job.key
        admitted = sim.scheduler.state.admitted.get(key)
        earlier = self.requests.pop(key, None)
        if not mine or admitted is None:
            return set()
        workload = admitted.workload
        plan = self.prov.setup.checks[mine[0]]
        pools = self.prov.fitting_pools(workload, sim)
        if not pools:
            self.prov.note(now, "request-skipped", key, "no pool holds its pods: the check passes at once")
            return set()
        pool = self.prov.pools[pools[0]].spec
        pod_set = workload.pod_sets[0]
        per_node = PodShape(pod_set.requests).per_node(pool.node_allocatable)
        try:
            request = new_request(
                f"{key}/{plan.name}",
                key,
                math.ceil(pod_set.count / per_node),
                now,
                plan.mode,
                plan.retry,
                plan.max_run_s,
                plan.window,
            )
        except InvalidRequest as error:
            self.prov.note(now, "request-invalid", key, str(error))
            return set()
        self.pool[key] = pool.name
        self.first_asked.setdefault(key, now)
        self.waiting.add(now, 1)
        if earlier is not None and earlier.state == State.RETRY:  # back from a Retry's backoff
            request, _ = step(dataclasses.replace(earlier, nodes=request.nodes), Tick(), now)
            self.prov.note(now, "request-retry", key, request.message)
        else:
            self.counts["created"] += 1
            what = f"{request.nodes} x {pool.name} ({plan.mode}): {request.message}"
            self.prov.note(now, "request", key, what)
        self.requests[key] = request
        if plan.mode != "calendar":
            self.prov.push(now + self.prov.setup.attempt_timeout_s, "q_timeout", key, request.attempt)
        elif plan.window is not None and plan.window[0] > now:
            self.prov.push(plan.window[0], "q_window", key, 0)
        self._try(key, now)
        return set(mine)

    # ------------------------------------------------------------- capacity
    def _try(self, key: str, now: float) -> None:
        """Step 2: take every node at once, or note how many there are and keep waiting."""
        request = self.requests[key]
        if request.state != State.PENDING or key in self.nodes:
            return
        if request.mode == "calendar" and (request.window_start or 0.0) > now:
            return
        pool = self.prov.pools[self.pool[key]]
        room = pool.spec.max_nodes - self.prov.held[pool.spec.name]
        stock = self.prov.stock(now).of(self.prov._option(pool.spec.name))
        have = max(room if stock is None else min(stock, room), 0)
        if have < request.nodes:
            updated, _ = step(request, Capacity(have), now)
            if updated.message != request.message:
                self.prov.note(now, "request-waiting", key, updated.message)
            self.requests[key] = updated
            return
        self.nodes[key] = self.prov.take_nodes(pool.spec.name, request.nodes)
        self.prov.reserved_nodes.update(self.nodes[key])
        delay = 0.0 if request.mode == "calendar" else pool.spec.provisioning_delay_s
        self.prov.push(now + delay, "q_ready", key, request.attempt)

    def retry_capacity(self, now: float, sim: Simulation) -> None:
        for key in sorted(self.requests):
            self._try(key, now)

    def handlers(self) -> dict[str, Callable[[str, int, float, Simulation], None]]:
        """This part's events by kind, for :class:`~gpuq.sim.provisioning.provisioner.Provisioner`'s
        table; each is keyed by workload and ignored once the workload has no request."""
        return {
            "q_ready": self._on_ready,
            "q_timeout": self._on_timeout,
            "q_reclaim": self._on_reclaim,
            "q_window": self._on_window,
        }

    def _on_ready(self, key: str, token: int, now: float, sim: Simulation) -> None:
        request = self.requests.get(key)
        if request is not None and token == request.attempt:
            self._ready(key, request, now, sim)

    def _on_timeout(self, key: str, token: int, now: float, sim: Simulation) -> None:
        request = self.requests.get(key)
        if request is None or token != request.attempt or request.state != State.PENDING:
            return
        if key not in self.nodes:
            self._failed(key, request, now, sim)

    def _on_reclaim(self, key: str, _token: int, now: float, sim: Simulation) -> None:
        request = self.requests.get(key)
        if request is not None and request.state == State.ADMITTED:
            self._reclaim(key, request, now, sim)

    def _on_window(self, key: str, _token: int, now: float, _sim: Simulation) -> None:
        if key in self.requests:
            self._try(key, now)

    def _ready(self, key: str, request: Request, now: float, sim: Simulation) -> None:
        """Step 4: the nodes are there; admit, or refuse a run too long for the calendar window."""
        request, _ = step(request, Capacity(request.nodes), now)
        self.prov.bring_up(self.nodes[key], now, sim)
        self.counts["provisioned"] += 1
        self.waiting.add(now, -1)
        self.waits_s.append(now - self.first_asked[key])
        run = sim.runs[key]
        admitted, actions = step(request, WorkloadAdmitted(expected_runtime_s=sim.wall_s(run)), now)
        self.requests[key] = admitted
        self.prov.note(now, "request-provisioned", key, request.message)
        if any(a.kind == "check-rejected" for a in actions):
            self.counts["rejected"] += 1
            self.prov.note(now, "request-rejected", key, admitted.message)
            sim.evict(key, now, f"AdmissionCheck Rejected: {admitted.message}", deactivate=True)
            self._drop(key, now, sim, "calendar window: " + admitted.message)
            return
        if admitted.reclaim_at is not None:
            self.prov.push(admitted.reclaim_at, "q_reclaim", key, admitted.attempt)
        sim.check_ready(key, now)

    def _failed(self, key: str, request: Request, now: float, sim: Simulation) -> None:
        """Step 3: an attempt timed out without capacity: Retry (evicted, requeued after the backoff;
        the request stays, in state Retry, for the next admission) or Rejected (deactivated)."""
        timeout = self.prov.setup.attempt_timeout_s
        updated, _ = step(request, Failed(f"no capacity for {timeout:.0f}s ({request.message})"), now)
        self.requests[key] = updated
        self.waiting.add(now, -1)
        if updated.state == State.RETRY and updated.retry_at is not None:
            self.counts["retries"] += 1
            self.prov.note(now, "request-failed", key, updated.message)
            sim.evict(key, now, f"AdmissionCheck Retry: {updated.message}", requeue_at=updated.retry_at)
            return
        self.counts["rejected"] += 1
        self.prov.note(now, "request-rejected", key, updated.message)
        sim.evict(key, now, f"AdmissionCheck Rejected: {updated.message}", deactivate=True)
        self._drop(key, now, sim, updated.message)

    def _reclaim(self, key: str, request: Request, now: float, sim: Simulation) -> None:
        """Step 5: flex-start cap or calendar end: evict the workload, release the nodes."""
        updated, _ = step(request, Tick(), now)
        self.counts["reclaimed"] += 1
        self.prov.note(now, "request-reclaimed", key, updated.message)
        self._drop(key, now, sim, "", release=False)
        sim.evict(key, now, f"ProvisioningRequest reclaimed: {updated.message}")
        self.prov.release(self.nodes.pop(key, []), now, sim, updated.message)

    def _drop(self, key: str, now: float, sim: Simulation, reason: str, release: bool = True) -> None:
        self.requests.pop(key, None)
        self.pool.pop(key, None)
        if release:
            self.prov.release(self.nodes.pop(key, []), now, sim, reason or "request ended")

    # ------------------------------------------------------------- endings
    def stopped(self, key: str) -> None:
        if key in self.requests:
            self._stopped.append(key)

    def settle(self, now: float, sim: Simulation) -> None:
        """Workloads that stopped this instant: a finished one releases its nodes (Finish); an
        evicted one (spot, preemption) too, and asks again when it is admitted again."""
        if not self._stopped:
            return
        stopped, self._stopped = self._stopped, []
        for key in stopped:
            request = self.requests.get(key)
            run = sim.runs[key]
            if request is None or run.status.holds_quota:
                continue
            if request.state == State.RETRY and run.status == WorkloadState.PENDING:
                continue  # evicted for its check's Retry: the next attempt comes with its next admission
            if request.state == State.ADMITTED and run.status in _ENDED_OK:
                step(request, Finish(), now)
            elif request.state in (State.PENDING, State.RETRY):
                self.waiting.add(now, -1)
            self.prov.note(now, "request-released", key, f"workload {run.status.value.lower()}")
            self._drop(key, now, sim, f"the workload {run.status.value.lower()}")
        self.retry_capacity(now, sim)
