"""Checks across loaded manifests: what only a whole configuration shows.

* :func:`validate_references`: duplicates, dangling references, cohort
  cycles, missing priority classes.
* :func:`validate_capacity` runs on the converted core model and finds
  workloads that no flavor of their ClusterQueue could ever hold.

A workload's missing LocalQueue, a LocalQueue's missing ClusterQueue, a ClusterQueue's missing
ResourceFlavor or AdmissionCheck (Kueue leaves the queue inactive) and a workload that can never fit
are ``stays_pending`` diagnostics (:class:`gpuq.api.diagnostics.Diagnostic`): errors for
``gpuq validate``, warnings for the verbs that load the workload and leave it pending, as Kueue does.

Every function returns diagnostics and never raises on bad input.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from gpuq.api import kueue, topology_requests
from gpuq.api.diagnostics import Diagnostic, FieldPath, Manifest
from gpuq.api.validation import RESERVED_RESOURCE
from gpuq.core import model as core
from gpuq.core.quota import QuotaTree, potential_available

# --- whole configuration --------------------------------------------------------------------

Index = dict[type[Any], dict[tuple[str, str], Manifest | None]]
ObjectKey = tuple[type[Any], str, str]
"""(model type, namespace, name) of an object."""


def index_manifests(manifests: Sequence[Manifest]) -> Index:
    """Manifests by model type, then by ``(namespace, name)``; the first definition wins."""
    index: Index = {}
    for manifest in manifests:
        key = (manifest.namespace, _object_name(manifest))
        index.setdefault(type(manifest.model), {}).setdefault(key, manifest)
    return index


def _object_name(manifest: Manifest) -> str:
    meta = getattr(manifest.model, "metadata", None)
    return (
        (meta.name or "") if meta is not None and not isinstance(manifest.model, kueue.Configuration) else ""
    )


def validate_references(manifests: Sequence[Manifest], broken: Sequence[ObjectKey] = ()) -> list[Diagnostic]:
    """Cross-object checks: duplicates, dangling references, cohort cycles, priority classes.

    ``broken`` names objects that exist but failed type validation: references
    to them are not reported again.
    """
    index = index_manifests(manifests)
    for kind, namespace, name in broken:
        index.setdefault(kind, {}).setdefault((namespace, name), None)
    out = list(_duplicates(manifests))
    out += _local_queue_targets(index)
    out += _cluster_queue_references(index)
    out += _flavor_topologies(index)
    out += _admission_check_parameters(index)
    out += _multikueue_references(index)
    out += _cohort_cycles(index)
    out += _workload_references(index)
    out += _elastic_jobs(_present(index, kueue.Workload))
    out += _global_defaults(index)
    out += topology_requests.unknown_levels(manifests)
    return out


def validate_workload_references(index: Index, workloads: Sequence[Manifest]) -> list[Diagnostic]:
    """:func:`validate_references` for ``workloads`` added to a configuration already checked (its
    ``index``): their LocalQueues and priority classes, and duplicates among them."""
    return [*_duplicates(workloads), *_workload_references(index, workloads), *_elastic_jobs(workloads)]


ELASTIC_NOT_MODELLED = (
    "elastic job: admitted as its first workload slice; scaling it without requeue (a new slice "
    "replacing this one, pkg/workloadslicing) is not modelled yet"
)


def _elastic_jobs(workloads: Sequence[Manifest]) -> Iterator[Diagnostic]:
    """One warning per file, on its first elastic job's workload, that slice replacement is not
    modelled (per file, so that a directory says what each of its files says alone)."""
    annotation = "kueue.x-k8s.io/elastic-job"
    elastic = (m for m in workloads if m.model.metadata.annotations.get(annotation) == "true")
    for manifest in _first_per_file(elastic):
        yield manifest.diagnostic(("metadata", "annotations"), ELASTIC_NOT_MODELLED, "warning")


def _first_per_file(manifests: Iterable[Manifest]) -> list[Manifest]:
    """The first of ``manifests`` in each file, in input order."""
    firsts: dict[str, Manifest] = {}
    for manifest in manifests:
        firsts.setdefault(manifest.path, manifest)
    return list(firsts.values())


def _duplicates(manifests: Sequence[Manifest]) -> Iterator[Diagnostic]:
    first: dict[tuple[type[Any], str, str], Manifest] = {}
    for manifest in manifests:
        key = (type(manifest.model), manifest.namespace, _object_name(manifest))
        if key not in first:
            first[key] = manifest
            continue
        earlier = first[key]
        kind = type(manifest.model).__name__
        yield manifest.diagnostic((), f"duplicate {kind}{ALSO_DEFINED}{earlier.path}:{earlier.line}")
        yield earlier.diagnostic((), f"duplicate {kind}{ALSO_DEFINED}{manifest.path}:{manifest.line}")


ALSO_DEFINED = ": also defined at "


def is_duplicate(diagnostic: Diagnostic) -> bool:
    """Whether ``diagnostic`` is :func:`validate_references`' duplicate finding: the object itself is
    sound, and conversion keeps the first definition."""
    return diagnostic.message.startswith("duplicate ") and ALSO_DEFINED in diagnostic.message


def _present(index: Index, kind: type[Any]) -> list[Manifest]:
    """The parsed manifests of ``kind`` (objects that failed type validation left out)."""
    return [m for m in index.get(kind, {}).values() if m is not None]


def _names(index: Index, kind: type[Any]) -> set[str]:
    return {name for _ns, name in index.get(kind, {})}


def _local_queue_targets(index: Index) -> Iterator[Diagnostic]:
    queues = _names(index, kueue.ClusterQueue)
    for manifest in _present(index, kueue.LocalQueue):
        target = manifest.model.spec.cluster_queue
        if target not in queues:  # Kueue's workloads there read "ClusterQueue <name> doesn't exist"
            message = f"ClusterQueue {target!r} not found (Kueue: ClusterQueue {target} doesn't exist)"
            yield manifest.diagnostic(("spec", "clusterQueue"), message, stays_pending=True)


def _cluster_queue_references(index: Index) -> Iterator[Diagnostic]:
    flavors = _names(index, kueue.ResourceFlavor)
    checks = _names(index, kueue.AdmissionCheck)
    for manifest in _present(index, kueue.ClusterQueue):
        spec = manifest.model.spec
        for gi, group in enumerate(spec.resource_groups):
            for fi, flavor in enumerate(group.flavors):
                if flavor.name not in flavors:
                    flavor_at: FieldPath = ("spec", "resourceGroups", gi, "flavors", fi, "name")
                    message = f"ResourceFlavor {flavor.name!r} not found ({_INACTIVE})"
                    yield manifest.diagnostic(flavor_at, message, stays_pending=True)
        rules = spec.admission_checks_strategy.admission_checks if spec.admission_checks_strategy else []
        for ri, rule in enumerate(rules):
            if rule.name not in checks:
                at = ("spec", "admissionChecksStrategy", "admissionChecks", ri, "name")
                message = f"AdmissionCheck {rule.name!r} not found ({_INACTIVE})"
                yield manifest.diagnostic(at, message, stays_pending=True)


_INACTIVE = "Kueue: Can't admit new workloads"
"""Kueue's ClusterQueue Active=False condition (pkg/cache/scheduler/clusterqueue.go, inactiveReason)."""


