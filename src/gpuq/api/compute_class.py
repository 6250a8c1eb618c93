"""The ``gpuq.dev/v1alpha1`` ComputeClass kind, modelled on GKE's ``cloud.google.com/v1`` ComputeClass.

The spec keeps GKE's field names, so a GKE ComputeClass's ``spec`` loads unchanged under
``gpuq.dev/v1alpha1``, and the loader reads a ``cloud.google.com/v1`` ComputeClass as this
kind too (GKE's reference: https://cloud.google.com/kubernetes-engine/docs/reference/crds/computeclass).
gpuq adds ``strategy`` (docs/provisioning.md, "Presets").

Checks (:func:`compute_class_problems`, run by :mod:`gpuq.api.machine_checks`): at least one rule
unless a strategy is named; ``priorityScore`` on every rule or none, integers 1-1000, at most
three rules sharing a score; GPU counts and cores positive; reservations ``Specific`` need names.
:func:`class_references` reports workloads and ResourceFlavors that select an unknown class
through ``cloud.google.com/compute-class``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

from pydantic import Field, ValidationError

from gpuq.api import kueue
from gpuq.api.diagnostics import Diagnostic, FieldPath, Manifest
from gpuq.api.kueue import Object, Strict
from gpuq.core.provisioning.compute_class import ComputeClassPolicy, Rule

GKE_GROUP = "cloud.google.com"
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
MAX_SCORE = 1000
MAX_SHARED_SCORE = 3
BUILT_IN_CLASSES = frozenset(
    {"autopilot", "autopilot-spot", "Balanced", "Performance", "Scale-Out", "Accelerator"}
)
"""GKE's built-in classes: selecting one is not an unknown class."""


class GPURequirement(Strict):
    type: str
    count: int
    driver_version: str | None = None


class SpecificReservation(Strict):
    name: str
    project: str | None = None
    reservation_block: Any = None


class Reservations(Strict):
    affinity: Literal["Specific", "AnyBestEffort", "None"] = "None"
    specific: list[SpecificReservation] = Field(default_factory=list)


class Location(Strict):
    zones: list[str] = Field(default_factory=list)


class FlexStart(Strict):
    enabled: bool = False
    node_recycling: Any = None


class PriorityRule(Strict):
    """One ``priorities[]`` entry (GKE's keys; ``tpu``, ``storage`` and the like pass through)."""

    machine_family: str | None = None
    machine_type: str | None = None
    min_cores: int | None = None
    min_memory_gb: int | None = None
    spot: bool | None = None
    gpu: GPURequirement | None = None
    tpu: Any = None
    reservations: Reservations | None = None
    location: Location | None = None
    flex_start: FlexStart | None = None
    nodepools: list[str] | None = None
    priority_score: int | None = None
    max_run_duration_seconds: int | None = None
    max_pods_per_node: int | None = None
    pod_family: str | None = None
    storage: Any = None
    placement: Any = None
    min_cpu_platform: str | None = None
    node_system_config: Any = None


class ActiveMigration(Strict):
    optimize_rule_priority: bool = False


class NodePoolAutoCreation(Strict):
    enabled: bool = False


class ComputeClassSpec(Strict):
    priorities: list[PriorityRule] = Field(default_factory=list)
    when_unsatisfiable: Literal["ScaleUpAnyway", "DoNotScaleUp"] = "DoNotScaleUp"
    active_migration: ActiveMigration | None = None
    node_pool_auto_creation: NodePoolAutoCreation | None = None
    autoscaling_policy: Any = None
    priority_defaults: Any = None
    node_pool_config: Any = None
    description: str | None = None
    strategy: Literal["obtainability", "cost", "performance"] | None = None


class ComputeClass(Object):
    spec: ComputeClassSpec


