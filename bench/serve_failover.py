"""`gpuq serve` high availability: `kill -9` of the leader three times under load, then an audit.

Starts two `gpuq serve` replicas on one store (a fresh PostgreSQL schema; `--sqlite`: one SQLite
file), each with its own port, identity, log and context file, one `--workdir` shared by all, as
docs/serve.md ("Recovery") requires of replicas on one machine (a new leader takes pods back
through the workdir's records; one with another workdir would rerun them), and a short lease
(`--lease-seconds`, 3). It applies two ClusterQueues of one cohort (`team-low`, priority `low`;
`team-high`, priority `high`; preemption `reclaimWithinCohort: Any`, `withinClusterQueue:
LowerPriority`), then:

1. submits `--jobs` small Jobs (a `/bin/sh` that sleeps `--job-seconds`; every `--gpu-every`-th
   one also a whole virtual GPU; one in four in `team-high`) from `--clients` threads, one Job per
   `POST /apply`, each retried against whichever replica answers (a re-apply of the same manifest
   answers `unchanged`: counted once); kill (a) the leader once a third are accepted;
2. kill (b) the leader while pods run (after the submissions);
3. once all ended, starts one long low-priority GPU Job per GPU (team-low borrows team-high's
   GPUs), submits a burst of high-priority GPU Jobs that reclaims them, and kill (c) the leader as
   soon as the store shows an `Evicted` (reason `Preempted`) condition.

After each kill a fresh replica is started, so two are always up. For each kill it reports the
time until a follower led (its `/status` `leaderSince`) and until the first admission after the
kill (the store's `QuotaReserved`/`Admitted` conditions), the pods taken back (`Adopted` events)
and the workloads requeued by recovery (`ControlPlaneRestarted`).

Each pod records itself in a shared directory (`--pod-bind`): `start`/`term`/`end` lines with its
attempt, its own clock and `CUDA_VISIBLE_DEVICES` in a file per workload, and it holds an
`flock` on a file per GPU it was given for as long as any of its processes lives, writing a
`double` line when another pod's process still holds it. The audit, against the store opened
directly (tables workloads, conditions, pods, events) and the pods' marks, fails (exit 1) when a
workload is lost (accepted but not stored), duplicated, not Succeeded exactly once (one
`Finished` condition), ran to completion twice (two `end` marks) or succeeded without one, or a
GPU was held by two pods at once (an `flock` conflict, overlapping marked runs, or overlapping
pod rows). A pod killed by a failover or a preemption and run again is no violation (Kueue
requeues it). Usage:

    .venv/bin/python bench/serve_failover.py                # 2,000 jobs, PostgreSQL at 127.0.0.1
    .venv/bin/python bench/serve_failover.py --quick        # 150 jobs: under a minute or two
    .venv/bin/python bench/serve_failover.py --sqlite       # one SQLite file shared by the replicas

It prints a table per kill and the audit, and exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from serve import API, POSTGRES_URL, Server, add_members, database, job, quantiles_text

from gpuq.run.store import Store

ENDED = ("Succeeded", "Failed")
ADMISSION_TYPES = ("QuotaReserved", "Admitted")

POD_SCRIPT = r"""
S={shared}; M="$S/{namespace}.{name}"; V="$S/violations"
now() {{ date +%s.%N; }}
echo "start $GPUQ_ATTEMPT $(now) $$ ${{CUDA_VISIBLE_DEVICES:--}}" >> "$M"
fd=3
for d in $(echo "${{CUDA_VISIBLE_DEVICES:-}}" | tr , ' '); do
  if eval "exec $fd>>\"\$S/gpu-\$d.lock\""; then
    flock -n $fd || echo "double {namespace}/{name} gpu $d at $(now) pid $$" >> "$V"
  else
    echo "lockopen {namespace}/{name} gpu $d" >> "$V"
  fi
  fd=$((fd+1))
