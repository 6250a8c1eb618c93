"""The shape of every kind ``gpuq export k8s`` writes, on one small configuration."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpuq.api.loader import LoadResult, load
from gpuq.commands.export import alert_rules
from gpuq.k8s.export import Export, build_export, check_export
from gpuq.k8s.export_common import ExportOptions
from gpuq.k8s.manifests_nodes import gke_compute_class

CONFIG = """
apiVersion: v1
kind: Namespace
metadata: {name: vision, labels: {team: vision}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {gpuq.dev/node-pool: a100-mig}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: l4}
spec:
  nodeLabels: {gpuq.dev/node-pool: l4-sliced}
  nodeTaints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: vision}
spec:
  cohortName: lab
  namespaceSelector: {matchLabels: {team: vision}}
  preemption: {reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: l4
      resources:
      - {name: cpu, nominalQuota: "16"}
      - {name: memory, nominalQuota: 64Gi}
      - {name: nvidia.com/gpu, nominalQuota: "4", borrowingLimit: "2"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: speech}
spec:
  cohortName: lab
  namespaceSelector: {}
  stopPolicy: Hold
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: l4
      resources:
      - {name: cpu, nominalQuota: 500m}
      - {name: memory, nominalQuota: 32Gi}
      - {name: nvidia.com/gpu, nominalQuota: "4"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: main, namespace: vision}
spec: {clusterQueue: vision}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: main, namespace: speech}
spec: {clusterQueue: speech}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 1000
---
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {name: a100-mig}
spec:
  machineType: a2-ultragpu-1g
  count: 1
  max: 3
  cpu: "12"
  memory: 170Gi
  gpu: {model: A100-80GB, count: 1, sharing: {strategy: mig-single, migLayout: all-1g.10gb}}
---
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {name: l4-sliced}
spec:
  machineType: g2-standard-24
  count: 2
  cpu: "24"
  memory: 96Gi
  capacityType: spot
  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
  gpu: {model: L4, count: 2, sharing: {strategy: time-slicing, replicas: 4}}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: vision
  annotations: {kueue.x-k8s.io/queue-name: main}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      containers:
      - name: main
        image: trainer
        resources: {requests: {cpu: "2", memory: 8Gi, nvidia.com/gpu: "1"}}
