"""The simulator on scenarios small enough to compute by hand: exact starts, finishes, losses."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuq.api.loader import load
from gpuq.core.lifecycle import WorkloadState
from gpuq.sim.jobs import to_sim_jobs
from gpuq.sim.simulator import NodeChange, SimResult, SimSettings, Simulation
from gpuq.sim.traces.model import TraceJob

TWO_TEAMS = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: gpu}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {{name: high}}
value: 1000
{queues}
---
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {{name: box}}
spec:
  machineType: box-8g
  count: {nodes}
  max: 4
  cpu: "64"
  memory: 512Gi
  gpu: {{model: A100-80GB, count: 8}}
  price: 32
{extra}
"""

QUEUE = """---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {team}}}
spec:
  cohortName: shared
  namespaceSelector: {{}}
  preemption: {{reclaimWithinCohort: {reclaim}, withinClusterQueue: LowerPriority}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{{name: nvidia.com/gpu, nominalQuota: {quota}}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: q, namespace: {team}}}
spec: {{clusterQueue: {team}}}
"""


def cluster(
    tmp_path: Path,
    *,
    reclaim: str = "Any",
    quota: int = 4,
    quota_b: int | None = None,
    nodes: int = 1,
    extra: str = "",
) -> Path:
    quotas = {"team-a": quota, "team-b": quota if quota_b is None else quota_b}
    queues = "".join(QUEUE.format(team=t, reclaim=reclaim, quota=q) for t, q in quotas.items())
    path = tmp_path / "cluster.yaml"
    path.write_text(TWO_TEAMS.format(queues=queues, nodes=nodes, extra=extra))
    return path


def job(name: str, team: str, submit: float, duration: float, gpus: int, **extra: object) -> TraceJob:
    return TraceJob(name, team, "q", submit, duration, pods=1, gpu_milli=1000 * gpus, **extra)  # type: ignore[arg-type]


def simulate(path: Path, jobs: list[TraceJob], settings: SimSettings | None = None) -> SimResult:
    result = load([str(path)])
    assert result.config is not None, result.errors
    sim_jobs, bad = to_sim_jobs(jobs, {"high": 1000}, result.gpu_catalogue, "test")
    assert not bad
    prices = {n.name: 32.0 for n in result.nodes}
    return Simulation(result.config, result.nodes, sim_jobs, settings or SimSettings(), prices=prices).run()


def times(result: SimResult, key: str) -> tuple[float | None, float | None, float | None]:
    run = result.runs[key]
    return run.first_admitted, run.first_started, run.ended


CASES = [
    (
        "a borrower is preempted when the lender reclaims; it restarts from scratch",
        {"reclaim": "Any"},
        [job("a1", "team-a", 0, 100, 8), job("b1", "team-b", 10, 50, 4)],
        {"team-a/a1": (0, 0, 160), "team-b/b1": (10, 10, 60)},
        {"team-a/a1": (1, 80.0)},
    ),
    (
        "a checkpoint every 4 s keeps 8 of the 10 s done",
        {"reclaim": "Any"},
        [job("a1", "team-a", 0, 100, 8, checkpoint_s=4.0), job("b1", "team-b", 10, 50, 4)],
        {"team-a/a1": (0, 0, 152), "team-b/b1": (10, 10, 60)},
        {"team-a/a1": (1, 16.0)},
    ),
    (
        "without reclaim the lender's job waits for the borrower to finish",
        {"reclaim": "Never"},
        [job("a1", "team-a", 0, 100, 8), job("b1", "team-b", 10, 50, 4)],
        {"team-a/a1": (0, 0, 100), "team-b/b1": (100, 100, 150)},
        {"team-a/a1": (0, 0.0)},
    ),
    (
        "a finish and an arrival at the same instant: the arrival sees the freed GPUs",
        {"reclaim": "Never", "quota": 8},
        [job("a1", "team-a", 0, 100, 8), job("a2", "team-a", 100, 10, 8)],
        {"team-a/a1": (0, 0, 100), "team-a/a2": (100, 100, 110)},
        {},
    ),
    (
        "a higher priority in the same queue preempts a lower one when nothing can be borrowed",
        {"reclaim": "Never", "quota": 8, "quota_b": 0},
        [job("a1", "team-a", 0, 100, 8), job("a2", "team-a", 5, 10, 8, priority="high")],
        {"team-a/a1": (0, 0, 115), "team-a/a2": (5, 5, 15)},
        {"team-a/a1": (1, 40.0)},
    ),
    (
        "a higher priority borrows rather than preempts; its pods then wait for the node",
        {"reclaim": "Never", "quota": 8},
        [job("a1", "team-a", 0, 100, 8), job("a2", "team-a", 5, 10, 8, priority="high")],
        {"team-a/a1": (0, 0, 100), "team-a/a2": (5, 100, 110)},
        {"team-a/a1": (0, 0.0)},
    ),
]