done
trap 'kill $child 2>/dev/null; echo "term $GPUQ_ATTEMPT $(now) $$" >> "$M"; exit 143' TERM
sleep {seconds} & child=$!
wait $child || exit $?  # its sleep killed by the pod's stop (gpuq signals every process): not an end
echo "end $GPUQ_ATTEMPT $(now) $$ ${{CUDA_VISIBLE_DEVICES:--}}" >> "$M"
"""
"""A pod: marks its start, locks its GPUs (flock: held while any of its processes lives), sleeps,
marks its end (or `term` on SIGTERM)."""


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ the configuration
def config_documents(cpu_per_team: str, gpus_per_team: int) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "low"},
            "value": 10,
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "high"},
            "value": 1000,
        },
    ]
    for team in ("team-low", "team-high"):
        resources = [
            {"name": "cpu", "nominalQuota": cpu_per_team},
            {"name": "nvidia.com/gpu", "nominalQuota": gpus_per_team},
        ]
        documents.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": team},
                "spec": {
                    "cohortName": "failover",
                    "namespaceSelector": {},
                    "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
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
                "metadata": {"name": "q", "namespace": team},
                "spec": {"clusterQueue": team},
            }
        )
    return documents


def pod_job(shared: Path, namespace: str, name: str, seconds: float, gpus: int) -> dict[str, Any]:
    script = POD_SCRIPT.format(shared=shared, namespace=namespace, name=name, seconds=seconds)
    requests: dict[str, Any] = {"cpu": "100m"}
    if gpus:
        requests["nvidia.com/gpu"] = gpus
    priority = "high" if namespace == "team-high" else "low"
    return job(
        name, namespace, ["/bin/sh", "-c", script], requests, **{"kueue.x-k8s.io/priority-class": priority}
    )


# ------------------------------------------------------------------------------------------ the replicas
@dataclass
class Cluster:
    """The live replicas (every one serves the API; one leads), started and killed by the bench."""

    root: Path
    url: str
    node_args: Sequence[str]
    token: str
    replicas: list[Server] = field(default_factory=list)
    dead: list[Server] = field(default_factory=list)
    started: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start_replica(self) -> Server:
        with self.lock:
            index = self.started
            self.started += 1
        root = self.root / f"replica-{index}"
        root.mkdir(mode=0o711)
        args = [*self.node_args, "--workdir", str(self.root / "work"), "--identity", f"replica-{index}"]
        server = Server(root, self.url, args, token=self.token)
        server.start(timeout_s=180)
        with self.lock:
            self.replicas.append(server)
        return server

    def urls(self) -> list[str]:
        with self.lock:
            return [s.url for s in self.replicas]

    def status(self, server: Server) -> dict[str, Any] | None:
        try:
            response = httpx.get(
                f"{server.url}{API}/status", headers={"Authorization": f"Bearer {self.token}"}, timeout=5
            )
            loop: dict[str, Any] = response.json()["loop"]
            return loop
        except (httpx.HTTPError, ValueError, KeyError):
            return None

    def leader(self, timeout_s: float) -> tuple[Server, dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                replicas = list(self.replicas)
            for server in replicas:
                status = self.status(server)
                if status and status.get("leader"):
                    return server, status
            time.sleep(0.1)
        raise RuntimeError(f"no replica led within {timeout_s:.0f}s")

    def kill(self, server: Server) -> float:
        """SIGKILL; the time.time() of the kill."""
        assert server.process is not None
        with self.lock:
            self.replicas.remove(server)
            self.dead.append(server)
        killed = time.time()
        server.process.kill()
        server.process.wait()
        return killed

    def stop_all(self) -> None:
        with self.lock:
            replicas = list(self.replicas)
        for server in replicas:
            server.stop()


@dataclass
class Kill:
    label: str
    victim: str = ""
    at: float = 0.0
    new_leader: str = ""
    leader_since: float | None = None  # the new leader's /status leaderSince
    seen_at: float | None = None  # when the bench saw it lead
    replacement_ready_s: float | None = None
    first_admission: float | None = None  # the condition's time (the step's clock)
    admission_seen: float | None = None  # when the bench first read a committed admission
    adopted: int = 0
    requeued_by_recovery: int = 0
    trigger: str = ""


def kill_leader(cluster: Cluster, kill: Kill, timeout_s: float, view: StoreView) -> threading.Thread:
    """Kill the leader, start a replacement, wait until a replica leads; the returned thread watches the
    store for the first admission committed after the kill (join it before the audit)."""
    victim, status = cluster.leader(timeout_s)
    kill.victim = str(status.get("identity"))
    kill.at = cluster.kill(victim)
    log(f"kill {kill.label}: SIGKILL {kill.victim} (pid {victim.process.pid if victim.process else '?'})")
    replacement: dict[str, float] = {}

    def replace() -> None:
        cluster.start_replica()
        replacement["ready"] = time.time()

    def watch() -> None:
        watch_view = StoreView(cluster.url)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and kill.admission_seen is None:
                if watch_view.admissions_since(kill.at):
                    kill.admission_seen = time.time()
                time.sleep(0.05)
        finally:
            watch_view.close()

    watcher = threading.Thread(target=watch, name="admission-watch")
    watcher.start()
    thread = threading.Thread(target=replace, name="replacement")
    thread.start()
    _, status = cluster.leader(timeout_s)
    kill.seen_at = time.time()
    kill.new_leader = str(status.get("identity"))
    kill.leader_since = status.get("leaderSince")
    log(f"kill {kill.label}: {kill.new_leader} leads after {kill.seen_at - kill.at:.1f}s")
    thread.join()
    kill.replacement_ready_s = replacement["ready"] - kill.at if "ready" in replacement else None

    return watcher


# -------------------------------------------------------------------------------------------- the store
class StoreView:
    """Reads of the shared store (never writes)."""

    def __init__(self, url: str) -> None:
        self.store = Store(url)

    def rows(self, sql: str, **params: Any) -> list[Any]:
        from sqlalchemy import text

        with self.store.transaction() as session:
            return list(session.execute(text(sql), params))

    def states(self) -> Counter[str]:
        return Counter(
            {row[0]: row[1] for row in self.rows("SELECT state, count(*) FROM workloads GROUP BY state")}
        )

    def running_pods(self, like: str = "%") -> int:
        sql = (
            "SELECT count(*) FROM pods p JOIN workloads w ON w.id = p.workload_id"
            " WHERE p.state = 'Running' AND w.name LIKE :like"
        )
        return int(self.rows(sql, like=like)[0][0])

    def first_preemption_since(self, since: float) -> float | None:
        sql = (
            "SELECT min(time) FROM conditions WHERE type = 'Evicted' AND reason = 'Preempted' AND time >= :t"
        )
        value = self.rows(sql, t=since)[0][0]
        return None if value is None else float(value)

    def admissions_since(self, since: float) -> int:
        types = ", ".join(f"'{t}'" for t in ADMISSION_TYPES)
        sql = f"SELECT count(*) FROM conditions WHERE type IN ({types}) AND time > :t"
        return int(self.rows(sql, t=since)[0][0])

    def close(self) -> None:
        self.store.close()


def wait(
    what: str, condition: Callable[[], bool], timeout_s: float, view: StoreView, poll_s: float = 0.5
) -> None:
    deadline = time.monotonic() + timeout_s
    last = 0.0
    while time.monotonic() < deadline:
        if condition():
            return
        if time.monotonic() - last > 10:
            log(f"waiting for {what}: workloads {dict(view.states())}")
            last = time.monotonic()
        time.sleep(poll_s)
    raise RuntimeError(f"timed out after {timeout_s:.0f}s waiting for {what}")


# -------------------------------------------------------------------------------------------- submitting
@dataclass
class Submissions:
    accepted: dict[tuple[str, str], str] = field(default_factory=dict)  # (ns, name) -> first action
    actions: Counter[str] = field(default_factory=Counter)
    retries: Counter[str] = field(default_factory=Counter)  # why
    refused: list[str] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    submitted: set[tuple[str, str]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return len(self.accepted)


def submit(
    cluster: Cluster,
    token: str,
    documents: Sequence[dict[str, Any]],
    out: Submissions,
    offset: int,
    timeout_s: float,
) -> None:
    """Apply each document (one per request) until a replica accepts it, rotating over the replicas on
    connection errors and 5xx; 4xx other than 429 is a refusal."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with httpx.Client(timeout=60) as http:
        for document in documents:
            key = (document["metadata"]["namespace"], document["metadata"]["name"])
            with out.lock:
                out.submitted.add(key)
            body = json.dumps({"apiVersion": "v1", "kind": "List", "items": [document]})
            deadline = time.monotonic() + timeout_s
            attempt = 0
            while True:
                urls = cluster.urls()
                url = urls[(offset + attempt) % len(urls)] if urls else None
                attempt += 1
                why = ""
                started = time.perf_counter()
                try:
                    if url is None:
                        raise httpx.ConnectError("no replica up")
                    response = http.post(f"{url}{API}/apply", content=body, headers=headers)
                except httpx.HTTPError as error:
                    why = type(error).__name__
                    response = None
                if response is not None and response.status_code == 200:
                    action = response.json()["results"][0]["action"]
                    with out.lock:
                        out.latencies_s.append(time.perf_counter() - started)
                        out.actions[action] += 1
                        out.accepted.setdefault(key, action)
                    break
                if response is not None and response.status_code == 429:
                    why = "429"
                    time.sleep(float(response.headers.get("Retry-After", "1")))
                elif response is not None and response.status_code < 500:
                    with out.lock:
                        out.refused.append(f"{key[0]}/{key[1]}: {response.status_code} {response.text[:300]}")
                    break
                else:
                    why = why or str(response.status_code if response is not None else "?")
                    time.sleep(0.2)
                with out.lock:
                    out.retries[why] += 1
                if time.monotonic() > deadline:
                    with out.lock:
                        out.refused.append(f"{key[0]}/{key[1]}: no replica accepted it in {timeout_s:.0f}s")
                    break


