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

Every GPU pod asks for the row's ``gpus``, ``cpu`` and ``memory``; a single-pod
Kubeflow job is its master (chief) alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuq.api import convert, kueue
from gpuq.api.source_fields import SourceError
from gpuq.api.sources import to_workload
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
assert set(TRACE_KINDS) == {"Job", "JobSet", *_FIELD}


def _template(container: str, requests: dict[str, int], *, gpus: bool = True) -> dict[str, Any]:
    kept = {r: a for r, a in requests.items() if gpus or r not in (GPU, GPU_MILLI)}
    resources = {"requests": {r: format_amount(r, a) for r, a in sorted(kept.items())}} if kept else {}
    return {"spec": {"containers": [{"name": container, "image": "trace", "resources": resources}]}}


def source_manifest(job: TraceJob, kind: str, requests: dict[str, int]) -> dict[str, Any]:
    """The ``kind`` manifest for ``job`` with per-pod ``requests`` (core units), as the table says."""
    metadata = {"name": job.name, "namespace": job.namespace}
    if kind == "Job":
        version, spec = "batch/v1", {"parallelism": job.pods, "template": _template("main", requests)}
    elif kind == "JobSet":
        job_spec = {"parallelism": job.pods, "template": _template("main", requests)}
        version = "jobset.x-k8s.io/v1alpha2"
        spec = {"replicatedJobs": [{"name": "workers", "template": {"spec": job_spec}}]}
    else:
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
        spec = {_FIELD[kind]: replicas}
    return {"apiVersion": version, "kind": kind, "metadata": metadata, "spec": spec}


def kind_pod_sets(job: TraceJob, kind: str, requests: dict[str, int]) -> tuple[PodSet, ...]:
    """The core pod sets of ``job`` built as ``kind``; ValueError when the kind cannot hold the row."""
    try:
        manifest = to_workload(source_manifest(job, kind, requests))
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
