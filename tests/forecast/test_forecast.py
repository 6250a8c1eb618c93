"""Forecasts small enough to compute by hand: exact predicted starts from a known queue and runtimes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpuq.api.loader import load
from gpuq.core.model import Admission, PodSet, PodSetAssignment, Workload
from gpuq.core.nodes import GPU
from gpuq.forecast.forecast import QUEUE_MODEL, Forecast, ForecastSettings, forecast
from gpuq.snapshot.cluster import NodeArrival, PendingWorkload, RunningWorkload, Snapshot
from gpuq.snapshot.runtimes import EstimatorSettings, Finished, Profile, RuntimeEstimator, Source

NOW = 1_000_000.0

CLUSTER = """
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
  cpu: "64"
  memory: 512Gi
  gpu: {{model: A100-80GB, count: 8}}
"""

QUEUE = """---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {team}}}
spec:
  cohortName: shared
  namespaceSelector: {{}}
  queueingStrategy: {strategy}
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


def snapshot_base(
    tmp_path: Path,
    *,
    quotas: dict[str, int],
    nodes: int = 1,
    reclaim: str = "Any",
    strategy: str = "BestEffortFIFO",
) -> Snapshot:
    queues = "".join(
        QUEUE.format(team=t, quota=q, reclaim=reclaim, strategy=strategy) for t, q in quotas.items()
    )
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER.format(queues=queues, nodes=nodes))
    result = load([str(path)])
    assert not result.errors, result.errors
    assert result.config is not None
    return Snapshot(NOW, result.config, result.nodes)


def workload(name: str, team: str, gpus: int, created: float, priority: int = 0) -> Workload:
    pod_set = PodSet("main", 1, {GPU: gpus})
    return Workload(team, name, "q", (pod_set,), priority=priority, creation_time=created, uid=name)


def running(
    name: str, team: str, gpus: int, started: float, expected_s: float, **kw: object
) -> RunningWorkload:
    base = workload(name, team, gpus, started - 1, **kw)  # type: ignore[arg-type]
    admission = Admission(team, (PodSetAssignment("main", {GPU: "gpu"}, {GPU: gpus}, 1),))
    admitted = Workload(
        base.namespace,
        base.name,
        base.queue_name,
        base.pod_sets,
        priority=base.priority,
        creation_time=base.creation_time,
        uid=base.uid,
        admission=admission,
        quota_reserved_time=started,
    )
    return RunningWorkload(admitted, Profile(team, "q", gpus=gpus, expected_s=expected_s), started)


def pending(
    name: str, team: str, gpus: int, created: float, expected_s: float | None, **kw: object
) -> PendingWorkload:
    return PendingWorkload(
        workload(name, team, gpus, created, **kw),  # type: ignore[arg-type]
        Profile(team, "q", gpus=gpus, expected_s=expected_s),
    )


def starts(result: Forecast) -> dict[str, float | None]:
    return {
        key: (eta.start_at - NOW if eta.start_at is not None else None)
        for key, eta in result.etas.items()
        if eta.state == "Pending"
    }


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        # 4 GPUs free: p1 starts now; p2 (8) waits for r1 and p1; p3 (4) backfills when p1 ends.
        ("BestEffortFIFO", {"team-a/p1": 0.0, "team-a/p2": 400.0, "team-a/p3": 300.0}),
        # StrictFIFO: p3 waits behind p2, which runs 400..900.
        ("StrictFIFO", {"team-a/p1": 0.0, "team-a/p2": 400.0, "team-a/p3": 900.0}),
    ],
)
@pytest.mark.parametrize("exact_starts", [None, 1, 0])
def test_one_node_a_known_queue_and_exact_runtimes_give_exact_starts(
    tmp_path: Path, strategy: str, expected: dict[str, float], exact_starts: int | None
) -> None:
    """The same starts whether the engine runs to the end or hands the queue to the queue model
    (no preemption and one node: the model has no choice the engine would make otherwise)."""
    base = snapshot_base(tmp_path, quotas={"team-a": 8}, strategy=strategy)
    snapshot = Snapshot(
        NOW,
        base.config,
        base.nodes,
        running=(running("r1", "team-a", 4, NOW - 600, 1000),),
        pending=(
            pending("p1", "team-a", 4, NOW - 50, 300),
            pending("p2", "team-a", 8, NOW - 40, 500),
            pending("p3", "team-a", 4, NOW - 30, 100),
        ),
    )
    result = forecast(snapshot, RuntimeEstimator(), ForecastSettings(exact_starts=exact_starts))
    assert starts(result) == expected
    modelled = {k for k, eta in result.etas.items() if eta.method == QUEUE_MODEL}
    assert modelled == ({"team-a/p2", "team-a/p3"} if exact_starts is not None else set())
    r1 = result.etas["team-a/r1"]
    assert r1.state == "Running" and r1.end_at == NOW + 400 and r1.runtime.source == Source.ANNOTATION
    p2 = result.etas["team-a/p2"]
    assert p2.admit_at == NOW + 400 and p2.end_at == NOW + 900 and p2.start_range == (NOW + 400, NOW + 400)


def test_a_higher_priority_workload_preempts_ahead_and_starts_now(tmp_path: Path) -> None:
    base = snapshot_base(tmp_path, quotas={"team-a": 8})
    snapshot = Snapshot(
        NOW,
        base.config,
        base.nodes,
        running=(running("low", "team-a", 8, NOW - 100, 1000),),
        pending=(pending("urgent", "team-a", 8, NOW - 10, 200, priority=1000),),
    )
    result = forecast(snapshot, RuntimeEstimator())
    assert result.etas["team-a/urgent"].start_at == NOW
    # The victim (no checkpoint) loses its 100 s and runs its remaining 900 s again... from scratch:
    # the simulator requeues it with the work left at eviction, so it ends 200 + 900 s from now.
    assert result.etas["team-a/low"].end_at == NOW + 200 + 900


