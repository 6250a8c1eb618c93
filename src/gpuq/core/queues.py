"""Pending workloads per ClusterQueue: the heap, the inadmissible set and requeue rules.

Kueue: pkg/cache/queue/cluster_queue.go, manager.go and inadmissible_workloads.go.

Order within a queue: sticky preemptor first (BestEffortFIFO), under
Admission Fair Sharing the lower usage of the workload's LocalQueue
(``queueOrderingFunc``; :mod:`gpuq.core.admission_fairshare`), higher
priority, earlier queue-order timestamp, then uid / key. A head that failed
goes back to the heap at once under StrictFIFO (so it blocks those behind it)
and for transient reasons under BestEffortFIFO; otherwise it waits in the
inadmissible set until capacity in its cohort tree may have changed.
Equal-shaped workloads follow a head that found no fit into the inadmissible
set without evaluation (scheduling equivalence hashing, gate SchedulingEquivalenceHashing).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from gpuq.core.model import QueueingStrategy, Workload


class RequeueReason(StrEnum):
    """Why a head went back to its queue (Kueue's RequeueReason)."""

    NO_FIT = "NoFit"
    PREEMPTION_NO_CANDIDATES = "PreemptionNoCandidates"
    FAILED_AFTER_NOMINATION = "FailedAfterNomination"
    PENDING_PREEMPTION = "PendingPreemption"
    NAMESPACE_MISMATCH = "NamespaceMismatch"
    INACTIVE = "Inactive"


HeapEntry = tuple[int, float, int, float, str, int]
"""(not sticky, LocalQueue usage, -priority, queue-order timestamp, uid or key, generation): Kueue's
queue order (the usage is 0 without Admission Fair Sharing)."""
GEN: Final = 5  # the generation's place in a HeapEntry
COMPACT_FACTOR = 4  # rebuild the heap when stale entries outnumber live ones this many times
COMPACT_SLACK = 1024
BULK_REQUEUE = 64

IMMEDIATE = frozenset({RequeueReason.FAILED_AFTER_NOMINATION, RequeueReason.PENDING_PREEMPTION})


@dataclass(slots=True)
class QueueCounts:
    """Workloads by where they wait, kept as they move (never summed over queues or groups):
    ``active`` in the heap or following a representative, ``inadmissible`` parked. ``with_heads``:
    the names of the queues counted here that have an active workload (a head) now, so that a
    cycle visits those, not every queue."""

    active: int = 0
    inadmissible: int = 0
    with_heads: set[str] = field(default_factory=set)


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
                tuple(sorted(ps.charged.items())),
                tuple(sorted(ps.node_selector.items())),
                ps.node_affinity,
                ps.tolerations,
            )
            for ps in workload.pod_sets
        ),
    )


class _Group:
    """Workloads of one shape outside the heap, ordered (a heap of order keys; the dict is the truth)."""

    __slots__ = ("members", "order")

    def __init__(self) -> None:
        self.members: dict[str, Workload] = {}
        self.order: list[tuple[int, float, str, str]] = []

    def add(self, workload: Workload) -> None:
        self.members[workload.key] = workload
        heapq.heappush(self.order, _group_entry(workload))
        if len(self.order) > COMPACT_FACTOR * len(self.members) + COMPACT_SLACK:
            self.order = [_group_entry(w) for w in self.members.values()]  # drop stale entries
            heapq.heapify(self.order)

    def merge(self, other: _Group) -> _Group:
        """The union of both groups: the larger one, with the smaller's members added one by one
        (re-sorting the larger group at every park would cost per workload again)."""
        large, small = (self, other) if len(self.members) >= len(other.members) else (other, self)
        for workload in small.members.values():
            large.add(workload)
        return large

    def first(self) -> Workload | None:
        """The first workload in queue order, without removing it."""
        while self.order:
            key = self.order[0][3]
            if key in self.members:
                return self.members[key]
            heapq.heappop(self.order)
        return None