@pytest.mark.parametrize(("title", "options", "jobs", "expected", "losses"), CASES, ids=[c[0] for c in CASES])
def test_hand_computed_timelines(
    tmp_path: Path,
    title: str,
    options: dict[str, object],
    jobs: list[TraceJob],
    expected: dict[str, tuple[float, float, float]],
    losses: dict[str, tuple[int, float]],
) -> None:
    result = simulate(cluster(tmp_path, **options), jobs)  # type: ignore[arg-type]
    for key, (admitted, started, ended) in expected.items():
        assert times(result, key) == (admitted, started, ended), key
        assert result.runs[key].status == WorkloadState.SUCCEEDED
    for key, (preempted, lost_gpu_s) in losses.items():
        assert (result.runs[key].preempted, result.runs[key].lost_gpu_s) == (preempted, lost_gpu_s)


def test_gpu_time_and_cost_follow_the_node_price(tmp_path: Path) -> None:
    """8 GPUs for 100 s on a node of 8 GPUs at 32 an hour: 800 GPU-s, 32 × 100 / 3600."""
    result = simulate(cluster(tmp_path, quota=8), [job("a1", "team-a", 0, 100, 8)])
    run = result.runs["team-a/a1"]
    assert run.gpu_s == 800
    assert run.cost == pytest.approx(32 * 100 / 3600)
    assert result.span_s == 100 and result.gpus_total == 8


def test_startup_delay_runs_between_binding_and_start(tmp_path: Path) -> None:
    result = simulate(cluster(tmp_path, quota=8), [job("a1", "team-a", 0, 100, 8)], SimSettings(startup_s=30))
    run = result.runs["team-a/a1"]
    assert (run.first_bound, run.first_started, run.ended) == (0, 30, 130)
    assert run.gpu_s == 8 * 130  # the GPUs are held while the pods start


def test_pods_that_no_node_holds_wait_admitted_and_start_when_one_frees(tmp_path: Path) -> None:
    """Quota 16 but one 8-GPU node: both are admitted, the second binds when the first ends."""
    result = simulate(
        cluster(tmp_path, quota=16), [job("a1", "team-a", 0, 100, 8), job("a2", "team-a", 1, 10, 8)]
    )
    assert times(result, "team-a/a2") == (1, 100, 110)
    assert result.runs["team-a/a2"].first_bound == 100


WAIT_FOR_PODS_READY = """---
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
waitForPodsReady:
  enable: true
  timeout: 30s
  requeuingStrategy: {backoffBaseSeconds: 60, backoffMaxSeconds: 3600}
"""


def test_pods_ready_timeout_evicts_and_requeues_after_kueue_backoff(tmp_path: Path) -> None:
    """a2 is admitted at 1 but no node holds it: evicted at 31, back at 91 (60 s backoff), admitted
    again and unplaced until a1 ends at 100."""
    path = cluster(tmp_path, quota=16, extra=WAIT_FOR_PODS_READY)
    result = simulate(path, [job("a1", "team-a", 0, 100, 8), job("a2", "team-a", 1, 10, 8)])
    run = result.runs["team-a/a2"]
    assert run.ready_timeouts == 1 and run.evictions == 1 and run.preempted == 0
    assert (run.first_admitted, run.first_started, run.ended) == (1, 100, 110)


def test_a_removed_node_evicts_its_workload_which_resumes_when_a_node_is_added(tmp_path: Path) -> None:
    settings = SimSettings(
        node_changes=(
            NodeChange(50, "remove", pool="box", count=1),
            NodeChange(80, "add", pool="box", count=1),
        )
    )
    result = simulate(
        cluster(tmp_path, quota=8), [job("a1", "team-a", 0, 100, 8, checkpoint_s=20.0)], settings
    )
    run = result.runs["team-a/a1"]
    assert run.evictions == 1 and run.reason.startswith("NodeFailures")
    # 40 of the 50 s were checkpointed: 60 s remain from 80.
    assert (run.ended, run.lost_gpu_s) == (140, 80.0)
    assert result.recorder.capacity.value == 8


def test_the_horizon_stops_the_run_with_work_in_flight(tmp_path: Path) -> None:
    jobs = [job("a1", "team-a", 0, 100, 8), job("a2", "team-a", 10, 10, 8)]
    result = simulate(cluster(tmp_path, quota=8), jobs, SimSettings(horizon_s=50))
    assert result.span_s == 50
    assert result.runs["team-a/a1"].status == WorkloadState.RUNNING
    assert result.runs["team-a/a1"].gpu_s == 400
    # a2 borrows team-b's quota and is admitted, but no node holds it before the horizon.
    assert result.runs["team-a/a2"].status == WorkloadState.ADMITTED
    assert result.runs["team-a/a2"].first_bound is None


def test_a_workload_without_its_local_queue_is_inadmissible(tmp_path: Path) -> None:
    missing = TraceJob("x", "team-c", "q", 0, 10, gpu_milli=1000)
    result = simulate(cluster(tmp_path), [missing])
    run = result.runs["team-c/x"]
    assert run.status == WorkloadState.INADMISSIBLE
    assert "LocalQueue q doesn't exist in namespace team-c" in run.reason
