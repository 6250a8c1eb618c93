"""``gpuq admit --eta``: what-if forecasts on a snapshot file."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuq.cli import app

DATA = Path(__file__).parent / "data"
SNAPSHOT = str(DATA / "snapshot.yaml")
JOB = str(DATA / "job.yaml")
NOW = datetime(2026, 11, 30, 11, 0, tzinfo=UTC).timestamp()
runner = CliRunner()


def forecast(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["admit", "--eta", "-o", "json", "--now", str(NOW), *args])
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)["forecast"]
    return document


def test_a_new_job_starts_when_the_declared_run_ahead_of_it_ends() -> None:
    """The running workload's pods were ready at 10:05 and it declares 2 h: it ends at 12:05."""
    etas = forecast("-f", SNAPSHOT, "-f", JOB)["workloads"]
    running, mine = etas["team-a/running"], etas["team-a/job-mine-93c02"]
    assert (running["state"], running["endAt"]) == ("Running", NOW + 3900)
    assert mine["state"] == "Pending"
    assert (mine["startAt"], mine["startRange"], mine["endAt"]) == (NOW + 3900, [NOW + 3900] * 2, NOW + 5700)
    assert mine["runtime"]["source"] == "annotation (1800s declared)"


def test_runtimes_learned_from_a_history_file(tmp_path: Path) -> None:
    history = tmp_path / "history.csv"
    rows = [f"h{i},team-a,q,0,{d},,1,4,,," for i, d in enumerate((600, 1200, 1800, 2400, 3000))]
    history.write_text("name,namespace,queue,submit_s,duration_s,priority,pods,gpus,cpu,memory,gpu_model\n")
    history.write_text(history.read_text() + "\n".join(rows) + "\n")
    job = tmp_path / "job.yaml"
    job.write_text(Path(JOB).read_text().replace("  annotations: {gpuq.dev/expected-duration: 30m}\n", ""))
    mine = forecast("-f", SNAPSHOT, "-f", str(job), "--history", str(history))["workloads"][
        "team-a/job-mine-93c02"
    ]
    # The default quantiles, p60 and p95, of 600..3000 s.
    assert mine["runtime"]["lowS"] == pytest.approx(2040) and mine["runtime"]["highS"] == pytest.approx(2880)
    assert mine["runtime"]["source"].startswith("history (queue+size, 5 runs")
    assert mine["endRange"] == pytest.approx([NOW + 3900 + 2040, NOW + 3900 + 2880])


@pytest.mark.parametrize(
    ("annotation", "warning"),
    [("soon", "not a duration"), ("-5m", "not a duration"), ("0s", "must be a positive duration")],
)
def test_an_unreadable_expected_duration_is_ignored_with_a_warning(
    tmp_path: Path, annotation: str, warning: str
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        Path(JOB).read_text().replace("expected-duration: 30m", f"expected-duration: '{annotation}'")
    )
    mine = forecast("-f", SNAPSHOT, "-f", str(job))["workloads"]["team-a/job-mine-93c02"]
    assert mine["runtime"]["source"] == "default (3600s, no history)"
    assert (
        warning in mine["warning"] and f"ignored gpuq.dev/expected-duration='{annotation}'" in mine["warning"]
    )


def test_the_table_shows_when_each_workload_starts() -> None:
    result = runner.invoke(app, ["admit", "--eta", "--now", str(NOW), "-f", SNAPSHOT, "-f", JOB])
    assert result.exit_code == 0, result.output
    assert "Forecast" in result.stdout
    line = next(row for row in result.stdout.splitlines() if "job-mine" in row and "Pending" in row)
    assert "in 1h05m" in line and "in 1h35m" in line and "30m from annotation" in line


@pytest.mark.parametrize(
    ("history", "message"),
    [("missing.csv", "no such file"), ("bad.csv", "bad row(s); first at line 2")],
)
def test_a_bad_history_file_is_refused_by_name(tmp_path: Path, history: str, message: str) -> None:
    (tmp_path / "bad.csv").write_text(
        "name,namespace,queue,submit_s,duration_s,pods,gpus\nx,team-a,q,0,-5,1,1\n"
    )
    path = str(tmp_path / history)
    result = runner.invoke(app, ["admit", "--eta", "-f", SNAPSHOT, "--history", path])
    assert result.exit_code == 2
    assert f"--history {path}" in result.output and message in result.output


def test_expected_arrivals_replay_the_recent_past(tmp_path: Path) -> None:
    """A high-priority 8-GPU job submitted 30 minutes ago (now running) is expected again in 30
    minutes; submitted while it runs, it would delay the new job until both runs end."""
    snapshot = tmp_path / "snapshot.yaml"
    text = (
        Path(SNAPSHOT)
        .read_text()
        .replace('creationTimestamp: "2026-11-30T10:00:00Z"', 'creationTimestamp: "2026-11-30T10:30:00Z"')
    )
    snapshot.write_text(text)
    quiet = forecast("-f", str(snapshot), "-f", JOB)["workloads"]["team-a/job-mine-93c02"]
    busy = forecast("-f", str(snapshot), "-f", JOB, "--expected-arrivals", "1h")
    # The replayed copy arrives at +30m, after the pending job: FIFO keeps the job first.
    assert quiet["startAt"] == busy["workloads"]["team-a/job-mine-93c02"]["startAt"] == NOW + 3900
    assert not any(key.startswith("team-a/expected-arrival") for key in busy["workloads"])


@pytest.mark.parametrize("window", ["soon", "0s"])
def test_a_bad_expected_arrivals_window_is_refused(window: str) -> None:
    result = runner.invoke(app, ["admit", "--eta", "-f", SNAPSHOT, "--expected-arrivals", window])
    assert result.exit_code == 2 and "--expected-arrivals" in result.output
