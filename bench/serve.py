"""`gpuq serve` under load: many small Jobs submitted through the REST API by concurrent clients.

Starts `gpuq serve` as a subprocess on a fresh store (a temporary SQLite file, or a fresh
schema of a PostgreSQL database with `--postgres`), with virtual GPUs and a node declared
large enough for the quota, applies a Kueue configuration of a few ClusterQueues in one
cohort, then submits `--jobs` Jobs (`/bin/true`; 100m CPU, every `--gpu-every`-th one also a
whole GPU) from `--clients` threads, each with its own member token and namespace, one
workload per `POST /apply`. It prints the submission rate, API latency, the time from
submission to admission (`admittedAt - createdAt`), the wall time until every workload
finished, and checks that every submitted workload is in the store exactly once and
Succeeded. The server is stopped with SIGTERM at the end, whatever happened. Usage:

    .venv/bin/python bench/serve.py                          # 10,000 jobs, 20 clients, SQLite
    .venv/bin/python bench/serve.py --jobs 500 --clients 4   # a quick run
    .venv/bin/python bench/serve.py --postgres               # PostgreSQL at 127.0.0.1:5432/test

It prints figures and exits 1 when a workload is missing, duplicated or not Succeeded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
API = "/apis/gpuq.dev/v1alpha1"
POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ACTIVE_STATES = ("Pending", "QuotaReserved", "Admitted", "Running")
ENDED_STATES = ("Succeeded", "Failed")
EXCEPTION_LINE = re.compile(r"^((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b.*)$")
"""The last line of a logged traceback (``sqlalchemy.exc.OperationalError: ...``)."""


# ----------------------------------------------------------------------------------- the server process
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def database(root: Path, postgres: str | None) -> Iterator[str]:
    """A store URL: a SQLite file under ``root``, or a fresh schema of ``postgres`` dropped afterwards."""
    if postgres is None:
        yield f"sqlite:///{root / 'gpuq.db'}"
        return
    import psycopg

    libpq = postgres.replace("postgresql+psycopg://", "postgresql://", 1)
    schema = f"gpuq_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{postgres}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(libpq, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


@dataclass
class Server:
    """One `gpuq serve` subprocess; its output goes to ``log_path`` (a pipe could fill and block it)."""

    root: Path
    database: str
    node_args: Sequence[str]
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.root / "serve.log"

    def start(self, timeout_s: float = 60.0) -> None:
        env = {**os.environ, "GPUQ_CONTEXT": str(self.root / "context.yaml"), "GPUQ_ADMIN_TOKEN": self.token}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
        args = ["--database", self.database, "--port", str(self.port), "--workdir", str(self.root / "work")]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gpuq.cli", "serve", *args, *self.node_args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gpuq serve exited {self.process.returncode}:\n{self.log_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"gpuq serve did not answer /healthz in {timeout_s:.0f}s:\n{self.log_text()}")

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM (the server stops its pods and releases the lease), SIGKILL after ``timeout_s``."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            print(f"gpuq serve ignored SIGTERM for {timeout_s:.0f}s: SIGKILL", file=sys.stderr)
            self.process.kill()
            return self.process.wait()

    def cpu_s(self) -> float | None:
        """User + system CPU seconds of the server process so far (its pods not included)."""
        if self.process is None:
            return None
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_problems(self) -> list[str]:
        """What went wrong according to the server's log: each distinct exception (its last line) and
        each distinct logged error or warning (the leader's greeting aside), with how often it occurred."""
        found: Counter[str] = Counter()
        for line in self.log_text().splitlines():
            if EXCEPTION_LINE.match(line):
                found[line] += 1
            elif (" ERROR " in line or " WARNING " in line) and "is the leader" not in line:
                found[line[24:]] += 1  # without the timestamp
        return [f"{text} (x{count})" for text, count in found.most_common()]

    def keep_log(self) -> Path | None:
        """When the log shows a problem, a copy of it outside the temporary directory (its path)."""
        if not self.log_problems():
            return None
        kept = Path(tempfile.gettempdir()) / f"gpuq-bench-serve-{time.strftime('%Y%m%d-%H%M%S')}.log"
        kept.write_text(self.log_text())
        return kept


@contextmanager
def running_server(root: Path, database_url: str, node_args: Sequence[str]) -> Iterator[Server]:
    server = Server(root, database_url, node_args)
    try:
        server.start()
        yield server
    finally:
        code = server.stop()
        if code not in (None, 0):
            print(f"gpuq serve exited {code}", file=sys.stderr)
        kept = server.keep_log()
        if kept is not None:
            print(f"the server's log showed problems; kept in {kept}", file=sys.stderr)


def add_members(database_url: str, namespaces: Sequence[str]) -> list[str]:
    """One member user per entry of ``namespaces`` (a client each), created against the store as
    `gpuq users add` does; their tokens."""
    from gpuq.run.store import Store
    from gpuq.server.auth import add_user

    store = Store(database_url)
    try:
        return [add_user(store, f"bench-{i:02d}", namespaces=[ns]) for i, ns in enumerate(namespaces)]
    finally:
        store.close()


def api(server: Server, token: str | None = None, timeout_s: float = 120.0) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token or server.token}"}
    return httpx.Client(base_url=f"{server.url}{API}", headers=headers, timeout=timeout_s)


