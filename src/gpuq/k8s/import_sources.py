"""The dump's workload sources and serving objects, passed through to the scenario as written.

The loader's own kind registry decides what is read (:func:`gpuq.api.loader.workload_role`): a kind
the loader turns into a Kueue Workload (Job, JobSet, RayJob...) is a *source*; a Deployment,
StatefulSet, InferenceService, RayService, HPA... is *serving*. A new kind registered there is
imported without a change here. Steps (:func:`import_sources`):

1. leave out what another object of the dump already stands for: a source whose Kueue Workload is
   in the dump (the Workload's ``ownerReferences`` name it: the Workload holds its state), and an
   object created by a controller that is itself in the dump, or a Pod a controller recreates
   (``ownerReferences`` with ``controller: true``: a RayCluster of a RayService, a Job of a JobSet,
   a Deployment's pods); these are counted, not warned;
2. leave out finished sources (a ``Complete``, ``Failed`` or ``Succeeded`` condition that is True,
   a RayJob whose ``jobDeploymentStatus`` is ``Complete`` or ``Failed``): they are the past, warned;
3. the rest, without status and server metadata: sources keep ``creationTimestamp`` and go to the
   initial state (pending at the dump's time, in creation order, as Kueue would queue them); serving
   objects go to the configuration, where the simulator runs their replicas and autoscalers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuq.api.diagnostics import Diagnostic
from gpuq.k8s.import_dump import DumpObject, cleaned, mapping

RECREATING_CONTROLLERS = frozenset({"ReplicaSet", "StatefulSet", "DaemonSet", "Job", "LeaderWorkerSet"})
"""Owners that recreate a Pod they own: the Pod is theirs, never a source of its own."""
FINISHED_CONDITIONS = frozenset({"Complete", "Failed", "Succeeded", "Finished"})


@dataclass
class SourceImport:
    """Sources for the state, serving objects for the configuration, and what was left out."""

    sources: list[dict[str, Any]] = field(default_factory=list)
    serving: list[dict[str, Any]] = field(default_factory=list)
    represented: int = 0  # left out: a Workload or an owner in the dump stands for them
    finished: int = 0
    diagnostics: list[Diagnostic] = field(default_factory=list)


def import_sources(objects: Sequence[DumpObject], workloads: Sequence[DumpObject]) -> SourceImport:
    """The pass-through objects of the dump (see the module's steps), in the dump's order."""
    out = SourceImport()
    present = {(o.namespace, o.kind, o.name) for o in objects} | {_uid(o.data) for o in objects} - {_NO_UID}
    owned_by_workloads = {key for w in workloads for key in _owner_keys(w.data, w.namespace)}
    for obj in (o for o in objects if o.role):
        if _represented(obj, present, owned_by_workloads):
            out.represented += 1
        elif obj.role == "source" and _finished(obj.data):
            out.finished += 1
            message = "finished: left out (the past; its Kueue Workload, when dumped, is the history)"
            out.diagnostics.append(obj.diagnostic(("status",), message, "warning"))
        elif obj.role == "source":
            out.sources.append(cleaned(obj.data, keep_created=True))
        else:
            out.serving.append(cleaned(obj.data))
    return out


_NO_UID = ("uid", "", "")


def _uid(data: dict[str, Any]) -> tuple[str, str, str]:
    return ("uid", "", str(mapping(data.get("metadata")).get("uid") or ""))


def _owner_keys(data: dict[str, Any], namespace: str) -> set[tuple[str, str, str]]:
    keys: set[tuple[str, str, str]] = set()
    for ref in mapping(data.get("metadata")).get("ownerReferences") or []:
        if isinstance(ref, dict):
            keys.add((namespace, str(ref.get("kind")), str(ref.get("name"))))
            if ref.get("uid"):
                keys.add(("uid", "", str(ref["uid"])))
    return keys


def _represented(
    obj: DumpObject, present: set[tuple[str, str, str]], owned_by_workloads: set[tuple[str, str, str]]
) -> bool:
    if (obj.namespace, obj.kind, obj.name) in owned_by_workloads:
        return True
    uid = _uid(obj.data)
    if uid[2] and uid in owned_by_workloads:
        return True
    for ref in mapping(obj.data.get("metadata")).get("ownerReferences") or []:
        if not isinstance(ref, dict) or not ref.get("controller"):
            continue
        owner = (obj.namespace, str(ref.get("kind")), str(ref.get("name")))
        if owner in present or ("uid", "", str(ref.get("uid"))) in present:
            return True
        if obj.kind == "Pod" and ref.get("kind") in RECREATING_CONTROLLERS:
            return True
    return False


def _finished(data: dict[str, Any]) -> bool:
    status = mapping(data.get("status"))
    for condition in status.get("conditions") or []:
        if (
            isinstance(condition, dict)
            and condition.get("status") == "True"
            and condition.get("type") in FINISHED_CONDITIONS
        ):
            return True
    if str(status.get("jobDeploymentStatus")) in ("Complete", "Failed"):
        return True
    return str(status.get("phase")) in ("Succeeded", "Failed")  # a Pod
