"""gpuq.api.kubeflow_sources: the Kubeflow training jobs and MPIJob as Kueue builds their Workloads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuq.api.loader import load
from gpuq.api.names import source_document_problems, source_name_problem
from gpuq.api.source_fields import SourceError
from gpuq.api.sources import is_source, to_workload
from gpuq.cli import app

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "kueue-v0.19.2" / "site" / "static" / "examples"
SETUP = str(EXAMPLES / "admin" / "single-clusterqueue-setup.yaml")
NOW = "1796023000"


def example(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((EXAMPLES / "jobs" / name).read_text())
    assert isinstance(doc, dict)
    return doc


def tmpl(container: str, image: str = "img", **spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": container, "image": image}], **spec}}


def kf(kind: str, replica_specs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    field = {
        "TFJob": "tfReplicaSpecs",
        "PyTorchJob": "pytorchReplicaSpecs",
        "XGBoostJob": "xgbReplicaSpecs",
        "PaddleJob": "paddleReplicaSpecs",
        "JAXJob": "jaxReplicaSpecs",
        "MPIJob": "mpiReplicaSpecs",
    }[kind]
    version = "kubeflow.org/v2beta1" if kind == "MPIJob" else "kubeflow.org/v1"
    return {
        "apiVersion": version,
        "kind": kind,
        "metadata": {"name": "w"},
        "spec": {field: replica_specs, **spec},
    }


def shape(doc: dict[str, Any]) -> list[tuple[str, int]]:
    return [(p["name"], p["count"]) for p in to_workload(doc)["spec"]["podSets"]]


EXAMPLE_CASES = [
    pytest.param(
        "sample-tfjob.yaml", [("ps", 1), ("worker", 2)], id="kueue's tfjob example: ps then workers"
    ),
    pytest.param(
        "sample-xgboostjob.yaml",
        [("master", 1), ("worker", 2)],
        id="kueue's xgboostjob example: master, workers",
    ),
    pytest.param("sample-paddlejob.yaml", [("worker", 2)], id="kueue's paddlejob example: workers only"),
    pytest.param("sample-jaxjob.yaml", [("worker", 2)], id="kueue's jaxjob example: workers only"),
    pytest.param(
        "sample-pytorchjob.yaml",
        [("master", 1), ("worker", 1)],
        id="kueue's pytorchjob example: master, worker",
    ),
    pytest.param("sample-mpijob.yaml", [("launcher", 1), ("worker", 2)], id="kueue's mpijob example"),
]


@pytest.mark.parametrize(("name", "want"), EXAMPLE_CASES)
def test_kueues_examples_become_the_pod_sets_kueue_builds(name: str, want: list[tuple[str, int]]) -> None:
    doc = example(name)
    workload = to_workload(doc)
    assert shape(doc) == want
    assert workload["spec"]["queueName"] == "user-queue"
    assert workload["metadata"]["name"].startswith(f"{doc['kind'].lower()}-{doc['metadata']['name']}-")


POD_SET_CASES = [
    pytest.param(
        kf(
            "TFJob",
            {
                "Evaluator": {"template": tmpl("tensorflow")},
                "Worker": {"replicas": 4, "template": tmpl("tensorflow")},
                "PS": {"replicas": 2, "template": tmpl("tensorflow")},
                "Chief": {"template": tmpl("tensorflow")},
            },
        ),
        [("chief", 1), ("ps", 2), ("worker", 4), ("evaluator", 1)],
        id="a tfjob's pod sets follow kueue's order chief, master, ps, worker, evaluator",
    ),
    pytest.param(
        kf(
            "TFJob",
            {
                "Master": {"template": tmpl("tensorflow")},
                "Worker": {"replicas": 0, "template": tmpl("tensorflow")},
            },
        ),
        [("master", 1), ("worker", 0)],
        id="a tfjob may have no workers (its operator allows 0 replicas)",
    ),
    pytest.param(
        kf(
            "XGBoostJob",
            {"Worker": {"replicas": 3, "template": tmpl("xgboost")}, "Master": {"template": tmpl("xgboost")}},
        ),
        [("master", 1), ("worker", 3)],
        id="an xgboostjob lists master before workers, replicas default to 1",
    ),
    pytest.param(
        kf(
            "PaddleJob",
            {"Worker": {"replicas": 2, "template": tmpl("paddle")}, "Master": {"template": tmpl("paddle")}},
        ),
        [("master", 1), ("worker", 2)],
        id="a paddlejob lists master before workers",
    ),
    pytest.param(
        kf("JAXJob", {"Worker": {"replicas": 8, "template": tmpl("jax")}}),
        [("worker", 8)],
        id="a jaxjob has one worker pod set",
    ),
    pytest.param(
        kf("MPIJob", {"Worker": {"replicas": 3, "template": tmpl("w")}, "Launcher": {"template": tmpl("l")}}),
        [("launcher", 1), ("worker", 3)],
        id="an mpijob lists the launcher before the workers",
    ),
]


@pytest.mark.parametrize(("doc", "want"), POD_SET_CASES)
def test_pod_sets(doc: dict[str, Any], want: list[tuple[str, int]]) -> None:
    assert shape(doc) == want


def test_pod_set_templates_are_the_replica_templates() -> None:
    doc = kf("JAXJob", {"Worker": {"template": tmpl("jax", "jax:1", nodeSelector={"gpu": "h100"})}})
    assert to_workload(doc)["spec"]["podSets"][0]["template"] == tmpl(
        "jax", "jax:1", nodeSelector={"gpu": "h100"}
    )


LAUNCHER_AS_WORKER_CASES = [
    pytest.param({"runLauncherAsWorker": True}, {}, {"kueue.x-k8s.io/pod-index-offset": "1"}, id="offset 1"),
    pytest.param({}, {}, None, id="without runLauncherAsWorker the workers' indexes start at 0"),
    pytest.param(
        {"runLauncherAsWorker": True},
        {"kueue.x-k8s.io/podset-group-name": "g"},
        None,
        id="a launcher in a pod-set group gets no offset",
    ),
]


@pytest.mark.parametrize(("spec", "launcher_annotations", "want"), LAUNCHER_AS_WORKER_CASES)
def test_run_launcher_as_worker_offsets_the_worker_indexes(
    spec: dict[str, Any], launcher_annotations: dict[str, str], want: dict[str, str] | None
) -> None:
    launcher = {**tmpl("l"), "metadata": {"annotations": launcher_annotations}}
    doc = kf(
        "MPIJob",
        {"Launcher": {"template": launcher}, "Worker": {"replicas": 2, "template": tmpl("w")}},
        **spec,
    )
    worker = to_workload(doc)["spec"]["podSets"][1]
    assert (worker["template"].get("metadata") or {}).get("annotations") == want


PRIORITY_CASES = [
    pytest.param(
        kf(
            "TFJob",
            {"Worker": {"template": tmpl("tensorflow", priorityClassName="w")}},
            runPolicy={"schedulingPolicy": {"priorityClass": "run"}},
        ),
        "run",
        id="a tfjob's runPolicy.schedulingPolicy.priorityClass comes first",
    ),
    pytest.param(
        kf(
            "TFJob",
            {
                "Worker": {"template": tmpl("tensorflow", priorityClassName="w")},
                "PS": {"template": tmpl("tensorflow", priorityClassName="ps")},
            },
        ),
        "ps",
        id="else the first replica type in kueue's order that names one (ps before worker)",
    ),
    pytest.param(
        kf(
            "MPIJob",
            {"Launcher": {"template": tmpl("l")}, "Worker": {"template": tmpl("w", priorityClassName="w")}},
        ),
        "w",
        id="an mpijob's launcher without a priority class falls through to the worker's",
    ),
    pytest.param(
        kf(
            "MPIJob",
            {"Launcher": {"template": tmpl("l")}},
            runPolicy={"schedulingPolicy": {"priorityClass": "mpi-run"}},
        ),
        "mpi-run",
        id="an mpijob's scheduling policy priority class",
    ),
]


@pytest.mark.parametrize(("doc", "want"), PRIORITY_CASES)
def test_priority_class(doc: dict[str, Any], want: str) -> None:
    spec = to_workload(doc)["spec"]
    assert (spec["priorityClassName"], spec["priorityClassSource"]) == (
        want,
        "scheduling.k8s.io/priorityclass",
    )


ERROR_CASES = [
    pytest.param(
        kf("TFJob", {"Launcher": {"template": tmpl("tensorflow")}}),
        "spec.tfReplicaSpecs[Launcher]",
        id="an unknown tfjob replica type is refused",
    ),
    pytest.param(
        kf("TFJob", {"Chief": {"template": tmpl("tensorflow")}, "Master": {"template": tmpl("tensorflow")}}),
        "spec.tfReplicaSpecs",
        id="a tfjob with both a chief and a master is refused",
    ),
    pytest.param(
        kf("TFJob", {"Worker": {"template": tmpl("tf")}}),
        "spec.tfReplicaSpecs[Worker].template.spec.containers",
        id="a tfjob without a container named tensorflow is refused",
    ),
    pytest.param(
        kf("PyTorchJob", {"Master": {"replicas": 2, "template": tmpl("pytorch")}}),
        "spec.pytorchReplicaSpecs[Master].replicas",
        id="a pytorchjob with two masters is refused",
    ),
    pytest.param(
        kf("PyTorchJob", {"Worker": {"replicas": 0, "template": tmpl("pytorch")}}),
        "spec.pytorchReplicaSpecs[Worker].replicas",
        id="a pytorchjob with no workers is refused",
    ),
    pytest.param(
        kf("XGBoostJob", {"Worker": {"template": tmpl("xgboost")}}),
        "spec.xgbReplicaSpecs[Master]",
        id="an xgboostjob without a master is refused",
    ),
    pytest.param(
        kf("PaddleJob", {"Worker": {"template": {"spec": {"containers": []}}}}),
        "spec.paddleReplicaSpecs[Worker].template.spec.containers",
        id="a paddlejob replica without containers is refused",
    ),
    pytest.param(
        kf("JAXJob", {"Master": {"template": tmpl("jax")}}),
        "spec.jaxReplicaSpecs[Master]",
        id="a jaxjob has only workers",
    ),
    pytest.param(
        kf("JAXJob", {"Worker": {"replicas": "two", "template": tmpl("jax")}}),
        "spec.jaxReplicaSpecs[Worker].replicas",
        id="non-integer replicas are refused",
    ),
    pytest.param(
        kf("MPIJob", {"Worker": {"template": tmpl("w")}}),
        "spec.mpiReplicaSpecs[Launcher]",
        id="an mpijob without a launcher is refused",
    ),
    pytest.param(
        kf("MPIJob", {"Launcher": {"replicas": 2, "template": tmpl("l")}}),
        "spec.mpiReplicaSpecs[Launcher].replicas",
        id="an mpijob with two launchers is refused",
    ),
    pytest.param(
        kf("MPIJob", {"Launcher": {"template": tmpl("l")}, "Worker": {"replicas": 0, "template": tmpl("w")}}),
        "spec.mpiReplicaSpecs[Worker].replicas",
        id="an mpijob with zero workers is refused",
    ),
    pytest.param(
        kf("MPIJob", {"Launcher": {"template": {"spec": {}}}}),
        "spec.mpiReplicaSpecs[Launcher].template.spec.containers",
        id="an mpijob launcher without containers is refused",
    ),
    pytest.param(
        {**kf("MPIJob", {}), "spec": {"slotsPerWorker": 1}},
        "spec.mpiReplicaSpecs",
        id="an mpijob without replica specs is refused",
    ),
]


@pytest.mark.parametrize(("doc", "field"), ERROR_CASES)
def test_refusals_name_the_source_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(SourceError) as err:
        to_workload(doc)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("api_version", "kind", "want"),
    [
        pytest.param("kubeflow.org/v1", "TFJob", True, id="tfjob"),
        pytest.param("kubeflow.org/v1", "XGBoostJob", True, id="xgboostjob"),
        pytest.param("kubeflow.org/v1", "PaddleJob", True, id="paddlejob"),
        pytest.param("kubeflow.org/v1", "JAXJob", True, id="jaxjob"),
        pytest.param("kubeflow.org/v2beta1", "MPIJob", True, id="mpijob v2beta1"),
        pytest.param(
            "kubeflow.org/v1", "MPIJob", False, id="the training operator's old v1 mpijob is not read"
        ),
    ],
)
def test_is_source(api_version: str, kind: str, want: bool) -> None:
    assert is_source(api_version, kind) is want


def test_kueues_examples_load_and_admit_with_kueues_single_cluster_queue() -> None:
    files = [str(EXAMPLES / "jobs" / str(case.values[0])) for case in EXAMPLE_CASES]
    result = load([SETUP, *files])
    assert result.errors == ()
    assert sorted(w.name.split("-")[0] for w in result.workloads) == [
        "jaxjob",
        "mpijob",
        "paddlejob",
        "pytorchjob",
        "tfjob",
        "xgboostjob",
    ]
    runner = CliRunner()
    out = runner.invoke(app, ["admit", "-f", SETUP, "-f", files[-1], "-o", "json", "--now", NOW])
    assert out.exit_code == 0, out.output
    admitted = json.loads(out.stdout)["admitted"]
    (mpi,) = admitted.values()
    assert {name: ps["count"] for name, ps in mpi["podSets"].items()} == {"launcher": 1, "worker": 2}


@pytest.mark.parametrize("kind", ["TFJob", "XGBoostJob", "PaddleJob", "JAXJob"])
def test_training_operator_names_are_dns_1035_labels(kind: str) -> None:
    problem = source_name_problem(kind, "1-starts-with-a-digit")
    assert problem is not None and f"the training operator's rule for a {kind}" in problem
    assert source_name_problem(kind, "a" * 63) is None


def test_an_mpijob_name_leaves_room_for_its_last_worker_host_name() -> None:
    """mpi-operator's validateMPIJobName: ``<name>-worker-<replicas - 1>`` is a DNS-1035 label."""
    workers = {"Launcher": {"template": tmpl("l")}, "Worker": {"replicas": 100, "template": tmpl("w")}}
    fits = {**kf("MPIJob", workers), "metadata": {"name": "a" * (63 - len("-worker-99"))}}
    assert list(source_document_problems(fits)) == []
    too_long = {**fits, "metadata": {"name": "a" * (64 - len("-worker-99"))}}
    ((field, message),) = source_document_problems(too_long)
    assert field == ("metadata", "name") and "-worker-99" in message
