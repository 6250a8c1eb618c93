"""Serving objects in the export: written as the user wrote them, labelled with their queue where
Kueue reads it, and checked (Kubernetes' schemas for apps, autoscaling and policy; field checks for
KEDA, KServe and RayService) before anything is written."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuq.api.loader import LoadResult, load
from gpuq.cli import app
from gpuq.commands.export import alert_rules
from gpuq.k8s import export as k8s_export
from gpuq.k8s import pod_security
from gpuq.k8s.crd_schemas import crd_version
from gpuq.k8s.export import Export, build_export, check_export
from gpuq.k8s.export_common import ExportOptions
from gpuq.k8s.export_validate import check_objects

Q = "kueue.x-k8s.io/queue-name"
CONFIG = (Path(__file__).parent / "data" / "serving.yaml").read_text()


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("serving") / "serving.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture(scope="module")
def loaded(config_path: Path) -> LoadResult:
    result = load([str(config_path)])
    assert result.config is not None, [str(d) for d in result.errors]
    return result


@pytest.fixture(scope="module")
def exported(loaded: LoadResult) -> Export:
    options = ExportOptions()
    built = build_export(loaded, options, alert_rules())
    check_export(built, options)  # every serving kind passes its checks
    return built


def written(exported: Export, kind: str, name: str) -> dict[str, Any]:
    (found,) = [
        o for o in exported.files["80-serving.yaml"] if (o["kind"], o["metadata"]["name"]) == (kind, name)
    ]
    return dict(found)


def original(kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in yaml.safe_load_all(CONFIG) if (d["kind"], d["metadata"]["name"]) == (kind, name)]
    return dict(found)


def _at(obj: dict[str, Any], *path: str) -> Any:
    for part in path:
        obj = (obj or {}).get(part) or {}
    return obj


@pytest.mark.parametrize(
    ("name", "kind", "object_name", "pod_labels_at"),
    [
        ("a Deployment's queue label is copied onto its pod template", "Deployment", "chat",
         ("spec", "template", "metadata", "labels")),
        ("a StatefulSet's queue label on the template is set on the object too", "StatefulSet", "cache",
         ("spec", "template", "metadata", "labels")),
        ("an InferenceService's queue label goes onto the predictor's pods", "InferenceService", "llm",
         ("spec", "predictor", "labels")),
    ],
)  # fmt: skip
def test_each_serving_workload_carries_its_queue_label_where_kueue_reads_it(
    exported: Export, name: str, kind: str, object_name: str, pod_labels_at: tuple[str, ...]
) -> None:
    obj = written(exported, kind, object_name)
    assert (obj["metadata"]["labels"][Q], _at(obj, *pod_labels_at)[Q]) == ("inference", "inference")


def test_a_ray_service_is_labelled_on_the_object_only_as_kueue_admits_it_whole(exported: Export) -> None:
    obj = written(exported, "RayService", "rs")
    assert obj["metadata"]["labels"] == {Q: "inference"}
    assert obj["spec"] == hardened(original("RayService", "rs"))["spec"]  # templates as written, hardened
    assert "labels" not in obj["spec"]["rayClusterConfig"]["headGroupSpec"]["template"].get("metadata", {})


@pytest.mark.parametrize(
    ("kind", "name"),
    [("HorizontalPodAutoscaler", "cache"), ("ScaledObject", "chat"), ("PodDisruptionBudget", "chat")],
)
def test_autoscalers_and_disruption_budgets_are_written_as_the_user_wrote_them(
    exported: Export, kind: str, name: str
) -> None:
    assert written(exported, kind, name) == original(kind, name)


def test_status_and_server_set_metadata_are_dropped_and_the_rest_kept(exported: Export) -> None:
    chat, source = written(exported, "Deployment", "chat"), original("Deployment", "chat")
    assert "status" not in chat and "resourceVersion" not in chat["metadata"]
    expected = copy.deepcopy(hardened(source)["spec"])
    expected["template"]["metadata"]["labels"][Q] = "inference"
    assert chat["spec"] == expected


def hardened(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with its pod templates given what Pod Security ``restricted`` asks (the default level)."""
    out = copy.deepcopy(obj)
    for pod in pod_security.pod_specs(out):
        pod_security.harden(pod)
    return out


def test_every_serving_object_is_written_once_in_file_order(exported: Export) -> None:
    assert [o["kind"] for o in exported.files["80-serving.yaml"]] == [
        "Deployment",
        "StatefulSet",
        "HorizontalPodAutoscaler",
        "ScaledObject",
        "PodDisruptionBudget",
        "InferenceService",
        "RayService",
    ]


