"""``kill -9`` of a real ``gpuq serve`` on PostgreSQL, three times, while 20 short jobs run.

Each job marks its start (with its attempt and pid) and its end in a file of its own in the shared
directory (``--pod-bind``), so a job that ran twice shows. Before pods were taken back at recovery,
every job running at a kill was killed and rerun, and every one that ended while no server ran was
run again (docs/serve.md, "Recovery"); now every job starts once and completes once.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx

from gpuq.server.kinds import API_PREFIX
from server.conftest import CONFIG, dump, job
from server.test_serve import Serve, wait_for

JOBS = int(os.environ.get("GPUQ_RECOVERY_JOBS", "20"))  # larger runs measure the difference
KILLS = int(os.environ.get("GPUQ_RECOVERY_KILLS", "3"))


def short_job(marks: Path, seconds: float) -> str:
    return (
        "import os, time; "
        f"open({str(marks)!r}, 'a').write(f\"start {{os.environ['GPUQ_ATTEMPT']}} {{os.getpid()}}\\n\"); "
        f"time.sleep({seconds}); open({str(marks)!r}, 'a').write('done\\n')"
    )


def runs(shared: Path) -> dict[str, list[str]]:
    """Each job's marks: its lines, in order."""
    return {
        f"job-{i:02d}": (shared / f"job-{i:02d}.marks").read_text().splitlines()
        if (shared / f"job-{i:02d}.marks").exists()
        else []
        for i in range(JOBS)
    }


def test_jobs_run_exactly_once_through_three_kill_9s_of_the_server(postgres_url: str, tmp_path: Path) -> None:
    serve = Serve(tmp_path)
    serve.database = postgres_url
    try:
        serve.start()
        headers = {"Authorization": f"Bearer {serve.token()}"}
        documents = [
            dump(
                job(
                    f"job-{i:02d}",
                    "team-a",
                    short_job(serve.shared / f"job-{i:02d}.marks", 0.4 + (i % 5) * 0.3),
                )
            )
            for i in range(JOBS)
        ]
        for text in (CONFIG, *documents):
            response = httpx.post(f"{serve.url}{API_PREFIX}/apply", content=text.encode(), headers=headers)
            assert response.status_code == 200, response.text
        for kill in range(KILLS):
            # Kill while pods run (some about to end); stay down long enough, some kills, for some to end
            # meanwhile, and not at others, so that they are taken back running.
            wanted = (kill + 1) * JOBS // (KILLS + 2)
            wait_for(
                lambda wanted=wanted: sum(bool(lines) for lines in runs(serve.shared).values()) >= wanted,  # type: ignore[misc]
                60,
                f"{wanted} jobs to start before kill {kill + 1}",
            )
            serve.stop(signal.SIGKILL)
            time.sleep(0.5 + (kill % 3) * 0.75)
            serve.start()

        def finished() -> bool:
            response = httpx.get(f"{serve.url}{API_PREFIX}/workloads", headers=headers, timeout=10)
            items = response.json()["items"]
            return len(items) == JOBS and all(w["state"] in ("Succeeded", "Failed") for w in items)

        wait_for(finished, 120, "every job to finish")
        found = runs(serve.shared)
        started_twice = sorted(
            name for name, lines in found.items() if sum(line.startswith("start") for line in lines) > 1
        )
        completed_twice = sorted(name for name, lines in found.items() if lines.count("done") > 1)
        states = {
            w["name"]: w["state"]
            for w in httpx.get(f"{serve.url}{API_PREFIX}/workloads", headers=headers).json()["items"]
        }
        report = {
            "jobs": JOBS,
            "kills": KILLS,
            "started_twice": started_twice,
            "completed_twice": completed_twice,
        }
        print("recovery:", json.dumps(report))
        if os.environ.get("GPUQ_RECOVERY_REPORT"):
            Path(os.environ["GPUQ_RECOVERY_REPORT"]).write_text(json.dumps({**report, "states": states}))
        assert started_twice == [] and completed_twice == [], found
        assert set(states.values()) == {"Succeeded"}, states
        for name, lines in found.items():
            assert len(lines) == 2 and lines[0].startswith("start 0 ") and lines[1] == "done", (name, lines)
        for name in states:
            detail = httpx.get(
                f"{serve.url}{API_PREFIX}/namespaces/team-a/workloads/{name}", headers=headers
            ).json()
            assert [c["type"] for c in detail["conditions"]].count("Finished") == 1, (
                name,
                detail["conditions"],
            )
        assert serve.stop()[0] == 0
    finally:
        if serve.process is not None and serve.process.poll() is None:
            serve.process.kill()
            serve.process.wait()