def _flavor_topologies(index: Index) -> Iterator[Diagnostic]:
    topologies = _names(index, kueue.Topology)
    for manifest in _present(index, kueue.ResourceFlavor):
        name = manifest.model.spec.topology_name
        if name is not None and name not in topologies:
            yield manifest.diagnostic(("spec", "topologyName"), f"Topology {name!r} not found")


def _admission_check_parameters(index: Index) -> Iterator[Diagnostic]:
    configs = _names(index, kueue.ProvisioningRequestConfig)
    for manifest in _present(index, kueue.AdmissionCheck):
        params = manifest.model.spec.parameters
        if (
            params is None
            or params.kind != "ProvisioningRequestConfig"
            or params.api_group != kueue.KUEUE_GROUP
        ):
            continue
        if params.name not in configs:
            at = ("spec", "parameters", "name")
            yield manifest.diagnostic(at, f"ProvisioningRequestConfig {params.name!r} not found")


MULTIKUEUE_NOT_MODELLED = (
    "MultiKueue dispatch to worker clusters is not modelled yet: the workloads of a ClusterQueue with "
    "this check reserve quota here and stay pending with the check's state, as in a manager cluster "
    "without workers"
)


def _multikueue_references(index: Index) -> Iterator[Diagnostic]:
    """A MultiKueue AdmissionCheck names a MultiKueueConfig (``spec.parameters``), whose clusters name
    MultiKueueClusters (Kueue's multikueue admissioncheck controller reports them missing); one
    warning per file, on its first such check, that dispatch is not modelled."""
    configs = _names(index, kueue.MultiKueueConfig)
    clusters = _names(index, kueue.MultiKueueCluster)
    checks = [
        m
        for m in _present(index, kueue.AdmissionCheck)
        if m.model.spec.controller_name == kueue.MULTIKUEUE_CONTROLLER
    ]
    for manifest in checks:
        params = manifest.model.spec.parameters
        if params is None or params.kind != "MultiKueueConfig" or params.api_group != kueue.KUEUE_GROUP:
            message = "a MultiKueue AdmissionCheck's parameters must name a kueue.x-k8s.io MultiKueueConfig"
            yield manifest.diagnostic(("spec", "parameters"), message)
        elif params.name not in configs:
            yield manifest.diagnostic(
                ("spec", "parameters", "name"), f"MultiKueueConfig {params.name!r} not found"
            )
    for manifest in _first_per_file(checks):
        yield manifest.diagnostic(("spec", "controllerName"), MULTIKUEUE_NOT_MODELLED, "warning")
    for manifest in _present(index, kueue.MultiKueueConfig):
        for ci, name in enumerate(manifest.model.spec.clusters):
            if name not in clusters:
                yield manifest.diagnostic(("spec", "clusters", ci), f"MultiKueueCluster {name!r} not found")


