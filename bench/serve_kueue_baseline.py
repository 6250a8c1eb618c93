"""Kueue's scheduler performance baseline replayed in real time against `gpuq serve`.

`examples/kueue-perf-baseline/` (5 cohorts x 6 ClusterQueues; per queue 350 small / 100
medium / 50 large single-pod workloads created from time 0 every 100 / 500 / 1200 ms,
running 200 / 500 / 1000 ms from admission, priorities 50 / 100 / 200, 1 / 5 / 20 CPUs)
is replayed against a `gpuq serve` subprocess on a fresh SQLite store (or PostgreSQL with
`--postgres`), whose node is declared with as many CPUs as the queues' nominal quota:

1. the arrival list is the scenario's own generator (`plan_scenario` + `load_workloads`) on
   a copy of the scenario cut to `--queues` queues and `--scale` of each class;
2. at each arrival time the workloads due are created through `POST /apply` (one request
   per instant, as admin), each a Job whose command sleeps its runtime (`/bin/sleep 0.2`):
   the runtime counts from the pod's start, which follows admission;
3. when every workload has ended, each one's condition history is read
   (`GET .../workloads/{name}`): quota is held from each `Admitted` to the next `Requeued`
   (a preemption completed) or `Finished`.

Printed side by side with the simulator's prediction for the same cut of the scenario (run
in-process as `bench/simulate.py`'s `run_scenario` does) and, at full size, Kueue's
published reference (`rangespec.yaml`): ClusterQueue CPU utilisation (CPU held over time ÷
(Σ nominal quota × span)), the mean time from creation to first admission per class, and
the wall time. The scenario's generator stores at least 1 s per workload (`duration_s =
max(1.0, ...)`), so the simulator is run twice: with the generator's durations (what `gpuq
simulate` predicts) and with the runtimes the scenario declares (what is replayed here).
Usage:

    .venv/bin/python bench/serve_kueue_baseline.py --scale 0.1 --queues 6   # about a minute
    .venv/bin/python bench/serve_kueue_baseline.py                          # full size, 15,000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from serve import (
    POSTGRES_URL,
    Server,
    account,
    api,
    apply,
    apply_ok,
    database,
    job,
    list_workloads,
    percentile,
    running_server,
    wait_until_ended,
)

from gpuq.sim.metrics import variant_metrics, workload_class
from gpuq.sim.scenario import load_workloads, plan_scenario, prepare
from gpuq.sim.traces.model import TraceJob, TraceRead

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "examples/kueue-perf-baseline"
CLASSES = ("small", "medium", "large")
KUEUE_REFERENCE = {
    "cpu_utilisation": 0.587,
    "to_admission_mean_s": {"small": 215.0, "medium": 76.8, "large": 6.7},
    "wall_s": 351.0,
}
"""Kueue's baseline averages (`test/performance/scheduler/configs/baseline/rangespec.yaml`)."""


# ---------------------------------------------------------------------------------------- the scenario cut
@dataclass(frozen=True)
class Cut:
    """The baseline cut to a number of queues and a fraction of each class: files, arrivals, runtimes."""

    directory: Path
    config: list[dict[str, Any]]  # the queues' objects, as applied
    trace: TraceRead  # the generator's arrivals
    runtimes_s: dict[tuple[str, str], float]  # (namespace, class) -> the runtime the scenario declares
    nominal_cpu: int  # Σ nominal CPU quota of the queues


