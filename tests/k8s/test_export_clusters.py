"""What ``gpuq export k8s`` writes is what real clusters accept.

Every bundled example configuration (each directory, and each Scenario variant that names
configuration files) is exported with each provisioner; every distinct object is validated
once against the real CRD schema of its kind (or Kubernetes' strict schema for built-in
kinds), and every pod template against the Pod Security Standards' restricted rules, written
here from https://kubernetes.io/docs/concepts/security/pod-security-standards/ independently
of :mod:`gpuq.k8s.pod_security`.
"""

from __future__ import annotations

import copy
import functools
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.api.compute_class import ComputeClass
from gpuq.api.loader import load
from gpuq.commands.export import alert_rules
from gpuq.k8s import crd_schemas, pod_security
from gpuq.k8s.export import Export, build_export, check_export, write_export
from gpuq.k8s.export_common import ExportOptions
from gpuq.k8s.export_validate import CORE_API_VERSIONS, check_objects

ROOT = Path(__file__).resolve().parents[2]
GKE_EXAMPLE = ROOT / "tests" / "data" / "gke-computeclass" / "computeclass-reference.yaml"
SERVING = Path(__file__).parent / "data" / "serving.yaml"
"""Every serving kind (KServe and RayService included, which the examples lack)."""


def example_configurations() -> list[tuple[str, tuple[str, ...]]]:
    """(name, files) for each example directory and each Scenario variant that changes its files."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for directory in sorted(p for p in (ROOT / "examples").iterdir() if p.is_dir()):
        scenarios = sorted([*directory.glob("scenario.yaml"), *directory.glob("**/*.scenario")])
        base = (str(directory),)
        for scenario in scenarios:
            spec = yaml.safe_load(scenario.read_text()).get("spec", {})
            files = tuple(str(scenario.parent / f) for f in spec.get("config") or [])
            if scenario.name == "scenario.yaml" and files:
                base = files
            for variant in spec.get("variants") or []:
                named = tuple(str(scenario.parent / f) for f in variant.get("config") or []) or files or base
                extra = tuple(str(scenario.parent / f) for f in variant.get("extraConfig") or [])
                if variant.get("config") or extra:
                    out.append((f"{directory.name}/{scenario.name}:{variant['name']}", (*named, *extra)))
        out.append((directory.name, base))
    out += [(f"configs/{p.name}", (str(p),)) for p in sorted((ROOT / "examples" / "configs").glob("*.yaml"))]
    return sorted(set(out))


def configurations() -> list[tuple[str, tuple[str, ...]]]:
    """The examples, the serving kinds and GKE's own ComputeClass."""
    return [
        *example_configurations(),
        ("serving-kinds", (str(SERVING),)),
        ("gke-computeclass", (str(GKE_EXAMPLE),)),
    ]


@functools.cache
def exports() -> tuple[tuple[str, str, Export], ...]:
    """(configuration, provisioner, export) for every example configuration and provisioner."""
    out = []
    for name, files in configurations():
        result = load(list(files))
        assert result.config is not None, (name, [str(d) for d in result.errors])
        for provisioner in ("gke", "karpenter"):
            options = ExportOptions(provisioner=provisioner)  # type: ignore[arg-type]
            out.append((name, provisioner, build_export(result, options, alert_rules())))
    return tuple(out)


@functools.cache
def distinct_objects() -> tuple[tuple[str, dict[str, Any]], ...]:
    """Every distinct object meant for a cluster, once, with the first file that holds it."""
    seen: dict[str, tuple[str, dict[str, Any]]] = {}
    for _, _, exported in exports():
        for file, objects in exported.cluster_files().items():
            for obj in objects:
                seen.setdefault(json.dumps(obj, sort_keys=True), (file, obj))
    return tuple(seen.values())


def test_every_example_configuration_is_exported() -> None:
    names = [name for name, _ in example_configurations()]
    assert {"serving", "symbol-retail", "symbol-retail/capacity.scenario:compute-class"} <= set(names)
    assert "serving/scenario.yaml:keda" in names


def test_every_exported_object_passes_its_crd_or_kubernetes_schema() -> None:
    problems = [p for file, obj in distinct_objects() for p in check_objects({file: [obj]}, "1.33")]
    assert problems == []


def test_every_exported_kind_is_checked_against_a_real_schema() -> None:
    """Built-in kinds by Kubernetes' schema, custom ones by their CRD; GKE's ComputeClass (no public
    schema) is the only one left to gpuq's own field checks."""
    kinds = {(o["apiVersion"], o["kind"]) for _, o in distinct_objects()}
    unschema = {k for k in kinds if k[0] not in CORE_API_VERSIONS and crd_schemas.crd_version(*k) is None}
    assert unschema == {("cloud.google.com/v1", "ComputeClass")}
    assert {("kueue.x-k8s.io/v1beta2", "Cohort"), ("kueue.x-k8s.io/v1beta2", "Topology")} <= kinds


