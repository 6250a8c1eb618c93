"""A trace row's ``kind``: the pod sets that kind's Kueue integration would build for the job.

The row's ``pods`` and per-pod requests are written into a source manifest of
that kind, which goes through the loader's own :func:`gpuq.api.sources.to_workload`
and :func:`gpuq.api.convert.pod_set`, so the pod-set rules live in one place:

| kind | source manifest | pod sets |
| --- | --- | --- |
| ``Job`` | parallelism ``pods`` | ``main`` × pods |
| ``JobSet`` | one replicated job ``workers``, parallelism ``pods`` | ``workers`` × pods |
| ``PyTorchJob``, ``XGBoostJob``, ``PaddleJob`` | ``Master`` 1 + ``Worker`` pods - 1 | ``master``, ``worker``|
| ``TFJob`` | ``Chief`` 1 + ``Worker`` pods - 1 | ``chief``, ``worker`` |
| ``JAXJob`` | ``Worker`` pods | ``worker`` |
| ``MPIJob`` | ``Launcher`` 1 (CPU and memory, no GPU) + ``Worker`` pods | ``launcher``, ``worker`` |
| ``TrainJob`` | ``trainer.numNodes`` pods on Trainer's ``torch-distributed`` runtime | ``node`` |
| ``RayJob`` | head 1 (no GPU), group ``workers`` of pods, submitter | ``head``, ``workers``, ``submitter`` |
| ``RayCluster`` | head 1 (no GPU), worker group ``workers`` of pods | ``head``, ``workers`` |
| ``SparkApplication`` | driver (no GPU), ``executor.instances`` pods | ``driver``, ``executor`` |
| ``LeaderWorkerSet`` | one group: a leader, pods - 1 workers | ``leader``, ``worker`` (one pod: ``main``) |
| ``AppWrapper`` | one component, a Job of parallelism pods | ``<name>-0`` |
| ``StatefulSet`` | ``replicas`` pods | ``main`` |
| ``Pod`` | a pod group of pods pods (``pod-group-name`` the row's name) | its role hash |

Every GPU pod asks for the row's ``gpus``, ``cpu`` and ``memory``; a single-pod
Kubeflow job is its master (chief) alone. Every manifest names the row's queue, as a
Kueue-managed job does. Kinds that Kueue admits through the pods or Jobs another object
makes (LeaderWorkerSet, AppWrapper, StatefulSet, pod groups) go through the builders the
loader uses for them (:mod:`gpuq.api.sources_derived`, :mod:`gpuq.api.sources_pods`).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from gpuq.api import convert, kueue
from gpuq.api.source_fields import QUEUE_LABEL, SourceError
from gpuq.api.sources import POD_GROUP_LABEL, to_workload
from gpuq.api.sources_derived import derive_all
from gpuq.api.sources_pods import GROUP_TOTAL_COUNT, LWS_API_VERSION, Derived, pod_groups, serving_workloads
from gpuq.api.trainjob_sources import SourceContext
from gpuq.core.model import PodSet
from gpuq.core.nodes import GPU, GPU_MILLI
from gpuq.core.quantity import format_amount
from gpuq.sim.traces.model import TRACE_KINDS, TraceJob

_LEADER = {"PyTorchJob": "Master", "XGBoostJob": "Master", "PaddleJob": "Master", "TFJob": "Chief"}
_CONTAINER = {
    "PyTorchJob": "pytorch",
    "XGBoostJob": "xgboost",
    "PaddleJob": "paddle",
    "TFJob": "tensorflow",
    "JAXJob": "jax",
    "MPIJob": "mpi",
}
_FIELD = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
}
_TRAINER_RUNTIME: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed"},
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "trace"}]}}},
            },
        }]}},
    },
}  # fmt: skip
"""Kubeflow Trainer v2.2.1's ``manifests/base/runtimes/torch_distributed.yaml`` (its image aside)."""
_SOURCE_KINDS = {"Job", "JobSet", *_FIELD, "TrainJob", "RayJob", "RayCluster", "SparkApplication"}
_DERIVED_KINDS = {"LeaderWorkerSet", "AppWrapper", "StatefulSet", "Pod"}
assert set(TRACE_KINDS) == _SOURCE_KINDS | _DERIVED_KINDS