def cut_scenario(directory: Path, queues: int, scale: float) -> Cut:
    """Write ``queues.yaml`` and ``scenario.yaml`` for the first ``queues`` queues with ``scale`` of each
    class (at least one workload) into ``directory``; read the arrivals with the scenario's generator."""
    documents = [d for d in yaml.safe_load_all((BASELINE / "queues.yaml").read_text()) if d]
    cluster_queues = [d["metadata"]["name"] for d in documents if d["kind"] == "ClusterQueue"][:queues]
    if len(cluster_queues) < queues:
        raise SystemExit(f"--queues: the baseline has {len(cluster_queues)} ClusterQueues")
    chosen = set(cluster_queues)
    config = [
        d
        for d in documents
        if d["kind"] == "ResourceFlavor"
        or d["metadata"]["name"] in chosen
        or d["metadata"].get("namespace") in chosen
    ]
    scenario = yaml.safe_load((BASELINE / "scenario.yaml").read_text())
    generate = scenario["spec"]["workloads"]["generate"]
    teams = [t for t in generate["teams"] if t["namespace"] in chosen]
    for team in teams:
        team["count"] = max(1, round(team["count"] * scale))
    generate["teams"] = teams
    (directory / "queues.yaml").write_text(yaml.safe_dump_all(config, sort_keys=False))
    (directory / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    plan = plan_scenario([str(directory / "scenario.yaml")])
    trace = load_workloads(plan)
    assert plan.spec is not None and plan.spec.workloads.generate is not None
    runtimes = {}
    for team_spec in plan.spec.workloads.generate.teams:
        assert team_spec.duration.constant is not None, "the baseline's durations are constants"
        runtimes[(team_spec.namespace, team_spec.name_prefix or team_spec.queue)] = (
            team_spec.duration.constant
        )
    nominal = sum(
        int(r["nominalQuota"])
        for d in config
        if d["kind"] == "ClusterQueue"
        for g in d["spec"]["resourceGroups"]
        for f in g["flavors"]
        for r in f["resources"]
        if r["name"] == "cpu"
    )
    return Cut(directory, config, trace, runtimes, nominal)


def declared(cut: Cut) -> TraceRead:
    """The arrivals with the runtimes the scenario declares instead of the generator's (at least 1 s)."""
    jobs = tuple(
        dataclasses.replace(j, duration_s=cut.runtimes_s[(j.namespace, workload_class(j.name))])
        for j in cut.trace.jobs
    )
    return dataclasses.replace(cut.trace, jobs=jobs)


# ------------------------------------------------------------------------------------------ the simulator
def simulate(cut: Cut, trace: TraceRead) -> dict[str, Any]:
    """The simulator's figures for ``trace`` on the cut's configuration, as `gpuq simulate` computes them."""
    started = time.perf_counter()
    plan = plan_scenario([str(cut.directory / "scenario.yaml")])
    prepared = prepare(plan, plan.variants[0], trace)
    result = prepared.simulation().run()
    metrics = variant_metrics(plan.variants[0].name, result, prepared.config)
    return {
        "cpu_utilisation": metrics["quota_utilisation"].get("cpu"),
        "to_admission_mean_s": {c["name"]: c["time_to_admission_s"]["mean"] for c in metrics["classes"]},
        "wall_s": metrics["span_s"],
        "preemptions": metrics["workloads"]["preemptions"],
        "finished": metrics["workloads"]["finished"],
        "bench_wall_s": time.perf_counter() - started,
    }


# ------------------------------------------------------------------------------------------- the replay
def priority_classes() -> list[dict[str, Any]]:
    """The baseline's integer priorities as WorkloadPriorityClasses a Job's label can name."""
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": f"baseline-{value}"},
            "value": value,
        }
        for value in (50, 100, 200)
    ]


def baseline_job(trace_job: TraceJob, runtime_s: float) -> dict[str, Any]:
    cpu = f"{trace_job.cpu_milli}m" if trace_job.cpu_milli else "1"
    document = job(
        trace_job.name,
        trace_job.namespace,
        ["/bin/sleep", f"{runtime_s:g}"],
        {"cpu": cpu},
        **{"kueue.x-k8s.io/priority-class": f"baseline-{trace_job.priority}"},
    )
    document["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = trace_job.queue
    return document


@dataclass
class Replay:
    started: float = 0.0  # time.time() of arrival time 0
    lags_s: list[float] = field(default_factory=list)  # request sent - scheduled arrival, per batch
    latencies_s: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    scheduled: dict[tuple[str, str], float] = field(default_factory=dict)  # workload -> time.time() due


def replay(server: Server, trace: TraceRead, runtimes: dict[tuple[str, str], float], workers: int) -> Replay:
    """Create the workloads at their arrival times, one apply per instant, ``workers`` requests in flight."""
    batches: dict[float, list[TraceJob]] = defaultdict(list)
    for trace_job in trace.jobs:
        batches[trace_job.submit_s].append(trace_job)
    result = Replay()
    lock = threading.Lock()
    local = threading.local()

    def send(due: float, jobs: list[TraceJob]) -> None:
        if not hasattr(local, "client"):
            local.client = api(server)
        documents = [baseline_job(j, runtimes[(j.namespace, workload_class(j.name))]) for j in jobs]
        sent = time.time()
        try:
            response = apply(local.client, documents)
            status = str(response.status_code)
            text = response.text[:300]
        except httpx.HTTPError as error:
            status, text = type(error).__name__, str(error)
        with lock:
            result.lags_s.append(sent - due)
            result.latencies_s.append(time.time() - sent)
            result.statuses[status] += 1
            if status != "200" and len(result.errors) < 5:
                result.errors.append(
                    f"{len(jobs)} workloads due at +{due - result.started:.1f}s: {status} {text}"
                )

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="replay") as pool:
        result.started = time.time() + 0.5
        for offset in sorted(batches):
            due = result.started + offset
            for j in batches[offset]:
                result.scheduled[(j.namespace, j.name)] = due
            delay = due - time.time()
            if delay > 0:
                time.sleep(delay)
            pool.submit(send, due, batches[offset])
    return result