def submit_in_threads(
    cluster: Cluster,
    tokens: dict[str, list[str]],
    documents: Sequence[dict[str, Any]],
    out: Submissions,
    timeout_s: float,
) -> list[threading.Thread]:
    """Started threads, one per token, each applying its namespace's share of ``documents`` in order."""
    by_namespace: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for document in documents:
        by_namespace[document["metadata"]["namespace"]].append(document)
    threads = []
    offset = 0
    for namespace, namespace_tokens in tokens.items():
        share = by_namespace.get(namespace, [])
        for i, token in enumerate(namespace_tokens):
            mine = share[i :: len(namespace_tokens)]
            thread = threading.Thread(
                target=submit, args=(cluster, token, mine, out, offset, timeout_s), name=f"client-{offset}"
            )
            offset += 1
            thread.start()
            threads.append(thread)
    return threads


# --------------------------------------------------------------------------------------------- the audit
@dataclass
class Run:
    attempt: str
    start: float
    devices: tuple[str, ...]
    end: float | None = None
    how: str = ""  # "end", "term" or "" (killed without a mark)


def read_marks(path: Path) -> list[Run]:
    """A workload's runs from its pods' marks: ``start ATTEMPT TIME PID DEVICES``, then ``end`` or
    ``term`` ``ATTEMPT TIME PID`` (none when the run was killed by SIGKILL or never got that far)."""
    runs: list[tuple[str, Run]] = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        if parts[0] == "start" and len(parts) >= 5:
            devices = () if parts[4] == "-" else tuple(parts[4].split(","))
            runs.append((parts[3], Run(parts[1], float(parts[2]), devices)))
        elif parts[0] in ("end", "term"):
            for pid, run in reversed(runs):
                if pid == parts[3] and run.end is None:
                    run.end, run.how = float(parts[2]), parts[0]
                    break
    return [run for _, run in runs]


