"""Field checks for GKE's ComputeClass, the one exported kind without a published CRD schema.

Every other custom kind the export writes is checked against its project's real
CRD (:mod:`gpuq.k8s.crd_schemas`). GKE installs ``computeclasses.cloud.google.com``
in its clusters but publishes no schema; this small :class:`Field` tree is written
from GKE's ComputeClass reference
(https://cloud.google.com/kubernetes-engine/docs/reference/crds/computeclass): the
keys it allows, the ones it requires, their types and enum values. Sub-objects GKE
documents field by field but gpuq only passes through (``nodePoolConfig``,
``priorityDefaults``, ``storage``, ``placement``...) are left open.
:func:`check_object` returns every problem as ``(field.path, message)``; an empty
list means the object passes.
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


# --- GKE ComputeClass (cloud.google.com/v1) ---------------------------------------------------

GKE_PRIORITY = obj(
    {
        "machineFamily": STR,
        "machineType": STR,
        "minCores": INT,
        "minMemoryGb": INT,
        "minCpuPlatform": STR,
        "spot": BOOL,
        "gpu": obj({"type": STR, "count": INT, "driverVersion": STR}, ("type", "count")),
        "tpu": OPEN,
        "reservations": OPEN,
        "nodepools": arr(STR),
        "podFamily": STR,
        "location": OPEN,
        "flexStart": OPEN,
        "maxPodsPerNode": INT,
        "maxRunDurationSeconds": INT,
        "placement": OPEN,
        "storage": OPEN,
        "nodeSystemConfig": OPEN,
        "priorityScore": INT,
    }
)
GKE_COMPUTE_CLASS_SPEC = obj(
    {
        "description": STR,
        "priorities": arr(GKE_PRIORITY),
        "nodePoolAutoCreation": obj({"enabled": BOOL}),
        "whenUnsatisfiable": string("ScaleUpAnyway", "DoNotScaleUp"),
        "activeMigration": obj({"optimizeRulePriority": BOOL}),
        "autoscalingPolicy": OPEN,
        "priorityDefaults": OPEN,
        "nodePoolConfig": OPEN,
    },
    ("priorities",),
)
REPLICA_SPEC = obj({"replicas": INT, "template": OPEN, "restartPolicy": STR}, open=True)


def kubeflow_job_spec(replica_field: str) -> Field:
    """A kubeflow.org job: a map of replica type -> replica spec under ``replica_field`` (the rest open)."""
    return obj({replica_field: map_of(REPLICA_SPEC), "runPolicy": OPEN}, (replica_field,), open=True)


MPI_JOB_SPEC = obj(
    {
        "mpiReplicaSpecs": map_of(REPLICA_SPEC),
        "slotsPerWorker": INT,
        "runLauncherAsWorker": BOOL,
        "runPolicy": OPEN,
        "sshAuthMountPath": STR,
        "mpiImplementation": string("OpenMPI", "Intel", "MPICH"),
        "launcherCreationPolicy": string("AtStartup", "WaitForWorkersReady"),
    },
    ("mpiReplicaSpecs",),
    open=True,
)
SPARK_APPLICATION_SPEC = obj(
    {
        "type": string("Java", "Python", "Scala", "R"),
        "mode": string("cluster", "client"),
        "sparkVersion": STR,
        "driver": OPEN,
        "executor": OPEN,
        "dynamicAllocation": obj({"enabled": BOOL}, open=True),
    },
    ("type", "sparkVersion"),
    open=True,
)
TRAIN_JOB_SPEC = obj(
    {
        "runtimeRef": obj({"name": STR, "apiGroup": STR, "kind": STR}, ("name",)),
        "trainer": obj({"numNodes": INT, "resourcesPerNode": OPEN}, open=True),
        "initializer": OPEN,
        "runtimePatches": arr(OPEN),
        "suspend": BOOL,
    },
    ("runtimeRef",),
    open=True,
)
POD_BASED_SPECS: dict[tuple[str, str], Field] = {
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): obj(
        {"replicas": INT, "leaderWorkerTemplate": obj({"size": INT}, ("workerTemplate",), open=True)},
        ("leaderWorkerTemplate",),
        open=True,
    ),
    ("workload.codeflare.dev/v1beta2", "AppWrapper"): obj(
        {"components": arr(obj({"podSets": arr(OPEN), "template": OPEN}, ("template",), True))},
        ("components",),
        open=True,
    ),
    ("argoproj.io/v1alpha1", "Workflow"): obj({"entrypoint": STR, "templates": arr(OPEN)}, open=True),
    **{("tekton.dev/v1", kind): OPEN for kind in ("Task", "Pipeline", "TaskRun", "PipelineRun")},
}
"""The pod-based sources of :mod:`gpuq.api.sources_derived` as the export writes them back."""


GKE_SPEC_KEYS = tuple(GKE_COMPUTE_CLASS_SPEC.fields)


def schemas() -> dict[tuple[str, str], Field]:
    """(apiVersion, kind) -> whole-object field tree, for the exported kinds without a bundled CRD
    schema: GKE's ComputeClass (GKE publishes none) and the workload sources whose projects' CRDs
    are not bundled (checked from each project's documented API: fields, types, required keys)."""
    return {
        ("cloud.google.com/v1", "ComputeClass"): envelope(GKE_COMPUTE_CLASS_SPEC),
        ("kubeflow.org/v1", "TFJob"): envelope(kubeflow_job_spec("tfReplicaSpecs"), open_meta=True),
        ("kubeflow.org/v1", "XGBoostJob"): envelope(kubeflow_job_spec("xgbReplicaSpecs"), open_meta=True),
        ("kubeflow.org/v1", "PaddleJob"): envelope(kubeflow_job_spec("paddleReplicaSpecs"), open_meta=True),
        ("kubeflow.org/v1", "JAXJob"): envelope(kubeflow_job_spec("jaxReplicaSpecs"), open_meta=True),
        ("kubeflow.org/v2beta1", "MPIJob"): envelope(MPI_JOB_SPEC, open_meta=True),
        ("sparkoperator.k8s.io/v1beta2", "SparkApplication"): envelope(
            SPARK_APPLICATION_SPEC, open_meta=True
        ),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob"): envelope(TRAIN_JOB_SPEC, open_meta=True),
        **{key: envelope(spec, open_meta=True) for key, spec in POD_BASED_SPECS.items()},
    }


def check_object(obj_: Mapping[str, Any], table: Mapping[tuple[str, str], Field]) -> list[Problem] | None:
    """Problems of one object against ``table``; None when the table has no schema for its kind."""
    spec = table.get((str(obj_.get("apiVersion")), str(obj_.get("kind"))))
    if spec is None:
        return None
    return check(dict(obj_), spec)