def read_compute_class(data: dict[str, Any]) -> ComputeClass:
    """Validate a ComputeClass object of either apiVersion (raises pydantic's ValidationError)."""
    group = kueue.split_api_version(str(data.get("apiVersion", "")))[0]
    if group not in (GKE_GROUP, "gpuq.dev") or data.get("kind") != "ComputeClass":
        raise ValueError(f"not a ComputeClass: {data.get('apiVersion')}/{data.get('kind')}")
    return ComputeClass.model_validate(data)


def unshadowed(manifests: list[Manifest]) -> list[Manifest]:
    """``manifests`` less each ``cloud.google.com`` ComputeClass named like a ``gpuq.dev`` one.

    ``gpuq export k8s`` writes GKE's object for the cluster beside the gpuq one it came
    from (which keeps gpuq-only keys such as prices), so an exported directory holds both:
    the gpuq one is the definition.
    """
    gpuq_names = {
        m.name for m in manifests if isinstance(m.model, ComputeClass) and _group(m.model) != GKE_GROUP
    }
    return [
        m
        for m in manifests
        if not (isinstance(m.model, ComputeClass) and _group(m.model) == GKE_GROUP and m.name in gpuq_names)
    ]


def _group(model: ComputeClass) -> str:
    return kueue.split_api_version(str(model.api_version))[0]


def to_policy(model: ComputeClass) -> ComputeClassPolicy:
    """The class in core form (only valid objects are converted)."""
    spec = model.spec
    rules = tuple(_rule(r) for r in spec.priorities)
    migrate = spec.active_migration.optimize_rule_priority if spec.active_migration else False
    return ComputeClassPolicy(
        str(model.metadata.name), rules, spec.when_unsatisfiable, migrate, spec.strategy
    )


def _rule(rule: PriorityRule) -> Rule:
    reservations = rule.reservations
    return Rule(
        machine_family=rule.machine_family,
        machine_type=rule.machine_type,
        min_cores=rule.min_cores,
        min_memory_gb=rule.min_memory_gb,
        spot=rule.spot,
        gpu_type=rule.gpu.type if rule.gpu else None,
        gpu_count=rule.gpu.count if rule.gpu else None,
        reservation_affinity=reservations.affinity
        if reservations and reservations.affinity != "None"
        else None,
        reservations=tuple(r.name for r in reservations.specific) if reservations else (),
        zones=tuple(rule.location.zones) if rule.location else (),
        flex_start=bool(rule.flex_start and rule.flex_start.enabled),
        nodepools=tuple(rule.nodepools or ()),
        priority_score=rule.priority_score,
    )


# --- checks -------------------------------------------------------------------------------------

Findings = Iterator[tuple[FieldPath, str]]


def compute_class_problems(model: ComputeClass) -> Findings:
    """Per-object checks, as ``(field path, message)``."""
    spec = model.spec
    at: FieldPath = ("spec", "priorities")
    if not spec.priorities and spec.strategy is None:
        yield at, "must list at least one rule (or name a strategy: obtainability, cost or performance)"
    scored = [i for i, r in enumerate(spec.priorities) if r.priority_score is not None]
    if scored and len(scored) != len(spec.priorities):
        missing = [i for i, r in enumerate(spec.priorities) if r.priority_score is None]
        yield (
            (*at, missing[0], "priorityScore"),
            (
                f"priorityScore is set on rule(s) {scored} but not on rule(s) {missing}: "
                "set it on every rule or none"
            ),
        )
    counts: dict[int, list[int]] = {}
    for index, rule in enumerate(spec.priorities):
        yield from _rule_problems(rule, (*at, index))
        if rule.priority_score is not None:
            counts.setdefault(rule.priority_score, []).append(index)
    for score, indexes in sorted(counts.items()):
        if len(indexes) > MAX_SHARED_SCORE:
            yield (
                (*at, indexes[MAX_SHARED_SCORE], "priorityScore"),
                (
                    f"{len(indexes)} rules {indexes} share priorityScore {score}: "
                    f"at most {MAX_SHARED_SCORE} may"
                ),
            )