def details(server: Server, workloads: Sequence[dict[str, Any]], workers: int) -> list[dict[str, Any]]:
    """Each workload with its condition history (one GET each, ``workers`` at a time)."""
    local = threading.local()

    def get(workload: dict[str, Any]) -> dict[str, Any]:
        if not hasattr(local, "client"):
            local.client = api(server)
        response = local.client.get(f"/namespaces/{workload['namespace']}/workloads/{workload['name']}")
        response.raise_for_status()
        found: dict[str, Any] = response.json()
        return found

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="details") as pool:
        return list(pool.map(get, workloads))


def held_intervals(workload: dict[str, Any], until: float) -> list[tuple[float, float]]:
    """When the workload held quota: each ``Admitted`` until the next ``Requeued`` or ``Finished``."""
    intervals: list[tuple[float, float]] = []
    start: float | None = None
    for condition in workload["conditions"]:
        if condition["type"] == "Admitted" and condition["status"] == "True":
            start = condition["time"] if start is None else start
        elif condition["type"] in ("Requeued", "Finished") and start is not None:
            intervals.append((start, condition["time"]))
            start = None
    if start is not None:
        intervals.append((start, until))
    return intervals


def live_figures(
    workloads: Sequence[dict[str, Any]], cut: Cut, replayed: Replay, until: float
) -> dict[str, Any]:
    """Utilisation, time to admission per class and wall time from the workloads' histories."""
    cpu_of = {(j.namespace, j.name): (j.cpu_milli or 1000) / 1000 for j in cut.trace.jobs}
    held_cpu_s = 0.0
    first_admission: dict[str, list[float]] = defaultdict(list)
    last_admission: dict[str, list[float]] = defaultdict(list)
    hold_over_runtime: dict[str, list[float]] = defaultdict(list)
    start_delay: dict[str, list[float]] = defaultdict(list)
    reap_delay: dict[str, list[float]] = defaultdict(list)
    preempted = 0
    for w in workloads:
        key = (w["namespace"], w["name"])
        intervals = held_intervals(w, until)
        held_cpu_s += cpu_of[key] * math.fsum(end - start for start, end in intervals)
        kind = workload_class(w["name"])
        if intervals:
            first_admission[kind].append(intervals[0][0] - w["createdAt"])
            hold_over_runtime[kind].append(
                (intervals[-1][1] - intervals[-1][0]) / cut.runtimes_s[(key[0], kind)]
            )
        if w["admittedAt"] is not None:
            last_admission[kind].append(w["admittedAt"] - w["createdAt"])
            exits = [p["finishedAt"] for p in w["pods"] if p["finishedAt"] is not None]
            if exits and w["finishedAt"] is not None:  # pods' finishedAt: when the executor saw the exit
                start_delay[kind].append(max(exits) - cut.runtimes_s[(key[0], kind)] - w["admittedAt"])
                reap_delay[kind].append(w["finishedAt"] - max(exits))
        preempted += sum(1 for c in w["conditions"] if c["type"] == "Evicted" and c["reason"] == "Preempted")
    finished = [w["finishedAt"] for w in workloads if w["finishedAt"] is not None]
    span = (max(finished) if finished else until) - replayed.started
    created_lag = [w["createdAt"] - replayed.scheduled[(w["namespace"], w["name"])] for w in workloads]

    def mean(values: Sequence[float]) -> float | None:
        return math.fsum(values) / len(values) if values else None

    return {
        "cpu_utilisation": held_cpu_s / (cut.nominal_cpu * span) if span > 0 else None,
        "to_admission_mean_s": {c: mean(first_admission[c]) for c in CLASSES if c in first_admission},
        "to_last_admission_mean_s": {c: mean(last_admission[c]) for c in CLASSES if c in last_admission},
        "quota_hold_over_runtime_p50": {c: percentile(v, 50) for c, v in sorted(hold_over_runtime.items())},
        "start_delay_p50_s": {c: percentile(v, 50) for c, v in sorted(start_delay.items())},
        "reap_delay_p50_s": {c: percentile(v, 50) for c, v in sorted(reap_delay.items())},
        "wall_s": span,
        "preemptions": preempted,
        "creation_lag_s": {p: percentile(created_lag, p) for p in (50, 99)} | {"max": max(created_lag)},
    }


