"""Queued provisioning: Kueue's ProvisioningRequest admission check as a pure state machine.

``step(request, event, now) -> (request, actions)`` never changes its input. States and edges
(:data:`TRANSITIONS`) follow Kueue's provisioning controller and GKE's Dynamic Workload Scheduler:

* ``Pending`` (the ProvisioningRequest is Accepted, capacity not yet there). All or nothing: a
  :class:`Capacity` event with fewer nodes than requested changes nothing but the message.
* ``Provisioned``: every node is there (Kueue sets the check Ready and admits the workload).
* ``Failed`` / ``BookingExpired`` before admission: retried while ``attempt <= backoffLimitCount``,
  after ``min(backoffBaseSeconds * 2**(attempt-1), backoffMaxSeconds)`` (60, 120, 240, ... 1800
  with Kueue's defaults 60 / 1800 / 3): ``Retry`` until the wait is over, then a new attempt;
  past the limit ``Rejected``.
* ``Admitted`` (running on the nodes) until ``Finished``. ``CapacityRevoked`` rejects the check
  and evicts the workload (Kueue deactivates it).
* Flex-start (``mode="flex-start"``): best-effort start whenever capacity comes; nodes live at most
  ``maxRunDuration`` (7 days at most) from provisioning, then are reclaimed (evict, release).
* Calendar (``mode="calendar"``): a reservation for ``[window_start, window_end)`` (1 to 90 days).
  Nothing happens before the start; at the start the nodes are provisioned; a workload is
  admitted only if its expected runtime ends by the window's end; at the end everything is
  reclaimed.

Every result records ``(state, at, reason)`` in ``history``; an event a state does not accept
raises :class:`IllegalTransition`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

Mode = Literal["queued", "flex-start", "calendar"]
MAX_FLEX_RUN_S = 7 * 24 * 3600
"""GKE DWS flex-start: VMs run for at most seven days."""
CALENDAR_MIN_S = 24 * 3600
CALENDAR_MAX_S = 90 * 24 * 3600
"""Calendar-mode reservations last 1 to 90 days."""


class State(Enum):
    PENDING = "Pending"
    RETRY = "Retry"
    PROVISIONED = "Provisioned"
    ADMITTED = "Admitted"
    REJECTED = "Rejected"
    RECLAIMED = "Reclaimed"
    FINISHED = "Finished"


TERMINAL = frozenset({State.REJECTED, State.RECLAIMED, State.FINISHED})


@dataclass(frozen=True, slots=True)
class RetryStrategy:
    """Kueue's ``ProvisioningRequestConfig.spec.retryStrategy`` (with its defaults)."""

    backoff_limit_count: int = 3
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 1800

    def wait_s(self, attempt: int) -> int:
        """Seconds before retrying after failed attempt ``attempt`` (1-based)."""
        wait: int = self.backoff_base_seconds * 2 ** max(attempt - 1, 0)
        return min(wait, self.backoff_max_seconds)


class InvalidRequest(ValueError):
    """A request that breaks a mode's limits (flex-start duration, calendar window)."""


class IllegalTransition(RuntimeError):
    """An event the request's state does not accept."""


@dataclass(frozen=True, slots=True)
class Request:
    """One workload's provisioning request. Times in seconds (simulated or epoch)."""

    name: str
    workload: str
    nodes: int
    mode: Mode = "queued"
    retry: RetryStrategy = field(default_factory=RetryStrategy)
    state: State = State.PENDING
    attempt: int = 1
    created_at: float = 0.0
    retry_at: float | None = None
    provisioned_at: float | None = None
    max_run_s: float | None = None
    window_start: float | None = None
    window_end: float | None = None
    message: str = ""
    history: tuple[tuple[State, float, str], ...] = ()

    @property
    def reclaim_at(self) -> float | None:
        """When the nodes go away: flex-start ``provisioned + maxRunDuration``, calendar the window end."""
        if self.mode == "calendar":
            return self.window_end
        if self.mode == "flex-start" and self.provisioned_at is not None and self.max_run_s is not None:
            return self.provisioned_at + self.max_run_s
        return None


