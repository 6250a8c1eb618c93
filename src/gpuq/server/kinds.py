"""The kinds the API stores, their URL plurals and scopes, and the few kinds it refuses.

Shared by the server (routes, authorization) and the client CLI (``gpuq delete -f``), so
both agree on which path an object lives under. Workload sources (Job, JobSet,
Kubeflow jobs, RayJob, RayCluster, Pod...) are not objects: they become workloads;
a few of them (:data:`ADMIT_ONLY_SOURCES`) are read by ``gpuq admit`` and ``gpuq
simulate`` but refused by a live control plane.
"""

from __future__ import annotations

from typing import Any

from gpuq.api import sources, sources_derived

API_PREFIX = "/apis/gpuq.dev/v1alpha1"

CLUSTER_KINDS: dict[str, str] = {
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "Cohort": "cohorts",
    "Topology": "topologies",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "PriorityClass": "priorityclasses",
    "AdmissionCheck": "admissionchecks",
    "MultiKueueConfig": "multikueueconfigs",
    "MultiKueueCluster": "multikueueclusters",
    "ProvisioningRequestConfig": "provisioningrequestconfigs",
    "Configuration": "configurations",
    "Namespace": "namespaces",
    "NodePool": "nodepools",
    "GPUModel": "gpumodels",
}
"""Cluster-scoped configuration kinds -> plural: ``/apis/gpuq.dev/v1alpha1/<plural>/<name>``."""

SERVING_KINDS: dict[str, str] = {
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "HorizontalPodAutoscaler": "horizontalpodautoscalers",
    "ScaledObject": "scaledobjects",
    "InferenceService": "inferenceservices",
    "RayService": "rayservices",
    "PodDisruptionBudget": "poddisruptionbudgets",
}
"""Serving objects (``gpuq.api.serving``), stored as namespaced objects: the leader's service controller
(``gpuq.run.serving.controller``) runs them as live services."""

NAMESPACED_KINDS: dict[str, str] = {"LocalQueue": "localqueues", **SERVING_KINDS}
"""Namespaced kinds -> plural: ``.../namespaces/<ns>/<plural>/<name>``."""

REFUSED_KINDS: dict[str, str] = {
    "Workload": "Workload objects are made by gpuq from their source: apply a Job, JobSet, PyTorchJob, "
    "TFJob, XGBoostJob, PaddleJob, JAXJob, MPIJob, RayJob, RayCluster or Pod",
    "Scenario": "a Scenario is an input of gpuq simulate, not of a live control plane",
    "Node": "the live nodes are this machine's GPUs (gpuq serve --gpus or discovery); "
    "v1 Nodes only describe planning snapshots",
}
"""Kinds the loader knows that a live control plane does not store, with the reason it says."""

_ADMIT_ONLY = "runs in gpuq admit and gpuq simulate only"
ADMIT_ONLY_SOURCES: dict[str, str] = {
    "SparkApplication": f"a SparkApplication {_ADMIT_ONLY}: the live executor runs pod commands, and Kueue's "
    "driver and executor pods are built by the Spark operator, which gpuq does not run",
    "TrainJob": f"a TrainJob {_ADMIT_ONLY}: its pods come from a Trainer runtime, which a live control plane "
    "does not store",
    "ClusterTrainingRuntime": f"a Trainer runtime is read with its TrainJobs, which a TrainJob {_ADMIT_ONLY}",
    "TrainingRuntime": f"a Trainer runtime is read with its TrainJobs, which a TrainJob {_ADMIT_ONLY}",
}
"""Sources (and the objects they need) that ``gpuq apply`` refuses, with the reason it says."""

BY_PLURAL: dict[str, str] = {plural: kind for kind, plural in (CLUSTER_KINDS | NAMESPACED_KINDS).items()}
WORKLOAD = "Workload"
"""The kind authorization checks for a workload, whatever its source kind."""


def is_namespaced(kind: str) -> bool:
    return kind in NAMESPACED_KINDS


def resolve_kind(text: str) -> str | None:
    """A kind from what a user typed: ``ClusterQueue``, ``clusterqueue``, ``clusterqueues``, ``cq``."""
    lowered = text.lower()
    aliases = {
        "cq": "ClusterQueue",
        "lq": "LocalQueue",
        "rf": "ResourceFlavor",
        "wl": WORKLOAD,
        "deploy": "Deployment",
        "sts": "StatefulSet",
        "hpa": "HorizontalPodAutoscaler",
        "so": "ScaledObject",
        "isvc": "InferenceService",
        "pdb": "PodDisruptionBudget",
    }
    if lowered in aliases:
        return aliases[lowered]
    if lowered in ("workload", "workloads"):
        return WORKLOAD
    for kind, plural in (CLUSTER_KINDS | NAMESPACED_KINDS).items():
        if lowered in (kind.lower(), plural):
            return kind
    return None


def document_key(document: Any) -> tuple[str, str, str] | None:
    """``(kind, namespace, name)`` of a manifest, with the namespace as stored; None when unreadable.

    Workload sources and namespaced kinds default to ``default``; cluster-scoped kinds have ''.
    A source's kind is reported as :data:`WORKLOAD`.
    """
    if not isinstance(document, dict):
        return None
    kind, metadata = document.get("kind"), document.get("metadata")
    if not isinstance(kind, str) or not isinstance(metadata, dict):
        return None
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return None
    api_version = str(document.get("apiVersion", ""))
    source = sources.is_source(api_version, kind) or sources_derived.runs_live(api_version, kind)
    if source or is_namespaced(kind):
        return (WORKLOAD if source else kind), str(metadata.get("namespace") or "default"), name
    return kind, "", name


def object_path(kind: str, name: str, namespace: str = "") -> str:
    """The API path of one object or workload (``kind`` as :func:`resolve_kind` returns it)."""
    if kind == WORKLOAD:
        return f"{API_PREFIX}/namespaces/{namespace or 'default'}/workloads/{name}"
    if kind in NAMESPACED_KINDS:
        return f"{API_PREFIX}/namespaces/{namespace or 'default'}/{NAMESPACED_KINDS[kind]}/{name}"
    return f"{API_PREFIX}/{CLUSTER_KINDS[kind]}/{name}"