def overlaps(
    intervals: dict[str, list[tuple[float, float, str]]],
) -> list[tuple[str, str, float, str, float]]:
    """Intervals on one device that overlap another's: (device, earlier owner, its end, later owner, its
    start), each device's intervals sorted by start."""
    found = []
    for device, spans in intervals.items():
        spans.sort()
        latest_end, latest_owner = float("-inf"), ""
        for start, end, owner in spans:
            if start < latest_end and owner != latest_owner:
                found.append((device, latest_owner, latest_end, owner, start))
            if end > latest_end:
                latest_end, latest_owner = end, owner
    return found


def overlap_text(found: tuple[str, str, float, str, float]) -> str:
    device, first, end, second, start = found
    return f"gpu {device}: {first} until {end:.3f}, {second} from {start:.3f} ({end - start:.3f}s together)"


def audit(view: StoreView, shared: Path, out: Submissions, kills: Sequence[Kill]) -> dict[str, Any]:
    workloads = view.rows("SELECT id, namespace, name, state FROM workloads")
    by_key = Counter((w.namespace, w.name) for w in workloads)
    ids = {w.id: (w.namespace, w.name) for w in workloads}
    accepted = set(out.accepted)
    stored = set(by_key)
    finished = Counter(
        ids[c.workload_id]
        for c in view.rows("SELECT workload_id FROM conditions WHERE type = 'Finished'")
        if c.workload_id in ids
    )
    finished_reasons = Counter(
        c.reason for c in view.rows("SELECT reason FROM conditions WHERE type = 'Finished'")
    )
    states = Counter(w.state for w in workloads)
    # the pods' marks
    completed_twice, succeeded_unmarked, reruns, killed_unmarked = [], [], 0, 0
    intervals: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    starts_per_workload: Counter[int] = Counter()
    for w in workloads:
        path = shared / f"{w.namespace}.{w.name}"
        runs = read_marks(path) if path.exists() else []
        ends = sum(r.how == "end" for r in runs)
        starts_per_workload[len(runs)] += 1
        reruns += max(0, len(runs) - 1)
        killed_unmarked += sum(r.how == "" for r in runs)
        if ends > 1:
            completed_twice.append(f"{w.namespace}/{w.name}")
        if w.state == "Succeeded" and ends == 0:
            succeeded_unmarked.append(f"{w.namespace}/{w.name}")
        for i, run in enumerate(runs):
            if run.end is not None:
                for device in run.devices:
                    intervals[device].append((run.start, run.end, f"{w.namespace}/{w.name}#{i}"))
    marked_overlaps = overlaps(intervals)
    violations_path = shared / "violations"
    lock_lines = violations_path.read_text().splitlines() if violations_path.exists() else []
    # the pods' rows
    pod_spans: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for pod in view.rows("SELECT workload_id, name, devices, started_at, finished_at FROM pods"):
        devices = pod.devices if isinstance(pod.devices, list) else json.loads(pod.devices or "[]")
        if pod.started_at is None or pod.finished_at is None:
            continue
        for device in devices:
            owner = "/".join(ids.get(pod.workload_id, ("?", "?"))) + f"/{pod.name}"
            pod_spans[str(device)].append((pod.started_at, pod.finished_at, owner))
    # a pod-row overlap is a double booking when the two pods' own marks overlap too (caught above, and
    # by flock); otherwise a row's finishedAt was written after the GPU went to the next pod
    marks_of: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for device, spans in intervals.items():
        for start, end, owner in spans:
            marks_of[(owner.split("#")[0], device)].append((start, end))
    row_overlaps, rows_only = [], []
    for found in overlaps(pod_spans):
        device, first, end, second, start = found
        a = marks_of[("/".join(first.split("/")[:2]), device)]
        b = marks_of[("/".join(second.split("/")[:2]), device)]
        ended = max((e for _, e in a if e <= start + 1e-9), default=None)
        if any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b):
            row_overlaps.append(overlap_text(found))
        else:
            note = f"; {first}'s own end mark {start - ended:.3f}s before" if ended is not None else ""
            rows_only.append(overlap_text(found) + note)
    # per kill, from the store's history
    for index, kill in enumerate(kills):
        until = kills[index + 1].at if index + 1 < len(kills) else time.time() + 1e6
        types = ", ".join(f"'{t}'" for t in ADMISSION_TYPES)
        value = view.rows(
            f"SELECT min(time) FROM conditions WHERE type IN ({types}) AND time > :t", t=kill.at
        )[0][0]
        kill.first_admission = None if value is None or value >= until else float(value)
        kill.adopted = int(
            view.rows(
                "SELECT count(*) FROM events WHERE reason = 'Adopted' AND time > :t AND time < :u",
                t=kill.at,
                u=until,
            )[0][0]
        )
        kill.requeued_by_recovery = int(
            view.rows(
                "SELECT count(DISTINCT workload_id) FROM conditions WHERE reason = 'ControlPlaneRestarted'"
                " AND time > :t AND time < :u",
                t=kill.at,
                u=until,
            )[0][0]
        )
    preempted = int(
        view.rows("SELECT count(*) FROM conditions WHERE type = 'Evicted' AND reason = 'Preempted'")[0][0]
    )
    problems = {
        "lost (accepted, not stored)": sorted(f"{ns}/{n}" for ns, n in accepted - stored),
        "stored but never submitted": sorted(f"{ns}/{n}" for ns, n in stored - out.submitted),
        "refused or never accepted": list(out.refused),
        "duplicated": sorted(f"{ns}/{n}" for (ns, n), c in by_key.items() if c > 1),
        "not Succeeded": sorted(
            f"{w.namespace}/{w.name}={w.state}" for w in workloads if w.state != "Succeeded"
        ),
        "Finished condition count != 1": sorted(
            f"{ns}/{n}={finished[(ns, n)]}" for ns, n in stored if finished[(ns, n)] != 1
        ),
        "ran to completion twice (two end marks)": completed_twice,
        "Succeeded without a completed run": succeeded_unmarked,
        "GPU lock conflicts (flock, from the pods)": lock_lines,
        "overlapping marked runs on a GPU": [overlap_text(o) for o in marked_overlaps],
        "overlapping pod rows on a GPU, the pods' marks too": row_overlaps,
    }
    return {
        "stored": len(workloads),
        "accepted": len(accepted),
        "states": dict(sorted(states.items())),
        "finished_reasons": dict(finished_reasons),
        "runs_per_workload": dict(sorted(starts_per_workload.items())),
        "reruns": reruns,
        "killed_without_mark": killed_unmarked,
        "preemptions": preempted,
        "rows_only_overlaps": rows_only,
        "problems": problems,
        "ok": not any(problems.values()),
    }


