"""CronJobs in the simulator: their Jobs are created on the schedule, with the concurrency policy and
starting deadline of Kubernetes' CronJob controller, from the initial state's instant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from test_trace_kinds import CLUSTER  # one team, one 8-GPU node

from gpuq.sim.metrics import group_stats, workloads_csv
from gpuq.sim.scenario import ScenarioError, load_workloads, plan_scenario, prepare

AT = "2025-01-01T12:00:00Z"  # a Wednesday, noon UTC: simulated time 0


def cron_job(
    schedule: str = "0 * * * *",
    *,
    policy: str | None = None,
    duration: str | None = "30m",
    deadline: int | None = None,
    active_deadline: int | None = None,
    gpus: int = 8,
    suspend: bool = False,
    zone: str | None = None,
) -> dict[str, Any]:
    template_meta: dict[str, Any] = {"labels": {"kueue.x-k8s.io/queue-name": "q"}}
    if duration is not None:
        template_meta["annotations"] = {"gpuq.dev/expected-duration": duration}
    container = {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": gpus}}}
    job_spec: dict[str, Any] = {"template": {"spec": {"containers": [container], "restartPolicy": "Never"}}}
    if active_deadline is not None:
        job_spec["activeDeadlineSeconds"] = active_deadline
    spec: dict[str, Any] = {
        "schedule": schedule,
        "jobTemplate": {"metadata": template_meta, "spec": job_spec},
    }
    if policy is not None:
        spec["concurrencyPolicy"] = policy
    if deadline is not None:
        spec["startingDeadlineSeconds"] = deadline
    if suspend:
        spec["suspend"] = True
    if zone is not None:
        spec["timeZone"] = zone
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "team-a", "creationTimestamp": "2025-01-01T00:00:00Z"},
        "spec": spec,
    }


def write(directory: Path, crons: list[dict[str, Any]], horizon: str | None = "4h") -> Path:
    (directory / "cluster.yaml").write_text(CLUSTER)
    (directory / "state.yaml").write_text(yaml.safe_dump_all(crons, sort_keys=False))
    spec: dict[str, Any] = {"config": ["cluster.yaml"], "initialState": {"paths": ["state.yaml"], "at": AT}}
    if horizon is not None:
        spec["settings"] = {"horizon": horizon}
    scenario = {
        "apiVersion": "gpuq.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": "s"},
        "spec": spec,
    }
    (directory / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    return directory / "scenario.yaml"


def runs(directory: Path, crons: list[dict[str, Any]], horizon: str | None = "4h") -> list[tuple[Any, ...]]:
    """(created, first start, end, status) of each Job the CronJobs created, in creation order."""
    plan = plan_scenario([str(write(directory, crons, horizon))])
    prepared = prepare(plan, plan.variants[0], load_workloads(plan))
    result = prepared.simulation().run()
    out = [
        (
            run.job.workload.creation_time,
            run.first_started,
            run.ended,
            "Deleted" if run.deleted else str(run.status),
        )
        for run in result.runs.values()
    ]
    return sorted(out, key=lambda r: (r[0], r[1] if r[1] is not None else float("inf")))


CASES = [
    pytest.param(
        cron_job(),
        [(h * 3600.0, h * 3600.0, h * 3600.0 + 1800, "Succeeded") for h in range(4)],
        id="hourly: one 30-minute Job at each hour of the 4-hour span, none from before it",
    ),
    pytest.param(
        cron_job(duration="90m"),
        [
            (0.0, 0.0, 5400.0, "Succeeded"),
            (3600.0, 5400.0, 10800.0, "Succeeded"),
            (7200.0, 10800.0, None, "Running"),
            (10800.0, None, None, "Pending"),
        ],
        id="allow (the default): each run is created on time and queues behind the one before",
    ),
    pytest.param(
        cron_job(duration="90m", policy="Forbid"),
        [
            (0.0, 0.0, 5400.0, "Succeeded"),
            (5400.0, 5400.0, 10800.0, "Succeeded"),
            (10800.0, 10800.0, None, "Running"),
        ],
        id="forbid: the time missed while a Job runs is run late, when it ends",
    ),
    pytest.param(
        cron_job(duration="90m", policy="Forbid", deadline=600),
        [(0.0, 0.0, 5400.0, "Succeeded"), (7200.0, 7200.0, 12600.0, "Succeeded")],
        id="forbid with a starting deadline: a time missed by more than it is skipped",
    ),
    pytest.param(
        cron_job(duration="90m", policy="Replace"),
        [
            (0.0, 0.0, 3600.0, "Deleted"),
            (3600.0, 3600.0, 7200.0, "Deleted"),
            (7200.0, 7200.0, 10800.0, "Deleted"),
            (10800.0, 10800.0, None, "Running"),
        ],
        id="replace: the running Job is deleted (not completed) when the next is created",
    ),
    pytest.param(
        cron_job("30 14 * * *"),
        [(9000.0, 9000.0, 10800.0, "Succeeded")],
        id="a daily schedule fires at 14:30 UTC of the simulated day (noon + 2.5 h)",
    ),
    pytest.param(
        cron_job(active_deadline=600),
        [(h * 3600.0, h * 3600.0, h * 3600.0 + 600, "Failed") for h in range(4)],
        id="activeDeadlineSeconds ends each run Failed before its expected duration",
    ),
    pytest.param(cron_job(suspend=True), [], id="a suspended CronJob creates no Job"),
    pytest.param(
        cron_job("0 14 * * *", zone="Europe/Paris"),
        [(3600.0, 3600.0, 5400.0, "Succeeded")],
        id="spec.timeZone: 14:00 in Paris in January is 13:00 UTC",
    ),
]


@pytest.mark.parametrize(("cron", "expected"), CASES)
def test_a_cron_job_creates_its_jobs_on_its_schedule(
    cron: dict[str, Any], expected: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    assert runs(tmp_path, [cron]) == expected


def test_two_cron_jobs_share_the_quota(tmp_path: Path) -> None:
    other = cron_job(gpus=8)
    other["metadata"]["name"] = "hourly-eval"
    got = runs(tmp_path, [cron_job(), other], "1h")
    assert got == [(0.0, 0.0, 1800.0, "Succeeded"), (0.0, 1800.0, 3600.0, "Succeeded")]


ERRORS = [
    pytest.param(
        cron_job(duration=None),
        "4h",
        "spec.jobTemplate.metadata.annotations[gpuq.dev/expected-duration]",
        id="a run time is required",
    ),
    pytest.param(cron_job(policy="Sometimes"), "4h", "spec.concurrencyPolicy", id="an unknown policy"),
    pytest.param(cron_job(), None, "spec.schedule", id="no horizon and no trace: the schedule has no end"),
    pytest.param(cron_job(zone="Mars/Olympus"), "4h", "spec.timeZone", id="an unknown time zone"),
]


@pytest.mark.parametrize(("cron", "horizon", "field"), ERRORS)
def test_a_cron_job_the_simulator_cannot_run_is_an_error_naming_its_field(
    cron: dict[str, Any], horizon: str | None, field: str, tmp_path: Path
) -> None:
    plan = plan_scenario([str(write(tmp_path, [cron], horizon))])
    with pytest.raises(ScenarioError) as raised:
        prepare(plan, plan.variants[0], load_workloads(plan))
    assert [(d.kind, d.name, d.field) for d in raised.value.diagnostics] == [("CronJob", "nightly", field)]
    assert raised.value.diagnostics[0].path.endswith("state.yaml")


def test_a_replaced_job_is_counted_deleted_not_finished(tmp_path: Path) -> None:
    plan = plan_scenario([str(write(tmp_path, [cron_job(duration="90m", policy="Replace")], "4h"))])
    prepared = prepare(plan, plan.variants[0], load_workloads(plan))
    result = prepared.simulation().run()
    counts = group_stats(list(result.runs.values()))
    assert (counts["finished"], counts["submitted"]) == (0, 4)
    assert counts["jct_s"]["count"] == 0  # a deleted Job has no completion time
    rows = workloads_csv(list(result.runs.values())).splitlines()[1:]
    assert [row.split(",")[11] for row in rows] == ["Deleted", "Deleted", "Deleted", "Running"]
