"""Serving objects written back as the user wrote them, labelled where Kueue reads their queue.

Deployments, StatefulSets, HorizontalPodAutoscalers, KEDA ScaledObjects, KServe
InferenceServices, RayServices and PodDisruptionBudgets are kept by the loader as
written (:class:`~gpuq.api.serving.ServingObject`), so their own data is written
back, without ``status`` and server-set metadata, first definition of each
(kind, namespace, name) only.

A serving workload's queue is the one :func:`gpuq.api.serving.build_services`
read (the label on the object or on its pod template); the export puts the
``kueue.x-k8s.io/queue-name`` label where each Kueue integration looks for it:

1. Deployment and StatefulSet: ``metadata.labels`` (Kueue's deployment and
   statefulset webhooks read it there) and ``spec.template.metadata.labels``
   (the pods Kueue's pod integration admits one by one; the webhooks copy the
   label there themselves, so writing it keeps what the cluster would hold);
2. InferenceService: ``metadata.labels`` and ``spec.predictor.labels``
   (KServe's "labels that will be added to the component pod");
3. RayService: ``metadata.labels`` only: Kueue admits the RayService (through the
   RayCluster KubeRay creates with the same labels) as one workload, not pod by pod.

Autoscalers and disruption budgets are no workloads and are written unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuq.api import serving
from gpuq.api.diagnostics import Manifest
from gpuq.k8s.export_common import Obj
from gpuq.k8s.manifests_originals import QUEUE_LABEL, source_object

WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet", "InferenceService", "RayService"})


def serving_objects(manifests: Sequence[Manifest]) -> list[Obj]:
    """Every serving object of the configuration, in file order, labelled with its queue."""
    queues = _queues(manifests)
    out: list[Obj] = []
    seen: set[tuple[str, str, str]] = set()
    for manifest in manifests:
        key = (manifest.kind, manifest.namespace, manifest.name)
        if not isinstance(manifest.model, serving.ServingObject) or key in seen:
            continue
        seen.add(key)
        queue = queues.get(f"{manifest.path}:{manifest.line}", "") if manifest.kind in WORKLOAD_KINDS else ""
        out.append(serving_object(manifest.model.data, queue))
    return out


def _queues(manifests: Sequence[Manifest]) -> dict[str, str]:
    """``path:line`` of each serving workload -> the queue its services were read with."""
    services, _ = serving.build_services(manifests)
    return {s.source: s.queue_name for s in services if s.queue_name}


def serving_object(raw: Mapping[str, Any], queue_name: str) -> Obj:
    """``raw`` without status or server-set metadata, with ``queue_name`` where Kueue reads it
    (steps 1-3 of the module docstring); unchanged otherwise when ``queue_name`` is empty."""
    obj = source_object(raw, queue_name)
    if not queue_name:
        return obj
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return obj
    kind = obj.get("kind")
    if kind in ("Deployment", "StatefulSet") and isinstance(spec.get("template"), dict):
        template = spec["template"]
        template["metadata"] = _labelled(template.get("metadata"), queue_name)
    elif kind == "InferenceService" and isinstance(spec.get("predictor"), dict):
        predictor = spec["predictor"]
        predictor["labels"] = {**(predictor.get("labels") or {}), QUEUE_LABEL: queue_name}
    return obj


def _labelled(metadata: Any, queue_name: str) -> dict[str, Any]:
    out = dict(metadata) if isinstance(metadata, dict) else {}
    out["labels"] = {**(out.get("labels") or {}), QUEUE_LABEL: queue_name}
    return out
