"""Conversion of validated api models into the core's frozen input types.

Callers convert only manifests that passed :mod:`gpuq.api.validation` with no
error; this module then never fails. Quantities become core integer amounts
(:func:`gpuq.core.quantity.to_amount`: CPU in milli-units, everything else in
whole units rounded up); fair-sharing weights become exact ``Fraction`` s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

from gpuq.api import dra, kueue, workload_gates
from gpuq.api.deadlines import deadline_of
from gpuq.api.diagnostics import Manifest
from gpuq.api.pods import effective_pod_requests
from gpuq.api.topology_requests import topology_request
from gpuq.core import backfill
from gpuq.core import model as core
from gpuq.core.quantity import to_amount

RESERVED_RESOURCE = "pods"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def convert(manifests: Sequence[Manifest]) -> tuple[core.ClusterConfig, tuple[core.Workload, ...]]:
    """The cluster configuration and the workloads described by ``manifests`` (first definition wins)."""
    models = [m.model for m in manifests]
    config = core.ClusterConfig(
        flavors=_named(models, kueue.ResourceFlavor, flavor),
        cluster_queues=_named(models, kueue.ClusterQueue, cluster_queue),
        cohorts=_named(models, kueue.Cohort, cohort),
        local_queues=_local_queues(models),
        admission_checks=_named(models, kueue.AdmissionCheck, admission_check),
        namespace_labels=_namespace_labels(models),
        scheduler=scheduler_config(next((m for m in models if isinstance(m, kueue.Configuration)), None)),
        topologies=_named(models, kueue.Topology, topology_levels),
    )
    priorities = PriorityTable.from_models(models)
    claims = dra.DraContext.from_models(models)
    workloads = tuple(workload(m, priorities, claims) for m in models if isinstance(m, kueue.Workload))
    return config, _unique_workloads(workloads)


def _named(models: Sequence[Any], kind: type[Any], build: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for obj in models:
        if isinstance(obj, kind):
            out.setdefault(obj.metadata.name, build(obj))
    return dict(sorted(out.items()))


def _unique_workloads(workloads: Sequence[core.Workload]) -> tuple[core.Workload, ...]:
    seen: dict[str, core.Workload] = {}
    for wl in workloads:
        seen.setdefault(wl.key, wl)
    return tuple(seen.values())


# --- configuration objects ------------------------------------------------------------------


def flavor(rf: kueue.ResourceFlavor) -> core.ResourceFlavor:
    spec = rf.spec
    return core.ResourceFlavor(
        name=str(rf.metadata.name),
        node_labels=dict(spec.node_labels),
        node_taints=tuple(core.Taint(t.key, t.value, t.effect) for t in spec.node_taints),
        tolerations=tolerations(spec.tolerations),
        topology_name=spec.topology_name,
    )


def topology_levels(topology: kueue.Topology) -> tuple[str, ...]:
    """The node label of each level, from the widest (block) to the narrowest (host)."""
    return tuple(level.node_label for level in topology.spec.levels)


def tolerations(items: Sequence[kueue.Toleration]) -> tuple[core.Toleration, ...]:
    return tuple(core.Toleration(t.key, t.operator, t.value, t.effect) for t in items)


def resource_groups(groups: Sequence[kueue.ResourceGroup]) -> tuple[core.ResourceGroup, ...]:
    """Resource groups with quotas as core amounts; ``None`` limits stay ``None``."""
    return tuple(
        core.ResourceGroup(
            covered_resources=tuple(group.covered_resources),
            flavors=tuple(
                core.FlavorQuotas(f.name, {q.name: _quota(q) for q in f.resources}) for f in group.flavors
            ),
        )
        for group in groups
    )


def _quota(quota: kueue.ResourceQuota) -> core.ResourceQuota:
    def amount(value: Decimal | None) -> int | None:
        return None if value is None else to_amount(quota.name, value)

    return core.ResourceQuota(
        nominal=to_amount(quota.name, quota.nominal_quota),
        borrowing_limit=amount(quota.borrowing_limit),
        lending_limit=amount(quota.lending_limit),
    )


def fair_weight(fair: kueue.FairSharingWeight | None) -> Fraction:
    """The exact fair-sharing weight; absent means 1."""
    if fair is None or fair.weight is None:
        return Fraction(1)
    return Fraction(fair.weight)


def label_selector(selector: kueue.LabelSelector | None) -> core.LabelSelector | None:
    if selector is None:
        return None
    return core.LabelSelector(
        match_labels=dict(selector.match_labels),
        match_expressions=tuple(
            core.Requirement(r.key, r.operator, tuple(r.values)) for r in selector.match_expressions
        ),
    )


def cluster_queue(cq: kueue.ClusterQueue) -> core.ClusterQueue:
    spec = cq.spec
    preemption = spec.preemption
    borrow = preemption.borrow_within_cohort
    fungibility = spec.flavor_fungibility
    rules = spec.admission_checks_strategy.admission_checks if spec.admission_checks_strategy else []
    return core.ClusterQueue(
        name=str(cq.metadata.name),
        resource_groups=resource_groups(spec.resource_groups),
        cohort=spec.cohort_name or None,
        queueing_strategy=core.QueueingStrategy(spec.queueing_strategy),
        namespace_selector=label_selector(spec.namespace_selector),
        preemption=core.Preemption(
            within_cluster_queue=core.PreemptionPolicy(preemption.within_cluster_queue),
            reclaim_within_cohort=core.PreemptionPolicy(preemption.reclaim_within_cohort),
            borrow_within_cohort=None
            if borrow is None
            else core.BorrowWithinCohort(core.PreemptionPolicy(borrow.policy), borrow.max_priority_threshold),
        ),
        flavor_fungibility=core.FlavorFungibility(
            when_can_borrow=core.FungibilityPolicy(fungibility.when_can_borrow),
            when_can_preempt=core.FungibilityPolicy(fungibility.when_can_preempt),
            preference=None
            if fungibility.preference is None
            else core.FungibilityPreference(fungibility.preference),
        ),
        fair_weight=fair_weight(spec.fair_sharing),
        admission_checks=tuple(core.AdmissionCheckRule(r.name, tuple(r.on_flavors)) for r in rules),
        stop_policy=core.StopPolicy(spec.stop_policy),
        least_lost_work=cq.metadata.annotations.get(VICTIM_ORDER) == "lost-work",
        backfill=cq.metadata.annotations.get(BACKFILL) == "true",
        admission_mode=None
        if spec.admission_scope is None
        else core.AdmissionMode(spec.admission_scope.admission_mode),
    )


BACKFILL = backfill.BACKFILL
"""On a StrictFIFO ClusterQueue: ``"true"`` backfills ahead of a blocked head (docs/backfill.md)."""
VICTIM_ORDER = "gpuq.dev/victim-order"
"""On a ClusterQueue: ``lost-work`` orders its preemption candidates of one priority by the work they
would lose (docs/preemption-protection.md)."""


def cohort(obj: kueue.Cohort) -> core.Cohort:
    return core.Cohort(
        name=str(obj.metadata.name),
        parent=obj.spec.parent_name or None,
        resource_groups=resource_groups(obj.spec.resource_groups),
        fair_weight=fair_weight(obj.spec.fair_sharing),
        usage_half_life_s=_half_life(obj),
    )


def _half_life(obj: kueue.Cohort) -> float | None:
    """A root cohort's ``gpuq.dev/usage-half-life`` (docs/usage-fair-share.md); a bad value is
    ignored here and reported by ``gpuq validate``."""
    value = obj.metadata.annotations.get(workload_gates.USAGE_HALF_LIFE)
    return None if value is None else workload_gates.usage_half_life_s(value)


def admission_check(obj: kueue.AdmissionCheck) -> core.AdmissionCheck:
    return core.AdmissionCheck(name=str(obj.metadata.name), controller_name=obj.spec.controller_name)


def _local_queues(models: Sequence[Any]) -> dict[tuple[str, str], core.LocalQueue]:
    out: dict[tuple[str, str], core.LocalQueue] = {}
    for obj in models:
        if isinstance(obj, kueue.LocalQueue):
            namespace = obj.metadata.namespace or "default"
            lq = core.LocalQueue(
                namespace,
                str(obj.metadata.name),
                obj.spec.cluster_queue,
                core.StopPolicy(obj.spec.stop_policy),
                fair_weight(obj.spec.fair_sharing),
                *_consumed(obj.status),
            )
            out.setdefault((namespace, lq.name), lq)
    return dict(sorted(out.items()))


def _consumed(status: kueue.LocalQueueStatus | None) -> tuple[dict[str, float], float | None]:
    """A LocalQueue's persisted Admission Fair Sharing usage: (consumedResources, lastUpdate)."""
    fair = status.fair_sharing if status is not None else None
    afs = fair.admission_fair_sharing_status if fair is not None else None
    if afs is None:
        return {}, None
    return {r: float(v) for r, v in sorted(afs.consumed_resources.items())}, afs.last_update