SCALED_OBJECT = original("ScaledObject", "chat")
ISVC = original("InferenceService", "llm")
RAY_SERVICE = original("RayService", "rs")
DEPLOYMENT = original("Deployment", "chat")
TARGET = ("spec", "scaleTargetRef")
THRESHOLD = ("spec", "triggers", 0, "metadata", "threshold")


def _with(obj: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A deep copy of ``obj`` with ``path`` set to ``value`` (removed when value is ...)."""
    out = copy.deepcopy(obj)
    here: Any = out
    for part in path[:-1]:
        here = here[part]
    if value is ...:
        del here[path[-1]]
    else:
        here[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("name", "obj", "expected"),
    [
        ("a valid scaled object passes", SCALED_OBJECT, []),
        ("a scaled object without scaleTargetRef is named", _with(SCALED_OBJECT, TARGET, ...),
         [("spec.scaleTargetRef", "is required")]),
        ("a scale target needs a name", _with(SCALED_OBJECT, TARGET, {"kind": "Deployment"}),
         [("spec.scaleTargetRef.name", "is required")]),
        ("trigger metadata values are strings", _with(SCALED_OBJECT, THRESHOLD, 10),
         [("spec.triggers[0].metadata.threshold", "10 is not of type 'string'")]),
        ("an unknown scaled object spec key is refused", _with(SCALED_OBJECT, ("spec", "minReplicas"), 1),
         [("spec.minReplicas", "unknown field")]),
        ("a valid inference service passes", ISVC, []),
        ("an inference service needs a predictor", _with(ISVC, ("spec", "predictor"), ...),
         [("spec.predictor", "is required")]),
        ("an unknown inference service spec key is refused", _with(ISVC, ("spec", "router"), {}),
         [("spec.router", "unknown field")]),
        ("kserve's scale metric is an enum", _with(ISVC, ("spec", "predictor", "scaleMetric"), "gpu"),
         [("spec.predictor.scaleMetric", "'gpu' is not one of ['cpu', 'memory', 'concurrency', 'rps']")]),
        ("a model format needs a name", _with(ISVC, ("spec", "predictor", "model", "modelFormat"), {}),
         [("spec.predictor.model.modelFormat.name", "is required")]),
        ("a predictor container's unknown field is refused (KServe inlines the PodSpec schema)",
         _with(ISVC, ("spec", "predictor", "model", "resourcez"), {}),
         [("spec.predictor.model.resourcez", "unknown field")]),
        ("a valid ray service passes", RAY_SERVICE, []),
        ("a ray service needs a cluster", _with(RAY_SERVICE, ("spec", "rayClusterConfig"), ...),
         [("spec.rayClusterConfig", "is required")]),
        ("an unknown ray service spec key is refused", _with(RAY_SERVICE, ("spec", "serveConfig"), "x"),
         [("spec.serveConfig", "unknown field")]),
        ("a deployment passes kubernetes' own schema", DEPLOYMENT | {"status": {}}, []),
        ("a deployment's unknown field is refused by kubernetes' strict schema",
         _with(DEPLOYMENT, ("spec", "replica"), 2),
         [("spec.replica", "unknown field")]),
    ],
)  # fmt: skip
def test_serving_kinds_are_checked_field_by_field(
    name: str, obj: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    found = check_objects({"80-serving.yaml": [obj]}, "1.33")
    assert [(p.field, p.message) for p in found] == expected


def test_every_serving_kind_has_a_check() -> None:
    from gpuq.api.serving import SERVING_KINDS
    from gpuq.k8s.export_validate import CORE_API_VERSIONS

    unchecked = [
        k for k in sorted(SERVING_KINDS) if k[0] not in CORE_API_VERSIONS and crd_version(*k) is None
    ]
    assert unchecked == []


def test_a_broken_scaled_object_fails_the_export_naming_it_and_nothing_is_written(
    config_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = k8s_export.build_export

    def without_a_scale_target(*args: object) -> Export:
        built = real(*args)  # type: ignore[arg-type]
        files = dict(built.files)
        files["80-serving.yaml"] = [
            _with(o, ("spec", "scaleTargetRef"), ...) if o["kind"] == "ScaledObject" else o
            for o in files["80-serving.yaml"]
        ]
        return Export(files)

    monkeypatch.setattr("gpuq.k8s.export.build_export", without_a_scale_target)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["export", "k8s", "-f", str(config_path), "--out-dir", str(out)])
    assert result.exit_code == 1
    assert "80-serving.yaml: ScaledObject/serve/chat: spec.scaleTargetRef: is required" in result.output
    assert "nothing written" in result.output
    assert not out.exists()
