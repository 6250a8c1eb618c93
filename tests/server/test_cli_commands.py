"""The client verbs in process, against the API of a :class:`Plane` (FastAPI's TestClient as transport)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuq.cli import app
from gpuq.server import client as http
from server.conftest import Plane, TestClient, dump, job

runner = CliRunner()
Gpuq = Callable[..., Any]


@pytest.fixture
def gpuq(plane: Plane, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Gpuq]:
    """``gpuq(*args, token=...)`` runs the CLI against ``plane``; the result has stdout, stderr, exit_code."""

    def factory(base_url: str, headers: dict[str, str], timeout: float) -> TestClient:
        return TestClient(plane.client.app, base_url=base_url, headers=headers)

    monkeypatch.setattr(http, "http_client", factory)
    monkeypatch.setenv("GPUQ_CONTEXT", str(tmp_path / "context.yaml"))

    def run(*args: str, token: str) -> Any:
        return runner.invoke(app, [*args, "--server", "http://testserver", "--token", token])

    yield run


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_apply_prints_each_object_and_get_lists_it(plane: Plane, gpuq: Gpuq, tmp_path: Path) -> None:
    result = gpuq("apply", "-f", write(tmp_path / "a.yaml", dump(job("a"))), token=plane.team_a)
    assert result.exit_code == 0, result.output
    assert result.stdout == "job/a created\n"
    listed = gpuq("get", "workloads", "-n", "team-a", "-o", "json", token=plane.team_a)
    assert [(w["name"], w["state"]) for w in json.loads(listed.stdout)] == [("a", "Pending")]
    table = gpuq("get", "workloads", token=plane.team_a)
    assert "team-a" in table.stdout and "Pending" in table.stdout


def test_a_refused_apply_prints_every_diagnostic_with_the_file_path(
    plane: Plane, gpuq: Gpuq, tmp_path: Path
) -> None:
    path = write(tmp_path / "bad.yaml", dump(job("neg", gpus=-1), job("lost", queue="nope")))
    before = plane.snapshot()
    result = gpuq("apply", "-f", path, token=plane.team_a)
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert any(line.startswith(f"{path}:") and "Job/neg" in line for line in lines)
    assert any(line.startswith(f"{path}:") and "LocalQueue 'nope' not found" in line for line in lines)
    assert lines[-1].startswith(f"error: {path}: error 422")
    assert plane.snapshot() == before


def test_a_forbidden_apply_is_one_line(plane: Plane, gpuq: Gpuq, tmp_path: Path) -> None:
    result = gpuq("apply", "-f", write(tmp_path / "b.yaml", dump(job("b", "team-b"))), token=plane.team_a)
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "error 403" in result.stderr and 'user "alice"' in result.stderr


def test_describe_pending_and_delete(plane: Plane, gpuq: Gpuq, tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", dump(job("a")))
    assert gpuq("apply", "-f", path, token=plane.team_a).exit_code == 0
    record = plane.store.get_workload("team-a", "a")
    assert record is not None
    plane.store.set_workload_state(record.id, "Pending", message="insufficient unused quota")
    described = gpuq("describe", "workload", "a", "-n", "team-a", token=plane.team_a)
    assert "Why it waits: insufficient unused quota" in described.stdout
    pending = gpuq("get", "pendingworkloads", "--clusterqueue", "shared", "-o", "yaml", token=plane.team_a)
    assert "positionInClusterQueue: 0" in pending.stdout
    assert "shared" in gpuq("get", "clusterqueues", token=plane.team_a).stdout
    assert "team-a" in gpuq("get", "localqueues", "-n", "team-a", token=plane.team_a).stdout
    assert "A100-80GB" in gpuq("get", "nodes", token=plane.team_a).stdout
    deleted = gpuq("delete", "-f", path, token=plane.team_a)
    assert deleted.exit_code == 0 and deleted.stdout == "workload/a deleted\n"
    assert plane.store.get_workload("team-a", "a") is None
    missing = gpuq("delete", "workload", "a", "-n", "team-a", token=plane.team_a)
    assert missing.exit_code == 1 and "error 404: workload team-a/a not found" in missing.stderr


def test_logs_print_the_pod_output(plane: Plane, gpuq: Gpuq) -> None:
    assert plane.apply(dump(job("a")), plane.team_a).status_code == 200
    directory = plane.workdir / "logs" / "team-a" / "a"
    directory.mkdir(parents=True)
    (directory / "main-0.log").write_text("one\ntwo\nthree")
    result = gpuq("logs", "a", "-n", "team-a", "--tail", "2", token=plane.team_a)
    assert result.exit_code == 0 and result.stdout == "two\nthree\n"


@pytest.mark.parametrize("chunk", ["1", "2", "0", "500"])
def test_get_workloads_reads_every_page(plane: Plane, gpuq: Gpuq, tmp_path: Path, chunk: str) -> None:
    text = dump(*(job(f"w{i}") for i in range(5)))
    assert gpuq("apply", "-f", write(tmp_path / "w.yaml", text), token=plane.team_a).exit_code == 0
    listed = gpuq("get", "workloads", "--chunk-size", chunk, "-o", "json", token=plane.team_a)
    assert listed.exit_code == 0, listed.output
    assert [w["name"] for w in json.loads(listed.stdout)] == [f"w{i}" for i in range(5)]
