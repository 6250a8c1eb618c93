"""The event queue: simulated time, deterministic order, no tick.

Events at the same instant are ordered by kind first (capacity that frees up
is seen before work that arrives, as a cluster's controllers would have seen
them by the next scheduling cycle), then by the order they were scheduled.
An event is cancelled by bumping the version it carries (lazy deletion), so
rescheduling a workload's finish after a preemption costs O(log n).
"""

from __future__ import annotations

import heapq
from enum import IntEnum
from typing import NamedTuple


class EventKind(IntEnum):
    """Kinds in their order among events of one instant."""

    FINISH = 0  # a workload's pods ran to completion (or failure)
    NODE_DOWN = 1  # nodes removed or failed: their workloads are evicted
    NODE_UP = 2  # nodes added
    STARTED = 3  # a workload's pods finished starting (startup delay elapsed)
    PODS_READY_TIMEOUT = 4  # waitForPodsReady: admitted but not running in time
    REQUEUE = 5  # a requeue backoff expired
    ARRIVAL = 6  # a workload is submitted


class Event(NamedTuple):
    """Compared as a plain tuple: (time, kind, seq) decide the order, seq is unique."""

    time: float
    kind: EventKind
    seq: int
    key: str = ""  # the workload or node group the event is about
    version: int = 0  # must match the subject's current version, else the event was cancelled


class EventQueue:
    """A min-heap of events keyed by (time, kind, insertion sequence)."""

    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0
        self.pushed = 0

    def push(self, time: float, kind: EventKind, key: str = "", version: int = 0) -> Event:
        event = Event(time, kind, self._seq, key, version)
        self._seq += 1
        self.pushed += 1
        heapq.heappush(self._heap, event)
        return event

    def peek_time(self) -> float | None:
        return self._heap[0].time if self._heap else None

    def pop(self) -> Event:
        return heapq.heappop(self._heap)

    def __len__(self) -> int:
        return len(self._heap)
