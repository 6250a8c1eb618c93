"""Checks on one loaded manifest: Kueue's webhooks and CRD rules.

:func:`validate_object` mirrors ``pkg/webhooks/*_webhook.go`` and the CRD
validation markers of ``apis/kueue/v1beta2``: names, resource groups, quotas,
preemption and fungibility rules, pod sets. Checks across objects live in
:mod:`gpuq.api.references`.

Every function returns diagnostics and never raises on bad input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from gpuq.api import dra, dra_checks, kueue, machines, topology_requests, workload_gates
from gpuq.api.convert import BACKFILL, VICTIM_ORDER
from gpuq.api.deadlines import deadline_problems
from gpuq.api.diagnostics import Diagnostic, FieldPath, Manifest
from gpuq.api.names import (
    Findings,
    dns_label_problem,
    dns_subdomain_problem,
    label_problems,
    label_value_problem,
    qualified_name_problem,
    source_name_problem,
)
from gpuq.api.pods import device_problems, quantity_problems, request_limit_problems

MAX_RESOURCE_GROUPS = 16
MAX_FLAVORS_PER_GROUP = 64
MAX_RESOURCES_PER_GROUP = 64
MAX_TOTAL_FLAVORS = 256
MAX_TOTAL_RESOURCES = 256
MAX_POD_SETS = 8
MAX_TOPOLOGY_LEVELS = 16
INT32 = (-(2**31), 2**31 - 1)
RESERVED_RESOURCE = "pods"
NEGATIVE = "must be greater than or equal to 0"
_VALID_STRATEGIES = (
    ["LessThanOrEqualToFinalShare"],
    ["LessThanInitialShare"],
    ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
)

# --- per object ---------------------------------------------------------------------------


def validate_object(manifest: Manifest) -> list[Diagnostic]:
    """Kueue's admission-webhook checks for one object."""
    obj = manifest.model
    findings = list(_metadata_problems(manifest))
    check = _CHECKS.get(type(obj))
    if check is not None:
        findings += check(obj)
    out = [manifest.diagnostic(path, message) for path, message in findings]
    # A source (Job...) without a queue is reported by gpuq.api.queue_defaulting, naming its label.
    if isinstance(obj, kueue.Workload) and not obj.spec.queue_name and manifest.kind == "Workload":
        out.append(
            manifest.diagnostic(
                ("spec", "queueName"), "no queue name: the workload will never be admitted", "warning"
            )
        )
    if isinstance(obj, kueue.Workload):
        out += topology_requests.ignored_annotations(manifest)
        out += _gate_annotations(manifest, obj)
    if isinstance(obj, kueue.ClusterQueue):
        out += _queue_annotations(manifest, obj)
    if isinstance(obj, kueue.Cohort):
        out += _cohort_annotations(manifest, obj)
    return out


def _cohort_annotations(manifest: Manifest, cohort: kueue.Cohort) -> list[Diagnostic]:
    """``gpuq.dev/usage-half-life``: a positive duration, read on root cohorts only."""
    value = cohort.metadata.annotations.get(workload_gates.USAGE_HALF_LIFE)
    if value is None:
        return []
    at = ("metadata", "annotations", workload_gates.USAGE_HALF_LIFE)
    if workload_gates.usage_half_life_s(value) is None:
        return [manifest.diagnostic(at, f"{value!r} is not a positive duration (e.g. 12h, 168h, 90m)")]
    if cohort.spec.parent_name:
        message = (
            "has no effect on a cohort with a parent: the root cohort's half-life applies to its "
            "whole tree"
        )
        return [manifest.diagnostic(at, message, "warning")]
    return []


def _queue_annotations(manifest: Manifest, cq: kueue.ClusterQueue) -> list[Diagnostic]:
    """gpuq's own ClusterQueue annotations (a real Kueue ignores them): ``gpuq.dev/backfill`` and
    ``gpuq.dev/victim-order``, whose values are checked here, not silently read as off."""
    annotations = cq.metadata.annotations
    out: list[Diagnostic] = []
    backfill = annotations.get(BACKFILL)
    at = ("metadata", "annotations", BACKFILL)
    if backfill is not None and backfill not in ("true", "false"):
        out.append(manifest.diagnostic(at, f'{backfill!r} must be "true" or "false"'))
    elif backfill == "true" and cq.spec.queueing_strategy != "StrictFIFO":
        message = (
            "has no effect on a BestEffortFIFO queue, where later workloads already pass a head that "
            "cannot be admitted; backfill applies to StrictFIFO queues"
        )
        out.append(manifest.diagnostic(at, message, "warning"))
    order = annotations.get(VICTIM_ORDER)
    if order is not None and order not in ("kueue", "lost-work"):
        at = ("metadata", "annotations", VICTIM_ORDER)
        out.append(manifest.diagnostic(at, f'{order!r} must be "kueue" or "lost-work"'))
    return out


