"""``gpuq get`` / ``describe`` with ``-f``: a snapshot's objects in the shapes the server answers.

The client verbs print what ``gpuq serve`` answers; with ``-f PATH`` the same verbs read the
manifests instead, optionally after the scheduling cycles (``--admit``), and build items with the
keys of the API's views (``gpuq.server.views``), so one set of tables and the same ``-o json``
documents serve both. A workload's state offline is what the snapshot says: ``Admitted`` (or
``QuotaReserved`` while an admission check is not Ready) when it holds quota, ``Pending`` otherwise,
with the cycles' message after ``--admit``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuq.core.admission_fairshare import status_view
from gpuq.core.model import CheckState, Workload

if TYPE_CHECKING:
    from gpuq.api.loader import LoadResult
    from gpuq.core.admission import Scheduler
    from gpuq.core.cycles import AdmitRun

PENDING, QUOTA_RESERVED, ADMITTED = "Pending", "QuotaReserved", "Admitted"
NOT_YET = "waiting for the next scheduling cycle"
WORKLOAD_KIND = "Workload"


@dataclass
class Snapshot:
    """A loaded snapshot and, after ``--admit``, where each workload stands."""

    result: LoadResult
    run: AdmitRun | None = None
    at: float | None = None  # the cycles' time, after --admit
    kinds: dict[str, str] = field(default_factory=dict)  # workload key -> source kind
    sources: dict[str, str] = field(default_factory=dict)  # workload key -> the source's name
    manifests: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    fair_sharing: dict[tuple[str, str], dict[str, object]] = field(default_factory=dict)
    """LocalQueue -> its ``status.fairSharing`` (Admission Fair Sharing), from the cycles' scheduler."""
    fair_usage: dict[tuple[str, str], float] = field(default_factory=dict)
    """LocalQueue -> the usage its workloads are ordered by (Admission Fair Sharing)."""

    @property
    def workloads(self) -> tuple[Workload, ...]:
        return self.result.workloads


def snapshot(files: list[str], *, admit: bool, policy: str) -> Snapshot:
    """Load ``files`` (exit 1 with every diagnostic on an error) and, with ``admit``, run the cycles."""
    from gpuq.commands.admit import load_valid, scheduler_for, snapshot_time
    from gpuq.core.cycles import run_cycles

    result = load_valid(files)
    taken = Snapshot(result)
    for manifest in result.manifests:
        model = manifest.model
        dumped = model.model_dump(by_alias=True, mode="json", exclude_none=True)
        if manifest.kind in ("ClusterQueue", "LocalQueue"):
            taken.manifests[(manifest.kind, manifest.namespace, manifest.name)] = dumped
        metadata = dumped.get("metadata") or {}
        if dumped.get("kind") == WORKLOAD_KIND:
            key = f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"
            taken.kinds[key] = manifest.kind
            taken.sources[key] = manifest.name
    taken.manifests.update(_as_written(files, {key[0] for key in taken.manifests}))
    if admit:
        taken.at = snapshot_time(result)
        scheduler = scheduler_for(result, policy)
        taken.run = run_cycles(scheduler, now=taken.at)
        taken.fair_sharing = _fair_sharing(scheduler)
        if scheduler.fair_usage is not None:
            taken.fair_usage = {
                lq: scheduler.fair_usage.value_of(lq) for lq in scheduler.fair_usage.local_queues
            }
    return taken


def _fair_sharing(scheduler: Scheduler) -> dict[tuple[str, str], dict[str, object]]:
    usage = scheduler.fair_usage
    if usage is None:
        return {}
    views = {lq: status_view(usage, lq) for lq in sorted(usage.local_queues)}
    return {lq: view for lq, view in views.items() if view is not None}