# ---------------------------------------------------------------------------------------------- scenario
def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[Kill], Submissions]:
    from gpuq.run.gpus import virtual_devices

    node_args = [
        *("--gpus", str(args.gpus), "--gpu-model", args.gpu_model),
        *("--cpus", "64", "--memory", "512Gi", "--pods", "1000"),
        *("--lease-seconds", str(args.lease_seconds), "--rate-limit", "0"),
    ]
    kills = [Kill("a: mid-submission"), Kill("b: mid-run"), Kill("c: mid-preemption")]
    out = Submissions()
    with tempfile.TemporaryDirectory(prefix="gpuq-bench-failover-") as tmp:
        root = Path(tmp)
        root.chmod(0o711)  # pods run as their namespace's user: they must pass it to reach their dirs
        shared = root / "shared"
        shared.mkdir()
        shared.chmod(0o1777)
        for device in virtual_devices(args.gpus, args.gpu_model):
            for name in {str(device.index), device.uuid}:
                lock = shared / f"gpu-{name}.lock"
                lock.touch()
                lock.chmod(0o666)
        node_args += ["--pod-bind", str(shared)]
        postgres = None if args.sqlite else args.postgres
        with database(root, postgres) as url:
            cluster = Cluster(root, url, node_args, token=secrets.token_urlsafe(24))
            view: StoreView | None = None
            report: dict[str, Any] = {}
            problems: list[str] = []
            try:
                log(f"starting 2 replicas on {'SQLite' if args.sqlite else 'PostgreSQL'}")
                cluster.start_replica()
                cluster.leader(60)
                cluster.start_replica()
                view = StoreView(url)
                report = scenario(args, cluster, view, shared, kills, out)
                report["audit"] = audit(view, shared, out, kills)
            finally:
                cluster.stop_all()
                everyone = cluster.replicas + cluster.dead
                problems = sorted({p for server in everyone for p in server.log_problems()})
                audit_ = report.get("audit", {})
                report_ok = bool(audit_.get("ok")) and not audit_.get("rows_only_overlaps")
                if view is not None:
                    if not report_ok or any(" ERROR " in server.log_text() for server in everyone):
                        log(f"logs, marks and store rows kept in {keep(root, everyone, view)}")
                    view.close()
    report["log_problems"] = problems[:15]
    report["backend"] = "sqlite" if args.sqlite else "postgresql"
    return report, kills, out


