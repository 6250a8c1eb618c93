"""Topology Aware Scheduling requests of pod sets, as Kueue reads them.

A pod set asks for topology in one of two ways:

1. ``spec.podSets[].topologyRequest`` of a Workload (Kueue's ``PodSetTopologyRequest``);
2. annotations on the pod template's metadata, which Kueue's job integrations
   turn into that field (``kueue.x-k8s.io/podset-required-topology``,
   ``podset-preferred-topology``, ``podset-unconstrained-topology: "true"``,
   ``podset-slice-required-topology`` with ``podset-slice-size``, and
   ``podset-group-name``). Workload sources keep the pod templates' annotations,
   so a Job, JobSet or RayJob asks the same way.

When a pod set has both, the explicit ``topologyRequest`` wins and the
annotations are ignored with a warning.

:func:`pod_set_problems` and :func:`group_problems` mirror Kueue's
``ValidateTASPodSetRequest`` and ``ValidatePodSetGroupingTopology``
(``pkg/controller/jobframework/tas_validation.go``); :func:`topology_request`
converts a valid request into the core's :class:`~gpuq.core.model.TopologyRequest`.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuq.api import kueue
from gpuq.api.diagnostics import Diagnostic, FieldPath, Manifest
from gpuq.api.names import Findings, qualified_name_problem
from gpuq.core.model import TopologyMode, TopologyRequest

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
ANNOTATIONS = (REQUIRED, PREFERRED, UNCONSTRAINED, SLICE_REQUIRED, SLICE_SIZE, GROUP_NAME)
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Written:
    """A pod set's topology request as written: values by role, and where each role was written.

    Roles: ``required``, ``preferred``, ``unconstrained``, ``slice_level``,
    ``slice_size``, ``group``. Values are raw (annotation strings, or the typed
    fields of ``topologyRequest``); ``names`` gives the spelling messages use.
    """

    values: dict[str, object] = field(default_factory=dict)
    paths: dict[str, FieldPath] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    base: FieldPath = ()

    def has(self, role: str) -> bool:
        return role in self.values


_ANNOTATION_ROLES = {
    REQUIRED: "required",
    PREFERRED: "preferred",
    UNCONSTRAINED: "unconstrained",
    SLICE_REQUIRED: "slice_level",
    SLICE_SIZE: "slice_size",
    GROUP_NAME: "group",
}
_FIELD_ROLES = {
    "required": "required",
    "preferred": "preferred",
    "unconstrained": "unconstrained",
    "podSetSliceRequiredTopology": "slice_level",
    "podSetSliceSize": "slice_size",
    "podSetGroupName": "group",
}


def _annotations(pod_set: kueue.PodSet) -> Mapping[str, Any]:
    annotations = pod_set.template.metadata.get("annotations")
    return annotations if isinstance(annotations, dict) else {}


def written(pod_set: kueue.PodSet, at: FieldPath) -> Written:
    """The request ``pod_set`` (at ``at``) makes: its ``topologyRequest``, else its annotations."""
    explicit = pod_set.topology_request
    if explicit is not None:
        base = (*at, "topologyRequest")
        request = explicit.model_dump(by_alias=True)
        present = {
            k: request[k] for k in _FIELD_ROLES if request.get(k) is not None and request[k] is not False
        }
        roles = {_FIELD_ROLES[k]: k for k in present}
        return Written(
            values={_FIELD_ROLES[k]: v for k, v in present.items()},
            paths={role: (*base, key) for role, key in roles.items()},
            names=roles,
            base=base,
        )
    base = (*at, "template", "metadata", "annotations")
    annotations = {k: v for k, v in _annotations(pod_set).items() if k in _ANNOTATION_ROLES}
    return Written(
        values={_ANNOTATION_ROLES[k]: v for k, v in annotations.items()},
        paths={_ANNOTATION_ROLES[k]: (*base, k) for k in annotations},
        names={_ANNOTATION_ROLES[k]: k for k in annotations},
        base=base,
    )


def _flag(value: object) -> bool | None:
    """Go's ``strconv.ParseBool`` (or a YAML boolean); None when it is neither."""
    if isinstance(value, bool):
        return value
    if value in _TRUE:
        return True
    return False if value in _FALSE else None


def _slice_size(value: object) -> int | None:
    """An int32 slice size, or None when ``value`` is not one (annotations are strings)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not text.lstrip("+-").isdigit():
        return None
    number = int(text)
    return number if abs(number) <= _INT32_MAX else None


# --- checks ---------------------------------------------------------------------------------


def pod_set_problems(pod_set: kueue.PodSet, at: FieldPath) -> Findings:
    """Kueue's ``ValidateTASPodSetRequest`` for one pod set at field path ``at``."""
    req = written(pod_set, at)
    if pod_set.topology_request is None:
        for role, path in req.paths.items():
            if not isinstance(req.values[role], str):
                yield path, "annotation values must be strings (quote the value)"
        if any(not isinstance(v, str) for v in req.values.values()):
            return
    yield from _mode_problems(req)
    yield from _group_name_problems(req)
    yield from _slice_problems(req, pod_set.count)


