"""A trace row's ``kind`` column: the pod sets of that kind's Kueue integration, simulated end to end."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuq.cli import app
from gpuq.core.nodes import GPU, GPU_MILLI
from gpuq.sim.jobs import to_sim_jobs
from gpuq.sim.trace_kinds import kind_pod_sets
from gpuq.sim.traces.generic import read_generic_csv
from gpuq.sim.traces.model import TraceJob

runner = CliRunner()
GIB = 2**30


def row(pods: int, gpu_milli: int = 2000, **extra: object) -> TraceJob:
    return TraceJob("j", "team-a", "q", 0.0, 60.0, pods=pods, gpu_milli=gpu_milli, **extra)  # type: ignore[arg-type]


GPU2 = {GPU: 2, "cpu": 4000, "memory": 16 * GIB}
CPU_ONLY = {"cpu": 4000, "memory": 16 * GIB}
SHAPE_CASES = [
    pytest.param("Job", 3, [("main", 3, GPU2)], id="a job is one pod set of pods pods"),
    pytest.param("JobSet", 3, [("workers", 3, GPU2)], id="a jobset is one replicated job"),
    pytest.param(
        "PyTorchJob", 4, [("master", 1, GPU2), ("worker", 3, GPU2)], id="pytorchjob: master + pods-1"
    ),
    pytest.param("PyTorchJob", 1, [("master", 1, GPU2)], id="a one-pod pytorchjob is its master"),
    pytest.param("TFJob", 2, [("chief", 1, GPU2), ("worker", 1, GPU2)], id="tfjob: chief + pods-1"),
    pytest.param("XGBoostJob", 2, [("master", 1, GPU2), ("worker", 1, GPU2)], id="xgboostjob"),
    pytest.param("PaddleJob", 2, [("master", 1, GPU2), ("worker", 1, GPU2)], id="paddlejob"),
    pytest.param("JAXJob", 2, [("worker", 2, GPU2)], id="jaxjob: workers only"),
    pytest.param(
        "MPIJob",
        2,
        [("launcher", 1, CPU_ONLY), ("worker", 2, GPU2)],
        id="mpijob: a launcher without gpus + pods",
    ),
    pytest.param("TrainJob", 3, [("node", 3, GPU2)], id="trainjob: numNodes pods of torch-distributed"),
    pytest.param(
        "RayJob",
        2,
        [("head", 1, CPU_ONLY), ("workers", 2, GPU2), ("submitter", 1, {"cpu": 500, "memory": 200 * 2**20})],
        id="rayjob: a head without gpus, the workers, kueue's default submitter",
    ),
    pytest.param("RayCluster", 2, [("head", 1, CPU_ONLY), ("workers", 2, GPU2)], id="raycluster"),
    pytest.param(
        "SparkApplication",
        2,
        [("driver", 1, CPU_ONLY), ("executor", 2, GPU2)],
        id="spark: driver + executors",
    ),
    pytest.param(
        "LeaderWorkerSet", 3, [("leader", 1, GPU2), ("worker", 2, GPU2)], id="lws: a leader + pods-1 workers"
    ),
    pytest.param("LeaderWorkerSet", 1, [("main", 1, GPU2)], id="a one-pod lws has no leader template"),
    pytest.param("AppWrapper", 2, [("j-0", 2, GPU2)], id="appwrapper: its one component's pods"),
    pytest.param("StatefulSet", 3, [("main", 3, GPU2)], id="statefulset: one pod group of replicas"),
    pytest.param("Pod", 3, [(None, 3, GPU2)], id="pod: a pod group, one pod set per role hash"),
]


@pytest.mark.parametrize(("kind", "pods", "want"), SHAPE_CASES)
def test_pod_sets_of_each_kind(kind: str, pods: int, want: list[tuple[str, int, dict[str, int]]]) -> None:
    built = [(ps.name, ps.count, dict(ps.requests)) for ps in kind_pod_sets(row(pods), kind, GPU2)]
    # a name of None is a role hash Kueue computes: any name
    assert [
        (got[0] if name is None else name, *rest) for got, (name, *rest) in zip(built, want, strict=False)
    ] == built


def test_a_spark_executor_asks_for_whole_gpus() -> None:
    with pytest.raises(ValueError, match="whole GPUs"):
        kind_pod_sets(row(2, 500), "SparkApplication", {GPU_MILLI: 500, "cpu": 1000})


def test_a_share_of_a_gpu_survives_the_manifest_round_trip() -> None:
    (worker,) = kind_pod_sets(row(2, 500), "JAXJob", {GPU_MILLI: 500})
    assert dict(worker.requests) == {GPU_MILLI: 500}


TRACE = """\
name,namespace,queue,submit_s,duration_s,pods,gpus,gpu_model,kind
plain,team-a,q,0,100,2,2,,
torch,team-a,q,0,100,4,1,A100-80GB,PyTorchJob
mpi,team-a,q,5,100,2,2,,MPIJob
tf,team-a,q,5,100,1,8,,TFJob
bad,team-a,q,5,100,1,1,,CronJob
"""


def test_the_generic_reader_reads_the_kind_column_and_refuses_an_unknown_kind(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(TRACE)
    read = read_generic_csv(path)
    assert [(j.name, j.kind) for j in read.jobs] == [
        ("plain", ""),
        ("torch", "PyTorchJob"),
        ("mpi", "MPIJob"),
        ("tf", "TFJob"),
    ]
    (bad,) = read.bad_rows
    assert bad.line == 6 and "kind 'CronJob'" in bad.message


def test_sim_jobs_count_gpus_over_every_pod_set_and_select_the_gpu_model_only_where_gpus_are() -> None:
    from gpuq.core.gpus import DEFAULT_CATALOGUE

    jobs = [row(3, 1000, kind="MPIJob", gpu_model="A100-80GB")]
    (sim,), bad = to_sim_jobs(jobs, {}, DEFAULT_CATALOGUE, "t.csv")
    assert bad == [] and sim.gpus == 3.0
    launcher, worker = sim.workload.pod_sets
    assert launcher.node_selector == {} and worker.node_selector != {}


CLUSTER = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: team-a}
---
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {name: box}
spec: {machineType: box, count: 1, cpu: "64", memory: 512Gi, gpu: {model: A100-80GB, count: 8}, price: 16}
"""


