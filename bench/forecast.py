"""Start-time forecast speed: one ``forecast(...)`` on a busy cluster (both simulation runs).

The cluster: ``--nodes`` nodes of 8 H100s, ``--teams`` ClusterQueues with equal quotas in one
cohort (reclaim Any, LowerPriority within queues). One GPU per running workload fills every GPU
(``--nodes`` × 8 running), then ``--pending`` workloads of 1/2/4/8 GPUs (weights 4/3/2/1) wait.
The snapshot is taken from a simulation paused once they are all queued (what runs where, what
waits in which order), as the live control plane would hold it; runtimes come from a history of
50 finished runs per team and size (lognormal, median 1 h, σ 1). Prints the wall time, workloads
per second, the share of each of the two runs (low and high runtimes) and how many ETAs came from
the exact engine and how many from the queue model (past ``--exact-starts`` admissions; 0 for no
limit). Usage:

    .venv/bin/python bench/forecast.py [--nodes 125] [--teams 8] [--pending 10000] [--exact-starts 500]
        [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import sys
import tempfile
import time
from pathlib import Path

from gpuq.api.loader import load
from gpuq.core.model import ClusterConfig, PodSet, Workload
from gpuq.core.nodes import GPU, Node
from gpuq.forecast.forecast import DEFAULT_EXACT_STARTS, PARALLEL_MIN, QUEUE_MODEL, ForecastSettings, forecast
from gpuq.forecast.replay import Replay, default_profile
from gpuq.sim.jobs import SimJob
from gpuq.sim.simulator import SimSettings, Simulation
from gpuq.snapshot.cluster import Snapshot
from gpuq.snapshot.runtimes import Finished, RuntimeEstimator

SIZES = (1, 2, 4, 8)
WEIGHTS = (4, 3, 2, 1)


def cluster(nodes: int, teams: int) -> tuple[ClusterConfig, tuple[Node, ...]]:
    quota = nodes * 8 // teams
    docs = [
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: h100}\n",
        f"""apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {{name: h100}}
spec: {{machineType: a3-highgpu-8g, count: {nodes}, cpu: "208", memory: 1872Gi, pods: 110,
  gpu: {{model: H100-80GB, count: 8}}}}
""",
    ]
    for index in range(teams):
        docs.append(f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: team-{index}}}
spec:
  cohortName: all
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
metadata: {{name: q, namespace: team-{index}}}
spec: {{clusterQueue: team-{index}}}
""")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cluster.yaml"
        path.write_text("---\n".join(docs))
        result = load([str(path)])
    if result.errors or result.config is None:
        sys.exit(f"bad synthetic configuration: {result.errors}")
    return result.config, result.nodes


def job(team: int, index: int, gpus: int, created: float, rng: random.Random) -> SimJob:
    pod_set = PodSet("main", 1, {GPU: gpus})
    name = f"w{index:06d}"
    workload = Workload(f"team-{team}", name, "q", (pod_set,), creation_time=created, uid=name)
    return SimJob(workload, rng.lognormvariate(0.0, 1.0) * 3600, gpus)


def snapshot(nodes: int, teams: int, pending: int, seed: int) -> tuple[Snapshot, RuntimeEstimator]:
    """The cluster full of 1-GPU runners with ``pending`` workloads queued behind them."""
    config, machines = cluster(nodes, teams)
    rng = random.Random(seed)
    running = nodes * 8
    jobs = [job(i % teams, i, 1, 0.0, rng) for i in range(running)]
    jobs += [
        job(rng.randrange(teams), running + i, rng.choices(SIZES, WEIGHTS)[0], 1.0, rng)
        for i in range(pending)
    ]
    estimator = RuntimeEstimator()
    for team in range(teams):
        for gpus in SIZES:
            profile = default_profile(job(team, 0, gpus, 0.0, rng))
            for _ in range(50):
                estimator.add(Finished(profile, rng.lognormvariate(0.0, 1.0) * 3600))
    taken: list[Snapshot] = []
    replay = Replay(estimator)
    at = 2.0
    Simulation(
        config,
        machines,
        jobs,
        SimSettings(horizon_s=at),  # stop at the snapshot
        probes=[at],
        on_probe=lambda t, s: taken.append(replay.snapshot(s, t)),
    ).run()
    return taken[0], estimator


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--teams", type=int, default=8)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exact-starts", type=int, default=DEFAULT_EXACT_STARTS, help="0: no limit")
    parser.add_argument("--sequential", action="store_true", help="both runs in this process")
    parser.add_argument("--profile", action="store_true", help="cProfile the forecast; print the top 25")
    args = parser.parse_args()
    started = time.perf_counter()
    taken, estimator = snapshot(args.nodes, args.teams, args.pending, args.seed)
    print(
        f"snapshot: {len(taken.running):,} running, {len(taken.pending):,} pending on {args.nodes} nodes "
        f"x 8 GPUs, {args.teams} ClusterQueues in one cohort (built in {time.perf_counter() - started:.1f}s)"
    )
    profiler = cProfile.Profile() if args.profile else None
    settings = ForecastSettings(
        exact_starts=args.exact_starts or None, parallel_min=None if args.sequential else PARALLEL_MIN
    )
    if profiler is not None:
        profiler.enable()
    result = forecast(taken, estimator, settings)
    if profiler is not None:
        profiler.disable()
    workloads = len(taken.running) + len(taken.pending)
    started_in = sum(1 for eta in result.etas.values() if eta.start_at is not None)
    print(
        f"forecast: {result.took_s:.2f}s wall, {workloads / result.took_s:,.0f} workloads/s, "
        f"{started_in:,} of {len(result.etas):,} with a start within {result.horizon_s / 86400:g} days"
    )
    modelled = sum(1 for eta in result.etas.values() if eta.method == QUEUE_MODEL)
    print(
        f"  exact engine for the first {args.exact_starts or 'all':} admissions of each run: "
        f"{len(result.etas) - modelled:,} ETAs simulated, {modelled:,} by the queue model"
    )
    where = "in a forked process, at the same time" if result.parallel else "here, one after the other"
    low, high = result.runs_s
    print(f"  low runtimes: {low:.2f}s here; high runtimes: {high:.2f}s {where}")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
