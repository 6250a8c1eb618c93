"""Objects written back as the user wrote them: workload sources, and what only gpuq reads.

Workload sources (Job, JobSet, PyTorchJob, RayJob, RayCluster, Pod) are loaded
as the Kueue Workload built from them, so their own text is re-read from the file
the loader named (:func:`original_documents`, with the loader's own parser):
the document is written back without ``status`` and server-set metadata, with
the ``kueue.x-k8s.io/queue-name`` label set to the queue it was loaded with.

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

from gpuq.api import kueue, loader, machines
from gpuq.api.diagnostics import Diagnostic, Manifest
from gpuq.api.scenario import Scenario
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


def originals(manifests: Sequence[Manifest]) -> Originals:
    """Sources to apply and gpuq-only objects, first definition of each (kind, namespace, name)."""
    documents = original_documents(manifests)
    out = Originals()
    seen: set[tuple[str, str, str]] = set()
    for manifest in manifests:
        key = (manifest.kind, manifest.namespace, manifest.name)
        if manifest.model is None or key in seen:
            continue
        seen.add(key)
        raw = documents.get((manifest.path, manifest.line))
        is_source = isinstance(manifest.model, kueue.Workload) and manifest.kind != "Workload"
        if is_source and isinstance(raw, dict):
            out.workloads.append(source_object(raw, manifest.model.spec.queue_name))
        elif is_source:
            out.keep("workloads.yaml", _dump(manifest.model))
        elif (file := _gpuq_file(manifest.model, manifest.kind)) is not None:
            out.keep(file, copy.deepcopy(raw) if isinstance(raw, dict) else _dump(manifest.model))
    return out


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
