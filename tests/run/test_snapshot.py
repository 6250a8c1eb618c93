"""Forecast snapshots of a live loop: what runs where since when, what waits, and each one's profile."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gpuq.forecast.forecast import forecast
from gpuq.run.loop import ControlLoop
from gpuq.run.snapshot import (
    History,
    ProfileBook,
    build_snapshot,
    capture,
    manifest_profile,
)
from gpuq.run.store import Store
from gpuq.snapshot.manifests import expected_duration
from gpuq.snapshot.runtimes import Profile, RuntimeEstimator, Source
from run.test_loop import job, plane, run_until, state, submit  # noqa: F401  (plane: a fixture)

SLEEP = "import time; time.sleep(60)"


def annotated(name: str, gpus: int, script: str = SLEEP, **annotations: str) -> dict[str, Any]:
    return job(name, "team-a", script, gpus=gpus, annotations=annotations)


@pytest.mark.parametrize(
    ("value", "seconds", "ignored"),
    [
        (None, None, False),
        ("30m", 1800.0, False),
        ("2h", 7200.0, False),
        ("1h30m", 5400.0, False),
        ("900", 900.0, False),
        ("12.5", 12.5, False),
        ("soon", None, True),
        ("-5m", None, True),
        ("0", None, True),
        ("nan", None, True),
    ],
)
def test_expected_duration_reads_durations_and_seconds_and_notes_the_rest(
    value: str | None, seconds: float | None, ignored: bool
) -> None:
    parsed, note = expected_duration(value)
    assert parsed == seconds
    assert bool(note) == ignored
    if ignored:
        assert "gpuq.dev/expected-duration" in note and repr(value) in note


@pytest.mark.parametrize(
    ("labels", "annotations", "spec", "user", "deadline"),
    [
        ({}, {}, {}, "", None),
        ({"gpuq.dev/user": "ann"}, {"gpuq.dev/submitted-by": "alice"}, {}, "ann", None),
        ({}, {"gpuq.dev/submitted-by": "alice"}, {"activeDeadlineSeconds": 3600}, "alice", 3600.0),
    ],
)
def test_manifest_profile_takes_the_user_the_size_and_the_deadline(
    labels: dict[str, str],
    annotations: dict[str, str],
    spec: dict[str, Any],
    user: str,
    deadline: float | None,
) -> None:
    document = job("a", "team-a", SLEEP, gpus=2, annotations=annotations, **spec)
    document["metadata"]["labels"] |= labels
    profiled = manifest_profile("team-a", "q", document)
    assert profiled.profile == Profile("team-a", "q", user, 2.0, None, deadline)
    assert profiled.note == ""


def test_an_unreadable_manifest_gives_a_bare_profile_and_says_why() -> None:
    profiled = manifest_profile("team-a", "q", {"kind": "Job", "metadata": {"name": "x"}, "spec": 5})
    assert profiled.profile == Profile("team-a", "q")
    assert profiled.note.startswith("manifest unreadable")


def test_a_snapshot_of_a_running_loop_forecasts_the_waiting_job_after_the_running_one(
    plane: tuple[Store, ControlLoop, Path],  # noqa: F811
) -> None:
    store, loop, _ = plane
    submit(
        store, annotated("long", 2, **{"gpuq.dev/expected-duration": "10m", "gpuq.dev/submitted-by": "al"})
    )
    run_until(loop, lambda: state(store, "team-a", "long") == "Running")
    submit(store, annotated("next", 1, **{"gpuq.dev/expected-duration": "whenever"}))
    run_until(loop, lambda: "team-a/next" in loop.tracked)
    now = time.time()
    view = capture(loop, now)
    assert view is not None
    by_key = {w.workload.key: w for w in view.workloads}
    assert {k: w.state for k, w in by_key.items()} == {"team-a/long": "Running", "team-a/next": "Pending"}
    long = by_key["team-a/long"]
    assert long.workload.admission is not None and long.started_at is not None
    assert sorted((b.node, b.gpus) for b in long.bindings) == [("box", (0, 1))]
    assert view.states() == {("team-a/long", "Running"), ("team-a/next", "Pending")}

    profiles = ProfileBook().profiles(store, view)
    assert {p.profile.user for p in profiles.values()} == {"al", ""}
    snapshot = build_snapshot(view, profiles)
    assert [r.profile.expected_s for r in snapshot.running] == [600.0]
    assert [p.profile.gpus for p in snapshot.pending] == [1.0]
    notes = [p.note for p in profiles.values() if p.note]
    assert len(notes) == 1 and "'whenever'" in notes[0]

    result = forecast(snapshot, RuntimeEstimator())
    waiting = result.etas["team-a/next"]
    assert waiting.runtime.source == Source.DEFAULT
    assert waiting.start_at == pytest.approx(long.started_at + 600, abs=1.0)
    assert result.etas["team-a/long"].end_at == pytest.approx(long.started_at + 600, abs=1.0)


def test_no_loop_gives_no_view() -> None:
    assert capture(None, 0.0) is None


def test_history_reads_each_finished_run_once(
    plane: tuple[Store, ControlLoop, Path],  # noqa: F811
) -> None:
    store, loop, _ = plane
    history = History(store)
    assert history.read_new() == []
    submit(store, annotated("quick", 1, "print('done')"))
    run_until(loop, lambda: state(store, "team-a", "quick") == "Succeeded")
    runs = history.read_new()
    assert len(runs) == 1
    record = store.get_workload("team-a", "quick")
    assert record is not None and record.started_at is not None and record.finished_at is not None
    assert runs[0].ran_s == pytest.approx(record.finished_at - record.started_at)
    assert runs[0].profile == Profile("team-a", "q", "", 1.0)
    store.add_event("Normal", "Noise", "Workload", "team-a", "quick", "a later write", time.time())
    assert history.read_new() == []
