"""``gpuq admit`` at scale: a generated snapshot, the real command, whole-process wall time.

Run from the repository root::

    .venv/bin/python bench/admit_scale.py                       # N = 5,000, 20,000 and 50,000
    .venv/bin/python bench/admit_scale.py --pending 5000 20000  # chosen sizes
    .venv/bin/python bench/admit_scale.py --pending 5000 --keep /tmp/snap --json

For each N, a snapshot is written as manifests into a temporary directory (deterministic
from ``--seed``): 4 ResourceFlavors, ``--cohorts`` Cohorts, a Namespace and a LocalQueue per
ClusterQueue, 4 WorkloadPriorityClasses (0, 10, 100, 1000), ``--queues`` ClusterQueues
(``withinClusterQueue: LowerPriority``, ``reclaimWithinCohort: Any``, 2 to 4 flavors listed
in one platform-wide order, or each queue its own with ``--own-order``; a GPU
``borrowingLimit`` on half of them, StrictFIFO on a fifth) and N pending Kueue Workloads of 1
to 8 GPUs in 1, 2 or 4 pods. Quotas are ``--capacity`` of the GPU demand, spread unevenly.
Then ``gpuq admit -f DIR -o json`` runs as a subprocess, as a user runs it, and the benchmark
prints the whole-process wall time (and the child's CPU time, which other load on the machine
disturbs less), workloads per second (N / wall), the cycles run, why the run stopped, how many
workloads were admitted and the child's peak RSS. It prints figures only and asserts nothing;
see ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GPUQ = ROOT / ".venv" / "bin" / "gpuq"
FLAVORS = ("a100-reserved", "a100-spot", "h100-ondemand", "h100-spot")
PRIORITIES = (("batch", 0), ("standard", 10), ("important", 100), ("critical", 1000))
PRIORITY_WEIGHTS = (50, 25, 15, 10)
EPOCH = 1_767_225_600  # 2026-01-01T00:00:00Z
CPU_PER_GPU = 8  # CPUs of quota per GPU of quota: GPUs bind first
MEMORY_PER_GPU = 96  # GiB


def split(total: int, weights: list[float]) -> list[int]:
    """Split an integer total by weights, exactly (largest remainders)."""
    raw = [total * w / sum(weights) for w in weights]
    parts = [int(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda j: parts[j] - raw[j])[: total - sum(parts)]:
        parts[i] += 1
    return parts


def timestamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def generate(
    directory: Path, pending: int, queues: int, cohorts: int, seed: int, capacity: float, shared_order: bool
) -> None:
    """Write the snapshot: ``00-cluster.yaml`` (the configuration) and ``10-workloads-K.yaml``."""
    rng = random.Random(seed)
    per_cohort = max(1, math.ceil(queues / cohorts))
    shapes = []
    for i in range(queues):
        chosen = rng.sample(FLAVORS, rng.randint(2, len(FLAVORS)))
        if shared_order:  # the platform's one preference order; else each team its own
            chosen.sort(key=FLAVORS.index)
        shapes.append(
            {
                "name": f"cq-{i:03d}",
                "cohort": f"cohort-{i // per_cohort:02d}",
                "namespace": f"team-{i:03d}",
                "flavors": chosen,
                "weights": [rng.uniform(0.5, 1.5) for _ in chosen],
                "borrowing_limit": rng.random() < 0.5,
                "demand": rng.choice((0.5, 1.0, 1.0, 2.0, 3.0)),
                "provision": rng.uniform(0.4, 1.6),
                "strict": rng.random() < 0.2,
            }
        )
    workloads = []
    demand = [0] * queues
    weights = [s["demand"] for s in shapes]
    for i in range(pending):
        q = rng.choices(range(queues), weights=weights)[0]
        gpus = rng.randint(1, 8)
        pods = rng.choice([p for p in (1, 2, 4) if gpus % p == 0])
        priority = rng.choices(PRIORITIES, weights=PRIORITY_WEIGHTS)[0][0]
        demand[q] += gpus
        workloads.append((i, q, gpus, pods, priority, rng.choice((4, 6, 8)), rng.choice((32, 48, 64))))
    total = int(sum(demand) * capacity)
    nominal = split(total, [max(d, 1) * s["provision"] for d, s in zip(demand, shapes, strict=True)])

    out: list[str] = []
    for flavor in FLAVORS:
        out.append(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\n"
            f"metadata: {{name: {flavor}}}\nspec:\n  nodeLabels: {{gpu.example.com/pool: {flavor}}}\n"
        )
    for cohort in sorted({s["cohort"] for s in shapes}):
        out.append(
            f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {{name: {cohort}}}\nspec: {{}}\n"
        )
    for name, value in PRIORITIES:
        out.append(
            f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {{name: {name}}}\n"
            f"value: {value}\n"
        )
    for shape, gpus in zip(shapes, nominal, strict=True):
        lines = [
            "apiVersion: v1\nkind: Namespace\n"
            f"metadata: {{name: {shape['namespace']}, labels: {{team: {shape['namespace']}}}}}\n",
        ]
        flavors = []
        for flavor, share in zip(shape["flavors"], split(gpus, shape["weights"]), strict=True):
            limit = f", borrowingLimit: {max(share // 2, 8 - share)}" if shape["borrowing_limit"] else ""
            flavors.append(
                f"    - name: {flavor}\n      resources:\n"
                f"      - {{name: cpu, nominalQuota: {share * CPU_PER_GPU}}}\n"
                f"      - {{name: memory, nominalQuota: {share * MEMORY_PER_GPU}Gi}}\n"
                f"      - {{name: nvidia.com/gpu, nominalQuota: {share}{limit}}}\n"
            )
        strategy = "StrictFIFO" if shape["strict"] else "BestEffortFIFO"
        lines.append(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\n"
            f"metadata: {{name: {shape['name']}}}\nspec:\n  cohortName: {shape['cohort']}\n"
            f"  namespaceSelector:\n    matchLabels: {{team: {shape['namespace']}}}\n"
            f"  queueingStrategy: {strategy}\n"
            "  preemption: {withinClusterQueue: LowerPriority, reclaimWithinCohort: Any}\n"
            "  resourceGroups:\n  - coveredResources: [cpu, memory, nvidia.com/gpu]\n    flavors:\n"
            + "".join(flavors)
        )
        lines.append(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\n"
            f"metadata: {{name: jobs, namespace: {shape['namespace']}}}\n"
            f"spec: {{clusterQueue: {shape['name']}}}\n"
        )
        out += lines
    (directory / "00-cluster.yaml").write_text("---\n".join(out))

    chunk = 5_000
    for start in range(0, pending, chunk):
        docs = []
        for i, q, gpus, pods, priority, cpu, memory in workloads[start : start + chunk]:
            per_pod = gpus // pods
            docs.append(
                "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\n"
                f"metadata:\n  name: job-{i:06d}\n  namespace: {shapes[q]['namespace']}\n"
                f'  creationTimestamp: "{timestamp(EPOCH + i)}"\n'
                f"spec:\n  queueName: jobs\n  priorityClassName: {priority}\n"
                "  priorityClassSource: kueue.x-k8s.io/workloadpriorityclass\n"
                f"  podSets:\n  - name: main\n    count: {pods}\n    template:\n      spec:\n"
                "        containers:\n        - name: main\n          image: example.com/train:1\n"
                f'          resources:\n            requests: {{cpu: "{per_pod * cpu}", '
                f'memory: {per_pod * memory}Gi, nvidia.com/gpu: "{per_pod}"}}\n'
            )
        (directory / f"10-workloads-{start // chunk:03d}.yaml").write_text("---\n".join(docs))


def run_admit(directory: Path, timeout: float, extra: list[str]) -> dict[str, Any]:
    """``gpuq admit -f DIR -o json`` as a subprocess: wall time, exit status, peak RSS, the document."""
    command = [str(GPUQ), "admit", "-f", str(directory), "-o", "json", *extra]
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=stdout, stderr=stderr)
        timer = threading.Timer(timeout, child.kill)
        timer.start()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        timer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        text, errors = stdout.read().decode(), stderr.read().decode()
    row: dict[str, Any] = {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,  # the child's own CPU time: other load on the machine aside
        "rc": child.returncode,
        "peak_rss_mib": usage.ru_maxrss / 1024,
    }
    row["timed_out"] = child.returncode == -9 and wall >= timeout
    if child.returncode != 0:
        row["stderr"] = errors[-2000:]
        return row
    document = json.loads(text)
    stopped = document.get("stopped") or {}
    row.update(
        cycles=document["cycles"],
        admitted=len(document["admitted"]),
        still_pending=len(document["pending"]),
        preempted=len(document["preempted"]),
        stop=stopped.get("reason", "Quiet"),
        churning=len(stopped.get("churning", [])),
        warning=" ".join(errors.split()),
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pending", type=int, nargs="+", default=[5_000, 20_000, 50_000])
    parser.add_argument("--queues", type=int, default=200)
    parser.add_argument("--cohorts", type=int, default=20)
    parser.add_argument("--capacity", type=float, default=0.7, help="GPU quota / GPU demand")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--own-order",
        action="store_true",
        help="each queue lists its flavors in its own order (default: one platform-wide order)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per gpuq admit run")
    parser.add_argument("--keep", help="write the snapshot(s) here (DIR/N) and keep them")
    parser.add_argument("--generate-only", action="store_true", help="write the snapshot(s), run nothing")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("admit_args", nargs="*", help="after --: extra arguments to gpuq admit")
    args = parser.parse_args()
    rows = []
    for n in args.pending:
        base = Path(args.keep) / str(n) if args.keep else Path(tempfile.mkdtemp(prefix=f"admit-{n}-"))
        if base.exists() and args.keep:
            shutil.rmtree(base)
        base.mkdir(parents=True, exist_ok=True)
        try:
            t0 = time.perf_counter()
            generate(base, n, args.queues, args.cohorts, args.seed, args.capacity, not args.own_order)
            generated = time.perf_counter() - t0
            if args.generate_only:
                print(f"{n}: {base} ({generated:.1f} s)", file=sys.stderr)
                continue
            row = {"pending": n, "generate_s": generated, **run_admit(base, args.timeout, args.admit_args)}
        finally:
            if not args.keep:
                shutil.rmtree(base, ignore_errors=True)
        row["workloads_per_s"] = n / row["wall_s"]
        rows.append(row)
        if not args.json:
            print_row(row)
    if args.json:
        print(json.dumps(rows, indent=2))


def print_row(row: dict[str, Any]) -> None:
    if row.get("timed_out"):
        print(f"N={row['pending']:>6}: no answer within {row['wall_s']:.0f} s (timed out)")
        return
    if row["rc"] != 0:
        print(f"N={row['pending']:>6}: gpuq admit failed (exit {row['rc']}): {row.get('stderr', '')}")
        return
    rss = f"{row['peak_rss_mib']:.0f} MiB" if row["peak_rss_mib"] is not None else "n/a"
    print(
        f"N={row['pending']:>6}: wall {row['wall_s']:6.1f} s (CPU {row['cpu_s']:.1f} s), "
        f"{row['workloads_per_s']:7.0f} workloads/s, "
        f"{row['cycles']:>5} cycles, stop {row['stop']}"
        + (f" ({row['churning']} churning)" if row["churning"] else "")
        + f", admitted {row['admitted']}, preempted {row['preempted']}, pending {row['still_pending']}, "
        f"peak RSS {rss}",
        flush=True,
    )


if __name__ == "__main__":
    main()