def _namespace_labels(models: Sequence[Any]) -> dict[str, Mapping[str, str]]:
    """Declared namespaces' labels, each with its ``kubernetes.io/metadata.name`` label."""
    out: dict[str, Mapping[str, str]] = {}
    for obj in models:
        if isinstance(obj, kueue.Namespace):
            name = str(obj.metadata.name)
            out.setdefault(name, {**obj.metadata.labels, NAMESPACE_NAME_LABEL: name})
    return dict(sorted(out.items()))


def scheduler_config(config: kueue.Configuration | None) -> core.SchedulerConfig:
    """Kueue's Configuration as the core reads it.

    ``v1beta1`` enables fair sharing with ``enable: true``; in ``v1beta2`` its presence enables it
    (an explicit ``enable`` still wins). waitForPodsReady follows :func:`wait_for_pods_ready`: on
    by default in v0.19. The PartialAdmission feature gate defaults to true.
    """
    if config is None:
        return core.SchedulerConfig(wait_for_pods_ready=wait_for_pods_ready(None))
    v1beta1 = config.api_version.endswith("/v1beta1")
    fair = config.fair_sharing
    fair_sharing = core.FairSharing()
    if fair is not None:
        enable = fair.enable if fair.enable is not None else not v1beta1
        strategies = fair.preemption_strategies or [s.value for s in fair_sharing.preemption_strategies]
        fair_sharing = core.FairSharing(enable, tuple(core.FairSharingStrategy(s) for s in strategies))
    return core.SchedulerConfig(
        fair_sharing=fair_sharing,
        partial_admission=config.feature_gates.get("PartialAdmission", True),
        wait_for_pods_ready=wait_for_pods_ready(config),
        feature_gates=dict(config.feature_gates),
        admission_fair_sharing=_admission_fair_sharing(config.admission_fair_sharing),
        ignore_undeclared_resources=_ignores_undeclared(config),
    )