def _cohort_cycles(index: Index) -> Iterator[Diagnostic]:
    """Every cohort on a ``parentName`` cycle gets one error naming the whole cycle."""
    cohorts = {m.model.metadata.name: m for m in _present(index, kueue.Cohort)}
    parent = {name: m.model.spec.parent_name for name, m in cohorts.items() if m.model.spec.parent_name}
    reported: set[str] = set()
    for start in sorted(parent):
        path, node = [], start
        while node in parent and node not in path:
            path.append(node)
            node = parent[node]
        if node not in path or node in reported:
            continue
        cycle = path[path.index(node) :]
        text = " -> ".join([*cycle, node])
        for member in cycle:
            reported.add(member)
            yield cohorts[member].diagnostic(("spec", "parentName"), f"cohort cycle: {text}")


def _workload_references(index: Index, workloads: Sequence[Manifest] | None = None) -> Iterator[Diagnostic]:
    local_queues = set(index.get(kueue.LocalQueue, {}))
    classes = {
        kueue.WPC_SOURCE: _names(index, kueue.WorkloadPriorityClass),
        kueue.POD_PC_SOURCE: _names(index, kueue.PriorityClass),
    }
    for manifest in _present(index, kueue.Workload) if workloads is None else workloads:
        wl = manifest.model
        if wl.spec.queue_name and (manifest.namespace, wl.spec.queue_name) not in local_queues:
            message = f"LocalQueue {wl.spec.queue_name!r} not found in namespace {manifest.namespace!r}"
            yield manifest.diagnostic(("spec", "queueName"), message, stays_pending=True)
        ref = wl.priority_class()
        if ref is not None and ref[1] not in classes[ref[0]]:
            kind = "WorkloadPriorityClass" if ref[0] == kueue.WPC_SOURCE else "PriorityClass"
            field = (
                ("spec", "priorityClassRef", "name")
                if wl.spec.priority_class_ref
                else ("spec", "priorityClassName")
            )
            yield manifest.diagnostic(field, f"{kind} {ref[1]!r} not found")


