"""Workloads that Kueue builds from pods: pod groups, StatefulSets, Deployments and LeaderWorkerSets.

Kueue admits these through its plain-Pod integration (``pkg/controller/jobs/pod``), fed by the
webhooks and reconcilers of ``pkg/controller/jobs/{deployment,statefulset,leaderworkerset}``:

1. **Pod group** (``kueue.x-k8s.io/pod-group-name`` label and
   ``kueue.x-k8s.io/pod-group-total-count`` annotation on each pod): the pods of one group and
   namespace, across documents, are ONE Workload named as the group (``Pod.workloadName``); its
   pod sets are Kueue's ``constructGroupPodSets``: one per role hash (the
   ``kueue.x-k8s.io/role-hash`` annotation, else :func:`role_hash` of the pod spec), counted,
   sorted by name; with ``kueue.x-k8s.io/pod-group-fast-admission: "true"`` one pod set of the
   total count from the first pod (``constructGroupPodSetsFast``). A group with fewer pods than
   its total count, or whose pods disagree on queue or total count, is Kueue's
   ``validatePodGroupMetadata`` error: Kueue makes no Workload and the pods stay gated; gpuq
   loads the Workload inactive (it never admits) with Kueue's message, a ``stays_pending``
   finding. Extra pods beyond the total count are dropped, last first (``removeExcessPods``).
2. **StatefulSet** with a queue: one pod-group Workload ``GetWorkloadName(uid, name)``
   (``statefulset-<name>-<hash>``) of one pod set ``main`` of ``spec.replicas`` pods (the pod
   reconciler sets fast admission and role hash ``main`` on every pod).
3. **Deployment** with a queue: the webhook labels the pod template with the queue, so every
   pod is a plain Pod workload of its own: ``spec.replicas`` Workloads ``pod-<pod>-<hash>``,
   the pods named ``<deployment>-<index>`` (Kubernetes' ReplicaSet names are random).
4. **LeaderWorkerSet**: one Workload per group ``GetWorkloadName(uid, "<name>-<index>")`` for
   ``spec.replicas`` groups; pod sets ``leader`` (1) and ``worker`` (size - 1), or ``main``
   (size) without a leader template (``podSets``); ``leaderworkerset.sigs.k8s.io/`` labels and
   annotations of the templates dropped except the name label (``dropLWSPrefixedKeys``).

Deployments and StatefulSets are read once, by :mod:`gpuq.api.serving`; :func:`serving_workloads`
derives their pod workloads from the service it reads.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuq.api.source_fields import (
    SourceError,
    check_pod_sets,
    int_field,
    make_pod_set,
    mapping_field,
    pod_template,
    queue_name,
)
from gpuq.api.sources import (
    DEFAULT_POD_SET,
    POD_GROUP_LABEL,
    WORKLOAD_API_VERSION,
    _max_exec_seconds,
    _metadata,
    _priority,
    _workload_metadata,
    workload_name,
)

GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
FAST_ADMISSION = "kueue.x-k8s.io/pod-group-fast-admission"
ROLE_HASH = "kueue.x-k8s.io/role-hash"
IS_GROUP_WORKLOAD = "kueue.x-k8s.io/is-group-workload"
OWNER_NAME = "kueue.x-k8s.io/job-owner-name"
COMPONENT_INDEX = "kueue.x-k8s.io/component-workload-index"
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
_LWS_PREFIX = "leaderworkerset.sigs.k8s.io/"
_LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
_ROLE_FIELDS = (
    "nodeSelector", "affinity", "tolerations", "runtimeClassName", "priority",
    "topologySpreadConstraints", "overhead", "resourceClaims",
)  # fmt: skip


@dataclass(frozen=True)
class Finding:
    """Something to report about a source document; ``field`` is a path in that document."""

    field: str
    message: str
    severity: str = "error"
    stays_pending: bool = False


@dataclass(frozen=True)
class Derived:
    """The Workload manifests one source document gives, and what was found on the way."""

    workloads: tuple[dict[str, Any], ...] = ()
    findings: tuple[Finding, ...] = ()
    not_scheduled: bool = False
    """The document makes no pods by itself (a Tekton Task or Pipeline): listed as not scheduled."""


def build_workload(
    metadata: Mapping[str, Any],
    kind: str,
    name: str,
    pod_sets: list[dict[str, Any]],
    *,
    annotations: Mapping[str, str] | None = None,
    custom_priority: str | None = None,
    active: bool = True,
) -> dict[str, Any]:
    """A Workload manifest as :func:`gpuq.api.sources.to_workload` writes one, for ``pod_sets``."""
    priority_name, priority_source = _priority(metadata, custom_priority, pod_sets)
    spec: dict[str, Any] = {"queueName": queue_name(metadata), "podSets": pod_sets}
    spec["priorityClassName"] = priority_name
    spec["priorityClassSource"] = priority_source
    max_exec = _max_exec_seconds(metadata.get("labels") or {})
    if max_exec is not None:
        spec["maximumExecutionTimeSeconds"] = max_exec
    if not active:
        spec["active"] = False
    meta = _workload_metadata(metadata, kind, name, ())
    meta["annotations"].update(annotations or {})
    return {"apiVersion": WORKLOAD_API_VERSION, "kind": "Workload", "metadata": meta, "spec": spec}


# --- role hashes and pod groups -------------------------------------------------------------------


def role_hash(pod_spec: Mapping[str, Any]) -> str:
    """Kueue's ``GenerateRoleHash``: sha256 of the admission-relevant shape of a pod spec, 8 hex digits.

    The shape is that of ``utilpod.SpecShape`` (container requests and ports, node selector,
    affinity, tolerations, ...), serialized with sorted keys as Go's ``encoding/json`` does maps.
    Values are taken as written (Kubernetes would first default ports' ``protocol`` and
    canonicalize quantities), so the hash can differ from Kueue's while grouping identical
    templates exactly as Kueue does.
    """

    def containers(items: Any) -> list[dict[str, Any]] | None:
        if not isinstance(items, list) or not items:
            return None
        out = []
        for item in items:
            item = item if isinstance(item, dict) else {}
            requests = (item.get("resources") or {}).get("requests")
            ports = [{"protocol": "TCP", **p} if isinstance(p, dict) else p for p in item.get("ports") or []]
            out.append({"ports": ports or None, "resources": {"requests": _quantities(requests)}})
        return out

    shape: dict[str, Any] = {key: pod_spec.get(key) for key in _ROLE_FIELDS}
    shape["initContainers"] = containers(pod_spec.get("initContainers"))
    shape["containers"] = containers(pod_spec.get("containers"))
    if pod_spec.get("resources") is not None:
        shape["resources"] = _quantities((pod_spec.get("resources") or {}).get("requests"))
    text = json.dumps({"spec": shape}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _quantities(requests: Any) -> dict[str, str] | None:
    return {str(k): str(v) for k, v in requests.items()} if isinstance(requests, dict) and requests else None


def group_name(doc: Mapping[str, Any]) -> str:
    """The pod group a ``v1`` Pod belongs to ('' when none): Kueue's ``GetPodGroupName``."""
    if doc.get("apiVersion") != "v1" or doc.get("kind") != "Pod":
        return ""
    metadata = doc.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return str(labels.get(POD_GROUP_LABEL) or "") if isinstance(labels, dict) else ""