status: {active: 1}
"""


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> LoadResult:
    path = tmp_path_factory.mktemp("config") / "config.yaml"
    path.write_text(CONFIG)
    result = load([str(path)])
    assert result.config is not None, [str(d) for d in result.errors]
    return result


def export(result: LoadResult, **options: Any) -> Export:
    opts = ExportOptions(**options)
    exported = build_export(result, opts, alert_rules())
    check_export(exported, opts)
    return exported


def objects(exported: Export, kind: str) -> list[dict[str, Any]]:
    """Objects of ``kind`` meant for the cluster (``gpuq/`` left out)."""
    return [o for objs in exported.cluster_files().values() for o in objs if o["kind"] == kind]


def one(exported: Export, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    found = [
        o
        for o in objects(exported, kind)
        if o["metadata"]["name"] == name and o["metadata"].get("namespace") == namespace
    ]
    assert len(found) == 1, (kind, name, namespace)
    return found[0]


KUEUE = ["ResourceFlavor", "ResourceFlavor", "WorkloadPriorityClass", "ClusterQueue", "ClusterQueue"]
KUEUE += ["LocalQueue", "LocalQueue"]
TENANCY = ["ResourceQuota"] * 2 + ["NetworkPolicy"] * 2 + ["Role", "RoleBinding"] * 2
TENANCY += ["ClusterRole", "ClusterRoleBinding"]


@pytest.mark.parametrize(
    ("file", "kinds"),
    [
        ("00-namespaces.yaml", ["Namespace", "Namespace"]),
        ("10-priorities.yaml", ["PriorityClass"]),
        ("20-kueue.yaml", KUEUE),
        ("30-tenancy.yaml", TENANCY),
        ("40-devices.yaml", ["ConfigMap", "ConfigMap"]),
        ("60-monitoring.yaml", ["PrometheusRule"]),
        ("70-workloads.yaml", ["Job"]),
        ("gpuq/machines.yaml", ["NodePool", "NodePool"]),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_each_file_holds_its_kinds_in_apply_order(loaded: LoadResult, file: str, kinds: list[str]) -> None:
    assert [o["kind"] for o in export(loaded).files[file]] == kinds


def test_gke_writes_no_node_objects_without_compute_classes(loaded: LoadResult) -> None:
    assert "50-nodes.yaml" not in export(loaded).files


def test_team_namespaces_get_pod_security_labels_and_keep_their_own(loaded: LoadResult) -> None:
    vision = one(export(loaded), "Namespace", "vision")["metadata"]["labels"]
    assert vision["team"] == "vision"
    assert {k: v for k, v in vision.items() if k.startswith("pod-security")} == {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    speech = one(export(loaded, pod_security="baseline"), "Namespace", "speech")["metadata"]["labels"]
    assert speech["pod-security.kubernetes.io/enforce"] == "baseline"


@pytest.mark.parametrize(
    ("version", "cohort_key", "may_stop"),
    [("v1beta2", "cohortName", "MayStopSearch"), ("v1beta1", "cohort", "Borrow")],
)
def test_cluster_queues_are_written_as_the_kueue_version_defines_them(
    loaded: LoadResult, version: str, cohort_key: str, may_stop: str
) -> None:
    exported = export(loaded, kueue_version=version)
    kueue = exported.files["20-kueue.yaml"]
    assert {o["apiVersion"] for o in kueue} == {f"kueue.x-k8s.io/{version}"}  # Cohort and Topology too
    spec = one(exported, "ClusterQueue", "vision")["spec"]
    other = {"cohort": "cohortName", "cohortName": "cohort"}[cohort_key]
    assert spec[cohort_key] == "lab" and other not in spec
    assert spec["flavorFungibility"] == {"whenCanBorrow": may_stop, "whenCanPreempt": "TryNextFlavor"}
    assert spec["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    assert spec["namespaceSelector"] == {"matchLabels": {"team": "vision"}}
    quotas = spec["resourceGroups"][0]["flavors"][0]["resources"]
    assert quotas[2] == {"name": "nvidia.com/gpu", "nominalQuota": "4", "borrowingLimit": "2"}
    speech = one(export(loaded), "ClusterQueue", "speech")["spec"]
    assert speech["namespaceSelector"] == {} and speech["stopPolicy"] == "Hold"
    assert speech["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "500m"


def test_resource_flavors_keep_labels_taints_and_tolerations(loaded: LoadResult) -> None:
    spec = one(export(loaded), "ResourceFlavor", "l4")["spec"]
    assert spec == {
        "nodeLabels": {"gpuq.dev/node-pool": "l4-sliced"},
        "nodeTaints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }


@pytest.mark.parametrize(
    ("namespace", "hard"),
    [
        # vision: nominal 4 GPUs + borrowing limit 2; cpu and memory may borrow the whole cohort pool
        ("vision", {"requests.cpu": "16500m", "requests.memory": "96Gi", "requests.nvidia.com/gpu": "6"}),
        # speech: no borrowing limit, so the cohort pool (4 + 4 GPUs)
        ("speech", {"requests.cpu": "16500m", "requests.memory": "96Gi", "requests.nvidia.com/gpu": "8"}),
    ],
)
def test_resource_quota_is_the_most_its_cluster_queues_can_admit(
    loaded: LoadResult, namespace: str, hard: dict[str, str]
) -> None:
    assert one(export(loaded), "ResourceQuota", "gpuq-quota", namespace)["spec"] == {"hard": hard}


def test_network_policy_admits_only_the_same_namespace_and_monitoring(loaded: LoadResult) -> None:
    policy = one(
        export(loaded, monitoring_namespace="observability"), "NetworkPolicy", "gpuq-team-isolation", "vision"
    )
    assert policy["spec"] == {
        "podSelector": {},
        "policyTypes": ["Ingress"],
        "ingress": [
            {"from": [{"podSelector": {}}]},
            {
                "from": [
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}}
                ]
            },
        ],
    }


def _verbs(rules: list[dict[str, Any]], group: str, resource: str) -> set[str]:
    return {v for r in rules if group in r["apiGroups"] and resource in r["resources"] for v in r["verbs"]}


@pytest.mark.parametrize(
    ("group", "resource", "verbs"),
    [
        (
            "batch",
            "jobs",
            {"create", "delete", "get", "list", "watch", "patch", "update", "deletecollection"},
        ),
        ("jobset.x-k8s.io", "jobsets", {"create", "get"}),
        ("kubeflow.org", "pytorchjobs", {"create", "get"}),
        ("ray.io", "rayjobs", {"create", "get"}),
        ("ray.io", "rayclusters", {"create", "get"}),
        ("kueue.x-k8s.io", "workloads", {"get", "list", "watch"}),
        ("kueue.x-k8s.io", "localqueues", {"get", "list", "watch"}),
    ],
)
def test_team_role_lets_a_team_manage_workloads_in_its_namespace(
    loaded: LoadResult, group: str, resource: str, verbs: set[str]
) -> None:
    role = one(export(loaded), "Role", "gpuq-team", "vision")
    assert verbs <= _verbs(role["rules"], group, resource)
    binding = one(export(loaded), "RoleBinding", "gpuq-team", "vision")
    assert binding["subjects"] == [
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "gpuq:team:vision"}
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "gpuq-team",
    }


def test_teams_can_read_but_never_edit_cluster_queues(loaded: LoadResult) -> None:
    exported = export(loaded)
    rules = [r for kind in ("Role", "ClusterRole") for o in objects(exported, kind) for r in o["rules"]]
    assert _verbs(rules, "kueue.x-k8s.io", "clusterqueues") == {"get", "list", "watch"}
    assert _verbs(rules, "kueue.x-k8s.io", "localqueues") == {"get", "list", "watch"}
    binding = one(exported, "ClusterRoleBinding", "gpuq-team-queue-reader")
    assert [s["name"] for s in binding["subjects"]] == ["gpuq:team:speech", "gpuq:team:vision"]


def test_workload_priority_classes_get_a_pod_priority_class_that_never_preempts(loaded: LoadResult) -> None:
    pc = one(export(loaded), "PriorityClass", "urgent")
    assert (pc["value"], pc["globalDefault"], pc["preemptionPolicy"]) == (1000, False, "Never")


def test_mig_pool_gets_a_device_plugin_strategy_and_a_mig_parted_layout(loaded: LoadResult) -> None:
    exported = export(loaded)
    plugin = one(exported, "ConfigMap", "gpuq-device-plugin", "gpu-operator")
    assert sorted(plugin["data"]) == ["a100-mig", "l4-sliced"]  # one ConfigMap, a key per shared pool
    assert yaml.safe_load(plugin["data"]["a100-mig"]) == {"version": "v1", "flags": {"migStrategy": "single"}}
    parted = one(exported, "ConfigMap", "gpuq-mig-parted", "gpu-operator")
    assert yaml.safe_load(parted["data"]["config.yaml"]) == {
        "version": "v1",
        "mig-configs": {
            "all-disabled": [{"devices": "all", "mig-enabled": False}],
            "a100-mig": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        },
    }


def test_time_sliced_pool_gets_replicas_in_the_device_plugin_config(loaded: LoadResult) -> None:
    plugin = one(export(loaded, gpu_operator_namespace="nvidia"), "ConfigMap", "gpuq-device-plugin", "nvidia")
    assert yaml.safe_load(plugin["data"]["l4-sliced"]) == {
        "version": "v1",
        "flags": {"migStrategy": "none"},
        "sharing": {
            "timeSlicing": {
                "renameByDefault": False,
                "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
            }
        },
    }


def test_karpenter_node_pools_carry_requirements_limits_taints_and_disruption(loaded: LoadResult) -> None:
    exported = export(loaded, provisioner="karpenter", node_class="gpu-nodes")
    assert [o["metadata"]["name"] for o in exported.files["50-nodes.yaml"]] == ["a100-mig", "l4-sliced"]
    pool = one(exported, "NodePool", "l4-sliced")
    assert pool["apiVersion"] == "karpenter.sh/v1"
    template = pool["spec"]["template"]
    assert template["spec"]["nodeClassRef"] == {
        "group": "karpenter.k8s.aws",
        "kind": "EC2NodeClass",
        "name": "gpu-nodes",
    }
    assert {r["key"]: r["values"] for r in template["spec"]["requirements"]} == {
        "node.kubernetes.io/instance-type": ["g2-standard-24"],
        "karpenter.sh/capacity-type": ["spot"],
        "karpenter.k8s.aws/instance-gpu-name": ["l4"],
        "karpenter.k8s.aws/instance-gpu-count": ["2"],
    }
    assert template["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]
    assert template["metadata"]["labels"]["gpuq.dev/node-pool"] == "l4-sliced"
    assert template["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "l4-sliced"
    assert pool["spec"]["limits"] == {"cpu": "48", "memory": "192Gi", "nvidia.com/gpu": "4"}
    assert pool["spec"]["disruption"]["consolidationPolicy"] == "WhenEmpty"
    assert one(exported, "NodePool", "a100-mig")["spec"]["limits"]["nvidia.com/gpu"] == "3"


def test_gpuq_compute_class_maps_to_gke_priorities() -> None:
    source = {
        "apiVersion": "gpuq.dev/v1alpha1",
        "kind": "ComputeClass",
        "metadata": {"name": "training"},
        "spec": {
            "priorities": [
                {"machineFamily": "a3", "gpu": {"type": "nvidia-h100-80gb", "count": 8}, "priceUsd": 98.3},
                {"machineType": "a2-ultragpu-8g", "spot": True, "priorityScore": 10},
            ],
            "whenUnsatisfiable": "DoNotScaleUp",
        },
    }
    assert gke_compute_class(source)["spec"] == {
        "priorities": [
            {"machineFamily": "a3", "gpu": {"type": "nvidia-h100-80gb", "count": 8}},
            {"machineType": "a2-ultragpu-8g", "spot": True, "priorityScore": 10},
        ],
        "whenUnsatisfiable": "DoNotScaleUp",
        "nodePoolAutoCreation": {"enabled": True},
    }


def test_workload_sources_are_written_back_labelled_with_their_queue_and_without_status(
    loaded: LoadResult,
) -> None:
    job = one(export(loaded), "Job", "train", "vision")
    assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "main"}
    assert "status" not in job
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "trainer"


def test_prometheus_rule_holds_the_alert_rules_in_the_monitoring_namespace(loaded: LoadResult) -> None:
    rule = one(export(loaded), "PrometheusRule", "gpuq-alerts", "monitoring")
    assert rule["spec"]["groups"] == alert_rules()["groups"]


def test_sources_read_from_stdin_fall_back_to_their_workload_form() -> None:
    from io import StringIO

    result = load(["-"], stdin=StringIO(CONFIG))
    assert result.config is not None
    exported = export(result)
    assert "70-workloads.yaml" not in exported.files
    assert [o["kind"] for o in exported.files["gpuq/workloads.yaml"]] == ["Workload"]
