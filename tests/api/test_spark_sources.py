"""gpuq.api.spark_sources: a SparkApplication's driver and executor pod sets, as Kueue builds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.api.loader import load
from gpuq.api.source_fields import SourceError
from gpuq.api.sources import to_workload
from gpuq.api.spark_sources import java_memory

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "kueue-v0.19.2" / "site" / "static" / "examples"
SAMPLE = EXAMPLES / "jobs" / "sample-sparkapplication.yaml"
QUEUE = {"kueue.x-k8s.io/queue-name": "user-queue"}


def app(labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "spark", "labels": QUEUE if labels is None else labels},
        "spec": {"type": "Python", "mode": "cluster", **spec},
    }


def container(role: str, **fields: Any) -> dict[str, Any]:
    return {"name": f"spark-kubernetes-{role}", **fields}


def test_kueues_example_becomes_a_driver_and_two_executors() -> None:
    workload = to_workload(yaml.safe_load(SAMPLE.read_text()))
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}}
    assert workload["spec"]["podSets"] == [
        {
            "name": "driver",
            "count": 1,
            "template": {"spec": {"containers": [container("driver", resources=resources)]}},
        },
        {
            "name": "executor",
            "count": 2,
            "template": {"spec": {"containers": [container("executor", resources=resources)]}},
        },
    ]


POD_SET_CASES = [
    pytest.param(
        app(driver={"cores": 4, "memory": "512m", "memoryOverhead": "1g"}),
        [
            ("driver", 1, {"containers": [container("driver", resources={"requests": {"memory": "512Mi"}})]}),
            ("executor", 0, {"containers": [container("executor")]}),
        ],
        id="cores and memoryOverhead are not counted, and executors default to none",
    ),
    pytest.param(
        app(
            executor={
                "instances": 3,
                "coreRequest": "500m",
                "coreLimit": "2",
                "memory": "2g",
                "memoryLimit": "4g",
                "gpu": {"name": "nvidia.com/gpu", "quantity": 1},
            }
        ),
        [
            ("driver", 1, {"containers": [container("driver")]}),
            (
                "executor",
                3,
                {
                    "containers": [
                        container(
                            "executor",
                            resources={
                                "requests": {"cpu": "500m", "memory": "2Gi"},
                                "limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1},
                            },
                        )
                    ]
                },
            ),
        ],
        id="executor requests, limits and gpus as kueue derives them",
    ),
    pytest.param(
        app(
            volumes=[{"name": "data", "emptyDir": {}}, {"name": "spark-local-dir-1", "emptyDir": {}}],
            driver={
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data"},
                    {"name": "spark-local-dir-1", "mountPath": "/tmp"},
                ],
                "priorityClassName": "high",
                "nodeSelector": {"pool": "cpu"},
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "sidecars": [{"name": "log", "image": "busybox"}],
                "labels": {"team": "a"},
                "template": {"metadata": {"labels": {"team": "b", "x": "1"}}, "spec": {"hostNetwork": True}},
            },
        ),
        [
            (
                "driver",
                1,
                {
                    "containers": [
                        container("driver", volumeMounts=[{"name": "data", "mountPath": "/data"}]),
                        {"name": "log", "image": "busybox"},
                    ],
                    "tolerations": [{"key": "k", "operator": "Exists"}],
                    "volumes": [{"name": "data", "emptyDir": {}}],
                    "priorityClassName": "high",
                    "nodeSelector": {"pool": "cpu"},
                },
            ),
            ("executor", 0, {"containers": [container("executor")]}),
        ],
        id="the driver's volumes, sidecars and scheduling fields; the template gives only metadata",
    ),
]


@pytest.mark.parametrize(("doc", "want"), POD_SET_CASES)
def test_pod_sets(doc: dict[str, Any], want: list[tuple[str, int, dict[str, Any]]]) -> None:
    pod_sets = to_workload(doc)["spec"]["podSets"]
    assert [(p["name"], p["count"], p["template"]["spec"]) for p in pod_sets] == want


def test_role_labels_override_the_template_labels_and_the_driver_names_the_priority() -> None:
    doc = POD_SET_CASES[2].values[0]
    workload = to_workload(doc)
    assert workload["spec"]["podSets"][0]["template"]["metadata"] == {"labels": {"team": "a", "x": "1"}}
    assert workload["spec"]["priorityClassName"] == "high"


@pytest.mark.parametrize(
    ("text", "want"),
    [("512m", "512Mi"), ("2g", "2Gi"), ("1gb", "1Gi"), ("100k", "100Ki"), ("1Gi", "1Gi"), ("1024", "1024")],
)
def test_java_memory_sizes(text: str, want: str) -> None:
    assert java_memory(text) == want


ERROR_CASES = [
    pytest.param(app(mode="client"), "spec.mode", id="a managed application in client mode is refused"),
    pytest.param(
        app(dynamicAllocation={"enabled": True}),
        "spec.dynamicAllocation.enabled",
        id="a managed application with dynamic allocation is refused",
    ),
    pytest.param(app(executor={"instances": -1}), "spec.executor.instances", id="negative executors"),
    pytest.param(app(driver={"memory": "lots"}), "spec.driver.memory", id="a memory that is no quantity"),
    pytest.param(
        app(executor={"gpu": {"name": "g", "quantity": "1"}}), "spec.executor.gpu.quantity", id="gpu"
    ),
]


@pytest.mark.parametrize(("doc", "field"), ERROR_CASES)
def test_refusals_name_the_source_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(SourceError) as err:
        to_workload(doc)
    assert err.value.field == field


def test_an_unmanaged_application_may_use_client_mode_and_dynamic_allocation() -> None:
    doc = app(labels={}, mode="client", dynamicAllocation={"enabled": True}, executor={"instances": 2})
    assert [p["count"] for p in to_workload(doc)["spec"]["podSets"]] == [1, 2]


def test_kueues_example_loads_with_kueues_single_cluster_queue() -> None:
    result = load([str(EXAMPLES / "admin" / "single-clusterqueue-setup.yaml"), str(SAMPLE)])
    assert result.errors == ()
    (workload,) = result.workloads
    assert [p.count for p in workload.pod_sets] == [1, 2]
