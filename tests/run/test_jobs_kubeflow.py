"""gpuq.run.jobs for the Kubeflow kinds: which run live, how they end, and which a control plane refuses."""

from __future__ import annotations

from typing import Any

import pytest

from gpuq.api.source_fields import SourceError
from gpuq.run.jobs import job_run
from gpuq.server.apply import ApiError, read_request


def replica(container: str, command: list[str], replicas: int = 1) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "template": {"spec": {"containers": [{"name": container, "command": command}]}},
    }


MPIJOB = {
    "apiVersion": "kubeflow.org/v2beta1",
    "kind": "MPIJob",
    "metadata": {"name": "pi"},
    "spec": {
        "mpiReplicaSpecs": {
            "Launcher": replica("l", ["mpirun", "pi"]),
            "Worker": replica("w", ["sleep", "60"], 2),
        }
    },
}
TFJOB = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "TFJob",
    "metadata": {"name": "tf"},
    "spec": {
        "tfReplicaSpecs": {
            "Worker": replica("tensorflow", ["python", "t.py"], 2),
            "PS": replica("tensorflow", ["ps"]),
        }
    },
}


def test_an_mpijob_runs_its_replicas_and_ends_with_its_launcher() -> None:
    run = job_run(MPIJOB)
    assert [(ps.name, ps.count, ps.container.command) for ps in run.pod_sets] == [
        ("launcher", 1, ("mpirun", "pi")),
        ("worker", 2, ("sleep", "60")),
    ]
    assert run.completion_pod_set == "launcher"


def test_a_tfjob_runs_every_replica_and_succeeds_when_all_have() -> None:
    run = job_run(TFJOB)
    assert [(ps.name, ps.count) for ps in run.pod_sets] == [("ps", 1), ("worker", 2)]
    assert run.completion_pod_set is None


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(
            {
                "apiVersion": "sparkoperator.k8s.io/v1beta2",
                "kind": "SparkApplication",
                "metadata": {"name": "s"},
                "spec": {},
            },
            id="sparkapplication",
        ),
        pytest.param(
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "t"},
                "spec": {},
            },
            id="trainjob",
        ),
    ],
)
def test_operator_built_kinds_do_not_run(doc: dict[str, Any]) -> None:
    with pytest.raises(SourceError) as err:
        job_run(doc)
    assert err.value.field == "kind"


@pytest.mark.parametrize(
    ("kind", "api_version"),
    [
        ("SparkApplication", "sparkoperator.k8s.io/v1beta2"),
        ("TrainJob", "trainer.kubeflow.org/v1alpha1"),
        ("ClusterTrainingRuntime", "trainer.kubeflow.org/v1alpha1"),
    ],
)
def test_apply_refuses_admit_only_kinds_naming_why(kind: str, api_version: str) -> None:
    with pytest.raises(ApiError) as err:
        read_request(f"apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: x}}\nspec: {{}}\n")
    (diagnostic,) = err.value.diagnostics
    assert diagnostic.field == "kind" and "gpuq admit and gpuq simulate only" in diagnostic.message
