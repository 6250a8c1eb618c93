"""maximumExecutionTimeSeconds in ``gpuq simulate``: the lifecycle's timer on the one event heap
deactivates a workload admitted that long (Kueue's ``reconcileMaxExecutionTime``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from test_trace_kinds import CLUSTER  # one team, one 8-GPU node

from gpuq.sim.scenario import load_workloads, plan_scenario, prepare

AT = "2025-01-01T12:00:00Z"


def job(name: str, duration: str, limit: int | None, gpus: int = 8) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": "q"}
    if limit is not None:
        labels["kueue.x-k8s.io/max-exec-time-seconds"] = str(limit)
    container = {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": gpus}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": labels,
            "annotations": {"gpuq.dev/expected-duration": duration},
            "creationTimestamp": AT,
        },
        "spec": {"template": {"spec": {"containers": [container], "restartPolicy": "Never"}}},
    }


def simulate(tmp_path: Path, jobs: list[dict[str, Any]]) -> list[tuple[str, str, float | None, str]]:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
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
