"""Kinds Kueue admits through other objects (a RayService's RayCluster, a Sandbox's or a Deployment's
pods, a CronJob's Jobs) follow the Configuration's ``integrations.frameworks`` as the jobs do: when the
framework of what they make is not enabled, they give no Workload and a warning names the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuq.api.loader import LoadResult, load_texts

EXAMPLES = Path(__file__).parents[1] / "data" / "kueue-v0.19.2" / "site" / "static" / "examples"
SETUP = "admin/single-clusterqueue-setup.yaml"
CONFIG = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nintegrations:\n  frameworks: [{}]\n"


def load(*texts: str) -> LoadResult:
    return load_texts([(f"doc-{i}.yaml", t) for i, t in enumerate(texts)])


KINDS = [
    # (example, its kind, the framework that manages what it makes, workloads when managed)
    ("jobs/ray-service-sample.yaml", "RayService", "ray.io/rayservice", 1),
    ("pod-based-workloads/sample-sandbox.yaml", "Sandbox", "pod", 1),
    ("serving-workloads/sample-deployment.yaml", "Deployment", "deployment", 3),
    ("serving-workloads/sample-statefulset.yaml", "StatefulSet", "statefulset", 1),
    (
        "serving-workloads/sample-leaderworkerset.yaml",
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io/leaderworkerset",
        2,
    ),
    ("jobs/sample-cronjob.yaml", "CronJob", "batch/job", 1),
    ("pod-based-workloads/workflow-single-queue.yaml", "Workflow", "pod", 1),
]


@pytest.mark.parametrize(("file", "kind", "framework", "count"), KINDS, ids=[k[1] for k in KINDS])
@pytest.mark.parametrize("enabled", [True, False], ids=["enabled", "not enabled"])
def test_a_kind_admitted_through_other_objects_follows_its_framework(
    file: str, kind: str, framework: str, count: int, enabled: bool
) -> None:
    other = "kubeflow.org/mpijob" if framework != "kubeflow.org/mpijob" else "batch/job"
    config = CONFIG.format(framework if enabled else other)
    result = load((EXAMPLES / SETUP).read_text(), (EXAMPLES / file).read_text(), config)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    warnings = [d for d in result.warnings if d.field == "integrations.frameworks"]
    assert (len(result.workloads), len(warnings)) == ((count, 0) if enabled else (0, 1))
    if not enabled:
        assert warnings[0].kind == kind and f"{framework!r} is not enabled" in warnings[0].message


RAY_SERVICE = """apiVersion: ray.io/v1
kind: RayService
metadata:
  name: svc
  namespace: default
  labels: {labels}
spec:
  serveConfigV2: |
    applications:
    - name: app
      import_path: m:app
      deployments: [{{name: d, num_replicas: 1}}]
  rayClusterConfig:
    enableInTreeAutoscaling: {autoscaling}
    headGroupSpec:
      template: {{spec: {{containers: [{{name: head, resources: {{requests: {{cpu: "1"}}}}}}]}}}}
    workerGroupSpecs:
    - groupName: GPU-Group
      replicas: 2
      template:
        spec: {{containers: [{{name: w, resources: {{requests: {{cpu: "1", nvidia.com/gpu: "1"}}}}}}]}}
"""
QUEUED = "{kueue.x-k8s.io/queue-name: user-queue}"


def test_a_rayservice_gives_the_workload_of_its_raycluster_named_as_kuberay_names_it() -> None:
    result = load((EXAMPLES / SETUP).read_text(), RAY_SERVICE.format(labels=QUEUED, autoscaling="false"))
    assert result.errors == ()
    (workload,) = result.workloads
    assert workload.name.startswith("raycluster-svc-raycluster-")
    assert [(p.name, p.count) for p in workload.pod_sets] == [("head", 1), ("gpu-group", 2)]
    again = load((EXAMPLES / SETUP).read_text(), RAY_SERVICE.format(labels=QUEUED, autoscaling="false"))
    assert again.workloads[0].name == workload.name  # the same file, the same name


def test_a_rayservice_without_a_queue_gives_no_workload() -> None:
    result = load((EXAMPLES / SETUP).read_text(), RAY_SERVICE.format(labels="{}", autoscaling="false"))
    assert result.errors == () and result.workloads == ()


def test_a_rayservice_whose_cluster_kueue_refuses_stays_pending_and_is_an_error_for_validate() -> None:
    texts = [("setup.yaml", (EXAMPLES / SETUP).read_text())]
    texts.append(("svc.yaml", RAY_SERVICE.format(labels=QUEUED, autoscaling="true")))
    loaded = load_texts(texts)
    assert loaded.errors == () and loaded.workloads == ()
    (warning,) = [d for d in loaded.warnings if d.stays_pending]
    assert (warning.kind, warning.field) == ("RayService", "spec.rayClusterConfig.enableInTreeAutoscaling")
    assert "workload slicing" in warning.message
    strict = load_texts(texts, strict=True)
    assert [d.field for d in strict.errors] == ["spec.rayClusterConfig.enableInTreeAutoscaling"]


SANDBOX = """apiVersion: agents.x-k8s.io/v1alpha1
kind: Sandbox
metadata: {{name: box, namespace: default}}
spec:
  replicas: {replicas}
  podTemplate:
    metadata: {{labels: {{kueue.x-k8s.io/queue-name: user-queue}}}}
    spec:
      containers: [{{name: c, resources: {{requests: {{cpu: "{cpu}"}}}}}}]
"""

SANDBOXES = [
    ("a running sandbox is one pod", "1", "1", 1, None),
    ("a paused sandbox makes no pod", "0", "1", 0, ("warning", "spec.replicas")),
    ("more than one replica is refused", "2", "1", 0, ("error", "spec.replicas")),
    (
        "a bad request names the template's field",
        "1",
        "-1",
        0,
        ("error", "spec.podTemplate.spec.containers[0].resources.requests.cpu"),
    ),
]


@pytest.mark.parametrize(
    ("replicas", "cpu", "count", "finding"), [c[1:] for c in SANDBOXES], ids=[c[0] for c in SANDBOXES]
)
def test_a_sandbox_is_its_pod(replicas: str, cpu: str, count: int, finding: tuple[str, str] | None) -> None:
    result = load((EXAMPLES / SETUP).read_text(), SANDBOX.format(replicas=replicas, cpu=cpu))
    found = [(d.severity, d.field) for d in result.diagnostics if d.kind == "Sandbox"]
    assert found == ([finding] if finding else [])
    if result.errors:
        return
    assert len(result.workloads) == count
    if count:
        (workload,) = result.workloads
        assert workload.name.startswith("pod-box-") and [p.count for p in workload.pod_sets] == [1]