def apply(client: httpx.Client, documents: Sequence[dict[str, Any]]) -> httpx.Response:
    body = {"apiVersion": "v1", "kind": "List", "items": list(documents)}
    return client.post("/apply", content=json.dumps(body), headers={"Content-Type": "application/json"})


def apply_ok(client: httpx.Client, documents: Sequence[dict[str, Any]]) -> None:
    response = apply(client, documents)
    if response.status_code != 200:
        raise RuntimeError(f"apply refused ({response.status_code}): {response.text[:2000]}")


def list_workloads(client: httpx.Client, state: str | None = None) -> list[dict[str, Any]]:
    response = client.get("/workloads", params={"state": state} if state else None)
    response.raise_for_status()
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def wait_until_ended(client: httpx.Client, timeout_s: float, poll_s: float = 2.0) -> float | None:
    """Poll the active states until none is left; the time.time() it was seen empty, or None on timeout.

    The API has no counts, only lists, and the server shares its process (and GIL) with the loop:
    the states holding quota (a few hundred workloads at most) are listed first and the long
    Pending list only when they are empty, so that the polling does not slow down what it measures.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        holding = any(list_workloads(client, state) for state in reversed(ACTIVE_STATES[1:]))
        if not holding and not list_workloads(client, "Pending"):
            return time.time()
        time.sleep(poll_s)
    return None


# ------------------------------------------------------------------------------------------- statistics
def percentile(values: Sequence[float], pct: float) -> float:
    """Linear interpolation between closest ranks (NaN for no values)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * pct / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def quantiles_text(values: Sequence[float], unit: str = "s", scale: float = 1.0) -> str:
    if not values:
        return "n/a"
    parts = [f"p{p} {percentile(values, p) * scale:,.3f}" for p in (50, 90, 99)]
    return f"{' / '.join(parts)} {unit} (max {max(values) * scale:,.3f}, n={len(values):,})"


# ------------------------------------------------------------------------------------------ the scenario
def config_documents(teams: int, cpu_per_team: int, gpus_per_team: int) -> list[dict[str, Any]]:
    """One flavor and, per team, a ClusterQueue in cohort ``bench`` and a LocalQueue ``q``."""
    documents: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}}
    ]
    for team in range(teams):
        name = f"team-{team}"
        resources = [
            {"name": "cpu", "nominalQuota": cpu_per_team},
            {"name": "nvidia.com/gpu", "nominalQuota": gpus_per_team},
        ]
        documents.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": name},
                "spec": {
                    "cohortName": "bench",
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
                "metadata": {"name": "q", "namespace": name},
                "spec": {"clusterQueue": name},
            }
        )
    return documents


def job(
    name: str, namespace: str, command: Sequence[str], requests: dict[str, Any], **labels: str
) -> dict[str, Any]:
    """A batch/v1 Job of one pod running ``command`` in LocalQueue ``q`` (or ``labels``' queue)."""
    container = {
        "name": "main",
        "image": "busybox",
        "command": list(command),
        "resources": {"requests": requests},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": "q", **labels},
        },
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


# -------------------------------------------------------------------------------------------- submitting
@dataclass
class ClientResult:
    latencies_s: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    failed: list[str] = field(default_factory=list)  # workload names never accepted
    errors: list[str] = field(default_factory=list)  # first few refusal texts