def _mode_problems(req: Written) -> Findings:
    modes = [role for role in ("required", "preferred", "unconstrained") if req.has(role)]
    if len(modes) > 1:
        listed = ", ".join(repr(req.names[m]) for m in modes)
        yield req.base, f"must not set more than one of required, preferred and unconstrained (got {listed})"
    for role in ("required", "preferred", "slice_level"):
        if req.has(role) and (problem := qualified_name_problem(str(req.values[role]))):
            yield req.paths[role], f"invalid topology level {req.values[role]!r}: {problem}"
    if req.has("unconstrained") and _flag(req.values["unconstrained"]) is None:
        yield req.paths["unconstrained"], f"must be a boolean value (got {req.values['unconstrained']!r})"


def _group_name_problems(req: Written) -> Findings:
    if not req.has("group"):
        return
    at, group = req.paths["group"], str(req.values["group"])
    if group.isdigit():
        yield at, f"must not be a number (got {group!r})"
    for role in ("slice_size", "slice_level"):
        if req.has(role):
            yield at, f"may not be set when {req.names[role]!r} is specified"
    if not req.has("required") and not req.has("preferred"):
        yield at, "may not be set when neither a required nor a preferred topology is specified"


def _slice_problems(req: Written, count: int) -> Findings:
    if req.has("slice_size"):
        raw = req.values["slice_size"]
        size = _slice_size(raw)
        at = req.paths["slice_size"]
        if size is None:
            yield at, f"must be a numeric value (got {raw!r})"
        elif size < 1:
            yield at, f"must be greater than or equal to 1 (got {size})"
        elif size > count:
            yield at, f"must not be greater than pod set count {count} (got {size})"
        if not req.has("slice_level"):
            level = "podSetSliceRequiredTopology" if req.base[-1] == "topologyRequest" else SLICE_REQUIRED
            yield at, f"may not be set when {level!r} is not specified"
    elif req.has("slice_level"):
        size_name = "podSetSliceSize" if req.base[-1] == "topologyRequest" else SLICE_SIZE
        yield (*req.base, size_name), f"must be set when {req.names['slice_level']!r} is specified"


def group_problems(pod_sets: Sequence[kueue.PodSet], at: FieldPath) -> Findings:
    """Kueue's ``ValidatePodSetGroupingTopology``: a group is 2 pod sets, one of 1 pod, one level."""
    groups: dict[str, list[tuple[Written, int]]] = {}
    for index, pod_set in enumerate(pod_sets):
        req = written(pod_set, (*at, index))
        if req.has("group") and isinstance(req.values["group"], str):
            groups.setdefault(req.values["group"], []).append((req, pod_set.count))
    for name, members in groups.items():
        if len(members) != 2:
            for req, _ in members:
                yield (
                    req.paths["group"],
                    f"can only define groups of exactly 2 pod sets, got {len(members)} in group {name!r}",
                )
            continue
        (first, first_count), (second, second_count) = members
        if first_count != 1 and second_count != 1:
            message = (
                f"can only define groups where at least one pod set has only 1 replica, got "
                f"{first_count} and {second_count} replicas in group {name!r}"
            )
            yield first.paths["group"], message
            yield second.paths["group"], message
        if _levels(first) != _levels(second):
            message = f"pod sets of group {name!r} must request the same required or preferred topology"
            yield first.paths["group"], message
            yield second.paths["group"], message


def _levels(req: Written) -> tuple[object, object]:
    return req.values.get("required"), req.values.get("preferred")


def workload_problems(wl: kueue.Workload) -> Findings:
    """Every pod set's request, the pod set groups, and recorded topology assignments of one Workload."""
    at = ("spec", "podSets")
    for index, pod_set in enumerate(wl.spec.pod_sets):
        yield from pod_set_problems(pod_set, (*at, index))
    yield from group_problems(wl.spec.pod_sets, at)
    if wl.status.admission is not None:
        for index, assignment in enumerate(wl.status.admission.pod_set_assignments):
            if assignment.topology_assignment is not None:
                where = ("status", "admission", "podSetAssignments", index, "topologyAssignment")
                yield from recorded_assignment_problems(
                    assignment.topology_assignment, assignment.count, where
                )


