"""Reading manifests: files, directories and stdin into validated core objects.

:func:`load` is the public entry point. Its steps:

1. collect the inputs (files; directories recursively, ``*.yaml``, ``*.yml``,
   ``*.json`` in sorted order; ``-`` for stdin, shown as ``<stdin>``);
2. split each into documents, remembering the line of every field
   (``kind: List`` documents are expanded; empty documents are skipped, and an input with no
   document at all is a :data:`NO_OBJECTS` warning); a text whose
   YAML aliases would expand it past :data:`MAX_ALIAS_NODES` nodes (a "billion laughs"),
   whose aliases recurse, or that nests deeper than :data:`MAX_DEPTH` is refused with one
   diagnostic before anything walks it; a document with only ``metadata.generateName`` gets the
   name an API server would give it, deterministic here (:func:`name_documents`);
3. turn each document into a typed model (:mod:`gpuq.api.kueue`), workload
   sources through :mod:`gpuq.api.sources`; type errors become error
   diagnostics, unknown fields warnings; sources without a queue-name label get
   Kueue's queue defaulting (:mod:`gpuq.api.queue_defaulting`);
4. run the per-object and whole-configuration checks (:mod:`gpuq.api.validation`);
   and the machine checks (:mod:`gpuq.api.machine_checks`);
5. convert to the core model (:mod:`gpuq.api.convert`, machines by :mod:`gpuq.api.nodes_convert`)
   and run the checks that read it (capacity, placement, oversized pods); when errors were found,
   only the objects no error names are converted, for those checks alone, so that a directory
   reports every finding its files report one by one.

Nothing loads half-valid: one error anywhere and ``config`` is None. A workload Kueue would
keep pending for ever (its LocalQueue does not exist, it can never fit its ClusterQueue) is
not an error but a ``stays_pending`` warning and loads, unless ``strict`` (``gpuq validate``)
makes it an error (:func:`gpuq.api.diagnostics.as_loaded`).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TextIO

import yaml
from pydantic import BaseModel, ValidationError

from gpuq.api import (
    compute_class,
    convert,
    dra,
    dra_checks,
    foreign_kinds,
    frameworks,
    generated_names,
    kueue,
    machine_checks,
    nodes_convert,
    queue_defaulting,
    ray_sources,
    references,
    serving,
    sources_derived,
    sources_pods,
    validation,
)
from gpuq.api import scenario as _scenario  # noqa: F401  (registers the Scenario kind)
from gpuq.api.diagnostics import (
    Diagnostic,
    FieldPath,
    Manifest,
    ManifestError,
    Severity,
    as_loaded,
    format_field_path,
    sort_diagnostics,
)
from gpuq.api.fields import unknown_fields, unknown_raw_fields
from gpuq.api.names import dns_subdomain_problem, source_document_problems
from gpuq.api.nodes_convert import NodePoolSummary
from gpuq.api.source_fields import QUEUE_LABEL, NotManaged, SourceError, template_aliases
from gpuq.api.sources import to_workload
from gpuq.api.trainjob_sources import RuntimeMissing, SourceContext, is_runtime
from gpuq.core.gpus import DEFAULT_CATALOGUE, GPUCatalogue
from gpuq.core.model import ClusterConfig, Workload
from gpuq.core.nodes import Node
from gpuq.core.quota import QuotaTree

STDIN = "<stdin>"
SUFFIXES = (".yaml", ".yml", ".json")
_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_ALIAS_NODES = 10_000
"""Nodes YAML aliases may add to one text, all its documents together (each use of an alias counts
its anchor's whole subtree again): past it the text is refused, in milliseconds, rather than expanded
by whatever walks it next (a 620-byte "billion laughs" expands to 10^9 nodes)."""
MAX_DEPTH = 100
"""Deepest nesting of collections a YAML text may have (Kubernetes manifests need about 15)."""
NO_OBJECTS = "no Kubernetes objects (the file is empty, or holds only comments, '---' or null documents)"
"""The warning for an input with nothing to read: a file given to validate is meant to say something."""
FOREIGN_KINDS = foreign_kinds.IGNORED_KINDS
"""(API group, kind) of objects that decide nothing gpuq schedules (ConfigMaps, RBAC, what ``gpuq export
k8s`` writes beside the configuration...): listed in :attr:`LoadResult.ignored`, never errors."""


@dataclass(frozen=True)
class CronJobSource:
    """A CronJob as written, and the key (namespace, name) of the Workload of its next Job."""

    path: str
    line: int
    data: Mapping[str, Any] = field(repr=False)
    workload_key: tuple[str, str] = ("", "")


@dataclass(frozen=True)
class LoadResult:
    """What :func:`load` read. ``config`` is None and ``workloads``, ``nodes`` and ``node_pools``
    empty when any error exists.

    ``nodes`` are the NodePools' generated nodes and the ``v1`` Nodes, sorted by
    name; ``node_pools`` one summary per NodePool, sorted by name;
    ``gpu_catalogue`` the built-in GPU models plus the GPUModel objects.
    """

    config: ClusterConfig | None
    workloads: tuple[Workload, ...]
    diagnostics: tuple[Diagnostic, ...]
    manifests: tuple[Manifest, ...] = field(default=(), repr=False)
    nodes: tuple[Node, ...] = ()
    node_pools: tuple[NodePoolSummary, ...] = ()
    gpu_catalogue: GPUCatalogue = field(default=DEFAULT_CATALOGUE, repr=False)
    ignored: tuple[foreign_kinds.IgnoredObject, ...] = ()
    """Objects not scheduled by gpuq (:mod:`gpuq.api.foreign_kinds`), in input order: the verbs print
    :attr:`ignored_summary`."""
    cron_jobs: tuple[CronJobSource, ...] = ()
    """The CronJobs read, each with the Workload of the Job it creates next (in :attr:`workloads`):
    ``gpuq simulate`` creates their Jobs on their schedules (:mod:`gpuq.sim.cron_jobs`)."""
    companions: tuple[Document, ...] = field(default=(), repr=False)
    """Documents that make no Workload of their own but belong to one: the pods of a pod group after
    the first (whose document carries the group's Workload), and the training runtimes TrainJobs
    read. ``gpuq export k8s`` writes them back as written, beside their workloads."""

    @property
    def ignored_summary(self) -> str | None:
        """One line counting :attr:`ignored` by kind, or None."""
        return foreign_kinds.summary(self.ignored)

    @property
    def foreign_notes(self) -> tuple[str, ...]:
        """What the verbs that print no warnings still say about the input: :attr:`ignored_summary`
        and the warnings about kinds gpuq does not read (skipped, :func:`foreign_kinds.classify`)."""
        skipped = [str(d) for d in self.warnings if d.field == "kind"]
        return (*([self.ignored_summary] if self.ignored_summary else []), *skipped)

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "warning")


@dataclass(frozen=True)
class Document:
    """One YAML/JSON document: its data and the 1-based line of each field path."""

    path: str
    line: int
    data: Any
    lines: dict[FieldPath, int]

    def line_of(self, parts: FieldPath) -> int:
        return self.lines.get(parts, self.line)


def load(
    paths: Sequence[str],
    stdin: TextIO | None = None,
    *,
    strict: bool = False,
    cache: dict[str, str] | None = None,
    name_seed: int = 0,
) -> LoadResult:
    """Read every manifest under ``paths`` and return the configuration, workloads and diagnostics.

    Diagnostics of all files (errors and warnings) are sorted by ``(path, line)``. ``strict``
    (``gpuq validate``) makes the ``stays_pending`` findings errors; otherwise they are warnings
    and their workloads load (and stay pending, as Kueue leaves them). ``name_seed`` seeds the
    names of documents with ``metadata.generateName`` (:func:`name_documents`).
    """
    diagnostics: list[Diagnostic] = []
    texts = _read_inputs(paths, stdin, diagnostics, cache)
    return load_texts(texts, diagnostics, strict=strict, name_seed=name_seed)


def load_texts(
    texts: Iterable[tuple[str, str]],
    diagnostics: list[Diagnostic] | None = None,
    *,
    strict: bool = False,
    name_seed: int = 0,
) -> LoadResult:
    """:func:`load` for documents already in memory: ``(display path, YAML or JSON text)`` pairs, as a
    control plane holds the objects it was given."""
    diagnostics = diagnostics if diagnostics is not None else []
    documents: list[Document] = []
    for path, text in texts:
        parsed, errors = parse_documents(path, text)
        diagnostics += errors or ([] if parsed else [Diagnostic(path, 1, "", "", "", NO_OBJECTS, "warning")])
        documents += parsed
    return load_documents(documents, diagnostics, strict=strict, name_seed=name_seed)


def load_objects(objects: Iterable[tuple[str, Mapping[str, Any]]], *, strict: bool = False) -> LoadResult:
    """:func:`load` for objects a store already holds as data, ``(display path, object)`` pairs: read
    once, never written out as YAML to be parsed again (no field lines: they have no file)."""
    documents = [Document(path, 1, dict(data), {}) for path, data in objects]
    return load_documents(documents, [], strict=strict)


def load_documents(
    documents: Iterable[Document], diagnostics: list[Diagnostic], *, strict: bool = False, name_seed: int = 0
) -> LoadResult:
    """Steps 2 onwards of :func:`load`: documents become manifests, are checked and converted."""
    manifests: list[Manifest] = []
    broken: list[references.ObjectKey] = []
    ignored: list[foreign_kinds.IgnoredObject] = []
    items = [item for document in documents for item in expand_lists(document, diagnostics)]
    items = list(name_documents(items, name_seed))  # generateName first: pod groups, runtimes see names
    kueue_config = _configuration(items)
    context = SourceContext.of(item.data for item in items)  # the second pass reads sources against it
    derived: list[Document] = []  # read together: a pod group's pods, a Tekton run and its Pipeline
    cron_jobs: list[CronJobSource] = []
    for item in items:
        if _unmanaged(item, kueue_config, diagnostics):
            continue
        if sources_derived.is_derived(item.data):
            derived.append(item)
            continue
        manifest = read_manifest(item, diagnostics, broken, context, ignored)
        if manifest is not None:
            manifests.append(manifest)
            manifests += _serving_pod_workloads(item, manifest, kueue_config, diagnostics, broken)
    manifests += _derived_manifests(derived, diagnostics, broken, ignored, cron_jobs)
    manifests, unqueued = queue_defaulting.default_queues(manifests)
    manifests = compute_class.unshadowed(manifests)
    diagnostics += unqueued
    for manifest in manifests:
        diagnostics += validation.validate_object(manifest)
    diagnostics += references.validate_references(manifests, broken)
    diagnostics += dra_checks.review(manifests)
    diagnostics += serving.validate_services(manifests)
    diagnostics += machine_checks.validate_machines(manifests)
    diagnostics = [as_loaded(d, strict) for d in diagnostics]
    blocking = [d for d in diagnostics if d.severity == "error" and not d.stays_pending]  # the others convert
    if blocking:
        diagnostics += _converted_checks(_untouched(manifests, blocking), strict)[2]
        return LoadResult(None, (), sort_diagnostics(diagnostics), tuple(manifests), ignored=tuple(ignored))
    (config, workloads), found, checked = _converted_checks(manifests, strict)
    diagnostics += checked
    if any(d.severity == "error" for d in diagnostics):
        return LoadResult(None, (), sort_diagnostics(diagnostics), tuple(manifests), ignored=tuple(ignored))
    return LoadResult(
        config,
        tuple(workloads),
        sort_diagnostics(diagnostics),
        tuple(manifests),
        found.nodes,
        found.node_pools,
        found.catalogue,
        tuple(ignored),
        tuple(cron_jobs),
        _companions(items, derived),
    )


def _converted_checks(
    manifests: Sequence[Manifest], strict: bool
) -> tuple[tuple[ClusterConfig, tuple[Workload, ...]], nodes_convert.Machines, list[Diagnostic]]:
    """Step 5: ``manifests`` converted, and the checks that read the converted model (capacity,
    placement on the nodes, pods larger than every node)."""
    config, workloads = convert.convert(manifests)
    found = nodes_convert.convert_machines(manifests)
    checked = [as_loaded(d, strict) for d in references.validate_capacity(manifests, config, workloads)]
    checked += machine_checks.placement_warnings(manifests, config, found.nodes)
    checked += machine_checks.oversized_pods(manifests, workloads, found.nodes)
    return (config, workloads), found, checked


def _untouched(manifests: Sequence[Manifest], errors: Sequence[Diagnostic]) -> list[Manifest]:
    """The manifests no error names (by file, kind and name; a duplicate is no fault of the object, the
    first definition converts). They convert even when other objects failed, so that a directory
    reports the capacity findings each of its files reports alone: a Job that no ClusterQueue can
    ever hold is not hidden by a broken object in another file."""
    named = {(d.path, d.kind, d.name) for d in errors if d.kind and not references.is_duplicate(d)}
    return [m for m in manifests if (m.path, m.kind, m.name) not in named]


@dataclass(frozen=True)
class LoadedConfiguration:
    """A configuration loaded without errors, ready for :func:`load_workloads` to add workloads to:
    what every workload is checked against, computed once (a control plane's API keeps one per
    version of its stored objects)."""

    result: LoadResult
    index: references.Index
    defaults: queue_defaulting.QueueDefaults
    priorities: convert.PriorityTable
    tree: QuotaTree
    claims: dra.DraContext = field(default_factory=dra.DraContext)

    @classmethod
    def of(cls, result: LoadResult) -> LoadedConfiguration | None:
        """None when ``result`` has errors, or workloads (only a configuration's objects are kept)."""
        if result.config is None or result.errors or result.workloads:
            return None
        models = [m.model for m in result.manifests]
        return cls(
            result,
            references.index_manifests(result.manifests),
            queue_defaulting.QueueDefaults.from_models(models),
            convert.PriorityTable.from_models(models),
            QuotaTree(result.config),
            dra.DraContext.from_models(models),
        )


def load_workloads(
    base: LoadedConfiguration, documents: Iterable[Document], *, strict: bool = False
) -> LoadResult | None:
    """:func:`load_documents` of ``base``'s objects plus ``documents``, when every document is a
    workload source: only the new documents are read, defaulted, validated and converted, and only
    their references and capacity are checked, so the cost is that of the workloads, not of the
    configuration. None when a document is not a workload (load everything instead)."""
    diagnostics: list[Diagnostic] = []
    broken: list[references.ObjectKey] = []
    manifests: list[Manifest] = []
    kueue_config = base.claims.config
    items = [item for document in documents for item in expand_lists(document, diagnostics)]
    for item in name_documents(items):
        if _unmanaged(item, kueue_config, diagnostics):
            continue
        if isinstance(item.data, dict) and is_runtime(
            str(item.data.get("apiVersion")), str(item.data.get("kind"))
        ):
            return None  # a TrainJob's runtime: other sources may need it, load everything
        if sources_derived.is_derived(item.data):
            return None
        manifest = read_manifest(item, diagnostics, broken)
        if manifest is not None and not isinstance(manifest.model, kueue.Workload):
            return None
        if manifest is not None:
            manifests.append(manifest)
    if broken and any(kind is not kueue.Workload for kind, _, _ in broken):
        return None
    manifests, unqueued = queue_defaulting.default_queues(manifests, base.defaults)
    diagnostics += unqueued
    for manifest in manifests:
        diagnostics += validation.validate_object(manifest)
    diagnostics += references.validate_workload_references(base.index, manifests)
    diagnostics += dra_checks.review(manifests, base.claims)
    diagnostics = [as_loaded(d, strict) for d in diagnostics]
    every = (*base.result.manifests, *manifests)
    if any(d.severity == "error" and not d.stays_pending for d in diagnostics):
        return LoadResult(None, (), sort_diagnostics(diagnostics), every)
    config = base.result.config
    assert config is not None
    workloads = tuple(convert.workload(m.model, base.priorities, base.claims) for m in manifests)
    found = base.result
    diagnostics += [
        as_loaded(d, strict) for d in references.validate_capacity(manifests, config, workloads, base.tree)
    ]
    diagnostics += machine_checks.oversized_pods(manifests, workloads, found.nodes)
    if any(d.severity == "error" for d in diagnostics):
        return LoadResult(None, (), sort_diagnostics(diagnostics), every)
    return LoadResult(
        config,
        workloads,
        sort_diagnostics(diagnostics),
        every,
        found.nodes,
        found.node_pools,
        found.gpu_catalogue,
    )


def load_or_raise(
    paths: Sequence[str], stdin: TextIO | None = None, *, strict: bool = False
) -> tuple[ClusterConfig, tuple[Workload, ...]]:
    """Like :func:`load`, but raise :class:`ManifestError` (with every diagnostic) on any error."""
    result = load(paths, stdin, strict=strict)
    if result.config is None:
        raise ManifestError(result.diagnostics)
    return result.config, result.workloads


# --- step 1: inputs -------------------------------------------------------------------------


def _read_inputs(
    paths: Sequence[str],
    stdin: TextIO | None,
    diagnostics: list[Diagnostic],
    cache: dict[str, str] | None = None,
) -> Iterator[tuple[str, str]]:
    """Yield ``(display path, text)`` for every input; unreadable inputs become diagnostics.

    ``cache`` (path -> text) keeps what was read, so a caller that loads the same files again (a
    simulation's variants) reads each file once."""
    for path in paths:
        if path == "-":
            yield STDIN, (stdin or sys.stdin).read()
            continue
        for file in expand_path(path):
            if cache is not None and file in cache:
                yield file, cache[file]
                continue
            try:
                with open(file, encoding="utf-8") as handle:
                    text = handle.read()
                if cache is not None:
                    cache[file] = text
                yield file, text
            except (OSError, UnicodeDecodeError) as err:
                diagnostics.append(Diagnostic(file, 0, "", "", "", f"cannot read: {err}"))


def expand_path(path: str) -> list[str]:
    """A file, or every manifest file under a directory (sorted, recursive)."""
    if not os.path.isdir(path):
        return [path]
    found = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        found += [os.path.join(root, f) for f in files if f.endswith(SUFFIXES)]
    return sorted(found)


# --- step 2: documents ----------------------------------------------------------------------


class YamlRefused(yaml.MarkedYAMLError):
    """A YAML text refused for what reading it would cost (:data:`MAX_ALIAS_NODES`, :data:`MAX_DEPTH`,
    recursive aliases); ``problem`` says which, ``problem_mark`` where."""


def parse_documents(path: str, text: str) -> tuple[list[Document], list[Diagnostic]]:
    """Split ``text`` into documents with field lines; a syntax error gives one diagnostic, and so
    does a text refused for its aliases or depth (:class:`YamlRefused`).

    JSON files that YAML cannot read (tabs, for instance) are read as JSON without field lines.
    """
    try:
        return list(_yaml_documents(path, text)), []
    except YamlRefused as err:
        line = err.problem_mark.line + 1 if err.problem_mark is not None else 1
        return [], [Diagnostic(path, line, "", "", "", str(err.problem))]
    except yaml.YAMLError as err:
        if path.endswith(".json"):
            return _json_document(path, text)
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(err, "problem", None) or str(err)
        return [], [Diagnostic(path, line, "", "", "", f"malformed YAML: {problem}")]


def yaml_refusal(text: str) -> tuple[int, str] | None:
    """``(line, message)`` when :func:`parse_documents` would refuse ``text`` for its aliases or depth,
    else None (a syntax error included: it is left to whoever reads the text). For YAML held in a
    string field of a manifest (a RayJob's ``runtimeEnvYAML``), which something parses later."""
    loader = _YamlLoader(text)
    budget = _AliasBudget()
    try:
        while loader.check_node():
            budget.check(loader.get_node())
    except YamlRefused as err:
        return (err.problem_mark.line + 1 if err.problem_mark is not None else 1), str(err.problem)
    except yaml.YAMLError:
        return None
    finally:
        loader.dispose()
    return None


class _AliasBudget:
    """What aliases add to one text's documents, and the checks of :data:`MAX_ALIAS_NODES` and
    :data:`MAX_DEPTH`; linear in the distinct nodes (each subtree's expanded size is counted once)."""

    def __init__(self, limit: int = MAX_ALIAS_NODES, depth: int = MAX_DEPTH) -> None:
        self.limit = limit
        self.depth = depth
        self.added = 0

    def check(self, root: yaml.Node) -> None:
        """Raise :class:`YamlRefused` when ``root``'s document breaks a bound (this text's aliases so far
        included)."""
        self._sizes: dict[int, int] = {}  # id(node) -> expanded size; the nodes live as long as root
        self._open: set[int] = set()
        self._size(root, 0, root.start_mark)

    def _size(self, node: yaml.Node, depth: int, where: Any) -> int:
        key = id(node)
        known = self._sizes.get(key)
        if known is not None:  # a second use of the node: an alias
            self.added += known
            if self.added > self.limit:
                raise YamlRefused(
                    problem=f"YAML aliases expand past {self.limit} nodes: refused", problem_mark=where
                )
            return known
        if key in self._open:
            raise YamlRefused(
                problem="a YAML alias refers to a node that contains it: refused", problem_mark=where
            )
        if depth > self.depth:
            raise YamlRefused(
                problem=f"YAML nests deeper than {self.depth} levels: refused", problem_mark=node.start_mark
            )
        self._open.add(key)
        size = 1
        if isinstance(node, yaml.MappingNode):
            for name, value in node.value:
                size += self._size(name, depth + 1, name.start_mark) + self._size(
                    value, depth + 1, name.start_mark
                )
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                size += self._size(item, depth + 1, node.start_mark)
        self._open.discard(key)
        self._sizes[key] = size
        return size


def _yaml_documents(path: str, text: str) -> Iterator[Document]:
    loader = _YamlLoader(text)
    budget = _AliasBudget()
    try:
        while loader.check_node():
            node = loader.get_node()
            budget.check(node)  # before anything walks the document: construction, line recording
            data = loader.construct_document(node)
            if data is None:
                continue
            lines: dict[FieldPath, int] = {}
            _record_lines(node, (), lines)
            yield Document(path, node.start_mark.line + 1, data, lines)
    finally:
        loader.dispose()


def _record_lines(node: yaml.Node, prefix: FieldPath, lines: dict[FieldPath, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            here = (*prefix, str(key.value))
            lines[here] = key.start_mark.line + 1
            _record_lines(value, here, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            here = (*prefix, index)
            lines[here] = item.start_mark.line + 1
            _record_lines(item, here, lines)


def _json_document(path: str, text: str) -> tuple[list[Document], list[Diagnostic]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        return [], [Diagnostic(path, err.lineno, "", "", "", f"malformed JSON: {err.msg}")]
    return ([Document(path, 1, data, {})] if data is not None else []), []


def expand_lists(document: Document, diagnostics: list[Diagnostic]) -> Iterator[Document]:
    """Yield the document, or the items of a ``kind: List`` (as ``kubectl get -o yaml`` prints)."""
    data = document.data
    if not (isinstance(data, dict) and data.get("kind") == "List"):
        yield document
        return
    items = data.get("items") or []
    if not isinstance(items, list):
        diagnostics.append(_doc_error(document, ("items",), "must be a list of objects"))
        return
    for index, item in enumerate(items):
        prefix = ("items", index)
        lines = {k[2:]: v for k, v in document.lines.items() if k[:2] == prefix and len(k) > 2}
        yield from expand_lists(Document(document.path, document.line_of(prefix), item, lines), diagnostics)


def name_documents(documents: Sequence[Document], seed: int = 0) -> list[Document]:
    """``documents`` with a name for each that has only ``metadata.generateName``, as the API server
    would give it (:func:`gpuq.api.generated_names.plan_names`: deterministic from ``seed``, the file and
    the line); the name's diagnostics point at the ``generateName`` line."""
    planned = generated_names.plan_names([(d.path, d.line, d.data) for d in documents], seed)
    out = list(documents)
    for index, name in planned.items():
        document = documents[index]
        lines = {**document.lines, ("metadata", "name"): document.line_of(("metadata", "generateName"))}
        out[index] = Document(document.path, document.line, generated_names.named(document.data, name), lines)
    return out


# --- step 3: typed objects ------------------------------------------------------------------


def read_manifest(
    document: Document,
    diagnostics: list[Diagnostic],
    broken: list[references.ObjectKey] | None = None,
    context: SourceContext | None = None,
    ignored: list[foreign_kinds.IgnoredObject] | None = None,
) -> Manifest | None:
    """Turn one document into a :class:`Manifest`, appending what was wrong to ``diagnostics``.

    Objects of a known kind that fail type validation are added to ``broken``
    so that references to them are not reported as missing as well. ``context``
    holds the objects sources refer to (Trainer runtimes, which give no manifest
    of their own); a source whose referenced object is missing stays pending. A kind no reader
    takes is classified by :func:`gpuq.api.foreign_kinds.classify`: appended to ``ignored``, or an
    error, or a warning naming its file and line.
    """
    data = document.data
    if not isinstance(data, dict):
        diagnostics.append(_doc_error(document, (), f"document is not a mapping (got {type(data).__name__})"))
        return None
    api_version, kind = data.get("apiVersion"), data.get("kind")
    for key, value in (("apiVersion", api_version), ("kind", kind)):
        if not isinstance(value, str) or not value:
            diagnostics.append(_doc_error(document, (key,), f"{key} is required"))
            return None
    assert isinstance(api_version, str) and isinstance(kind, str)
    sources = _sources()
    if sources is not None and sources.is_source(api_version, kind):
        return _read_source(document, sources, diagnostics, broken, context, ignored)
    if is_runtime(api_version, kind):
        return None
    if serving.is_serving_kind(api_version, kind):  # Deployment, HPA, ScaledObject, KServe... (serving.py)
        return serving.read_document(document.path, document.line, data, document.lines, diagnostics)
    model = kueue.model_for(api_version, kind)
    if model is None:
        verdict = foreign_kinds.classify(kueue.split_api_version(api_version)[0], kind)
        if verdict == "ignored":
            if ignored is not None:
                ignored.append(
                    foreign_kinds.IgnoredObject(document.path, document.line, kind, _name_of(data))
                )
            return None
        message = foreign_kinds.unknown_kind_message(kind, api_version, verdict)
        diagnostics.append(_doc_error(document, ("kind",), message, verdict))
        return None
    data, wrong = kueue.wrong_version_fields(data)
    for key, message in wrong:
        diagnostics.append(_doc_error(document, ("spec", key), message, "warning"))
    upgraded, renames = kueue.upgrade(data)
    lines = _renamed_lines(document.lines, renames)
    return _validate_model(document, model, upgraded, lines, (kind, _name_of(data)), diagnostics, broken)


def _validate_model(
    document: Document,
    model: type[BaseModel],
    data: dict[str, Any],
    lines: dict[FieldPath, int],
    display: tuple[str, str],
    diagnostics: list[Diagnostic],
    broken: list[references.ObjectKey] | None = None,
    aliases: Mapping[FieldPath, FieldPath] | None = None,
) -> Manifest | None:
    """Validate ``data`` against ``model``; ``display`` is the (Kind, name) diagnostics show."""
    kind, name = display
    namespace = _namespace_of(data) if str(data.get("kind")) in kueue.NAMESPACED_KINDS else ""
    located = Manifest(document.path, document.line, kind, name, namespace, None, lines, aliases or {})
    try:
        parsed = model.model_validate(data)
    except ValidationError as err:
        diagnostics += [located.diagnostic(_loc(e["loc"]), _message(e)) for e in err.errors()]
        diagnostics += [
            located.diagnostic(p, "unknown field", "warning") for p in unknown_raw_fields(model, data, ())
        ]
        if name and kind != "GPUModel" and (problem := dns_subdomain_problem(name)):
            diagnostics.append(located.diagnostic(("metadata", "name"), f"invalid name {name!r}: {problem}"))
        if broken is not None:
            broken.append((model, namespace, _name_of(data)))
        return None
    diagnostics += [located.diagnostic(p, "unknown field", "warning") for p in unknown_fields(parsed, ())]
    return Manifest(document.path, document.line, kind, name, namespace, parsed, lines, aliases or {})


def _read_source(
    document: Document,
    sources: ModuleType,
    diagnostics: list[Diagnostic],
    broken: list[references.ObjectKey] | None,
    context: SourceContext | None = None,
    ignored: list[foreign_kinds.IgnoredObject] | None = None,
) -> Manifest | None:
    data = document.data
    kind, name = str(data["kind"]), _name_of(data)
    try:
        workload = sources.to_workload(data, context=context)
    except NotManaged:
        if ignored is not None:
            ignored.append(foreign_kinds.IgnoredObject(document.path, document.line, kind, name))
        return None
    except sources.SourceError as err:
        parts = _split_field(err.field)
        line = Manifest(document.path, document.line, kind, name, "", None, document.lines).line_of(parts)
        pending = isinstance(err, RuntimeMissing)  # Kueue makes no Workload; the job waits for its runtime
        diagnostics.append(
            Diagnostic(document.path, line, kind, name, err.field, err.message, stays_pending=pending)
        )
        return None
    where = Manifest(document.path, document.line, kind, name, "", None, document.lines)
    diagnostics += [where.diagnostic(at, message) for at, message in source_document_problems(data)]
    return _source_manifest(document, workload, diagnostics, broken)


def _source_manifest(
    document: Document,
    workload: dict[str, Any],
    diagnostics: list[Diagnostic],
    broken: list[references.ObjectKey] | None,
) -> Manifest | None:
    """The Workload manifest built from the source ``document``, its fields' lines pointing into it."""
    data = document.data
    kind, name = str(data["kind"]), _name_of(data)
    aliases = template_aliases(data, workload)
    aliases[queue_defaulting.QUEUE_FIELD] = _queue_written_at(data)
    lines = {
        (*ours, *path[len(theirs) :]): line
        for ours, theirs in aliases.items()
        for path, line in document.lines.items()
        if path[: len(theirs)] == theirs
    }
    if queue_defaulting.QUEUE_FIELD not in lines:  # no label: point at the labels, else the metadata
        where = document.lines.get(("metadata", "labels")) or document.lines.get(("metadata",))
        if where is not None:
            lines[queue_defaulting.QUEUE_FIELD] = where
    source_doc = Document(document.path, document.line, workload, {})
    display = (kind, name)
    return _validate_model(source_doc, kueue.Workload, workload, lines, display, diagnostics, broken, aliases)


def _serving_pod_workloads(
    document: Document,
    manifest: Manifest,
    config: kueue.Configuration | None,
    diagnostics: list[Diagnostic],
    broken: list[references.ObjectKey],
) -> list[Manifest]:
    """The Workloads Kueue makes of a queue-named serving object :mod:`gpuq.api.serving` read: the
    pods of a Deployment or StatefulSet (:func:`gpuq.api.serving.pod_workloads` says which), the
    RayCluster of a RayService (:func:`gpuq.api.ray_sources.rayservice_cluster`). None when the
    kind's framework is not enabled (a warning says so, as for a job)."""
    data = document.data
    api_version, kind = str(data.get("apiVersion", "")), str(data.get("kind", ""))
    if manifest.kind == "RayService":
        built = _rayservice_workload(document, diagnostics, broken)
    else:
        built = [_source_manifest(document, w, diagnostics, broken) for w in serving.pod_workloads(manifest)]
    found = [m for m in built if m is not None]
    if found and not frameworks.managed(config, api_version, kind):
        message = frameworks.unmanaged_message(api_version, kind)
        field_name = format_field_path(frameworks.FRAMEWORKS_FIELD)
        diagnostics.append(
            Diagnostic(document.path, document.line, kind, _name_of(data), field_name, message, "warning")
        )
        return []
    return found


def _rayservice_workload(
    document: Document, diagnostics: list[Diagnostic], broken: list[references.ObjectKey]
) -> list[Manifest | None]:
    """The Workload of the RayCluster a queue-named RayService gets; when Kueue's RayCluster webhook
    would refuse that cluster, KubeRay cannot create it and the service waits: a finding that stays
    pending, at the RayService's field."""
    data = document.data
    try:
        cluster = ray_sources.rayservice_cluster(data)
        if cluster is None:
            return []
        workload = to_workload(cluster)
    except SourceError as err:
        at = err.field.removeprefix("spec")
        field_name = (
            f"spec.rayClusterConfig{at}" if not err.field.startswith("spec.rayClusterConfig") else err.field
        )
        where = Manifest(document.path, document.line, "RayService", _name_of(data), "", None, document.lines)
        diagnostics.append(where.diagnostic(_split_field(field_name), err.message, stays_pending=True))
        return []
    return [_source_manifest(document, workload, diagnostics, broken)]


def _derived_manifests(
    documents: Sequence[Document],
    diagnostics: list[Diagnostic],
    broken: list[references.ObjectKey],
    ignored: list[foreign_kinds.IgnoredObject] | None = None,
    cron_jobs: list[CronJobSource] | None = None,
) -> list[Manifest]:
    """Step 3 for the documents :mod:`gpuq.api.sources_derived` reads, all at once; those that make
    no pods by themselves (a Tekton Task or Pipeline) go to ``ignored``, the CronJobs whose next Job
    loads to ``cron_jobs``."""
    out: list[Manifest] = []
    for document, derived in zip(
        documents, sources_derived.derive_all([d.data for d in documents]), strict=True
    ):
        kind, name = str(document.data["kind"]), _name_of(document.data)
        if derived.not_scheduled and ignored is not None:
            ignored.append(foreign_kinds.IgnoredObject(document.path, document.line, kind, name))
        where = Manifest(document.path, document.line, kind, name, "", None, document.lines)
        for finding in derived.findings:
            line = where.line_of(_keyed_field(finding.field))
            severity: Severity = "warning" if finding.severity == "warning" else "error"
            diagnostics.append(
                Diagnostic(document.path, line, kind, name, finding.field, finding.message, severity,
                           finding.stays_pending)
            )  # fmt: skip
        for workload in derived.workloads:
            manifest = _source_manifest(document, workload, diagnostics, broken)
            if manifest is not None:
                out.append(manifest)
                if kind == "CronJob" and cron_jobs is not None:
                    key = (manifest.namespace, manifest.model.metadata.name)
                    cron_jobs.append(CronJobSource(document.path, document.line, document.data, key))
    return out


def _companions(items: Sequence[Document], derived: Sequence[Document]) -> tuple[Document, ...]:
    """:attr:`LoadResult.companions`: the training runtimes among ``items``, then the pods of each pod
    group but its first (the group's Workload rides on the first, :func:`sources_pods.pod_groups`)."""
    runtimes = [
        item
        for item in items
        if isinstance(item.data, dict)
        and is_runtime(str(item.data.get("apiVersion")), str(item.data.get("kind")))
    ]
    first: set[tuple[str, str]] = set()
    members = []
    for item in derived:
        group = sources_pods.group_name(item.data)
        if not group:
            continue
        key = (_namespace_of(item.data), group)
        if key in first:
            members.append(item)
        first.add(key)
    return (*runtimes, *members)


def _configuration(items: Sequence[Document]) -> kueue.Configuration | None:
    """The first Kueue Configuration among ``items`` that validates (its errors are reported when
    it is read as a manifest), for the settings that decide what is a Kueue workload at all."""
    for item in items:
        data = item.data
        if not isinstance(data, dict) or data.get("kind") != "Configuration":
            continue
        if kueue.split_api_version(str(data.get("apiVersion")))[0] != kueue.CONFIG_GROUP:
            continue
        try:
            return kueue.Configuration.model_validate(data)
        except ValidationError:
            return None
    return None


def _unmanaged(item: Document, config: kueue.Configuration | None, diagnostics: list[Diagnostic]) -> bool:
    """Whether ``item`` is a job of a framework ``config`` does not enable: then it is no Kueue
    workload (:mod:`gpuq.api.frameworks`), a warning says so and it is not read."""
    data = item.data
    if not isinstance(data, dict):
        return False
    api_version, kind = str(data.get("apiVersion", "")), str(data.get("kind", ""))
    sources = _sources()
    read = sources is not None and sources.is_source(api_version, kind)
    if not read and not sources_derived.is_derived(data):
        return False
    if frameworks.framework_of(api_version, kind) is None or frameworks.managed(config, api_version, kind):
        return False
    message = frameworks.unmanaged_message(api_version, kind)
    field_name = format_field_path(frameworks.FRAMEWORKS_FIELD)
    diagnostics.append(Diagnostic(item.path, item.line, kind, _name_of(data), field_name, message, "warning"))
    return True


def _queue_written_at(data: Mapping[str, Any]) -> FieldPath:
    """Where a source names its queue: the queue-name label, or the deprecated annotation when
    only that is set (Kueue's ``QueueNameForObject``); the label when neither is."""
    label: FieldPath = ("metadata", "labels", QUEUE_LABEL)
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        return label
    labels, annotations = metadata.get("labels"), metadata.get("annotations")
    if isinstance(labels, dict) and labels.get(QUEUE_LABEL):
        return label
    if isinstance(annotations, dict) and annotations.get(QUEUE_LABEL):
        return ("metadata", "annotations", QUEUE_LABEL)
    return label


def workload_role(api_version: str, kind: str) -> str | None:
    """``"source"`` for a kind the loader reads as a Kueue Workload (Job, JobSet, RayJob...: the
    workload-source registry of :mod:`gpuq.api.sources`), ``"serving"`` for a serving kind
    (Deployment, InferenceService, RayService, HPA...: :mod:`gpuq.api.serving`), else None."""
    sources = _sources()
    if sources is not None and sources.is_source(api_version, kind):
        return "source"
    return "serving" if serving.is_serving_kind(api_version, kind) else None


def _sources() -> ModuleType | None:
    """The workload-source module, or None while it is not installed."""
    try:
        return importlib.import_module("gpuq.api.sources")
    except ImportError:
        return None


# --- helpers --------------------------------------------------------------------------------


def _doc_error(
    document: Document, parts: FieldPath, message: str, severity: Severity = "error"
) -> Diagnostic:
    data = document.data if isinstance(document.data, dict) else {}
    kind = str(data.get("kind") or "")
    name = _name_of(data) if kind else ""
    where = Manifest(document.path, document.line, kind, name, "", None, document.lines)
    return where.diagnostic(parts, message, severity)


def _name_of(data: dict[str, Any]) -> str:
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return str(name) if name is not None else ""


def _namespace_of(data: dict[str, Any]) -> str:
    metadata = data.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    return str(namespace) if namespace else "default"


def _renamed_lines(lines: dict[FieldPath, int], renames: list[kueue.Rename]) -> dict[FieldPath, int]:
    out = dict(lines)
    for old, new in renames:
        for path, line in lines.items():
            if path[: len(old)] == old:
                out[new + path[len(old) :]] = line
    return out


def _loc(loc: tuple[int | str, ...]) -> FieldPath:
    """A pydantic location without its validator tags (``function-before[...]`` and the like)."""
    return tuple(p for p in loc if isinstance(p, int) or ("[" not in p and not p.startswith("function-")))


def _message(error: Any) -> str:
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if error["type"] == "missing":
        return "is required"
    return message


def _keyed_field(text: str) -> FieldPath:
    """:func:`_split_field` that keeps a bracketed map key whole (``labels[kueue.x-k8s.io/queue-name]``)."""
    parts: list[str | int] = []
    for name, key in re.findall(r"([^.\[\]]+)|\[([^\]]*)\]", text):
        value = name or key
        parts.append(int(value) if value.isdigit() else value)
    return tuple(parts)


def _split_field(text: str) -> FieldPath:
    """Parse ``spec.replicatedJobs[0].name`` back into a field path (best effort, for lines)."""
    parts: list[str | int] = []
    for chunk in text.replace("]", "").replace("[", ".").split("."):
        if chunk:
            parts.append(int(chunk) if chunk.isdigit() else chunk)
    return tuple(parts)
