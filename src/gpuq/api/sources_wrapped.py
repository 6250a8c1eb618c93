"""Sources that wrap other objects: AppWrapper (workload.codeflare.dev/v1beta2), CronJob (batch/v1)
and Sandbox (agents.x-k8s.io/v1alpha1).

**AppWrapper** is Kueue's ``pkg/controller/jobs/appwrapper`` integration, whose ``PodSets`` reads
the AppWrapper project's ``awutils.GetComponentPodSpecs``:

1. for each component, its declared ``podSets`` (``path`` into the component, from
   ``template``; ``replicas``, default 1), else the ones AppWrapper infers for known kinds
   (``InferPodSets``: Pod, Deployment, StatefulSet, Job, JobSet, PyTorchJob, RayCluster,
   RayJob); a component of another kind without declared pod sets is refused, as
   AppWrapper's webhook refuses it;
2. each pod set is named ``<appwrapper>-<index>`` (counted over all components) with the pod
   template at its path (labels, annotations and spec; AppWrapper's copy also fills Kubernetes
   defaults, which decide nothing gpuq admits);
3. the Workload is ``GetWorkloadNameForAppWrapper``: ``appwrapper-<name>-<hash>``.

**CronJob** is not a workload in Kueue: the Jobs it creates are. ``gpuq admit`` turns a CronJob
into the Job its controller would create next (``<name>-<scheduled time in minutes>``, the
labels and annotations of ``spec.jobTemplate.metadata``), scheduled after the CronJob's
``creationTimestamp`` (else the epoch); a suspended CronJob gives none (a warning).

**Sandbox** (kubernetes-sigs/agent-sandbox) is not a Kueue integration either: its controller
creates one Pod of ``spec.podTemplate``, named as the Sandbox, and a queue-name label on that
template makes the pod a plain-Pod workload of Kueue's pod integration (Kueue's
``pod-based-workloads`` sandbox example). ``spec.replicas: 0`` (a paused Sandbox) makes no pod.
"""

from __future__ import annotations

import copy
import datetime
import re
import zoneinfo
from collections.abc import Mapping
from typing import Any

from gpuq.api.source_fields import SourceError, check_pod_sets, make_pod_set, mapping_field
from gpuq.api.sources import _metadata, to_workload, workload_name
from gpuq.api.sources_pods import Derived, Finding, build_workload
from gpuq.core import cron

_PATH_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


# --- AppWrapper ---------------------------------------------------------------------------------


def appwrapper(doc: Mapping[str, Any]) -> Derived:
    """The AppWrapper's one Workload (steps 1-3 of the module doc)."""
    metadata = _metadata(doc)
    spec = mapping_field(doc.get("spec"), "spec")
    components = spec.get("components")
    if not isinstance(components, list) or not components:
        raise SourceError("spec.components", "expected a non-empty list of components")
    pod_sets: list[dict[str, Any]] = []
    for index, item in enumerate(components):
        at = f"spec.components[{index}]"
        component = mapping_field(item, at)
        template = mapping_field(component.get("template"), f"{at}.template")
        declared = component.get("podSets")
        if declared is not None and not isinstance(declared, list):
            raise SourceError(f"{at}.podSets", "expected a list")
        entries = declared or _infer(template, at)
        for number, entry in enumerate(entries):
            where = f"{at}.podSets[{number}]"
            entry = mapping_field(entry, where)
            path, replicas = entry.get("path"), entry.get("replicas", 1)
            if not isinstance(path, str):
                raise SourceError(f"{where}.path", "is required")
            if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
                raise SourceError(f"{where}.replicas", f"expected a non-negative integer, got {replicas!r}")
            pod = _template_at({"template": template}, path, f"{where}.path")
            name = f"{metadata['name']}-{len(pod_sets)}"
            pod_sets.append(make_pod_set(name, replicas, pod, f"{where}.path"))
    check_pod_sets(pod_sets, "spec.components")
    name = workload_name(
        metadata["name"], str(metadata.get("uid") or ""), "AppWrapper", "workload.codeflare.dev"
    )
    return Derived((build_workload(metadata, "AppWrapper", name, pod_sets),))


