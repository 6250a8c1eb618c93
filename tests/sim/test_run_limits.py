"""Limits on a run in ``gpuq simulate``, each a lifecycle timer on the one event heap:
``maximumExecutionTimeSeconds`` deactivates a workload admitted that long (Kueue's
``reconcileMaxExecutionTime``); ``gpuq.dev/min-runtime`` keeps a workload from being preempted until
it has held its quota that long."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from test_trace_kinds import CLUSTER  # one team, one 8-GPU node

from gpuq.sim.scenario import load_workloads, plan_scenario, prepare

AT = "2025-01-01T12:00:00Z"
PRIORITIES = """---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 1000
"""


def job(
    name: str,
    duration: str,
    limit: int | None,
    gpus: int = 8,
    *,
    min_runtime: str | None = None,
) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": "q"}
    if limit is not None:
        labels["kueue.x-k8s.io/max-exec-time-seconds"] = str(limit)
    annotations = {"gpuq.dev/expected-duration": duration}
    if min_runtime is not None:
        annotations["gpuq.dev/min-runtime"] = min_runtime
    container = {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": gpus}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": labels,
            "annotations": annotations,
            "creationTimestamp": AT,
        },
        "spec": {"template": {"spec": {"containers": [container], "restartPolicy": "Never"}}},
    }


def simulate(tmp_path: Path, jobs: list[dict[str, Any]]) -> list[tuple[str, str, float | None, str]]:
    (tmp_path / "cluster.yaml").write_text(CLUSTER + PRIORITIES)
    (tmp_path / "state.yaml").write_text(yaml.safe_dump_all(jobs, sort_keys=False))
    spec = {"config": ["cluster.yaml"], "initialState": {"paths": ["state.yaml"], "at": AT}}
    scenario = {
        "apiVersion": "gpuq.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": "s"},
        "spec": spec,
    }
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    plan = plan_scenario([str(tmp_path / "scenario.yaml")])
    result = prepare(plan, plan.variants[0], load_workloads(plan)).simulation().run()
    return sorted(
        (run.job.workload.name.split("-")[1], str(run.status), run.ended, run.reason)
        for run in result.runs.values()
    )


DEACTIVATED = "The workload is deactivated due to exceeding the maximum execution time"


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        pytest.param(
            [job("long", "2h", 3600)],
            [("long", "Inactive", 3600.0, DEACTIVATED)],
            id="a run longer than its limit is deactivated at the limit",
        ),
        pytest.param(
            [job("short", "1h", 7200)],
            [("short", "Succeeded", 3600.0, "")],
            id="a run within its limit succeeds",
        ),
        pytest.param(
            [job("first", "2h", 1800), job("second", "1h", None)],
            [("first", "Inactive", 1800.0, DEACTIVATED), ("second", "Succeeded", 5400.0, "")],
            id="the quota a deactivated workload frees goes to the next",
        ),
    ],
)
def test_maximum_execution_time_deactivates_in_simulated_time(
    tmp_path: Path, jobs: list[dict[str, Any]], expected: list[tuple[Any, ...]]
) -> None:
    assert simulate(tmp_path, jobs) == expected


PREEMPTING = CLUSTER.replace(
    "  namespaceSelector: {}", "  namespaceSelector: {}\n  preemption: {withinClusterQueue: LowerPriority}"
)
URGENT_TRACE = (
    "name,namespace,queue,submit_s,duration_s,priority,pods,gpus\nurgent,team-a,q,600,1800,urgent,1,8\n"
)


@pytest.mark.parametrize(
    ("protection", "urgent_starts"),
    [
        pytest.param(None, 600.0, id="unprotected: the urgent job preempts at once"),
        pytest.param("1h", 3600.0, id="gpuq.dev/min-runtime 1h: the urgent job waits until the hour is up"),
        pytest.param("5m", 600.0, id="a protection already over when the urgent job comes changes nothing"),
    ],
)
def test_a_minimum_runtime_delays_preemption_until_it_ends(
    tmp_path: Path, protection: str | None, urgent_starts: float
) -> None:
    (tmp_path / "cluster.yaml").write_text(PREEMPTING + PRIORITIES)
    batch = job("batch", "4h", None, min_runtime=protection)
    (tmp_path / "state.yaml").write_text(yaml.safe_dump(batch, sort_keys=False))
    (tmp_path / "trace.csv").write_text(URGENT_TRACE)
    spec = {
        "config": ["cluster.yaml"],
        "initialState": {"paths": ["state.yaml"], "at": AT},
        "workloads": {"trace": {"path": "trace.csv"}},
    }
    scenario = {
        "apiVersion": "gpuq.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": "s"},
        "spec": spec,
    }
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    plan = plan_scenario([str(tmp_path / "scenario.yaml")])
    result = prepare(plan, plan.variants[0], load_workloads(plan)).simulation().run()
    runs = {run.job.workload.name: run for run in result.runs.values()}
    (batch_run,) = (run for name, run in runs.items() if "batch" in name)
    assert runs["urgent"].first_started == urgent_starts
    assert batch_run.preempted == 1