class ClusterQueueQueue:
    """One ClusterQueue's pending workloads.

    Workloads parked together by shape stay grouped: a wake puts only each
    group's first workload in the heap, as its shape's representative, and the
    others follow it outside the heap. They are no less active: whenever the
    representative leaves the heap without its shape being parked (admitted,
    deleted, parked alone), the next follower takes its place, so the heap's head
    is always the first active workload in queue order. A wake and a re-park thus
    cost per shape, not per workload.
    """

    def __init__(
        self,
        name: str,
        strategy: QueueingStrategy,
        totals: QueueCounts | None = None,
        usage: Callable[[Workload], float] | None = None,
    ) -> None:
        """``totals``: counts shared with other queues (a scheduler's over its active queues), moved
        by the same deltas as this queue's own. ``usage``: Admission Fair Sharing's usage of a
        workload's LocalQueue, ordered before priority; :meth:`reorder` after it changed. Shapes
        then include the LocalQueue, so that a shape's followers share their representative's usage."""
        self.name = name
        self._usage = usage
        self.strategy = strategy
        self.counts = QueueCounts()
        self._totals = totals
        self._heap: list[HeapEntry] = []
        self._entries: dict[str, Workload] = {}  # in the heap (lazy deletion by generation)
        self._generation: dict[str, int] = {}
        self._key_by_gen: dict[int, str] = {}
        self._shapes: dict[str, tuple[object, ...]] = {}
        self._by_shape: dict[tuple[object, ...], dict[str, None]] = {}  # heap keys per shape
        self._latest: dict[str, HeapEntry] = {}  # each queued workload's latest heap entry
        self._parked: dict[tuple[object, ...], _Group] = {}  # inadmissible, by shape
        self._following: dict[tuple[object, ...], _Group] = {}  # active behind their representative
        self._representative: dict[tuple[object, ...], str] = {}  # shape -> heap key the followers follow
        self._sticky: str | None = None
        self._preemptor: str | None = None
        self._counter = 0
        self.pushes = 0
        """Workloads pushed so far (arrivals and returns): a view of the queue that saw the same count
        and the same quota has seen every workload in it (backfill's reuse)."""

    def __len__(self) -> int:
        return self.active_count + self.inadmissible_count

    @property
    def active_count(self) -> int:
        return self.counts.active

    @property
    def inadmissible_count(self) -> int:
        return self.counts.inadmissible

    def _count(self, active: int, inadmissible: int) -> None:
        """Workloads became active or inadmissible (negative: stopped being)."""
        counts = self.counts
        was_active = counts.active > 0
        counts.active += active
        counts.inadmissible += inadmissible
        totals = self._totals
        if totals is not None:
            totals.active += active
            totals.inadmissible += inadmissible
            if was_active != (counts.active > 0):
                if was_active:
                    totals.with_heads.discard(self.name)
                else:
                    totals.with_heads.add(self.name)

    @property
    def inadmissible(self) -> dict[str, Workload]:
        """The parked workloads (a copy; for reports and metrics)."""
        return {key: w for group in self._parked.values() for key, w in group.members.items()}

    def push(self, workload: Workload) -> None:
        self.pushes += 1
        heapq.heappush(self._heap, self._activate(workload))
        if len(self._heap) > COMPACT_FACTOR * len(self._entries) + COMPACT_SLACK:
            self._compact()

    def _shape(self, workload: Workload) -> tuple[object, ...]:
        shape = self._shapes.get(workload.key)
        if shape is None:
            shape = self._shapes[workload.key] = self._shape_key(workload)
        return shape

    def _shape_key(self, workload: Workload) -> tuple[object, ...]:
        shape = shape_of(workload)
        return shape if self._usage is None else (workload.namespace, workload.queue_name, *shape)

    def reorder(self) -> None:
        """The LocalQueues' usages changed: re-sort the heap (Kueue's ``RebuildActiveHeap``)."""
        usage = self._usage
        if usage is None or not self._entries:
            return
        latest = self._latest
        for key, workload in self._entries.items():
            entry = latest[key]
            latest[key] = (entry[0], usage(workload), *entry[2:])
        self._compact()

    def _leave_groups(self, key: str, shape: tuple[object, ...]) -> None:
        for groups, parked in ((self._parked, True), (self._following, False)):
            group = groups.get(shape)
            if group is not None and group.members.pop(key, None) is not None:
                self._count(0 if parked else -1, -1 if parked else 0)
                if not group.members:
                    del groups[shape]

    def _activate(self, workload: Workload) -> HeapEntry:
        """Make ``workload`` active in the heap under a new generation; its heap entry, for the caller."""
        key = workload.key
        shape = self._shape(workload)
        self._leave_groups(key, shape)
        self._counter += 1
        self._key_by_gen.pop(self._generation.get(key, -1), None)
        self._generation[key] = self._counter
        self._key_by_gen[self._counter] = key
        if key not in self._entries:
            self._count(1, 0)
        self._entries[key] = workload
        self._by_shape.setdefault(shape, {})[key] = None
        sticky = 0 if key == self._sticky else 1
        fair = self._usage(workload) if self._usage is not None else 0.0
        entry = (sticky, fair, -workload.priority, workload.order_time, workload.uid or key, self._counter)
        self._latest[key] = entry
        return entry

    def _compact(self) -> None:
        """Rebuild the heap from the active workloads' latest entries, dropping the stale ones that
        lazy deletion leaves behind (requeues and parking would otherwise grow it without bound)."""
        self._heap = [self._latest[key] for key in self._entries]
        heapq.heapify(self._heap)
        self._key_by_gen = {self._latest[key][GEN]: key for key in self._entries}

    def head(self) -> Workload | None:
        """The workload at the top of the heap, without removing it."""
        while self._heap:
            gen = self._heap[0][GEN]
            key = self._key_by_gen.get(gen)
            if key is not None and self._generation.get(key) == gen and key in self._entries:
                return self._entries[key]
            heapq.heappop(self._heap)
            self._key_by_gen.pop(gen, None)
        return None

    def _deactivate(self, key: str) -> Workload | None:
        """Take ``key`` out of the heap (its heap entry is dropped lazily); a representative hands
        its place to the next follower of its shape."""
        workload = self._entries.pop(key, None)
        if workload is not None:
            self._count(-1, 0)
            shape = self._shapes[key]
            self._by_shape.get(shape, {}).pop(key, None)
            if self._representative.get(shape) == key:
                self._promote(shape)
        return workload

    def _promote(self, shape: tuple[object, ...]) -> None:
        del self._representative[shape]
        group = self._following.get(shape)
        if group is None:
            return
        first = group.first()
        assert first is not None  # an empty group is removed
        self.push(first)
        if shape in self._following:
            self._representative[shape] = first.key

    def delete(self, key: str) -> None:
        shape = self._shapes.get(key)
        self._deactivate(key)
        if shape is not None:
            self._leave_groups(key, shape)
        self._generation.pop(key, None)
        self._shapes.pop(key, None)
        self._latest.pop(key, None)
        if self._sticky == key:
            self._sticky = None
        if self._preemptor == key:
            self._preemptor = None

    def is_preemptor(self, key: str) -> bool:
        """Kueue's ``ClusterQueue.IsPreemptor``: ``key`` was last requeued waiting for the evictions
        it issued, and has not left the queue since (admitted, deleted); under any strategy."""
        return self._preemptor == key

    def requeue(self, workload: Workload, reason: RequeueReason, pending_flavors: bool = False) -> bool:
        """Handle a head that was not admitted, per the queueing strategy (Kueue's RequeueIfNotPresent).

        ``pending_flavors``: its flavor scan has untried flavors, so a
        BestEffortFIFO queue retries it at once. Returns whether it went to the
        inadmissible set.
        """
        key = workload.key
        if reason == RequeueReason.PENDING_PREEMPTION:
            self._preemptor = key  # Kueue's preemptorWorkload.set; sticky under BestEffortFIFO only
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
        self._leave_groups(key, self._shape(workload))
        self._parked.setdefault(self._shape(workload), _Group()).add(workload)
        self._count(0, 1)
        return True

    def park_equivalent(self, workload: Workload) -> list[str]:
        """Park every active workload shaped like ``workload``; the keys that left the heap
        (its followers go with them, as a group)."""
        shape = self._shapes.get(workload.key) or self._shape_key(workload)
        moved = list(self._by_shape.pop(shape, {}))
        parked = self._parked.get(shape)
        if parked is None:
            parked = self._parked[shape] = _Group()
        for key in moved:
            parked.add(self._entries.pop(key))
        self._count(-len(moved), len(moved))
        self._representative.pop(shape, None)
        following = self._following.pop(shape, None)
        if following is not None:
            self._count(-len(following.members), len(following.members))
            parked = self._parked[shape] = parked.merge(following)
        if not parked.members:
            del self._parked[shape]
        return moved

    def requeue_inadmissible(self) -> int:
        """Make every parked workload active again (capacity may have changed): per shape, the first
        enters the heap and the others follow it."""
        woken = self.inadmissible_count
        parked, self._parked = self._parked, {}
        self._count(0, -woken)
        for shape, group in parked.items():
            if self._sticky is not None and self._sticky in group.members:
                self.push(group.members.pop(self._sticky))  # the sticky head sorts first on its own
            first = group.first()
            if first is None:
                continue
            current = self._representative.get(shape)
            if current is None or _order(first) < _order(self._entries[current]):
                group.members.pop(first.key)
                self.push(first)
                self._representative[shape] = first.key
            if not group.members:
                continue
            self._count(len(group.members), 0)
            following = self._following.get(shape)
            self._following[shape] = group if following is None else following.merge(group)
        return woken

    def queued_after_head(self, limit: int) -> list[Workload]:
        """Up to ``limit`` active workloads behind the head, in queue order (backfill's candidates):
        one pass over the active ones, so a deep queue costs its length, not a sort."""
        head = self.head()
        active = [w for w in self._entries.values() if w is not head]
        active += [w for group in self._following.values() for w in group.members.values() if w is not head]
        return heapq.nsmallest(limit, active, key=_order)

    def pending(self) -> Iterable[Workload]:
        yield from self._entries.values()
        for groups in (self._following, self._parked):
            for group in list(groups.values()):
                yield from group.members.values()


def _group_entry(workload: Workload) -> tuple[int, float, str, str]:
    return (-workload.priority, workload.order_time, workload.uid or workload.key, workload.key)


def _order(workload: Workload) -> tuple[int, float, str]:
    return (-workload.priority, workload.order_time, workload.uid or workload.key)