@pytest.mark.parametrize(("reclaim", "start"), [("Any", 0.0), ("Never", 1000.0)])
def test_reclaiming_lent_quota_ahead_of_a_borrower(tmp_path: Path, reclaim: str, start: float) -> None:
    """team-b borrows team-a's idle half; team-a's job reclaims it at once, or waits when it may not."""
    base = snapshot_base(tmp_path, quotas={"team-a": 4, "team-b": 4}, reclaim=reclaim)
    snapshot = Snapshot(
        NOW,
        base.config,
        base.nodes,
        running=(running("borrower", "team-b", 8, NOW - 100, 1100),),
        pending=(pending("owner", "team-a", 4, NOW - 10, 100),),
    )
    assert starts(forecast(snapshot, RuntimeEstimator())) == {"team-a/owner": start}


def test_nodes_still_provisioning_start_the_queue_when_they_arrive(tmp_path: Path) -> None:
    base = snapshot_base(tmp_path, quotas={"team-a": 16}, nodes=2)
    (first, second) = (node.name for node in base.nodes)
    snapshot = Snapshot(
        NOW,
        base.config,
        base.nodes,
        running=(running("r", "team-a", 8, NOW - 10, 5000),),
        pending=(pending("p", "team-a", 8, NOW - 5, 100),),
        provisioning=(NodeArrival((second,), NOW + 600),),
    )
    result = forecast(snapshot, RuntimeEstimator())
    # Admitted on quota at once; its pod waits for the node being provisioned.
    assert result.etas["team-a/p"].admit_at == NOW
    assert result.etas["team-a/p"].start_at == NOW + 600
    assert first != second


def test_history_quantiles_give_a_range(tmp_path: Path) -> None:
    base = snapshot_base(tmp_path, quotas={"team-a": 8})
    history = [Finished(Profile("team-a", "q", gpus=8), float(s)) for s in (100, 200, 300, 400, 500)]
    estimator = RuntimeEstimator.from_history(history, EstimatorSettings(low=0.5, high=0.9))
    snapshot = Snapshot(
        NOW,
        base.config,
        base.nodes,
        running=(
            RunningWorkload(running("r", "team-a", 8, NOW, 0).workload, Profile("team-a", "q", gpus=8), NOW),
        ),
        pending=(pending("p", "team-a", 8, NOW - 5, None),),
    )
    result = forecast(snapshot, estimator)
    eta = result.etas["team-a/p"]
    # Runtimes: p50 = 300, p90 = 460; p waits for r's whole run.
    assert eta.runtime.source == Source.HISTORY
    assert (eta.start_at, eta.start_range) == (NOW + 300, (NOW + 300, NOW + 460))
    assert eta.end_range == (NOW + 600, NOW + 920)


def test_expected_arrivals_of_the_recent_past_can_delay_a_start(tmp_path: Path) -> None:
    """A high-priority job submitted 10 minutes ago is expected again 10 minutes from now."""
    base = snapshot_base(tmp_path, quotas={"team-a": 8})
    snapshot = Snapshot(
        NOW,
        base.config,
        base.nodes,
        running=(running("r", "team-a", 8, NOW - 100, 1000),),
        pending=(pending("p", "team-a", 8, NOW - 50, 100),),
        recent=(pending("hot", "team-a", 8, NOW - 300, 500, priority=1000),),
    )
    quiet = forecast(snapshot, RuntimeEstimator())
    busy = forecast(snapshot, RuntimeEstimator(), ForecastSettings(arrivals_window_s=600))
    assert quiet.etas["team-a/p"].start_at == NOW + 900
    # The replayed arrival comes at +300 and preempts r (no checkpoint: its 400 s are lost); it runs
    # until +800, then r, created before p, runs its 900 s again; p starts at +1700.
    assert busy.etas["team-a/p"].start_at == NOW + 1700
    assert set(busy.etas) == set(quiet.etas)


def test_a_workload_beyond_the_horizon_has_no_start(tmp_path: Path) -> None:
    base = snapshot_base(tmp_path, quotas={"team-a": 8})
    snapshot = Snapshot(
        NOW,
        base.config,
        base.nodes,
        running=(running("r", "team-a", 8, NOW, 10_000),),
        pending=(pending("p", "team-a", 8, NOW, 10),),
    )
    eta = forecast(snapshot, RuntimeEstimator(), ForecastSettings(horizon_s=3600)).etas["team-a/p"]
    assert eta.start_at is None and eta.start_range == (None, None)


@pytest.mark.parametrize("exact_starts", [None, 0])
def test_a_requeue_backoff_still_running_holds_the_start_until_it_ends(
    tmp_path: Path, exact_starts: int | None
) -> None:
    base = snapshot_base(tmp_path, quotas={"team-a": 8})
    backed_off = pending("b", "team-a", 8, NOW - 50, 100)
    snapshot = Snapshot(
        NOW,
        base.config,
        base.nodes,
        pending=(
            PendingWorkload(replace(backed_off.workload, requeue_at=NOW + 300), backed_off.profile),
            pending("other", "team-a", 4, NOW - 40, 100),
        ),
    )
    result = forecast(snapshot, RuntimeEstimator(), ForecastSettings(exact_starts=exact_starts))
    # "other" starts at once; "b" waits for its backoff (300 s), when other's 4 GPUs are free again.
    assert starts(result) == {"team-a/b": 300.0, "team-a/other": 0.0}
