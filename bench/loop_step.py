"""What one step of the leader's loop costs against how much the store holds.

A store (SQLite file, or a fresh PostgreSQL schema with ``--postgres``) is filled with ``F`` finished
and ``P`` pending workloads (bulk inserts; the pending ones wait on a ClusterQueue with no quota
left), a :class:`~gpuq.run.loop.ControlLoop` with an in-memory executor takes over (its one full
read, timed), then each measured step follows one new submission (taken in, left pending) or
nothing at all. The steps' cost should not grow with ``F`` or ``P``: it is what changed that costs.
Usage:

    .venv/bin/python bench/loop_step.py                       # F, P = 0/1,000 then 100,000/10,000
    .venv/bin/python bench/loop_step.py --sizes 0:1000,20000:5000 --steps 200
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import insert

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve import POSTGRES_URL, database

from gpuq.run.executors.base import PodExit, PodLaunch
from gpuq.run.gpus import local_node, virtual_devices
from gpuq.run.loop import ControlLoop
from gpuq.run.store import Store
from gpuq.run.store.models import WorkloadRow

CONFIG = [
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "full"},
        "spec": {
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": 0}]}],
                }
            ],
        },
    },
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "q", "namespace": "team"},
        "spec": {"clusterQueue": "full"},
    },
]


class IdleExecutor:
    """No pod ever starts here (no quota): the port, doing nothing."""

    def start(self, pod: PodLaunch) -> int:
        raise AssertionError("no pod should start")

    def poll(self) -> list[PodExit]:
        return []

    def terminate(self, key: str, grace_s: float) -> None:
        return None

    def running(self) -> set[str]:
        return set()

    def close(self) -> None:
        return None


def manifest(name: str) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "busybox",
        "command": ["true"],
        "resources": {"requests": {"cpu": 1}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }


def fill(store: Store, finished: int, pending: int) -> None:
    """Bulk inserts, the version counter bumped once per chunk (as many submissions in one commit)."""
    now = time.time()
    version = store.resource_version()
    rows: list[dict[str, Any]] = []
    for i in range(finished + pending):
        done = i < finished
        rows.append(
            {
                "namespace": "team",
                "name": f"w-{i:07d}",
                "queue_name": "q",
                "source_kind": "Job",
                "manifest": manifest(f"w-{i:07d}"),
                "priority": 0,
                "state": "Succeeded" if done else "Pending",
                "requeue_count": 0,
                "created_at": now - 3600,
                "finished_at": now - 1800 if done else None,
                "message": "",
                "resource_version": version,
                "created_version": version,
            }
        )
    with store.transaction(write=True) as session:
        for start in range(0, len(rows), 5000):
            session.execute(insert(WorkloadRow), rows[start : start + 5000])


def measure(url: str, finished: int, pending: int, steps: int, root: Path) -> dict[str, Any]:
    store = Store(url)
    store.migrate()
    for document in CONFIG:
        store.apply_object(document)
    fill(store, finished, pending)
    node = local_node(virtual_devices(1, "A100-80GB"), name="box", cpu_milli=64_000, memory_bytes=256 << 30)
    loop = ControlLoop(store, IdleExecutor(), [node], workdir=root / "work")
    try:
        started = time.perf_counter()
        loop.step()  # configuration and the one full read of a new leader
        loop.step()
        takeover_s = time.perf_counter() - started
        assert len(loop.tracked) == pending, (len(loop.tracked), pending)
        idle, submitted = [], []
        for i in range(steps):
            started = time.perf_counter()
            loop.step()
            idle.append(time.perf_counter() - started)
            store.add_workload("team", f"new-{i:05d}", "q", "Job", manifest(f"new-{i:05d}"), 0, time.time())
            started = time.perf_counter()
            loop.step()
            submitted.append(time.perf_counter() - started)
        assert len(loop.tracked) == pending + steps
        return {
            "finished": finished,
            "pending": pending,
            "takeover_s": takeover_s,
            "idle_step_ms": statistics.median(idle) * 1000,
            "submission_step_ms": statistics.median(submitted) * 1000,
            "submission_step_p90_ms": sorted(submitted)[int(0.9 * len(submitted))] * 1000,
        }
    finally:
        loop.close()
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="0:1000,100000:10000", help="finished:pending pairs (default %(default)s)"
    )
    parser.add_argument(
        "--steps", type=int, default=100, help="measured steps per size (default %(default)s)"
    )
    parser.add_argument("--postgres", nargs="?", const=POSTGRES_URL, default=None, help="PostgreSQL URL")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    results = []
    for pair in args.sizes.split(","):
        finished, pending = (int(x) for x in pair.split(":"))
        with (
            tempfile.TemporaryDirectory(prefix="gpuq-bench-step-") as tmp,
            database(Path(tmp), args.postgres) as url,
        ):
            results.append(measure(url, finished, pending, args.steps, Path(tmp)))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    backend = "postgresql" if args.postgres else "sqlite"
    print(f"leader loop step, {backend} ({args.steps} measured steps per size)")
    header = f"{'finished':>10} {'pending':>8} {'takeover':>9} {'idle step':>10}"
    print(f"{header} {'step w/ 1 submission':>21} {'p90':>8}")
    for r in results:
        print(
            f"{r['finished']:>10,} {r['pending']:>8,} {r['takeover_s']:>8.2f}s {r['idle_step_ms']:>8.2f}ms"
            f" {r['submission_step_ms']:>19.2f}ms {r['submission_step_p90_ms']:>6.2f}ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
