"""Decisions a scheduling cycle returns: plain data, each with a reason a person can read."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuq.core.model import PodSetAssignment


@dataclass(frozen=True, slots=True)
class Admit:
    """Reserve quota for ``workload`` in ``cluster_queue``.

    With ``checks_pending`` non-empty, the workload only holds quota
    (QuotaReserved) until every listed admission check is Ready.
    """

    workload: str
    cluster_queue: str
    pod_sets: tuple[PodSetAssignment, ...]
    borrowing: bool = False
    checks_pending: tuple[str, ...] = ()
    message: str = ""

    @property
    def admitted(self) -> bool:
        return not self.checks_pending


@dataclass(frozen=True, slots=True)
class Preempt:
    """Evict ``workload`` to make room for ``by``; ``reason`` is Kueue's (InClusterQueue, ...)."""

    workload: str
    cluster_queue: str
    by: str
    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class Pending:
    """Why ``workload`` still waits; ``reason`` is Kueue's condition reason."""

    workload: str
    reason: str
    message: str
    cluster_queue: str | None = None


@dataclass(frozen=True, slots=True)
class CycleResult:
    """Everything one scheduling cycle decided, in processing order."""

    admitted: tuple[Admit, ...] = ()
    preempted: tuple[Preempt, ...] = ()
    pending: tuple[Pending, ...] = ()
    considered: tuple[str, ...] = field(default=())

    @property
    def changed(self) -> bool:
        return bool(self.admitted or self.preempted)
