"""Compare two configurations object by object and field by field (``gpuq diff``).

Steps (:func:`diff_paths`):

1. read each side (files and directories, as the loader reads them; ``kind: List`` expanded);
2. normalise every object so that only meaning differs: Kueue ``v1beta1`` is upgraded to the
   ``v1beta2`` shape (``cohort`` is ``cohortName``), objects of a kind gpuq knows are read through
   its model (so defaults are filled in and quantities are exact: ``1000m`` equals ``1``, ``16Gi``
   equals ``17179869184``), and server-managed metadata and ``status`` are dropped (a Node keeps
   its allocatable and capacity);
3. match objects by ``(kind, namespace, name)``, and inside them lists of named items by name
   (``flavors[name=h100]``), other lists by index; report added, removed and changed objects,
   each change as ``field path: old → new``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ValidationError

from gpuq.api import kueue
from gpuq.api import machines as _machines  # noqa: F401  (registers NodePool, GPUModel, Node)
from gpuq.api import scenario as _scenario  # noqa: F401  (registers Scenario)
from gpuq.api.diagnostics import Diagnostic
from gpuq.api.loader import expand_lists, expand_path, parse_documents

ObjectKey = tuple[str, str, str]  # kind, namespace, name
KEPT_METADATA = ("name", "namespace", "labels", "annotations")
NODE_STATUS = ("allocatable", "capacity")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
UNSET = None


@dataclass(frozen=True)
class FieldChange:
    path: str
    old: Any
    new: Any


@dataclass(frozen=True)
class ObjectDiff:
    """One object that differs: ``change`` is added, removed or changed (with its field changes)."""

    key: ObjectKey
    change: str
    fields: tuple[FieldChange, ...] = ()

    @property
    def ref(self) -> str:
        kind, namespace, name = self.key
        return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


@dataclass(frozen=True)
class DiffResult:
    objects: tuple[ObjectDiff, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = field(default=())

    @property
    def equal(self) -> bool:
        return not self.objects


class DiffInputError(Exception):
    """A side that cannot be read; ``diagnostics`` say where."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        super().__init__("\n".join(str(d) for d in diagnostics))
        self.diagnostics = tuple(diagnostics)


def diff_paths(old: Sequence[tuple[str, str]], new: Sequence[tuple[str, str]]) -> DiffResult:
    """Diff two sides given as ``(display path, text)`` pairs; raises DiffInputError on bad input."""
    before, after = read_side(old), read_side(new)
    return DiffResult(tuple(diff_objects(before, after)))


def side_texts(paths: Sequence[str], stdin_text: str | None = None) -> list[tuple[str, str]]:
    """``(path, text)`` of every manifest file under ``paths`` (``-``: ``stdin_text``)."""
    texts: list[tuple[str, str]] = []
    problems: list[Diagnostic] = []
    for path in paths:
        if path == "-":
            texts.append(("<stdin>", stdin_text or ""))
            continue
        for file in expand_path(path):
            try:
                with open(file, encoding="utf-8") as handle:
                    texts.append((file, handle.read()))
            except (OSError, UnicodeDecodeError) as error:
                problems.append(Diagnostic(file, 0, "", "", "", f"cannot read: {error}"))
    if problems:
        raise DiffInputError(problems)
    return texts


def read_side(texts: Sequence[tuple[str, str]]) -> dict[ObjectKey, Any]:
    """Every object of one side, normalised (step 2), by key; a repeated key keeps the last."""
    objects: dict[ObjectKey, Any] = {}
    problems: list[Diagnostic] = []
    for path, text in texts:
        documents, errors = parse_documents(path, text)
        problems += errors
        for document in documents:
            for item in expand_lists(document, problems):
                data = item.data
                if not isinstance(data, dict) or not data.get("kind"):
                    problems.append(
                        Diagnostic(path, item.line, "", "", "", "not a Kubernetes object (no kind)")
                    )
                    continue
                objects[object_key(data)] = normalise(data)
    if problems:
        raise DiffInputError(problems)
    return objects


def object_key(data: Mapping[str, Any]) -> ObjectKey:
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    kind = str(data["kind"])
    namespace = str(meta.get("namespace") or ("default" if kind in kueue.NAMESPACED_KINDS else ""))
    return kind, namespace, str(meta.get("name") or "")


