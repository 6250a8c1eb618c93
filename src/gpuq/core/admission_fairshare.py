"""Admission Fair Sharing: the pending workloads of a ClusterQueue ordered by their LocalQueue's usage.

Kueue: ``keps/4136-admission-fair-sharing``; ``pkg/util/admissionfairsharing/admission_fair_sharing.go``
(the arithmetic), ``pkg/cache/queue/afs/usage_ledger.go`` and ``entry_penalties.go`` (the ledger),
``pkg/scheduler/scheduler.go`` (``updateEntryPenalty``), ``pkg/controller/core/workload_controller.go``
(``updateAfsConsumedUsage``), ``pkg/controller/core/localqueue_controller.go``
(``reconcileConsumedUsage``) and ``pkg/cache/queue/cluster_queue.go`` (``queueOrderingFunc``).

1. Quota reserved: the workload's LocalQueue is charged an entry penalty, its total requests times
   ``alpha = 1 - 0.5 ** (usageSamplingInterval / usageHalfLifeTime)`` (0 when the half-life is 0).
2. Admitted: the penalty settles. ``consumed = consumed * (1 - a) + admitted * a + penalty`` with
   ``a = alpha(elapsed since lastUpdate)`` and ``admitted`` the LocalQueue's admitted usage now.
3. Every ``usageSamplingInterval`` each LocalQueue's consumed decays toward its admitted usage,
   ``consumed * (1 - a) + admitted * a``; a half-life of 0 resets it to nothing.
4. A LocalQueue's usage is ``sum(weight[r] * (consumed + pending penalty)[r]) / LocalQueue weight``
   (a resource without a weight counts 1; a weight <= 0 gives +inf: last, not first).
5. A ClusterQueue with ``admissionMode: UsageBasedAdmissionFairSharing`` (the Configuration set and
   the AdmissionFairSharing gate on, beta and on by default since v0.15) orders its pending workloads
   by that usage, lower first, before Kueue's usual order (priority, then timestamp).
6. Preemption candidates of the preemptor's own ClusterQueue: the LocalQueue with more usage
   first, before priority (``pkg/scheduler/preemption/common/ordering.go``, step 2).

Amounts are floats in Kueue's units (``Quantity.AsApproximateFloat64``: CPU in cores, memory in
bytes, GPUs in devices); time is seconds on whatever clock the shell feeds in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpuq.core.model import AdmissionFairSharing, AdmissionMode, ClusterConfig, LocalQueue, Workload
from gpuq.core.quantity import MILLI_RESOURCES

GATE = "AdmissionFairSharing"
GATE_DEFAULT = True  # beta since v0.15 (pkg/features/kube_features.go)

Usage = dict[str, float]
"""Resource name -> amount in Kueue's units."""
LocalQueueKey = tuple[str, str]
"""(namespace, LocalQueue name)."""


def enabled(config: ClusterConfig, cluster_queue: str) -> bool:
    """Whether ``cluster_queue`` orders by usage (Kueue's ``ResourceWeights`` / ``Enabled``)."""
    afs = config.scheduler.admission_fair_sharing
    if afs is None or not config.scheduler.feature_gates.get(GATE, GATE_DEFAULT):
        return False
    cq = config.cluster_queues.get(cluster_queue)
    return cq is not None and cq.admission_mode == AdmissionMode.USAGE_BASED


def alpha(elapsed_s: float, half_life_s: float) -> float:
    """The weight of the new sample after ``elapsed_s``: ``1 - 0.5 ** (elapsed / halfLife)``; 0 for
    a half-life of 0 (``calculateAlphaRate``)."""
    if half_life_s == 0:
        return 0.0
    return 1.0 - math.pow(0.5, elapsed_s / half_life_s)


def entry_penalty(requests: Mapping[str, float], afs: AdmissionFairSharing) -> Usage:
    """Step 1: what a reservation charges its LocalQueue at once (``CalculateEntryPenalty``)."""
    a = alpha(afs.usage_sampling_interval_s, afs.usage_half_life_s)
    return {r: amount * a for r, amount in sorted(requests.items())}


def decayed(
    old: Mapping[str, float], new: Mapping[str, float], elapsed_s: float, half_life_s: float
) -> Usage:
    """Steps 2-3: ``old * (1 - a) + new * a`` per resource (``CalculateDecayedConsumed``)."""
    a = alpha(elapsed_s, half_life_s)
    return _merged({r: v * (1 - a) for r, v in old.items()}, {r: v * a for r, v in new.items()})


def usage_value(
    consumed: Mapping[str, float],
    penalty: Mapping[str, float],
    lq_weight: float,
    resource_weights: Mapping[str, float],
) -> float:
    """Step 4: the number a LocalQueue is ordered by (``CalculateUsage``)."""
    total = _merged(consumed, penalty)
    usage = sum(resource_weights.get(r, 1.0) * total[r] for r in sorted(total))
    if lq_weight <= 0:
        return math.inf
    return usage / lq_weight


def kueue_units(amounts: Mapping[str, int]) -> Usage:
    """Core amounts (CPU in milli-units) in Kueue's float units."""
    return {r: v / 1000 if r in MILLI_RESOURCES else float(v) for r, v in sorted(amounts.items()) if v}


