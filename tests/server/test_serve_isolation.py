"""Through a real ``gpuq serve`` (SQLite, root, defaults): a team-a job attacks the server and team-b.

The attack that motivated job isolation: a job read the server's database and the context
file holding the admin token, then another team's logs. Here the team-a job tries each of
those, prints its uid and environment, and leaves a ``setsid`` grandchild behind; it must
find nothing, run as ``gpuq-team-a`` (created by the server), and its grandchild must be
gone by the time the job is reported finished.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuq.server.kinds import API_PREFIX
from server.conftest import CONFIG, dump
from server.test_serve import Serve, wait_for

NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="a user per team needs gpuq serve to run as root")
NEEDS_BWRAP = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
)

ATTACK = r"""
echo "UID $(id -u)"
for target in "DB=$DB" "CONTEXT=$CONTEXT" "TEAM_B_LOG=$TEAM_B_LOG" "TEAM_B_DIR=$TEAM_B_DIR"; do
    name=${target%%=*}; path=${target#*=}
    if cat "$path" 2>/dev/null || ls "$path" 2>/dev/null; then echo "READ $name"; else echo "DENIED $name"; fi
done
env | sed 's/^/ENV /'
setsid /bin/sh -c 'exec sleep $MARK' &
sleep 0.3
echo done
"""


def sh_job(name: str, namespace: str, script: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "busybox",
        "command": ["/bin/sh", "-c", script],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        "resources": {"requests": {"nvidia.com/gpu": 1}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """A ``gpuq serve`` in tmp_path (database, context file, workdir), killed if a test leaves it running."""
    server = Serve(tmp_path)
    yield server
    if server.process is not None and server.process.poll() is None:
        server.process.kill()
        server.process.wait()


def marked(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if marker in cmdline and state != "Z":
                found.append(int(entry))
    return found


@NEEDS_ROOT
@NEEDS_BWRAP
def test_a_job_cannot_read_the_servers_state_nor_another_teams_logs(serve: Serve, tmp_path: Path) -> None:
    serve.env["GPUQ_SERVER_ONLY_SECRET"] = "server-env-" + secrets.token_hex(4)
    serve.start()
    admin = serve.token()
    headers = {"Authorization": f"Bearer {admin}"}
    response = httpx.post(f"{serve.url}{API_PREFIX}/apply", content=CONFIG.encode(), headers=headers)
    assert response.status_code == 200, response.text
    tokens = {}
    for team in ("team-a", "team-b"):
        added = serve.cli("users", "add", team, "--namespaces", team, "--database", serve.database)
        assert added.returncode == 0, added.stderr
        tokens[team] = added.stdout.strip()

    secret_job = sh_job("b", "team-b", "echo TEAM-B-LOG-SECRET; echo TEAM-B-FILE > secret")
    assert (
        serve.cli(
            "apply", "-f", write(tmp_path / "b.yaml", dump(secret_job)), token=tokens["team-b"]
        ).returncode
        == 0
    )
    wait_for(lambda: serve.workload("team-b", "b")["state"] == "Succeeded", 30, "team-b's job")
    (pod_b,) = serve.workload("team-b", "b")["pods"]
    work = tmp_path / "work"
    team_b_log = work / "logs" / "team-b" / "b" / f"{pod_b['name']}.log"
    assert "TEAM-B-LOG-SECRET" in team_b_log.read_text()
    team_b_dirs = list((work / "pods" / "team-b").iterdir())
    assert len(team_b_dirs) == 1

    marker = f"4545.{secrets.randbelow(10**6):06d}"
    env = {
        "DB": str(tmp_path / "gpuq.db"),
        "CONTEXT": str(tmp_path / "context.yaml"),
        "TEAM_B_LOG": str(team_b_log),
        "TEAM_B_DIR": str(team_b_dirs[0]),
        "MARK": marker,
    }
    attack = sh_job("a", "team-a", ATTACK, env)
    assert (
        serve.cli("apply", "-f", write(tmp_path / "a.yaml", dump(attack)), token=tokens["team-a"]).returncode
        == 0
    )
    wait_for(lambda: serve.workload("team-a", "a")["state"] in ("Succeeded", "Failed"), 30, "team-a's job")
    assert marked(marker) == [], "the job's setsid'd grandchild outlived it"
    assert serve.workload("team-a", "a")["state"] == "Succeeded"

    logs = serve.cli("logs", "a", "-n", "team-a", token=tokens["team-a"])
    assert logs.returncode == 0, logs.stderr
    output = logs.stdout
    assert admin not in output and "TEAM-B" not in output
    for target in ("DB", "CONTEXT", "TEAM_B_LOG", "TEAM_B_DIR"):
        assert f"DENIED {target}" in output, output
    (uid_line,) = [line for line in output.splitlines() if line.startswith("UID ")]
    assert int(uid_line.split()[1]) == pwd.getpwnam("gpuq-team-a").pw_uid != 0
    env_seen = dict(line[4:].split("=", 1) for line in output.splitlines() if line.startswith("ENV "))
    assert serve.env["GPUQ_SERVER_ONLY_SECRET"] not in output
    assert not {"GPUQ_CONTEXT", "GPUQ_SERVER_ONLY_SECRET", "PYTHONPATH"} & set(env_seen)
    assert env_seen["HOME"] != str(Path.home()) and env_seen["HOME"].startswith(str(work / "pods" / "team-a"))
    assert {"GPUQ_WORKLOAD", "GPUQ_POD", "CUDA_VISIBLE_DEVICES"} <= set(env_seen)

    # The files behind the refusals: the server's 0600, each team's directories its own user's.
    for path, mode in (
        (tmp_path / "gpuq.db", 0o600),
        (tmp_path / "context.yaml", 0o600),
        (team_b_log, 0o600),
    ):
        info = path.stat()
        assert (stat.S_IMODE(info.st_mode), info.st_uid) == (mode, 0), path
    for team in ("team-a", "team-b"):
        info = (work / "pods" / team).stat()
        assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o700, pwd.getpwnam(f"gpuq-{team}").pw_uid)
        assert stat.S_IMODE((work / "logs" / team).stat().st_mode) == 0o700

    code, output = serve.stop()
    assert code == 0, output
    assert "pods isolated by bwrap (private filesystem view, PID namespace), users gpuq-<namespace>" in output
    assert "each pod's processes held by " in output
    assert "WARNING: pod isolation" not in output


def test_running_pods_unisolated_is_announced_loudly(serve: Serve) -> None:
    serve.start("--sandbox", "none")
    code, output = serve.stop()
    assert code == 0, output
    assert "WARNING: pod isolation: --sandbox none: pods run as the server's user" in output
    assert "the admin token" in output


def test_serve_refuses_a_pod_path_that_would_show_its_state(serve: Serve, tmp_path: Path) -> None:
    taken = serve.cli(
        "serve", "--database", serve.database, "--port", str(serve.port), "--pod-bind", str(tmp_path)
    )
    assert taken.returncode == 1
    assert "--pod-bind" in taken.stderr and "would show pods the server's state" in taken.stderr


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)