def _gate_annotations(manifest: Manifest, wl: kueue.Workload) -> list[Diagnostic]:
    """The Workload webhook's checks of ``admission-gated-by`` and ``priority-boost``
    (:mod:`gpuq.api.workload_gates`); a source's gate is checked where it becomes the Workload's."""
    annotations = wl.metadata.annotations
    out: list[Diagnostic] = []
    if manifest.kind == "Workload":
        gated = annotations.get(workload_gates.ADMISSION_GATED_BY) or ""
        at = ("metadata", "annotations", workload_gates.ADMISSION_GATED_BY)
        out += [manifest.diagnostic(at, p) for p in workload_gates.admission_gate_problems(gated)]
    expected = annotations.get(workload_gates.EXPECTED_DURATION)
    if expected is not None and (problem := workload_gates.expected_duration(expected)[1]):
        at = ("metadata", "annotations", workload_gates.EXPECTED_DURATION)
        out.append(manifest.diagnostic(at, problem, "warning"))
    protection = annotations.get(workload_gates.MIN_RUNTIME)
    if protection is not None and workload_gates.min_runtime_s(protection) is None:
        at = ("metadata", "annotations", workload_gates.MIN_RUNTIME)
        message = f"{protection!r} is not a duration of 0 or more (e.g. 30m, 1h30m)"
        out.append(manifest.diagnostic(at, message))
    boost = annotations.get(workload_gates.PRIORITY_BOOST)
    if boost is not None and workload_gates.priority_boost(boost) is None:
        at = ("metadata", "annotations", workload_gates.PRIORITY_BOOST)
        message = (
            f'{boost!r} must be a signed 32-bit integer (use "0" explicitly): Kueue\'s webhook refuses it '
            "when the PriorityBoost gate is on; gpuq adds no boost"
        )
        out.append(manifest.diagnostic(at, message, "warning"))
    return out


def _metadata_problems(manifest: Manifest) -> Findings:
    meta = getattr(manifest.model, "metadata", None)
    if meta is None or isinstance(manifest.model, kueue.Configuration):
        return
    if not meta.name:
        yield ("metadata", "name"), "is required"
        return
    problem = _name_rule(manifest.model)(meta.name)
    if problem:
        yield ("metadata", "name"), f"invalid name {meta.name!r}: {problem}"
    if isinstance(manifest.model, kueue.Workload) and manifest.kind != "Workload":  # a source: its name
        pod_sets = tuple(ps.name for ps in manifest.model.spec.pod_sets)
        if problem := source_name_problem(manifest.kind, manifest.name, pod_sets):
            shown = (
                manifest.name
                if len(manifest.name) <= 70
                else f"{manifest.name[:60]}... ({len(manifest.name)})"
            )
            yield ("metadata", "name"), f"invalid {manifest.kind} name {shown!r}: {problem}"
    if manifest.namespace and (problem := dns_label_problem(manifest.namespace)):
        yield ("metadata", "namespace"), f"invalid namespace {manifest.namespace!r}: {problem}"
    yield from label_problems(meta.labels, ("metadata", "labels"))
    if isinstance(manifest.model, kueue.Workload):
        yield from deadline_problems(meta.annotations)


def _name_rule(model: Any) -> Callable[[str], str | None]:
    """Namespaces are DNS labels; GPUModel names follow the catalogue's spelling (``H100-80GB``)."""
    if isinstance(model, kueue.Namespace):
        return dns_label_problem
    if isinstance(model, machines.GPUModel):
        return label_value_problem
    return dns_subdomain_problem