def _template(container: str, requests: dict[str, int], *, gpus: bool = True) -> dict[str, Any]:
    kept = {r: a for r, a in requests.items() if gpus or r not in (GPU, GPU_MILLI)}
    resources = {"requests": {r: format_amount(r, a) for r, a in sorted(kept.items())}} if kept else {}
    return {"spec": {"containers": [{"name": container, "image": "trace", "resources": resources}]}}


def source_manifest(job: TraceJob, kind: str, requests: dict[str, int]) -> dict[str, Any]:
    """The ``kind`` manifest for ``job`` with per-pod ``requests`` (core units), as the table says."""
    metadata = {"name": job.name, "namespace": job.namespace, "labels": {QUEUE_LABEL: job.queue}}
    if kind == "Job":
        version, spec = "batch/v1", {"parallelism": job.pods, "template": _template("main", requests)}
    elif kind == "JobSet":
        job_spec = {"parallelism": job.pods, "template": _template("main", requests)}
        version = "jobset.x-k8s.io/v1alpha2"
        spec = {"replicatedJobs": [{"name": "workers", "template": {"spec": job_spec}}]}
    elif kind in _FIELD:
        version, spec = _kubeflow_spec(job, kind, requests)
    elif kind == "TrainJob":
        version, spec = "trainer.kubeflow.org/v1alpha1", _trainjob_spec(job, requests)
    elif kind in ("RayJob", "RayCluster"):
        cluster = _ray_cluster(job, requests)
        version = "ray.io/v1"
        spec = cluster
        if kind == "RayJob":
            spec = {"rayClusterSpec": cluster, "shutdownAfterJobFinishes": True}
    elif kind == "SparkApplication":
        version, spec = "sparkoperator.k8s.io/v1beta2", _spark_spec(job, requests)
    elif kind == "LeaderWorkerSet":
        version, spec = LWS_API_VERSION, _lws_spec(job, requests)
    elif kind == "AppWrapper":
        wrapped = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job.name},
                   "spec": {"parallelism": job.pods, "template": _template("main", requests)}}  # fmt: skip
        version, spec = "workload.codeflare.dev/v1beta2", {"components": [{"template": wrapped}]}
    elif kind == "StatefulSet":
        template = {**_template("main", requests), "metadata": {"labels": {"app": job.name}}}
        version = "apps/v1"
        spec = {"replicas": job.pods, "selector": {"matchLabels": {"app": job.name}}, "template": template}
    else:
        raise ValueError(f"kind {kind}: not a trace kind")
    return {"apiVersion": version, "kind": kind, "metadata": metadata, "spec": spec}


def _kubeflow_spec(job: TraceJob, kind: str, requests: dict[str, int]) -> tuple[str, dict[str, Any]]:
    container = _CONTAINER[kind]
    replicas: dict[str, Any] = {}
    workers = job.pods
    if kind == "MPIJob":
        replicas["Launcher"] = {"replicas": 1, "template": _template(container, requests, gpus=False)}
    elif kind in _LEADER:
        replicas[_LEADER[kind]] = {"replicas": 1, "template": _template(container, requests)}
        workers -= 1
    if workers > 0:
        replicas["Worker"] = {"replicas": workers, "template": _template(container, requests)}
    version = "kubeflow.org/v2beta1" if kind == "MPIJob" else "kubeflow.org/v1"
    return version, {_FIELD[kind]: replicas}


def _trainjob_spec(job: TraceJob, requests: dict[str, int]) -> dict[str, Any]:
    resources = _template("node", requests)["spec"]["containers"][0]["resources"]
    return {
        "runtimeRef": {"name": _TRAINER_RUNTIME["metadata"]["name"]},
        "trainer": {"numNodes": job.pods, "resourcesPerNode": resources},
    }


