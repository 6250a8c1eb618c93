"""A cluster small enough to compute by hand, for the tests of who waited, deadlines and cost.

Two teams (``team-a``, ``team-b``), each with a ClusterQueue in one cohort and a LocalQueue ``q``;
one flavor ``gpu``; NodePools of 8-GPU nodes at 32 USD per node-hour (4 USD per GPU-hour).
"""

from __future__ import annotations

from pathlib import Path

from gpuq.api.loader import load
from gpuq.sim.jobs import to_sim_jobs
from gpuq.sim.simulator import SimResult, SimSettings, Simulation
from gpuq.sim.traces.model import TraceJob

FLAVOR = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
"""
QUEUE = """---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {team}}}
spec:
  cohortName: shared
  queueingStrategy: {strategy}
  namespaceSelector: {{}}
  preemption: {{reclaimWithinCohort: {reclaim}, withinClusterQueue: LowerPriority}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{{name: gpu, resources: [{{name: nvidia.com/gpu, nominalQuota: {quota}}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: q, namespace: {team}}}
spec: {{clusterQueue: {team}}}
"""
POOL = """---
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {{name: {name}}}
spec:
  machineType: box-8g
  count: {nodes}
  capacityType: {capacity}
  cpu: "64"
  memory: 512Gi
  gpu: {{model: A100-80GB, count: 8}}
  price: 32
"""


def cluster(
    tmp_path: Path,
    quota: tuple[int, int] = (8, 0),
    *,
    strategy: str = "BestEffortFIFO",
    reclaim: str = "Never",
    pools: tuple[tuple[str, int, str], ...] = (("box", 1, "on-demand"),),
) -> Path:
    """The cluster's manifests; ``pools``: (name, nodes, capacity type) of each NodePool."""
    queues = "".join(
        QUEUE.format(team=team, quota=q, strategy=strategy, reclaim=reclaim)
        for team, q in zip(("team-a", "team-b"), quota, strict=True)
    )
    nodes = "".join(POOL.format(name=n, nodes=c, capacity=t) for n, c, t in pools)
    path = tmp_path / "cluster.yaml"
    path.write_text(FLAVOR + queues + nodes)
    return path


def job(name: str, team: str, submit: float, duration: float, gpus: int, **extra: object) -> TraceJob:
    return TraceJob(name, team, "q", submit, duration, pods=1, gpu_milli=1000 * gpus, **extra)  # type: ignore[arg-type]


def simulate(path: Path, jobs: list[TraceJob], settings: SimSettings | None = None) -> SimResult:
    result = load([str(path)])
    assert result.config is not None, result.diagnostics
    sim_jobs, bad = to_sim_jobs(jobs, {}, result.gpu_catalogue, "test")
    assert not bad
    prices = {n.name: 32.0 for n in result.nodes}
    return Simulation(result.config, result.nodes, sim_jobs, settings or SimSettings(), prices=prices).run()
