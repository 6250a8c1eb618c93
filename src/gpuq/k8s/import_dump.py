"""Reading a ``kubectl get ... -o yaml`` dump: its objects, typed, and stripped of what the server owns.

A dump is one or more YAML (or JSON) documents, usually one ``kind: List``.
Each item becomes a :class:`DumpObject` holding the raw mapping (to write back
out), the typed model gpuq's loader builds from it (to reason about), and where
it was written (for diagnostics). Kinds gpuq does not import are reported and
skipped, never half-read.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from gpuq.api import foreign_kinds, kueue
from gpuq.api.diagnostics import Diagnostic, Manifest
from gpuq.api.loader import Document, expand_lists, parse_documents, read_manifest, workload_role

IMPORTED_KINDS: frozenset[tuple[str, str]] = frozenset(
    {
        ("", "Node"),
        ("", "Namespace"),
        ("scheduling.k8s.io", "PriorityClass"),
        *(
            (kueue.KUEUE_GROUP, kind)
            for kind in (
                "ResourceFlavor",
                "ClusterQueue",
                "LocalQueue",
                "Cohort",
                "WorkloadPriorityClass",
                "Topology",
                "AdmissionCheck",
                "ProvisioningRequestConfig",
                "Workload",
            )
        ),
    }
)
"""(API group, kind) pairs of the cluster's configuration the importer reads; workload sources and
serving objects are read too, as the loader's kind registry says (:func:`gpuq.api.loader.workload_role`);
everything else is skipped with a warning."""

SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "finalizers",
    "ownerReferences",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generateName",
)
"""Metadata the API server or controllers write; an imported object keeps none of it."""
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@dataclass(frozen=True)
class DumpObject:
    """One object of the dump: raw data, typed model (None when it failed to type), and its place."""

    kind: str
    group: str
    namespace: str
    name: str
    data: dict[str, Any]
    manifest: Manifest | None
    role: str = ""  # "source" or "serving" (gpuq.api.loader.workload_role); "" for configuration

    @property
    def ref(self) -> str:
        """``Kind/name`` or ``Kind/namespace/name``, as messages name objects."""
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"

    @property
    def model(self) -> Any:
        return self.manifest.model if self.manifest is not None else None

    def diagnostic(self, field: tuple[str | int, ...], message: str, severity: str = "error") -> Diagnostic:
        """A diagnostic on ``field`` of this object, at its line in the dump."""
        assert self.manifest is not None
        shown = Manifest(
            self.manifest.path,
            self.manifest.line,
            self.kind,
            f"{self.namespace}/{self.name}" if self.namespace else self.name,
            self.namespace,
            None,
            self.manifest.lines,
        )
        return shown.diagnostic(field, message, "warning" if severity == "warning" else "error")


def read_dump(texts: Iterable[tuple[str, str]]) -> tuple[list[DumpObject], list[Diagnostic]]:
    """Every object of the dump, typed by gpuq's loader, and what was wrong with the dump.

    Type errors of imported kinds are errors (the object cannot be imported
    faithfully); unknown kinds are warnings; a dump without objects is an error.
    """
    diagnostics: list[Diagnostic] = []
    objects: list[DumpObject] = []
    read_any = False
    paths: list[str] = []
    ignored: list[foreign_kinds.IgnoredObject] = []
    for path, text in texts:
        paths.append(path)
        documents, errors = parse_documents(path, text)
        diagnostics += errors
        for document in documents:
            for item in expand_lists(document, diagnostics):
                read_any = True
                found = _read_item(item, diagnostics, ignored)
                if found is not None:
                    objects.append(found)
    if not read_any and not any(d.severity == "error" for d in diagnostics):
        where = ", ".join(paths) or "<stdin>"
        diagnostics.append(Diagnostic(where, 1, "", "", "", "the dump holds no objects"))
    if (said := foreign_kinds.summary(ignored)) is not None:  # one line, not one per ConfigMap
        diagnostics.append(Diagnostic(ignored[0].path, ignored[0].line, "", "", "", said, "warning"))
    return objects, diagnostics


def _read_item(
    item: Document, diagnostics: list[Diagnostic], ignored: list[foreign_kinds.IgnoredObject]
) -> DumpObject | None:
    data = item.data
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        _typed(item, diagnostics)  # the loader reports what is missing
        return None
    group, _version = kueue.split_api_version(str(data.get("apiVersion", "")))
    kind = str(data["kind"])
    meta = mapping(data.get("metadata"))
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "")
    role = workload_role(str(data.get("apiVersion", "")), kind) or ""
    if (group, kind) not in IMPORTED_KINDS and not role and foreign_kinds.classify(group, kind) == "ignored":
        ignored.append(foreign_kinds.IgnoredObject(item.path, item.line, kind, name))
        return None
    if (group, kind) not in IMPORTED_KINDS and not role:
        shown = f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
        message = f"{shown} ({data.get('apiVersion')}) is not a kind gpuq imports; skipped"
        diagnostics.append(Diagnostic(item.path, item.line, kind, "", "", message, "warning"))
        return None
    found: list[Diagnostic] = []
    manifest = _typed(item, found)
    if manifest is None and role:  # one bad workload never stops the import: it is left out, said so
        diagnostics += [replace(d, severity="warning", message=f"{d.message}: left out") for d in found]
        return None
    diagnostics += found
    if manifest is None:
        return None
    return DumpObject(kind, group, namespace, name, data, manifest, role)


def mapping(value: object) -> dict[str, Any]:
    """``value`` when it is a mapping, else an empty one (a field a dump may leave out)."""
    return value if isinstance(value, dict) else {}


def _typed(item: Document, diagnostics: list[Diagnostic]) -> Manifest | None:
    """The loader's typed reading; its warnings about fields gpuq ignores are dropped (a live object
    carries many), its errors kept."""
    found: list[Diagnostic] = []
    manifest = read_manifest(item, found)
    diagnostics += [d for d in found if d.severity == "error"]
    return manifest


def cleaned(data: dict[str, Any], *, keep_status: bool = False, keep_created: bool = False) -> dict[str, Any]:
    """A copy without server-managed metadata (and without ``status`` unless ``keep_status``).

    ``keep_created`` keeps ``creationTimestamp``: a Workload's place in its queue depends on it.
    """
    out = copy.deepcopy(data)
    meta = dict(out.get("metadata") or {})
    created = meta.get("creationTimestamp")
    for key in SERVER_METADATA:
        meta.pop(key, None)
    if keep_created and created is not None:
        meta["creationTimestamp"] = created
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    if not meta.get("labels"):
        meta.pop("labels", None)
    out["metadata"] = meta
    if not keep_status:
        out.pop("status", None)
    return out
