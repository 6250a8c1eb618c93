"""Workload sources (Job, JobSet, Kubeflow jobs, RayJob, RayCluster, Pod...) turned into Kueue Workloads.

Each source kind becomes a ``kueue.x-k8s.io/v1beta2`` Workload manifest the
way Kueue's job integrations build one (``pkg/controller/jobs/*``,
``jobframework.ConstructWorkload`` / ``NewWorkload`` / ``ExtractPriority``):

1. The name is ``GetWorkloadNameForOwnerWithGVK``: ``<lowercase kind>-<name>``
   cut to 247 characters, ``-``, then the first 5 hex digits of
   ``sha1(kind \\n group \\n name \\n uid)``.
2. The queue is the ``kueue.x-k8s.io/queue-name`` label, else the deprecated
   annotation of the same key, else ``""``: the loader then applies Kueue's
   LocalQueueDefaulting and ``manageJobsWithoutQueueName``
   (:mod:`gpuq.api.queue_defaulting`); a job still without a queue is converted
   all the same and stays pending.
3. Pod sets follow each integration's ``PodSets()``; checks that Kueue's (or
   the source project's) admission webhooks make become :class:`SourceError`.
4. Priority: the ``kueue.x-k8s.io/priority-class`` label names a
   WorkloadPriorityClass; otherwise a kind-specific priority class, else the
   first pod set template with ``priorityClassName`` names a PriorityClass.
   Names are not resolved here.

gpuq differs from Kueue on purpose in a few places: the ``job-uid`` label is
set only when the source carries ``metadata.uid``; ``spec.active`` and
finalizers are left out; topology requests stay in the pod templates'
annotations; pod groups are refused. An elastic job (``kueue.x-k8s.io/elastic-job: "true"``) becomes
its first workload slice, as ``jobframework.prepareWorkloadSlice`` builds it (the annotation and
``kueue.x-k8s.io/workload-slice-name``), and is admitted like any job; scaling it later (a new slice
replacing the old one without requeue) is not modelled (the loader warns).
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuq.api import kubeflow_sources, workload_gates
from gpuq.api.ray_sources import raycluster_pod_sets, rayjob_pod_sets
from gpuq.api.source_fields import (
    SourceError,
    check_pod_sets,
    count_field,
    int_field,
    make_pod_set,
    mapping_field,
    pod_template,
    queue_name,
)
from gpuq.api.spark_sources import sparkapplication_pod_sets as spark_pod_sets
from gpuq.api.trainjob_sources import SourceContext, trainjob_pod_sets

WORKLOAD_API_VERSION = "kueue.x-k8s.io/v1beta2"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
JOB_MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"
WORKLOAD_SLICE_NAME_ANNOTATION = "kueue.x-k8s.io/workload-slice-name"
TOPOLOGY_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
TOPOLOGY_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
PROVREQ_ANNOTATION_PREFIX = "provreq.kueue.x-k8s.io/"
SOURCE_ANNOTATION = "gpuq.dev/source"
WORKLOAD_PRIORITY_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
POD_PRIORITY_SOURCE = "scheduling.k8s.io/priorityclass"
DEFAULT_POD_SET = "main"
"""Kueue's Workload API accepts at most 8 pod sets."""