def scenario(
    args: argparse.Namespace,
    cluster: Cluster,
    view: StoreView,
    shared: Path,
    kills: list[Kill],
    out: Submissions,
) -> dict[str, Any]:
    admin = {"Authorization": f"Bearer {cluster.token}", "Content-Type": "application/json"}
    body = json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": config_documents(args.cpu_per_team, args.gpus_per_team)}
    )
    response = httpx.post(f"{cluster.urls()[0]}{API}/apply", content=body, headers=admin, timeout=60)
    if response.status_code != 200:
        raise RuntimeError(f"configuration refused: {response.text[:2000]}")
    high_clients = max(1, args.clients // 4)
    namespaces = ["team-low"] * (args.clients - high_clients) + ["team-high"] * high_clients
    member_tokens = add_members(cluster.url, namespaces)
    tokens: dict[str, list[str]] = defaultdict(list)
    for namespace, token in zip(namespaces, member_tokens, strict=True):
        tokens[namespace].append(token)
    main = [
        pod_job(
            shared,
            "team-high" if i % 4 == 3 else "team-low",
            f"job-{i:05d}",
            args.job_seconds,
            1 if args.gpu_every and i % args.gpu_every == 0 else 0,
        )
        for i in range(args.jobs)
    ]
    started = time.time()
    log(f"submitting {len(main):,} jobs from {args.clients} clients")
    threads = submit_in_threads(cluster, tokens, main, out, args.request_timeout)
    # (a) mid-submission
    wait("a third of the submissions", lambda: out.count() >= len(main) // 3, args.timeout, view, 0.1)
    kills[0].trigger = f"{out.count()} of {len(main)} accepted"
    watchers = [kill_leader(cluster, kills[0], args.timeout, view)]
    for thread in threads:
        thread.join()
    submitted = time.time()
    log(f"submissions done in {submitted - started:.1f}s: {dict(out.actions)}, retries {dict(out.retries)}")
    # (b) mid-run
    wait(
        "pods running (or every job ended)",
        lambda: view.running_pods("job-%") > 0 or sum(view.states()[s] for s in ENDED) >= len(out.accepted),
        args.timeout,
        view,
        0.05,
    )
    if not view.running_pods("job-%"):  # the server kept up: every job ended with the submissions
        running = [
            pod_job(shared, "team-low", f"job-run-{i:02d}", max(3.0, args.job_seconds), 0) for i in range(8)
        ]
        log("every job ended with the submissions: 8 longer jobs for the mid-run kill")
        for thread in submit_in_threads(
            cluster, {"team-low": tokens["team-low"][:1]}, running, out, args.request_timeout
        ):
            thread.join()
        wait("pods running", lambda: view.running_pods("job-%") > 0, args.timeout, view, 0.05)
    kills[1].trigger = f"{view.running_pods('job-%')} pods running, workloads {dict(view.states())}"
    watchers.append(kill_leader(cluster, kills[1], args.timeout, view))

    def ended(count: int) -> Callable[[], bool]:
        def check() -> bool:
            states = view.states()
            return sum(states[s] for s in ENDED) >= count

        return check

    wait("every job to end", ended(len(out.accepted)), args.timeout, view)
    drained = time.time()
    log(f"all {len(out.accepted):,} jobs ended {drained - started:.1f}s after the first submission")
    # (c) mid-preemption: long low-priority GPU jobs on every GPU, then a high-priority burst
    long_jobs = [pod_job(shared, "team-low", f"long-{i:02d}", args.long_seconds, 1) for i in range(args.gpus)]
    for thread in submit_in_threads(
        cluster, {"team-low": tokens["team-low"][:1]}, long_jobs, out, args.request_timeout
    ):
        thread.join()
    wait(
        "the long jobs to run", lambda: view.running_pods("long-%") >= len(long_jobs), args.timeout, view, 0.1
    )
    burst = [
        pod_job(shared, "team-high", f"burst-{i:02d}", args.job_seconds, 1) for i in range(args.gpus_per_team)
    ]
    burst_at = time.time()
    threads = submit_in_threads(cluster, {"team-high": tokens["team-high"]}, burst, out, args.request_timeout)
    preempted_at: list[float] = []

    def preempting() -> bool:
        found = view.first_preemption_since(burst_at - 1)
        if found is not None:
            preempted_at.append(found)
        return found is not None

    wait("a preemption by the burst", preempting, args.timeout, view, 0.02)
    kills[2].trigger = f"Evicted/Preempted condition {time.time() - preempted_at[0]:.2f}s old"
    watchers.append(kill_leader(cluster, kills[2], args.timeout, view))
    for thread in threads:
        thread.join()
    wait("every job to end", ended(len(out.accepted)), args.timeout, view)
    for watcher in watchers:
        watcher.join()
    finished = time.time()
    log(f"everything ended; {finished - started:.1f}s in all")
    return {
        "jobs": len(out.accepted),
        "submission_s": submitted - started,
        "main_drain_s": drained - started,
        "wall_s": finished - started,
    }


# ----------------------------------------------------------------------------------------------- report
def keep(root: Path, replicas: Sequence[Server], view: StoreView) -> Path:
    """A copy, outside the temporary directory, of the replicas' logs, the pods' marks and logs and the
    store's workloads, pods, conditions and events (JSON): what a violation is diagnosed from."""
    kept = Path(tempfile.gettempdir()) / f"gpuq-bench-failover-kept-{time.strftime('%Y%m%d-%H%M%S')}"
    shutil.copytree(root / "shared", kept / "shared")
    if (root / "work" / "logs").is_dir():
        shutil.copytree(root / "work" / "logs", kept / "pod-logs")
    for server in replicas:
        shutil.copy(server.log_path, kept / f"{server.root.name}.log")
    for table in ("workloads", "pods", "conditions", "events", "leases"):
        rows = [dict(row._mapping) for row in view.rows(f"SELECT * FROM {table}")]
        (kept / f"{table}.json").write_text(json.dumps(rows, default=str))
    return kept


def print_report(report: dict[str, Any], kills: Sequence[Kill], out: Submissions) -> None:
    audit_ = report["audit"]
    print(
        f"gpuq serve failover, {report['backend']}: {report['jobs']:,} workloads accepted"
        f" (submissions {report['submission_s']:.1f}s, main jobs drained {report['main_drain_s']:.1f}s,"
        f" all done {report['wall_s']:.1f}s)"
    )
    print(
        f"  requests: actions {dict(out.actions)} · retries {dict(out.retries)} · refused {len(out.refused)}"
        f"\n  API latency (POST /apply, accepted): {quantiles_text(out.latencies_s, 'ms', 1000)}"
    )
    print(
        "  times after the kill: leads = the new leader's leaderSince; 1st admit = the first admission's"
        " condition time (its step's clock); seen = when the bench read it committed in the store"
    )
    header = f"  {'kill':<20} {'killed':<11} {'new leader':<11} {'leads':>7} {'1st admit':>10} {'seen':>7}"
    print(header + f" {'adopted':>8} {'requeued':>9} {'replica up':>11}  trigger")
    for kill in kills:
        leads = f"{kill.leader_since - kill.at:.2f}s" if kill.leader_since else "n/a"
        admit = f"{kill.first_admission - kill.at:.2f}s" if kill.first_admission else "n/a"
        seen = f"{kill.admission_seen - kill.at:.2f}s" if kill.admission_seen else "n/a"
        up = f"{kill.replacement_ready_s:.1f}s" if kill.replacement_ready_s is not None else "n/a"
        print(
            f"  {kill.label:<20} {kill.victim:<11} {kill.new_leader:<11} {leads:>7} {admit:>10} {seen:>7}"
            f" {kill.adopted:>8} {kill.requeued_by_recovery:>9} {up:>11}  {kill.trigger}"
        )
    print(
        f"  store: {audit_['stored']:,} workloads for {audit_['accepted']:,} accepted"
        f" · states {audit_['states']}"
        f" · Finished reasons {audit_['finished_reasons']} · preemptions {audit_['preemptions']}"
        f"\n  pods' marks: runs per workload {audit_['runs_per_workload']} · reruns {audit_['reruns']}"
        f" · runs killed without a mark {audit_['killed_without_mark']}"
    )
    for name, found in audit_["problems"].items():
        shown = f"{len(found)}" + (f"  e.g. {found[:3]}" if found else "")
        print(f"  {'ok ' if not found else 'BAD'} {name}: {shown}")
    rows_only = audit_["rows_only_overlaps"]
    if rows_only:
        print(
            f"  note: {len(rows_only)} pod-row pairs overlap on a GPU, the pods' own marks and locks do not"
            f" (a row's finishedAt written after its GPU went to the next pod), e.g. {rows_only[:2]}"
        )
    print(
        "  → OK: no workload lost, duplicated or completed twice; no GPU held twice"
        if audit_["ok"]
        else "  → VIOLATIONS"
    )
    for line in report["log_problems"]:
        print(f"  server log: {line}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=2000, help="main Jobs to submit [2000]")
    parser.add_argument(
        "--clients", type=int, default=8, help="concurrent API clients (a quarter team-high) [8]"
    )
    parser.add_argument(
        "--job-seconds", type=float, default=0.2, help="how long a main Job's pod sleeps [0.2]"
    )
    parser.add_argument(
        "--long-seconds", type=float, default=10.0, help="the long jobs' sleep, kill (c) [10]"
    )
    parser.add_argument(
        "--gpu-every", type=int, default=5, help="every Nth main Job also asks a GPU; 0: none [5]"
    )
    parser.add_argument("--gpus", type=int, default=8, help="virtual GPUs of the node [8]")
    parser.add_argument("--gpu-model", default="A100-80GB")
    parser.add_argument("--gpus-per-team", type=int, default=4, help="nominal GPU quota per ClusterQueue [4]")
    parser.add_argument(
        "--cpu-per-team", default="2", help="nominal CPU quota per ClusterQueue (100m a pod) [2]"
    )
    parser.add_argument("--lease-seconds", type=float, default=3.0, help="gpuq serve --lease-seconds [3]")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for any phase [1800]")
    parser.add_argument(
        "--request-timeout", type=float, default=300, help="seconds to get one Job accepted [300]"
    )
    parser.add_argument("--sqlite", action="store_true", help="one SQLite file shared by the replicas")
    parser.add_argument(
        "--postgres", default=POSTGRES_URL, metavar="URL", help=f"PostgreSQL [{POSTGRES_URL}]"
    )
    parser.add_argument("--quick", action="store_true", help="150 jobs, 4 clients, 4-second long jobs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.clients, args.long_seconds = 150, 4, 4.0
    if args.gpus_per_team * 2 > args.gpus:
        parser.error("--gpus must hold both teams' GPU quota")
    report, kills, out = run(args)
    if args.json:
        report["kills"] = [kill.__dict__ for kill in kills]
        print(json.dumps(report, indent=2, default=str))
    else:
        print_report(report, kills, out)
    sys.exit(0 if report["audit"]["ok"] else 1)


if __name__ == "__main__":
    main()
