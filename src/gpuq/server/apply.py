"""Apply: validate a request's manifests against the stored configuration, then write them all.

A request is one YAML or JSON text of one or many documents (``kind: List`` expanded).
:func:`read_request`, :func:`plan_apply` and :func:`execute` are its steps:

1. read the documents (a syntax error, an empty body, YAML aliases that expand past
   ``loader.MAX_ALIAS_NODES``, also in the YAML a manifest holds in a string (a RayJob's
   ``runtimeEnvYAML``, a RayService's ``serveConfigV2``), or a kind a live control plane
   refuses is a 422 with the loader's diagnostics, file ``<request>``); a document with only
   ``metadata.generateName`` is named here, at random as an API server names it, and the answer
   gives that name; a document of a kind gpuq does not schedule (a ConfigMap, RBAC:
   ``gpuq.api.foreign_kinds``) is answered ``ignored`` and never stored (a request of only those is
   a 422 saying so);
2. (the route authorizes every document's kind and namespace here: 403);
3. validate the documents together with the stored configuration objects through the
   loader, documents replacing the stored objects of the same key: any error (missing
   reference, unknown kind, bad quantity, absent LocalQueue, a request no quota or
   no node of this control plane can hold...) is a 422 naming every finding;
4. decide each document's action without writing: an object is created, configured
   or unchanged; a workload is created, or unchanged when the stored one has the same
   manifest, and any other stored workload of that name is a 409;
5. write: objects first (a workload may name a LocalQueue of the same request), then
   workloads, in request order, each stamped with the ``gpuq.dev/submitted-by`` annotation:
   the authenticated API user's name, whatever the manifest wrote there (a member cannot submit
   in another's name), so runtime history can be kept per user.

Nothing is written unless steps 1-4 pass for every document, so an apply is all or
nothing; only a concurrent writer between steps 3 and 5 can interleave (the store has
no multi-call transaction).

A request of workloads only (a submission, the common case) costs what its workloads cost:
they are checked against the stored configuration as loaded once per version of the
stored objects (:class:`StoredConfiguration`), not against every object read and checked
again, and they are written with one insert each in one transaction, with no read before:
only when the store finds a name taken are the stored workloads of those names read, to
tell an unchanged re-apply (``unchanged``) from a conflict (409).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuq.api import foreign_kinds, generated_names, kueue, machine_checks, sources_derived
from gpuq.api.diagnostics import Diagnostic
from gpuq.api.loader import (
    MAX_DEPTH,
    Document,
    LoadedConfiguration,
    LoadResult,
    expand_lists,
    load_documents,
    load_workloads,
    parse_documents,
    yaml_refusal,
)
from gpuq.api.references import workload_manifests
from gpuq.core.model import Workload
from gpuq.core.nodes import Node
from gpuq.run.store import NewWorkload, ObjectRecord, Store, StoreConflict
from gpuq.server.errors import ApiError
from gpuq.server.kinds import (
    ADMIT_ONLY_SOURCES,
    CLUSTER_KINDS,
    NAMESPACED_KINDS,
    REFUSED_KINDS,
    SERVING_KINDS,
    WORKLOAD,
    document_key,
)
from gpuq.snapshot.manifests import SUBMITTED_BY

REQUEST = "<request>"
STORED_KINDS = frozenset({WORKLOAD, *CLUSTER_KINDS, *NAMESPACED_KINDS, *REFUSED_KINDS})
EMBEDDED_YAML: dict[str, tuple[str, ...]] = {
    "RayJob": ("spec", "runtimeEnvYAML"),
    "RayService": ("spec", "serveConfigV2"),
}
"""String fields holding YAML that gpuq parses later (the loop, the serving reader): bounded here."""
_COSTLY = "the request's YAML is refused: its aliases, recursion or depth would cost too much to read"


@dataclass(frozen=True)
class Item:
    """One document of the request: ``key`` is ``(kind, namespace, name)`` as authorization sees it."""

    document: dict[str, Any]
    line: int
    key: tuple[str, str, str]
    source: Document | None = None  # as read (with its field lines), for validation
    ignored: bool = False  # not scheduled by gpuq (``foreign_kinds``): answered ``ignored``, never stored

    @property
    def kind(self) -> str:
        return str(self.document["kind"])

    @property
    def is_workload(self) -> bool:
        return self.key[0] == WORKLOAD

    def result(self, action: str) -> dict[str, Any]:
        return {"kind": self.kind, "namespace": self.key[1], "name": self.key[2], "action": action}


class StoredConfiguration:
    """The stored configuration objects, loaded once per version of them (their count and newest
    version), so a submission is checked against them without reading and validating every object
    again. Thread-safe: API requests share one.

    The signature is read again when this process changed an object (at once) and otherwise at
    most every ``recheck_s``: an object another replica changed is seen within that, and the
    leader, which checks each workload again as it takes it in, is never misled by a stale view."""

    def __init__(self, recheck_s: float = 1.0) -> None:
        self.recheck_s = recheck_s
        self._lock = threading.Lock()
        self._signature: tuple[int, int] | None = None
        self._checked_at = -math.inf
        self._generation = -1
        self._objects: list[ObjectRecord] = []
        self._loaded: LoadedConfiguration | None = None

    def get(self, store: Store) -> tuple[list[ObjectRecord], LoadedConfiguration | None]:
        """The stored objects and, when they load without error, the loaded configuration."""
        generation = store.objects_generation()
        with self._lock:
            fresh = time.monotonic() - self._checked_at < self.recheck_s
            if fresh and generation == self._generation and self._signature is not None:
                return self._objects, self._loaded
        signature = store.objects_signature()
        with self._lock:
            if signature == self._signature:
                self._checked_at, self._generation = time.monotonic(), generation
                return self._objects, self._loaded
        objects = store.list_objects()
        result = load_documents([_stored_document(o) for o in objects], [], strict=True)
        loaded = LoadedConfiguration.of(result)
        with self._lock:  # what was read and when together: a concurrent reader never pairs them wrong
            self._signature, self._objects, self._loaded = signature, objects, loaded
            self._checked_at, self._generation = time.monotonic(), generation
        return objects, loaded


def _stored_document(record: ObjectRecord) -> Document:
    where = f"{record.namespace}/" if record.namespace else ""
    return Document(f"<stored {record.kind}/{where}{record.name}>", 1, record.manifest, {})


@dataclass(frozen=True)
class Planned:
    """A validated item with its action and, for a workload, its queue and resolved priority."""

    item: Item
    action: str  # created | configured | unchanged
    queue: str = ""
    priority: int = 0


def read_request(text: str) -> list[Item]:
    """Step 1: the documents of ``text``, each with a key; unreadable ones are left to step 3."""
    documents, errors = request_documents(text)
    if errors:
        costly = any(e.message.endswith(": refused") for e in errors)  # loader.YamlRefused
        raise ApiError(422, _COSTLY if costly else "the request is not valid YAML or JSON", errors)
    diagnostics: list[Diagnostic] = []
    embedded: list[Diagnostic] = []
    items: list[Item] = []
    for document in documents:
        for part in expand_lists(document, diagnostics):
            part = _named(part)
            data = part.data
            if (refusal := sources_derived.live_refusal(data)) is not None:  # admit and simulate only
                name = str((data.get("metadata") or {}).get("name") or "")
                diagnostics.append(Diagnostic(REQUEST, part.line, str(data["kind"]), name, "kind", refusal))
                continue
            if (ignored := _ignored_item(part)) is not None:
                items.append(ignored)
                continue
            key = document_key(data)
            refused = str(data.get("kind")) if isinstance(data, dict) else ""
            if key is not None and refused in ADMIT_ONLY_SOURCES:
                diagnostics.append(
                    Diagnostic(REQUEST, part.line, refused, key[2], "kind", ADMIT_ONLY_SOURCES[refused])
                )
                continue
            if key is None or not isinstance(data, dict) or key[0] not in STORED_KINDS:
                diagnostics += _not_read(part)
                items.append(Item({}, part.line, ("", "", "")))  # unknown: the loader says what is wrong
                continue
            kind = str(data["kind"])
            if kind in REFUSED_KINDS and kueue.model_for(str(data.get("apiVersion", "")), kind) is not None:
                diagnostics.append(Diagnostic(REQUEST, part.line, kind, key[2], "kind", REFUSED_KINDS[kind]))
            embedded += _embedded_yaml(part, kind, key[2])
            items.append(Item(_normalized(data), part.line, key, part))
    if embedded:
        raise ApiError(422, _COSTLY, embedded)
    seen: dict[tuple[str, str, str], Item] = {}
    for item in items:
        first = seen.setdefault(item.key, item)
        if item.is_workload and first is not item:  # a Job and a PyTorchJob of one name, say
            where = f"also defined at {REQUEST}:{first.line}"
            diagnostics.append(
                Diagnostic(REQUEST, item.line, item.kind, item.key[2], "", f"duplicate workload: {where}")
            )
    if diagnostics:
        raise ApiError(422, "the request has documents a control plane does not store", diagnostics)
    if not items:
        raise ApiError(422, "the request holds no document")
    return items


def _ignored_item(part: Document) -> Item | None:
    """An :class:`Item` marked ``ignored`` for a document of a kind gpuq does not schedule (a ConfigMap,
    RBAC...: ``foreign_kinds.classify``), else None."""
    data = part.data
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        return None
    api_version, kind = str(data.get("apiVersion") or ""), str(data["kind"])
    if kueue.model_for(api_version, kind) is not None or kind in STORED_KINDS:
        return None
    if foreign_kinds.classify(kueue.split_api_version(api_version)[0], kind) != "ignored":
        return None
    metadata = data.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    key = (kind, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
    return Item(data, part.line, key, part, ignored=True)


def _not_read(part: Document) -> list[Diagnostic]:
    """A document of a kind no reader of gpuq takes, which the loader only warns of (another project's
    kind): an error here, where nothing half-read is stored."""
    data = part.data
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        return []
    api_version, kind = str(data.get("apiVersion") or ""), str(data["kind"])
    group = kueue.split_api_version(api_version)[0]
    if kueue.model_for(api_version, kind) is not None or foreign_kinds.classify(group, kind) != "warning":
        return []
    metadata = data.get("metadata")
    name = str(metadata.get("name") or "") if isinstance(metadata, dict) else ""
    message = f"unknown kind {kind!r} in apiVersion {api_version!r}: gpuq does not read it"
    return [Diagnostic(REQUEST, part.line, kind, name, "kind", message)]


def _named(part: Document) -> Document:
    """``part`` with the name the server generates for ``metadata.generateName`` (random, as an API
    server draws it: ``generated_names.random_name``); the answer's ``name`` is that name."""
    prefix = generated_names.generate_name_of(part.data)
    if prefix is None:
        return part
    lines = {**part.lines, ("metadata", "name"): part.line_of(("metadata", "generateName"))}
    return Document(
        part.path, part.line, generated_names.named(part.data, generated_names.random_name(prefix)), lines
    )


