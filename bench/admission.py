"""Admission engine benchmark: cycle times, admission throughput and scaling with admitted workloads.

Run from the repository root::

    .venv/bin/python bench/admission.py [--workloads 50000] [--queues 200] [--cohorts 20]
        [--namespaces 20] [--flavors 4] [--seed 1] [--json]

Everything is built deterministically from ``--seed`` with the core model types
(no YAML, no api layer). The benchmark prints figures and never asserts on them;
see ``bench/README.md`` for what each figure means.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_SRC = Path(__file__).resolve().parent.parent / "src"
if str(_SRC) not in sys.path:  # runnable without an editable install
    sys.path.insert(0, str(_SRC))

from gpuq.core.admission import Scheduler  # noqa: E402
from gpuq.core.cycles import FlappingDetector  # noqa: E402
from gpuq.core.model import (  # noqa: E402
    Admission,
    ClusterConfig,
    ClusterQueue,
    Cohort,
    FlavorFungibility,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    PodSetAssignment,
    Preemption,
    PreemptionPolicy,
    QueueingStrategy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    SchedulerConfig,
    Workload,
)

GPU = "nvidia.com/gpu"
CPU = "cpu"  # milli-CPU
MEMORY = "memory"  # bytes
GI = 1 << 30
RESOURCES = (CPU, MEMORY, GPU)
BASE_FLAVORS = ("a100-reserved", "a100-spot", "h100-ondemand", "h100-spot")
PRIORITIES = (0, 10, 100, 1000)
PRIORITY_WEIGHTS = (50, 25, 15, 10)
CPU_PER_GPU = 8_000  # quota headroom per GPU: CPU and memory never bind before GPUs do
MEMORY_PER_GPU = 96 * GI
EPOCH = 1_700_000_000.0
LIVELOCK_WINDOW = 16  # cycles


# --------------------------------------------------------------------------- configuration
@dataclass(slots=True)
class QueueShape:
    """The seed-derived shape of one ClusterQueue, before quotas are known."""

    name: str
    cohort: str
    flavors: tuple[str, ...]
    flavor_weights: tuple[float, ...]
    strategy: QueueingStrategy
    preemption: Preemption
    borrowing_limit: bool  # GPU borrowing limit of half the nominal quota
    lending_limit: bool  # GPU lending limit of half the nominal quota
    demand_weight: float  # how much of its namespace's traffic this queue gets
    namespace: str
    local_queue: str
    provision: float  # nominal quota relative to a fair share of capacity
    preempts_within: bool = field(init=False)

    def __post_init__(self) -> None:
        self.preempts_within = self.preemption.within_cluster_queue != PreemptionPolicy.NEVER


def flavor_names(count: int) -> tuple[str, ...]:
    extra = tuple(f"flavor-{i}" for i in range(len(BASE_FLAVORS), count))
    return (BASE_FLAVORS + extra)[:count]


def queue_shapes(
    rng: random.Random, queues: int, cohorts: int, namespaces: int, flavors: tuple[str, ...]
) -> list[QueueShape]:
    """ClusterQueue ``i`` is in cohort ``i // (queues / cohorts)`` and namespace ``i % namespaces``."""
    per_cohort = max(1, math.ceil(queues / cohorts))
    shapes = []
    for i in range(queues):
        k = rng.randint(min(2, len(flavors)), len(flavors))
        # Platforms list flavors in one preference order (reserved, on-demand, spot) in every queue.
        chosen = tuple(sorted(rng.sample(flavors, k), key=flavors.index))
        strategy = QueueingStrategy.STRICT_FIFO if rng.random() < 0.3 else QueueingStrategy.BEST_EFFORT_FIFO
        within = PreemptionPolicy.LOWER_PRIORITY if rng.random() < 0.5 else PreemptionPolicy.NEVER
        reclaim = PreemptionPolicy.ANY if rng.random() < 0.4 else PreemptionPolicy.NEVER
        shapes.append(
            QueueShape(
                name=f"cq-{i:03d}",
                cohort=f"cohort-{i // per_cohort:02d}",
                flavors=chosen,
                flavor_weights=tuple(rng.uniform(0.5, 1.5) for _ in chosen),
                strategy=strategy,
                preemption=Preemption(within_cluster_queue=within, reclaim_within_cohort=reclaim),
                borrowing_limit=rng.random() < 0.3,
                lending_limit=rng.random() < 0.2,
                demand_weight=rng.choice((0.5, 1.0, 1.0, 2.0, 3.0)),
                namespace=f"team-{i % namespaces:02d}",
                local_queue=f"lq-{i:03d}",
                provision=rng.uniform(0.4, 1.6),
            )
        )
    return shapes