def _check_flavor(rf: kueue.ResourceFlavor) -> Findings:
    spec = rf.spec
    yield from label_problems(spec.node_labels, ("spec", "nodeLabels"))
    seen: set[tuple[str, str]] = set()
    for index, taint in enumerate(spec.node_taints):
        at = ("spec", "nodeTaints", index)
        if problem := qualified_name_problem(taint.key):
            yield (*at, "key"), f"invalid taint key {taint.key!r}: {problem}"
        if (taint.key, taint.effect) in seen:
            yield at, f"duplicate taint {taint.key}:{taint.effect}: taints must be unique by key and effect"
        seen.add((taint.key, taint.effect))
    yield from _toleration_problems(spec.tolerations, ("spec", "tolerations"))
    if spec.topology_name is not None and (problem := dns_subdomain_problem(spec.topology_name)):
        yield ("spec", "topologyName"), f"invalid topology name {spec.topology_name!r}: {problem}"


def _toleration_problems(tolerations: Sequence[kueue.Toleration], at: FieldPath) -> Findings:
    for index, toleration in enumerate(tolerations):
        if toleration.key and (problem := qualified_name_problem(toleration.key)):
            yield (*at, index, "key"), f"invalid toleration key {toleration.key!r}: {problem}"
        if toleration.operator == "Exists" and toleration.value:
            yield (*at, index, "value"), "must be empty when operator is Exists"
        if not toleration.key and toleration.operator != "Exists":
            yield (*at, index, "operator"), "must be Exists when key is empty"


def _check_cluster_queue(cq: kueue.ClusterQueue) -> Findings:
    spec = cq.spec
    if spec.cohort_name is not None and (problem := dns_subdomain_problem(spec.cohort_name)):
        yield ("spec", "cohortName"), f"invalid cohort name {spec.cohort_name!r}: {problem}"
    has_cohort = bool(spec.cohort_name)
    yield from _resource_groups(spec.resource_groups, has_cohort, "cohort", lending_capped=True)
    preemption = spec.preemption
    borrow = preemption.borrow_within_cohort
    if preemption.reclaim_within_cohort == "Never" and borrow is not None and borrow.policy != "Never":
        yield ("spec", "preemption"), "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"
    fungibility = spec.flavor_fungibility
    both_try_next = fungibility.when_can_borrow == fungibility.when_can_preempt == "TryNextFlavor"
    if fungibility.preference is not None and not both_try_next:
        yield (
            ("spec", "flavorFungibility", "preference"),
            f"preference {fungibility.preference!r} requires both whenCanBorrow and whenCanPreempt "
            "to be TryNextFlavor",
        )
    yield from _fair_sharing(spec.fair_sharing)
    if spec.namespace_selector is not None:
        yield from _selector_problems(spec.namespace_selector, ("spec", "namespaceSelector"))
    yield from _admission_check_rules(spec.admission_checks_strategy)


def _check_cohort(cohort: kueue.Cohort) -> Findings:
    spec = cohort.spec
    if spec.parent_name is not None and (problem := dns_subdomain_problem(spec.parent_name)):
        yield ("spec", "parentName"), f"invalid cohort name {spec.parent_name!r}: {problem}"
    yield from _resource_groups(spec.resource_groups, bool(spec.parent_name), "parent", lending_capped=False)
    yield from _fair_sharing(spec.fair_sharing)


def _fair_sharing(fair: kueue.FairSharingWeight | None) -> Findings:
    if fair is None or fair.weight is None:
        return
    if fair.weight < 0:
        yield ("spec", "fairSharing", "weight"), NEGATIVE
    elif 0 < fair.weight <= Decimal("1e-9"):
        yield ("spec", "fairSharing", "weight"), "when not 0, weight must be > 1e-9"


def _admission_check_rules(strategy: kueue.AdmissionChecksStrategy | None) -> Findings:
    if strategy is None:
        return
    seen: set[str] = set()
    for index, rule in enumerate(strategy.admission_checks):
        at = ("spec", "admissionChecksStrategy", "admissionChecks", index, "name")
        if problem := dns_subdomain_problem(rule.name):
            yield at, f"invalid admission check name {rule.name!r}: {problem}"
        if rule.name in seen:
            yield at, f"duplicate admission check {rule.name!r}"
        seen.add(rule.name)


def _selector_problems(selector: kueue.LabelSelector, at: FieldPath) -> Findings:
    yield from label_problems(selector.match_labels, (*at, "matchLabels"))
    for index, req in enumerate(selector.match_expressions):
        here = (*at, "matchExpressions", index)
        if problem := qualified_name_problem(req.key):
            yield (*here, "key"), f"invalid label key {req.key!r}: {problem}"
        if req.operator in ("In", "NotIn") and not req.values:
            yield (*here, "values"), f"must be specified when operator is {req.operator}"
        if req.operator in ("Exists", "DoesNotExist") and req.values:
            yield (*here, "values"), f"may not be specified when operator is {req.operator}"