def _infer(template: Mapping[str, Any], at: str) -> list[dict[str, Any]]:
    """AppWrapper's ``InferPodSets`` for the kinds it knows."""
    kind = f"{template.get('apiVersion')}/{template.get('kind')}"
    spec = mapping_field(template.get("spec"), "spec", required=False)
    if kind == "v1/Pod":
        return [{"path": "template"}]
    if kind in ("apps/v1/Deployment", "apps/v1/StatefulSet"):
        return [{"path": "template.spec.template", "replicas": _int(spec.get("replicas"), 1)}]
    if kind == "batch/v1/Job":
        return [{"path": "template.spec.template", "replicas": _job_pods(spec)}]
    if kind == "jobset.x-k8s.io/v1alpha2/JobSet":
        return [
            {
                "path": f"template.spec.replicatedJobs[{i}].template.spec.template",
                "replicas": _int(job.get("replicas"), 1)
                * _job_pods((job.get("template") or {}).get("spec") or {}),
            }
            for i, job in enumerate(spec.get("replicatedJobs") or [])
            if isinstance(job, dict)
        ]
    if kind == "kubeflow.org/v1/PyTorchJob":
        replica_specs = spec.get("pytorchReplicaSpecs") or {}
        return [
            {
                "path": f"template.spec.pytorchReplicaSpecs.{t}.template",
                "replicas": _int(replica_specs[t].get("replicas"), 1),
            }
            for t in ("Master", "Worker")
            if isinstance(replica_specs.get(t), dict) and "template" in replica_specs[t]
        ]
    if kind in ("ray.io/v1/RayCluster", "ray.io/v1/RayJob"):
        prefix, cluster = ("template.spec.", spec) if kind.endswith("RayCluster") else (
            "template.spec.rayClusterSpec.", spec.get("rayClusterSpec") or {})  # fmt: skip
        groups = [
            {"path": f"{prefix}workerGroupSpecs[{i}].template", "replicas": _int(group.get("replicas"), 1)}
            for i, group in enumerate(cluster.get("workerGroupSpecs") or [])
            if isinstance(group, dict) and "template" in group
        ]
        return [{"path": f"{prefix}headGroupSpec.template", "replicas": 1}, *groups]
    raise SourceError(f"{at}.podSets", f"AppWrapper cannot infer the pod sets of a {kind}; declare them")


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _job_pods(spec: Mapping[str, Any]) -> int:
    parallelism = _int(spec.get("parallelism"), 1)
    completions = spec.get("completions")
    return min(parallelism, completions) if isinstance(completions, int) else parallelism


def _template_at(root: Mapping[str, Any], path: str, field: str) -> dict[str, Any]:
    """The pod template at an AppWrapper path (``template.spec.template``, ``[i]`` for lists)."""
    if not path.startswith("template"):
        raise SourceError(field, f"first element of the path must be 'template', got {path!r}")
    cursor: Any = root["template"]
    rest = path[len("template") :]
    while rest:
        match = _PATH_PART.match(rest)
        if match is None:
            raise SourceError(field, f"invalid path element {rest!r} in {path!r}")
        key, index = match.group(1), match.group(2)
        if key is not None and isinstance(cursor, dict) and key in cursor:
            cursor = cursor[key]
        elif index is not None and isinstance(cursor, list) and int(index) < len(cursor):
            cursor = cursor[int(index)]
        else:
            raise SourceError(
                field, f"{path!r} does not lead to a pod template (stops at {match.group(0)!r})"
            )
        rest = rest[match.end() :]
    if not isinstance(cursor, dict) or not isinstance(cursor.get("spec"), dict):
        raise SourceError(field, f"content at {path} does not contain a spec")
    meta = mapping_field(cursor.get("metadata"), "metadata", required=False)
    kept = {k: dict(meta[k]) for k in ("labels", "annotations") if isinstance(meta.get(k), dict) and meta[k]}
    out: dict[str, Any] = {"metadata": copy.deepcopy(kept)} if kept else {}
    out["spec"] = copy.deepcopy(cursor["spec"])
    return out


# --- CronJob --------------------------------------------------------------------------------------


def cronjob(doc: Mapping[str, Any]) -> Derived:
    """The Job a CronJob creates next, as its Workload (the module doc)."""
    metadata = _metadata(doc)
    spec = mapping_field(doc.get("spec"), "spec")
    schedule, zone = parse_schedule(spec), time_zone(spec)
    if spec.get("suspend") is True:
        return Derived(
            (),
            (
                Finding(
                    "spec.suspend", "a suspended CronJob creates no Job: not scheduled by gpuq", "warning"
                ),
            ),
        )
    created = _timestamp(metadata.get("creationTimestamp"))
    at_s = schedule.next_after(created if created is not None else 0.0, zone)
    if at_s is None:
        return Derived(
            (), (Finding("spec.schedule", "the schedule never fires: no Job to schedule", "warning"),)
        )
    try:
        return Derived((to_workload(next_job(doc, at_s)),))
    except SourceError as err:  # a field of the Job is one of spec.jobTemplate
        raise SourceError(f"spec.jobTemplate.{err.field}", err.message) from None


