"""Backfill with reservations (``gpuq.dev/backfill`` on a StrictFIFO ClusterQueue), in simulated time.

One 8-GPU StrictFIFO queue: ``big`` (6 GPUs, 100 s) runs; ``head`` (4 GPUs) cannot fit until it
ends, so it is reserved to start at 100 s; ``short`` (2 GPUs, 50 s) ends before that and
``long`` (1 GPU, 200 s) does not. Workloads declare their start-up plus ``declaredRuntimeFactor``
times their runtime.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuq.sim import metrics
from gpuq.sim.scenario import load_workloads, plan_scenario, prepare
from gpuq.sim.simulator import SimResult

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
  queueingStrategy: StrictFIFO
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
"""
TRACE = """\
name,namespace,queue,submit_s,duration_s,pods,gpus
big,team-a,q,0,100,1,6
head,team-a,q,1,100,1,4
short,team-a,q,2,50,1,2
long,team-a,q,3,200,1,1
"""
OVERRAN = (
    "Evicted at the end of the declared runtime it was backfilled with (25s): its quota is reserved for "
    "the head of its ClusterQueue"
)


def simulate(tmp_path: Path, settings: dict[str, object], trace: str = TRACE) -> SimResult:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "trace.csv").write_text(trace)
    spec = {"config": ["cluster.yaml"], "workloads": {"trace": {"path": "trace.csv"}}, "settings": settings}
    scenario = {
        "apiVersion": "gpuq.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": "s"},
        "spec": spec,
    }
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    plan = plan_scenario([str(tmp_path / "scenario.yaml")])
    return prepare(plan, plan.variants[0], load_workloads(plan)).simulation().run()


def admissions(result: SimResult) -> dict[str, tuple[float | None, float | None, int]]:
    """Each workload's (first admission, end, evictions)."""
    return {
        run.job.workload.name: (run.first_admitted, run.ended, run.evictions) for run in result.runs.values()
    }


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        pytest.param(
            {},
            {"big": (0, 100, 0), "head": (100, 200, 0), "short": (100, 150, 0), "long": (100, 300, 0)},
            id="StrictFIFO without backfill: everything behind the head waits for it",
        ),
        pytest.param(
            {"backfill": True},
            {"big": (0, 100, 0), "head": (100, 200, 0), "short": (100, 150, 0), "long": (100, 300, 0)},
            id="backfill without declared runtimes: nothing can be shown to end in time",
        ),
        pytest.param(
            {"declaredRuntimeFactor": 1},
            {"big": (0, 100, 0), "head": (100, 200, 0), "short": (100, 150, 0), "long": (100, 300, 0)},
            id="declared runtimes without backfill: Kueue's StrictFIFO",
        ),
        pytest.param(
            {"backfill": True, "declaredRuntimeFactor": 1},
            {"big": (0, 100, 0), "head": (100, 200, 0), "short": (2, 52, 0), "long": (100, 300, 0)},
            id="a workload that ends before the reservation runs first; one that ends after waits",
        ),
        pytest.param(
            {"backfill": True, "declaredRuntimeFactor": 2},
            {"big": (0, 100, 0), "head": (100, 200, 0), "short": (2, 52, 0), "long": (100, 300, 0)},
            id="over-declared: a later reservation (200 s), the head still starts when the quota frees",
        ),
        pytest.param(
            {"backfill": True, "declaredRuntimeFactor": 0.5},
            {"big": (0, 100, 0), "head": (100, 200, 0), "short": (2, 150, 1), "long": (100, 300, 0)},
            id="under-declared: evicted at its declared end, then it waits its turn",
        ),
    ],
)
def test_backfill_ahead_of_a_reserved_head(
    tmp_path: Path, settings: dict[str, object], expected: dict[str, tuple[float, float, int]]
) -> None:
    assert admissions(simulate(tmp_path, settings)) == expected


def test_an_overrun_workload_is_evicted_with_the_reason_and_never_backfilled_again(tmp_path: Path) -> None:
    result = simulate(tmp_path, {"backfill": True, "declaredRuntimeFactor": 0.5})
    short = next(r for r in result.runs.values() if r.job.workload.name == "short")
    assert short.reason == OVERRAN
    assert short.bound_times == [2.0, 100.0]  # once as a backfill, once in its turn after the head
    assert metrics.backfill_metrics(list(result.runs.values())) == {
        "backfilled": 1,
        "backfilled_workloads": 1,
        "evicted_at_declared_runtime": 1,
        "heads_reserved": 1,
        "heads_started_after_reservation": 1,  # reserved at big's declared end (50 s), it ran to 100 s
        "delayed_by_backfill": 0,  # short was gone at 27 s
    }


def test_the_head_waits_with_its_reservation_in_its_message(tmp_path: Path) -> None:
    result = simulate(tmp_path, {"backfill": True, "declaredRuntimeFactor": 1})
    head = next(r for r in result.runs.values() if r.job.workload.name == "head")
    assert any("reserved (gpuq.dev/backfill)" in message for _since, _reason, message in head.waits)


def test_a_backfilled_gang_of_another_shape_never_delays_the_head(tmp_path: Path) -> None:
    """Several small workloads fill the gap up to the reservation, none past it."""
    trace = TRACE + "".join(f"s{i},team-a,q,{4 + i},{20 + 10 * i},1,1\n" for i in range(6))
    result = simulate(tmp_path, {"backfill": True, "declaredRuntimeFactor": 1}, trace)
    got = admissions(result)
    assert got["head"][0] == 100
    backfilled = {name: v for name, v in got.items() if v[0] is not None and v[0] < 100 and name != "big"}
    assert backfilled  # the gap was used
    assert all(end is not None and end <= 100 for _start, end, _evictions in backfilled.values())