def recorded_assignment_problems(
    value: kueue.TopologyAssignment, count: int | None, at: FieldPath
) -> Findings:
    """A recorded assignment must decode: one value per level, as many values and counts as domains,
    and pods that add up to the pod set's admitted count."""
    levels = len(value.levels)
    if not levels:
        yield (*at, "levels"), "must have at least 1 item"
        return
    total = 0
    for index, domain in enumerate(value.domains or ()):
        if len(domain.values) != levels:
            yield (
                (*at, "domains", index, "values"),
                f"must have one value per level ({levels}), got {len(domain.values)}",
            )
        if domain.count < 0:
            yield (*at, "domains", index, "count"), "must be greater than or equal to 0"
        total += domain.count
    for index, piece in enumerate(value.slices or ()):
        found = yield from _recorded_slice_problems(piece, levels, (*at, "slices", index))
        total += found
    if count is not None and total != count:
        yield at, f"assigns {total} pod(s) but the pod set was admitted with {count}"


def _recorded_slice_problems(
    piece: kueue.TopologyAssignmentSlice, levels: int, at: FieldPath
) -> Generator[tuple[FieldPath, str], None, int]:
    """Problems of one v1beta2 slice; returns the pods it assigns (0 when it cannot be decoded)."""
    n = piece.domain_count
    ok = n >= 0
    if n < 0:
        yield (*at, "domainCount"), "must be greater than or equal to 0"
    if len(piece.values_per_level) != levels:
        yield (
            (*at, "valuesPerLevel"),
            f"must have one entry per level ({levels}), got {len(piece.values_per_level)}",
        )
        ok = False
    for index, level in enumerate(piece.values_per_level):
        if (level.universal is None) == (level.individual is None):
            yield (*at, "valuesPerLevel", index), "exactly one of universal and individual must be set"
            ok = False
        elif level.individual is not None and len(level.individual.roots) != n:
            yield (*at, "valuesPerLevel", index, "individual", "roots"), f"must have domainCount ({n}) items"
            ok = False
    counts = piece.pod_counts
    universal, individual = counts.get("universal"), counts.get("individual")
    if isinstance(universal, int) and individual is None:
        return universal * n if ok else 0
    if universal is None and isinstance(individual, list) and len(individual) == n:
        pods = [c for c in individual if isinstance(c, int) and c >= 0]
        if len(pods) == n:
            return sum(pods) if ok else 0
    yield (*at, "podCounts"), f"must set universal, or individual with domainCount ({n}) counts"
    return 0


def ignored_annotations(manifest: Manifest) -> Iterator[Diagnostic]:
    """Warnings for topology annotations next to an explicit ``topologyRequest`` (which wins)."""
    wl = manifest.model
    for index, pod_set in enumerate(wl.spec.pod_sets):
        names = [k for k in _annotations(pod_set) if k in _ANNOTATION_ROLES]
        if pod_set.topology_request is not None and names:
            at = ("spec", "podSets", index, "template", "metadata", "annotations", names[0])
            message = "ignored: spec.podSets[].topologyRequest is set and takes precedence"
            yield manifest.diagnostic(at, message, "warning")


def unknown_levels(manifests: Sequence[Manifest]) -> Iterator[Diagnostic]:
    """Warnings for requested levels that no Topology defines (Kueue would never admit such a pod set)."""
    levels = {
        level.node_label
        for m in manifests
        if isinstance(m.model, kueue.Topology)
        for level in m.model.spec.levels
    }
    for manifest in manifests:
        if not isinstance(manifest.model, kueue.Workload):
            continue
        for index, pod_set in enumerate(manifest.model.spec.pod_sets):
            req = written(pod_set, ("spec", "podSets", index))
            for role in ("required", "preferred", "slice_level"):
                value = req.values.get(role)
                if isinstance(value, str) and value not in levels:
                    known = ", ".join(sorted(levels)) or "none"
                    message = f"no Topology has level {value!r} (known levels: {known})"
                    yield manifest.diagnostic(req.paths[role], message, "warning")


# --- conversion -------------------------------------------------------------------------------


def topology_request(pod_set: kueue.PodSet) -> TopologyRequest | None:
    """The core request of a pod set that passed :func:`pod_set_problems`; None when it asks none.

    A slice request without a mode is unconstrained apart from its slices; an
    ``unconstrained`` flag that is false asks nothing.
    """
    req = written(pod_set, ())
    values = req.values
    slice_level = values.get("slice_level")
    slice_size = _slice_size(values["slice_size"]) if "slice_size" in values else None
    group = values.get("group")
    if "required" in values:
        mode, level = TopologyMode.REQUIRED, str(values["required"])
    elif "preferred" in values:
        mode, level = TopologyMode.PREFERRED, str(values["preferred"])
    elif _flag(values.get("unconstrained")) or slice_level is not None:
        mode, level = TopologyMode.UNCONSTRAINED, None
    else:
        return None
    return TopologyRequest(
        mode=mode,
        level=level,
        slice_level=None if slice_level is None else str(slice_level),
        slice_size=slice_size,
        group=None if group is None else str(group),
    )
