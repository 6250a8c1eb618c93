"""Placement engine benchmark: pods placed per second, and how full the cluster gets, per policy.

Run from the repository root::

    .venv/bin/python bench/placement.py [--nodes 2000] [--pods 20000] [--seed 1] [--json]

The cluster is ``--nodes`` nodes of 8 GPUs (fractional sharing enabled, so a
node takes whole-GPU and GPU-share pods alike) in 4 blocks of 10 racks. The
pods are a deterministic mix from ``--seed``: GPU shares (0.1 to 0.75 of a
GPU), 1, 2 and 4 GPUs as single pods, and 8-GPU pods in gangs of 2 or 4 that
prefer one rack (Kueue's ``podset-preferred-topology``). They arrive one
workload at a time and are placed through :class:`gpuq.core.placement.engine.Placer`;
nothing departs. The benchmark prints figures and never asserts on them.

Figures per policy: pods placed per second (all attempts, failures included),
the GPU allocation ratio when the first gang could not be placed, the final
ratio, and the cost per pod at 1/4, 1/2 and the full node count (same pods per
node), which should stay flat when placement does not scan every node.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

_SRC = Path(__file__).resolve().parent.parent / "src"
if str(_SRC) not in sys.path:  # runnable without an editable install
    sys.path.insert(0, str(_SRC))

from gpuq.core.admission import Scheduler  # noqa: E402
from gpuq.core.cycles import run_cycles  # noqa: E402
from gpuq.core.model import (  # noqa: E402
    ClusterConfig,
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    PodSetAssignment,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    TopologyMode,
    TopologyRequest,
    Workload,
)
from gpuq.core.nodes import GPUSharing, Node, SharingMode  # noqa: E402
from gpuq.core.placement.engine import PlacementFailure, Placer  # noqa: E402
from gpuq.core.placement.scoring import CHOOSERS, inputs_for  # noqa: E402

GI = 1 << 30
BLOCK = "cloud.google.com/gce-topology-block"
RACK = "cloud.google.com/gce-topology-subblock"
HOST = "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)
BLOCKS, RACKS_PER_BLOCK = 4, 10
FLAVOR = ResourceFlavor("h100", topology_name="default")
SHARES = (100, 250, 500, 750)
# (kind, weight): share | 1 | 2 | 4 single pods, gang8 = a gang of 8-GPU pods
MIX = (("share", 30), ("1", 30), ("2", 15), ("4", 10), ("gang8", 15))


def cluster(nodes: int) -> list[Node]:
    """``nodes`` 8-GPU nodes spread evenly over 4 blocks x 10 racks."""
    racks = BLOCKS * RACKS_PER_BLOCK
    allocatable = {"cpu": 192_000, "memory": 2048 * GI, "pods": 110, "nvidia.com/gpu": 8}
    allocatable |= {"gpuq.dev/gpu-milli": 8000, "gpuq.dev/gpu-memory": 8 * 81920}
    out = []
    for i in range(nodes):
        rack = i % racks
        name = f"node-{i:05d}"
        labels = {BLOCK: f"block-{rack // RACKS_PER_BLOCK}", RACK: f"rack-{rack:02d}", HOST: name}
        out.append(
            Node(
                name,
                allocatable,
                labels=labels,
                gpu_model="H100-80GB",
                gpu_count=8,
                gpu_memory_mib=81920,
                sharing=GPUSharing(SharingMode.FRACTIONAL),
            )
        )
    return out


def workloads(pods: int, seed: int) -> list[Workload]:
    """Workloads totalling ``pods`` pods in the documented mix."""
    rng = random.Random(seed)
    kinds = [k for k, _ in MIX]
    weights = [w for _, w in MIX]
    out: list[Workload] = []
    total = 0
    while total < pods:
        kind = rng.choices(kinds, weights)[0]
        count, topology = 1, None
        if kind == "share":
            requests = {"cpu": 2000, "memory": 8 * GI, "gpuq.dev/gpu-milli": rng.choice(SHARES)}
        elif kind == "gang8":
            count = min(rng.choice((2, 4)), pods - total)
            requests = {"cpu": 64_000, "memory": 512 * GI, "nvidia.com/gpu": 8}
            topology = TopologyRequest(TopologyMode.PREFERRED, RACK)
        else:
            gpus = int(kind)
            requests = {"cpu": 8000 * gpus, "memory": 64 * GI * gpus, "nvidia.com/gpu": gpus}
        pod_set = PodSet("main", count, requests, topology=topology)
        out.append(Workload("bench", f"w{len(out):06d}", "q", (pod_set,)))
        total += count
    return out


def run(policy: str, nodes: int, pods: int, seed: int) -> dict[str, Any]:
    """Place every workload once; report throughput and allocation."""
    node_list = cluster(nodes)
    batch = workloads(pods, seed)
    placer = Placer(
        node_list,
        policy=policy,
        policy_inputs=inputs_for(batch, seed),
        flavors={"h100": FLAVOR},
        topologies={"default": LEVELS},
    )
    total_milli = 8000 * nodes
    first_gang_failure: float | None = None
    placed_pods = failed_pods = 0
    gang_s, gangs = 0.0, 0
    clock = time.perf_counter
    gc.collect()
    start = clock()
    for workload in batch:
        began = clock()
        pod_set = workload.pod_sets[0]
        admitted = None
        if pod_set.topology is not None:
            admitted = [PodSetAssignment("main", {"nvidia.com/gpu": "h100"}, {}, pod_set.count)]
        outcome = placer.place(workload, admitted, explain=False)
        if isinstance(outcome, PlacementFailure):
            failed_pods += pod_set.count
            if first_gang_failure is None and pod_set.count > 1:
                first_gang_failure = _allocated(placer) / total_milli
        else:
            placed_pods += pod_set.count
        if pod_set.topology is not None:
            gang_s += clock() - began
            gangs += 1
    wall = clock() - start
    attempted = placed_pods + failed_pods
    return {
        "policy": policy,
        "nodes": nodes,
        "pods": attempted,
        "placed": placed_pods,
        "failed": failed_pods,
        "wall_s": round(wall, 3),
        "pods_per_s": round(attempted / wall),
        "us_per_pod": round(1e6 * wall / attempted, 1),
        "us_per_single_pod": round(1e6 * (wall - gang_s) / max(1, len(batch) - gangs), 1),
        "us_per_gang": round(1e6 * gang_s / max(1, gangs), 1),
        "alloc_at_first_gang_failure_pct": None
        if first_gang_failure is None
        else round(100 * first_gang_failure, 2),
        "final_alloc_pct": round(100 * _allocated(placer) / total_milli, 2),
    }


def admission_run(nodes: int, pods: int, seed: int, queues: int = 10) -> dict[str, Any]:
    """The same pods through the admission engine with the placer: Kueue cycles that bind pods.

    ``queues`` ClusterQueues in one cohort, each with a tenth of the GPUs as nominal quota, over
    one topology-aware flavor; workloads round-robin over them in arrival order. Every head
    that fits its quota is placed (tentatively, then for real); gangs that no rack holds are
    downgraded as Kueue does.
    """
    node_list = cluster(nodes)
    gpus = 8 * nodes
    flavor_quota = {
        "cpu": ResourceQuota(10**9),
        "memory": ResourceQuota(10**16),
        "nvidia.com/gpu": ResourceQuota(gpus // queues),
        "gpuq.dev/gpu-milli": ResourceQuota(1000 * gpus // queues),
    }
    group = ResourceGroup(tuple(flavor_quota), (FlavorQuotas("h100", flavor_quota),))
    cluster_queues = {
        f"cq{i}": ClusterQueue(f"cq{i}", (group,), cohort="all", namespace_selector=LabelSelector())
        for i in range(queues)
    }
    local_queues = {("bench", f"q{i}"): LocalQueue("bench", f"q{i}", f"cq{i}") for i in range(queues)}
    config = ClusterConfig(
        flavors={"h100": FLAVOR},
        cluster_queues=cluster_queues,
        local_queues=local_queues,
        topologies={"default": LEVELS},
    )
    scheduler = Scheduler(config, Placer(node_list, flavors=config.flavors, topologies=config.topologies))
    for i, workload in enumerate(workloads(pods, seed)):
        scheduler.submit(replace(workload, queue_name=f"q{i % queues}", creation_time=float(i)))
    gc.collect()
    start = time.perf_counter()
    run = run_cycles(scheduler)
    wall = time.perf_counter() - start
    return {
        "nodes": nodes,
        "cycles": run.cycles,
        "admitted": len(run.admitted),
        "pending": len(run.pending),
        "unplaced": len(scheduler.unplaced),
        "wall_s": round(wall, 3),
        "admitted_per_s": round(len(run.admitted) / wall),
        "alloc_pct": round(100 * _allocated(scheduler.placer) / (1000 * gpus), 2)
        if scheduler.placer
        else 0.0,
    }


def _allocated(placer: Placer) -> int:
    return sum(8000 - c.gpu_free_milli() for c in placer.nodes.values())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policies", default=",".join(sorted(CHOOSERS)))
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    policies = args.policies.split(",")
    results = [run(policy, args.nodes, args.pods, args.seed) for policy in policies]
    scaling = []
    if not args.skip_scaling:
        for policy in policies:
            for fraction in (4, 2, 1):
                nodes = args.nodes // fraction
                scaling.append(run(policy, nodes, args.pods // fraction, args.seed))
    admission = admission_run(args.nodes, args.pods, args.seed)
    if args.json:
        print(json.dumps({"main": results, "scaling": scaling, "admission": admission}, indent=2))
        return
    print(f"{args.pods} pods on {args.nodes} nodes x 8 GPUs (4 blocks x 10 racks), seed {args.seed}")
    header = f"{'policy':<16}{'pods/s':>9}{'us/pod':>9}{'placed':>9}{'failed':>9}"
    print(header + f"{'alloc% at 1st gang fail':>25}{'final alloc%':>14}")
    for r in results:
        first = r["alloc_at_first_gang_failure_pct"]
        print(
            f"{r['policy']:<16}{r['pods_per_s']:>9}{r['us_per_pod']:>9}{r['placed']:>9}{r['failed']:>9}"
            f"{'-' if first is None else first:>25}{r['final_alloc_pct']:>14}"
        )
    if scaling:
        print("\nscaling (pods per node fixed): microseconds per single pod | per topology gang")
        for policy in policies:
            row = [r for r in scaling if r["policy"] == policy]
            cells = "  ".join(
                f"{r['nodes']} nodes: {r['us_per_single_pod']} | {r['us_per_gang']}" for r in row
            )
            print(f"{policy:<16}{cells}")
    a = admission
    print(
        f"\nadmission with placement (10 ClusterQueues in a cohort, binpack): {a['admitted']} admitted in "
        f"{a['cycles']} cycles, {a['pending']} pending, {a['unplaced']} unplaced, {a['wall_s']} s "
        f"({a['admitted_per_s']} admitted/s), GPU allocation {a['alloc_pct']} %"
    )


if __name__ == "__main__":
    main()