def _admission_fair_sharing(afs: kueue.ConfigAdmissionFairSharing | None) -> core.AdmissionFairSharing | None:
    """``admissionFairSharing`` with Kueue's default sampling interval (5m)."""
    if afs is None:
        return None
    interval = afs.usage_sampling_interval or core.AdmissionFairSharing().usage_sampling_interval_s
    return core.AdmissionFairSharing(
        afs.usage_half_life_time, interval, dict(sorted(afs.resource_weights.items()))
    )


def _ignores_undeclared(config: kueue.Configuration) -> bool:
    """``resources.quotaCheckStrategy: IgnoreUndeclared`` with its gate on (beta, default on since v0.19)."""
    strategy = config.resources.quota_check_strategy if config.resources is not None else None
    return strategy == "IgnoreUndeclared" and config.feature_gates.get("QuotaCheckStrategy", True)


PODS_READY_TIMEOUT_S = 1800.0  # v1beta2 DefaultWaitForPodsReadyTimeout
PODS_READY_TIMEOUT_V1BETA1_S = 300.0  # v1beta1 defaultPodsReadyTimeout
DISABLE_GATE = "DisableWaitForPodsReady"  # alpha since v0.19, off by default


def wait_for_pods_ready(config: kueue.Configuration | None) -> core.WaitForPodsReady:
    """waitForPodsReady as Kueue v0.19 runs it after decoding, defaulting and conversion to v1beta2
    (``apis/config/v1beta2/defaults.go``, ``apis/config/v1beta1/defaults.go`` and
    ``configuration_conversion.go``, ``pkg/config/config.go`` ``Load``, ``pkg/util/waitforpodsready``):

    1. no Configuration: the manager defaults an empty ``v1beta2`` one, so it is on with every default;
    2. ``v1beta2``: always on (defaulting fills an absent ``waitForPodsReady``; the version has no
       ``enable``): ``timeout`` 30m (also for ``0s``), ``blockAdmission`` false, ``recoveryTimeout``
       the timeout (``0s``: none), ``requeuingStrategy`` timestamp Eviction, backoffBaseSeconds 60,
       backoffMaxSeconds 3600, backoffLimitCount unset (requeued for ever);
    3. ``v1beta1``: on only with ``enable: true``; then ``timeout`` 5m and ``blockAdmission`` true
       (v1beta1 defaults it to ``enable``), the rest as in ``v1beta2``;
    4. the ``DisableWaitForPodsReady`` feature gate turns it off in every version.
    """
    gates = config.feature_gates if config is not None else {}
    if gates.get(DISABLE_GATE, False):
        return core.WaitForPodsReady()
    v1beta1 = config is not None and config.api_version.endswith("/v1beta1")
    wait = config.wait_for_pods_ready if config is not None else None
    if v1beta1 and (wait is None or not wait.enable):
        return core.WaitForPodsReady()
    wait = wait or kueue.ConfigWaitForPodsReady()
    if v1beta1:
        timeout = PODS_READY_TIMEOUT_V1BETA1_S if wait.timeout is None else wait.timeout
        block = True if wait.block_admission is None else wait.block_admission
    else:
        timeout = wait.timeout or PODS_READY_TIMEOUT_S
        block = bool(wait.block_admission)
    recovery = timeout if wait.recovery_timeout is None else wait.recovery_timeout
    requeue = wait.requeuing_strategy or kueue.RequeuingStrategy()
    return core.WaitForPodsReady(
        enable=True,
        timeout_s=timeout,
        block_admission=block,
        requeuing_backoff_base_s=float(_or(requeue.backoff_base_seconds, 60)),
        requeuing_backoff_max_s=float(_or(requeue.backoff_max_seconds, 3600)),
        requeuing_backoff_limit_count=requeue.backoff_limit_count,
        recovery_timeout_s=recovery if recovery > 0 else None,
        requeuing_timestamp=core.RequeuingTimestamp(requeue.timestamp or "Eviction"),
    )


