"""Spark operator ``sparkoperator.k8s.io/v1beta2`` SparkApplication as Kueue's integration sees it.

Kueue's ``pkg/controller/jobs/sparkapplication/sparkapplication_podset.go``
builds the pods the operator will create, from the application's fields, not
from a pod template (``spec.driver.template`` gives only metadata):

1. Two pod sets, ``driver`` (count 1) and ``executor`` (count
   ``spec.executor.instances``, default 0), each with one container named
   ``spark-kubernetes-driver`` / ``spark-kubernetes-executor``.
2. On the role's section (``spec.driver``, ``spec.executor``): its
   ``volumeMounts`` with the matching ``spec.volumes`` (``spark-local-dir-*``
   skipped), ``initContainers``, ``sidecars``, ``priorityClassName``,
   ``nodeSelector``, ``affinity``, ``tolerations``.
3. Resources of the Spark container: CPU request ``coreRequest``, CPU limit
   ``coreLimit``, memory request ``memory`` and limit ``memoryLimit`` (Java
   sizes, ``512m`` -> ``512Mi``, ``2g`` -> ``2Gi``), and ``gpu.name`` as a
   limit of ``gpu.quantity``. ``cores``, ``memoryOverhead`` and
   ``memoryOverheadFactor`` are not counted: Kueue leaves them to Spark.
4. Metadata: the role template's labels and annotations, then the role's
   ``labels`` and ``annotations``.

Refusals, for a managed (queue-named) application (``sparkapplication_webhook.go``):
``spec.mode`` other than ``cluster`` (the operator's default), and
``spec.dynamicAllocation.enabled`` (Kueue allows it only for elastic jobs,
which gpuq does not have).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gpuq.api.source_fields import (
    SourceError,
    check_pod_sets,
    int_field,
    make_pod_set,
    mapping_field,
    queue_name,
)
from gpuq.core.quantity import QuantityError, parse_quantity

DRIVER, EXECUTOR = "driver", "executor"
_CONTAINERS = {DRIVER: "spark-kubernetes-driver", EXECUTOR: "spark-kubernetes-executor"}
_LOCAL_DIR_PREFIX = "spark-local-dir-"
_JAVA_UNITS: tuple[tuple[str, str], ...] = (
    ("kb", "Ki"),
    ("mb", "Mi"),
    ("gb", "Gi"),
    ("tb", "Ti"),
    ("pb", "Pi"),
)
_JAVA_UNITS += tuple((unit[0], k8s) for unit, k8s in _JAVA_UNITS)  # two-letter suffixes first


def java_memory(text: str) -> str:
    """The spark operator's ``ConvertJavaMemoryStringToK8sMemoryString``: ``1g`` -> ``1Gi``.

    A lowercase Java suffix becomes the binary Kubernetes unit; anything else
    (``1Gi``, ``1G``, ``1024``) is kept as written.
    """
    for unit, k8s_unit in _JAVA_UNITS:
        if text.endswith(unit):
            return text[: -len(unit)] + k8s_unit
    return text


def _quantity(section: Mapping[str, Any], key: str, at: str, *, java: bool = False) -> str | None:
    value = section.get(key)
    if value is None:
        return None
    text = java_memory(str(value)) if java else str(value)
    try:
        parse_quantity(text)
    except QuantityError as err:
        raise SourceError(f"{at}.{key}", str(err)) from None
    return text


def _resources(section: Mapping[str, Any], at: str) -> dict[str, Any]:
    """Step 3: the Spark container's requests and limits."""
    requests: dict[str, str] = {}
    limits: dict[str, Any] = {}
    for target, resource, key, java in (
        (requests, "cpu", "coreRequest", False),
        (limits, "cpu", "coreLimit", False),
        (requests, "memory", "memory", True),
        (limits, "memory", "memoryLimit", True),
    ):
        value = _quantity(section, key, at, java=java)
        if value is not None:
            target[resource] = value
    gpu = mapping_field(section.get("gpu"), f"{at}.gpu", required=False)
    quantity = gpu.get("quantity", 0)
    if isinstance(quantity, bool) or not isinstance(quantity, int):
        raise SourceError(f"{at}.gpu.quantity", f"expected an integer, got {quantity!r}")
    if gpu.get("name") and quantity > 0:
        limits[str(gpu["name"])] = quantity
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _list(section: Mapping[str, Any], key: str, at: str) -> list[Any]:
    value = section.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise SourceError(f"{at}.{key}", "expected a list")
    return copy.deepcopy(value)


