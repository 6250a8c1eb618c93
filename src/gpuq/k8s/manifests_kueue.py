"""Kueue's objects as Kueue defines them, from the typed models the loader read.

gpuq reads every Kueue version into the v1beta2 shape (:func:`gpuq.api.kueue.upgrade`);
this module writes that shape back in the version the target Kueue release serves
(:mod:`gpuq.k8s.kueue_releases`: by default its storage version), every kind in the
same version, as every release from v0.14 serves them:

* ``v1beta2`` (storage version from Kueue v0.16; default for v0.19): as read.
* ``v1beta1`` (v0.14 to v0.19, deprecated from v0.16): ``spec.cohort``, the
  fungibility policy ``MayStopSearch`` spelt ``Borrow`` / ``Preempt`` (its older
  names, which every release's v1beta1 accepts); Cohort keeps ``spec.parentName``.

Only fields gpuq models are written; unknown fields were reported when loading.
Quantities are written exactly as read (``format_quantity``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuq.api import kueue
from gpuq.api.diagnostics import Manifest
from gpuq.k8s.export_common import (
    MANAGED_BY,
    KueueVersion,
    Obj,
    drop_empty,
    first_models,
    format_quantity,
    make,
)

GROUP = "kueue.x-k8s.io"
_V1BETA1_MAY_STOP = {"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"}


def kueue_objects(manifests: Sequence[Manifest], version: KueueVersion) -> list[Obj]:
    """Every Kueue configuration object, in apply order: flavors and topologies before queues."""
    api = f"{GROUP}/{version}"
    out: list[Obj] = []
    out += [_topology(t, api) for t in first_models(manifests, kueue.Topology)]
    out += [_resource_flavor(f, api) for f in first_models(manifests, kueue.ResourceFlavor)]
    out += [_priority_class(p, api) for p in first_models(manifests, kueue.WorkloadPriorityClass)]
    out += [_provisioning_config(p, api) for p in first_models(manifests, kueue.ProvisioningRequestConfig)]
    out += [_admission_check(c, api) for c in first_models(manifests, kueue.AdmissionCheck)]
    out += [_cohort(c, api) for c in first_models(manifests, kueue.Cohort)]
    out += [_cluster_queue(q, api, version) for q in first_models(manifests, kueue.ClusterQueue)]
    out += [_local_queue(q, api) for q in first_models(manifests, kueue.LocalQueue)]
    return out


def _named(api: str, kind: str, model: Any, namespace: str | None = None) -> Obj:
    """The envelope, keeping the user's labels and annotations."""
    labels = {**MANAGED_BY, **model.metadata.labels}
    obj = make(api, kind, str(model.metadata.name), namespace, labels=labels)
    if model.metadata.annotations:
        obj["metadata"]["annotations"] = dict(model.metadata.annotations)
    return obj


def _topology(model: kueue.Topology, api: str) -> Obj:
    levels = [{"nodeLabel": level.node_label} for level in model.spec.levels]
    return {**_named(api, "Topology", model), "spec": {"levels": levels}}


def _resource_flavor(model: kueue.ResourceFlavor, api: str) -> Obj:
    spec = model.spec
    body = drop_empty(
        {
            "nodeLabels": dict(spec.node_labels),
            "nodeTaints": [_taint(t) for t in spec.node_taints],
            "tolerations": [_toleration(t) for t in spec.tolerations],
            "topologyName": spec.topology_name,
        }
    )
    return {**_named(api, "ResourceFlavor", model), "spec": body}


def _taint(taint: kueue.Taint) -> Obj:
    return drop_empty({"key": taint.key, "value": taint.value or None, "effect": taint.effect})


def _toleration(item: kueue.Toleration) -> Obj:
    return drop_empty(
        {
            "key": item.key or None,
            "operator": item.operator,
            "value": item.value or None,
            "effect": item.effect or None,
            "tolerationSeconds": item.toleration_seconds,
        }
    )


def _priority_class(model: kueue.WorkloadPriorityClass, api: str) -> Obj:
    obj = {**_named(api, "WorkloadPriorityClass", model), "value": model.value}
    if model.description:
        obj["description"] = model.description
    return obj


def _provisioning_config(model: kueue.ProvisioningRequestConfig, api: str) -> Obj:
    spec = model.spec
    retry = spec.retry_strategy
    body = drop_empty(
        {
            "provisioningClassName": spec.provisioning_class_name,
            "parameters": dict(spec.parameters),
            "managedResources": list(spec.managed_resources),
            "retryStrategy": {
                "backoffLimitCount": retry.backoff_limit_count,
                "backoffBaseSeconds": retry.backoff_base_seconds,
                "backoffMaxSeconds": retry.backoff_max_seconds,
            },
            "podSetMergePolicy": spec.pod_set_merge_policy,
            "podSetUpdates": spec.pod_set_updates,
        }
    )
    return {**_named(api, "ProvisioningRequestConfig", model), "spec": body}


