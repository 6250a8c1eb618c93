"""Objects written back as the user wrote them: workload sources, and what only gpuq reads.

Workload sources (Job, JobSet, PyTorchJob, RayJob, RayCluster, Pod) are loaded
as the Kueue Workload built from them, so their own text is re-read from the file
the loader named (:func:`original_documents`, with the loader's own parser):
the document is written back without ``status`` and server-set metadata, with
the ``kueue.x-k8s.io/queue-name`` label set to the queue it was loaded with.
What those workloads need on the cluster is written before them, as written too:
the DRA DeviceClasses, ResourceClaimTemplates and ResourceClaims their pods claim,
the training runtimes TrainJobs name, and every pod of a pod group (the group's
Workload rides on its first pod: :attr:`gpuq.api.loader.LoadResult.companions`).
ResourceSlices are a DRA driver's report of its devices: they go to ``gpuq/``.

gpuq-only objects go to the ``gpuq/`` folder, never applied to a cluster:
``gpuq.dev`` kinds (NodePool, GPUModel, ...; Scenarios excepted: they describe
simulation runs and name files relative to their own), ``v1`` Nodes (a cluster
dump), Kueue's Configuration (the controller's config file, set at install) and
Kueue Workloads (status snapshots Kueue creates itself). They are re-read too,
or rebuilt from the parsed model when their file cannot be read (stdin): then
a source is kept in its Workload form, in ``gpuq/``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuq.api import dra, kueue, loader, machines
from gpuq.api.diagnostics import Diagnostic, Manifest
from gpuq.api.scenario import Scenario
from gpuq.api.sources_pods import group_name
from gpuq.api.trainjob_sources import is_runtime
from gpuq.k8s.export_common import Obj

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_SERVER_METADATA = ("resourceVersion", "managedFields", "generation", "selfLink", "deletionTimestamp")
DocumentKey = tuple[str, int]


@dataclass
class Originals:
    """``workloads`` to apply (sources); ``gpuq`` objects by file name under ``gpuq/``."""

    workloads: list[Obj] = field(default_factory=list)
    gpuq: dict[str, list[Obj]] = field(default_factory=dict)

    def keep(self, file: str, obj: Obj) -> None:
        self.gpuq.setdefault(file, []).append(obj)


def original_documents(manifests: Sequence[Manifest]) -> dict[DocumentKey, Any]:
    """``(path, line) -> document`` for every readable file the manifests came from."""
    out: dict[DocumentKey, Any] = {}
    for path in sorted({m.path for m in manifests if m.path != loader.STDIN}):
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError):
            continue
        documents, _ = loader.parse_documents(path, text)
        ignored: list[Diagnostic] = []
        for document in documents:
            for item in loader.expand_lists(document, ignored):
                out.setdefault((item.path, item.line), item.data)
    return out


def _gpuq_file(model: Any, kind: str) -> str | None:
    """The ``gpuq/`` file of a gpuq-only object, or None when it is not one."""
    if isinstance(model, Scenario):
        return None
    if isinstance(model, kueue.Configuration):
        return "kueue-configuration.yaml"
    if isinstance(model, kueue.Workload) and kind == "Workload":
        return "workloads.yaml"
    if isinstance(model, machines.Node) or str(getattr(model, "api_version", "")).startswith("gpuq.dev/"):
        return "machines.yaml"
    return None


def originals(manifests: Sequence[Manifest], companions: Sequence[loader.Document] = ()) -> Originals:
    """Sources to apply (after what they need: DRA objects, training runtimes; a pod group's pods
    beside its first) and gpuq-only objects, first definition of each (kind, namespace, name)."""
    documents = original_documents(manifests)
    out = Originals()
    seen: set[tuple[str, str, str]] = set()
    needed: list[Obj] = []
    for manifest in manifests:
        if isinstance(manifest.model, dra.ResourceSlice):
            out.keep("machines.yaml", _as_written(documents, manifest))
        elif isinstance(manifest.model, dra.DeviceClass | dra.ResourceClaimTemplate | dra.ResourceClaim):
            needed.append(_as_written(documents, manifest))
    runtimes = [c for c in companions if is_runtime(str(c.data.get("apiVersion")), str(c.data.get("kind")))]
    needed += [_without_server_fields(c.data) for c in runtimes]
    group_queues: dict[tuple[str, str], str] = {}
    for manifest in manifests:
        key = (manifest.kind, manifest.namespace, manifest.name)
        if manifest.model is None or key in seen:
            continue
        seen.add(key)
        raw = documents.get((manifest.path, manifest.line))
        is_source = isinstance(manifest.model, kueue.Workload) and manifest.kind != "Workload"
        if is_source and isinstance(raw, dict):
            out.workloads.append(source_object(raw, manifest.model.spec.queue_name))
            if group := group_name(raw):
                group_queues[(manifest.namespace, group)] = manifest.model.spec.queue_name
        elif is_source:
            out.keep("workloads.yaml", _dump(manifest.model))
        elif (file := _gpuq_file(manifest.model, manifest.kind)) is not None:
            out.keep(file, copy.deepcopy(raw) if isinstance(raw, dict) else _dump(manifest.model))
    for companion in companions:
        data = companion.data
        namespace = str((data.get("metadata") or {}).get("namespace") or "default")
        queue = group_queues.get((namespace, group_name(data)))
        if queue is not None:  # a pod of a group whose Workload loaded
            out.workloads.append(source_object(data, queue))
    out.workloads[:0] = needed
    return out


def _as_written(documents: Mapping[DocumentKey, Any], manifest: Manifest) -> Obj:
    """The object as its file has it (without server-set fields), else as parsed (stdin)."""
    raw = documents.get((manifest.path, manifest.line))
    return _without_server_fields(raw) if isinstance(raw, dict) else _dump(manifest.model)


def _without_server_fields(raw: Mapping[str, Any]) -> Obj:
    return source_object(raw, "")


def source_object(raw: Mapping[str, Any], queue_name: str) -> Obj:
    """The source without status or server-set metadata, labelled with its queue."""
    obj = {k: copy.deepcopy(v) for k, v in raw.items() if k != "status"}
    metadata = dict(obj.get("metadata") or {})
    for key in _SERVER_METADATA:
        metadata.pop(key, None)
    if queue_name:
        metadata["labels"] = {**(metadata.get("labels") or {}), QUEUE_LABEL: queue_name}
    obj["metadata"] = metadata
    return obj


def _dump(model: Any) -> Obj:
    dumped: Obj = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return dumped
