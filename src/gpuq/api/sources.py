"""Workload sources (Job, JobSet, PyTorchJob, RayJob, RayCluster, Pod) turned into Kueue Workloads.

Each source kind becomes a ``kueue.x-k8s.io/v1beta2`` Workload manifest the
way Kueue's job integrations build one (``pkg/controller/jobs/*``,
``jobframework.ConstructWorkload`` / ``NewWorkload`` / ``ExtractPriority``):

1. The name is ``GetWorkloadNameForOwnerWithGVK``: ``<lowercase kind>-<name>``
   cut to 247 characters, ``-``, then the first 5 hex digits of
   ``sha1(kind \\n group \\n name \\n uid)``.
2. The queue is the ``kueue.x-k8s.io/queue-name`` label, else the deprecated
   annotation of the same key, else ``""`` (Kueue leaves such a job alone
   unless ``manageJobsWithoutQueueName``; gpuq still converts it).
3. Pod sets follow each integration's ``PodSets()``; checks that Kueue's (or
   the source project's) admission webhooks make become :class:`SourceError`.
4. Priority: the ``kueue.x-k8s.io/priority-class`` label names a
   WorkloadPriorityClass; otherwise a kind-specific priority class, else the
   first pod set template with ``priorityClassName`` names a PriorityClass.
   Names are not resolved here.

gpuq differs from Kueue on purpose in a few places: the ``job-uid`` label is
set only when the source carries ``metadata.uid``; ``spec.active`` and
finalizers are left out; topology requests stay in the pod templates'
annotations; elastic jobs (workload slicing) and pod groups are refused.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuq.api.quantity import QuantityError, parse_quantity

WORKLOAD_API_VERSION = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
JOB_MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
PROVREQ_ANNOTATION_PREFIX = "provreq.kueue.x-k8s.io/"
SOURCE_ANNOTATION = "gpuq.dev/source"
WORKLOAD_PRIORITY_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
POD_PRIORITY_SOURCE = "scheduling.k8s.io/priorityclass"
DEFAULT_POD_SET = "main"
MAX_POD_SETS = 8
"""Kueue's Workload API accepts at most 8 pod sets."""

_HASH_LENGTH = 5
_MAX_NAME_LENGTH = 253
_JOB_MANAGED_LABELS = (
    "job-name",
    "controller-uid",
    "batch.kubernetes.io/job-name",
    "batch.kubernetes.io/controller-uid",
)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class SourceError(ValueError):
    """A source manifest that cannot become a Workload; ``field`` is a path in the source document."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# --- reading fields ------------------------------------------------------------------------------


def _mapping(value: object, field: str, *, required: bool = True) -> dict[str, Any]:
    """Return ``value`` as a mapping; ``None`` becomes ``{}`` unless ``required``."""
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        what = "missing" if value is None else f"a {type(value).__name__}"
        raise SourceError(field, f"expected a mapping, got {what}")
    return value


def _count(parent: Mapping[str, Any], key: str, field: str, default: int | None) -> int | None:
    """Return the non-negative integer at ``parent[key]``, or ``default`` when it is absent."""
    value = parent.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise SourceError(field, f"expected a non-negative integer, got {value!r}")
    if value < 0:
        raise SourceError(field, f"must not be negative, got {value}")
    return value


def _int(parent: Mapping[str, Any], key: str, field: str, default: int) -> int:
    """:func:`_count` with a default, so never ``None``."""
    value = _count(parent, key, field, default)
    assert value is not None
    return value


def _template(
    parent: Mapping[str, Any], key: str, field: str, *, strip_labels: Iterable[str] = ()
) -> dict[str, Any]:
    """Copy the pod template at ``parent[key]`` as ``{"metadata"?, "spec"}``.

    Only the template's labels and annotations are kept from its metadata,
    minus ``strip_labels``; ``metadata`` is omitted when nothing is left.
    """
    template = _mapping(parent.get(key), field)
    spec = _mapping(template.get("spec"), f"{field}.spec")
    metadata = _mapping(template.get("metadata"), f"{field}.metadata", required=False)
    kept: dict[str, Any] = {}
    stripped = frozenset(strip_labels)
    labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k not in stripped}
    if labels:
        kept["labels"] = labels
    if metadata.get("annotations"):
        kept["annotations"] = dict(metadata["annotations"])
    result: dict[str, Any] = {"metadata": copy.deepcopy(kept)} if kept else {}
    result["spec"] = copy.deepcopy(spec)
    return result


def _pod_set(name: str, count: int, template: dict[str, Any], field: str) -> dict[str, Any]:
    if not _DNS_LABEL.match(name) or len(name) > 63:
        raise SourceError(field, f"pod set name {name!r} must be a DNS label (lowercase, digits, '-')")
    return {"name": name, "count": count, "template": template}


def _check_pod_sets(pod_sets: list[dict[str, Any]], field: str) -> list[dict[str, Any]]:
    """Enforce the Workload API's limits: 1 to 8 pod sets with unique names."""
    if not pod_sets:
        raise SourceError(field, "needs at least one entry")
    if len(pod_sets) > MAX_POD_SETS:
        raise SourceError(
            field, f"gives {len(pod_sets)} pod sets; a Kueue Workload allows at most {MAX_POD_SETS}"
        )
    seen: set[str] = set()
    for pod_set in pod_sets:
        if pod_set["name"] in seen:
            raise SourceError(field, f"pod set name {pod_set['name']!r} is used twice")
        seen.add(pod_set["name"])
    return pod_sets