def new_request(
    name: str,
    workload: str,
    nodes: int,
    now: float,
    mode: Mode = "queued",
    retry: RetryStrategy | None = None,
    max_run_s: float | None = None,
    window: tuple[float, float] | None = None,
) -> Request:
    """A new Pending request, checked against its mode's limits (raises :class:`InvalidRequest`)."""
    if nodes < 1:
        raise InvalidRequest(f"{name}: nodes must be at least 1 (got {nodes})")
    if mode == "flex-start":
        max_run_s = MAX_FLEX_RUN_S if max_run_s is None else max_run_s
        if not 0 < max_run_s <= MAX_FLEX_RUN_S:
            raise InvalidRequest(
                f"{name}: flex-start maxRunDuration must be in (0, 7 days] (got {max_run_s:.0f}s)"
            )
    elif max_run_s is not None:
        raise InvalidRequest(f"{name}: maxRunDuration applies to flex-start requests only")
    if (mode == "calendar") != (window is not None):
        raise InvalidRequest(f"{name}: a calendar request needs a window, and only it takes one")
    if window is not None and not CALENDAR_MIN_S <= window[1] - window[0] <= CALENDAR_MAX_S:
        raise InvalidRequest(
            f"{name}: a calendar window lasts 1 to 90 days (got {(window[1] - window[0]) / 86400:g})"
        )
    start, end = window if window is not None else (None, None)
    message = (
        "waiting for the calendar window" if mode == "calendar" else "waiting for capacity (all or nothing)"
    )
    return Request(
        name, workload, nodes, mode, retry or RetryStrategy(), State.PENDING, 1, now, None, None,
        max_run_s, start, end, message, ((State.PENDING, now, message),),
    )  # fmt: skip


# --- events and actions -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Capacity:
    """The cloud can give ``nodes`` nodes now (all-or-nothing: provisioned only when enough)."""

    nodes: int


@dataclass(frozen=True, slots=True)
class Failed:
    message: str = "provisioning failed"


@dataclass(frozen=True, slots=True)
class BookingExpired:
    message: str = "the capacity was not used in time"


@dataclass(frozen=True, slots=True)
class CapacityRevoked:
    message: str = "the capacity was revoked"


@dataclass(frozen=True, slots=True)
class WorkloadAdmitted:
    """The workload starts on the nodes; ``expected_runtime_s`` lets calendar mode check the window."""

    expected_runtime_s: float | None = None