def _or(value: int | None, default: int) -> int:
    """Kueue's ``cmp.Or`` on a pointer: unset takes the default, an explicit 0 stays 0."""
    return default if value is None else value


# --- workloads ------------------------------------------------------------------------------


class PriorityTable:
    """Priority class values: WorkloadPriorityClass and PriorityClass by name, and the global default."""

    def __init__(
        self, workload_classes: Mapping[str, int], pod_classes: Mapping[str, int], default: int
    ) -> None:
        self.classes = {kueue.WPC_SOURCE: dict(workload_classes), kueue.POD_PC_SOURCE: dict(pod_classes)}
        self.default = default

    @classmethod
    def from_models(cls, models: Sequence[Any]) -> PriorityTable:
        wpcs = {str(m.metadata.name): m.value for m in models if isinstance(m, kueue.WorkloadPriorityClass)}
        pcs = [m for m in models if isinstance(m, kueue.PriorityClass)]
        default = next((m.value for m in pcs if m.global_default), 0)
        return cls(wpcs, {str(m.metadata.name): m.value for m in pcs}, default)

    def resolve(self, wl: kueue.Workload) -> int:
        """Explicit ``spec.priority`` wins; then the referenced class; then the global default, else 0."""
        if wl.spec.priority is not None:
            return wl.spec.priority
        ref = wl.priority_class()
        if ref is None:
            return self.default
        return self.classes[ref[0]].get(ref[1], 0)


def _gated_by(wl: kueue.Workload, gates: Mapping[str, bool]) -> str:
    """The Workload's admission gates while the AdmissionGatedBy gate is on (:mod:`workload_gates`)."""
    if not workload_gates.enabled(gates, "AdmissionGatedBy"):
        return ""
    return wl.metadata.annotations.get(workload_gates.ADMISSION_GATED_BY) or ""


def _boost(wl: kueue.Workload, gates: Mapping[str, bool]) -> int:
    """The ``priority-boost`` of the Workload while the PriorityBoost gate is on; an invalid one adds 0."""
    if not workload_gates.enabled(gates, "PriorityBoost"):
        return 0
    return workload_gates.priority_boost(wl.metadata.annotations.get(workload_gates.PRIORITY_BOOST)) or 0