def simulated(tmp_path: Path, cluster: str, trace: str) -> dict[str, tuple[str, str, str]]:
    """``gpuq simulate`` of ``trace`` on ``cluster``: each workload's (pods, gpus, status)."""
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "trace.csv").write_text(trace)
    out = tmp_path / "out"
    args = ["simulate", "-f", str(tmp_path / "cluster.yaml"), "--trace", str(tmp_path / "trace.csv")]
    result = runner.invoke(app, [*args, "--out-dir", str(out), "-q"])
    assert result.exit_code == 0, result.output
    with open(out / "workloads.csv", newline="") as handle:
        return {r["name"]: (r["pods"], r["gpus"], r["status"]) for r in csv.DictReader(handle)}


def test_a_trace_of_mixed_kinds_simulates_to_the_end(tmp_path: Path) -> None:
    assert simulated(tmp_path, CLUSTER, TRACE) == {
        "plain": ("2", "4", "Succeeded"),
        "torch": ("4", "4", "Succeeded"),
        "mpi": ("3", "4", "Succeeded"),
        "tf": ("1", "8", "Succeeded"),
    }


MORE_KINDS = """\
name,namespace,queue,submit_s,duration_s,pods,gpus,cpu,memory,kind
ray,team-a,q,0,100,2,2,4,16Gi,RayJob
lws,team-a,q,0,100,2,1,4,16Gi,LeaderWorkerSet
group,team-a,q,0,100,2,1,4,16Gi,Pod
spark,team-a,q,5,100,1,2,4,16Gi,SparkApplication
train,team-a,q,5,100,2,2,4,16Gi,TrainJob
"""
CPU_CLUSTER = CLUSTER.replace(
    "coveredResources: [nvidia.com/gpu]", "coveredResources: [cpu, memory, nvidia.com/gpu]"
)
CPU_CLUSTER = CPU_CLUSTER.replace(
    "resources: [{name: nvidia.com/gpu, nominalQuota: 8}]",
    "resources: [{name: cpu, nominalQuota: 64}, {name: memory, nominalQuota: 512Gi}, "
    "{name: nvidia.com/gpu, nominalQuota: 8}]",
)


def test_a_trace_of_pod_based_ray_spark_and_trainer_kinds_simulates_to_the_end(tmp_path: Path) -> None:
    assert simulated(tmp_path, CPU_CLUSTER, MORE_KINDS) == {
        "ray": ("4", "4", "Succeeded"),
        "lws": ("2", "2", "Succeeded"),
        "group": ("2", "2", "Succeeded"),
        "spark": ("2", "2", "Succeeded"),
        "train": ("2", "4", "Succeeded"),
    }