def request_documents(text: str) -> tuple[list[Document], list[Diagnostic]]:
    """The request's documents: a JSON body (what clients send) read as JSON, without field lines,
    and refused past the loader's depth as YAML would be; anything else read as YAML."""
    if not text.lstrip().startswith(("{", "[")):
        return parse_documents(REQUEST, text)
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return parse_documents(REQUEST, text)  # YAML reads what JSON does not, and says where it fails
    if _deeper_than(data, MAX_DEPTH):
        message = f"nested deeper than {MAX_DEPTH} levels: refused"
        return [], [Diagnostic(REQUEST, 1, "", "", "", message)]
    return ([Document(REQUEST, 1, data, {})] if data is not None else []), []


def _deeper_than(data: Any, limit: int) -> bool:
    """Whether ``data`` nests containers more than ``limit`` deep (iteratively: no recursion limit)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                return True
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return False


def _embedded_yaml(part: Document, kind: str, name: str) -> list[Diagnostic]:
    """The YAML a manifest holds in a string field (:data:`EMBEDDED_YAML`), refused as a request's own
    YAML would be when its aliases expand past the loader's bound (line: the field's)."""
    path = EMBEDDED_YAML.get(kind)
    value: Any = part.data
    for step in path or ():
        value = value.get(step) if isinstance(value, dict) else None
    if path is None or not isinstance(value, str):
        return []
    refused = yaml_refusal(value)
    if refused is None:
        return []
    line, message = refused
    field = ".".join(path)
    where = f"{message} (line {line} of the YAML in {field})"
    return [Diagnostic(REQUEST, part.line_of(path), kind, name, field, where)]


def _normalized(document: dict[str, Any]) -> dict[str, Any]:
    """The document as stored: namespaced kinds get ``default``, cluster-scoped ones lose theirs."""
    out = copy.deepcopy(document)
    key = document_key(document)
    assert key is not None
    metadata = out["metadata"]
    if key[1]:
        metadata["namespace"] = key[1]
    else:
        metadata.pop("namespace", None)
    return out


def plan_apply(
    store: Store,
    items: Sequence[Item],
    text: str,
    nodes: Sequence[Node],
    configuration: StoredConfiguration | None = None,
) -> tuple[list[Planned], list[Diagnostic]]:
    """Steps 3 and 4: every item's action and the request's warnings, or an :class:`ApiError` (422, 409).

    A request of workloads only is planned as created without reading the store: :func:`execute`
    learns from the insert whether a name is taken (then unchanged, or 409)."""
    ignored = [Planned(item, "ignored") for item in items if item.ignored]
    items = [item for item in items if not item.ignored]
    if not items:
        shown = foreign_kinds.summary(
            foreign_kinds.IgnoredObject(REQUEST, p.item.line, p.item.kind, p.item.key[2]) for p in ignored
        )
        raise ApiError(422, f"nothing to apply: {shown}; a control plane stores only what gpuq schedules")
    workloads, warnings = validate(store, items, text, nodes, configuration)
    if any(not item.key[0] for item in items):  # the loader reports these; never reached in practice
        raise ApiError(422, "a document has no kind or metadata.name")
    if all(item.is_workload for item in items):
        planned_workloads = []
        for item in items:
            workload = workloads[(item.key[1], item.key[2])]
            planned_workloads.append(Planned(item, "created", workload.queue_name, workload.priority))
        return [*planned_workloads, *ignored], warnings
    planned: list[Planned] = []
    conflicts: list[str] = []
    for item in items:
        kind, namespace, name = item.key
        if not item.is_workload:
            stored = store.get_object(kind, name, namespace)
            same = stored is not None and stored.manifest == _as_stored(item.document)
            action = "created" if stored is None else "unchanged" if same else "configured"
            planned.append(Planned(item, action))
            continue
        workload = workloads[(namespace, name)]
        existing = store.get_workload(namespace, name)
        if existing is not None and existing.manifest != _as_stored(
            stamped(item.document, _stamp_of(existing.manifest))
        ):
            conflicts.append(
                f"workload {namespace}/{name} already exists ({existing.state}) with another spec; "
                "delete it first or choose another name"
            )
        action = "created" if existing is None else "unchanged"
        planned.append(Planned(item, action, workload.queue_name, workload.priority))
    if conflicts:
        raise ApiError(409, "; ".join(conflicts))
    return [*planned, *ignored], warnings


def validate(
    store: Store,
    items: Sequence[Item],
    text: str,
    nodes: Sequence[Node],
    configuration: StoredConfiguration | None = None,
) -> tuple[dict[tuple[str, str], Workload], list[Diagnostic]]:
    """Load the request with the stored configuration: its workloads by (namespace, source name).

    Returns them and the loader's warnings about the request; raises 422 with every error, those
    about stored objects included (a request must not build on a broken configuration).
    Pods no node of this control plane could hold are errors here, not warnings: the
    nodes are known, and such a workload would wait for ever. A request of workloads only is
    checked against ``configuration`` when the stored objects load (:func:`load_workloads`).
    """
    sources = [item.source for item in items]
    request, parse_errors = (
        ([s for s in sources if s is not None], []) if all(sources) else parse_documents(REQUEST, text)
    )
    configuration = configuration or StoredConfiguration()
    objects, loaded = configuration.get(store)
    result: LoadResult | None = None
    if loaded is not None and not parse_errors and all(item.is_workload for item in items):
        result = load_workloads(loaded, request, strict=True)
    if result is None:  # as gpuq validate: see docs/serve.md
        replaced = {item.key for item in items}
        stored = [_stored_document(o) for o in objects if (o.kind, o.namespace, o.name) not in replaced]
        result = load_documents([*stored, *request], list(parse_errors), strict=True)
    errors = list(result.errors)
    if not errors:
        errors += [
            dataclasses.replace(d, severity="error", message=f"{d.message} (on this control plane's nodes)")
            for d in machine_checks.oversized_pods(result.manifests, result.workloads, nodes)
        ]
    if errors:
        message = f"the manifests are not valid ({len(errors)} error(s)); nothing was applied"
        raise ApiError(422, message, errors)
    by_key = workload_manifests(result.manifests)
    workloads: dict[tuple[str, str], Workload] = {}
    for workload in result.workloads:
        manifest = by_key.get((workload.namespace, workload.name))
        # a Deployment's or StatefulSet's pod workloads are admit's: live, the service controller runs them
        if manifest is not None and manifest.path == REQUEST and manifest.kind not in SERVING_KINDS:
            workloads[(workload.namespace, manifest.name)] = workload
    return workloads, [d for d in result.warnings if d.path == REQUEST]


def execute(
    store: Store, planned: Sequence[Planned], *, now: float | None = None, user: str = ""
) -> list[dict[str, Any]]:
    """Step 5: write what changes; the results in request order with the actions really taken.

    ``user``: the API user submitting, stamped into new workloads (see :func:`stamped`)."""
    now = time.time() if now is None else now
    ignored = [plan.item.result("ignored") for plan in planned if plan.item.ignored]
    planned = [plan for plan in planned if not plan.item.ignored]
    if planned and all(plan.item.is_workload for plan in planned):
        return [*_submit(store, planned, now, user), *ignored]
    actions: dict[int, str] = {}
    for index, plan in enumerate(planned):
        if not plan.item.is_workload:
            actions[index], _ = store.apply_object(plan.item.document, now=now)
    for index, plan in enumerate(planned):
        if plan.item.is_workload:
            actions[index] = plan.action
            if plan.action == "created":
                _, namespace, name = plan.item.key
                try:
                    document = stamped(plan.item.document, user)
                    store.add_workload(
                        namespace, name, plan.queue, plan.item.kind, document, plan.priority, now
                    )
                except StoreConflict as error:  # submitted by someone else since step 4
                    raise ApiError(409, f"{error}; the documents before it were applied") from error
    return [*(plan.item.result(actions[index]) for index, plan in enumerate(planned)), *ignored]


def _submit(store: Store, planned: Sequence[Planned], now: float, user: str) -> list[dict[str, Any]]:
    """Step 5 of a request of workloads only: one insert each, in one transaction. When a name is
    taken, the stored workloads are read: the same manifest again is ``unchanged``, another is a 409
    (nothing written); the others are then inserted."""
    documents = [stamped(plan.item.document, user) for plan in planned]
    new = [_new_workload(plan, document, now) for plan, document in zip(planned, documents, strict=True)]
    try:
        store.add_workloads(new)
        return [plan.item.result("created") for plan in planned]
    except StoreConflict:
        pass
    actions: list[str] = []
    conflicts: list[str] = []
    for plan in planned:
        _, namespace, name = plan.item.key
        existing = store.get_workload(namespace, name)
        if existing is None:
            actions.append("created")
        elif existing.manifest == _as_stored(stamped(plan.item.document, _stamp_of(existing.manifest))):
            actions.append("unchanged")
        else:
            conflicts.append(
                f"workload {namespace}/{name} already exists ({existing.state}) with another spec; "
                "delete it first or choose another name"
            )
    if conflicts:
        raise ApiError(409, "; ".join(conflicts))
    try:
        store.add_workloads([w for w, action in zip(new, actions, strict=True) if action == "created"])
    except StoreConflict as error:  # submitted by someone else meanwhile
        raise ApiError(409, f"{error}; nothing was applied") from error
    return [plan.item.result(action) for plan, action in zip(planned, actions, strict=True)]


def _new_workload(plan: Planned, document: dict[str, Any], now: float) -> NewWorkload:
    _, namespace, name = plan.item.key
    return NewWorkload(namespace, name, plan.queue, plan.item.kind, document, plan.priority, now)


def _as_stored(document: dict[str, Any]) -> Any:
    """What the store would hand back for ``document`` (JSON round trip: lists, not tuples)."""
    return json.loads(json.dumps(document))


def stamped(document: dict[str, Any], user: str) -> dict[str, Any]:
    """``document`` with ``gpuq.dev/submitted-by: user``, the authenticated user, replacing whatever the
    manifest wrote there; without a user, without the annotation. Never taken from the manifest."""
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        return document
    found = metadata.get("annotations")
    annotations: dict[str, Any] = found if isinstance(found, dict) else {}
    if (SUBMITTED_BY in annotations) == bool(user) and annotations.get(SUBMITTED_BY, user) == user:
        return document
    out = copy.deepcopy(document)
    kept = {k: v for k, v in annotations.items() if k != SUBMITTED_BY}
    out["metadata"]["annotations"] = {**kept, SUBMITTED_BY: user} if user else kept
    return out


def _stamp_of(manifest: dict[str, Any]) -> str:
    """The submitter a stored manifest was stamped with: a re-apply of the unstamped file is unchanged."""
    annotations = (manifest.get("metadata") or {}).get("annotations")
    return str(annotations.get(SUBMITTED_BY, "")) if isinstance(annotations, dict) else ""