def _ray_cluster(job: TraceJob, requests: dict[str, int]) -> dict[str, Any]:
    head = {"template": _template("ray-head", requests, gpus=False)}
    workers = {"groupName": "workers", "replicas": job.pods, "template": _template("ray-worker", requests)}
    return {"headGroupSpec": head, "workerGroupSpecs": [workers]}


def _spark_spec(job: TraceJob, requests: dict[str, int]) -> dict[str, Any]:
    if GPU_MILLI in requests:
        raise ValueError("kind SparkApplication: a Spark executor asks for whole GPUs")

    def role(gpus: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if "cpu" in requests:
            out["coreRequest"] = format_amount("cpu", requests["cpu"])
        if "memory" in requests:
            out["memory"] = f"{-(-requests['memory'] // 2**20)}m"  # Java's size, rounded up to a MiB
        if gpus and requests.get(GPU):
            out["gpu"] = {"name": GPU, "quantity": requests[GPU]}
        return out

    executor = {**role(True), "instances": job.pods}
    return {"type": "Python", "mode": "cluster", "driver": role(False), "executor": executor}


def _lws_spec(job: TraceJob, requests: dict[str, int]) -> dict[str, Any]:
    template = _template("main", requests)
    group: dict[str, Any] = {"size": job.pods, "workerTemplate": template}
    if job.pods > 1:
        group["leaderTemplate"] = copy.deepcopy(template)
    return {"replicas": 1, "leaderWorkerTemplate": group}


def _pod_group(job: TraceJob, requests: dict[str, int]) -> list[dict[str, Any]]:
    """The ``pods`` Pods of one pod group named as the row."""
    labels = {QUEUE_LABEL: job.queue, POD_GROUP_LABEL: job.name}
    annotations = {GROUP_TOTAL_COUNT: str(job.pods)}
    return [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": f"{job.name}-{i}", "namespace": job.namespace, "labels": labels,
                      "annotations": annotations},
         "spec": _template("main", requests)["spec"]}
        for i in range(job.pods)
    ]  # fmt: skip


def _workload_manifest(job: TraceJob, kind: str, requests: dict[str, int]) -> dict[str, Any]:
    """The one Workload manifest Kueue builds for ``job`` as ``kind``; SourceError when it cannot."""
    if kind == "Pod":
        derived = pod_groups(_pod_group(job, requests))[0]  # the group's Workload rides on its first pod
    elif kind == "StatefulSet":
        manifest = source_manifest(job, kind, requests)
        template = manifest["spec"]["template"]
        built = serving_workloads(kind, manifest, job.queue, job.pods, template)
        derived = Derived(tuple(built))
    elif kind in _DERIVED_KINDS:
        (derived,) = derive_all([source_manifest(job, kind, requests)])
    else:
        context = SourceContext.of([_TRAINER_RUNTIME]) if kind == "TrainJob" else None
        return to_workload(source_manifest(job, kind, requests), context=context)
    errors = [f for f in derived.findings if f.severity == "error"]
    if errors:
        raise SourceError(errors[0].field, errors[0].message)
    (workload,) = derived.workloads
    return workload


def kind_pod_sets(job: TraceJob, kind: str, requests: dict[str, int]) -> tuple[PodSet, ...]:
    """The core pod sets of ``job`` built as ``kind``; ValueError when the kind cannot hold the row."""
    try:
        manifest = _workload_manifest(job, kind, requests)
    except SourceError as err:
        raise ValueError(f"kind {kind}: {err}") from None
    model = kueue.Workload.model_validate(manifest)
    return tuple(convert.pod_set(ps) for ps in model.spec.pod_sets)


def with_placement(
    pod_sets: tuple[PodSet, ...], job: TraceJob, selector: dict[str, str]
) -> tuple[PodSet, ...]:
    """The trace's tolerations on every pod set, its GPU-model selector on those that ask for GPUs."""
    return tuple(
        dataclasses.replace(
            ps,
            node_selector=dict(selector) if GPU in ps.requests or GPU_MILLI in ps.requests else {},
            tolerations=job.tolerations,
        )
        for ps in pod_sets
    )
