"""``/metrics``: Kueue's metric names for queues, DCGM exporter names for GPUs, and idle GPUs.

A Prometheus custom collector reads the current state when scraped (the
leader's scheduler and counters, NVML telemetry) instead of keeping gauges in
step by hand, so a follower replica that runs no loop simply reports no queue
state. Names and labels follow Kueue's ``pkg/metrics/metrics.go`` (``docs/reference/metrics.md``)
and the DCGM exporter's default fields.

Kueue's queue metrics reported: ``kueue_pending_workloads``, ``kueue_reserving_active_workloads``,
``kueue_admitted_active_workloads``, ``kueue_cluster_queue_status``, per flavor and resource (labels
``cohort``, ``cluster_queue``, ``flavor``, ``resource``) ``kueue_cluster_queue_resource_reservation``,
``_resource_usage``, ``_nominal_quota``, ``_borrowing_limit`` and ``_lending_limit`` (where set),
with fair sharing ``kueue_cluster_queue_weighted_share`` and ``kueue_cohort_weighted_share``, the
cohort gauges ``kueue_cohort_subtree_quota``, ``_subtree_resource_reservations`` and
``_subtree_admitted_active_workloads``, and the counters and histograms
``kueue_quota_reserved_workloads_total``, ``kueue_admitted_workloads_total``,
``kueue_preempted_workloads_total``, ``kueue_evicted_workloads_total``,
``kueue_quota_reserved_wait_time_seconds`` and ``kueue_admission_wait_time_seconds``. The label sets
are those of Kueue before its ``replica_role`` and ``priority_class`` labels (only the leader reports
queue metrics here). Live, every admission check is Ready at once, so a quota reservation is an
admission: the reserved and admitted series agree. Not reported: what the loop does not count
(``kueue_admission_attempts_total`` and its duration, finished workloads, ``underlying_cause``) and
the LocalQueue metrics (behind Kueue's ``LocalQueueMetrics`` gate).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuq.core.admission import Scheduler
from gpuq.core.fairshare import DominantShare, node_share, subtree_queues
from gpuq.core.quantity import MILLI_RESOURCES
from gpuq.run.gpus import GPUTelemetry
from gpuq.run.loop import ControlLoop
from gpuq.run.serving.controller import ServiceController
from gpuq.run.serving.router import LATENCY_BUCKETS_S

WAIT_BUCKETS = (
    1.0,
    2.0,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    7200.0,
    21600.0,
    86400.0,
)
"""Seconds: Kueue's admission wait buckets span a second to a day."""


@dataclass
class IdleTracker:
    """How long each GPU has been idle (utilisation at or under ``threshold_pct``), from successive reads."""

    threshold_pct: int = 0
    since: dict[str, float] = field(default_factory=dict)  # uuid -> idle since

    def observe(self, readings: Iterable[GPUTelemetry], now: float) -> dict[str, float]:
        idle: dict[str, float] = {}
        for reading in readings:
            busy = reading.utilization_pct is None or reading.utilization_pct > self.threshold_pct
            if busy:
                self.since.pop(reading.uuid, None)
                continue
            start = self.since.setdefault(reading.uuid, now)
            idle[reading.uuid] = now - start
        return idle


@dataclass
class _Histogram:
    counts: list[int]
    total: float = 0.0
    observations: int = 0