def test_every_exported_kind_is_written_in_a_served_version() -> None:
    for api_version, kind in {(o["apiVersion"], o["kind"]) for _, o in distinct_objects()}:
        found = crd_schemas.crd_version(api_version, kind)
        assert found is None or (found.served and not found.deprecated), (api_version, kind)


def test_kueue_cel_rules_that_apply_on_create_are_all_evaluated() -> None:
    """Reported, not silently passed: which CEL rules of the exported kinds gpuq does not evaluate."""
    kinds = sorted({(o["apiVersion"], o["kind"]) for _, o in distinct_objects()})
    unevaluated = {k: crd_schemas.unevaluated_rules(*k) for k in kinds}
    assert {k: v for k, v in unevaluated.items() if k[0].startswith("kueue.x-k8s.io/")} == {
        k: [] for k in kinds if k[0].startswith("kueue.x-k8s.io/")
    }
    assert unevaluated[("karpenter.sh/v1", "NodePool")] == [
        "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || "
        "(size(self.limits) == 1 && 'nodes' in self.limits))"
    ]


@pytest.mark.parametrize(
    ("name", "path", "value", "field", "message"),
    [
        (
            "a karpenter template label in karpenter's domain",
            ("spec", "template", "metadata", "labels", "karpenter.sh/custom"),
            "x",
            "spec.template.metadata.labels",
            'label domain "karpenter.sh" is restricted',
        ),
        (
            "a karpenter requirement with In and no values",
            ("spec", "template", "spec", "requirements", 0, "values"),
            [],
            "spec.template.spec.requirements",
            "requirements with operator 'In' must have a value defined",
        ),
    ],
)
def test_cel_rules_of_the_karpenter_crd_are_evaluated(
    name: str, path: tuple[str | int, ...], value: Any, field: str, message: str
) -> None:
    broken = copy.deepcopy(next(o for _, o in distinct_objects() if o["kind"] == "NodePool"))
    here: Any = broken
    for part in path[:-1]:
        here = here[part]
    here[path[-1]] = value
    found = check_objects({"50-nodes.yaml": [broken]}, "1.33")
    assert (field, message) in [(p.field, p.message) for p in found], name


# --- Pod Security Standards, restricted (written from the standard, not from gpuq's module) -------

RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_problems(pod: dict[str, Any], containers: list[dict[str, Any]]) -> list[str]:
    """The restricted profile's rules (and baseline's that a GPU pod could plausibly break)."""
    out = []
    context = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            out.append(key)
    for volume in pod.get("volumes") or []:
        if set(volume) - {"name"} - RESTRICTED_VOLUMES:
            out.append(f"volume {volume['name']}")
    for container in containers:
        own = container.get("securityContext") or {}
        name = container.get("name", "model")
        if own.get("privileged"):
            out.append(f"{name}: privileged")
        if own.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation")
        if not (
            own.get("runAsNonRoot") is True
            or (context.get("runAsNonRoot") is True and "runAsNonRoot" not in own)
        ):
            out.append(f"{name}: runAsNonRoot")
        if 0 in (own.get("runAsUser"), context.get("runAsUser")):
            out.append(f"{name}: runAsUser 0")
        seccomp = (own.get("seccompProfile") or context.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccompProfile")
        capabilities = own.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            out.append(f"{name}: capabilities.drop")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: capabilities.add")
        if any(p.get("hostPort") for p in container.get("ports") or []):
            out.append(f"{name}: hostPort")
    return out


def test_every_exported_pod_template_meets_the_restricted_pod_security_standard() -> None:
    checked = 0
    problems = []
    for _, obj in distinct_objects():
        for pod in pod_security.pod_specs(obj):
            checked += 1
            found = restricted_problems(pod.pod, [c for _, c in pod.containers])
            problems += [f"{obj['kind']}/{obj['metadata']['name']} {pod.path}: {p}" for p in found]
    assert checked >= 20 and problems == []


def test_team_namespaces_enforce_restricted_when_their_templates_meet_it() -> None:
    for _, _, exported in exports():
        for ns in exported.files.get("00-namespaces.yaml", []):
            labels = ns["metadata"].get("labels", {})
            if "pod-security.kubernetes.io/enforce" in labels:
                assert labels["pod-security.kubernetes.io/enforce"] == "restricted", ns["metadata"]["name"]
        assert not [w for w in exported.warnings if "Pod Security" in w]


DEPLOYMENT = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: web}
spec: {clusterQueue: cq}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: f, resources: [{name: cpu, nominalQuota: "8"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: f}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: web, labels: {kueue.x-k8s.io/queue-name: q}}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: nginx, resources: {requests: {cpu: "1"}}}]
"""


def _deployment_export(pod_patch: dict[str, Any], container_patch: dict[str, Any]) -> Export:
    docs = list(yaml.safe_load_all(DEPLOYMENT))
    spec = docs[-1]["spec"]["template"]["spec"]
    spec.update(pod_patch)
    spec["containers"][0].update(container_patch)
    result = load(["-"], stdin=StringIO(yaml.safe_dump_all(docs)))
    assert result.config is not None, [str(d) for d in result.errors]
    exported = build_export(result, ExportOptions(), alert_rules())
    check_export(exported, ExportOptions())
    return exported


@pytest.mark.parametrize(
    ("name", "pod_patch", "container_patch", "level", "said"),
    [
        ("a plain template is hardened and stays restricted", {}, {}, "restricted", None),
        (
            "a container the user lets run as root lowers the namespace to baseline",
            {},
            {"securityContext": {"runAsNonRoot": False}},
            "baseline",
            "spec.template.spec.containers[0].securityContext.runAsNonRoot: must be true",
        ),
        (
            "host networking lowers it to privileged",
            {"hostNetwork": True},
            {},
            "privileged",
            "spec.template.spec.hostNetwork: host namespaces are not allowed",
        ),
        (
            "an added capability beyond NET_BIND_SERVICE but in baseline's list gives baseline",
            {},
            {"securityContext": {"capabilities": {"add": ["CHOWN"]}}},
            "baseline",
            "capabilities.add: may add only NET_BIND_SERVICE",
        ),
    ],
)
def test_the_namespace_level_is_the_strictest_its_templates_meet(
    name: str, pod_patch: dict[str, Any], container_patch: dict[str, Any], level: str, said: str | None
) -> None:
    exported = _deployment_export(pod_patch, container_patch)
    namespace = next(o for o in exported.files["00-namespaces.yaml"] if o["metadata"]["name"] == "web")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == level, name
    warnings = [w for w in exported.warnings if "Pod Security" in w]
    assert (said is None and warnings == []) or (said is not None and said in warnings[0]), warnings
    template = exported.files["80-serving.yaml"][0]["spec"]["template"]["spec"]
    container = template["containers"][0]["securityContext"]
    assert template["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "ALL" in container["capabilities"]["drop"] and container["allowPrivilegeEscalation"] is False
    if level == "restricted":
        assert template["securityContext"]["runAsNonRoot"] is True


# --- tenancy: what docs/serving.md says a team deploys, it may create and reach -----------------


def _serving_export(**options: Any) -> Export:
    result = load([str(SERVING)])
    assert result.config is not None
    return build_export(result, ExportOptions(**options), alert_rules())


def _allowed(exported: Export, namespace: str) -> list[str]:
    policy = next(
        o
        for o in exported.files["30-tenancy.yaml"]
        if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == namespace
    )
    return [
        p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for p in policy["spec"]["ingress"][1]["from"]
    ]


def test_serving_namespaces_admit_the_gateway_knative_and_kuberay_operator() -> None:
    exported = _serving_export()
    serving_ns = {o["metadata"]["namespace"] for o in exported.files["80-serving.yaml"]}
    kinds = {o["kind"] for o in exported.files["80-serving.yaml"]}
    assert {"InferenceService", "RayService"} <= kinds
    for namespace in serving_ns:
        here = {
            o["kind"] for o in exported.files["80-serving.yaml"] if o["metadata"]["namespace"] == namespace
        }
        expected = ["monitoring", "istio-system"]
        expected += ["knative-serving"] if "InferenceService" in here else []
        expected += ["default"] if "RayService" in here else []
        assert sorted(_allowed(exported, namespace)) == sorted(expected), namespace


def test_the_admitted_namespaces_are_configurable() -> None:
    exported = _serving_export(
        ingress_namespaces=("ingress-nginx", "gateway"),
        knative_namespace="kn",
        kuberay_namespace="ray-system",
    )
    namespace = next(
        o["metadata"]["namespace"]
        for o in exported.files["80-serving.yaml"]
        if o["kind"] == "InferenceService"
    )
    assert {"ingress-nginx", "gateway", "kn"} <= set(_allowed(exported, namespace))
    assert "istio-system" not in _allowed(exported, namespace)


def test_a_namespace_that_only_runs_batch_jobs_admits_only_itself_and_monitoring() -> None:
    exported = next(e for n, p, e in exports() if n == "gpu-estate" and p == "gke")
    batch_only = [
        o["metadata"]["namespace"]
        for o in exported.files["30-tenancy.yaml"]
        if o["kind"] == "NetworkPolicy" and len(o["spec"]["ingress"][1]["from"]) == 1
    ]
    assert batch_only and all(_allowed(exported, ns) == ["monitoring"] for ns in batch_only)


def test_the_team_role_covers_every_kind_a_team_deploys() -> None:
    exported = _serving_export()
    role = next(o for o in exported.files["30-tenancy.yaml"] if o["kind"] == "Role")
    granted = {
        (g, r)
        for rule in role["rules"]
        if "create" in rule["verbs"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    plural = {
        "Deployment": ("apps", "deployments"),
        "StatefulSet": ("apps", "statefulsets"),
        "HorizontalPodAutoscaler": ("autoscaling", "horizontalpodautoscalers"),
        "ScaledObject": ("keda.sh", "scaledobjects"),
        "InferenceService": ("serving.kserve.io", "inferenceservices"),
        "RayService": ("ray.io", "rayservices"),
        "PodDisruptionBudget": ("policy", "poddisruptionbudgets"),
        "Job": ("batch", "jobs"),
        "RayJob": ("ray.io", "rayjobs"),
        "PyTorchJob": ("kubeflow.org", "pytorchjobs"),
        "Pod": None,  # Kueue's pod integration: a team's bare Pods are created by its controllers
    }
    written = {
        o["kind"]
        for _, _, e in exports()
        for f in ("70-workloads.yaml", "80-serving.yaml")
        for o in e.files.get(f, [])
    }
    missing = [k for k in sorted(written) if plural.get(k) is not None and plural[k] not in granted]
    assert missing == [] and ("", "services") in granted


# --- Karpenter from a GKE-shaped configuration, and GKE's own ComputeClass ---------------------


def test_karpenter_export_of_gke_pools_warns_naming_pool_and_field() -> None:
    warnings = next(e for n, p, e in exports() if n == "symbol-retail" and p == "karpenter").warnings
    assert any(
        w.startswith("NodePool/a100-reserved: spec.machineType: 'a2-ultragpu-8g' is not an EC2")
        for w in warnings
    )
    assert any(
        w.startswith("NodePool/a100-reserved: spec.zone: 'us-central1-a' is a GCE zone") for w in warnings
    )
    assert any("spec.labels[cloud.google.com/reservation-name]: a GKE label" in w for w in warnings)
    assert next(e for n, p, e in exports() if n == "symbol-retail" and p == "gke").warnings == ()


def test_a_real_gke_compute_class_is_read_and_written_back_with_every_key(tmp_path: Path) -> None:
    source = yaml.safe_load(GKE_EXAMPLE.read_text())
    result = load([str(GKE_EXAMPLE)])
    assert result.config is not None and result.diagnostics == ()
    assert [type(m.model) for m in result.manifests] == [ComputeClass]
    exported = build_export(result, ExportOptions(), alert_rules())
    check_export(exported, ExportOptions())
    (written,) = exported.files["50-nodes.yaml"]
    expected = copy.deepcopy(source["spec"])
    assert written["spec"] == expected
    write_export(exported, str(tmp_path))
    again = load([str(tmp_path)])
    assert again.config is not None and again.diagnostics == ()
    (model,) = [m.model for m in again.manifests if isinstance(m.model, ComputeClass)]
    assert model.spec.description == "Short description of the ComputeClass."


def test_an_export_holding_a_gpuq_and_a_gke_compute_class_loads_back_as_one(tmp_path: Path) -> None:
    files = dict(configurations())["symbol-retail/capacity.scenario:compute-class"]
    original = load(list(files))
    exported = build_export(original, ExportOptions(), alert_rules())
    assert [o["kind"] for o in exported.files["50-nodes.yaml"]] == ["ComputeClass"]
    write_export(exported, str(tmp_path))
    again = load([str(tmp_path)])
    assert again.config is not None, [str(d) for d in again.errors]
    classes = [m for m in again.manifests if isinstance(m.model, ComputeClass)]
    assert [str(m.model.api_version) for m in classes] == [
        "gpuq.dev/v1alpha1"
    ]  # the gpuq one is the definition
    (before,) = [m.model for m in original.manifests if isinstance(m.model, ComputeClass)]
    assert classes[0].model.spec == before.spec  # type: ignore[union-attr]