def _total_count(metadata: Mapping[str, Any]) -> int:
    """The pod's ``pod-group-total-count``, checked as Kueue's pod webhook does."""
    raw = (metadata.get("annotations") or {}).get(GROUP_TOTAL_COUNT)
    field = f"metadata.annotations[{GROUP_TOTAL_COUNT}]"
    if raw is None:
        both = f"both the '{GROUP_TOTAL_COUNT}' annotation and the '{POD_GROUP_LABEL}' label should be set"
        raise SourceError(field, both)
    try:
        value = int(str(raw), 10)
    except ValueError:
        raise SourceError(field, f"expected an integer, got {raw!r}") from None
    if value < 1:
        raise SourceError(field, f"incorrect annotation value '{GROUP_TOTAL_COUNT}={raw}': group total count "
                          "should be greater than zero")  # fmt: skip
    return value


def pod_groups(docs: Sequence[Mapping[str, Any]]) -> list[Derived]:
    """One :class:`Derived` per document of ``docs`` (all Pods of some group): the group's Workload
    rides on its first pod's document; the others get findings only (step 1 of the module doc)."""
    out = [Derived() for _ in docs]
    groups: dict[tuple[str, str], list[int]] = {}
    for index, doc in enumerate(docs):
        namespace = str((doc.get("metadata") or {}).get("namespace") or "default")
        groups.setdefault((namespace, group_name(doc)), []).append(index)
    for (_, name), members in groups.items():
        try:
            derived, extra = _group(name, [docs[i] for i in members])
        except SourceError as err:
            out[members[0]] = Derived((), (Finding(err.field, err.message),))
            continue
        out[members[0]] = derived
        for index in members[-extra:] if extra else ():
            message = f"pod group {name!r} has more pods than its total count: Kueue deletes this pod"
            out[index] = Derived((), (Finding("metadata.name", message, "warning"),))
    return out