def split(total: int, weights: tuple[float, ...]) -> list[int]:
    """Split an integer total by weights, exactly (largest remainders)."""
    raw = [total * w / sum(weights) for w in weights]
    parts = [int(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda j: parts[j] - raw[j])[: total - sum(parts)]:
        parts[i] += 1
    return parts


def build_config(
    shapes: list[QueueShape], gpu_nominal: dict[str, int], flavors: tuple[str, ...]
) -> ClusterConfig:
    """The configuration with ``gpu_nominal[cq]`` GPUs of nominal quota per queue, split over its flavors."""
    cluster_queues = {}
    for shape in shapes:
        per_flavor = split(gpu_nominal[shape.name], shape.flavor_weights)
        flavor_quotas = []
        for flavor, gpus in zip(shape.flavors, per_flavor, strict=True):
            gpu_quota = ResourceQuota(
                gpus,
                borrowing_limit=gpus // 2 if shape.borrowing_limit else None,
                lending_limit=gpus // 2 if shape.lending_limit else None,
            )
            resources = {
                CPU: ResourceQuota(gpus * CPU_PER_GPU),
                MEMORY: ResourceQuota(gpus * MEMORY_PER_GPU),
                GPU: gpu_quota,
            }
            flavor_quotas.append(FlavorQuotas(flavor, resources))
        cluster_queues[shape.name] = ClusterQueue(
            name=shape.name,
            resource_groups=(ResourceGroup(RESOURCES, tuple(flavor_quotas)),),
            cohort=shape.cohort,
            queueing_strategy=shape.strategy,
            namespace_selector=LabelSelector(),  # every namespace
            preemption=shape.preemption,
            flavor_fungibility=FlavorFungibility(),
        )
    kinds = {"a100": "nvidia-a100", "h100": "nvidia-h100"}
    return ClusterConfig(
        flavors={
            f: ResourceFlavor(
                f,
                node_labels={
                    "gpu.product": kinds.get(f.split("-")[0], f),
                    "capacity": "spot" if f.endswith("spot") else "on-demand",
                },
            )
            for f in flavors
        },
        cluster_queues=cluster_queues,
        cohorts={c: Cohort(c) for c in sorted({s.cohort for s in shapes})},
        local_queues={
            (s.namespace, s.local_queue): LocalQueue(s.namespace, s.local_queue, s.name) for s in shapes
        },
        scheduler=SchedulerConfig(),
    )


# --------------------------------------------------------------------------- workloads
def pod_sets_for(rng: random.Random, gpus: int, pods: int, min_count: int | None) -> tuple[PodSet, ...]:
    per_pod = gpus // pods
    requests = {
        CPU: per_pod * rng.choice((4_000, 6_000, 8_000)),
        MEMORY: per_pod * rng.choice((32, 48, 64)) * GI,
        GPU: per_pod,
    }
    return (PodSet("main", pods, requests, min_count),)


def pending_workloads(rng: random.Random, count: int, shapes: list[QueueShape]) -> list[Workload]:
    """``count`` pending workloads, spread over namespaces and (weighted) over their LocalQueues."""
    by_namespace: dict[str, list[QueueShape]] = {}
    for shape in shapes:
        by_namespace.setdefault(shape.namespace, []).append(shape)
    namespaces = sorted(by_namespace)
    workloads = []
    for i in range(count):
        namespace = namespaces[rng.randrange(len(namespaces))]
        options = by_namespace[namespace]
        shape = rng.choices(options, weights=[s.demand_weight for s in options])[0]
        gpus = rng.randint(1, 8)
        pods = rng.choice([p for p in (1, 2, 3, 4) if gpus % p == 0])
        min_count = 1 if pods > 1 and rng.random() < 0.1 else None  # some allow partial admission
        name = f"job-{i:06d}"
        workloads.append(
            Workload(
                namespace=namespace,
                name=name,
                queue_name=shape.local_queue,
                pod_sets=pod_sets_for(rng, gpus, pods, min_count),
                priority=rng.choices(PRIORITIES, weights=PRIORITY_WEIGHTS)[0],
                creation_time=EPOCH + i * 0.01,
                uid=f"uid-{i:06d}",
            )
        )
    return workloads


def gpus_of(workload: Workload) -> int:
    return sum(ps.count * ps.requests.get(GPU, 0) for ps in workload.pod_sets)


def main_scenario(args: argparse.Namespace) -> tuple[ClusterConfig, list[Workload]]:
    """Quotas sized so that ``--capacity`` of the total GPU demand fits, unevenly spread over queues."""
    rng = random.Random(args.seed)
    flavors = flavor_names(args.flavors)
    shapes = queue_shapes(rng, args.queues, args.cohorts, args.namespaces, flavors)
    workloads = pending_workloads(rng, args.workloads, shapes)
    demand = {s.name: 0 for s in shapes}
    route = {(s.namespace, s.local_queue): s.name for s in shapes}
    for w in workloads:
        demand[route[(w.namespace, w.queue_name)]] += gpus_of(w)
    capacity = int(sum(demand.values()) * args.capacity)
    weights = tuple(max(demand[s.name], 1) * s.provision for s in shapes)
    nominal = dict(zip((s.name for s in shapes), split(capacity, weights), strict=True))
    return build_config(shapes, nominal, flavors), workloads


# --------------------------------------------------------------------------- main run
def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def run_until_quiescent(scheduler: Scheduler, max_cycles: int, progress: bool) -> dict[str, Any]:
    """``run_cycles``' loop, timing plan_cycle + apply of every cycle (evictions timed apart)."""
    now = EPOCH + 1_000_000.0
    cycle_times: list[float] = []
    admissions = preemptions = heads = 0
    preempted_keys: set[str] = set()
    evict_time = 0.0
    quiescent = False
    # The engine's own flapping detector (gpuq.core.cycles) ends a run whose decisions repeat.
    detector = FlappingDetector()
    livelock: dict[str, Any] | None = None
    recent: deque[tuple[frozenset[str], frozenset[str], frozenset[str]]] = deque(maxlen=LIVELOCK_WINDOW)
    peak = (len(scheduler.state.admitted), 0, 0.0)  # most holding quota: (count, cycle, cycle time)
    start = time.perf_counter()
    while len(cycle_times) < max_cycles:
        before = scheduler.active_count()
        t0 = time.perf_counter()
        result, entries = scheduler.plan_cycle(now)
        if not entries:
            quiescent = True
            break
        scheduler.apply(result, entries, now)
        cycle_times.append(time.perf_counter() - t0)
        heads += len(result.considered)
        admissions += len(result.admitted)
        holding_now = len(scheduler.state.admitted) - len(result.preempted)
        if holding_now > peak[0]:
            peak = (holding_now, len(cycle_times), sum(cycle_times))
        t1 = time.perf_counter()
        for eviction in result.preempted:
            preemptions += 1
            preempted_keys.add(eviction.workload)
            scheduler.evict(eviction.workload, now)
        evict_time += time.perf_counter() - t1
        recent.append(
            (
                frozenset(a.workload for a in result.admitted),
                frozenset(p.workload for p in result.preempted),
                frozenset(p.by for p in result.preempted),
            )
        )
        period = detector.observe(result)
        if period is not None:
            window = list(recent)[-period:]
            livelock = {
                "cycle": len(cycle_times),
                "period": period,
                "admitted": sorted(set().union(*(a for a, _, _ in window))),
                "preempted": sorted(set().union(*(p for _, p, _ in window))),
                "preemptors": sorted(set().union(*(b for _, _, b in window))),
            }
            break
        if progress and len(cycle_times) % 100 == 0:
            print(
                f"  cycle {len(cycle_times)}: {admissions} admissions,"
                f" {len(scheduler.state.admitted)} holding quota, {scheduler.pending_count()} pending,"
                f" last cycle {cycle_times[-1] * 1e3:.1f} ms",
                file=sys.stderr,
            )
        if not result.changed and scheduler.active_count() == before:
            quiescent = True
            break
    wall = time.perf_counter() - start
    engine = sum(cycle_times)
    return {
        "quiescent": quiescent,
        "livelock": livelock,
        "cycles": len(cycle_times),
        "admissions": admissions,
        "admitted_at_end": len(scheduler.state.admitted),
        "preemptions": preemptions,
        "preempted_workloads": len(preempted_keys),
        "pending_at_end": scheduler.pending_count() + len(scheduler.unqueued),
        "heads_considered": heads,
        "wall_s": wall,
        "cycle_time_total_s": engine,
        "eviction_time_s": evict_time,
        "admissions_per_s": admissions / engine if engine else 0.0,
        "admissions_per_wall_s": admissions / wall if wall else 0.0,
        "net_admitted_per_s": len(scheduler.state.admitted) / engine if engine else 0.0,
        "peak_holding": peak[0],
        "peak_cycle": peak[1],
        "peak_cycle_time_s": peak[2],
        "cycle_mean_ms": statistics.fmean(cycle_times) * 1e3 if cycle_times else 0.0,
        "cycle_p50_ms": percentile(cycle_times, 0.50) * 1e3,
        "cycle_p99_ms": percentile(cycle_times, 0.99) * 1e3,
        "cycle_max_ms": max(cycle_times, default=0.0) * 1e3,
    }


def main_run(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    config, workloads = main_scenario(args)
    build = time.perf_counter() - t0
    t1 = time.perf_counter()
    scheduler = Scheduler(config)
    for w in workloads:
        scheduler.submit(w)
    submit = time.perf_counter() - t1
    stats = run_until_quiescent(scheduler, args.max_cycles, args.progress)
    gpu_quota = sum(
        q.resources[GPU].nominal
        for cq in config.cluster_queues.values()
        for q in cq.resource_groups[0].flavors
    )
    gpu_used = sum(amount for (_, r), amount in admitted_usage(scheduler).items() if r == GPU)
    return {
        "workloads": len(workloads),
        "gpu_demand": sum(gpus_of(w) for w in workloads),
        "gpu_quota": gpu_quota,
        "gpu_used_at_end": gpu_used,
        "build_s": build,
        "submit_s": submit,
        **stats,
    }


def admitted_usage(scheduler: Scheduler) -> dict[tuple[str, str], int]:
    total: dict[tuple[str, str], int] = {}
    for admitted in scheduler.state.admitted.values():
        for fr, amount in admitted.usage.items():
            total[fr] = total.get(fr, 0) + amount
    return total


# --------------------------------------------------------------------------- scaling check
SCALING_MODES = ("fit", "preempt", "reclaim")


def scaling_scheduler(args: argparse.Namespace, admitted: int, mode: str) -> Scheduler:
    """``admitted`` 1-GPU workloads already holding quota plus 3 pending 2-GPU heads per queue that
    outrank them. Queues, heads and their order are the same for any ``admitted``; all GPU quota
    is in the first flavor, which every queue lists first, and no queue has borrowing or lending
    limits.

    * ``fit``: admitted workloads spread evenly; every queue's quota holds them plus its heads, so
      every head fits.
    * ``preempt``: the same, but the quota holds exactly the admitted workloads: heads need
      preemption within their queue (``withinClusterQueue: LowerPriority``) or find no candidates.
    * ``reclaim``: in each cohort, even-numbered queues lend (nominal quota, nothing admitted,
      ``reclaimWithinCohort: Any``) and odd-numbered ones borrow all of it (no nominal quota, all
      the admitted workloads): lender heads reclaim from the borrowers of their cohort.
    """
    rng = random.Random(args.seed)
    flavors = flavor_names(args.flavors)
    shapes = queue_shapes(rng, args.queues, args.cohorts, args.namespaces, flavors)
    for shape in shapes:
        shape.flavors = (flavors[0], *(f for f in shape.flavors if f != flavors[0]))
        shape.flavor_weights = (1.0, *(0.0 for _ in shape.flavors[1:]))
        shape.borrowing_limit = shape.lending_limit = False
    heads_per_queue = 3
    nominal: dict[str, int] = {}
    if mode == "reclaim":
        lender = {s.name: i % 2 == 0 for i, s in enumerate(shapes)}
        per_queue = split(admitted, tuple(0.0 if lender[s.name] else 1.0 for s in shapes))
        cohort_usage: dict[str, int] = {}
        for shape, n in zip(shapes, per_queue, strict=True):
            cohort_usage[shape.cohort] = cohort_usage.get(shape.cohort, 0) + n
        for cohort, used in cohort_usage.items():
            members = [s for s in shapes if s.cohort == cohort]
            shares = split(used, tuple(1.0 if lender[s.name] else 0.0 for s in members))
            nominal.update((s.name, q) for s, q in zip(members, shares, strict=True))
        for shape in shapes:
            if lender[shape.name]:
                shape.preemption = Preemption(shape.preemption.within_cluster_queue, PreemptionPolicy.ANY)
    else:
        per_queue = split(admitted, tuple(1.0 for _ in shapes))
        for shape, n in zip(shapes, per_queue, strict=True):
            nominal[shape.name] = n + (2 * heads_per_queue if mode == "fit" else 0)
    config = build_config(shapes, nominal, flavors)
    scheduler = Scheduler(config)
    requests = {CPU: 4_000, MEMORY: 32 * GI, GPU: 1}
    serial = 0
    for shape, n in zip(shapes, per_queue, strict=True):
        flavor = shape.flavors[0]
        for _ in range(n):
            serial += 1
            created = EPOCH + serial * 0.001
            scheduler.submit(
                Workload(
                    namespace=shape.namespace,
                    name=f"running-{serial:07d}",
                    queue_name=shape.local_queue,
                    pod_sets=(PodSet("main", 1, requests),),
                    priority=rng.choice((0, 10)),
                    creation_time=created,
                    uid=f"running-{serial:07d}",
                    admission=Admission(
                        shape.name,
                        (PodSetAssignment("main", {r: flavor for r in requests}, dict(requests), 1),),
                    ),
                    quota_reserved_time=created,
                )
            )
    for shape in shapes:
        for h in range(heads_per_queue):
            scheduler.submit(
                Workload(
                    namespace=shape.namespace,
                    name=f"head-{shape.name}-{h}",
                    queue_name=shape.local_queue,
                    pod_sets=(PodSet("main", 1, {CPU: 8_000, MEMORY: 64 * GI, GPU: 2}),),
                    priority=100,
                    creation_time=EPOCH + 1e6 + h,
                    uid=f"head-{shape.name}-{h}",
                )
            )
    return scheduler


def time_cycles(scheduler: Scheduler, reps: int) -> dict[str, Any]:
    """``reps`` timed plan_cycle calls (each leaves the state unchanged), then one timed apply."""
    now = EPOCH + 2e6
    plans = []
    result = entries = None
    for _ in range(reps):
        t0 = time.perf_counter()
        result, entries = scheduler.plan_cycle(now)
        plans.append(time.perf_counter() - t0)
    assert result is not None and entries is not None
    t0 = time.perf_counter()
    scheduler.apply(result, entries, now)
    apply = time.perf_counter() - t0
    return {
        "plan_mean_ms": statistics.fmean(plans) * 1e3,
        "plan_min_ms": min(plans) * 1e3,
        "apply_ms": apply * 1e3,
        "cycle_ms": (statistics.fmean(plans) + apply) * 1e3,
        "heads": len(result.considered),
        "admitted_in_cycle": len(result.admitted),
        "preemptions_in_cycle": len(result.preempted),
    }


def scaling_check(args: argparse.Namespace) -> dict[str, Any]:
    small = args.scaling_n
    large = 10 * small
    out: dict[str, Any] = {"n": small, "reps": args.reps}
    for label in SCALING_MODES:
        rows = {}
        for n in (small, large):
            scheduler = scaling_scheduler(args, n, label)
            gc.collect()
            rows[n] = {"admitted_before": len(scheduler.state.admitted), **time_cycles(scheduler, args.reps)}
            del scheduler
        ratio = rows[large]["cycle_ms"] / rows[small]["cycle_ms"] if rows[small]["cycle_ms"] else 0.0
        out[label] = {"small": rows[small], "large": rows[large], "ratio": ratio}
    return out


# --------------------------------------------------------------------------- output
def print_table(rows: list[tuple[str, str]], title: str) -> None:
    width = max(len(k) for k, _ in rows)
    vwidth = max(len(v) for _, v in rows)
    print(title)
    print("-" * (width + vwidth + 3))
    for key, value in rows:
        print(f"{key:<{width}}   {value:>{vwidth}}")
    print()


def names(keys: list[str], shown: int = 6) -> str:
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return (", ".join(keys[:shown]) or "-") + more + f" ({len(keys)})"


def end_note(main: dict[str, Any]) -> str:
    if main["quiescent"]:
        return ""
    if main["livelock"]:
        return f" (LIVELOCK, period {main['livelock']['period']})"
    return " (max cycles reached)"


def report(args: argparse.Namespace, main: dict[str, Any] | None, scaling: dict[str, Any] | None) -> None:
    print(
        f"gpuq admission benchmark  seed={args.seed} workloads={args.workloads} queues={args.queues}"
        f" cohorts={args.cohorts} namespaces={args.namespaces} flavors={args.flavors}"
        f" python={sys.version.split()[0]}\n"
    )
    if main is not None:
        rows = [
            ("workloads", f"{main['workloads']:,}"),
            ("admitted (holding quota at end)", f"{main['admitted_at_end']:,}"),
            ("admissions (decisions)", f"{main['admissions']:,}"),
            ("preempted (evictions)", f"{main['preemptions']:,}"),
            ("preempted workloads (distinct)", f"{main['preempted_workloads']:,}"),
            ("pending at end", f"{main['pending_at_end']:,}"),
            (
                "GPU demand / quota / used",
                f"{main['gpu_demand']:,} / {main['gpu_quota']:,} / {main['gpu_used_at_end']:,}",
            ),
            ("cycles", f"{main['cycles']:,}" + end_note(main)),
            ("heads considered", f"{main['heads_considered']:,}"),
            ("setup: build / submit (s)", f"{main['build_s']:.2f} / {main['submit_s']:.2f}"),
            ("wall time, cycle loop (s)", f"{main['wall_s']:.2f}"),
            ("time in plan_cycle+apply (s)", f"{main['cycle_time_total_s']:.2f}"),
            ("time completing evictions (s)", f"{main['eviction_time_s']:.2f}"),
            ("admitted workloads / s (cycle time)", f"{main['admissions_per_s']:,.0f}"),
            ("admitted workloads / s (wall)", f"{main['admissions_per_wall_s']:,.0f}"),
            ("net admitted (holding at end) / s", f"{main['net_admitted_per_s']:,.0f}"),
            (
                "most holding quota / at cycle / after (s)",
                f"{main['peak_holding']:,} / {main['peak_cycle']:,} / {main['peak_cycle_time_s']:.2f}",
            ),
            ("cycle mean / p50 (ms)", f"{main['cycle_mean_ms']:.2f} / {main['cycle_p50_ms']:.2f}"),
            ("cycle p99 / max (ms)", f"{main['cycle_p99_ms']:.2f} / {main['cycle_max_ms']:.2f}"),
        ]
        print_table(rows, "Run until quiescent")
        if main["livelock"]:
            ll = main["livelock"]
            print(
                f"Livelock: from cycle {ll['cycle']} the same decisions recur every {ll['period']} cycles;"
                f" stopped there.\n  preemptors: {names(ll['preemptors'])}\n"
                f"  preempted in the period, then admitted again: {names(ll['preempted'])}\n"
            )
    if scaling is not None:
        n = scaling["n"]
        rows = []
        for label in SCALING_MODES:
            s = scaling[label]
            for size in ("small", "large"):
                r = s[size]
                rows.append(
                    (
                        f"{label}: {r['admitted_before']:,} admitted, {r['heads']} heads",
                        f"{r['cycle_ms']:8.2f} ms  (plan {r['plan_mean_ms']:.2f}, apply {r['apply_ms']:.2f};"
                        f" {r['admitted_in_cycle']} adm, {r['preemptions_in_cycle']} pre)",
                    )
                )
            rows.append((f"{label}: ratio {10 * n:,} / {n:,}", f"{s['ratio']:8.2f} x"))
        print_table(rows, f"Scaling: one cycle with N and 10xN admitted workloads ({scaling['reps']} reps)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", type=int, default=50_000, help="pending workloads in the main run")
    p.add_argument("--queues", type=int, default=200, help="ClusterQueues")
    p.add_argument("--cohorts", type=int, default=20, help="cohorts (queues are split evenly)")
    p.add_argument("--namespaces", type=int, default=20, help="namespaces with LocalQueues")
    p.add_argument("--flavors", type=int, default=4, help="ResourceFlavors (at least 1)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--capacity", type=float, default=0.7, help="total GPU quota / total GPU demand")
    p.add_argument("--max-cycles", type=int, default=100_000, help="stop the main run after this many")
    p.add_argument("--scaling-n", type=int, default=5_000, help="N of the scaling check (and 10xN)")
    p.add_argument("--reps", type=int, default=5, help="timed cycles per scaling point")
    p.add_argument("--skip-main", action="store_true", help="only the scaling check")
    p.add_argument("--skip-scaling", action="store_true", help="only the main run")
    p.add_argument("--progress", action="store_true", help="progress lines on stderr")
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of tables")
    args = p.parse_args(argv)
    if args.flavors < 1 or args.queues < 1 or args.cohorts < 1 or args.namespaces < 1:
        p.error("--flavors, --queues, --cohorts and --namespaces must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    main_stats = None if args.skip_main else main_run(args)
    scaling = None if args.skip_scaling else scaling_check(args)
    if args.json:
        parameters = {
            k: getattr(args, k)
            for k in (
                "workloads",
                "queues",
                "cohorts",
                "namespaces",
                "flavors",
                "seed",
                "capacity",
                "scaling_n",
            )
        }
        print(json.dumps({"parameters": parameters, "main": main_stats, "scaling": scaling}, indent=2))
    else:
        report(args, main_stats, scaling)
    return 0


if __name__ == "__main__":
    sys.exit(main())