# --- batch/v1 Job and jobset.x-k8s.io JobSet -----------------------------------------------------


def _job_pods_count(job_spec: Mapping[str, Any], field: str) -> int:
    """Kueue's ``podsCount``: parallelism (default 1), capped by completions when set."""
    parallelism = _int(job_spec, "parallelism", f"{field}.parallelism", 1)
    completions = _count(job_spec, "completions", f"{field}.completions", None)
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
    template = _template(spec, "template", "spec.template", strip_labels=_JOB_MANAGED_LABELS)
    pod_set = _pod_set(DEFAULT_POD_SET, count, template, "spec")
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
        rjob = _mapping(item, at)
        name = rjob.get("name")
        if not isinstance(name, str) or not name:
            raise SourceError(f"{at}.name", "is required")
        job_spec = _mapping(
            _mapping(rjob.get("template"), f"{at}.template").get("spec"), f"{at}.template.spec"
        )
        count = _int(rjob, "replicas", f"{at}.replicas", 1) * _job_pods_count(job_spec, f"{at}.template.spec")
        template = _template(job_spec, "template", f"{at}.template.spec.template")
        pod_sets.append(_pod_set(name, count, template, f"{at}.name"))
    return _check_pod_sets(pod_sets, field)


# --- kubeflow.org PyTorchJob ---------------------------------------------------------------------

_PYTORCH_REPLICA_TYPES = ("Master", "Worker")