def _volumes(spec: Mapping[str, Any], section: Mapping[str, Any], at: str) -> tuple[list[Any], list[Any]]:
    """Step 2's volumes: each mounted ``spec.volumes`` entry once, with its mounts (no local dirs)."""
    by_name = {v.get("name"): v for v in _list(spec, "volumes", "spec") if isinstance(v, dict)}
    volumes: list[Any] = []
    mounts: list[Any] = []
    for mount in _list(section, "volumeMounts", at):
        name = mount.get("name") if isinstance(mount, dict) else None
        if not isinstance(name, str) or name.startswith(_LOCAL_DIR_PREFIX) or name not in by_name:
            continue
        if all(v.get("name") != name for v in volumes):
            volumes.append(by_name[name])
        mounts.append(mount)
    return volumes, mounts


def _metadata(section: Mapping[str, Any], at: str) -> dict[str, Any]:
    """Step 4: the role template's labels and annotations, overlaid with the role's own."""
    template = mapping_field(section.get("template"), f"{at}.template", required=False)
    meta = mapping_field(template.get("metadata"), f"{at}.template.metadata", required=False)
    out: dict[str, Any] = {}
    for key in ("labels", "annotations"):
        merged = {
            **mapping_field(meta.get(key), f"{at}.template.metadata.{key}", required=False),
            **mapping_field(section.get(key), f"{at}.{key}", required=False),
        }
        if merged:
            out[key] = merged
    return out


def _role_template(spec: Mapping[str, Any], role: str) -> dict[str, Any]:
    """Steps 2 to 4 for ``role``: the pod template Kueue's integration builds."""
    at = f"spec.{role}"
    section = mapping_field(spec.get(role), at, required=False)
    volumes, mounts = _volumes(spec, section, at)
    container: dict[str, Any] = {"name": _CONTAINERS[role]}
    if mounts:
        container["volumeMounts"] = mounts
    resources = _resources(section, at)
    if resources:
        container["resources"] = resources
    pod_spec: dict[str, Any] = {"containers": [container, *_list(section, "sidecars", at)]}
    for key in ("initContainers", "tolerations"):
        if items := _list(section, key, at):
            pod_spec[key] = items
    if volumes:
        pod_spec["volumes"] = volumes
    if section.get("priorityClassName"):
        pod_spec["priorityClassName"] = str(section["priorityClassName"])
    if selector := mapping_field(section.get("nodeSelector"), f"{at}.nodeSelector", required=False):
        pod_spec["nodeSelector"] = dict(selector)
    if section.get("affinity") is not None:
        pod_spec["affinity"] = copy.deepcopy(mapping_field(section["affinity"], f"{at}.affinity"))
    metadata = _metadata(section, at)
    return {"metadata": metadata, "spec": pod_spec} if metadata else {"spec": pod_spec}


def sparkapplication_pod_sets(doc: Mapping[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Step 1: ``driver`` then ``executor``, after the managed-application refusals."""
    if queue_name(doc["metadata"]):
        mode = spec.get("mode") or "cluster"
        if mode != "cluster":
            raise SourceError(
                "spec.mode", f"only cluster mode is supported for a Kueue-managed job, got {mode!r}"
            )
        dynamic = mapping_field(spec.get("dynamicAllocation"), "spec.dynamicAllocation", required=False)
        if dynamic.get("enabled") is True:
            raise SourceError(
                "spec.dynamicAllocation.enabled",
                "a Kueue-managed job can use dynamic allocation only as an elastic job (not in gpuq)",
            )
    executor = mapping_field(spec.get(EXECUTOR), f"spec.{EXECUTOR}", required=False)
    instances = int_field(executor, "instances", "spec.executor.instances", 0)
    pod_sets = [
        make_pod_set(DRIVER, 1, _role_template(spec, DRIVER), "spec.driver"),
        make_pod_set(EXECUTOR, instances, _role_template(spec, EXECUTOR), "spec.executor"),
    ]
    return check_pod_sets(pod_sets, "spec")