def workload(
    wl: kueue.Workload, priorities: PriorityTable, claims: dra.DraContext | None = None
) -> core.Workload:
    """A core Workload: per-pod requests, resolved priority, and any admission in ``status``.

    ``claims``: the DRA objects and the Configuration's ``resources`` that decide what a pod set
    charges against quota (:func:`quota_requests`); a claim that cannot be resolved makes the
    workload inadmissible with Kueue's message."""
    meta = wl.metadata
    status = wl.status
    reserved = next(
        (
            c.last_transition_time
            for c in status.conditions
            if c.type == "QuotaReserved" and c.status == "True"
        ),
        None,
    )
    claims = claims if claims is not None else dra.DraContext()
    charges = dra.workload_charges(wl, claims)
    resources = claims.config.resources if claims.config is not None else None
    pod_sets = tuple(pod_set(ps, resources, charges) for ps in wl.spec.pod_sets)
    gates = claims.config.feature_gates if claims.config is not None else {}
    annotations = wl.metadata.annotations
    return core.Workload(
        namespace=meta.namespace or "default",
        name=str(meta.name),
        queue_name=wl.spec.queue_name,
        pod_sets=pod_sets,
        priority=priorities.resolve(wl) + _boost(wl, gates),
        creation_time=meta.creation_timestamp or 0.0,
        uid=meta.uid,
        active=wl.spec.active,
        admission=admission(status.admission, pod_sets),
        quota_reserved_time=reserved if status.admission is not None else None,
        admission_checks={c.name: core.CheckState(c.state) for c in status.admission_checks},
        requeue_at=status.requeue_state.requeue_at if status.requeue_state else None,
        inadmissible=charges.problem[1] if charges.problem else "",
        admission_gated_by=_gated_by(wl, gates),
        min_runtime_s=workload_gates.min_runtime_s(annotations.get(workload_gates.MIN_RUNTIME)) or 0.0,
        expected_runtime_s=workload_gates.expected_duration(
            annotations.get(workload_gates.EXPECTED_DURATION)
        )[0],
        maximum_execution_s=wl.spec.maximum_execution_time_seconds,
        past_execution_s=status.accumulated_past_execution_time_seconds or 0,
        deadline=deadline_of(meta.annotations, meta.creation_timestamp or 0.0),
    )


def pod_set(
    ps: kueue.PodSet, resources: kueue.ConfigResources | None = None, charges: dra.Charges | None = None
) -> core.PodSet:
    """Per-pod effective requests (``pods`` excluded), node selector, required affinity, tolerations,
    and the topology request (:mod:`gpuq.api.topology_requests`); the quota requests when the
    Configuration's ``resources`` or DRA ``charges`` make them differ (:func:`quota_requests`)."""
    spec = ps.template.spec
    raw = spec.model_dump(by_alias=True)
    effective = effective_pod_requests(raw)
    requests = _amounts(effective)
    quota = _amounts(quota_requests(effective, resources, charges or dra.Charges(), ps.name))
    return core.PodSet(
        name=ps.name,
        count=ps.count,
        requests=requests,
        min_count=ps.min_count,
        node_selector=dict(spec.node_selector),
        node_affinity=required_node_affinity(spec.affinity),
        tolerations=tolerations(spec.tolerations),
        topology=topology_request(ps),
        quota_requests=quota if quota != requests else None,
    )


def _amounts(requests: Mapping[str, Decimal]) -> dict[str, int]:
    return {
        name: to_amount(name, value) for name, value in sorted(requests.items()) if name != RESERVED_RESOURCE
    }


def quota_requests(
    requests: Mapping[str, Decimal],
    resources: kueue.ConfigResources | None,
    charges: dra.Charges,
    pod_set: str,
) -> dict[str, Decimal]:
    """One pod's requests as Kueue's ``totalRequestsFromPodSets`` counts them: excluded prefixes
    dropped, transformations applied, DRA-backed extended resources replaced by their charge, the
    claims' charges added; negative totals floored at zero."""
    out = dict(requests)
    if resources is not None:
        out = {k: v for k, v in out.items() if not k.startswith(tuple(resources.exclude_resource_prefixes))}
        out = transformed(out, resources.transformations)
    for name in charges.replaced.get(pod_set, ()):
        out.pop(name, None)
    for name, amount in charges.extra.get(pod_set, {}).items():
        out[name] = out.get(name, Decimal(0)) + amount
    return {k: max(v, Decimal(0)) for k, v in out.items()}