class ControlPlaneCollector(Collector):
    """Collects queue metrics from the leader's loop and GPU metrics from NVML."""

    def __init__(
        self,
        loop: Callable[[], ControlLoop | None],
        telemetry: Callable[[], list[GPUTelemetry]],
        *,
        hostname: str,
        model_name: str = "",
        idle: IdleTracker | None = None,
        xids: Callable[[], dict[str, int]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._xids = xids
        self._loop = loop
        self._telemetry = telemetry
        self._hostname = hostname
        self._model_name = model_name
        self.idle = idle or IdleTracker()
        self._clock = clock
        self._waits: dict[str, _Histogram] = {}

    def collect(self) -> Iterator[Metric]:
        loop = self._loop()
        if loop is not None and loop.scheduler is not None:
            yield from self._queue_metrics(loop)
        if loop is not None and loop.services is not None:
            yield from service_metrics(loop.services)
        yield from self._gpu_metrics()

    # ------------------------------------------------------------------ queues
    def _queue_metrics(self, loop: ControlLoop) -> Iterator[Metric]:
        scheduler = loop.scheduler
        assert scheduler is not None
        yield from _cluster_queue_metrics(scheduler)
        yield from _cohort_metrics(scheduler)
        counters = loop.counters
        admitted = CounterMetricFamily(
            "kueue_admitted_workloads", "Admitted workloads", labels=["cluster_queue"]
        )
        # Live, every admission check is Ready at once: a quota reservation is an admission.
        reserved = CounterMetricFamily(
            "kueue_quota_reserved_workloads", "Quota reserved workloads", labels=["cluster_queue"]
        )
        for name, count in sorted(counters.admitted.items()):
            admitted.add_metric([name], count)
            reserved.add_metric([name], count)
        preempted = CounterMetricFamily(
            "kueue_preempted_workloads",
            "Preempted workloads per preempting cluster_queue and reason",
            labels=["preempting_cluster_queue", "reason"],
        )
        for (queue_name, reason), count in sorted(counters.preempted.items()):
            preempted.add_metric([queue_name, reason], count)
        evicted = CounterMetricFamily(
            "kueue_evicted_workloads",
            "Evicted workloads per cluster_queue and reason",
            labels=["cluster_queue", "reason"],
        )
        for (queue_name, reason), count in sorted(counters.evicted.items()):
            evicted.add_metric([queue_name, reason], count)
        yield from (admitted, reserved, preempted, evicted)
        self._fold_waits(counters.admission_waits)
        yield self._wait_histogram(
            "kueue_admission_wait_time_seconds", "Time from creation to admission per cluster_queue"
        )
        yield self._wait_histogram(
            "kueue_quota_reserved_wait_time_seconds",
            "Time from creation to quota reservation per cluster_queue (live: the admission)",
        )

    def _fold_waits(self, fresh: dict[str, list[float]]) -> None:
        """Fold the loop's new admission waits into cumulative histograms (read once, then cleared)."""
        for queue_name, values in fresh.items():
            histogram = self._waits.setdefault(queue_name, _Histogram([0] * len(WAIT_BUCKETS)))
            for value in values:
                histogram.total += value
                histogram.observations += 1
                for index, bound in enumerate(WAIT_BUCKETS):
                    if value <= bound:
                        histogram.counts[index] += 1
            values.clear()

    def _wait_histogram(self, name: str, help_text: str) -> Metric:
        family = HistogramMetricFamily(name, help_text, labels=["cluster_queue"])
        for queue_name, histogram in sorted(self._waits.items()):
            buckets = [(_bound(b), c) for b, c in zip(WAIT_BUCKETS, histogram.counts, strict=True)]
            buckets.append(("+Inf", histogram.observations))
            family.add_metric([queue_name], buckets, histogram.total)
        return family

    # -------------------------------------------------------------------- GPUs
    def _gpu_metrics(self) -> Iterator[Metric]:
        readings = self._telemetry()
        labels = ["gpu", "UUID", "modelName", "Hostname"]
        fields: dict[str, tuple[str, Callable[[GPUTelemetry], float | None]]] = {
            "DCGM_FI_DEV_GPU_UTIL": ("GPU utilisation (%)", lambda r: r.utilization_pct),
            "DCGM_FI_DEV_MEM_COPY_UTIL": ("Memory utilisation (%)", lambda r: r.memory_utilization_pct),
            "DCGM_FI_DEV_FB_USED": ("Framebuffer memory used (MiB)", lambda r: r.memory_used_mib),
            "DCGM_FI_DEV_FB_FREE": ("Framebuffer memory free (MiB)", lambda r: r.memory_free_mib),
            "DCGM_FI_DEV_GPU_TEMP": ("GPU temperature (C)", lambda r: r.temperature_c),
            "DCGM_FI_DEV_POWER_USAGE": ("Power draw (W)", lambda r: r.power_w),
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (
                "Uncorrected ECC errors since the driver loaded",
                lambda r: r.ecc_uncorrected,
            ),
        }
        for name, (help_text, read) in fields.items():
            family = GaugeMetricFamily(name, help_text, labels=labels)
            for reading in readings:
                value = read(reading)
                if value is not None:
                    family.add_metric(self._gpu_labels(reading), float(value))
            yield family
        xids = self._xids() if self._xids is not None else {}
        family = GaugeMetricFamily("DCGM_FI_DEV_XID_ERRORS", "Last XID error seen on the GPU", labels=labels)
        for reading in readings:
            if reading.uuid in xids:
                family.add_metric(self._gpu_labels(reading), float(xids[reading.uuid]))
        yield family
        idle = self.idle.observe(readings, self._clock())
        family = GaugeMetricFamily(
            "gpuq_gpu_idle_seconds",
            "How long the GPU has been idle (utilisation at or under the threshold)",
            labels=labels,
        )
        for reading in readings:
            if reading.uuid in idle:
                family.add_metric(self._gpu_labels(reading), idle[reading.uuid])
        yield family

    def _gpu_labels(self, reading: GPUTelemetry) -> list[str]:
        return [str(reading.index), reading.uuid, self._model_name, self._hostname]


CQ_STATUSES = ("pending", "active", "terminating")
"""Kueue's ClusterQueue statuses (``kueue_cluster_queue_status``); gpuq deletes a queue at once, so
never ``terminating``."""

RESOURCE_LABELS = ["cohort", "cluster_queue", "flavor", "resource"]
"""Kueue's labels of the per-(flavor, resource) ClusterQueue gauges; ``cohort`` is "" without one."""


def _cluster_queue_metrics(scheduler: Scheduler) -> Iterator[Metric]:
    """Kueue's ClusterQueue gauges (pkg/metrics/metrics.go): pending, reserving and admitted workloads,
    status, and per flavor and resource the reservation, usage, nominal quota, borrowing and lending
    limits (the last two only where set), labelled with the queue's cohort as Kueue labels them."""
    state = scheduler.state
    pending = GaugeMetricFamily(
        "kueue_pending_workloads",
        "Pending workloads per cluster_queue and status",
        labels=["cluster_queue", "status"],
    )
    reserving = GaugeMetricFamily(
        "kueue_reserving_active_workloads",
        "Workloads reserving quota per cluster_queue",
        labels=["cluster_queue"],
    )
    active = GaugeMetricFamily(
        "kueue_admitted_active_workloads", "Admitted workloads not finished", labels=["cluster_queue"]
    )
    status = GaugeMetricFamily(
        "kueue_cluster_queue_status",
        "The cluster_queue's status: 1 for the current one of pending, active, terminating",
        labels=["cluster_queue", "status"],
    )
    gauges = {
        "reservation": ("kueue_cluster_queue_resource_reservation", "Quota reserved"),
        "usage": ("kueue_cluster_queue_resource_usage", "Quota used"),
        "nominal": ("kueue_cluster_queue_nominal_quota", "Nominal quota"),
        "borrowing": ("kueue_cluster_queue_borrowing_limit", "Borrowing limit"),
        "lending": ("kueue_cluster_queue_lending_limit", "Lending limit"),
    }
    families = {
        key: GaugeMetricFamily(name, f"{text} per cluster_queue, flavor and resource", labels=RESOURCE_LABELS)
        for key, (name, text) in gauges.items()
    }
    for name, queue in sorted(scheduler.queues.items()):
        pending.add_metric([name, "active"], queue.active_count)
        pending.add_metric([name, "inadmissible"], queue.inadmissible_count)
        holding = len(state.by_queue.get(name, {}))
        reserving.add_metric([name], holding)  # live, a reservation is admitted at once
        active.add_metric([name], holding)
        current = "pending" if name in scheduler.inactive else "active"
        for value in CQ_STATUSES:
            status.add_metric([name, value], 1.0 if value == current else 0.0)
        node = state.tree.cluster_queues.get(name)
        if node is None:
            continue
        cohort = node.parent.name if node.parent is not None else ""
        for (flavor, resource), quota in sorted(node.quotas.items()):
            labels = [cohort, name, flavor, resource]
            used = _value(resource, node.usage.get((flavor, resource), 0))
            families["reservation"].add_metric(labels, used)
            families["usage"].add_metric(labels, used)
            families["nominal"].add_metric(labels, _value(resource, quota.nominal))
            if quota.borrowing_limit is not None:
                families["borrowing"].add_metric(labels, _value(resource, quota.borrowing_limit))
            if quota.lending_limit is not None:
                families["lending"].add_metric(labels, _value(resource, quota.lending_limit))
    yield from (pending, reserving, active, status, *families.values())
    if scheduler.config.scheduler.fair_sharing.enable:
        share = GaugeMetricFamily(
            "kueue_cluster_queue_weighted_share",
            "The cluster_queue's dominant resource share above nominal quota, divided by its weight "
            "(NaN: weight 0 and borrowing)",
            labels=["cluster_queue", "cohort"],
        )
        for name, node in sorted(state.tree.cluster_queues.items()):
            cohort = node.parent.name if node.parent is not None else ""
            share.add_metric([name, cohort], _weighted(node_share(state, node)))
        yield share


def _cohort_metrics(scheduler: Scheduler) -> Iterator[Metric]:
    """Kueue's Cohort gauges: subtree quota and reservations per flavor and resource (as Kueue's resource
    nodes count a cohort's usage: what its children use beyond the quota they keep for themselves),
    admitted workloads in the subtree, and the weighted share with fair sharing."""
    state = scheduler.state
    quota = GaugeMetricFamily(
        "kueue_cohort_subtree_quota",
        "The cohort's nominal quota aggregated within its subtree, per flavor and resource",
        labels=["cohort", "flavor", "resource"],
    )
    reservations = GaugeMetricFamily(
        "kueue_cohort_subtree_resource_reservations",
        "The cohort's resource reservations aggregated within its subtree, per flavor and resource",
        labels=["cohort", "flavor", "resource"],
    )
    admitted = GaugeMetricFamily(
        "kueue_cohort_subtree_admitted_active_workloads",
        "Admitted workloads not finished in the cohort's subtree",
        labels=["cohort"],
    )
    fair = scheduler.config.scheduler.fair_sharing.enable
    share = GaugeMetricFamily(
        "kueue_cohort_weighted_share",
        "The cohort's dominant resource share above its subtree quota, divided by its weight "
        "(NaN: weight 0 and borrowing)",
        labels=["cohort"],
    )
    for name, node in sorted(state.tree.cohorts.items()):
        for (flavor, resource), amount in sorted(node.subtree_quota.items()):
            quota.add_metric([name, flavor, resource], _value(resource, amount))
            used = node.usage.get((flavor, resource), 0)
            reservations.add_metric([name, flavor, resource], _value(resource, used))
        count = sum(len(state.by_queue.get(q.name, {})) for q in subtree_queues(node))
        admitted.add_metric([name], count)
        if fair:
            share.add_metric([name], _weighted(node_share(state, node)))
    yield from (quota, reservations, admitted)
    if fair:
        yield share


def _weighted(share: DominantShare) -> float:
    """Kueue's reported weighted share: NaN for a weight-0 queue or cohort that borrows."""
    return math.nan if share.zero_weight_borrows else share.weighted


def _value(resource: str, amount: int) -> float:
    """Core units to what Kueue reports: CPUs (not milli-CPUs), bytes, counts."""
    return amount / 1000 if resource in MILLI_RESOURCES else float(amount)


def _bound(value: float) -> str:
    return f"{value:g}" if value != int(value) else f"{int(value)}.0"


SERVICE_LABELS = ["namespace", "service"]


def service_metrics(services: ServiceController) -> Iterator[Metric]:
    """Live services (a canary revision is its own ``service``): replicas by state, desired replicas,
    and the router's requests by code, in flight, waiting (held) and latency."""
    replicas = GaugeMetricFamily(
        "gpuq_service_replicas", "Replicas of a live service by state", labels=[*SERVICE_LABELS, "state"]
    )
    desired = GaugeMetricFamily(
        "gpuq_service_desired_replicas",
        "Replicas the autoscaler (or the spec) asks for",
        labels=SERVICE_LABELS,
    )
    requests = CounterMetricFamily(
        "gpuq_service_requests", "Requests answered by the router, by code", labels=[*SERVICE_LABELS, "code"]
    )
    in_flight = GaugeMetricFamily(
        "gpuq_service_requests_in_flight",
        "Requests sent to replicas, not yet answered",
        labels=SERVICE_LABELS,
    )
    waiting = GaugeMetricFamily(
        "gpuq_service_requests_waiting", "Requests held while no replica is ready", labels=SERVICE_LABELS
    )
    latency = HistogramMetricFamily(
        "gpuq_service_request_duration_seconds",
        "Request latency at the router, held time included",
        labels=SERVICE_LABELS,
    )
    for view in services.views():
        labels = [view["namespace"], view["name"]]
        for state, count in view["replicas"].items():
            replicas.add_metric([*labels, state], count)
        desired.add_metric(labels, view["desiredReplicas"])
        stats = services.router.stats(f"{view['namespace']}/{view['name']}")
        if stats is None:
            continue
        for code, count in sorted(stats.responses.items()):
            requests.add_metric([*labels, str(code)], count)
        in_flight.add_metric(labels, sum(stats.in_flight.values()))
        waiting.add_metric(labels, stats.held)
        cumulative, buckets = 0, []
        for bound, count in zip(LATENCY_BUCKETS_S, stats.latency_buckets, strict=False):
            cumulative += count
            buckets.append((_bound(bound), cumulative))
        buckets.append(("+Inf", stats.requests))
        latency.add_metric(labels, buckets, stats.latency_sum_s)
    yield from (replicas, desired, requests, in_flight, waiting, latency)
