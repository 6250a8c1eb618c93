"""FinOps for a simulated run: node cost by pool and capacity type, cost attributed to namespaces
and ClusterQueues, idle GPU-hours and idle alerts.

Attribution (:func:`cost_section`): a workload pays, for every pod, the node's price per GPU-hour
times the GPU share the pod holds, for as long as it holds it (the simulator's ``SimRun.cost``);
what no pod pays is *idle*. So ``sum(by namespace) + idle == total bill`` exactly (up to float
rounding), and the same for ClusterQueues; the bill is the sum over nodes of price × time in
service, which is also the sum over pools.

Idle GPU-hours come in two kinds: *provisioned but unallocated* (GPUs in service that no pod
holds) and *allocated but unused* (GPUs held by pods that are not running yet: start-up, image
pull, waiting for an admission check). An *idle alert* fires for each GPU left without a pod for
``idle_alert_s`` (30 min by default, ``spec.provisioning.idleAlertAfter``) in one stretch; a node's
free GPUs are tracked last in, first out, which is exact for the count of whole GPUs free. Alerts
and unallocated GPU-hours are also given per pool; a workload whose GPUs stay allocated but unused
for ``idle_alert_s`` in one stretch raises an alert for its namespace, which also gets its
allocated-but-unused GPU-hours.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gpuq.core.placement.capacity import NodeCapacity
from gpuq.sim.recorder import Recorder, node_gpu_state
from gpuq.sim.simulator import SimRun


class CostTracker:
    """Node cost per pool, allocated-but-unused GPU time and idle GPU stretches, as the run goes."""

    def __init__(self, idle_alert_s: float = 1800.0) -> None:
        self.idle_alert_s = idle_alert_s
        self.up: dict[str, tuple[float, str, float]] = {}  # node -> (since, pool, price per hour)
        self.pool_cost: dict[str, float] = {}
        self.pool_node_s: dict[str, float] = {}
        self.allocated_unused_gpu_s = 0.0
        self.free_since: dict[str, list[float]] = {}  # node -> when each free GPU became free
        self.alerts = 0
        self.alerted_idle_gpu_s = 0.0
        self.longest_idle_s = 0.0
        self.pool_of: dict[str, str] = {}  # node -> pool ("" unmanaged), kept after it goes down
        self.unallocated_gpu_s: dict[str, float] = {}  # pool -> free GPU-seconds of its nodes
        self.pool_alerts: dict[str, list[float]] = {}  # pool -> [alerts, alerted GPU-seconds]
        self.unused_gpu_s: dict[str, float] = {}  # namespace -> allocated-but-unused GPU-seconds
        self.team_alerts: dict[str, list[float]] = {}  # namespace -> [alerts, alerted GPU-seconds]

    def node_up(self, now: float, name: str, pool: str, price: float) -> None:
        self.up[name] = (now, pool, price)
        self.pool_of[name] = pool

    def node_down(self, now: float, name: str) -> None:
        since, pool, price = self.up.pop(name)
        self.pool_cost[pool] = self.pool_cost.get(pool, 0.0) + price * (now - since) / 3600
        self.pool_node_s[pool] = self.pool_node_s.get(pool, 0.0) + now - since

    def node_seen(self, now: float, name: str, capacity: NodeCapacity | None) -> None:
        """A node's GPUs changed: free GPUs join (now) or leave (last in, first out) the stack."""
        stack = self.free_since.setdefault(name, [])
        free = 0
        if capacity is not None and capacity.node.gpu_count:
            free = capacity.node.gpu_count - node_gpu_state(capacity)[1]
        while len(stack) < free:
            stack.append(now)
        while len(stack) > free:
            self._ended(now - stack.pop(), self.pool_of.get(name, ""))

    def _ended(self, idle_s: float, pool: str) -> None:
        self.longest_idle_s = max(self.longest_idle_s, idle_s)
        self.unallocated_gpu_s[pool] = self.unallocated_gpu_s.get(pool, 0.0) + idle_s
        if idle_s >= self.idle_alert_s:
            self.alerts += 1
            self.alerted_idle_gpu_s += idle_s
            tally = self.pool_alerts.setdefault(pool, [0, 0.0])
            tally[0] += 1
            tally[1] += idle_s

    def run_stopped(self, run: SimRun, now: float) -> None:
        """GPU time ``run`` held without running (bound, not started) since it was last bound."""
        if run.bound_at is None:
            return
        held = now - run.bound_at
        ran = now - run.started_at if run.started_at is not None else 0.0
        unused_s = max(held - ran, 0.0)
        team = run.job.team
        self.allocated_unused_gpu_s += unused_s * run.job.gpus
        self.unused_gpu_s[team] = self.unused_gpu_s.get(team, 0.0) + unused_s * run.job.gpus
        if unused_s >= self.idle_alert_s and run.job.gpus > 0:
            tally = self.team_alerts.setdefault(team, [0, 0.0])
            tally[0] += 1
            tally[1] += unused_s * run.job.gpus

    def close(self, end: float) -> None:
        for name in sorted(self.up):
            self.node_down(end, name)
        for name in sorted(self.free_since):
            self.node_seen(end, name, None)


