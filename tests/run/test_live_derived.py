"""The derived kinds a live control plane runs (AppWrapper, a LeaderWorkerSet of one group, Sandbox):
applied through the API's request reader, stored as workload sources, run to their end by the loop
with real processes; the others are refused at apply with the reason."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import yaml

from gpuq.api.sources_derived import live_refusal, live_workload
from gpuq.run.jobs import job_run
from gpuq.server.apply import ApiError, read_request
from gpuq.server.kinds import WORKLOAD, document_key

from .test_loop import plane, run_until, state, submit

__all__ = ["plane"]

QUEUE = {"kueue.x-k8s.io/queue-name": "q"}


def container(name: str, script: str, gpus: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "image": "python:3.11",
        "command": [sys.executable, "-c", script],
        "resources": {"requests": {"nvidia.com/gpu": gpus}},
    }


def pod_spec(name: str, script: str, gpus: int = 1) -> dict[str, Any]:
    return {"containers": [container(name, script, gpus)], "terminationGracePeriodSeconds": 1}


def appwrapper(name: str, script: str) -> dict[str, Any]:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{name}-job"},
        "spec": {"parallelism": 2, "completions": 2, "template": {"spec": pod_spec("main", script)}},
    }
    return {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": "team-a", "labels": QUEUE},
        "spec": {"components": [{"template": job}]},
    }


def leaderworkerset(name: str, script: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": "team-a", "labels": QUEUE},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": {"spec": pod_spec("leader", script)},
                "workerTemplate": {"spec": pod_spec("worker", script)},
            },
        },
    }


def sandbox(name: str, script: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "agents.x-k8s.io/v1alpha1",
        "kind": "Sandbox",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "replicas": replicas,
            "podTemplate": {"metadata": {"labels": QUEUE}, "spec": pod_spec("agent", script)},
        },
    }


OK = "print('done')"

RUN_SHAPES = [
    pytest.param(appwrapper("aw", OK), [("aw-0", 2)], id="an AppWrapper: its wrapped Job's pods"),
    pytest.param(
        leaderworkerset("lws", OK), [("leader", 1), ("worker", 1)], id="a LeaderWorkerSet of one group"
    ),
    pytest.param(sandbox("sb", OK), [("main", 1)], id="a Sandbox: its one pod"),
]


@pytest.mark.parametrize(("doc", "pod_sets"), RUN_SHAPES)
def test_a_live_derived_kind_is_a_workload_source_with_the_pod_sets_admit_builds(
    doc: dict[str, Any], pod_sets: list[tuple[str, int]]
) -> None:
    assert document_key(doc) == (WORKLOAD, "team-a", doc["metadata"]["name"])
    assert [(p["name"], p["count"]) for p in live_workload(doc)["spec"]["podSets"]] == pod_sets
    assert [(p.name, p.count) for p in job_run(doc).pod_sets] == pod_sets
    assert [item.key for item in read_request(_yaml(doc))] == [document_key(doc)]


@pytest.mark.parametrize(
    ("doc", "ends"),
    [
        pytest.param(appwrapper("aw", OK), "Succeeded", id="an AppWrapper whose pods succeed"),
        pytest.param(
            leaderworkerset("lws", OK), "Succeeded", id="a LeaderWorkerSet group whose pods succeed"
        ),
        pytest.param(sandbox("sb", "raise SystemExit(3)"), "Failed", id="a Sandbox whose pod keeps failing"),
    ],
)
def test_the_loop_runs_a_live_derived_kind_to_its_end(plane, doc: dict[str, Any], ends: str) -> None:  # type: ignore[no-untyped-def]
    store, loop, _ = plane
    submit(store, doc)
    name = doc["metadata"]["name"]
    run_until(loop, lambda: state(store, "team-a", name) in ("Succeeded", "Failed"), timeout=60)
    assert state(store, "team-a", name) == ends


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        pytest.param(
            leaderworkerset("lws", OK, replicas=3), "LeaderWorkerSet of one group", id="three groups"
        ),
        pytest.param(sandbox("sb", OK, replicas=0), "paused Sandbox", id="a paused Sandbox"),
        pytest.param(
            {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": {"name": "c", "namespace": "team-a"},
                "spec": {
                    "schedule": "@hourly",
                    "jobTemplate": {"spec": {"template": {"spec": pod_spec("c", OK)}}},
                },
            },
            "does not run a CronJob live",
            id="a CronJob (its schedule is the simulator's)",
        ),
    ],
)
def test_what_a_live_control_plane_does_not_run_is_refused_at_apply_with_why(
    doc: dict[str, Any], reason: str
) -> None:
    refusal = live_refusal(doc)
    assert refusal is not None and reason in refusal
    with pytest.raises(ApiError) as raised:
        read_request(_yaml(doc))
    assert reason in str([d.message for d in raised.value.diagnostics])


def _yaml(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False)