def transformed(
    requests: Mapping[str, Decimal], transformations: Sequence[kueue.ResourceTransformation]
) -> dict[str, Decimal]:
    """Kueue's ``applyResourceTransformations``: each input's outputs (scaled by ``multiplyBy``'s
    request when set) are summed apart and floored at zero, the input kept under ``Retain``."""
    by_input = {t.input: t for t in transformations}
    retained: dict[str, Decimal] = {}
    generated: dict[str, Decimal] = {}
    for name, amount in requests.items():
        rule = by_input.get(name)
        if rule is None:
            retained[name] = amount
            continue
        base = (
            amount * requests[rule.multiply_by]
            if rule.multiply_by and rule.multiply_by in requests
            else amount
        )
        for output, factor in rule.outputs.items():
            generated[output] = generated.get(output, Decimal(0)) + base * factor
        if rule.strategy == "Retain":
            retained[name] = amount
    for name, amount in generated.items():
        retained[name] = retained.get(name, Decimal(0)) + max(amount, Decimal(0))
    return retained


def required_node_affinity(affinity: Mapping[str, Any] | None) -> tuple[tuple[core.Requirement, ...], ...]:
    """``requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`` as ORed AND-terms."""
    node = (affinity or {}).get("nodeAffinity") or {}
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = []
    for term in required.get("nodeSelectorTerms") or ():
        parsed = kueue.NodeSelectorTerm.model_validate(term)
        terms.append(
            tuple(core.Requirement(r.key, r.operator, tuple(r.values)) for r in parsed.match_expressions)
        )
    return tuple(terms)


def admission(value: kueue.Admission | None, pod_sets: Sequence[core.PodSet]) -> core.Admission | None:
    """The admission recorded in ``status``.

    A missing count falls back to the pod set's count, and a missing
    ``resourceUsage`` (hand-written status) to per-pod requests × count for the
    resources the assignment names a flavor for.
    """
    if value is None:
        return None
    by_name = {ps.name: ps for ps in pod_sets}
    assignments = []
    for a in value.pod_set_assignments:
        spec = by_name.get(a.name)
        count = a.count if a.count is not None else (spec.count if spec else 0)
        usage = {r: to_amount(r, q) for r, q in a.resource_usage.items()}
        if not usage and spec is not None:
            usage = {r: v * count for r, v in spec.requests.items() if r in a.flavors}
            if RESERVED_RESOURCE in a.flavors:
                usage[RESERVED_RESOURCE] = count
        recorded = recorded_topology(a.topology_assignment)
        assignments.append(core.PodSetAssignment(a.name, dict(a.flavors), usage, count, recorded))
    return core.Admission(cluster_queue=value.cluster_queue, pod_set_assignments=tuple(assignments))


def recorded_topology(value: kueue.TopologyAssignment | None) -> core.RecordedTopology | None:
    """Decode Kueue's recorded topology assignment, either encoding, into pods per domain.

    v1beta2 ``slices`` compress runs of domains: per level one ``universal`` value or
    ``individual`` roots between a common prefix and suffix; pod counts alike.
    """
    if value is None:
        return None
    domains: list[tuple[tuple[str, ...], int]] = [(tuple(d.values), d.count) for d in value.domains or ()]
    for piece in value.slices or ():
        counts = piece.pod_counts
        for i in range(piece.domain_count):
            values = tuple(_slice_value(level, i) for level in piece.values_per_level)
            count = counts["universal"] if counts.get("universal") is not None else counts["individual"][i]
            domains.append((values, int(count)))
    return core.RecordedTopology(tuple(value.levels), tuple(domains))


def _slice_value(level: kueue.SliceLevelValues, index: int) -> str:
    """Value ``index`` of one level of a slice, as Kueue's ``pkg/util/tas`` ``InternalFromV1Beta2``
    rebuilds it: the universal value, else ``prefix + roots[index] + suffix``."""
    if level.universal is not None:
        return str(level.universal)
    assert level.individual is not None  # checked by topology_requests.recorded_assignment_problems
    individual = level.individual
    return f"{individual.prefix or ''}{individual.roots[index]}{individual.suffix or ''}"