def _merged(a: Mapping[str, float], b: Mapping[str, float]) -> Usage:
    out = dict(a)
    for r, v in b.items():
        out[r] = out.get(r, 0.0) + v
    return dict(sorted(out.items()))


@dataclass(slots=True)
class LedgerEntry:
    """One LocalQueue's history (``UsageLedgerEntry``): ``consumed`` decayed at ``last_update``, and
    the entry penalties not settled yet, per workload (a re-push replaces, a rollback subtracts
    exactly what was pushed)."""

    consumed: Usage = field(default_factory=dict)
    last_update: float = 0.0
    penalties: dict[str, Usage] = field(default_factory=dict)

    @property
    def pending_penalty(self) -> Usage:
        total: Usage = {}
        for key in sorted(self.penalties):
            total = _merged(total, self.penalties[key])
        return total


class UsageLedger:
    """Every LocalQueue's decayed usage (``AfsUsageLedger``), fed the clock by the caller."""

    def __init__(self, afs: AdmissionFairSharing) -> None:
        self.afs = afs
        self.entries: dict[LocalQueueKey, LedgerEntry] = {}

    def _entry(self, lq: LocalQueueKey, now: float) -> LedgerEntry:
        entry = self.entries.get(lq)
        if entry is None:
            entry = self.entries[lq] = LedgerEntry(last_update=now)
        return entry

    def seed(self, lq: LocalQueueKey, consumed: Mapping[str, float], last_update: float) -> None:
        """Start from a LocalQueue's persisted ``status.fairSharing.admissionFairSharingStatus``.
        A ``last_update`` ahead of the clock (a dump's wall time in a simulation that counts from 0)
        decays nothing until the clock moves: elapsed time is never negative."""
        self.entries[lq] = LedgerEntry(dict(sorted(consumed.items())), last_update)

    def push_penalty(
        self, lq: LocalQueueKey, workload: str, requests: Mapping[str, float], now: float
    ) -> None:
        """Step 1 (``PushPenalty``)."""
        self._entry(lq, now).penalties[workload] = entry_penalty(requests, self.afs)

    def sub_penalty(self, lq: LocalQueueKey, workload: str) -> None:
        """A penalty that will never settle (evicted or withdrawn before Admitted): drop it."""
        entry = self.entries.get(lq)
        if entry is not None:
            entry.penalties.pop(workload, None)

    def settle(self, lq: LocalQueueKey, workload: str, admitted: Mapping[str, float], now: float) -> None:
        """Step 2 (``updateAfsConsumedUsage``): decay toward ``admitted`` and fold the penalty in."""
        entry = self._entry(lq, now)
        elapsed = max(0.0, now - entry.last_update)
        consumed = decayed(entry.consumed, admitted, elapsed, self.afs.usage_half_life_s)
        entry.consumed = _merged(consumed, entry.penalties.pop(workload, {}))
        entry.last_update = now

    def sample(self, lq: LocalQueueKey, admitted: Mapping[str, float], now: float) -> None:
        """Step 3 (``reconcileConsumedUsage``): one sampling tick of one LocalQueue."""
        entry = self._entry(lq, now)
        if self.afs.usage_half_life_s == 0:
            entry.consumed = {}
        else:
            elapsed = max(0.0, now - entry.last_update)
            entry.consumed = decayed(entry.consumed, admitted, elapsed, self.afs.usage_half_life_s)
        entry.last_update = now

    def value(self, lq: LocalQueueKey, lq_weight: float) -> float:
        """Step 4 for one LocalQueue; one never charged has 0."""
        entry = self.entries.get(lq)
        if entry is None:
            return 0.0 if lq_weight > 0 else math.inf
        return usage_value(entry.consumed, entry.pending_penalty, lq_weight, self.afs.resource_weights)