def _admission_check(model: kueue.AdmissionCheck, api: str) -> Obj:
    spec = model.spec
    params = spec.parameters
    body = drop_empty(
        {
            "controllerName": spec.controller_name,
            "parameters": None
            if params is None
            else {"apiGroup": params.api_group, "kind": params.kind, "name": params.name},
            "retryDelayMinutes": spec.retry_delay_minutes,
        }
    )
    return {**_named(api, "AdmissionCheck", model), "spec": body}


def resource_groups(groups: Sequence[kueue.ResourceGroup]) -> list[Obj]:
    """Resource groups with every quantity written exactly."""
    return [
        {
            "coveredResources": list(group.covered_resources),
            "flavors": [
                {"name": flavor.name, "resources": [_quota(q) for q in flavor.resources]}
                for flavor in group.flavors
            ],
        }
        for group in groups
    ]


def _quota(quota: kueue.ResourceQuota) -> Obj:
    out: Obj = {"name": quota.name, "nominalQuota": format_quantity(quota.name, quota.nominal_quota)}
    if quota.borrowing_limit is not None:
        out["borrowingLimit"] = format_quantity(quota.name, quota.borrowing_limit)
    if quota.lending_limit is not None:
        out["lendingLimit"] = format_quantity(quota.name, quota.lending_limit)
    return out


def _fair_sharing(fair: kueue.FairSharingWeight | None) -> Obj | None:
    if fair is None or fair.weight is None:
        return None
    return {"weight": format_quantity("weight", fair.weight)}


def _cohort(model: kueue.Cohort, api: str) -> Obj:
    spec = model.spec
    body = drop_empty(
        {
            "parentName": spec.parent_name,
            "resourceGroups": resource_groups(spec.resource_groups),
            "fairSharing": _fair_sharing(spec.fair_sharing),
        }
    )
    return {**_named(api, "Cohort", model), "spec": body}


def _cluster_queue(model: kueue.ClusterQueue, api: str, version: KueueVersion) -> Obj:
    spec = model.spec
    body: Obj = {"cohort" if version == "v1beta1" else "cohortName": spec.cohort_name}
    body["resourceGroups"] = resource_groups(spec.resource_groups)
    body["queueingStrategy"] = spec.queueing_strategy
    body["flavorFungibility"] = _fungibility(spec.flavor_fungibility, version)
    body["preemption"] = _preemption(spec.preemption)
    if spec.admission_checks_strategy is not None:
        rules = spec.admission_checks_strategy.admission_checks
        body["admissionChecksStrategy"] = {
            "admissionChecks": [drop_empty({"name": r.name, "onFlavors": list(r.on_flavors)}) for r in rules]
        }
    body["stopPolicy"] = spec.stop_policy
    body["fairSharing"] = _fair_sharing(spec.fair_sharing)
    if spec.admission_scope is not None:
        body["admissionScope"] = {"admissionMode": spec.admission_scope.admission_mode}
    body["concurrentAdmissionPolicy"] = spec.concurrent_admission_policy  # kept, not modelled yet
    body = drop_empty(body)
    if spec.namespace_selector is not None:  # ``{}`` selects every namespace: keep it
        body["namespaceSelector"] = label_selector(spec.namespace_selector)
    return {**_named(api, "ClusterQueue", model), "spec": body}


def label_selector(selector: kueue.LabelSelector) -> Obj:
    """A label selector; ``{}`` (every namespace) stays ``{}``."""
    return drop_empty(
        {
            "matchLabels": dict(selector.match_labels),
            "matchExpressions": [
                drop_empty({"key": r.key, "operator": r.operator, "values": list(r.values)})
                for r in selector.match_expressions
            ],
        }
    )


def _fungibility(fungibility: kueue.FlavorFungibility, version: KueueVersion) -> Obj:
    out: Obj = {
        "whenCanBorrow": fungibility.when_can_borrow,
        "whenCanPreempt": fungibility.when_can_preempt,
    }
    if version == "v1beta1":
        out = {k: _V1BETA1_MAY_STOP[k] if v == "MayStopSearch" else v for k, v in out.items()}
    if fungibility.preference is not None:
        out["preference"] = fungibility.preference
    return out


def _preemption(preemption: kueue.Preemption) -> Obj:
    out: Obj = {
        "reclaimWithinCohort": preemption.reclaim_within_cohort,
        "withinClusterQueue": preemption.within_cluster_queue,
    }
    borrow = preemption.borrow_within_cohort
    if borrow is not None:
        out["borrowWithinCohort"] = drop_empty(
            {"policy": borrow.policy, "maxPriorityThreshold": borrow.max_priority_threshold}
        )
    return out


def _local_queue(model: kueue.LocalQueue, api: str) -> Obj:
    spec = model.spec
    namespace = model.metadata.namespace or "default"
    body = drop_empty(
        {
            "clusterQueue": spec.cluster_queue,
            "stopPolicy": spec.stop_policy,
            "fairSharing": _fair_sharing(spec.fair_sharing),
        }
    )
    return {**_named(api, "LocalQueue", model, namespace), "spec": body}
