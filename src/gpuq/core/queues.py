"""Pending workloads per ClusterQueue: the heap, the inadmissible set and requeue rules (kueue-semantics §5).

Order within a queue: sticky preemptor first (BestEffortFIFO), higher
priority, earlier queue-order timestamp, then uid / key. A head that failed
goes back to the heap at once under StrictFIFO (so it blocks those behind it)
and for transient reasons under BestEffortFIFO; otherwise it waits in the
inadmissible set until capacity in its cohort tree may have changed.
Equal-shaped workloads follow a head that found no fit into the inadmissible
set without evaluation (scheduling equivalence hashing, §5.4).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from gpuq.core.model import QueueingStrategy, Workload


class RequeueReason(StrEnum):
    """Why a head went back to its queue (Kueue's RequeueReason)."""

    NO_FIT = "NoFit"
    PREEMPTION_NO_CANDIDATES = "PreemptionNoCandidates"
    FAILED_AFTER_NOMINATION = "FailedAfterNomination"
    PENDING_PREEMPTION = "PendingPreemption"
    NAMESPACE_MISMATCH = "NamespaceMismatch"
    INACTIVE = "Inactive"


HeapEntry = tuple[int, int, float, str, int]
"""(not sticky, -priority, queue-order timestamp, uid or key, generation): Kueue's queue order."""
COMPACT_FACTOR = 4  # rebuild the heap when stale entries outnumber live ones this many times
COMPACT_SLACK = 1024
BULK_REQUEUE = 64

IMMEDIATE = frozenset({RequeueReason.FAILED_AFTER_NOMINATION, RequeueReason.PENDING_PREEMPTION})


@dataclass(frozen=True, slots=True)
class QueueEntry:
    workload: Workload
    cluster_queue: str


def shape_of(workload: Workload) -> tuple[object, ...]:
    """Scheduling-equivalence hash input: priority and pod-set shapes."""
    return (
        workload.priority,
        tuple(
            (
                ps.name,
                ps.count,
                ps.min_count,
                tuple(sorted(ps.requests.items())),
                tuple(sorted(ps.node_selector.items())),
                ps.node_affinity,
                ps.tolerations,
            )
            for ps in workload.pod_sets
        ),
    )


class ClusterQueueQueue:
    """One ClusterQueue's pending workloads."""

    def __init__(self, name: str, strategy: QueueingStrategy) -> None:
        self.name = name
        self.strategy = strategy
        self._heap: list[HeapEntry] = []
        self._entries: dict[str, Workload] = {}  # in the heap (lazy deletion by generation)
        self._generation: dict[str, int] = {}
        self.inadmissible: dict[str, Workload] = {}
        self._key_by_gen: dict[int, str] = {}
        self._shapes: dict[str, tuple[object, ...]] = {}
        self._by_shape: dict[tuple[object, ...], dict[str, None]] = {}  # active keys per shape
        self._latest: dict[str, HeapEntry] = {}  # each queued workload's latest heap entry
        self._sticky: str | None = None
        self._counter = 0

    def __len__(self) -> int:
        return len(self._entries) + len(self.inadmissible)

    @property
    def active_count(self) -> int:
        return len(self._entries)

    def push(self, workload: Workload) -> None:
        heapq.heappush(self._heap, self._activate(workload))
        if len(self._heap) > COMPACT_FACTOR * len(self._entries) + COMPACT_SLACK:
            self._compact()

    def _activate(self, workload: Workload) -> HeapEntry:
        """Make ``workload`` active under a new generation; its heap entry, for the caller to add."""
        key = workload.key
        self.inadmissible.pop(key, None)
        self._counter += 1
        self._key_by_gen.pop(self._generation.get(key, -1), None)
        self._generation[key] = self._counter
        self._key_by_gen[self._counter] = key
        self._entries[key] = workload
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = shape_of(workload)
        self._by_shape.setdefault(shape, {})[key] = None
        sticky = 0 if key == self._sticky else 1
        entry = (sticky, -workload.priority, workload.creation_time, workload.uid or key, self._counter)
        self._latest[key] = entry
        return entry

    def _compact(self) -> None:
        """Rebuild the heap from the active workloads' latest entries, dropping the stale ones that
        lazy deletion leaves behind (requeues and parking would otherwise grow it without bound)."""
        self._heap = [self._latest[key] for key in self._entries]
        heapq.heapify(self._heap)
        self._key_by_gen = {self._latest[key][4]: key for key in self._entries}

    def head(self) -> Workload | None:
        """The workload at the top of the heap, without removing it."""
        while self._heap:
            gen = self._heap[0][4]
            key = self._key_by_gen.get(gen)
            if key is not None and self._generation.get(key) == gen and key in self._entries:
                return self._entries[key]
            heapq.heappop(self._heap)
            self._key_by_gen.pop(gen, None)
        return None

    def _deactivate(self, key: str) -> Workload | None:
        """Take ``key`` out of the active heap (its heap entry is dropped lazily)."""
        workload = self._entries.pop(key, None)
        if workload is not None:
            self._by_shape.get(self._shapes[key], {}).pop(key, None)
        return workload

    def delete(self, key: str) -> None:
        self._deactivate(key)
        self.inadmissible.pop(key, None)
        self._generation.pop(key, None)
        self._shapes.pop(key, None)
        self._latest.pop(key, None)
        if self._sticky == key:
            self._sticky = None

    def requeue(self, workload: Workload, reason: RequeueReason, pending_flavors: bool = False) -> bool:
        """Handle a head that was not admitted, per the queueing strategy (§5.2).

        ``pending_flavors``: its flavor scan has untried flavors (§4.8), so a
        BestEffortFIFO queue retries it at once. Returns whether it went to the
        inadmissible set.
        """
        key = workload.key
        if reason == RequeueReason.PENDING_PREEMPTION and self.strategy == QueueingStrategy.BEST_EFFORT_FIFO:
            previous, self._sticky = self._sticky, key
            if previous not in (None, key) and previous in self._entries:
                self.push(self._entries[previous])  # no longer sticky: re-sort it
            self.push(workload)  # re-push so that it sorts first
            return False
        strict = self.strategy == QueueingStrategy.STRICT_FIFO and reason != RequeueReason.NAMESPACE_MISMATCH
        if strict or reason in IMMEDIATE or (pending_flavors and reason != RequeueReason.NAMESPACE_MISMATCH):
            if key not in self._entries:
                self.push(workload)
            return False
        self._deactivate(key)
        self.inadmissible[key] = workload
        return True

    def park_equivalent(self, workload: Workload) -> list[str]:
        """Move every queued workload shaped like ``workload`` to the inadmissible set (§5.4)."""
        shape = self._shapes.get(workload.key) or shape_of(workload)
        moved = list(self._by_shape.pop(shape, {}))
        for key in moved:
            self.inadmissible[key] = self._entries.pop(key)
        return moved

    def requeue_inadmissible(self) -> int:
        """Return every inadmissible workload to the heap (capacity may have changed).

        Many at once are appended and the heap rebuilt in one pass, rather than pushed one by one.
        """
        waiting = list(self.inadmissible.values())
        self.inadmissible.clear()
        if len(waiting) < BULK_REQUEUE:
            for workload in waiting:
                self.push(workload)
        else:
            for workload in waiting:
                self._activate(workload)
            self._compact()
        return len(waiting)

    def pending(self) -> Iterable[Workload]:
        yield from self._entries.values()
        yield from self.inadmissible.values()
