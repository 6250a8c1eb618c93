"""KubeRay sources (``ray.io/v1`` RayJob and RayCluster) as Kueue's integrations see them.

Pod sets: ``head`` (count 1), one per worker group (lowercased ``groupName``,
``replicas`` × ``numOfHosts``), and for a RayJob in K8sJobMode the submitter
pod set (Kueue's default submitter requests when no template is given).

A RayService is no source of its own: Kueue manages it through the RayCluster KubeRay creates
for it (Kueue's "Run A RayService" task page), whose labels, the queue name among them, are the
RayService's. :func:`rayservice_cluster` writes that RayCluster.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gpuq.api.generated_names import seeded_suffix
from gpuq.api.source_fields import (
    NotManaged,
    SourceError,
    check_pod_sets,
    int_field,
    make_pod_set,
    mapping_field,
    pod_template,
    queue_name,
)
from gpuq.core.quantity import QuantityError, parse_quantity

_HEAD = "head"
_SUBMITTER = "submitter"
_SUBMITTER_CONTAINER = "ray-job-submitter"
_SUBMISSION_MODES = ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode")
_RAY_FT_ANNOTATION = "ray.io/ft-enabled"
_ELASTIC_JOB_ANNOTATION = (
    "kueue.x-k8s.io/elastic-job"  # sources.ELASTIC_JOB_ANNOTATION (sources imports this module)
)
_RAY_CLUSTER_SUFFIX = "-raycluster-"
"""KubeRay's ``utils.GenerateRayClusterName``: ``<service>-raycluster-<5 random characters>``."""
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
        group = mapping_field(item, at)
        name = group.get("groupName")
        if not isinstance(name, str) or not name:
            raise SourceError(f"{at}.groupName", "is required")
        if name == _HEAD:
            raise SourceError(f"{at}.groupName", '"head" is reserved for the head group')
        count = int_field(group, "replicas", f"{at}.replicas", 1)
        hosts = int_field(group, "numOfHosts", f"{at}.numOfHosts", 1)
        template = pod_template(group, "template", f"{at}.template")
        pod_sets.append(
            make_pod_set(name.lower(), count * hosts if hosts > 1 else count, template, f"{at}.groupName")
        )
    return pod_sets