def submit_all(
    server: Server, tokens: Sequence[str], namespaces: Sequence[str], jobs: int, gpu_every: int, retries: int
) -> tuple[list[ClientResult], dict[str, str], float, float]:
    """Submit ``jobs`` Jobs from one thread per token; job ``i`` goes to client ``i mod clients``.

    Returns the clients' results, each workload's namespace by name, and the wall-clock start
    and end of the submission phase (time.time()).
    """
    clients = len(tokens)
    placement = {f"job-{i:05d}": namespaces[i % clients] for i in range(jobs)}
    results = [ClientResult() for _ in range(clients)]
    barrier = threading.Barrier(clients + 1)

    def work(index: int) -> None:
        result = results[index]
        with api(server, tokens[index]) as client:
            barrier.wait()
            for i in range(index, jobs, clients):
                name = f"job-{i:05d}"
                requests: dict[str, Any] = {"cpu": "100m"}
                if gpu_every and i % gpu_every == 0:
                    requests["nvidia.com/gpu"] = 1
                document = job(name, placement[name], ["/bin/true"], requests)
                for attempt in range(retries + 1):
                    started = time.perf_counter()
                    try:
                        response = apply(client, [document])
                        status = str(response.status_code)
                    except httpx.HTTPError as error:
                        response, status = None, type(error).__name__
                    result.latencies_s.append(time.perf_counter() - started)
                    result.statuses[status] += 1
                    if status == "200":
                        break
                    if len(result.errors) < 3:
                        result.errors.append(f"{name}: {status} {response.text[:300] if response else ''}")
                    retryable = response is None or response.status_code >= 500
                    if not retryable or attempt == retries:
                        result.failed.append(name)
                        break
                    result.retries += 1
                    time.sleep(0.5)

    threads = [threading.Thread(target=work, args=(i,), name=f"client-{i}") for i in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.time()
    for thread in threads:
        thread.join()
    return results, placement, started, time.time()


# --------------------------------------------------------------------------------------------- checking
def account(placement: dict[str, str], workloads: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Every submitted workload exactly once, Succeeded; anything else is listed (a few names each)."""
    seen = Counter((w["namespace"], w["name"]) for w in workloads)
    expected = {(ns, name) for name, ns in placement.items()}
    missing = sorted(expected - set(seen))
    extra = sorted(set(seen) - expected)
    duplicated = sorted(k for k, n in seen.items() if n > 1)
    states = Counter(w["state"] for w in workloads if (w["namespace"], w["name"]) in expected)
    not_succeeded = sorted(
        f"{w['namespace']}/{w['name']}={w['state']}"
        for w in workloads
        if (w["namespace"], w["name"]) in expected and w["state"] != "Succeeded"
    )
    return {
        "expected": len(expected),
        "found": len(workloads),
        "missing": len(missing),
        "missing_examples": [f"{ns}/{n}" for ns, n in missing[:5]],
        "extra": len(extra),
        "duplicated": len(duplicated),
        "states": dict(sorted(states.items())),
        "not_succeeded_examples": not_succeeded[:5],
        "ok": not missing and not extra and not duplicated and states.get("Succeeded", 0) == len(expected),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    namespaces = [f"team-{i % args.teams}" for i in range(args.clients)]
    node_args = [
        *("--gpus", str(args.gpus), "--gpu-model", args.gpu_model),
        *("--cpus", str(args.cpus), "--memory", "512Gi", "--pods", str(args.pods)),
        *("--rate-limit", str(args.rate_limit)),
    ]
    report: dict[str, Any] = {
        "jobs": args.jobs,
        "clients": args.clients,
        "backend": "postgresql" if args.postgres else "sqlite",
        "rate_limit": args.rate_limit,
    }
    with tempfile.TemporaryDirectory(prefix="gpuq-bench-serve-") as tmp:
        root = Path(tmp)
        root.chmod(0o711)  # pods run as their team's user: they must reach the workdir below it
        with database(root, args.postgres) as url, running_server(root, url, node_args) as server:
            with api(server) as admin:
                apply_ok(admin, config_documents(args.teams, args.cpu_per_team, args.gpus_per_team))
                tokens = add_members(url, namespaces)
                cpu_before = server.cpu_s() or 0.0
                results, placement, started, submitted = submit_all(
                    server, tokens, namespaces, args.jobs, args.gpu_every, args.retries
                )
                ended_seen = wait_until_ended(admin, args.timeout)
                workloads = list_workloads(admin)
                status = admin.get("/status").json().get("loop") or {}
                cpu_after = server.cpu_s() or 0.0
            report["server_log_problems"] = server.log_problems()[:20]
    latencies = [s for r in results for s in r.latencies_s]
    statuses: Counter[str] = sum((r.statuses for r in results), Counter())
    accepted = args.jobs - sum(len(r.failed) for r in results)
    mine = [w for w in workloads if placement.get(w["name"]) == w["namespace"]]
    to_admission = [w["admittedAt"] - w["createdAt"] for w in mine if w["admittedAt"] is not None]
    to_finish = [w["finishedAt"] - w["createdAt"] for w in mine if w["finishedAt"] is not None]
    last_finish = max((w["finishedAt"] for w in mine if w["finishedAt"] is not None), default=None)
    report |= {
        "submission_wall_s": submitted - started,
        "submissions_per_s": accepted / (submitted - started),
        "requests": dict(sorted(statuses.items())),
        "retries": sum(r.retries for r in results),
        "refused": sum(len(r.failed) for r in results),
        "refusal_examples": [e for r in results for e in r.errors][:5],
        "api_latency_s": {p: percentile(latencies, p) for p in (50, 90, 99)} | {"max": max(latencies)},
        "to_admission_s": {p: percentile(to_admission, p) for p in (50, 90, 99)},
        "to_finish_s": {p: percentile(to_finish, p) for p in (50, 90, 99)},
        "wall_s": (last_finish - started) if last_finish is not None else None,
        "drained": ended_seen is not None,
        "server_cpu_s": cpu_after - cpu_before,
        "loop": {k: status.get(k) for k in ("steps", "lastError", "configProblem")},
        "accounting": account(placement, workloads),
    }
    report["_latencies"], report["_to_admission"], report["_to_finish"] = latencies, to_admission, to_finish
    return report


def print_report(report: dict[str, Any]) -> None:
    acc = report["accounting"]
    wall = report["wall_s"]
    print(
        f"gpuq serve, {report['backend']}: {report['jobs']:,} jobs from {report['clients']} clients"
        f" (server --rate-limit {report['rate_limit']:g})\n"
        f"  submissions: {report['submission_wall_s']:.1f}s · {report['submissions_per_s']:,.1f}/s"
        f" · requests {report['requests']} · retries {report['retries']} · refused {report['refused']}\n"
        f"  API latency (POST /apply, one Job): {quantiles_text(report['_latencies'], 'ms', 1000)}\n"
        f"  submission → admission: {quantiles_text(report['_to_admission'])}\n"
        f"  submission → finished:  {quantiles_text(report['_to_finish'])}\n"
        f"  wall until all finished: {f'{wall:.1f}s' if wall is not None else 'n/a'}"
        f"{'' if report['drained'] else ' (NOT drained before --timeout)'}"
        f" · server process CPU {report['server_cpu_s']:.1f}s · loop {report['loop']}\n"
        f"  accounted: {acc['found']:,} workloads listed for {acc['expected']:,} submitted"
        f" · states {acc['states']}"
        f" · missing {acc['missing']} · duplicated {acc['duplicated']} · extra {acc['extra']}"
        f" → {'OK: each exactly once, Succeeded' if acc['ok'] else 'NOT OK'}"
    )
    if not acc["ok"]:
        print(f"  missing e.g. {acc['missing_examples']}, not Succeeded e.g. {acc['not_succeeded_examples']}")
    for example in report["refusal_examples"]:
        print(f"  failed attempt (retried when 5xx): {example}")
    for line in report["server_log_problems"]:
        print(f"  server log: {line}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000, help="Jobs to submit [10000]")
    parser.add_argument("--clients", type=int, default=20, help="concurrent API clients [20]")
    parser.add_argument("--teams", type=int, default=4, help="ClusterQueues (one namespace each) [4]")
    parser.add_argument("--cpu-per-team", type=int, default=16, help="nominal CPU quota per queue [16]")
    parser.add_argument("--gpus-per-team", type=int, default=2, help="nominal GPU quota per queue [2]")
    parser.add_argument(
        "--gpu-every", type=int, default=10, help="every Nth job also asks a GPU; 0: none [10]"
    )
    parser.add_argument("--gpus", type=int, default=8, help="virtual GPUs of the node [8]")
    parser.add_argument("--gpu-model", default="A100-80GB")
    parser.add_argument("--cpus", type=int, default=64, help="the node's declared CPUs [64]")
    parser.add_argument("--pods", type=int, default=1000, help="the node's pod capacity [1000]")
    parser.add_argument(
        "--rate-limit",
        type=float,
        default=0.0,
        help="the server's --rate-limit (requests a second per token; 0: none, so the server's speed is "
        "measured, not its limiter; gpuq serve's own default is 20) [0]",
    )
    parser.add_argument("--retries", type=int, default=3, help="retries of a 5xx or failed request [3]")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for every job to end")
    parser.add_argument(
        "--postgres",
        nargs="?",
        const=POSTGRES_URL,
        default=None,
        metavar="URL",
        help=f"PostgreSQL (a fresh schema, dropped after) instead of SQLite [{POSTGRES_URL}]",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.teams > args.clients:
        parser.error("--teams must not exceed --clients (each team's namespace needs a client)")
    report = run(args)
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if not k.startswith("_")}, indent=2))
    else:
        print_report(report)
    sys.exit(0 if report["accounting"]["ok"] else 1)


if __name__ == "__main__":
    main()
