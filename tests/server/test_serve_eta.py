"""``gpuq serve`` end to end: a job holding both GPUs for a declared 10 minutes, and the ETA of the next."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from server.conftest import CONFIG, dump, job
from server.test_serve import Serve, servers, wait_for, write  # noqa: F401  (servers: a fixture)


def declared(name: str, gpus: int, duration: str) -> dict[str, Any]:
    document = job(name, "team-a", "import time; time.sleep(120)", gpus=gpus)
    document["metadata"]["annotations"] = {"gpuq.dev/expected-duration": duration}
    return document


def test_the_waiting_job_is_expected_when_the_running_one_ends(
    servers: Callable[[], Serve],  # noqa: F811
    tmp_path: Path,
) -> None:
    serve = servers()
    serve.start("--eta-low-quantile", "0.4", "--eta-default-runtime", "20m")
    try:
        assert serve.cli("apply", "-f", write(tmp_path / "config.yaml", CONFIG)).returncode == 0
        applied = serve.cli("submit", "-f", write(tmp_path / "long.yaml", dump(declared("long", 2, "10m"))))
        assert applied.returncode == 0, applied.stderr
        wait_for(lambda: serve.workload("team-a", "long")["state"] == "Running", 30, "the long job to run")
        started = serve.workload("team-a", "long")["startedAt"]
        assert serve.cli("submit", "-f", write(tmp_path / "next.yaml", dump(job("next")))).returncode == 0
        wait_for(lambda: serve.workload("team-a", "next")["eta"] is not None, 30, "the next job's ETA")
        eta = serve.workload("team-a", "next")["eta"]
        assert eta["startAt"] == pytest.approx(started + 600, abs=3)
        assert eta["runtime"]["source"] == "default" and eta["runtime"]["lowSeconds"] == 1200
        assert (
            "gpuq.dev/submitted-by" in serve.workload("team-a", "next")["manifest"]["metadata"]["annotations"]
        )
        listed = serve.cli("get", "workloads", "-n", "team-a")
        assert listed.returncode == 0, listed.stderr
        assert any(w in listed.stdout for w in ("in 9m", "in 10m")), listed.stdout
        probe = serve.cli(
            "submit", "--dry-run", "-f", write(tmp_path / "p.yaml", dump(declared("p", 1, "1h")))
        )
        assert probe.returncode == 0, probe.stderr
        assert probe.stdout.startswith("team-a/p would start in "), probe.stdout
    finally:
        code, output = serve.stop()
        assert code == 0, output
