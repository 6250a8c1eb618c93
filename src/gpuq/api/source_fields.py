"""Reading workload-source manifests: typed field access that fails with the field's path."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

from gpuq.api.diagnostics import FieldPath

MAX_POD_SETS = 8
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class SourceError(ValueError):
    """A source manifest that cannot become a Workload; ``field`` is a path in the source document."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NotManaged(SourceError):
    """A source Kueue leaves alone (no Workload, and no webhook refuses it): the loader lists it as
    not scheduled by gpuq, as on a real cluster it runs outside Kueue."""


def mapping_field(value: object, field: str, *, required: bool = True) -> dict[str, Any]:
    """Return ``value`` as a mapping; ``None`` becomes ``{}`` unless ``required``."""
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        what = "missing" if value is None else f"a {type(value).__name__}"
        raise SourceError(field, f"expected a mapping, got {what}")
    return value


def count_field(parent: Mapping[str, Any], key: str, field: str, default: int | None) -> int | None:
    """Return the non-negative integer at ``parent[key]``, or ``default`` when it is absent."""
    value = parent.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise SourceError(field, f"expected a non-negative integer, got {value!r}")
    if value < 0:
        raise SourceError(field, f"must not be negative, got {value}")
    return value


def int_field(parent: Mapping[str, Any], key: str, field: str, default: int) -> int:
    """:func:`count_field` with a default, so never ``None``."""
    value = count_field(parent, key, field, default)
    assert value is not None
    return value


def pod_template(
    parent: Mapping[str, Any], key: str, field: str, *, strip_labels: Iterable[str] = ()
) -> dict[str, Any]:
    """Copy the pod template at ``parent[key]`` as ``{"metadata"?, "spec"}``.

    Only the template's labels and annotations are kept from its metadata,
    minus ``strip_labels``; ``metadata`` is omitted when nothing is left.
    """
    template = mapping_field(parent.get(key), field)
    spec = mapping_field(template.get("spec"), f"{field}.spec")
    metadata = mapping_field(template.get("metadata"), f"{field}.metadata", required=False)
    kept: dict[str, Any] = {}
    stripped = frozenset(strip_labels)
    labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k not in stripped}
    if labels:
        kept["labels"] = labels
    if metadata.get("annotations"):
        kept["annotations"] = dict(metadata["annotations"])
    result: dict[str, Any] = {"metadata": copy.deepcopy(kept)} if kept else {}
    result["spec"] = copy.deepcopy(spec)
    return result


def make_pod_set(name: str, count: int, template: dict[str, Any], field: str) -> dict[str, Any]:
    if not _DNS_LABEL.match(name) or len(name) > 63:
        raise SourceError(field, f"pod set name {name!r} must be a DNS label (lowercase, digits, '-')")
    return {"name": name, "count": count, "template": template}


def check_pod_sets(pod_sets: list[dict[str, Any]], field: str) -> list[dict[str, Any]]:
    """Enforce the Workload API's limits: 1 to 8 pod sets with unique names."""
    if not pod_sets:
        raise SourceError(field, "needs at least one entry")
    if len(pod_sets) > MAX_POD_SETS:
        raise SourceError(
            field, f"gives {len(pod_sets)} pod sets; a Kueue Workload allows at most {MAX_POD_SETS}"
        )
    seen: set[str] = set()
    for pod_set in pod_sets:
        if pod_set["name"] in seen:
            raise SourceError(field, f"pod set name {pod_set['name']!r} is used twice")
        seen.add(pod_set["name"])
    return pod_sets


QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def queue_name(metadata: Mapping[str, Any]) -> str:
    """Kueue's ``QueueNameForObject``: the queue-name label, else the deprecated annotation."""
    label = (metadata.get("labels") or {}).get(QUEUE_LABEL)
    if label:
        return str(label)
    return str((metadata.get("annotations") or {}).get(QUEUE_LABEL) or "")


def template_aliases(source: Mapping[str, Any], workload: Mapping[str, Any]) -> dict[FieldPath, FieldPath]:
    """Where each pod set's template of ``workload`` was written in ``source``.

    Maps ``("spec", "podSets", i, "template")`` to the path of the source
    template whose ``spec`` equals it (the first unused one, in document order);
    pod sets whose template was changed on the way have no entry.
    """
    found: list[tuple[FieldPath, Any]] = []
    _templates(source, (), found)
    out: dict[FieldPath, FieldPath] = {}
    used: set[FieldPath] = set()
    for index, pod_set in enumerate((workload.get("spec") or {}).get("podSets") or ()):
        spec = pod_set["template"]["spec"]
        path = next((p for p, value in found if p not in used and value == spec), None)
        if path is not None:
            used.add(path)
            out[("spec", "podSets", index, "template")] = path
    return out


def _templates(value: Any, at: FieldPath, found: list[tuple[FieldPath, Any]]) -> None:
    """Every mapping under ``value`` that has a ``spec`` mapping with ``containers`` (a pod template)."""
    if isinstance(value, dict):
        spec = value.get("spec")
        if isinstance(spec, dict) and "containers" in spec:
            found.append((at, spec))
        for key, item in value.items():
            _templates(item, (*at, str(key)), found)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _templates(item, (*at, index), found)
