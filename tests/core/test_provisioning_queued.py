"""ProvisioningRequest lifecycle: all-or-nothing, Kueue backoff, flex-start cap, calendar window."""

from __future__ import annotations

import pytest

from gpuq.core.provisioning.queued import (
    MAX_FLEX_RUN_S,
    Capacity,
    CapacityRevoked,
    Failed,
    Finish,
    IllegalTransition,
    InvalidRequest,
    RetryStrategy,
    State,
    Tick,
    WorkloadAdmitted,
    new_request,
    step,
)

DAY = 86400.0


def test_all_or_nothing_waits_for_every_node() -> None:
    request = new_request("pr", "train", 4, now=0.0)
    waiting, actions = step(request, Capacity(3), 10.0)
    assert (waiting.state, actions) == (State.PENDING, ())
    assert "3 of 4 nodes" in waiting.message
    done, actions = step(waiting, Capacity(4), 20.0)
    assert done.state == State.PROVISIONED
    assert [a.kind for a in actions] == ["provision-nodes", "check-ready"]
    assert request.state == State.PENDING  # the input is unchanged


def test_backoff_is_60_120_240_and_capped_at_1800() -> None:
    assert [RetryStrategy().wait_s(n) for n in (1, 2, 3)] == [60, 120, 240]
    assert [RetryStrategy(10, 60, 1800).wait_s(n) for n in (5, 6, 7)] == [960, 1800, 1800]


def test_failures_retry_then_reject_after_the_backoff_limit() -> None:
    request, now, waits = new_request("pr", "train", 2, now=0.0), 0.0, []
    for _ in range(3):
        request, actions = step(request, Failed("stockout"), now)
        assert request.state == State.RETRY and actions[-1].kind == "check-retry"
        assert request.retry_at is not None
        waits.append(request.retry_at - now)
        request, actions = step(request, Tick(), request.retry_at - 1)
        assert request.state == State.RETRY and actions == ()
        now = request.retry_at or 0.0
        request, actions = step(request, Tick(), now)
        assert request.state == State.PENDING and actions[0].kind == "create-request"
    assert waits == [60, 120, 240]
    request, actions = step(request, Failed("stockout"), now)
    assert request.state == State.REJECTED and actions[0].kind == "check-rejected"
    assert "backoffLimitCount 3" in request.message


FLEX = [
    ("the default run limit is 7 days", None, MAX_FLEX_RUN_S),
    ("a shorter limit is kept", 3 * DAY, 3 * DAY),
]


@pytest.mark.parametrize(("name", "given", "expected"), FLEX, ids=[c[0] for c in FLEX])
def test_flex_start_nodes_are_reclaimed_at_max_run_duration(
    name: str, given: float | None, expected: float
) -> None:
    request = new_request("pr", "train", 2, now=0.0, mode="flex-start", max_run_s=given)
    request, _ = step(request, Capacity(2), 100.0)
    request, _ = step(request, WorkloadAdmitted(), 100.0)
    still, actions = step(request, Tick(), 100.0 + expected - 1)
    assert (still.state, actions) == (State.ADMITTED, ())
    gone, actions = step(request, Tick(), 100.0 + expected)
    assert gone.state == State.RECLAIMED
    assert [a.kind for a in actions] == ["evict-workload", "release-nodes"]


BAD = [
    ("flex-start longer than 7 days", dict(mode="flex-start", max_run_s=8 * DAY)),
    ("maxRunDuration on a queued request", dict(max_run_s=DAY)),
    ("calendar without a window", dict(mode="calendar")),
    ("a calendar window shorter than a day", dict(mode="calendar", window=(0.0, 3600.0))),
    ("a calendar window longer than 90 days", dict(mode="calendar", window=(0.0, 91 * DAY))),
]


@pytest.mark.parametrize(("name", "kwargs"), BAD, ids=[c[0] for c in BAD])
def test_invalid_requests(name: str, kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest):
        new_request("pr", "train", 2, now=0.0, **kwargs)  # type: ignore[arg-type]


def test_calendar_provisions_at_the_window_start_and_reclaims_at_its_end() -> None:
    request = new_request("pr", "train", 2, now=0.0, mode="calendar", window=(DAY, 3 * DAY))
    early, actions = step(request, Tick(), DAY - 1)
    assert (early.state, actions) == (State.PENDING, ())
    started, actions = step(request, Tick(), DAY)
    assert started.state == State.PROVISIONED and actions[0].at == 3 * DAY
    too_long, actions = step(started, WorkloadAdmitted(expected_runtime_s=2 * DAY + 1), DAY)
    assert too_long.state == State.PROVISIONED and actions[0].kind == "check-rejected"
    running, _ = step(started, WorkloadAdmitted(expected_runtime_s=DAY), DAY)
    assert running.state == State.ADMITTED
    closed, actions = step(running, Tick(), 3 * DAY)
    assert closed.state == State.RECLAIMED and [a.kind for a in actions] == [
        "evict-workload",
        "release-nodes",
    ]


def test_capacity_revoked_rejects_and_evicts() -> None:
    request = new_request("pr", "train", 1, now=0.0)
    request, _ = step(request, Capacity(1), 1.0)
    request, _ = step(request, WorkloadAdmitted(), 1.0)
    done, actions = step(request, CapacityRevoked(), 2.0)
    assert done.state == State.REJECTED and [a.kind for a in actions] == ["check-rejected", "evict-workload"]


def test_illegal_events_raise_and_history_records_every_state() -> None:
    request = new_request("pr", "train", 1, now=0.0)
    with pytest.raises(IllegalTransition):
        step(request, Finish(), 1.0)
    with pytest.raises(IllegalTransition):
        step(request, WorkloadAdmitted(), 1.0)
    request, _ = step(request, Capacity(1), 1.0)
    request, _ = step(request, WorkloadAdmitted(), 2.0)
    request, _ = step(request, Finish(), 3.0)
    assert [s for s, _, _ in request.history] == [
        State.PENDING,
        State.PROVISIONED,
        State.ADMITTED,
        State.FINISHED,
    ]
    with pytest.raises(IllegalTransition):
        step(request, Tick(), 4.0)
