"""Memory of `gpuq serve` on a store holding many workloads: RSS, start-up, idle step, API latency.

For each `--finished` count F it fills a fresh store directly (SQLAlchemy bulk inserts into the real
tables of `gpuq.run.store.models`, after `Store(url).migrate()`, a few transactions) with F finished
workloads (a small batch/v1 Job each, Succeeded, with its QuotaReserved, Admitted and Finished
conditions and one Succeeded pod row) and `--pending` P pending ones (each asking 2 GPUs of a
ClusterQueue whose GPU quota is 1: they stay pending, and the leader holds every one of them in its
queues), then starts `gpuq serve` on it (2 virtual GPUs), applies the Kueue configuration through
the API, and waits until the leader has taken in every pending workload (the sum of
`kueue_pending_workloads` on `/metrics` equals P). It reports the server process's VmRSS and VmHWM
(`/proc/<pid>/status`) once ready and after the API calls, the time from start to `/healthz` and to
leader-ready, the idle step (steps a second and the mean step period from `/status` over
`--idle-seconds`, with the server's CPU use meanwhile), and the latency of
`GET /workloads?state=Pending` (P items) and of one `POST /apply` (a one-pod Job that is admitted
and runs `/bin/true`). Usage:

    .venv/bin/python bench/serve_memory.py                                # F=100,000 then 200,000, P=10,000
    .venv/bin/python bench/serve_memory.py --quick                        # F=2,000 and 4,000, P=500
    .venv/bin/python bench/serve_memory.py --finished 50000 --pending 5000
    .venv/bin/python bench/serve_memory.py --postgres                     # PostgreSQL at 127.0.0.1:5432/test

It prints a table per F value and a comparison; it exits 1 when the leader does not take in every
pending workload, or one is admitted although no quota could hold it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from serve import POSTGRES_URL, Server, api, apply, database, job, percentile, quantiles_text
from sqlalchemy import insert, text, update

from gpuq.run.store import Store
from gpuq.run.store.models import RESOURCE_VERSION, ConditionRow, Counter, PodRow, WorkloadRow

NAMESPACES = ("team-a", "team-b", "team-c", "team-d")
BATCH = 20_000


def log(text_: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text_}", file=sys.stderr, flush=True)


def config_documents() -> list[dict[str, Any]]:
    """One flavor; a ClusterQueue per namespace (8 CPUs, 1 GPU) with its LocalQueue ``q``."""
    documents: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}}
    ]
    for namespace in NAMESPACES:
        resources = [{"name": "cpu", "nominalQuota": 2}, {"name": "nvidia.com/gpu", "nominalQuota": 1}]
        documents.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": namespace},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "nvidia.com/gpu"],
                            "flavors": [{"name": "default", "resources": resources}],
                        }
                    ],
                },
            }
        )
        documents.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "q", "namespace": namespace},
                "spec": {"clusterQueue": namespace},
            }
        )
    return documents


def manifest(name: str, namespace: str, gpus: int) -> dict[str, Any]:
    """A small Job as apply stores it (with the submitter's annotation)."""
    requests: dict[str, Any] = {"cpu": "500m", "memory": "1Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = gpus
    command = ["python", "train.py", "--epochs", "3", "--data", f"/data/{namespace}/{name}"]
    document = job(name, namespace, command, requests, app="train", team=namespace)
    document["metadata"]["annotations"] = {"gpuq.dev/submitted-by": f"user-{namespace}"}
    container = document["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "EPOCHS", "value": "3"}, {"name": "WANDB_MODE", "value": "offline"}]
    container["image"] = "ghcr.io/example/train:1.4.2"
    return document


# ------------------------------------------------------------------------------------------ filling
def fill(url: str, finished: int, pending: int) -> float:
    """Bulk-insert the workloads (ids given, so conditions and pods can name them); seconds taken."""
    started = time.perf_counter()
    store = Store(url)
    try:
        store.migrate()
        with store.transaction(write=True) as session:
            version = session.execute(
                update(Counter)
                .where(Counter.name == RESOURCE_VERSION)
                .values(value=Counter.value + 1)
                .returning(Counter.value)
            ).scalar_one()
        base = time.time() - 86_400 * 7 - (finished + pending) * 5
        total = finished + pending
        for low in range(0, total, BATCH):
            workloads, conditions, pods = [], [], []
            for index in range(low, min(total, low + BATCH)):
                wid = index + 1
                namespace = NAMESPACES[index % len(NAMESPACES)]
                done = index < finished
                name = f"{'done' if done else 'wait'}-{index:07d}"
                created = base + index * 5
                row: dict[str, Any] = {
                    "id": wid,
                    "namespace": namespace,
                    "name": name,
                    "queue_name": "q",
                    "source_kind": "Job",
                    "manifest": manifest(
                        name, namespace, 1 if done and index % 4 == 0 else (0 if done else 2)
                    ),
                    "priority": 0,
                    "state": "Succeeded" if done else "Pending",
                    "cluster_queue": namespace if done else None,
                    "admission": None,
                    "requeue_count": 0,
                    "requeue_at": None,
                    "created_at": created,
                    "admitted_at": None,
                    "started_at": None,
                    "finished_at": None,
                    "message": "",
                    "resource_version": version,
                }
                if done:
                    admitted, ran, ended = created + 1.0, created + 1.5, created + 61.5 + index % 600
                    row |= {
                        "admission": {
                            "clusterQueue": namespace,
                            "podSetAssignments": [
                                {"name": "main", "count": 1, "flavors": {"cpu": "default"}}
                            ],
                        },
                        "admitted_at": admitted,
                        "started_at": ran,
                        "finished_at": ended,
                        "message": "Job finished successfully",
                    }
                    for kind, at, message in (
                        ("QuotaReserved", admitted, f"Quota reserved in ClusterQueue {namespace}"),
                        ("Admitted", admitted, "The workload is admitted"),
                        ("Finished", ended, "Job finished successfully"),
                    ):
                        reason = "JobFinished" if kind == "Finished" else kind
                        conditions.append(
                            {
                                "workload_id": wid,
                                "type": kind,
                                "status": "True",
                                "reason": reason,
                                "message": message,
                                "time": at,
                            }
                        )
                    pods.append(
                        {
                            "workload_id": wid,
                            "name": "main-0",
                            "pod_set": "main",
                            "node": "bench-node",
                            "devices": ["0"] if index % 4 == 0 else [],
                            "state": "Succeeded",
                            "attempt": 0,
                            "pid": 10_000 + index % 50_000,
                            "exit_code": 0,
                            "started_at": ran,
                            "finished_at": ended,
                            "log_path": f"/var/lib/gpuq/workdir/logs/{namespace}/{name}/main-0.log",
                        }
                    )
                if "created_version" in WorkloadRow.__table__.columns:  # the leader's intake reads it
                    row["created_version"] = version
                workloads.append(row)
            with store.transaction(write=True) as session:
                session.execute(insert(WorkloadRow), workloads)
                if conditions:
                    session.execute(insert(ConditionRow), conditions)
                if pods:
                    session.execute(insert(PodRow), pods)
            log(f"filled {min(total, low + BATCH):,} of {total:,} workloads")
        if store.backend == "postgresql":  # explicit ids: move the sequences past them
            with store.transaction(write=True) as session:
                for table in ("workloads", "conditions", "pods"):
                    session.execute(
                        text(
                            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                            f"(SELECT coalesce(max(id), 1) FROM {table}))"
                        )
                    )
                session.execute(text("ANALYZE"))
    finally:
        store.close()
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------- measuring
def memory_kib(pid: int) -> dict[str, int]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values


def pending_metric(server: Server) -> int | None:
    """The sum of ``kueue_pending_workloads`` (None: no such sample yet, e.g. not leading)."""
    try:
        response = httpx.get(
            f"{server.url}/metrics", headers={"Authorization": f"Bearer {server.token}"}, timeout=30
        )
    except httpx.HTTPError:
        return None
    samples = [
        float(line.rsplit(" ", 1)[1])
        for line in response.text.splitlines()
        if line.startswith("kueue_pending_workloads{")
    ]
    return int(sum(samples)) if samples else None


def timed(call: Any, repeat: int) -> tuple[list[float], Any]:
    latencies, last = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        last = call()
        latencies.append(time.perf_counter() - started)
    return latencies, last


def measure(args: argparse.Namespace, finished: int) -> dict[str, Any]:
    node_args = [
        *("--gpus", "2", "--gpu-model", "A100-80GB", "--cpus", "16", "--memory", "64Gi"),
        *("--rate-limit", "0"),
    ]
    report: dict[str, Any] = {"finished": finished, "pending": args.pending}
    with tempfile.TemporaryDirectory(prefix="gpuq-bench-memory-") as tmp:
        root = Path(tmp)
        root.chmod(0o711)  # pods run as their namespace's user: they must pass it to reach their dirs
        with database(root, args.postgres) as url:
            log(f"F={finished:,}: filling a fresh store with {finished:,} finished, {args.pending:,} pending")
            report["fill_s"] = fill(url, finished, args.pending)
            server = Server(root, url, node_args)
            started = time.perf_counter()
            try:
                server.start(timeout_s=args.timeout)
                report["healthz_s"] = time.perf_counter() - started
                assert server.process is not None
                with api(server) as admin:
                    response = apply(admin, config_documents())
                    if response.status_code != 200:
                        raise RuntimeError(f"configuration refused: {response.text[:2000]}")
                    deadline = time.monotonic() + args.timeout
                    seen: int | None = None
                    while time.monotonic() < deadline:
                        seen = pending_metric(server)
                        if seen is not None and seen >= args.pending:
                            break
                        time.sleep(0.25)
                    report["ready_s"] = time.perf_counter() - started
                    report["pending_seen"] = seen
                    report["rss_ready"] = memory_kib(server.process.pid)
                    log(f"F={finished:,}: leader ready after {report['ready_s']:.1f}s, pending {seen}")
                    # idle: steps over a window, with the server's CPU
                    before, cpu_before, t0 = admin.get("/status").json()["loop"], server.cpu_s(), time.time()
                    time.sleep(args.idle_seconds)
                    after, cpu_after, t1 = admin.get("/status").json()["loop"], server.cpu_s(), time.time()
                    steps = (after.get("steps") or 0) - (before.get("steps") or 0)
                    report["idle_window_s"] = t1 - t0
                    report["idle_steps_per_s"] = steps / (t1 - t0)
                    report["idle_step_period_s"] = (t1 - t0) / steps if steps else None
                    report["idle_cpu"] = ((cpu_after or 0) - (cpu_before or 0)) / (t1 - t0)
                    report["loop_error"] = after.get("lastError")
                    # the API
                    listing, items = timed(
                        lambda: admin.get("/workloads", params={"state": "Pending"}), args.repeat
                    )
                    report["list_pending_s"] = listing
                    report["list_pending_items"] = len(items.json()["items"]) if items is not None else None
                    posts: list[float] = []
                    for i in range(args.repeat):
                        document = job(f"probe-{i}", "team-a", ["/bin/true"], {"cpu": "100m"})
                        elapsed, response = timed(lambda document=document: apply(admin, [document]), 1)
                        if response.status_code != 200:
                            raise RuntimeError(f"POST /apply refused: {response.text[:2000]}")
                        posts += elapsed
                    report["post_apply_s"] = posts
                    admitted = admin.get("/workloads", params={"state": "Admitted"}).json()["items"]
                    running = admin.get("/workloads", params={"state": "Running"}).json()["items"]
                    report["wrongly_admitted"] = [
                        w["name"] for w in admitted + running if w["name"].startswith("wait-")
                    ]
                    report["rss_after_api"] = memory_kib(server.process.pid)
            finally:
                server.stop()
                report["log_problems"] = [p for p in server.log_problems() if "pod isolation" not in p][:10]
    report["ok"] = report.get("pending_seen") == args.pending and not report.get("wrongly_admitted")
    return report


def mib(kib: int | None) -> str:
    return "n/a" if kib is None else f"{kib / 1024:,.0f} MiB"


def print_report(reports: Sequence[dict[str, Any]], backend: str) -> None:
    for r in reports:
        period = r["idle_step_period_s"]
        step = (
            f">{r['idle_window_s']:.0f}s (none ended in the window)" if period is None else f"{period:.3f}s"
        )
        print(
            f"gpuq serve memory, {backend}: {r['finished']:,} finished + {r['pending']:,} pending workloads"
            f" (store filled in {r['fill_s']:.1f}s)\n"
            f"  start → /healthz {r['healthz_s']:.1f}s · → leader holds every pending one {r['ready_s']:.1f}s"
            f" (kueue_pending_workloads {r['pending_seen']})\n"
            f"  RSS when ready {mib(r['rss_ready'].get('VmRSS'))} (peak {mib(r['rss_ready'].get('VmHWM'))})"
            f" · after the API calls {mib(r['rss_after_api'].get('VmRSS'))}"
            f" (peak {mib(r['rss_after_api'].get('VmHWM'))})\n"
            f"  idle: {r['idle_steps_per_s']:.2f} steps/s, one step every"
            f" {step}"
            " (the loop sleeps 0.2s between steps)"
            f" · server CPU {r['idle_cpu'] * 100:.0f}% of a core · last error {r['loop_error']!r}\n"
            f"  GET /workloads?state=Pending ({r['list_pending_items']:,} items):"
            f" {quantiles_text(r['list_pending_s'], 'ms', 1000)}\n"
            f"  POST /apply (one Job): {quantiles_text(r['post_apply_s'], 'ms', 1000)}"
        )
        if r["wrongly_admitted"]:
            print(f"  NOT OK: pending workloads no quota can hold were admitted: {r['wrongly_admitted'][:5]}")
        if r["pending_seen"] != r["pending"]:
            print(f"  NOT OK: the leader reported {r['pending_seen']} pending, not {r['pending']}")
        for line in r["log_problems"]:
            print(f"  server log: {line}")
    if len(reports) > 1:
        first, last = reports[0], reports[-1]
        growth = (last["rss_ready"]["VmRSS"] - first["rss_ready"]["VmRSS"]) / 1024
        per = growth * 1024 * 1024 / max(1, last["finished"] - first["finished"])
        print(
            f"  RSS from {first['finished']:,} to {last['finished']:,} finished: {growth:+,.0f} MiB"
            f" ({per:,.0f} bytes per finished workload); p50 GET Pending"
            f" {percentile(first['list_pending_s'], 50) * 1000:,.0f}"
            f" → {percentile(last['list_pending_s'], 50) * 1000:,.0f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--finished", default="100000,200000", help="finished workload counts, one run each [100000,200000]"
    )
    parser.add_argument("--pending", type=int, default=10_000, help="pending workloads [10000]")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="idle window to count steps in [10]")
    parser.add_argument("--repeat", type=int, default=5, help="API calls of each kind timed [5]")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds to wait for start and intake")
    parser.add_argument(
        "--postgres",
        nargs="?",
        const=POSTGRES_URL,
        default=None,
        metavar="URL",
        help=f"PostgreSQL (a fresh schema, dropped after) instead of SQLite [{POSTGRES_URL}]",
    )
    parser.add_argument("--quick", action="store_true", help="F=2000,4000 and P=500, a 5 s idle window")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.quick:
        args.finished, args.pending, args.idle_seconds = "2000,4000", 500, 5.0
    counts = [int(part.replace("_", "")) for part in args.finished.split(",") if part.strip()]
    os.environ.pop("GPUQ_SERVER", None)
    reports = [measure(args, count) for count in counts]
    if args.json:
        print(json.dumps(reports, indent=2, default=str))
    else:
        print_report(reports, "postgresql" if args.postgres else "sqlite")
    sys.exit(0 if all(r["ok"] for r in reports) else 1)


if __name__ == "__main__":
    main()