def _global_defaults(index: Index) -> Iterator[Diagnostic]:
    defaults = [m for m in _present(index, kueue.PriorityClass) if m.model.global_default]
    for manifest in defaults[1:]:
        first = defaults[0]
        message = (
            f"only one PriorityClass may be globalDefault (also {first.ref} at {first.path}:{first.line})"
        )
        yield manifest.diagnostic(("globalDefault",), message)


# --- capacity (on the core model) -----------------------------------------------------------


def workload_manifests(manifests: Sequence[Manifest]) -> dict[tuple[str, str | None], Manifest]:
    """Workload manifests by (namespace, name), the key of a core workload."""
    return {
        (m.model.metadata.namespace or "default", m.model.metadata.name): m
        for m in manifests
        if isinstance(m.model, kueue.Workload)
    }


def validate_capacity(
    manifests: Sequence[Manifest],
    config: core.ClusterConfig,
    workloads: Sequence[core.Workload],
    tree: QuotaTree | None = None,
) -> list[Diagnostic]:
    """Pending workloads that no flavor of their ClusterQueue could ever hold (``stays_pending``).

    For each pod set and resource with a non-zero request: the ClusterQueue must
    cover the resource, and per-pod × (minCount or count) must not exceed the
    best flavor's potential capacity (Kueue's potentialAvailable, on a quota tree built once).
    Workloads already holding quota, and those whose queue is unknown, are skipped.
    A namespace the ClusterQueue's selector does not match gives a warning. ``tree``: the quota
    tree of ``config`` when the caller keeps one (it is only read).
    """
    by_key = workload_manifests(manifests)
    out: list[Diagnostic] = []
    tree = tree if tree is not None else QuotaTree(config)
    for workload in workloads:
        manifest = by_key.get((workload.namespace, workload.name))
        lq = config.local_queues.get((workload.namespace, workload.queue_name))
        cq = config.cluster_queues.get(lq.cluster_queue) if lq else None
        if manifest is None or cq is None or workload.admission is not None:
            continue
        out += _namespace_match(manifest, config, cq, workload)
        for index, pod_set in enumerate(workload.pod_sets):
            out += _pod_set_capacity(manifest, tree, cq, pod_set, index)
    return out


def _namespace_match(
    manifest: Manifest, config: core.ClusterConfig, cq: core.ClusterQueue, workload: core.Workload
) -> list[Diagnostic]:
    selector = cq.namespace_selector
    if selector is not None and selector.matches(config.labels_of_namespace(workload.namespace)):
        return []
    message = (
        f"namespace {workload.namespace!r} is not selected by cluster queue {cq.name!r}'s "
        "namespaceSelector: the workload will never be admitted"
    )
    return [manifest.diagnostic(("spec", "queueName"), message, "warning")]


def _pod_set_capacity(
    manifest: Manifest, tree: QuotaTree, cq: core.ClusterQueue, pod_set: core.PodSet, index: int
) -> list[Diagnostic]:
    pods = pod_set.min_count if pod_set.min_count is not None else pod_set.count
    demands = {name: amount * pods for name, amount in pod_set.requests.items() if amount}
    if any(RESERVED_RESOURCE in g.covered_resources for g in cq.resource_groups):
        demands[RESERVED_RESOURCE] = pods
    out = []
    at = ("spec", "podSets", index)
    for resource, total in sorted(demands.items()):
        group = next((g for g in cq.resource_groups if resource in g.covered_resources), None)
        if group is None:
            message = f"cluster queue {cq.name} does not cover resource {resource}"
            out.append(manifest.diagnostic(at, message, stays_pending=True))
            continue
        node = tree.cluster_queues[cq.name]
        best = max((potential_available(node, (f.name, resource)) for f in group.flavors), default=0)
        if total > best:
            message = (
                f"pod set {pod_set.name!r} needs {total} {resource} ({pods} pods) but cluster queue "
                f"{cq.name} can never hold more than {best} in any flavor"
            )
            out.append(manifest.diagnostic(at, message, stays_pending=True))
    return out