def _group(name: str, pods: list[Mapping[str, Any]]) -> tuple[Derived, int]:
    """The group's Workload and how many extra pods were dropped (Kueue's ``ConstructComposableWorkload``)."""
    metas = [_metadata(pod) for pod in pods]
    counts = [_total_count(m) for m in metas]
    specs = [mapping_field(pod.get("spec"), "spec") for pod in pods]
    total, first = counts[0], metas[0]
    findings: list[Finding] = []
    for meta, count in zip(metas[1:], counts[1:], strict=True):
        if count != total:
            message = (f"pods '{first['name']}' and '{meta['name']}' has different '{GROUP_TOTAL_COUNT}' "
                       f"values: {total}!={count}")  # fmt: skip
            findings.append(Finding(f"metadata.annotations[{GROUP_TOTAL_COUNT}]", message, "error", True))
        if queue_name(meta) != queue_name(first):
            message = (f"pods '{first['name']}' and '{meta['name']}' has different queue names: "
                       f"{queue_name(first)}!={queue_name(meta)}")  # fmt: skip
            findings.append(Finding("metadata.labels", message, "error", True))
    fast = str((first.get("annotations") or {}).get(FAST_ADMISSION)) == "true"
    if not fast and len(pods) < total:
        message = f"'{name}' group has fewer runnable pods than expected ({len(pods)} of {total})"
        findings.append(Finding(f"metadata.labels[{POD_GROUP_LABEL}]", message, "error", True))
    extra = max(0, len(pods) - total)
    pod_sets = _group_pod_sets(
        metas[: len(pods) - extra], specs[: len(pods) - extra], total if fast else None
    )
    check_pod_sets(pod_sets, f"metadata.labels[{POD_GROUP_LABEL}]")
    annotations = {IS_GROUP_WORKLOAD: "true"}
    workload = build_workload(first, "Pod", name, pod_sets, annotations=annotations, active=not findings)
    return Derived((workload,), tuple(findings)), extra


def _group_pod_sets(
    metas: list[dict[str, Any]], specs: list[dict[str, Any]], fast_count: int | None
) -> list[dict[str, Any]]:
    pod_sets: dict[str, dict[str, Any]] = {}
    for meta, spec in zip(metas, specs, strict=True):
        role = str((meta.get("annotations") or {}).get(ROLE_HASH) or role_hash(spec))
        if role in pod_sets:
            pod_sets[role]["count"] += 1
            continue
        pod_sets[role] = make_pod_set(
            role, 1, {"spec": copy.deepcopy(spec)}, f"metadata.annotations[{ROLE_HASH}]"
        )
        if fast_count is not None:
            pod_sets[role]["count"] = fast_count
            break
    return [pod_sets[role] for role in sorted(pod_sets)]


