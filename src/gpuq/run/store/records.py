"""Plain frozen records the store returns and accepts, so no ORM object or session escapes it.

Times are float seconds since the epoch. ``manifest`` and ``admission`` are fresh dicts
parsed from JSON on every read; mutating one changes nothing in the store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuq.core.lifecycle.states import WorkloadState

WORKLOAD_STATES = tuple(s.value for s in WorkloadState if s != WorkloadState.INADMISSIBLE)
"""Every state a workload row may hold (the lifecycle's enum; no queue routes an Inadmissible one,
which the store keeps as Pending with its message); transitions are the lifecycle's business."""

POD_STATES = ("Pending", "Running", "Succeeded", "Failed", "Terminating")
"""Every state a pod row may hold."""

LIVE_POD_STATES = ("Running", "Terminating")
"""Pods whose process may still be alive: what :meth:`Store.running_pods` returns."""

FINISHED_STATES = ("Succeeded", "Failed")
"""Workloads that are over (a Job's Complete or Failed): what retention (``--finished-ttl``) deletes."""


class StoreError(Exception):
    """Base of the store's own errors."""


class StoreConflict(StoreError):
    """The write would duplicate a unique key; nothing was written."""


class StoreNotFound(StoreError):
    """The write names a row that does not exist; nothing was written."""


class LeaseLost(StoreError):
    """A fenced write found that its leader no longer holds the lease (expired, or taken over with a
    newer fencing token); nothing was written. The leader must step down."""


@dataclass(frozen=True)
class Fence:
    """What a leader's writes check in the lease row: ``holder`` still holds lease ``name`` with fencing
    ``token``, and it has not expired by ``clock()`` (the elector's clock, the one it renews with)."""

    name: str
    holder: str
    token: int
    clock: Callable[[], float]


@dataclass(frozen=True)
class ObjectRecord:
    """An applied manifest (ClusterQueue, LocalQueue, ResourceFlavor...) keyed by (kind, namespace, name)."""

    id: int
    kind: str
    api_version: str
    namespace: str
    name: str
    manifest: dict[str, Any]
    resource_version: int
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class ConditionRecord:
    """One entry of a workload's append-only condition history; ``id`` is 0 until stored."""

    type: str
    status: str
    reason: str
    message: str
    time: float
    id: int = 0
    workload_id: int = 0


@dataclass(frozen=True)
class PodRecord:
    """A pod of a workload; ``id`` and ``workload_id`` are ignored in records given to :meth:`Store.set_pods`.

    ``devices`` is always a tuple (any sequence given is converted).
    """

    name: str
    pod_set: str
    state: str = "Pending"
    node: str | None = None
    devices: Sequence[str] = ()
    attempt: int = 0
    pid: int | None = None
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    log_path: str | None = None
    id: int = 0
    workload_id: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(self.devices))


@dataclass(frozen=True)
class WorkloadRecord:
    """A workload row: what was submitted plus where the control loop has taken it."""

    id: int
    namespace: str
    name: str
    queue_name: str
    source_kind: str
    manifest: dict[str, Any]
    priority: int
    state: str
    cluster_queue: str | None
    admission: dict[str, Any] | None
    requeue_count: int
    requeue_at: float | None
    created_at: float
    admitted_at: float | None
    started_at: float | None
    finished_at: float | None
    message: str
    resource_version: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class EventRecord:
    """A Kubernetes-style event (type Normal or Warning) about one object."""

    id: int
    time: float
    type: str
    reason: str
    kind: str
    namespace: str
    name: str
    message: str


@dataclass(frozen=True)
class UserRecord:
    """An API user; the token itself is never stored, only its sha256."""

    name: str
    roles: tuple[str, ...]
    namespaces: tuple[str, ...]


@dataclass(frozen=True)
class WorkloadChange:
    """One workload's part of a scheduling cycle, applied by :meth:`Store.apply_decisions`.

    ``fields`` are the columns to set besides ``state`` (see ``WORKLOAD_FIELDS``);
    ``condition`` is appended to the history; ``pods`` replaces all of the workload's
    pods when given (empty removes them; kept as a tuple) and leaves them alone when ``None``.
    """

    workload_id: int
    state: str
    condition: ConditionRecord | None = None
    pods: Sequence[PodRecord] | None = None
    fields: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.pods is not None:
            object.__setattr__(self, "pods", tuple(self.pods))


@dataclass(frozen=True)
class Tombstone:
    """A workload deleted through the API (``version``: the store version of the delete)."""

    version: int
    workload_id: int
    namespace: str
    name: str


@dataclass(frozen=True)
class NewWorkload:
    """A workload for :meth:`Store.add_workloads`: what ``add_workload`` takes, as one record."""

    namespace: str
    name: str
    queue_name: str
    source_kind: str
    manifest: dict[str, Any]
    priority: int
    created_at: float


@dataclass(frozen=True)
class Feed:
    """What the leader reads each time the store's version moved (:meth:`Store.read_feed`).

    ``workloads`` were created, and ``deleted`` deleted, after the position read from and up to
    ``upto``; ``more`` says the read stopped at its limit (read again from ``upto`` at once).
    ``objects`` is the configuration's signature (count and newest version of the objects): it
    changes whenever an object is created, changed or deleted."""

    version: int
    upto: int
    workloads: tuple[WorkloadRecord, ...]
    deleted: tuple[Tombstone, ...]
    objects: tuple[int, int]
    more: bool