_HASH_LENGTH = 5
_MAX_NAME_LENGTH = 253
_JOB_MANAGED_LABELS = (
    "job-name",
    "controller-uid",
    "batch.kubernetes.io/job-name",
    "batch.kubernetes.io/controller-uid",
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


# --- batch/v1 Job and jobset.x-k8s.io JobSet -----------------------------------------------------


def _job_pods_count(job_spec: Mapping[str, Any], field: str) -> int:
    """Kueue's ``podsCount``: parallelism (default 1), capped by completions when set."""
    parallelism = int_field(job_spec, "parallelism", f"{field}.parallelism", 1)
    completions = count_field(job_spec, "completions", f"{field}.completions", None)
    return parallelism if completions is None else min(parallelism, completions)


def _job_min_count(annotations: Mapping[str, Any], count: int) -> int | None:
    """The partial-admission minimum, validated as Kueue's Job webhook does (0 < min < count)."""
    raw = annotations.get(JOB_MIN_PARALLELISM_ANNOTATION)
    if raw is None:
        return None
    field = f"metadata.annotations[{JOB_MIN_PARALLELISM_ANNOTATION}]"
    try:
        value = int(str(raw), 10)
    except ValueError:
        raise SourceError(field, f"expected an integer, got {raw!r}") from None
    if not 0 < value < count:
        raise SourceError(field, f"should be between 1 and {count - 1}, got {value}")
    return value


def _job_pod_sets(doc: Mapping[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """One pod set ``main``; ``minCount`` from ``kueue.x-k8s.io/job-min-parallelism``."""
    count = _job_pods_count(spec, "spec")
    template = pod_template(spec, "template", "spec.template", strip_labels=_JOB_MANAGED_LABELS)
    pod_set = make_pod_set(DEFAULT_POD_SET, count, template, "spec")
    min_count = _job_min_count(doc["metadata"].get("annotations") or {}, count)
    if min_count is not None:
        pod_set["minCount"] = min_count
    return [pod_set]


def _jobset_pod_sets(doc: Mapping[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """One pod set per replicatedJob: replicas (default 1) x the job's pods count."""
    field = "spec.replicatedJobs"
    replicated = spec.get("replicatedJobs")
    if not isinstance(replicated, list):
        raise SourceError(field, "expected a list of replicated jobs")
    pod_sets = []
    for index, item in enumerate(replicated):
        at = f"{field}[{index}]"
        rjob = mapping_field(item, at)
        name = rjob.get("name")
        if not isinstance(name, str) or not name:
            raise SourceError(f"{at}.name", "is required")
        job_spec = mapping_field(
            mapping_field(rjob.get("template"), f"{at}.template").get("spec"), f"{at}.template.spec"
        )
        count = int_field(rjob, "replicas", f"{at}.replicas", 1) * _job_pods_count(
            job_spec, f"{at}.template.spec"
        )
        template = pod_template(job_spec, "template", f"{at}.template.spec.template")
        pod_sets.append(make_pod_set(name, count, template, f"{at}.name"))
    return check_pod_sets(pod_sets, field)


# --- kubeflow.org jobs (gpuq.api.kubeflow_sources) ----------------------------------------------


def _kubeflow(kind_name: str, group: str = "kubeflow.org") -> _Kind:
    """The :class:`_Kind` of one Kubeflow job kind: the shared builder with that kind's row."""
    row = kubeflow_sources.KINDS[kind_name]
    if row is kubeflow_sources.MPIJOB:
        return _Kind(group, lambda doc, spec: kubeflow_sources.mpijob_pod_sets(spec), _mpi_priority_class)
    return _Kind(
        group,
        lambda doc, spec: kubeflow_sources.kubeflow_pod_sets(row, spec),
        lambda spec: kubeflow_sources.kubeflow_priority_class(row, spec),
    )


def _mpi_priority_class(spec: Mapping[str, Any]) -> str:
    return kubeflow_sources.kubeflow_priority_class(kubeflow_sources.MPIJOB, spec)


# --- v1 Pod ----------------------------------------------------------------------------------------


def _pod_pod_sets(doc: Mapping[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """A plain Pod is one pod set ``main`` of count 1; pod groups are refused."""
    if POD_GROUP_LABEL in (doc["metadata"].get("labels") or {}):
        raise SourceError(
            f"metadata.labels[{POD_GROUP_LABEL}]", "pod groups are not supported; use a Job or JobSet"
        )
    return [make_pod_set(DEFAULT_POD_SET, 1, {"spec": copy.deepcopy(spec)}, "spec")]


# --- kinds, names and the Workload -----------------------------------------------------------------

PodSetBuilder = Callable[[Mapping[str, Any], dict[str, Any]], list[dict[str, Any]]]
ResolvingBuilder = Callable[[Mapping[str, Any], dict[str, Any], SourceContext], list[dict[str, Any]]]


@dataclass(frozen=True)
class _Kind:
    """``resolving``: instead of ``pod_sets``, a builder that reads other objects (a TrainJob's runtime)."""

    group: str
    pod_sets: PodSetBuilder | None
    priority_class: Callable[[Mapping[str, Any]], str] | None = None
    resolving: ResolvingBuilder | None = None


_KINDS: dict[tuple[str, str], _Kind] = {
    ("batch/v1", "Job"): _Kind("batch", _job_pod_sets),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): _Kind("jobset.x-k8s.io", _jobset_pod_sets),
    ("kubeflow.org/v1", "PyTorchJob"): _kubeflow("PyTorchJob"),
    ("kubeflow.org/v1", "TFJob"): _kubeflow("TFJob"),
    ("kubeflow.org/v1", "XGBoostJob"): _kubeflow("XGBoostJob"),
    ("kubeflow.org/v1", "PaddleJob"): _kubeflow("PaddleJob"),
    ("kubeflow.org/v1", "JAXJob"): _kubeflow("JAXJob"),
    ("kubeflow.org/v2beta1", "MPIJob"): _kubeflow("MPIJob"),
    ("sparkoperator.k8s.io/v1beta2", "SparkApplication"): _Kind("sparkoperator.k8s.io", spark_pod_sets),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): _Kind(
        "trainer.kubeflow.org", None, None, trainjob_pod_sets
    ),
    ("ray.io/v1", "RayJob"): _Kind("ray.io", rayjob_pod_sets),
    ("ray.io/v1", "RayCluster"): _Kind("ray.io", raycluster_pod_sets),
    ("v1", "Pod"): _Kind("", _pod_pod_sets),
}


def is_source(api_version: str, kind: str) -> bool:
    """True for the workload-source kinds :func:`to_workload` converts."""
    return (api_version, kind) in _KINDS


def workload_name(owner_name: str, owner_uid: str, kind: str, group: str) -> str:
    """Kueue's ``GetWorkloadNameForOwnerWithGVK`` (253-character names, no generation)."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{owner_name}\n{owner_uid}".encode()).hexdigest()
    prefix = f"{kind.lower()}-{owner_name}"[: _MAX_NAME_LENGTH - 1 - _HASH_LENGTH]
    return f"{prefix}-{digest[:_HASH_LENGTH]}"


def _priority(
    metadata: Mapping[str, Any], custom: str | None, pod_sets: list[dict[str, Any]]
) -> tuple[str, str]:
    """Kueue's ``ExtractPriority`` without the lookup: ``(priorityClassName, priorityClassSource)``."""
    workload_class = (metadata.get("labels") or {}).get(PRIORITY_CLASS_LABEL)
    if workload_class:
        return str(workload_class), WORKLOAD_PRIORITY_SOURCE
    name = custom if custom is not None else _first_pod_priority_class(pod_sets)
    return (name, POD_PRIORITY_SOURCE) if name else ("", "")


def _first_pod_priority_class(pod_sets: list[dict[str, Any]]) -> str:
    """Kueue's ``extractPriorityFromPodSets``: the first template's ``priorityClassName``."""
    for pod_set in pod_sets:
        name = pod_set["template"]["spec"].get("priorityClassName")
        if name:
            return str(name)
    return ""


def _max_exec_seconds(labels: Mapping[str, Any]) -> int | None:
    """``kueue.x-k8s.io/max-exec-time-seconds`` when it is a positive int32; Kueue ignores it otherwise."""
    raw = labels.get(MAX_EXEC_TIME_LABEL)
    try:
        value = int(str(raw), 10)
    except ValueError:
        return None
    return value if 0 < value < 2**31 else None


def _metadata(doc: Mapping[str, Any]) -> dict[str, Any]:
    metadata = mapping_field(doc.get("metadata"), "metadata")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise SourceError("metadata.name", "is required")
    for key in ("labels", "annotations"):
        mapping_field(metadata.get(key), f"metadata.{key}", required=False)
    return metadata


GPUQ_PREFIX = "gpuq.dev/"  # gpuq's own labels and annotations (expected duration, user) follow the job


def _workload_metadata(
    metadata: Mapping[str, Any], kind: str, name: str, label_keys: Iterable[str]
) -> dict[str, Any]:
    labels_in = metadata.get("labels") or {}
    labels = {key: labels_in[key] for key in label_keys if key in labels_in}
    labels.update({key: value for key, value in labels_in.items() if key.startswith(GPUQ_PREFIX)})
    uid = str(metadata.get("uid") or "")
    if uid and len(uid) <= 63 and _LABEL_VALUE.match(uid):
        labels[JOB_UID_LABEL] = uid
    annotations = {
        k: v
        for k, v in (metadata.get("annotations") or {}).items()
        if k.startswith((PROVREQ_ANNOTATION_PREFIX, GPUQ_PREFIX))
    }
    annotations[SOURCE_ANNOTATION] = f"{kind}/{metadata['name']}"
    gated = (metadata.get("annotations") or {}).get(workload_gates.ADMISSION_GATED_BY)
    if gated:  # jobframework's PropagateAdmissionGatedByAnnotation
        for problem in workload_gates.admission_gate_problems(str(gated)):
            raise SourceError(f"metadata.annotations[{workload_gates.ADMISSION_GATED_BY}]", problem)
        annotations[workload_gates.ADMISSION_GATED_BY] = str(gated)
    out: dict[str, Any] = {
        "name": name,
        "namespace": metadata.get("namespace") or "default",
        "labels": labels,
    }
    if metadata.get("creationTimestamp") is not None:
        out["creationTimestamp"] = metadata["creationTimestamp"]
    out["annotations"] = annotations
    return out


def to_workload(
    doc: dict[str, Any], *, label_keys_to_copy: Iterable[str] = (), context: SourceContext | None = None
) -> dict[str, Any]:
    """Build the Workload manifest Kueue would create for the source ``doc``.

    ``doc`` is not modified; pod templates are deep copies. ``label_keys_to_copy``
    plays Kueue's ``integrations.labelKeysToCopy``; ``context`` holds the objects
    a source may refer to (a TrainJob's runtime). Raises :class:`SourceError`
    naming the offending field of ``doc`` (:class:`RuntimeMissing` when a
    referenced object is not in ``context``).
    """
    kind_name = doc.get("kind")
    kind = _KINDS.get((str(doc.get("apiVersion")), str(kind_name)))
    if kind is None:
        raise SourceError("kind", f"{doc.get('apiVersion')}/{kind_name} is not a workload source")
    metadata = _metadata(doc)
    spec = mapping_field(doc.get("spec"), "spec")
    with_metadata = {**doc, "metadata": metadata}
    if kind.resolving is not None:
        pod_sets = kind.resolving(with_metadata, spec, context or SourceContext())
    else:
        assert kind.pod_sets is not None
        pod_sets = kind.pod_sets(with_metadata, spec)
    elastic = is_elastic(metadata)
    if elastic:
        _check_elastic(str(kind_name), pod_sets)
    custom = kind.priority_class(spec) if kind.priority_class else None
    priority_name, priority_source = _priority(metadata, custom, pod_sets)
    name = workload_name(metadata["name"], str(metadata.get("uid") or ""), str(kind_name), kind.group)
    workload_spec: dict[str, Any] = {"queueName": queue_name(metadata), "podSets": pod_sets}
    workload_spec["priorityClassName"] = priority_name
    workload_spec["priorityClassSource"] = priority_source
    max_exec = _max_exec_seconds(metadata.get("labels") or {})
    if max_exec is not None:
        workload_spec["maximumExecutionTimeSeconds"] = max_exec
    workload_metadata = _workload_metadata(metadata, str(kind_name), name, label_keys_to_copy)
    if elastic:  # jobframework prepareWorkloadSlice: the first slice is its own origin
        workload_metadata["annotations"][ELASTIC_JOB_ANNOTATION] = "true"
        workload_metadata["annotations"][WORKLOAD_SLICE_NAME_ANNOTATION] = name
    return {
        "apiVersion": WORKLOAD_API_VERSION,
        "kind": "Workload",
        "metadata": workload_metadata,
        "spec": workload_spec,
    }


def is_elastic(metadata: Mapping[str, Any]) -> bool:
    """Kueue's ``workloadslicing.Enabled``: the annotation is exactly ``"true"`` (the
    ElasticJobsViaWorkloadSlices gate is beta and on by default since v0.18, as gpuq assumes)."""
    return (metadata.get("annotations") or {}).get(ELASTIC_JOB_ANNOTATION) == "true"


def _check_elastic(kind: str, pod_sets: list[dict[str, Any]]) -> None:
    """Kueue's Job webhook (``pkg/controller/jobs/job/job_webhook.go``): an elastic Job cannot use
    partial admission, nor a required or preferred topology."""
    if kind != "Job":
        return
    if "minCount" in pod_sets[0]:
        field = f"metadata.annotations[{JOB_MIN_PARALLELISM_ANNOTATION}]"
        raise SourceError(field, "partial admission and elastic job cannot be used together")
    annotations = (pod_sets[0]["template"].get("metadata") or {}).get("annotations") or {}
    for mode, key in (("required", TOPOLOGY_REQUIRED), ("preferred", TOPOLOGY_PREFERRED)):
        if key in annotations:
            field = f"spec.template.metadata.annotations[{key}]"
            raise SourceError(field, f"{mode} topology is not supported with elastic jobs")