# --- StatefulSet and Deployment (read by gpuq.api.serving) ------------------------------------------


def serving_workloads(
    kind: str, data: Mapping[str, Any], queue: str, replicas: int, template: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The pod workloads of a Deployment or StatefulSet whose service :mod:`gpuq.api.serving` read
    (``queue``, ``replicas`` and the pod ``template`` as it read them); [] without a queue, as
    Kueue's webhooks leave such pods alone (steps 2 and 3 of the module doc)."""
    if not queue or replicas == 0:
        return []
    metadata = _metadata(data)
    labels = {**(metadata.get("labels") or {}), "kueue.x-k8s.io/queue-name": queue}
    owner = {**metadata, "labels": labels}
    pod = _template(template)
    if kind == "StatefulSet":
        name = workload_name(metadata["name"], str(metadata.get("uid") or ""), "StatefulSet", "apps")
        pod_set = make_pod_set(DEFAULT_POD_SET, replicas, pod, "spec")
        return [build_workload(owner, kind, name, [pod_set], annotations={IS_GROUP_WORKLOAD: "true"})]
    out = []
    for index in range(replicas):
        pod_name = f"{metadata['name']}-{index}"
        pod_set = make_pod_set(DEFAULT_POD_SET, 1, copy.deepcopy(pod), "spec")
        out.append(build_workload(owner, kind, workload_name(pod_name, "", "Pod", ""), [pod_set]))
    return out


def _template(template: Mapping[str, Any]) -> dict[str, Any]:
    """A pod template copied as :func:`gpuq.api.source_fields.pod_template` copies one."""
    return pod_template({"t": template}, "t", "spec.template")


# --- leaderworkerset.x-k8s.io/v1 LeaderWorkerSet -----------------------------------------------------


def leaderworkerset(doc: Mapping[str, Any]) -> Derived:
    """One Workload per group (step 4 of the module doc)."""
    metadata = _metadata(doc)
    spec = mapping_field(doc.get("spec"), "spec")
    replicas = int_field(spec, "replicas", "spec.replicas", 1)
    lwt = mapping_field(spec.get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate")
    at = "spec.leaderWorkerTemplate"
    size = int_field(lwt, "size", f"{at}.size", 1)
    if size < 1:
        raise SourceError(f"{at}.size", f"must be at least 1, got {size}")
    pod_sets = []
    worker_name, worker_count = DEFAULT_POD_SET, size
    if lwt.get("leaderTemplate") is not None:
        worker_name, worker_count = "worker", size - 1
        pod_sets.append(_lws_pod_set("leader", 1, lwt, "leaderTemplate", at))
    pod_sets.append(_lws_pod_set(worker_name, worker_count, lwt, "workerTemplate", at))
    check_pod_sets(pod_sets, at)
    uid = str(metadata.get("uid") or "")
    workloads = []
    for index in range(replicas):
        name = workload_name(
            f"{metadata['name']}-{index}", uid, "LeaderWorkerSet", "leaderworkerset.x-k8s.io"
        )
        annotations = {IS_GROUP_WORKLOAD: "true", OWNER_NAME: metadata["name"], COMPONENT_INDEX: str(index)}
        workloads.append(
            build_workload(
                metadata, "LeaderWorkerSet", name, copy.deepcopy(pod_sets), annotations=annotations
            )
        )
    return Derived(tuple(workloads))


def _lws_pod_set(name: str, count: int, lwt: Mapping[str, Any], key: str, at: str) -> dict[str, Any]:
    template = pod_template(lwt, key, f"{at}.{key}")
    meta = template.get("metadata") or {}
    for part in ("labels", "annotations"):
        kept = {
            k: v
            for k, v in meta.get(part, {}).items()
            if not k.startswith(_LWS_PREFIX) or k == _LWS_NAME_LABEL
        }
        if kept:
            meta[part] = kept
        else:
            meta.pop(part, None)
    if not meta:
        template.pop("metadata", None)
    return make_pod_set(name, count, template, f"{at}.{key}")