# --- resource groups ------------------------------------------------------------------------


def _resource_groups(
    groups: Sequence[kueue.ResourceGroup], has_parent: bool, parent_word: str, *, lending_capped: bool
) -> Findings:
    """Resource-group rules shared by ClusterQueue and Cohort (``validateResourceGroups``)."""
    at = ("spec", "resourceGroups")
    if len(groups) > MAX_RESOURCE_GROUPS:
        yield at, f"must have at most {MAX_RESOURCE_GROUPS} items, got {len(groups)}"
    total_flavors = sum(len(g.flavors) for g in groups)
    if total_flavors > MAX_TOTAL_FLAVORS:
        yield at, f"total number of flavors across all resourceGroups must be ≤ 256, got {total_flavors}"
    total_resources = sum(len(g.covered_resources) for g in groups)
    if total_resources > MAX_TOTAL_RESOURCES:
        yield (
            at,
            f"total number of covered resources across all resourceGroups must be ≤ 256, "
            f"got {total_resources}",
        )
    seen_resources: dict[str, int] = {}
    seen_flavors: dict[str, int] = {}
    for gi, group in enumerate(groups):
        yield from _group_shape(group, (*at, gi))
        for ri, resource in enumerate(group.covered_resources):
            here = (*at, gi, "coveredResources", ri)
            if problem := qualified_name_problem(resource):
                yield here, f"invalid resource name {resource!r}: {problem}"
            if resource in seen_resources:
                yield (
                    here,
                    f"resource {resource!r} is already covered by resource group {seen_resources[resource]}",
                )
            seen_resources.setdefault(resource, gi)
        for fi, flavor in enumerate(group.flavors):
            here = (*at, gi, "flavors", fi)
            if flavor.name in seen_flavors:
                where = seen_flavors[flavor.name]
                yield (*here, "name"), f"flavor {flavor.name!r} already appears in resource group {where}"
            seen_flavors.setdefault(flavor.name, gi)
            yield from _flavor_quotas(
                flavor, group.covered_resources, here, has_parent, parent_word, lending_capped
            )


def _group_shape(group: kueue.ResourceGroup, at: FieldPath) -> Findings:
    if not group.covered_resources:
        yield (*at, "coveredResources"), "must have at least 1 item"
    if len(group.covered_resources) > MAX_RESOURCES_PER_GROUP:
        yield (*at, "coveredResources"), f"must have at most {MAX_RESOURCES_PER_GROUP} items"
    if not group.flavors:
        yield (*at, "flavors"), "must have at least 1 item"
    if len(group.flavors) > MAX_FLAVORS_PER_GROUP:
        yield (*at, "flavors"), f"must have at most {MAX_FLAVORS_PER_GROUP} items"


def _flavor_quotas(
    flavor: kueue.FlavorQuotas,
    covered: Sequence[str],
    at: FieldPath,
    has_parent: bool,
    parent_word: str,
    lending_capped: bool,
) -> Findings:
    if problem := dns_subdomain_problem(flavor.name):
        yield (*at, "name"), f"invalid flavor name {flavor.name!r}: {problem}"
    if len(flavor.resources) != len(covered):
        yield (*at, "resources"), "must have the same number of resources as the coveredResources"
    for index, quota in enumerate(flavor.resources):
        here = (*at, "resources", index)
        if index < len(covered) and quota.name != covered[index]:
            yield (*here, "name"), f"must match the name in coveredResources (expected {covered[index]!r})"
        yield from _quota_values(quota, here, has_parent, parent_word, lending_capped)


def _quota_values(
    quota: kueue.ResourceQuota, at: FieldPath, has_parent: bool, parent_word: str, lending_capped: bool
) -> Findings:
    if quota.nominal_quota < 0:
        yield (*at, "nominalQuota"), NEGATIVE
    for key, limit in (("borrowingLimit", quota.borrowing_limit), ("lendingLimit", quota.lending_limit)):
        if limit is None:
            continue
        if limit < 0:
            yield (*at, key), NEGATIVE
        if not has_parent:
            yield (*at, key), f"must be nil when {parent_word} is empty"
    lending = quota.lending_limit
    if lending_capped and lending is not None and lending > quota.nominal_quota:
        yield (*at, "lendingLimit"), "must be less than or equal to the nominalQuota"