# ---------------------------------------------------------------------------------------------- running
def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpuq-bench-baseline-") as tmp:
        root = Path(tmp)
        root.chmod(0o711)  # pods run as their team's user: they must reach the workdir below it
        (root / "scenario").mkdir()
        cut = cut_scenario(root / "scenario", args.queues, args.scale)
        report: dict[str, Any] = {
            "queues": args.queues,
            "scale": args.scale,
            "workloads": len(cut.trace.jobs),
            "nominal_cpu": cut.nominal_cpu,
            "backend": "postgresql" if args.postgres else "sqlite",
            "simulator_generator": simulate(cut, cut.trace),
            "simulator_declared": simulate(cut, declared(cut)),
        }
        if args.skip_live:
            return report
        node = [
            "--cpus",
            str(args.cpus or cut.nominal_cpu),
            "--pods",
            str(args.pods or cut.nominal_cpu + 100),
            *("--rate-limit", "0"),  # one admin client replays the whole trace and reads every workload back
        ]
        with database(root, args.postgres) as url, running_server(root, url, node) as server:
            with api(server) as admin:
                apply_ok(admin, [*cut.config, *priority_classes()])
                time.sleep(1.0)  # the loop loads the configuration at its next step
                replayed = replay(server, cut.trace, cut.runtimes_s, args.workers)
                submitted = time.time()
                ended = wait_until_ended(admin, args.timeout)
                until = time.time()
                listed = list_workloads(admin)
                status = admin.get("/status").json().get("loop") or {}
            fetch_started = time.perf_counter()
            workloads = details(server, listed, args.workers)
            report["details_fetch_s"] = time.perf_counter() - fetch_started
            report["server_log_problems"] = server.log_problems()[:20]
        placement = {j.name + "@" + j.namespace: j.namespace for j in cut.trace.jobs}
        keyed = [dict(w, name=w["name"] + "@" + w["namespace"]) for w in listed]
        report |= {
            "live": live_figures(workloads, cut, replayed, until),
            "replay_s": submitted - replayed.started,
            "drained": ended is not None,
            "requests": dict(sorted(replayed.statuses.items())),
            "request_errors": replayed.errors,
            "apply_latency_s": {p: percentile(replayed.latencies_s, p) for p in (50, 99)},
            "batches": len(replayed.lags_s),
            "send_lag_s": {p: percentile(replayed.lags_s, p) for p in (50, 99)}
            | {"max": max(replayed.lags_s)},
            "loop": {k: status.get(k) for k in ("steps", "lastError", "configProblem")},
            "accounting": account(placement, keyed),
        }
    return report


def _num(value: float | None, unit: str = "", digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}{unit}"