def _pytorch_pod_sets(doc: Mapping[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Pod sets ``master`` then ``worker`` (those present), count = replicas (default 1).

    Kueue drops other replica types silently; gpuq refuses them so no pods
    run unaccounted for.
    """
    field = "spec.pytorchReplicaSpecs"
    replica_specs = _mapping(spec.get("pytorchReplicaSpecs"), field)
    for replica_type in replica_specs:
        if replica_type not in _PYTORCH_REPLICA_TYPES:
            raise SourceError(f"{field}[{replica_type}]", "unknown replica type; expected Master or Worker")
    pod_sets = []
    for replica_type in _PYTORCH_REPLICA_TYPES:
        if replica_specs.get(replica_type) is None:
            continue
        at = f"{field}[{replica_type}]"
        replica = _mapping(replica_specs[replica_type], at)
        count = _int(replica, "replicas", f"{at}.replicas", 1)
        pod_sets.append(
            _pod_set(replica_type.lower(), count, _template(replica, "template", f"{at}.template"), at)
        )
    return _check_pod_sets(pod_sets, field)


def _pytorch_priority_class(spec: Mapping[str, Any]) -> str:
    """``spec.runPolicy.schedulingPolicy.priorityClass``, else the first replica type's template."""
    policy = ((spec.get("runPolicy") or {}).get("schedulingPolicy")) or {}
    if policy.get("priorityClass"):
        return str(policy["priorityClass"])
    replica_specs = spec.get("pytorchReplicaSpecs") or {}
    for replica_type in _PYTORCH_REPLICA_TYPES:
        pod_spec = (((replica_specs.get(replica_type) or {}).get("template")) or {}).get("spec") or {}
        if pod_spec.get("priorityClassName"):
            return str(pod_spec["priorityClassName"])
    return ""


# --- v1 Pod ----------------------------------------------------------------------------------------


def _pod_pod_sets(doc: Mapping[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """A plain Pod is one pod set ``main`` of count 1; pod groups are refused."""
    if POD_GROUP_LABEL in (doc["metadata"].get("labels") or {}):
        raise SourceError(
            f"metadata.labels[{POD_GROUP_LABEL}]", "pod groups are not supported; use a Job or JobSet"
        )
    return [_pod_set(DEFAULT_POD_SET, 1, {"spec": copy.deepcopy(spec)}, "spec")]


# --- ray.io RayJob and RayCluster ----------------------------------------------------------------

_HEAD = "head"
_SUBMITTER = "submitter"
_SUBMITTER_CONTAINER = "ray-job-submitter"
_SUBMISSION_MODES = ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode")
_RAY_FT_ANNOTATION = "ray.io/ft-enabled"
_REDIS_CLEANUP_REQUESTS = (("cpu", "200m"), ("memory", "256Mi"))
"""KubeRay's hard-coded Redis cleanup Job requests, folded into the head pod set by Kueue."""


def _submitter_resources() -> dict[str, Any]:
    """KubeRay's default submitter container resources (``GetDefaultSubmitterContainer``)."""
    return {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}


def _autoscaler_container(cluster: Mapping[str, Any]) -> dict[str, Any]:
    """The autoscaler sidecar KubeRay adds to the head pod (default 500m / 512Mi)."""
    options = cluster.get("autoscalerOptions") or {}
    default = {"cpu": "500m", "memory": "512Mi"}
    resources = options.get("resources") or {"requests": dict(default), "limits": dict(default)}
    return {"name": "autoscaler", "resources": copy.deepcopy(resources)}


def _head_containers(head: dict[str, Any], field: str, why: str) -> list[dict[str, Any]]:
    containers = head["template"]["spec"].get("containers")
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
        raise SourceError(
            f"{field}.headGroupSpec.template.spec.containers", f"{why} needs the Ray container first"
        )
    return containers


def _add_redis_cleanup(head: dict[str, Any], field: str) -> None:
    """Kueue's ``accountForRedisCleanupInHeadPodSet``: raise the Ray container's requests to the cleanup's."""
    ray = _head_containers(head, field, "GCS fault tolerance")[0]
    resources = ray["resources"] = dict(ray.get("resources") or {})
    requests = resources["requests"] = dict(resources.get("requests") or {})
    for resource, floor in _REDIS_CLEANUP_REQUESTS:
        current = requests.get(resource)
        try:
            below = current is None or parse_quantity(current) < parse_quantity(floor)
        except QuantityError as err:
            raise SourceError(
                f"{field}.headGroupSpec.template.spec.containers[0].resources.requests", str(err)
            ) from None
        if below:
            requests[resource] = floor


def _ray_workers(cluster: Mapping[str, Any], field: str) -> list[dict[str, Any]]:
    """One pod set per worker group, named by the lowercased groupName; replicas (default 1) x numOfHosts."""
    groups = cluster.get("workerGroupSpecs") or []
    if not isinstance(groups, list):
        raise SourceError(f"{field}.workerGroupSpecs", "expected a list of worker groups")
    pod_sets = []
    for index, item in enumerate(groups):
        at = f"{field}.workerGroupSpecs[{index}]"
        group = _mapping(item, at)
        name = group.get("groupName")
        if not isinstance(name, str) or not name:
            raise SourceError(f"{at}.groupName", "is required")
        if name == _HEAD:
            raise SourceError(f"{at}.groupName", '"head" is reserved for the head group')
        count = _int(group, "replicas", f"{at}.replicas", 1)
        hosts = _int(group, "numOfHosts", f"{at}.numOfHosts", 1)
        template = _template(group, "template", f"{at}.template")
        pod_sets.append(
            _pod_set(name.lower(), count * hosts if hosts > 1 else count, template, f"{at}.groupName")
        )
    return pod_sets


def _ray_cluster_pod_sets(
    cluster: Mapping[str, Any], field: str, doc: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Kueue's ``raycluster.BuildPodSets``: ``head`` (count 1) then the worker groups.

    1. The head template, plus the Redis cleanup requests under GCS fault tolerance.
    2. With in-tree autoscaling, the autoscaler sidecar; Kueue's webhook refuses
       that for a managed (queue-named) job that is not elastic, and gpuq has
       no elastic jobs, so only unmanaged clusters may autoscale.
    3. The worker groups in order.
    """
    metadata = doc["metadata"]
    head_group = _mapping(cluster.get("headGroupSpec"), f"{field}.headGroupSpec")
    head = _pod_set(_HEAD, 1, _template(head_group, "template", f"{field}.headGroupSpec.template"), field)
    ft_flag = str((metadata.get("annotations") or {}).get(_RAY_FT_ANNOTATION, "")).lower() == "true"
    if ft_flag or cluster.get("gcsFaultToleranceOptions") is not None:
        _add_redis_cleanup(head, field)
    if cluster.get("enableInTreeAutoscaling") is True:
        if queue_name(metadata):
            raise SourceError(
                f"{field}.enableInTreeAutoscaling", "a Kueue-managed Ray cluster must not autoscale"
            )
        head["template"]["spec"].setdefault("containers", []).append(_autoscaler_container(cluster))
    return [head, *_ray_workers(cluster, field)]


def _submitter_pod_set(spec: Mapping[str, Any], head: dict[str, Any]) -> dict[str, Any]:
    """The K8sJobMode submitter: ``spec.submitterPodTemplate`` or KubeRay's default with the head's image."""
    if spec.get("submitterPodTemplate") is not None:
        return _pod_set(
            _SUBMITTER, 1, _template(spec, "submitterPodTemplate", "spec.submitterPodTemplate"), "spec"
        )
    image = _head_containers(head, "spec.rayClusterSpec", "the default submitter")[0].get("image") or ""
    container = {"name": _SUBMITTER_CONTAINER, "image": image, "resources": _submitter_resources()}
    return _pod_set(_SUBMITTER, 1, {"spec": {"containers": [container], "restartPolicy": "Never"}}, "spec")


def _rayjob_pod_sets(doc: Mapping[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The cluster's pod sets, then ``submitter`` in K8sJobMode (the default); SidecarMode adds to the head.

    A RayJob with ``clusterSelector`` runs on an existing cluster: Kueue
    skips it (no Workload) or refuses it, so gpuq refuses it too.
    """
    if spec.get("clusterSelector"):
        raise SourceError("spec.clusterSelector", "a RayJob on an existing cluster has no Kueue Workload")
    mode = spec.get("submissionMode") or "K8sJobMode"
    if mode not in _SUBMISSION_MODES:
        raise SourceError(
            "spec.submissionMode", f"expected one of {', '.join(_SUBMISSION_MODES)}, got {mode!r}"
        )
    if queue_name(doc["metadata"]) and spec.get("shutdownAfterJobFinishes") is not True:
        raise SourceError(
            "spec.shutdownAfterJobFinishes", "a Kueue-managed RayJob must delete its cluster when done"
        )
    cluster = _mapping(spec.get("rayClusterSpec"), "spec.rayClusterSpec")
    pod_sets = _ray_cluster_pod_sets(cluster, "spec.rayClusterSpec", doc)
    if mode == "K8sJobMode":
        pod_sets.append(_submitter_pod_set(spec, pod_sets[0]))
    elif mode == "SidecarMode":
        sidecar = {"name": _SUBMITTER_CONTAINER, "resources": _submitter_resources()}
        pod_sets[0]["template"]["spec"].setdefault("containers", []).append(sidecar)
    return _check_pod_sets(pod_sets, "spec.rayClusterSpec.workerGroupSpecs")


def _raycluster_pod_sets(doc: Mapping[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """A RayCluster's pod sets are its head and worker groups."""
    return _check_pod_sets(_ray_cluster_pod_sets(spec, "spec", doc), "spec.workerGroupSpecs")


# --- kinds, names and the Workload -----------------------------------------------------------------

PodSetBuilder = Callable[[Mapping[str, Any], dict[str, Any]], list[dict[str, Any]]]


@dataclass(frozen=True)
class _Kind:
    group: str
    pod_sets: PodSetBuilder
    priority_class: Callable[[Mapping[str, Any]], str] | None = None


_KINDS: dict[tuple[str, str], _Kind] = {
    ("batch/v1", "Job"): _Kind("batch", _job_pod_sets),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): _Kind("jobset.x-k8s.io", _jobset_pod_sets),
    ("kubeflow.org/v1", "PyTorchJob"): _Kind("kubeflow.org", _pytorch_pod_sets, _pytorch_priority_class),
    ("ray.io/v1", "RayJob"): _Kind("ray.io", _rayjob_pod_sets),
    ("ray.io/v1", "RayCluster"): _Kind("ray.io", _raycluster_pod_sets),
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


def queue_name(metadata: Mapping[str, Any]) -> str:
    """Kueue's ``QueueNameForObject``: the queue-name label, else the deprecated annotation."""
    label = (metadata.get("labels") or {}).get(QUEUE_LABEL)
    if label:
        return str(label)
    return str((metadata.get("annotations") or {}).get(QUEUE_LABEL) or "")


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
    metadata = _mapping(doc.get("metadata"), "metadata")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise SourceError("metadata.name", "is required")
    for key in ("labels", "annotations"):
        _mapping(metadata.get(key), f"metadata.{key}", required=False)
    return metadata


def _workload_metadata(
    metadata: Mapping[str, Any], kind: str, name: str, label_keys: Iterable[str]
) -> dict[str, Any]:
    labels_in = metadata.get("labels") or {}
    labels = {key: labels_in[key] for key in label_keys if key in labels_in}
    uid = str(metadata.get("uid") or "")
    if uid and len(uid) <= 63 and _LABEL_VALUE.match(uid):
        labels[JOB_UID_LABEL] = uid
    annotations = {
        k: v
        for k, v in (metadata.get("annotations") or {}).items()
        if k.startswith(PROVREQ_ANNOTATION_PREFIX)
    }
    annotations[SOURCE_ANNOTATION] = f"{kind}/{metadata['name']}"
    out: dict[str, Any] = {
        "name": name,
        "namespace": metadata.get("namespace") or "default",
        "labels": labels,
    }
    if metadata.get("creationTimestamp") is not None:
        out["creationTimestamp"] = metadata["creationTimestamp"]
    out["annotations"] = annotations
    return out


def to_workload(doc: dict[str, Any], *, label_keys_to_copy: Iterable[str] = ()) -> dict[str, Any]:
    """Build the Workload manifest Kueue would create for the source ``doc``.

    ``doc`` is not modified; pod templates are deep copies. ``label_keys_to_copy``
    plays Kueue's ``integrations.labelKeysToCopy``. Raises :class:`SourceError`
    naming the offending field of ``doc``.
    """
    kind_name = doc.get("kind")
    kind = _KINDS.get((str(doc.get("apiVersion")), str(kind_name)))
    if kind is None:
        raise SourceError("kind", f"{doc.get('apiVersion')}/{kind_name} is not a workload source")
    metadata = _metadata(doc)
    if str((metadata.get("annotations") or {}).get(ELASTIC_JOB_ANNOTATION, "")).lower() == "true":
        raise SourceError(
            f"metadata.annotations[{ELASTIC_JOB_ANNOTATION}]", "elastic jobs are not supported by gpuq"
        )
    spec = _mapping(doc.get("spec"), "spec")
    pod_sets = kind.pod_sets({**doc, "metadata": metadata}, spec)
    custom = kind.priority_class(spec) if kind.priority_class else None
    priority_name, priority_source = _priority(metadata, custom, pod_sets)
    name = workload_name(metadata["name"], str(metadata.get("uid") or ""), str(kind_name), kind.group)
    workload_spec: dict[str, Any] = {"queueName": queue_name(metadata), "podSets": pod_sets}
    workload_spec["priorityClassName"] = priority_name
    workload_spec["priorityClassSource"] = priority_source
    max_exec = _max_exec_seconds(metadata.get("labels") or {})
    if max_exec is not None:
        workload_spec["maximumExecutionTimeSeconds"] = max_exec
    return {
        "apiVersion": WORKLOAD_API_VERSION,
        "kind": "Workload",
        "metadata": _workload_metadata(metadata, str(kind_name), name, label_keys_to_copy),
        "spec": workload_spec,
    }