# --- other kinds ----------------------------------------------------------------------------


def _check_local_queue(lq: kueue.LocalQueue) -> Findings:
    if problem := dns_subdomain_problem(lq.spec.cluster_queue):
        yield ("spec", "clusterQueue"), f"invalid cluster queue name {lq.spec.cluster_queue!r}: {problem}"
    yield from _fair_sharing(lq.spec.fair_sharing)


def _check_priority_value(obj: kueue.WorkloadPriorityClass | kueue.PriorityClass) -> Findings:
    if not INT32[0] <= obj.value <= INT32[1]:
        yield ("value",), "must fit in a 32-bit integer"


def _check_topology(topology: kueue.Topology) -> Findings:
    levels = topology.spec.levels
    if not 1 <= len(levels) <= MAX_TOPOLOGY_LEVELS:
        yield ("spec", "levels"), f"must have between 1 and {MAX_TOPOLOGY_LEVELS} items"
    seen: set[str] = set()
    for index, level in enumerate(levels):
        at = ("spec", "levels", index, "nodeLabel")
        if problem := qualified_name_problem(level.node_label):
            yield at, f"invalid node label {level.node_label!r}: {problem}"
        if level.node_label in seen:
            yield at, f"duplicate level {level.node_label!r}"
        seen.add(level.node_label)


def _check_admission_check(check: kueue.AdmissionCheck) -> Findings:
    if not check.spec.controller_name:
        yield ("spec", "controllerName"), "is required"


def _check_configuration(config: kueue.Configuration) -> Findings:
    strategies = config.fair_sharing.preemption_strategies if config.fair_sharing else None
    if strategies is not None and list(strategies) not in _VALID_STRATEGIES:
        valid = "; ".join(",".join(s) for s in _VALID_STRATEGIES)
        yield ("fairSharing", "preemptionStrategies"), f"unsupported combination (supported: {valid})"
    yield from _wait_for_pods_ready(config)
    resources = config.resources
    ignoring = resources is not None and resources.quota_check_strategy == "IgnoreUndeclared"
    if ignoring and resources is not None and resources.exclude_resource_prefixes:  # pkg/config/validation.go
        message = "excludeResourcePrefixes is not allowed when quotaCheckStrategy is IgnoreUndeclared"
        yield ("resources", "excludeResourcePrefixes"), message
    yield from _admission_fair_sharing(config.admission_fair_sharing)
    yield from dra_checks.configuration_problems(config)


def _admission_fair_sharing(afs: kueue.ConfigAdmissionFairSharing | None) -> Findings:
    """Kueue's validateAdmissionFairSharing (pkg/config/validation.go)."""
    if afs is None:
        return
    if afs.usage_half_life_time < 0:
        yield ("admissionFairSharing", "usageHalfLifeTime"), NEGATIVE
    if afs.usage_sampling_interval is not None and afs.usage_sampling_interval < 0:  # 0 defaults to 5m
        yield ("admissionFairSharing", "usageSamplingInterval"), "must be greater than 0"
    for resource, weight in sorted(afs.resource_weights.items()):
        if weight < 0:
            yield ("admissionFairSharing", "resourceWeights", resource), NEGATIVE


def _wait_for_pods_ready(config: kueue.Configuration) -> Findings:
    """Kueue's validateWaitForPodsReady (pkg/config/validation.go), for the waitForPodsReady Kueue
    runs (:func:`gpuq.api.convert.wait_for_pods_ready`); ``enable`` is only a ``v1beta1`` field."""
    wait = config.wait_for_pods_ready
    if wait is None:
        return
    v1beta1 = config.api_version.endswith("/v1beta1")
    if not v1beta1 and wait.enable is not None:
        message = (
            f"unknown field in {config.api_version} (Kueue's strict decoding refuses it): waitForPodsReady "
            "is always on in v1beta2; featureGates: {DisableWaitForPodsReady: true} turns it off"
        )
        yield ("waitForPodsReady", "enable"), message
    if v1beta1 and not wait.enable:
        return
    if v1beta1 and wait.timeout == 0:
        yield ("waitForPodsReady", "timeout"), "Required value: must be specified"
    for name, value in (("timeout", wait.timeout), ("recoveryTimeout", wait.recovery_timeout)):
        if value is not None and value < 0:
            yield ("waitForPodsReady", name), NEGATIVE
    strategy = wait.requeuing_strategy
    if strategy is None:
        return
    counts = (
        ("backoffLimitCount", strategy.backoff_limit_count),
        ("backoffBaseSeconds", strategy.backoff_base_seconds),
        ("backoffMaxSeconds", strategy.backoff_max_seconds),
    )
    for name, count in counts:
        if count is not None and count < 0:
            yield ("waitForPodsReady", "requeuingStrategy", name), NEGATIVE


