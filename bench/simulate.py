"""Simulator throughput: the largest public trace, a synthetic 200,000-workload cluster, Kueue's baseline.

Prints wall time, simulated workloads per second, events per second and peak
memory (tracemalloc is off: it would slow the run; peak RSS from the OS is
reported instead). Usage:

    .venv/bin/python bench/simulate.py [--workloads 200000] [--skip-trace] [--skip-baseline]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gpuq.api.loader import load
from gpuq.api.scenario import Distribution, Generator, TeamArrivals
from gpuq.sim.generator import generate
from gpuq.sim.jobs import to_sim_jobs
from gpuq.sim.metrics import variant_metrics
from gpuq.sim.scenario import load_workloads, plan_scenario, prepare
from gpuq.sim.simulator import SimResult, SimSettings, Simulation

ROOT = Path(__file__).resolve().parent.parent
PHILLY = (Path(__file__).resolve().parents[1] / "data/traces/philly/philly_jobs_sia.csv.xz")


def synthetic_config(
    teams: int, cohorts: int, nodes: int, gpus_per_node: int, strategy: str = "BestEffortFIFO"
) -> str:
    """Kueue objects and one NodePool: ``teams`` ClusterQueues in ``cohorts`` cohorts, equal quotas,
    each with the queueing ``strategy``."""
    quota = nodes * gpus_per_node // teams
    docs = [
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: h100}\n",
        f"""apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {{name: h100}}
spec: {{machineType: a3-highgpu-8g, count: {nodes}, cpu: "208", memory: 1872Gi, pods: 110,
  gpu: {{model: H100-80GB, count: {gpus_per_node}}}, price: 88.0}}
""",
    ]
    for index in range(teams):
        team = f"team-{index:02d}"
        docs.append(
            f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {team}}}
spec:
  cohortName: cohort-{index % cohorts}
  queueingStrategy: {strategy}
  namespaceSelector: {{}}
  preemption: {{reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{{name: nvidia.com/gpu, nominalQuota: {quota}}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: jobs, namespace: {team}}}
spec: {{clusterQueue: {team}}}
"""
        )
    return "---\n".join(docs)


def synthetic_simulation(
    workloads: int,
    teams: int = 50,
    nodes: int = 1000,
    load_factor: float = 0.9,
    on_progress: Callable[[float], None] | None = None,
    strategy: str = "BestEffortFIFO",
) -> tuple[str, Simulation]:
    """The synthetic cluster and its arrivals, ready to run: a label and the simulation."""
    gpus = nodes * 8
    gpus_per_job = Distribution(choice=[1, 2, 4, 8], weights=[4, 3, 2, 1])
    duration = Distribution(lognormal=(3600.0, 1.0))
    mean_gpu_hours = 2.6 * 1.6487  # E[gpus] × E[lognormal(1h, 1)] in hours
    per_hour = load_factor * gpus / mean_gpu_hours
    horizon = workloads / per_hour * 3600
    generator = Generator(
        horizon=horizon,
        teams=[
            TeamArrivals(
                namespace=f"team-{i:02d}",
                queue="jobs",
                arrivals_per_hour=per_hour / teams,
                gpus_per_pod=gpus_per_job,
                duration=duration,
                priority=str(i % 3 * 100),
            )
            for i in range(teams)
        ],
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.yaml"
        path.write_text(synthetic_config(teams, 5, nodes, 8, strategy))
        result = load([str(path)])
    assert result.config is not None, result.errors
    trace = generate(generator, seed=1)
    jobs, bad = to_sim_jobs(trace, {}, result.gpu_catalogue, "generator")
    assert not bad
    label = (
        f"synthetic: {len(jobs):,} workloads, {teams} {strategy} teams in 5 cohorts, {nodes} nodes × 8 GPUs"
    )
    return label, Simulation(result.config, result.nodes, jobs, SimSettings(), on_progress=on_progress)


def run_synthetic(workloads: int, teams: int = 50, nodes: int = 1000, load_factor: float = 0.9) -> None:
    label, simulation = synthetic_simulation(workloads, teams, nodes, load_factor)
    _measure(label, simulation.run, len(simulation.jobs))


def _measure(label: str, run: Callable[[], SimResult], workloads: int) -> None:
    started = time.perf_counter()
    result = run()
    _print(label, time.perf_counter() - started, workloads, result)


def _print(label: str, wall: float, workloads: int, result: SimResult) -> None:
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{label}\n  wall {wall:.1f}s · {workloads / wall:,.0f} workloads/s"
        f" · {result.events / wall:,.0f} events/s · {result.passes:,} passes · {result.cycles:,} cycles"
        f" · simulated span {result.span_s / 3600:,.1f}h · peak RSS so far {peak_mib:,.0f} MiB"
    )
    sys.stdout.flush()


def run_scenario(label: str, scenario: Path, variant: str | None) -> None:
    """A scenario end to end as ``gpuq simulate`` runs it (reading, conversion, simulation, metrics)."""
    started = time.perf_counter()
    plan = plan_scenario([str(scenario)], variant=variant)
    trace = load_workloads(plan)
    read = time.perf_counter() - started
    prepared = prepare(plan, plan.variants[0], trace)
    result = prepared.simulation().run()
    variant_metrics(plan.variants[0].name, result, prepared.config)
    wall = time.perf_counter() - started
    _print(
        f"{label}: {len(prepared.jobs):,} workloads (trace read {read:.1f}s)",
        wall,
        len(prepared.jobs),
        result,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workloads", type=int, default=200_000)
    parser.add_argument("--load", type=float, default=0.9, help="offered GPU load ÷ capacity")
    parser.add_argument("--scaling", action="store_true", help="also run 50k and 100k workloads")
    parser.add_argument("--skip-trace", action="store_true")
    parser.add_argument("--skip-baseline", action="store_true")
    args = parser.parse_args()
    if not args.skip_baseline:
        run_scenario(
            "examples/kueue-perf-baseline", ROOT / "examples/kueue-perf-baseline/scenario.yaml", None
        )
    if not args.skip_trace and PHILLY.exists():
        run_scenario(
            "Philly trace (largest staged), kueue variant", ROOT / "examples/philly/scenario.yaml", "kueue"
        )
    sizes = [args.workloads // 4, args.workloads // 2, args.workloads] if args.scaling else [args.workloads]
    for size in sizes:
        run_synthetic(size, load_factor=args.load)


if __name__ == "__main__":
    main()
