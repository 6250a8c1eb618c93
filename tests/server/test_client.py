"""The client side without a server: context file, address resolution, clear failures, table rows."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuq.cli import app
from gpuq.server import tables
from gpuq.server.context import client_address, read_context, resolve, write_context

runner = CliRunner()


def test_the_context_file_is_private_and_keeps_its_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ctx" / "context.yaml"
    monkeypatch.setenv("GPUQ_CONTEXT", str(path))
    write_context("http://127.0.0.1:1", "secret")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    write_context("http://127.0.0.1:2", None)  # a restart without a new token keeps the old one
    assert read_context() == {"server": "http://127.0.0.1:2", "token": "secret"}


def test_options_beat_the_environment_which_beats_the_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUQ_CONTEXT", str(tmp_path / "context.yaml"))
    monkeypatch.delenv("GPUQ_SERVER", raising=False)
    monkeypatch.delenv("GPUQ_TOKEN", raising=False)
    write_context("http://from-file:1", "file-token")
    assert resolve(None, None) == ("http://from-file:1", "file-token")
    monkeypatch.setenv("GPUQ_SERVER", "http://from-env:2/")
    monkeypatch.setenv("GPUQ_TOKEN", "env-token")
    assert resolve(None, None) == ("http://from-env:2", "env-token")
    assert resolve("http://option:3", "option-token") == ("http://option:3", "option-token")


def test_wildcard_addresses_are_reached_through_loopback() -> None:
    assert client_address("0.0.0.0", 8470) == "http://127.0.0.1:8470"
    assert client_address("::", 8470) == "http://[::1]:8470"
    assert client_address("10.0.0.5", 9) == "http://10.0.0.5:9"


@pytest.mark.parametrize(
    "args",
    [["get", "workloads"], ["get", "nodes"], ["logs", "a", "-n", "x"], ["delete", "workload", "a"]],
    ids=["get workloads", "get nodes", "logs", "delete"],
)
def test_an_unreachable_server_is_one_clear_line_and_exit_1(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUQ_CONTEXT", str(tmp_path / "none.yaml"))
    result = runner.invoke(app, [*args, "--server", "http://127.0.0.1:9", "--token", "t"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the gpuq server at http://127.0.0.1:9" in lines[0]


def test_delete_needs_a_kind_and_name_or_files() -> None:
    result = runner.invoke(app, ["delete", "workload"])
    assert result.exit_code == 1 and "give KIND NAME or -f FILE" in result.stderr
    result = runner.invoke(app, ["delete", "gizmo", "x"])
    assert result.exit_code == 1 and "unknown kind 'gizmo'" in result.stderr


def test_table_rows_carry_the_why_and_the_devices() -> None:
    now = time.time()
    workload = {
        "namespace": "team-a",
        "name": "a",
        "kind": "Job",
        "queue": "q",
        "clusterQueue": None,
        "priority": 5,
        "state": "Pending",
        "createdAt": now - 125,
        "message": "insufficient quota",
    }
    assert tables.workload_rows([workload]) == [
        ("team-a", "a", "Job", "q", "-", "5", "Pending", "2m", "-", "insufficient quota")
    ]
    node = {"name": "box", "gpuModel": "A100-80GB", "gpus": 2, "devicesInUse": ["0"], "runningPods": 1}
    assert tables.node_rows([node]) == [("box", "A100-80GB", "1/2", "0", "1")]
    summary = dict(
        tables.workload_summary(
            {
                **workload,
                **dict.fromkeys(("admittedAt", "startedAt", "finishedAt")),
                "admission": None,
                "requeueCount": 0,
            }
        )
    )
    assert summary["Why it waits"] == "insufficient quota"
