"""``gpuq serve --finished-ttl``: a finished job, its logs and its pod's directory are gone after the TTL."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from gpuq.server.kinds import API_PREFIX
from server.conftest import CONFIG, dump, job
from server.test_serve import Serve, servers, wait_for

__all__ = ["servers"]  # the fixture, imported for pytest


def test_a_finished_job_is_deleted_with_its_logs_after_the_ttl(
    servers: Callable[[], Serve], tmp_path: Path
) -> None:
    serve = servers()
    serve.start("--finished-ttl", "2s")
    headers = {"Authorization": f"Bearer {serve.token()}"}
    for text in (CONFIG, dump(job("brief", "team-a", "print('done')"))):
        response = httpx.post(f"{serve.url}{API_PREFIX}/apply", content=text.encode(), headers=headers)
        assert response.status_code == 200, response.text
    wait_for(lambda: serve.workload("team-a", "brief")["state"] == "Succeeded", 30, "the job to succeed")
    logs = serve.root / "work" / "logs" / "team-a" / "brief"
    pods = serve.root / "work" / "pods" / "team-a"
    assert logs.is_dir() and list(pods.glob("brief_*"))
    url = f"{serve.url}{API_PREFIX}/namespaces/team-a/workloads/brief"
    wait_for(lambda: httpx.get(url, headers=headers).status_code == 404, 30, "the TTL to delete the workload")
    assert not logs.exists() and not list(pods.glob("brief_*"))
    events = httpx.get(f"{serve.url}{API_PREFIX}/events", params={"name": "brief"}, headers=headers).json()
    assert events["items"] == []
    assert serve.stop()[0] == 0


def test_a_bad_ttl_is_refused_at_start(servers: Callable[[], Serve]) -> None:
    serve = servers()
    result = serve.cli("serve", "--database", serve.database, "--finished-ttl", "soon")
    assert result.returncode == 1 and "--finished-ttl 'soon'" in result.stderr