def normalise(data: dict[str, Any]) -> Any:
    """The object as gpuq reads it (defaults, exact quantities), less server-written fields."""
    upgraded, _renames = kueue.upgrade(data)
    model = kueue.model_for(str(upgraded.get("apiVersion", "")), str(upgraded.get("kind", "")))
    shaped: dict[str, Any] = dict(upgraded)
    if model is not None:
        shaped = _through_model(model, upgraded)
    meta = shaped.get("metadata") or {}
    kept = {k: meta[k] for k in KEPT_METADATA if meta.get(k)}
    if isinstance(kept.get("annotations"), dict):
        kept["annotations"] = {k: v for k, v in kept["annotations"].items() if k != LAST_APPLIED}
    shaped["metadata"] = {k: v for k, v in kept.items() if v}
    status = shaped.pop("status", None)
    if shaped.get("kind") == "Node" and isinstance(status, dict):
        shaped["status"] = {k: status[k] for k in NODE_STATUS if status.get(k)}
    shaped.pop("apiVersion", None)  # the version is a spelling: upgraded shapes compare equal
    return _drop_unset(shaped)


def _through_model(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    try:
        parsed = model.model_validate(data)
    except ValidationError:
        return dict(data)  # compared as written; gpuq validate says what is wrong
    dumped: dict[str, Any] = parsed.model_dump(by_alias=True)
    return dumped


def _drop_unset(value: Any) -> Any:
    """None fields and empty mappings/lists mean "not set": drop them so both spellings compare equal."""
    if isinstance(value, dict):
        cleaned = {k: _drop_unset(v) for k, v in value.items()}
        return {k: v for k, v in cleaned.items() if v is not None and v != {} and v != []}
    if isinstance(value, list):
        return [_drop_unset(v) for v in value]
    return value


def diff_objects(before: Mapping[ObjectKey, Any], after: Mapping[ObjectKey, Any]) -> Iterator[ObjectDiff]:
    """Added, removed and changed objects in key order."""
    for key in sorted(before.keys() | after.keys()):
        if key not in after:
            yield ObjectDiff(key, "removed")
        elif key not in before:
            yield ObjectDiff(key, "added")
        else:
            changes = tuple(diff_values(before[key], after[key], ""))
            if changes:
                yield ObjectDiff(key, "changed", changes)


def diff_values(old: Any, new: Any, path: str) -> Iterator[FieldChange]:
    """Field changes from ``old`` to ``new`` under ``path`` (step 3)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(old.keys() | new.keys(), key=str):
            yield from diff_values(old.get(key, UNSET), new.get(key, UNSET), _join(path, str(key)))
    elif isinstance(old, list) and isinstance(new, list):
        yield from _diff_lists(old, new, path)
    elif not same(old, new):
        yield FieldChange(path, old, new)


def _diff_lists(old: list[Any], new: list[Any], path: str) -> Iterator[FieldChange]:
    names_old, names_new = _names(old), _names(new)
    if names_old is not None and names_new is not None:
        for name in list(dict.fromkeys([*names_old, *names_new])):
            here = f"{path}[name={name}]"
            yield from diff_values(names_old.get(name, UNSET), names_new.get(name, UNSET), here)
        return
    for index in range(max(len(old), len(new))):
        before = old[index] if index < len(old) else UNSET
        after = new[index] if index < len(new) else UNSET
        yield from diff_values(before, after, f"{path}[{index}]")


def _names(items: list[Any]) -> dict[str, Any] | None:
    """Items by their ``name`` when every item is a mapping with a distinct one, else None."""
    if not items or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
        return None
    named = {i["name"]: i for i in items}
    return named if len(named) == len(items) else None


def same(old: Any, new: Any) -> bool:
    """Equal values; numbers compare by value (``Decimal("1.000") == 1``)."""
    if isinstance(old, Decimal | int | float) and isinstance(new, Decimal | int | float):
        if isinstance(old, bool) or isinstance(new, bool):
            return old is new
        return Decimal(str(old)) == Decimal(str(new))
    return bool(old == new) and type(old) is type(new)


def _join(path: str, key: str) -> str:
    simple = key.replace("_", "").replace("-", "").isalnum() and "." not in key
    if simple and "/" not in key:
        return f"{path}.{key}" if path else key
    return f"{path}[{key}]"


def show(value: Any) -> str:
    """A value as a person reads it: exact numbers without exponent, ``<unset>`` for absent."""
    if value is UNSET:
        return "<unset>"
    if isinstance(value, Decimal):
        return str(int(value)) if value == value.to_integral_value() else format(value.normalize(), "f")
    if isinstance(value, dict | list):
        return _compact(value)
    return str(value)


def _compact(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_compact(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_compact(v) for v in value) + "]"
    return show(value)


def as_document(result: DiffResult) -> dict[str, Any]:
    """The JSON shape of ``gpuq diff -o json``."""
    return {
        "equal": result.equal,
        "objects": [
            {
                "object": o.ref,
                "kind": o.key[0],
                "namespace": o.key[1],
                "name": o.key[2],
                "change": o.change,
                "fields": [{"path": f.path, "old": show(f.old), "new": show(f.new)} for f in o.fields],
            }
            for o in result.objects
        ],
    }
