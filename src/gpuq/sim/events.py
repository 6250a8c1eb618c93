"""The event queue: simulated time, deterministic order, no tick.

One heap holds every timer of a run: the core engine's events (finishes, node
changes, starts, timeouts, requeues) and those of the hooks riding on it (the
serving fleet's autoscaler syncs, the provisioner's wake-ups), which the
simulation dispatches to the hook that scheduled them.

Events at the same instant are ordered by kind first (capacity that frees up
is seen before work that arrives, as a cluster's controllers would have seen
them by the next scheduling cycle), then by the order they were scheduled.
An event is cancelled by bumping the version it carries (lazy deletion), so
rescheduling a workload's finish after a preemption costs O(log n).
"""

from __future__ import annotations

import heapq
from collections.abc import Container, Iterator
from enum import IntEnum
from typing import NamedTuple


class EventKind(IntEnum):
    """Kinds in their order among events of one instant."""

    FINISH = 0  # a workload's pods ran to completion (or failure)
    NODE_DOWN = 1  # nodes removed or failed: their workloads are evicted
    NODE_UP = 2  # nodes added
    STARTED = 3  # a workload's pods finished starting (startup delay elapsed)
    PODS_READY_TIMEOUT = 4  # waitForPodsReady: admitted but not running in time
    MAX_EXECUTION = 5  # maximumExecutionTimeSeconds admitted: the workload is deactivated
    PROTECTION = 6  # a workload's gpuq.dev/min-runtime ended: it may be preempted from now
    REQUEUE = 7  # a requeue backoff expired
    USAGE_SAMPLE = 8  # Admission Fair Sharing's usageSamplingInterval elapsed
    ARRIVAL = 9  # a workload is submitted
    SERVICE_SYNC = 10  # an autoscaled service's sync period elapsed (ServiceHooks; version: the service)
    PROVISIONING = 11  # a provisioning wake-up (ProvisioningHooks; tag: its kind, version: its token)
    CRON = 12  # a CronJob's scheduled time, or a missed one run late (CronHooks; key: the CronJob)

    @property
    def core(self) -> bool:
        """An event of the core engine (not one of a hook's)."""
        return self <= EventKind.ARRIVAL


CORE_KINDS = frozenset(kind for kind in EventKind if kind.core)


class Event(NamedTuple):
    """Compared as a plain tuple: (time, kind, seq) decide the order, seq is unique."""

    time: float
    kind: EventKind
    seq: int
    key: str = ""  # the workload or node group the event is about
    version: int = 0  # must match the subject's current version, else the event was cancelled
    tag: str = ""  # the hook's own kind of event (a provisioning wake-up's)
    background: bool = False  # does not keep the run alive once the provisioning hooks have no work


class EventQueue:
    """A min-heap of events keyed by (time, kind, insertion sequence).

    ``len()`` counts the core events only (cancelled ones included, except those taken out with
    :meth:`cancel`): the hooks' timers alone do not mean there is work left."""

    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0
        self._core = 0
        self._cancelled: set[int] = set()  # seq of events taken out; dropped when they surface
        self.pushed = 0

    def push(
        self,
        time: float,
        kind: EventKind,
        key: str = "",
        version: int = 0,
        tag: str = "",
        background: bool = False,
    ) -> Event:
        event = Event(time, kind, self._seq, key, version, tag, background)
        self._seq += 1
        self.pushed += 1
        self._core += kind.core
        heapq.heappush(self._heap, event)
        return event

    def cancel(self, event: Event) -> None:
        """Take ``event`` out: it is never returned and no longer counts (dropped lazily)."""
        if event.seq not in self._cancelled:
            self._cancelled.add(event.seq)
            self._core -= event.kind.core

    def _drop_cancelled(self) -> None:
        heap, cancelled = self._heap, self._cancelled
        while heap and heap[0].seq in cancelled:
            cancelled.discard(heapq.heappop(heap).seq)

    def peek_time(self, background: bool = True) -> float | None:
        """The time of the first event; with ``background=False``, of the first that is not a
        background event (a scan: only for when little is left)."""
        self._drop_cancelled()
        if background:
            return self._heap[0].time if self._heap else None
        cancelled = self._cancelled
        return min((e.time for e in self._heap if not e.background and e.seq not in cancelled), default=None)

    def pop(self) -> Event:
        self._drop_cancelled()
        event = heapq.heappop(self._heap)
        self._core -= event.kind.core
        return event

    def due(self, now: float, kinds: Container[EventKind]) -> Iterator[Event]:
        """Pop, in order, every event of ``kinds`` due at or before ``now``, including those pushed
        while iterating; events of other kinds due by then are set aside (still counted) and go
        back, with their place in the order, when the iteration ends."""
        heap, cancelled = self._heap, self._cancelled
        aside: list[Event] = []
        try:
            while heap and heap[0].time <= now:
                event = heapq.heappop(heap)
                if event.seq in cancelled:
                    cancelled.discard(event.seq)
                elif event.kind in kinds:
                    self._core -= event.kind.core
                    yield event
                else:
                    aside.append(event)
        finally:
            for event in aside:
                heapq.heappush(heap, event)

    def __len__(self) -> int:
        return self._core