class LocalQueueUsage:
    """A scheduler's Admission Fair Sharing: the ledger, each LocalQueue's usage (step 4, kept
    current as the ledger changes) and each LocalQueue's admitted usage (what samples decay
    toward). Only ClusterQueues with usage-based admission take part."""

    def __init__(self, config: ClusterConfig) -> None:
        afs = config.scheduler.admission_fair_sharing
        assert afs is not None
        self.afs = afs
        self.cluster_queues = frozenset(
            name for name in sorted(config.cluster_queues) if enabled(config, name)
        )
        self.local_queues: dict[LocalQueueKey, str] = {
            key: lq.cluster_queue
            for key, lq in sorted(config.local_queues.items())
            if lq.cluster_queue in self.cluster_queues
        }
        self.weights = {key: float(lq.fair_weight) for key, lq in config.local_queues.items()}
        self.ledger = UsageLedger(afs)
        for key, lq in self.local_queues_seeded(config):
            self.ledger.seed(key, lq.consumed, lq.consumed_at or 0.0)
        self.values: dict[LocalQueueKey, float] = {}
        self.admitted: dict[LocalQueueKey, dict[str, Usage]] = {}  # LocalQueue -> workload -> usage

    def local_queues_seeded(self, config: ClusterConfig) -> list[tuple[LocalQueueKey, LocalQueue]]:
        """The LocalQueues whose status carries consumed usage (a dump of a running Kueue)."""
        return [
            (key, lq)
            for key, lq in sorted(config.local_queues.items())
            if key in self.local_queues and lq.consumed_at is not None
        ]

    def carry_over(self, previous: LocalQueueUsage) -> None:
        """Keep the history of a scheduler this one replaces (a configuration reload): consumed
        usage and its lastUpdate per LocalQueue that still takes part."""
        for key, entry in sorted(previous.ledger.entries.items()):
            if key in self.local_queues:
                self.ledger.seed(key, entry.consumed, entry.last_update)
                self._refresh(key)

    @classmethod
    def of_config(cls, config: ClusterConfig) -> LocalQueueUsage | None:
        """None when no ClusterQueue orders by usage."""
        if not any(enabled(config, name) for name in config.cluster_queues):
            return None
        return cls(config)

    def usage(self, workload: Workload) -> float:
        """The usage its LocalQueue is ordered by (a queue's ``usage`` callable)."""
        lq = (workload.namespace, workload.queue_name)
        value = self.values.get(lq)
        if value is None:
            value = self.values[lq] = self.ledger.value(lq, self.weights.get(lq, 1.0))
        return value

    def value_of(self, lq: LocalQueueKey) -> float:
        """The usage a LocalQueue's workloads are ordered by."""
        value = self.values.get(lq)
        return value if value is not None else self.ledger.value(lq, self.weights.get(lq, 1.0))

    def usage_in(self, cluster_queue: str) -> Callable[[Workload], float] | None:
        """:meth:`usage` where ``cluster_queue`` orders by usage, else None."""
        return self.usage if cluster_queue in self.cluster_queues else None

    def _refresh(self, lq: LocalQueueKey) -> None:
        self.values[lq] = self.ledger.value(lq, self.weights.get(lq, 1.0))

    def _admitted_total(self, lq: LocalQueueKey) -> Usage:
        total: Usage = {}
        held = self.admitted.get(lq, {})
        for key in sorted(held):
            total = _merged(total, held[key])
        return total

    def reserved(self, lq: LocalQueueKey, workload: str, requests: Mapping[str, float], now: float) -> None:
        """Step 1: quota reserved for ``workload`` in one of :attr:`cluster_queues`."""
        self.ledger.push_penalty(lq, workload, requests, now)
        self._refresh(lq)

    def became_admitted(
        self, lq: LocalQueueKey, workload: str, usage: Mapping[str, float], now: float
    ) -> None:
        """Step 2: ``workload`` is Admitted; its pending penalty (if any) settles."""
        self.admitted.setdefault(lq, {})[workload] = dict(usage)
        entry = self.ledger.entries.get(lq)
        if entry is not None and workload in entry.penalties:
            self.ledger.settle(lq, workload, self._admitted_total(lq), now)
        self._refresh(lq)

    def released(self, lq: LocalQueueKey, workload: str) -> None:
        """Quota released (evicted, finished): no longer admitted usage, and a penalty never
        settled is dropped (``SubPenalty``)."""
        held = self.admitted.get(lq)
        if held is not None:
            held.pop(workload, None)
            if not held:
                del self.admitted[lq]
        self.ledger.sub_penalty(lq, workload)
        self._refresh(lq)

    def sample(self, now: float) -> None:
        """Step 3 for every LocalQueue of :attr:`cluster_queues` (and any other the ledger knows)."""
        for lq in sorted(set(self.local_queues) | set(self.ledger.entries)):
            self.ledger.sample(lq, self._admitted_total(lq), now)
            self._refresh(lq)

    @property
    def holds(self) -> bool:
        """Some LocalQueue has admitted usage: its consumed history moves at every sample."""
        return bool(self.admitted)

    def status(self, lq: LocalQueueKey) -> tuple[Usage, float] | None:
        """``status.fairSharing.admissionFairSharingStatus``: (consumedResources, lastUpdate), or
        None for a LocalQueue never sampled or charged."""
        entry = self.ledger.entries.get(lq)
        return None if entry is None else (dict(entry.consumed), entry.last_update)


def quantity_text(amount: float) -> str:
    """A Kueue-unit amount as Kubernetes writes it, to the milli-unit (``resource.MulByFloat``)."""
    milli = round(amount * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def status_view(usage: LocalQueueUsage | None, lq: LocalQueueKey) -> dict[str, object] | None:
    """A LocalQueue's ``status.fairSharing`` as Kueue's LocalQueue controller writes it
    (``initializeAfsIfNeeded`` leaves ``weightedShare`` 0), or None when it takes no part in
    Admission Fair Sharing."""
    status = usage.status(lq) if usage is not None else None
    if status is None:
        return None
    consumed, last_update = status
    stamp = datetime.fromtimestamp(last_update, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    resources = {r: quantity_text(v) for r, v in sorted(consumed.items())}
    return {
        "weightedShare": 0,
        "admissionFairSharingStatus": {"consumedResources": resources, "lastUpdate": stamp},
    }
