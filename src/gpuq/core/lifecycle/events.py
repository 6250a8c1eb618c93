"""What happens to workloads, as the lifecycle hears of it: frozen data with a time.

The simulator makes these from its event heap, the live loop from the store
and its executors' exits. :meth:`~gpuq.core.lifecycle.machine.Lifecycle.handle`
takes any of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from gpuq.core.lifecycle.states import Timer
from gpuq.core.model import CheckState, Workload


@dataclass(frozen=True, slots=True)
class JobPolicy:
    """How a workload's pods end it (a Job's ``backoffLimit``, ``activeDeadlineSeconds``, ...).

    ``completion_pod_set``: the pod set whose pods decide the outcome (a RayJob's submitter),
    or None when every pod must succeed. ``grace_s`` per pod set name (default 30 s).
    ``pods``: pod name -> pod set name, for the live loop that tracks pods one by one.
    ``retries``: how many times a failed completion pod set re-runs the whole workload (every pod
    stopped, the workload requeued, all pods started afresh) before it fails: a RayJob's
    ``spec.backoffLimit``, each retry a new Ray cluster."""

    backoff_limit: int = 6
    retries: int = 0
    active_deadline_s: float | None = None
    completion_pod_set: str | None = None
    grace_s: Mapping[str, float] = field(default_factory=dict)
    pods: Mapping[str, str] = field(default_factory=dict)

    def grace_for(self, pod_set: str) -> float:
        return self.grace_s.get(pod_set, 30.0)

    @property
    def max_grace_s(self) -> float:
        return max(self.grace_s.values(), default=30.0)


@dataclass(frozen=True, slots=True)
class Submitted:
    workload: Workload
    at: float
    policy: JobPolicy = field(default_factory=JobPolicy)


@dataclass(frozen=True, slots=True)
class PodsRunning:
    """Every pod of ``key`` started (the simulator: start-up delay elapsed; live: processes up)."""

    key: str
    at: float


@dataclass(frozen=True, slots=True)
class PodExited:
    key: str
    pod: str
    exit_code: int
    at: float


@dataclass(frozen=True, slots=True)
class PodStartFailed:
    """The executor could not start ``pod`` (bad command, ...): it counts as a failed pod."""

    key: str
    pod: str
    message: str
    at: float


@dataclass(frozen=True, slots=True)
class WorkDone:
    """The workload's work completed (the simulator's model of all pods exiting at once)."""

    key: str
    failed: bool
    at: float


@dataclass(frozen=True, slots=True)
class PodsStopped:
    """Every pod of an evicting workload is gone."""

    key: str
    at: float


@dataclass(frozen=True, slots=True)
class ChecksChanged:
    """Admission checks of a workload that holds quota changed state (a ProvisioningRequest answered)."""

    key: str
    states: Mapping[str, CheckState]
    at: float


@dataclass(frozen=True, slots=True)
class TimerFired:
    key: str
    timer: Timer
    token: int
    at: float
    pod: str = ""


@dataclass(frozen=True, slots=True)
class EvictionRequested:
    """Someone other than the scheduler evicts ``key`` (a check went Retry, a run-time cap, spot).

    ``requeue_at``: it waits in its queue until then; ``deactivate``: it leaves for good."""

    key: str
    reason: str
    at: float
    requeue_at: float | None = None
    deactivate: bool = False


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """The workload was deleted (a replica scaled away, ``gpuq delete``)."""

    key: str
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class NodeLost:
    """A node left (removed, failed, reclaimed): every workload with a pod on it is evicted."""

    node: str
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class NodesAdded:
    """Nodes joined or came back: waiting pods may bind, topology-blocked heads retry."""

    nodes: tuple[str, ...]
    at: float


Event: TypeAlias = (
    Submitted
    | PodsRunning
    | PodExited
    | PodStartFailed
    | WorkDone
    | PodsStopped
    | ChecksChanged
    | TimerFired
    | EvictionRequested
    | Withdrawn
    | NodeLost
    | NodesAdded
)