def _as_written(files: list[str], kinds: set[str]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The queues' manifests as the files write them (quantities as written, ``384Gi`` rather than
    bytes), as the server stores them; objects read from stdin keep their parsed form."""
    from gpuq.api.loader import expand_path, parse_documents

    written: dict[tuple[str, str, str], dict[str, Any]] = {}
    for path in files:
        if path == "-":
            continue
        for file in expand_path(path):
            try:
                text = Path(file).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            for document in parse_documents(file, text)[0]:
                data = document.data
                if isinstance(data, dict) and data.get("kind") in kinds:
                    raw = data.get("metadata")
                    metadata: dict[str, Any] = raw if isinstance(raw, dict) else {}
                    namespace = (
                        str(metadata.get("namespace") or "default") if data["kind"] == "LocalQueue" else ""
                    )
                    written[(str(data["kind"]), namespace, str(metadata.get("name") or ""))] = data
    return written


def _held(workload: Workload) -> str:
    if workload.admission is None:
        return PENDING
    ready = all(state == CheckState.READY for state in workload.admission_checks.values())
    return ADMITTED if ready else QUOTA_RESERVED


def workload_items(taken: Snapshot, namespace: str | None = None) -> list[dict[str, Any]]:
    """Workloads as ``GET /workloads`` shows them: in creation order, one namespace or all."""
    run = taken.run
    items = []
    ordered = sorted(taken.workloads, key=lambda w: (w.creation_time, w.namespace, w.name))
    for workload in ordered:
        if namespace is not None and workload.namespace != namespace:
            continue
        key = workload.key
        state, cluster_queue, message = _held(workload), "", ""
        admitted_at = workload.quota_reserved_time
        admission = None
        if workload.admission is not None:
            cluster_queue = workload.admission.cluster_queue
            admission = _admission(cluster_queue, workload.admission.pod_set_assignments)
        if run is not None:
            if (decision := run.admitted.get(key)) is not None:
                state = QUOTA_RESERVED if decision.checks_pending else ADMITTED
                admitted_at = workload.quota_reserved_time or taken.at
                cluster_queue, message = decision.cluster_queue, decision.message
                admission = _admission(decision.cluster_queue, decision.pod_sets)
            elif (pending := run.pending.get(key)) is not None:
                state, message, admission = PENDING, pending.message, None
                cluster_queue = pending.cluster_queue or cluster_queue
            elif (preempted := run.preempted.get(key)) is not None:
                state, admission = PENDING, None
                message = f"Preempted by {preempted.by} ({preempted.reason})"
        if state == PENDING and not message:
            message = NOT_YET
        if state == PENDING and not cluster_queue:
            cluster_queue = _cluster_queue_of(taken, workload)
        items.append(
            {
                "namespace": workload.namespace,
                "name": workload.name,
                "kind": taken.kinds.get(key, WORKLOAD_KIND),
                "queue": workload.queue_name,
                "clusterQueue": cluster_queue,
                "priority": workload.priority,
                "state": state,
                "message": message,
                "admission": admission,
                "requeueCount": 0,
                "requeueAt": workload.requeue_at,
                "createdAt": workload.creation_time or None,
                "admittedAt": admitted_at if state != PENDING else None,
                "startedAt": None,
                "finishedAt": None,
                "resourceVersion": 0,
                "eta": None,
            }
        )
    return items


def _admission(cluster_queue: str, pod_sets: Iterable[Any]) -> dict[str, Any]:
    return {
        "clusterQueue": cluster_queue,
        "podSetAssignments": [
            {"name": p.name, "count": p.count, "flavors": dict(sorted(p.flavors.items()))} for p in pod_sets
        ],
    }


def _cluster_queue_of(taken: Snapshot, workload: Workload) -> str:
    config = taken.result.config
    queue = config.local_queues.get((workload.namespace, workload.queue_name)) if config else None
    return queue.cluster_queue if queue is not None else ""


def _object(
    kind: str, namespace: str, name: str, manifest: Mapping[str, Any], status: Mapping[str, object]
) -> Any:
    return {
        "kind": kind,
        "apiVersion": manifest.get("apiVersion", ""),
        "namespace": namespace,
        "name": name,
        "resourceVersion": 0,
        "createdAt": None,
        "updatedAt": None,
        "manifest": dict(manifest),
        "status": status,
    }


def _counts(items: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    pending = admitted = 0
    for item in items:
        pending += item["state"] == PENDING
        admitted += item["state"] in (ADMITTED, QUOTA_RESERVED)
    return {"pendingWorkloads": pending, "admittedWorkloads": admitted}


def cluster_queue_items(taken: Snapshot) -> list[dict[str, Any]]:
    """ClusterQueues as ``GET /clusterqueues`` shows them, with their workload counts."""
    workloads = workload_items(taken)
    return [
        _object(kind, "", name, manifest, _counts(w for w in workloads if w["clusterQueue"] == name))
        for (kind, _, name), manifest in sorted(taken.manifests.items())
        if kind == "ClusterQueue"
    ]


def local_queue_items(taken: Snapshot, namespace: str | None = None) -> list[dict[str, Any]]:
    """LocalQueues as ``GET /localqueues`` shows them, with their workload counts."""
    workloads = workload_items(taken)
    return [
        _object(
            kind,
            queue_namespace,
            name,
            manifest,
            _local_queue_status(taken, manifest, (queue_namespace, name), workloads),
        )
        for (kind, queue_namespace, name), manifest in sorted(taken.manifests.items())
        if kind == "LocalQueue" and (namespace is None or queue_namespace == namespace)
    ]


def _local_queue_status(
    taken: Snapshot, manifest: Mapping[str, Any], lq: tuple[str, str], workloads: list[dict[str, Any]]
) -> dict[str, object]:
    """Counts, and ``fairSharing`` as the cycles left it (``--admit``) or as the file wrote it."""
    status: dict[str, object] = dict(_counts(w for w in workloads if (w["namespace"], w["queue"]) == lq))
    written = manifest.get("status")
    fair = taken.fair_sharing.get(lq) or (written.get("fairSharing") if isinstance(written, dict) else None)
    if fair:
        status["fairSharing"] = fair
    return status


def pending_items(
    taken: Snapshot, *, cluster_queue: str | None = None, local_queue: tuple[str, str] | None = None
) -> list[dict[str, Any]]:
    """A queue's pending workloads in Kueue's order (Admission Fair Sharing's LocalQueue usage after
    ``--admit``, priority, then creation time), with positions,
    as ``GET .../pendingworkloads`` shows them."""
    pending = [w for w in workload_items(taken) if w["state"] == PENDING]
    if cluster_queue is not None:
        pending = [w for w in pending if w["clusterQueue"] == cluster_queue]
    if local_queue is not None:
        pending = [w for w in pending if (w["namespace"], w["queue"]) == local_queue]
    fair = taken.fair_usage
    pending.sort(
        key=lambda w: (
            fair.get((w["namespace"], w["queue"]), 0.0),
            -w["priority"],
            w["createdAt"] or 0.0,
            w["namespace"],
            w["name"],
        )
    )
    in_local: dict[tuple[str, str], int] = {}
    entries = []
    for position, item in enumerate(pending):
        local = (item["namespace"], item["queue"])
        in_local[local] = in_local.get(local, -1) + 1
        entries.append(
            {
                "namespace": item["namespace"],
                "name": item["name"],
                "localQueue": item["queue"],
                "clusterQueue": item["clusterQueue"],
                "priority": item["priority"],
                "createdAt": item["createdAt"],
                "positionInClusterQueue": position,
                "positionInLocalQueue": in_local[local],
                "reason": item["message"],
            }
        )
    return entries


def find_workload(taken: Snapshot, namespace: str, name: str) -> dict[str, Any] | None:
    """One workload by its name or its source's name (``job-train-1a2b3`` or ``train``)."""
    for item in workload_items(taken, namespace):
        key = f"{item['namespace']}/{item['name']}"
        if name in (item["name"], taken.sources.get(key)):
            return item
    return None