def parse_schedule(spec: Mapping[str, Any]) -> cron.Schedule:
    """``spec.schedule`` parsed; a :class:`SourceError` at that field when it is not cron."""
    text = spec.get("schedule")
    if not isinstance(text, str) or not text.strip():
        raise SourceError("spec.schedule", "is required")
    try:
        return cron.parse(text)
    except cron.CronError as err:
        raise SourceError("spec.schedule", str(err)) from None


def time_zone(spec: Mapping[str, Any]) -> datetime.tzinfo | None:
    """``spec.timeZone`` as a zone (None: UTC, as the controller's default ``time.Local`` is in a
    cluster); an unknown name is refused at that field, as the CronJob API's validation refuses it."""
    name = spec.get("timeZone")
    if name is None:
        return None
    message = f"unknown time zone {name!r}: expected an IANA name like Europe/Paris"
    unknown = SourceError("spec.timeZone", message)
    if not isinstance(name, str) or not name or name != name.strip() or name.startswith("/") or ".." in name:
        raise unknown
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise unknown from None


def next_job(doc: Mapping[str, Any], at_s: float) -> dict[str, Any]:
    """The ``batch/v1`` Job the CronJob controller creates for the run scheduled at ``at_s``
    (``getJobFromTemplate2``: named ``<cronjob>-<minutes since the epoch>``)."""
    metadata = _metadata(doc)
    template = mapping_field(mapping_field(doc.get("spec"), "spec").get("jobTemplate"), "spec.jobTemplate")
    tmeta = mapping_field(template.get("metadata"), "spec.jobTemplate.metadata", required=False)
    job_meta: dict[str, Any] = {
        "name": f"{metadata['name']}-{int(at_s // 60)}",
        "namespace": metadata.get("namespace") or "default",
        "labels": dict(tmeta.get("labels") or {}),
        "annotations": dict(tmeta.get("annotations") or {}),
        "creationTimestamp": _rfc3339(at_s),
    }
    job_spec = mapping_field(template.get("spec"), "spec.jobTemplate.spec")
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_meta, "spec": copy.deepcopy(job_spec)}


def _timestamp(value: Any) -> float | None:
    if isinstance(value, datetime.datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
        return stamp.timestamp()
    if isinstance(value, str) and value:
        try:
            return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _rfc3339(t_s: float) -> str:
    return datetime.datetime.fromtimestamp(t_s, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- Sandbox ----------------------------------------------------------------------------------------

SANDBOX_API_VERSION = "agents.x-k8s.io/v1alpha1"


def sandbox(doc: Mapping[str, Any]) -> Derived:
    """The Sandbox's pod as a plain-Pod Workload (the module doc); none while it is paused."""
    metadata = _metadata(doc)
    spec = mapping_field(doc.get("spec"), "spec")
    replicas = spec.get("replicas", 1)
    if replicas not in (0, 1) or isinstance(replicas, bool):
        raise SourceError("spec.replicas", f"must be 0 or 1, got {replicas!r}")
    if replicas == 0:
        message = "a paused Sandbox (replicas 0) makes no pod: not scheduled by gpuq"
        return Derived((), (Finding("spec.replicas", message, "warning"),))
    template = mapping_field(spec.get("podTemplate"), "spec.podTemplate")
    tmeta = mapping_field(template.get("metadata"), "spec.podTemplate.metadata", required=False)
    pod_spec = mapping_field(template.get("spec"), "spec.podTemplate.spec")
    pod_meta: dict[str, Any] = {"name": metadata["name"], "namespace": metadata.get("namespace") or "default"}
    for key in ("labels", "annotations"):
        if tmeta.get(key):
            pod_meta[key] = dict(tmeta[key])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": copy.deepcopy(dict(pod_spec))}
    try:
        return Derived((to_workload(pod),))
    except SourceError as err:  # a field of the pod is one of spec.podTemplate
        raise SourceError(f"spec.podTemplate.{err.field}", err.message) from None