def _ray_cluster_pod_sets(
    cluster: Mapping[str, Any], field: str, doc: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Kueue's ``raycluster.BuildPodSets``: ``head`` (count 1) then the worker groups.

    1. The head template, plus the Redis cleanup requests under GCS fault tolerance.
    2. With in-tree autoscaling, the autoscaler sidecar; Kueue's webhook refuses
       that for a managed (queue-named) job that is not elastic
       (``kueue.x-k8s.io/elastic-job: "true"``, workload slicing).
    3. The worker groups in order.
    """
    metadata = doc["metadata"]
    head_group = mapping_field(cluster.get("headGroupSpec"), f"{field}.headGroupSpec")
    head = make_pod_set(
        _HEAD, 1, pod_template(head_group, "template", f"{field}.headGroupSpec.template"), field
    )
    ft_flag = str((metadata.get("annotations") or {}).get(_RAY_FT_ANNOTATION, "")).lower() == "true"
    if ft_flag or cluster.get("gcsFaultToleranceOptions") is not None:
        _add_redis_cleanup(head, field)
    if cluster.get("enableInTreeAutoscaling") is True:
        elastic = (metadata.get("annotations") or {}).get(_ELASTIC_JOB_ANNOTATION) == "true"
        if queue_name(metadata) and not elastic:  # raycluster/common.go ValidateCreate
            raise SourceError(
                f"{field}.enableInTreeAutoscaling",
                "a kueue managed job should only use autoscaling when workload slicing is enabled "
                '(annotation kueue.x-k8s.io/elastic-job: "true")',
            )
        head["template"]["spec"].setdefault("containers", []).append(_autoscaler_container(cluster))
    return [head, *_ray_workers(cluster, field)]


def _submitter_pod_set(spec: Mapping[str, Any], head: dict[str, Any]) -> dict[str, Any]:
    """The K8sJobMode submitter: ``spec.submitterPodTemplate`` or KubeRay's default with the head's image."""
    if spec.get("submitterPodTemplate") is not None:
        return make_pod_set(
            _SUBMITTER, 1, pod_template(spec, "submitterPodTemplate", "spec.submitterPodTemplate"), "spec"
        )
    image = _head_containers(head, "spec.rayClusterSpec", "the default submitter")[0].get("image") or ""
    container = {"name": _SUBMITTER_CONTAINER, "image": image, "resources": _submitter_resources()}
    return make_pod_set(
        _SUBMITTER, 1, {"spec": {"containers": [container], "restartPolicy": "Never"}}, "spec"
    )


def rayjob_pod_sets(doc: Mapping[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The cluster's pod sets, then ``submitter`` in K8sJobMode (the default); SidecarMode adds to the head.

    A RayJob with ``clusterSelector`` runs on an existing cluster: Kueue's webhook refuses it when it
    names a queue, and its reconciler skips it otherwise (no Workload: :class:`NotManaged`).
    """
    if spec.get("clusterSelector"):
        message = "a RayJob on an existing cluster has no Kueue Workload"
        if queue_name(doc["metadata"]):
            raise SourceError("spec.clusterSelector", f"{message}: a Kueue-managed RayJob cannot use one")
        raise NotManaged("spec.clusterSelector", message)
    mode = spec.get("submissionMode") or "K8sJobMode"
    if mode not in _SUBMISSION_MODES:
        raise SourceError(
            "spec.submissionMode", f"expected one of {', '.join(_SUBMISSION_MODES)}, got {mode!r}"
        )
    if queue_name(doc["metadata"]) and spec.get("shutdownAfterJobFinishes") is not True:
        raise SourceError(
            "spec.shutdownAfterJobFinishes", "a Kueue-managed RayJob must delete its cluster when done"
        )
    cluster = mapping_field(spec.get("rayClusterSpec"), "spec.rayClusterSpec")
    pod_sets = _ray_cluster_pod_sets(cluster, "spec.rayClusterSpec", doc)
    if mode == "K8sJobMode":
        pod_sets.append(_submitter_pod_set(spec, pod_sets[0]))
    elif mode == "SidecarMode":
        sidecar = {"name": _SUBMITTER_CONTAINER, "resources": _submitter_resources()}
        pod_sets[0]["template"]["spec"].setdefault("containers", []).append(sidecar)
    return check_pod_sets(pod_sets, "spec.rayClusterSpec.workerGroupSpecs")


def raycluster_pod_sets(doc: Mapping[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """A RayCluster's pod sets are its head and worker groups."""
    return check_pod_sets(_ray_cluster_pod_sets(spec, "spec", doc), "spec.workerGroupSpecs")


def rayservice_cluster(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``ray.io/v1`` RayCluster a queue-named RayService's controller creates, or None without a
    queue name (Kueue leaves that cluster alone).

    KubeRay's ``constructRayClusterForRayService``: the spec is ``spec.rayClusterConfig``, the
    labels and annotations are the RayService's, plus its origin labels. The name's random part
    is drawn here from the RayService's namespace and name, so the same file gives the same
    Workload name (a real cluster's differs, as KubeRay draws it at random).
    """
    metadata = doc.get("metadata")
    if not isinstance(metadata, Mapping) or not queue_name(metadata):
        return None
    spec = mapping_field(doc.get("spec"), "spec")
    cluster = mapping_field(spec.get("rayClusterConfig"), "spec.rayClusterConfig")
    name, namespace = str(metadata.get("name") or ""), str(metadata.get("namespace") or "default")
    labels = {
        **(metadata.get("labels") or {}),
        "ray.io/originated-from-crd": "RayService",
        "ray.io/originated-from-cr-name": name,
    }
    cluster_metadata: dict[str, Any] = {
        "name": f"{name}{_RAY_CLUSTER_SUFFIX}{seeded_suffix(0, f'{namespace}/{name}', 0)}",
        "namespace": namespace,
        "labels": labels,
    }
    if metadata.get("annotations"):
        cluster_metadata["annotations"] = dict(metadata["annotations"])
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": cluster_metadata,
            "spec": copy.deepcopy(dict(cluster))}  # fmt: skip