def print_report(report: dict[str, Any]) -> None:
    full = report["queues"] == 30 and report["scale"] == 1.0
    live_column = [("gpuq serve (live)", report["live"])] if "live" in report else []
    columns: list[tuple[str, dict[str, Any]]] = [
        *live_column,
        ("simulator, declared runtimes", report["simulator_declared"]),
        ("simulator, generator (≥1 s)", report["simulator_generator"]),
        ("Kueue rangespec" + ("" if full else " (full size)"), KUEUE_REFERENCE),
    ]
    print(
        f"Kueue baseline, {report['queues']} ClusterQueues × scale {report['scale']:g}: "
        f"{report['workloads']:,} workloads, nominal CPU {report['nominal_cpu']}"
        + (f", store {report['backend']}" if "live" in report else "")
    )
    rows: list[tuple[str, list[str]]] = [
        ("CPU utilisation", [_num(100 * f["cpu_utilisation"], " %") for _, f in columns]),
        *(
            (
                f"{c}: mean time to admission",
                [_num(f["to_admission_mean_s"].get(c), " s", 2) for _, f in columns],
            )
            for c in CLASSES
        ),
        ("wall time", [_num(f["wall_s"], " s") for _, f in columns]),
        ("preemptions", [str(f.get("preemptions", "n/a")) for _, f in columns]),
    ]
    width = max(len(name) for name, _ in columns) + 2
    print(f"  {'':<30}" + "".join(f"{name:>{width}}" for name, _ in columns))
    for label, values in rows:
        print(f"  {label:<30}" + "".join(f"{v:>{width}}" for v in values))
    live = report.get("live")
    if live is None:
        return
    lag = live["creation_lag_s"]
    send = report["send_lag_s"]
    kept = send["max"] < 1.0 and lag[99] < 1.0
    acc = report["accounting"]
    print(
        f"  replay: {report['batches']:,} applies in {report['replay_s']:.1f}s,"
        f" requests {report['requests']},"
        f" apply latency p50 {report['apply_latency_s'][50] * 1000:,.0f} / p99"
        f" {report['apply_latency_s'][99] * 1000:,.0f} ms\n"
        f"  real time: send lag p50 {send[50]:.3f} / p99 {send[99]:.3f} / max {send['max']:.3f} s,"
        f" created − scheduled p50 {lag[50]:.3f} / p99 {lag[99]:.3f} / max {lag['max']:.3f} s"
        f" → {'kept real time' if kept else 'did NOT keep real time'}\n"
        "  mean time to last admission: "
        + ", ".join(f"{c} {v:.2f} s" for c, v in live["to_last_admission_mean_s"].items())
        + "\n"
        "  quota held ÷ runtime (last admission, p50): "
        + ", ".join(f"{c} {v:.2f}" for c, v in live["quota_hold_over_runtime_p50"].items())
        + "\n  admittedAt → pod exit seen, less the runtime (p50): "
        + ", ".join(f"{c} {v:.2f} s" for c, v in live["start_delay_p50_s"].items())
        + "\n  pod exit seen → workload finishedAt (p50; < 0: a step's changes carry its start time): "
        + ", ".join(f"{c} {v:.2f} s" for c, v in live["reap_delay_p50_s"].items())
        + "\n"
        f"  {'drained' if report['drained'] else 'NOT drained before --timeout'} · loop {report['loop']}"
        f" · histories read in {report['details_fetch_s']:.0f}s\n"
        f"  accounted: {acc['found']:,} listed for {acc['expected']:,} created · states {acc['states']}"
        f" · missing {acc['missing']} · duplicated {acc['duplicated']}"
        f" → {'OK: each exactly once, Succeeded' if acc['ok'] else 'NOT OK'}"
    )
    for error in report["request_errors"]:
        print(f"  refused: {error}")
    for line in report.get("server_log_problems", []):
        print(f"  server log: {line}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of each class per queue [1]")
    parser.add_argument("--queues", type=int, default=30, help="the first N ClusterQueues of the 30 [30]")
    parser.add_argument("--workers", type=int, default=8, help="requests in flight at most [8]")
    parser.add_argument("--cpus", type=int, default=None, help="the node's CPUs [Σ nominal quota]")
    parser.add_argument(
        "--pods", type=int, default=None, help="the node's pod capacity [Σ nominal CPU + 100]"
    )
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds to wait for every workload to end"
    )
    parser.add_argument("--skip-live", action="store_true", help="only the simulator's predictions")
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
    if not 0 < args.scale <= 1 or not 1 <= args.queues <= 30:
        parser.error("--scale must be in (0, 1] and --queues in 1..30")
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print_report(report)
    accounting = report.get("accounting")
    sys.exit(0 if accounting is None or accounting["ok"] else 1)


if __name__ == "__main__":
    main()