def _rule_problems(rule: PriorityRule, at: FieldPath) -> Findings:
    score = rule.priority_score
    if score is not None and not 1 <= score <= MAX_SCORE:
        yield (*at, "priorityScore"), f"must be an integer from 1 to {MAX_SCORE} (got {score})"
    for key, value in (("minCores", rule.min_cores), ("minMemoryGb", rule.min_memory_gb)):
        if value is not None and value < 1:
            yield (*at, key), f"must be at least 1 (got {value})"
    if rule.gpu is not None and rule.gpu.count < 1:
        yield (*at, "gpu", "count"), f"must be at least 1 (got {rule.gpu.count})"
    if rule.gpu is not None and not rule.gpu.type.strip():
        yield (*at, "gpu", "type"), "must name an accelerator, e.g. nvidia-h100-80gb"
    if (
        rule.machine_family
        and rule.machine_type
        and not rule.machine_type.startswith(f"{rule.machine_family}-")
    ):
        yield (*at, "machineType"), f"{rule.machine_type!r} is not of machineFamily {rule.machine_family!r}"
    reservations = rule.reservations
    if reservations is not None and reservations.affinity == "Specific" and not reservations.specific:
        yield (*at, "reservations", "specific"), "affinity Specific needs at least one reservation name"
    if rule.spot and (rule.flex_start and rule.flex_start.enabled):
        yield (*at, "flexStart"), "a rule cannot ask for both spot and flex-start capacity"
    if rule.max_run_duration_seconds is not None and rule.max_run_duration_seconds < 1:
        yield (*at, "maxRunDurationSeconds"), f"must be at least 1 (got {rule.max_run_duration_seconds})"


def validate_compute_classes(manifests: Sequence[Manifest]) -> Iterator[Diagnostic]:
    """Diagnostics of every ComputeClass, and of references to unknown classes."""
    for manifest in manifests:
        if isinstance(manifest.model, ComputeClass):
            for field, message in compute_class_problems(manifest.model):
                yield manifest.diagnostic(field, message)
    yield from class_references(manifests)


def class_references(manifests: Sequence[Manifest]) -> Iterator[Diagnostic]:
    """Workloads (pod templates' ``nodeSelector``) and ResourceFlavors (``nodeLabels``) selecting a
    ComputeClass that is neither defined nor one of GKE's built-in classes."""
    known = {m.name for m in manifests if isinstance(m.model, ComputeClass)} | BUILT_IN_CLASSES
    for manifest in manifests:
        for field, name in _selected_classes(manifest):
            if name not in known:
                defined = ", ".join(sorted(known - BUILT_IN_CLASSES)) or "none"
                message = f"unknown ComputeClass {name!r} (defined: {defined}; or a GKE built-in class)"
                yield manifest.diagnostic(field, message)


def _selected_classes(manifest: Manifest) -> Iterator[tuple[FieldPath, str]]:
    model = manifest.model
    if isinstance(model, kueue.ResourceFlavor):
        name = model.spec.node_labels.get(COMPUTE_CLASS_LABEL)
        if name is not None:
            yield ("spec", "nodeLabels", COMPUTE_CLASS_LABEL), name
    elif isinstance(model, kueue.Workload):
        for index, pod_set in enumerate(model.spec.pod_sets):
            name = pod_set.template.spec.node_selector.get(COMPUTE_CLASS_LABEL)
            if name is not None:
                yield (
                    ("spec", "podSets", index, "template", "spec", "nodeSelector", COMPUTE_CLASS_LABEL),
                    name,
                )


def is_valid(data: dict[str, Any]) -> bool:
    """True when ``data`` reads as a ComputeClass and passes its checks (for quick tests and tools)."""
    try:
        model = read_compute_class(data)
    except (ValidationError, ValueError):
        return False
    return not any(True for _ in compute_class_problems(model))


kueue.KINDS[("gpuq.dev", "ComputeClass")] = ComputeClass
kueue.VERSIONS.setdefault(GKE_GROUP, ("v1",))
kueue.KINDS[(GKE_GROUP, "ComputeClass")] = ComputeClass  # GKE's own object reads as the same class
