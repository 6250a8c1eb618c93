"""gpuq.api.trainjob_sources: a TrainJob's pod sets from its Trainer runtime, and the loader's second pass."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.api.loader import load
from gpuq.api.source_fields import SourceError
from gpuq.api.sources import to_workload
from gpuq.api.trainjob_sources import RuntimeMissing, SourceContext, strategic_merge

DATA = Path(__file__).resolve().parents[1] / "data"
TRAINER = DATA / "trainer-v2.2.1"
TORCH = TRAINER / "manifests" / "base" / "runtimes" / "torch_distributed.yaml"
DEEPSPEED = TRAINER / "manifests" / "base" / "runtimes" / "deepspeed_distributed.yaml"
DOCS = TRAINER / "kueue-v0.19.2-docs"
SETUP = DATA / "kueue-v0.19.2" / "site" / "static" / "examples" / "admin" / "single-clusterqueue-setup.yaml"
TORCH_IMAGE = "pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime"


def read(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict)
    return doc


def context(*paths: Path) -> SourceContext:
    return SourceContext.of(read(p) for p in paths)


def trainjob(runtime: str = "torch-distributed", kind: str | None = None, **spec: Any) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": runtime}
    if kind:
        ref["kind"] = kind
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "tj",
            "namespace": "default",
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue"},
        },
        "spec": {"runtimeRef": ref, **spec},
    }


def pod_sets(doc: dict[str, Any], ctx: SourceContext) -> list[dict[str, Any]]:
    return list(to_workload(doc, context=ctx)["spec"]["podSets"])


def test_kueues_docs_trainjob_on_trainers_torch_runtime() -> None:
    (node,) = pod_sets(read(DOCS / "trainjob-pytorch-distributed.yaml"), context(TORCH))
    requests = {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}
    assert node == {
        "name": "node",
        "count": 2,
        "template": {
            "spec": {
                "containers": [{"name": "node", "image": TORCH_IMAGE, "resources": {"requests": requests}}]
            }
        },
    }


def test_a_namespaced_runtime_whose_container_is_not_node_keeps_its_resources() -> None:
    """Kueue's docs' torch-custom names its container ``trainer``: Trainer overrides only ``node``."""
    doc = read(DOCS / "trainjob-pytorch-custom.yaml")
    (node,) = pod_sets(doc, context(DOCS / "trainingruntime-torch-custom.yaml"))
    assert (node["name"], node["count"]) == ("node", 1)
    (container,) = node["template"]["spec"]["containers"]
    assert (
        "resources" not in container and container["image"] == "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"
    )


COUNT_CASES = [
    pytest.param(trainjob(), TORCH, [("node", 1)], id="the runtime's mlPolicy.numNodes without an override"),
    pytest.param(trainjob(trainer={"numNodes": 4}), TORCH, [("node", 4)], id="trainer.numNodes overrides it"),
    pytest.param(
        trainjob("deepspeed-distributed", trainer={"numNodes": 4}),
        DEEPSPEED,
        [("launcher", 1), ("node", 3)],
        id="an mpi runtime running its launcher as a node: numNodes - 1 node pods",
    ),
    pytest.param(
        trainjob("deepspeed-distributed", trainer={"numNodes": 1}),
        DEEPSPEED,
        [("launcher", 1), ("node", 1)],
        id="at least one node pod",
    ),
]


@pytest.mark.parametrize(("doc", "runtime", "want"), COUNT_CASES)
def test_pod_set_counts(doc: dict[str, Any], runtime: Path, want: list[tuple[str, int]]) -> None:
    assert [(p["name"], p["count"]) for p in pod_sets(doc, context(runtime))] == want


def test_trainer_fields_and_runtime_patches_reach_the_pod_template() -> None:
    patch = {
        "manager": "me",
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "nodeSelector": {"pool": "h100"},
                                            "containers": [
                                                {"name": "node", "env": [{"name": "A", "value": "1"}]}
                                            ],
                                        }
                                    }
                                }
                            },
                        }
                    ]
                }
            }
        },
    }
    doc = trainjob(
        trainer={"image": "mine:1", "command": ["torchrun"], "env": [{"name": "B", "value": "2"}]},
        runtimePatches=[patch],
    )
    (node,) = pod_sets(doc, context(TORCH))
    assert node["template"]["spec"] == {
        "containers": [
            {
                "name": "node",
                "image": "mine:1",
                "command": ["torchrun"],
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            }
        ],
        "nodeSelector": {"pool": "h100"},
    }


MERGE_CASES = [
    pytest.param({"a": {"b": 1}}, {"a": {"c": 2}}, {"a": {"b": 1, "c": 2}}, id="mappings merge"),
    pytest.param(
        [{"name": "x", "v": 1}, {"name": "y"}],
        [{"name": "x", "v": 2}, {"name": "z"}],
        [{"name": "x", "v": 2}, {"name": "y"}, {"name": "z"}],
        id="named lists merge by name",
    ),
    pytest.param(["a", "b"], ["c"], ["c"], id="other lists are replaced"),
]


@pytest.mark.parametrize(("base", "patch", "want"), MERGE_CASES)
def test_strategic_merge(base: Any, patch: Any, want: Any) -> None:
    before = copy.deepcopy(base)
    assert strategic_merge(base, patch) == want
    assert base == before


REFUSAL_CASES = [
    pytest.param(trainjob("nope"), RuntimeMissing, "spec.runtimeRef.name", id="a missing runtime"),
    pytest.param(
        trainjob("torch-distributed", kind="TrainingRuntime"),
        RuntimeMissing,
        "spec.runtimeRef.name",
        id="a cluster runtime does not answer for a namespaced reference",
    ),
    pytest.param(
        {**trainjob(), "spec": {"runtimeRef": {"name": "torch-distributed", "apiGroup": "example.com"}}},
        SourceError,
        "spec.runtimeRef",
        id="a runtime of another api group",
    ),
    pytest.param(
        trainjob(trainer={"numNodes": -1}), SourceError, "spec.trainer.numNodes", id="negative numNodes"
    ),
]


@pytest.mark.parametrize(("doc", "error", "field"), REFUSAL_CASES)
def test_refusals(doc: dict[str, Any], error: type[SourceError], field: str) -> None:
    with pytest.raises(error) as err:
        to_workload(doc, context=context(TORCH))
    assert err.value.field == field


def test_the_loader_resolves_runtimes_in_any_file_order() -> None:
    result = load([str(DOCS / "trainjob-pytorch-distributed.yaml"), str(SETUP), str(TORCH)])
    assert result.errors == ()
    (workload,) = result.workloads
    assert [(p.name, p.count) for p in workload.pod_sets] == [("node", 2)]


def test_a_trainjob_without_its_runtime_stays_pending_and_validate_names_the_field() -> None:
    files = [str(SETUP), str(DOCS / "trainjob-pytorch-distributed.yaml")]
    loaded = load(files)
    assert loaded.config is not None and loaded.workloads == ()
    (warning,) = [d for d in loaded.diagnostics if d.kind == "TrainJob"]
    assert (warning.severity, warning.field, warning.stays_pending) == (
        "warning",
        "spec.runtimeRef.name",
        True,
    )
    assert "runtime 'torch-distributed' not found" in warning.message
    strict = load(files, strict=True)
    (error,) = strict.errors
    assert (error.field, error.line) == ("spec.runtimeRef.name", 10)
