"""Decisions a scheduling cycle returns: plain data, each with a reason a person can read."""

from __future__ import annotations

from collections.abc import Callable
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
    run_limit_s: float | None = None
    """Backfilled ahead of a reserved head: the workload must release its quota this long after the
    reservation (its declared runtime); the lifecycle evicts and requeues it there."""

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


class Pending:
    """Why ``workload`` still waits; ``reason`` is Kueue's condition reason.

    The message may be given as ``explain``, a function that writes it: a scheduling pass
    leaves a Pending for every head it could not admit, and most are never read, so the
    text is written the first time :attr:`message` is read (then kept). Equality, hashing
    and ``repr`` see the message, as a frozen dataclass's would.
    """

    __slots__ = ("_explain", "_message", "cluster_queue", "reason", "workload")

    workload: str
    reason: str
    cluster_queue: str | None
    _message: str
    _explain: Callable[[], str] | None

    def __init__(
        self,
        workload: str,
        reason: str,
        message: str = "",
        cluster_queue: str | None = None,
        *,
        explain: Callable[[], str] | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "workload", workload)
        set_(self, "reason", reason)
        set_(self, "cluster_queue", cluster_queue)
        set_(self, "_message", message)
        set_(self, "_explain", explain)

    @property
    def message(self) -> str:
        explain = self._explain
        if explain is not None:
            object.__setattr__(self, "_message", explain())
            object.__setattr__(self, "_explain", None)
        return self._message

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Pending is immutable: cannot set {name}")

    def _fields(self) -> tuple[str, str, str, str | None]:
        return (self.workload, self.reason, self.message, self.cluster_queue)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Pending):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __reduce__(self) -> tuple[type[Pending], tuple[str, str, str, str | None]]:
        return (Pending, self._fields())  # pickles and copies with its message written

    def __repr__(self) -> str:
        return (
            f"Pending(workload={self.workload!r}, reason={self.reason!r}, message={self.message!r}, "
            f"cluster_queue={self.cluster_queue!r})"
        )


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
