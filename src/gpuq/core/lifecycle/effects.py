"""What the lifecycle asks its shell to do: frozen data, applied in the order given.

Each effect is keyed by the workload it concerns. The simulator applies them to
its model of nodes and processes, the live loop to the store and the
executors. An effect never carries a live object, only names and numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

from gpuq.core.decisions import Admit, Preempt
from gpuq.core.lifecycle.states import Timer, WorkloadState
from gpuq.core.placement.engine import PodBinding
from gpuq.core.quota import FlavorResource


@dataclass(frozen=True, slots=True)
class Reserved:
    """Quota is reserved as ``admit`` says (``state``: QuotaReserved or Admitted)."""

    key: str
    admit: Admit
    state: WorkloadState
    usage: Mapping[FlavorResource, int]
    at: float


@dataclass(frozen=True, slots=True)
class StartPods:
    """Start the workload's pods exactly on these nodes and devices (empty without nodes)."""

    key: str
    bindings: tuple[PodBinding, ...]
    at: float


@dataclass(frozen=True, slots=True)
class RestartPod:
    """Start one pod again, where it ran, after its restart backoff."""

    key: str
    pod: str
    at: float


@dataclass(frozen=True, slots=True)
class StopPods:
    """Stop the pods for an eviction: SIGTERM, then SIGKILL after ``grace_s``.

    The eviction completes (quota released, :class:`Requeued`) once the shell reports
    the pods gone, or at once where the shell's stops are instant (the simulator)."""

    key: str
    grace_s: float
    reason: str  # Kueue's short reason: Preempted, PodsReadyTimeout, NodeFailures, Evicted
    message: str
    at: float


@dataclass(frozen=True, slots=True)
class Preempted:
    """``key`` is evicted to make room for ``by`` (Kueue's reason: InClusterQueue, ...)."""

    key: str
    by: str
    reason: str
    at: float
    decision: Preempt | None = None  # the scheduler's decision, whole


@dataclass(frozen=True, slots=True)
class Requeued:
    """The eviction completed: quota released, back in its queue (not tried before ``requeue_at``)."""

    key: str
    reason: str
    message: str
    requeue_at: float | None
    at: float


@dataclass(frozen=True, slots=True)
class Released:
    """``key``'s quota and nodes are free again (``nodes``: where its pods were)."""

    key: str
    nodes: tuple[str, ...]
    at: float


@dataclass(frozen=True, slots=True)
class StateChanged:
    """A state change that no other effect implies (Running, ...), with Kueue's condition words."""

    key: str
    state: WorkloadState
    reason: str
    message: str
    at: float


@dataclass(frozen=True, slots=True)
class Ended:
    """The workload is over: stop whatever of it still runs (no grace) and release it.

    ``previous`` is the state it ended from; ``cause`` says what ended it: ``"work"`` (its pods
    completed), ``"deactivated"``, ``"withdrawn"`` (deleted), ``"pods"`` (a pod's exit or a deadline)."""

    key: str
    state: WorkloadState
    previous: WorkloadState
    cause: str
    reason: str
    message: str
    at: float


@dataclass(frozen=True, slots=True)
class WakeAt:
    """Deliver ``TimerFired(key, timer, token)`` at ``at`` (a stale token is ignored then)."""

    key: str
    timer: Timer
    at: float
    token: int
    pod: str = ""


@dataclass(frozen=True, slots=True)
class NodeUp:
    """``node`` is in service again (joined, repaired): count its capacity from ``at``."""

    node: str
    at: float


@dataclass(frozen=True, slots=True)
class NodeDown:
    """``node`` leaves service; its workloads were evicted first."""

    node: str
    at: float


@dataclass(frozen=True, slots=True)
class WaitReason:
    """Why a pending workload waits changed (Kueue's pending message)."""

    key: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Noted:
    """An event worth a record, as Kubernetes records one (``kind``: Normal or Warning)."""

    key: str
    kind: str
    reason: str
    message: str
    at: float


Effect: TypeAlias = (
    Reserved
    | StartPods
    | RestartPod
    | StopPods
    | Preempted
    | Requeued
    | Released
    | StateChanged
    | Ended
    | WakeAt
    | WaitReason
    | Noted
    | NodeUp
    | NodeDown
)