def _check_namespace(_namespace: kueue.Namespace) -> Findings:
    return iter(())


# --- workloads ------------------------------------------------------------------------------


def _check_workload(wl: kueue.Workload) -> Findings:
    pod_sets = wl.spec.pod_sets
    if not pod_sets:
        yield ("spec", "podSets"), "must have at least 1 item"
    if len(pod_sets) > MAX_POD_SETS:
        yield ("spec", "podSets"), f"must have at most {MAX_POD_SETS} items, got {len(pod_sets)}"
    if sum(ps.min_count is not None for ps in pod_sets) > 1:
        yield ("spec", "podSets"), "at most one podSet can use minCount"
    names: set[str] = set()
    for index, pod_set in enumerate(pod_sets):
        at = ("spec", "podSets", index)
        if pod_set.name in names:
            yield (*at, "name"), f"duplicate pod set name {pod_set.name!r}"
        names.add(pod_set.name)
        yield from _pod_set(pod_set, at)
    if wl.spec.priority is not None and not INT32[0] <= wl.spec.priority <= INT32[1]:
        yield ("spec", "priority"), "must fit in a 32-bit integer"
    yield from _priority_ref(wl)
    yield from _admission_names(wl, names)
    yield from topology_requests.workload_problems(wl)


def _pod_set(pod_set: kueue.PodSet, at: FieldPath) -> Findings:
    if problem := dns_label_problem(pod_set.name):
        yield (*at, "name"), f"invalid pod set name {pod_set.name!r}: {problem}"
    if pod_set.count < 0:
        yield (*at, "count"), NEGATIVE
    if pod_set.min_count is not None and not 1 <= pod_set.min_count <= pod_set.count:
        yield (*at, "minCount"), "minCount should be positive and less or equal to count"
    spec = pod_set.template.spec
    raw = spec.model_dump(by_alias=True)
    for path, message in (*quantity_problems(raw), *request_limit_problems(raw), *device_problems(raw)):
        yield (*at, "template", "spec", *path), message
    for group in ("initContainers", "containers"):
        for ci, container in enumerate(raw.get(group) or ()):
            if RESERVED_RESOURCE in container["resources"]["requests"]:
                path = (*at, "template", "spec", group, ci, "resources", "requests", RESERVED_RESOURCE)
                yield path, "the key is reserved for internal kueue use"
    yield from _toleration_problems(spec.tolerations, (*at, "template", "spec", "tolerations"))


def _priority_ref(wl: kueue.Workload) -> Findings:
    ref = wl.spec.priority_class_ref
    if ref is None:
        return
    expected = "WorkloadPriorityClass" if ref.group == kueue.KUEUE_GROUP else "PriorityClass"
    if ref.kind != expected:
        yield (
            ("spec", "priorityClassRef", "kind"),
            f"only the {expected} kind is allowed for the {ref.group} group",
        )


def _admission_names(wl: kueue.Workload, names: set[str]) -> Findings:
    admission = wl.status.admission
    if admission is None:
        return
    for index, assignment in enumerate(admission.pod_set_assignments):
        if assignment.name not in names:
            at = ("status", "admission", "podSetAssignments", index, "name")
            yield at, f"pod set {assignment.name!r} not found in spec.podSets"


_CHECKS: dict[type[Any], Callable[[Any], Findings]] = {
    kueue.ResourceFlavor: _check_flavor,
    kueue.ClusterQueue: _check_cluster_queue,
    kueue.Cohort: _check_cohort,
    kueue.LocalQueue: _check_local_queue,
    kueue.WorkloadPriorityClass: _check_priority_value,
    kueue.PriorityClass: _check_priority_value,
    kueue.Topology: _check_topology,
    kueue.AdmissionCheck: _check_admission_check,
    kueue.Configuration: _check_configuration,
    kueue.Namespace: _check_namespace,
    kueue.Workload: _check_workload,
    dra.ResourceClaimTemplate: dra_checks.check_claim_template,
    dra.ResourceClaim: dra_checks.check_claim,
    dra.DeviceClass: dra_checks.check_device_class,
}
