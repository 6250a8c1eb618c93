"""Field checks for the exported kinds that the Kubernetes OpenAPI schemas do not cover.

Kueue, Karpenter, GKE's ComputeClass, the Prometheus operator's PrometheusRule,
the workload projects (JobSet, Kubeflow, KubeRay) and the serving ones (KEDA,
KServe, KubeRay's RayService) publish their APIs as CRDs, not
in the core schemas ``kubernetes-validate`` bundles. Each is described here by a
small :class:`Field` tree written from the project's documented Go types: the keys
it allows, the ones it requires, their types and enum values. :func:`check_object`
returns every problem as ``(field.path, message)``; an empty list means the object
passes. Pod templates inside workload sources are left open (their containers are
checked by Kubernetes when the pods are created), and so is a KServe predictor (a
PodSpec inlined beside KServe's own fields, which are checked).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gpuq.core.quantity import QuantityError, parse_quantity


@dataclass(frozen=True)
class Field:
    """The expected shape of one value.

    ``kind`` is one of object, map, array, string, integer, number, boolean,
    quantity, int-or-string, any. Objects list ``fields`` and ``required`` keys
    and reject other keys unless ``open``; maps check every value against
    ``values``; arrays every item against ``items``.
    """

    kind: str
    fields: Mapping[str, Field] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    items: Field | None = None
    values: Field | None = None
    enum: tuple[str, ...] = ()
    open: bool = False


def obj(fields: Mapping[str, Field], required: tuple[str, ...] = (), open: bool = False) -> Field:
    return Field("object", fields, required, open=open)


def arr(items: Field) -> Field:
    return Field("array", items=items)


def map_of(values: Field) -> Field:
    return Field("map", values=values)


def string(*enum: str) -> Field:
    return Field("string", enum=enum)


STR = string()
INT = Field("integer")
BOOL = Field("boolean")
NUMBER = Field("number")
QUANTITY = Field("quantity")
INT_OR_STR = Field("int-or-string")
ANY = Field("any")
OPEN = obj({}, open=True)
LABELS = map_of(STR)


def _check_scalar(value: Any, spec: Field) -> str | None:
    """The problem with a scalar ``value``, or None."""
    kind = spec.kind
    if kind == "string" and not isinstance(value, str):
        return f"must be a string (got {type(value).__name__})"
    if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        return f"must be an integer (got {type(value).__name__})"
    if kind == "number" and (isinstance(value, bool) or not isinstance(value, int | float)):
        return f"must be a number (got {type(value).__name__})"
    if kind == "boolean" and not isinstance(value, bool):
        return f"must be a boolean (got {type(value).__name__})"
    if kind == "int-or-string" and (isinstance(value, bool) or not isinstance(value, int | str)):
        return f"must be an integer or a string (got {type(value).__name__})"
    if kind == "quantity":
        return _quantity_problem(value)
    if spec.enum and value not in spec.enum:
        return f"must be one of {', '.join(spec.enum)} (got {value!r})"
    return None


def _quantity_problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
        return f"must be a quantity (got {type(value).__name__})"
    try:
        parse_quantity(value)
    except QuantityError as err:
        return str(err)
    return None


Problem = tuple[str, str]
"""``(field path, message)``."""


def check(value: Any, spec: Field, path: str = "") -> list[Problem]:
    """Every problem of ``value`` against ``spec``."""
    where = path or "<object>"
    if spec.kind == "any":
        return []
    if spec.kind == "object":
        if not isinstance(value, dict):
            return [(where, f"must be an object (got {type(value).__name__})")]
        return _check_object(value, spec, path)
    if spec.kind == "map":
        if not isinstance(value, dict):
            return [(where, f"must be a map (got {type(value).__name__})")]
        assert spec.values is not None
        return [p for k, v in value.items() for p in check(v, spec.values, f"{path}[{k}]")]
    if spec.kind == "array":
        if not isinstance(value, list):
            return [(where, f"must be a list (got {type(value).__name__})")]
        assert spec.items is not None
        return [p for i, v in enumerate(value) for p in check(v, spec.items, f"{path}[{i}]")]
    problem = _check_scalar(value, spec)
    return [(where, problem)] if problem else []


def _check_object(value: dict[str, Any], spec: Field, path: str) -> list[Problem]:
    prefix = f"{path}." if path else ""
    problems = [(f"{prefix}{key}", "is required") for key in spec.required if key not in value]
    for key, item in value.items():
        sub = spec.fields.get(key)
        if sub is None:
            if not spec.open:
                problems.append((f"{prefix}{key}", "unknown field"))
            continue
        if item is None and key not in spec.required:
            continue
        problems += check(item, sub, f"{prefix}{key}")
    return problems


# --- shared Kubernetes shapes -----------------------------------------------------------------

METADATA = obj({"name": STR, "namespace": STR, "labels": LABELS, "annotations": LABELS}, ("name",))
OPEN_METADATA = obj({"name": STR, "namespace": STR, "labels": LABELS, "annotations": LABELS}, ("name",), True)
TAINT = obj(
    {"key": STR, "value": STR, "effect": string("NoSchedule", "PreferNoSchedule", "NoExecute")},
    ("key", "effect"),
)
TOLERATION = obj(
    {
        "key": STR,
        "operator": string("Equal", "Exists"),
        "value": STR,
        "effect": string("", "NoSchedule", "PreferNoSchedule", "NoExecute"),
        "tolerationSeconds": INT,
    }
)
LABEL_SELECTOR = obj(
    {
        "matchLabels": LABELS,
        "matchExpressions": arr(
            obj(
                {"key": STR, "operator": string("In", "NotIn", "Exists", "DoesNotExist"), "values": arr(STR)},
                ("key", "operator"),
            )
        ),
    }
)
FAIR_SHARING = obj({"weight": QUANTITY})


def envelope(
    spec_field: Field | None, extra: Mapping[str, Field] | None = None, open_meta: bool = False
) -> Field:
    """A whole object: apiVersion, kind, metadata, and ``spec`` (required when given)."""
    fields: dict[str, Field] = {
        "apiVersion": STR,
        "kind": STR,
        "metadata": OPEN_METADATA if open_meta else METADATA,
    }
    required = ["apiVersion", "kind", "metadata"]
    if spec_field is not None:
        fields["spec"] = spec_field
        required.append("spec")
    fields.update(extra or {})
    return obj(fields, tuple(required))


# --- Kueue (apis/kueue/v1beta1, v1beta2; Cohort and Topology v1alpha1) -------------------------


def _resource_groups() -> Field:
    quota = obj(
        {"name": STR, "nominalQuota": QUANTITY, "borrowingLimit": QUANTITY, "lendingLimit": QUANTITY},
        ("name", "nominalQuota"),
    )
    flavor = obj({"name": STR, "resources": arr(quota)}, ("name", "resources"))
    return arr(obj({"coveredResources": arr(STR), "flavors": arr(flavor)}, ("coveredResources", "flavors")))


def cluster_queue_spec(version: str) -> Field:
    """ClusterQueue spec: v1beta1 names the cohort ``cohort`` and has no fungibility ``preference``."""
    v1beta1 = version == "v1beta1"
    policies = ("MayStopSearch", "TryNextFlavor")
    fungibility: dict[str, Field] = {
        "whenCanBorrow": string(*policies, *(("Borrow",) if v1beta1 else ())),
        "whenCanPreempt": string(*policies, *(("Preempt",) if v1beta1 else ())),
    }
    if not v1beta1:
        fungibility["preference"] = string("BorrowingOverPreemption", "PreemptionOverBorrowing")
    preemption = obj(
        {
            "reclaimWithinCohort": string("Never", "LowerPriority", "Any"),
            "withinClusterQueue": string("Never", "LowerPriority", "LowerOrNewerEqualPriority"),
            "borrowWithinCohort": obj(
                {"policy": string("Never", "LowerPriority"), "maxPriorityThreshold": INT}
            ),
        }
    )
    strategy = obj({"admissionChecks": arr(obj({"name": STR, "onFlavors": arr(STR)}, ("name",)))})
    fields: dict[str, Field] = {
        "cohort" if v1beta1 else "cohortName": STR,
        "resourceGroups": _resource_groups(),
        "queueingStrategy": string("StrictFIFO", "BestEffortFIFO"),
        "namespaceSelector": LABEL_SELECTOR,
        "flavorFungibility": obj(fungibility),
        "preemption": preemption,
        "admissionChecksStrategy": strategy,
        "stopPolicy": string("None", "Hold", "HoldAndDrain"),
        "fairSharing": FAIR_SHARING,
        "admissionScope": obj({"admissionMode": STR}),
        "concurrentAdmissionPolicy": obj(
            {"migration": obj({"mode": STR, "constraints": obj({}, open=True)})}
        ),
    }
    if v1beta1:
        fields["admissionChecks"] = arr(STR)
    return obj(fields)


def cohort_spec(version: str) -> Field:
    parent = "parent" if version == "v1alpha1" else "parentName"
    return obj({parent: STR, "resourceGroups": _resource_groups(), "fairSharing": FAIR_SHARING})


RESOURCE_FLAVOR_SPEC = obj(
    {"nodeLabels": LABELS, "nodeTaints": arr(TAINT), "tolerations": arr(TOLERATION), "topologyName": STR}
)
LOCAL_QUEUE_SPEC = obj(
    {"clusterQueue": STR, "stopPolicy": string("None", "Hold", "HoldAndDrain"), "fairSharing": FAIR_SHARING},
    ("clusterQueue",),
)
TOPOLOGY_SPEC = obj({"levels": arr(obj({"nodeLabel": STR}, ("nodeLabel",)))}, ("levels",))
ADMISSION_CHECK_SPEC = obj(
    {
        "controllerName": STR,
        "parameters": obj({"apiGroup": STR, "kind": STR, "name": STR}, ("apiGroup", "kind", "name")),
        "retryDelayMinutes": INT,
    },
    ("controllerName",),
)
PROVISIONING_REQUEST_CONFIG_SPEC = obj(
    {
        "provisioningClassName": STR,
        "parameters": LABELS,
        "managedResources": arr(STR),
        "retryStrategy": obj({"backoffLimitCount": INT, "backoffBaseSeconds": INT, "backoffMaxSeconds": INT}),
        "podSetMergePolicy": string("IdenticalPodTemplates", "IdenticalWorkloadSchedulingRequirements"),
        "podSetUpdates": ANY,
    },
    ("provisioningClassName",),
)


def _kueue_schemas(version: str) -> dict[tuple[str, str], Field]:
    group = f"kueue.x-k8s.io/{version}"
    alpha = "kueue.x-k8s.io/v1alpha1" if version == "v1beta1" else group
    return {
        (group, "ResourceFlavor"): envelope(RESOURCE_FLAVOR_SPEC),
        (group, "ClusterQueue"): envelope(cluster_queue_spec(version)),
        (alpha, "Cohort"): envelope(cohort_spec(alpha.rpartition("/")[2])),
        (group, "LocalQueue"): envelope(LOCAL_QUEUE_SPEC),
        (alpha, "Topology"): envelope(TOPOLOGY_SPEC),
        (group, "WorkloadPriorityClass"): envelope(None, {"value": INT, "description": STR}),
        (group, "AdmissionCheck"): envelope(ADMISSION_CHECK_SPEC),
        (group, "ProvisioningRequestConfig"): envelope(PROVISIONING_REQUEST_CONFIG_SPEC),
    }


# --- Prometheus operator, Karpenter, GKE --------------------------------------------------------

PROMETHEUS_RULE_SPEC = obj(
    {
        "groups": arr(
            obj(
                {
                    "name": STR,
                    "interval": STR,
                    "limit": INT,
                    "labels": LABELS,
                    "rules": arr(
                        obj(
                            {
                                "alert": STR,
                                "record": STR,
                                "expr": INT_OR_STR,
                                "for": STR,
                                "keep_firing_for": STR,
                                "labels": LABELS,
                                "annotations": LABELS,
                            },
                            ("expr",),
                        )
                    ),
                },
                ("name", "rules"),
            )
        )
    },
    ("groups",),
)
KARPENTER_REQUIREMENT = obj(
    {
        "key": STR,
        "operator": string("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"),
        "values": arr(STR),
        "minValues": INT,
    },
    ("key", "operator"),
)
KARPENTER_NODE_POOL_SPEC = obj(
    {
        "template": obj(
            {
                "metadata": obj({"labels": LABELS, "annotations": LABELS}),
                "spec": obj(
                    {
                        "nodeClassRef": obj(
                            {"group": STR, "kind": STR, "name": STR}, ("group", "kind", "name")
                        ),
                        "requirements": arr(KARPENTER_REQUIREMENT),
                        "taints": arr(TAINT),
                        "startupTaints": arr(TAINT),
                        "expireAfter": STR,
                        "terminationGracePeriod": STR,
                    },
                    ("nodeClassRef", "requirements"),
                ),
            },
            ("spec",),
        ),
        "limits": map_of(QUANTITY),
        "disruption": obj(
            {
                "consolidationPolicy": string("WhenEmpty", "WhenEmptyOrUnderutilized"),
                "consolidateAfter": STR,
                "budgets": arr(
                    obj({"nodes": STR, "schedule": STR, "duration": STR, "reasons": arr(STR)}, ("nodes",))
                ),
            }
        ),
        "weight": INT,
    },
    ("template",),
)
GKE_PRIORITY = obj(
    {
        "machineFamily": STR,
        "machineType": STR,
        "minCores": INT,
        "minMemoryGb": INT,
        "spot": BOOL,
        "gpu": obj({"type": STR, "count": INT, "driverVersion": STR}, ("type", "count")),
        "tpu": OPEN,
        "reservations": OPEN,
        "nodepools": arr(STR),
        "podFamily": STR,
        "location": OPEN,
        "flexStart": OPEN,
        "maxPodsPerNode": INT,
        "storage": OPEN,
        "priorityScore": INT,
    }
)
GKE_COMPUTE_CLASS_SPEC = obj(
    {
        "priorities": arr(GKE_PRIORITY),
        "nodePoolAutoCreation": obj({"enabled": BOOL}),
        "whenUnsatisfiable": string("ScaleUpAnyway", "DoNotScaleUp"),
        "activeMigration": OPEN,
        "autoscalingPolicy": OPEN,
        "priorityDefaults": OPEN,
        "nodePoolConfig": OPEN,
    },
    ("priorities",),
)

# --- workload sources (pod templates stay open) -------------------------------------------------

JOBSET_SPEC = obj(
    {
        "replicatedJobs": arr(
            obj(
                {"name": STR, "replicas": INT, "template": OPEN, "groupName": STR}, ("name", "template"), True
            )
        )
    },
    ("replicatedJobs",),
    open=True,
)
PYTORCH_JOB_SPEC = obj(
    {
        "pytorchReplicaSpecs": map_of(
            obj({"replicas": INT, "template": OPEN, "restartPolicy": STR}, open=True)
        )
    },
    ("pytorchReplicaSpecs",),
    open=True,
)
RAY_CLUSTER_SPEC = obj({"headGroupSpec": OPEN, "workerGroupSpecs": arr(OPEN)}, ("headGroupSpec",), open=True)
RAY_JOB_SPEC = obj(
    {"entrypoint": STR, "rayClusterSpec": RAY_CLUSTER_SPEC, "clusterSelector": LABELS, "suspend": BOOL},
    open=True,
)


# --- serving (KEDA keda.sh/v1alpha1, KServe serving.kserve.io/v1beta1, KubeRay ray.io/v1) ----------

KEDA_TRIGGER = obj(
    {
        "type": STR,
        "name": STR,
        "metadata": map_of(STR),
        "authenticationRef": obj({"name": STR, "kind": STR}, ("name",)),
        "metricType": string("AverageValue", "Value", "Utilization"),
        "useCachedMetrics": BOOL,
    },
    ("type", "metadata"),
)
SCALED_OBJECT_SPEC = obj(
    {
        "scaleTargetRef": obj(
            {"name": STR, "apiVersion": STR, "kind": STR, "envSourceContainerName": STR}, ("name",)
        ),
        "pollingInterval": INT,
        "initialCooldownPeriod": INT,
        "cooldownPeriod": INT,
        "idleReplicaCount": INT,
        "minReplicaCount": INT,
        "maxReplicaCount": INT,
        "advanced": obj(
            {
                "horizontalPodAutoscalerConfig": obj({"name": STR, "behavior": OPEN}),
                "restoreToOriginalReplicaCount": BOOL,
                "scalingModifiers": obj(
                    {
                        "formula": STR,
                        "target": STR,
                        "activationTarget": STR,
                        "metricType": string("AverageValue", "Value"),
                    }
                ),
            }
        ),
        "triggers": arr(KEDA_TRIGGER),
        "fallback": obj(
            {
                "failureThreshold": INT,
                "replicas": INT,
                "behavior": string(
                    "static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower"
                ),
            },
            ("failureThreshold", "replicas"),
        ),
    },
    ("scaleTargetRef", "triggers"),
)
KSERVE_COMPONENT: dict[str, Field] = {
    "minReplicas": INT,
    "maxReplicas": INT,
    "scaleTarget": INT,
    "scaleMetric": string("cpu", "memory", "concurrency", "rps"),
    "scaleMetricType": string("Utilization", "AverageValue"),
    "containerConcurrency": INT,
    "timeout": INT,
    "canaryTrafficPercent": INT,
    "logger": OPEN,
    "batcher": OPEN,
    "labels": LABELS,
    "annotations": LABELS,
    "deploymentStrategy": OPEN,
    "autoScaling": OPEN,
}
KSERVE_MODEL = obj(
    {
        "modelFormat": obj({"name": STR, "version": STR}, ("name",)),
        "runtime": STR,
        "storageUri": STR,
        "protocolVersion": STR,
        "resources": obj({"requests": map_of(QUANTITY), "limits": map_of(QUANTITY)}, open=True),
    },
    ("modelFormat",),
    open=True,
)
INFERENCE_SERVICE_SPEC = obj(
    {
        "predictor": obj({**KSERVE_COMPONENT, "model": KSERVE_MODEL, "containers": arr(OPEN)}, open=True),
        "explainer": OPEN,
        "transformer": OPEN,
    },
    ("predictor",),
)
RAY_SERVICE_SPEC = obj(
    {
        "rayClusterConfig": RAY_CLUSTER_SPEC,
        "serveConfigV2": STR,
        "rayClusterDeletionDelaySeconds": INT,
        "serviceUnhealthySecondThreshold": INT,
        "deploymentUnhealthySecondThreshold": INT,
        "serveService": OPEN,
        "upgradeStrategy": obj(
            {
                "type": string("NewCluster", "None", "NewClusterWithIncrementalUpgrade"),
                "clusterUpgradeOptions": OPEN,
            }
        ),
        "excludeHeadPodFromServeSvc": BOOL,
    },
    ("rayClusterConfig",),
)


def schemas(kueue_version: str = "v1beta1") -> dict[tuple[str, str], Field]:
    """(apiVersion, kind) -> whole-object field tree, for every non-core kind the export writes."""
    return {
        **_kueue_schemas(kueue_version),
        ("monitoring.coreos.com/v1", "PrometheusRule"): envelope(PROMETHEUS_RULE_SPEC),
        ("karpenter.sh/v1", "NodePool"): envelope(KARPENTER_NODE_POOL_SPEC),
        ("cloud.google.com/v1", "ComputeClass"): envelope(GKE_COMPUTE_CLASS_SPEC),
        ("jobset.x-k8s.io/v1alpha2", "JobSet"): envelope(JOBSET_SPEC, open_meta=True),
        ("kubeflow.org/v1", "PyTorchJob"): envelope(PYTORCH_JOB_SPEC, open_meta=True),
        ("ray.io/v1", "RayJob"): envelope(RAY_JOB_SPEC, open_meta=True),
        ("ray.io/v1", "RayCluster"): envelope(RAY_CLUSTER_SPEC, open_meta=True),
        ("keda.sh/v1alpha1", "ScaledObject"): envelope(SCALED_OBJECT_SPEC, open_meta=True),
        ("serving.kserve.io/v1beta1", "InferenceService"): envelope(INFERENCE_SERVICE_SPEC, open_meta=True),
        ("ray.io/v1", "RayService"): envelope(RAY_SERVICE_SPEC, open_meta=True),
    }


def check_object(obj_: Mapping[str, Any], table: Mapping[tuple[str, str], Field]) -> list[Problem] | None:
    """Problems of one object against ``table``; None when the table has no schema for its kind."""
    spec = table.get((str(obj_.get("apiVersion")), str(obj_.get("kind"))))
    if spec is None:
        return None
    return check(dict(obj_), spec)
