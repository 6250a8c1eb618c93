"""Laws every simulation keeps, on random traces: work is conserved, nothing exceeds its limit,
every workload ends exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuq.api.loader import load
from gpuq.core.lifecycle import WorkloadState
from gpuq.sim.jobs import to_sim_jobs
from gpuq.sim.simulator import SimSettings, Simulation
from gpuq.sim.traces.model import TraceJob

CONFIG = (
    """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: all}
---
"""
    + "---\n".join(
        f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {team}}}
spec:
  cohortName: all
  namespaceSelector: {{}}
  preemption: {{reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}}
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
        for team, quota in (("a", 8), ("b", 4), ("c", 4))
    )
    + """---
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {name: box}
spec: {machineType: box, count: 2, cpu: "64", memory: 512Gi, gpu: {model: A100-80GB, count: 8}, price: 8}
"""
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "cluster.yaml"
    path.write_text(CONFIG)
    return path


jobs_strategy = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.integers(0, 200),  # submit
        st.integers(1, 300),  # duration
        st.sampled_from([1, 2, 4, 8]),  # GPUs per pod
        st.integers(1, 2),  # pods
        st.sampled_from([0, 100]),  # priority
        st.sampled_from([None, 7.0, 50.0]),  # checkpoint interval
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(rows=jobs_strategy)
def test_simulation_laws(
    cluster: Path, rows: list[tuple[str, int, int, int, int, int, float | None]]
) -> None:
    loaded = load([str(cluster)])
    assert loaded.config is not None
    trace = [
        TraceJob(
            f"j{i}",
            team,
            "q",
            submit,
            duration,
            pods,
            gpus * 1000,
            priority=str(prio),
            checkpoint_s=ckpt,
            source_line=i + 2,
        )
        for i, (team, submit, duration, gpus, pods, prio, ckpt) in enumerate(rows)
    ]
    jobs, bad = to_sim_jobs(trace, {}, loaded.gpu_catalogue, "t")
    assert not bad
    result = Simulation(loaded.config, loaded.nodes, jobs, SimSettings()).run()
    recorder = result.recorder
    for run in result.runs.values():
        # Every workload ends exactly once, finished, and its kept work is exactly its duration.
        assert run.status == WorkloadState.SUCCEEDED and run.ended is not None
        assert run.gpu_s == pytest.approx(run.job.duration_s * run.job.gpus + run.lost_gpu_s)
        assert run.lost_gpu_s >= 0 and run.preempted <= run.evictions
        assert run.first_admitted is not None and run.first_started is not None
        assert run.job.workload.creation_time <= run.first_admitted <= run.first_started <= run.ended
    # Nothing is held at the end; nothing ever held more GPUs than exist.
    assert recorder.allocated.value == 0 and all(v <= 16 for v in recorder.allocated.values)
    assert all(s.value == 0 for s in recorder.running.values())
    assert all(s.value == 0 and min(s.values, default=0) >= 0 for s in recorder.pending.values())
    assert all(v >= 0 for v in recorder.fragmented.values)
    # Quota held never exceeds the cohort's total (16 GPUs), and no queue borrows a negative amount.
    assert all(v <= 16 for v in recorder.quota_used["nvidia.com/gpu"].values)
    assert all(q.borrowed_s >= 0 and q.lent_s >= -1e-9 for q in recorder.queues.values())