@dataclass(frozen=True, slots=True)
class Finish:
    pass


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: retries fall due, calendar windows open and close, flex-start nodes expire."""


Event = Capacity | Failed | BookingExpired | CapacityRevoked | WorkloadAdmitted | Finish | Tick


@dataclass(frozen=True, slots=True)
class Action:
    """What the shell does: ``kind`` is one of create-request, provision-nodes, check-ready,
    check-retry, check-rejected, evict-workload, release-nodes; ``at`` a time when one matters."""

    kind: str
    request: str
    nodes: int = 0
    at: float | None = None
    reason: str = ""


TRANSITIONS: dict[State, frozenset[State]] = {
    State.PENDING: frozenset({State.PENDING, State.PROVISIONED, State.RETRY, State.REJECTED}),
    State.RETRY: frozenset({State.RETRY, State.PENDING}),
    State.PROVISIONED: frozenset(
        {State.PROVISIONED, State.ADMITTED, State.RETRY, State.REJECTED, State.RECLAIMED}
    ),
    State.ADMITTED: frozenset({State.ADMITTED, State.FINISHED, State.REJECTED, State.RECLAIMED}),
}
"""Allowed edges; terminal states have none."""


def _move(request: Request, state: State, now: float, reason: str, **changes: object) -> Request:
    if state not in TRANSITIONS.get(request.state, frozenset()):
        raise IllegalTransition(f"{request.name}: {request.state.value} -> {state.value} is not allowed")
    history = (
        request.history
        if state == request.state and reason == request.message
        else (*request.history, (state, now, reason))
    )
    return dataclasses.replace(request, state=state, message=reason, history=history, **changes)  # type: ignore[arg-type]


def step(request: Request, event: Event, now: float) -> tuple[Request, tuple[Action, ...]]:
    """Apply ``event`` at ``now``; returns the new request and the actions for the shell."""
    if request.state in TERMINAL:
        raise IllegalTransition(f"{request.name}: {request.state.value} is final ({type(event).__name__})")
    if isinstance(event, Tick):
        return _tick(request, now)
    if isinstance(event, Capacity):
        return _capacity(request, event, now)
    if isinstance(event, Failed | BookingExpired):
        return _failed(request, event.message, now)
    if isinstance(event, CapacityRevoked):
        if request.state not in (State.PROVISIONED, State.ADMITTED):
            raise IllegalTransition(f"{request.name}: capacity revoked while {request.state.value}")
        done = _move(request, State.REJECTED, now, event.message)
        return done, (Action("check-rejected", request.name, reason=event.message),
                      Action("evict-workload", request.name, reason=event.message))  # fmt: skip
    if isinstance(event, WorkloadAdmitted):
        return _admit(request, event, now)
    if request.state != State.ADMITTED:
        raise IllegalTransition(f"{request.name}: Finish while {request.state.value}")
    done = _move(request, State.FINISHED, now, "the workload finished")
    return done, (Action("release-nodes", request.name, request.nodes, reason="the workload finished"),)


def _capacity(request: Request, event: Capacity, now: float) -> tuple[Request, tuple[Action, ...]]:
    if request.state != State.PENDING:
        return request, ()
    if request.mode == "calendar" and (request.window_start or 0.0) > now:
        return request, ()
    if event.nodes < request.nodes:
        reason = f"{event.nodes} of {request.nodes} nodes available: all or nothing, still waiting"
        return _move(request, State.PENDING, now, reason), ()
    reason = f"all {request.nodes} nodes provisioned (attempt {request.attempt})"
    done = _move(request, State.PROVISIONED, now, reason, provisioned_at=now)
    return done, (
        Action("provision-nodes", request.name, request.nodes, done.reclaim_at, reason),
        Action("check-ready", request.name, reason=reason),
    )


def _failed(request: Request, message: str, now: float) -> tuple[Request, tuple[Action, ...]]:
    if request.state not in (State.PENDING, State.PROVISIONED):
        raise IllegalTransition(f"{request.name}: failure while {request.state.value}")
    if request.attempt > request.retry.backoff_limit_count:
        limit = request.retry.backoff_limit_count
        reason = f"{message}; attempt {request.attempt} exceeds backoffLimitCount {limit}"
        return _move(request, State.REJECTED, now, reason), (
            Action("check-rejected", request.name, reason=reason),
        )
    wait = request.retry.wait_s(request.attempt)
    reason = f"Retrying after failure: {message} (attempt {request.attempt}, next in {wait}s)"
    done = _move(request, State.RETRY, now, reason, retry_at=now + wait, provisioned_at=None)
    actions = [Action("check-retry", request.name, at=now + wait, reason=reason)]
    if request.state == State.PROVISIONED:
        actions.insert(0, Action("release-nodes", request.name, request.nodes, reason=message))
    return done, tuple(actions)


def _admit(request: Request, event: WorkloadAdmitted, now: float) -> tuple[Request, tuple[Action, ...]]:
    if request.state != State.PROVISIONED:
        raise IllegalTransition(f"{request.name}: WorkloadAdmitted while {request.state.value}")
    end = request.reclaim_at
    runtime = event.expected_runtime_s
    if request.mode == "calendar" and end is not None and runtime is not None and now + runtime > end:
        reason = f"the workload would end at {now + runtime:.0f}, after the window closes at {end:.0f}"
        return _move(request, State.PROVISIONED, now, reason), (
            Action("check-rejected", request.name, reason=reason),
        )
    reason = "admitted" + (f"; nodes reclaimed at {end:.0f}" if end is not None else "")
    return _move(request, State.ADMITTED, now, reason), ()


def _tick(request: Request, now: float) -> tuple[Request, tuple[Action, ...]]:
    end = request.reclaim_at
    if request.state == State.RETRY and request.retry_at is not None and now >= request.retry_at:
        reason = f"attempt {request.attempt + 1}: new ProvisioningRequest"
        done = _move(request, State.PENDING, now, reason, attempt=request.attempt + 1, retry_at=None)
        return done, (Action("create-request", request.name, request.nodes, reason=reason),)
    if request.state in (State.PROVISIONED, State.ADMITTED) and end is not None and now >= end:
        what = (
            "flex-start maxRunDuration reached" if request.mode == "flex-start" else "calendar window closed"
        )
        actions = [Action("release-nodes", request.name, request.nodes, reason=what)]
        if request.state == State.ADMITTED:
            actions.insert(0, Action("evict-workload", request.name, reason=what))
        return _move(request, State.RECLAIMED, now, what), tuple(actions)
    if request.mode == "calendar" and request.state == State.PENDING and (request.window_start or 0.0) <= now:
        return _capacity(request, Capacity(request.nodes), now)
    return request, ()