def cost_section(
    runs: Sequence[SimRun],
    recorder: Recorder,
    span: float,
    tracker: CostTracker,
    pool_capacity: Mapping[str, str],
    currency: str = "USD",
) -> dict[str, Any]:
    """The ``cost_attribution`` block of a variant's metrics (module docstring)."""
    total = recorder.node_cost_rate.integral(span) / 3600 if span > 0 else 0.0
    by_ns: dict[str, float] = {}
    by_cq: dict[str, float] = {}
    for run in runs:
        by_ns[run.job.team] = by_ns.get(run.job.team, 0.0) + run.cost
        queue = run.cluster_queue or ""
        by_cq[queue] = by_cq.get(queue, 0.0) + run.cost
    used = math.fsum(by_ns.values())
    by_capacity: dict[str, float] = {}
    for pool, cost in tracker.pool_cost.items():
        kind = pool_capacity.get(pool, "unmanaged")
        by_capacity[kind] = by_capacity.get(kind, 0.0) + cost
    capacity_s = recorder.capacity.integral(span) if span > 0 else 0.0
    allocated_s = recorder.allocated.integral(span) if span > 0 else 0.0
    return {
        "currency": currency,
        "total": _r(total),
        "idle": _r(total - used),
        "by_namespace": {k: _r(v) for k, v in sorted(by_ns.items())},
        "by_cluster_queue": {k: _r(v) for k, v in sorted(by_cq.items()) if k},
        "by_pool": {k or "unmanaged": _r(v) for k, v in sorted(tracker.pool_cost.items())},
        "by_capacity_type": {k: _r(v) for k, v in sorted(by_capacity.items())},
        "node_hours_by_pool": {
            k or "unmanaged": _r(v / 3600) for k, v in sorted(tracker.pool_node_s.items())
        },
        "idle_gpu_hours": {
            "provisioned_unallocated": _r(max(capacity_s - allocated_s, 0.0) / 3600),
            "allocated_unused": _r(tracker.allocated_unused_gpu_s / 3600),
            "unallocated_by_pool": {
                k or "unmanaged": _r(v / 3600) for k, v in sorted(tracker.unallocated_gpu_s.items())
            },
            "allocated_unused_by_namespace": {
                k: _r(v / 3600) for k, v in sorted(tracker.unused_gpu_s.items())
            },
        },
        "idle_alerts": {
            "threshold_s": _r(tracker.idle_alert_s),
            "count": tracker.alerts,
            "idle_gpu_hours": _r(tracker.alerted_idle_gpu_s / 3600),
            "longest_idle_s": _r(tracker.longest_idle_s),
            "by_pool": _tallies(tracker.pool_alerts, "unmanaged"),
            "allocated_unused_by_namespace": _tallies(tracker.team_alerts),
        },
    }


def _tallies(tallies: Mapping[str, list[float]], blank: str = "") -> dict[str, dict[str, float]]:
    return {
        k or blank: {"count": int(n), "idle_gpu_hours": _r(s / 3600)} for k, (n, s) in sorted(tallies.items())
    }


def _r(value: float) -> float:
    rounded = round(value, 6)
    return 0.0 if rounded == 0 else rounded
