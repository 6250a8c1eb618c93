"""Records as the API shows them (camelCase JSON), and the pending queues in Kueue's order.

Pure functions of store records: the routes read, these shape. Times stay float seconds
since the epoch, as the store keeps them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuq.core.lifecycle.states import HOLDING_QUOTA as HOLDING_QUOTA_STATES
from gpuq.core.lifecycle.states import WorkloadState
from gpuq.core.nodes import Node
from gpuq.run.store import ConditionRecord, EventRecord, ObjectRecord, PodRecord, WorkloadRecord

PENDING = (WorkloadState.PENDING.value,)
HOLDING_QUOTA = tuple(s.value for s in WorkloadState if s in HOLDING_QUOTA_STATES)


def object_view(record: ObjectRecord, status: Mapping[str, Any] | None = None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "kind": record.kind,
        "apiVersion": record.api_version,
        "namespace": record.namespace,
        "name": record.name,
        "resourceVersion": record.resource_version,
        "createdAt": record.created_at,
        "updatedAt": record.updated_at,
        "manifest": record.manifest,
    }
    if status is not None:
        view["status"] = dict(status)
    return view


def workload_view(
    record: WorkloadRecord,
    *,
    pods: Sequence[PodRecord] | None = None,
    conditions: Sequence[ConditionRecord] | None = None,
    manifest: bool = False,
    eta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A workload: state, queues, priority, admission, times, why it waits; pods and history when given;
    ``eta``: its latest forecast (``gpuq.server.forecasts.eta_view``; None when it has none)."""
    view: dict[str, Any] = {
        "namespace": record.namespace,
        "name": record.name,
        "kind": record.source_kind,
        "queue": record.queue_name,
        "clusterQueue": record.cluster_queue,
        "priority": record.priority,
        "state": record.state,
        "message": record.message,
        "admission": record.admission,
        "requeueCount": record.requeue_count,
        "requeueAt": record.requeue_at,
        "createdAt": record.created_at,
        "admittedAt": record.admitted_at,
        "startedAt": record.started_at,
        "finishedAt": record.finished_at,
        "resourceVersion": record.resource_version,
        "eta": dict(eta) if eta is not None else None,
    }
    if pods is not None:
        view["pods"] = [pod_view(p) for p in pods]
    if conditions is not None:
        view["conditions"] = [condition_view(c) for c in conditions]
    if manifest:
        view["manifest"] = record.manifest
    return view


def pod_view(pod: PodRecord) -> dict[str, Any]:
    return {
        "name": pod.name,
        "podSet": pod.pod_set,
        "state": pod.state,
        "node": pod.node,
        "devices": list(pod.devices),
        "attempt": pod.attempt,
        "pid": pod.pid,
        "exitCode": pod.exit_code,
        "startedAt": pod.started_at,
        "finishedAt": pod.finished_at,
    }


def condition_view(condition: ConditionRecord) -> dict[str, Any]:
    return {
        "type": condition.type,
        "status": condition.status,
        "reason": condition.reason,
        "message": condition.message,
        "time": condition.time,
    }


def event_view(event: EventRecord) -> dict[str, Any]:
    return {
        "id": event.id,
        "time": event.time,
        "type": event.type,
        "reason": event.reason,
        "kind": event.kind,
        "namespace": event.namespace,
        "name": event.name,
        "message": event.message,
    }


# -- queues ----------------------------------------------------------------------------------------------


def cluster_queue_of(local_queues: Iterable[ObjectRecord]) -> dict[tuple[str, str], str]:
    """(namespace, LocalQueue name) -> its ClusterQueue, from the stored LocalQueues."""
    out: dict[tuple[str, str], str] = {}
    for queue in local_queues:
        spec = queue.manifest.get("spec") or {}
        out[(queue.namespace, queue.name)] = str(spec.get("clusterQueue") or "")
    return out


def queue_order(
    workloads: Iterable[WorkloadRecord], usage: Mapping[tuple[str, str], float] | None = None
) -> list[WorkloadRecord]:
    """Pending workloads in Kueue's queue order: key ``(LocalQueue usage, -priority, created_at,
    id)``, the usage being Admission Fair Sharing's (``usage``, the leader's; 0 without)."""
    pending = [w for w in workloads if w.state in PENDING]
    fair = usage or {}
    return sorted(
        pending, key=lambda w: (fair.get((w.namespace, w.queue_name), 0.0), -w.priority, w.created_at, w.id)
    )


def pending_view(
    ordered: Sequence[WorkloadRecord], lq_to_cq: Mapping[tuple[str, str], str]
) -> list[dict[str, Any]]:
    """Kueue's PendingWorkload entries: positions in the cluster queue and in the local queue."""
    in_local: dict[tuple[str, str], int] = {}
    entries = []
    for position, record in enumerate(ordered):
        local = (record.namespace, record.queue_name)
        in_local[local] = in_local.get(local, -1) + 1
        entries.append(
            {
                "namespace": record.namespace,
                "name": record.name,
                "localQueue": record.queue_name,
                "clusterQueue": lq_to_cq.get(local, ""),
                "priority": record.priority,
                "createdAt": record.created_at,
                "positionInClusterQueue": position,
                "positionInLocalQueue": in_local[local],
                "reason": record.message or "waiting for the next scheduling cycle",
            }
        )
    return entries


def queue_status(workloads: Iterable[WorkloadRecord], belongs: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Counts of a queue's workloads; ``belongs`` lists the (namespace, LocalQueue) pairs it covers."""
    covered = set(belongs)
    pending = admitted = 0
    for workload in workloads:
        if (workload.namespace, workload.queue_name) not in covered:
            continue
        pending += workload.state in PENDING
        admitted += workload.state in HOLDING_QUOTA
    return {"pendingWorkloads": pending, "admittedWorkloads": admitted}


# -- nodes -----------------------------------------------------------------------------------------------


def node_view(node: Node, pods: Sequence[PodRecord]) -> dict[str, Any]:
    """A live node: what it offers and which devices its running pods hold."""
    mine = [p for p in pods if p.node == node.name]
    in_use = sorted({d for p in mine for d in p.devices}, key=lambda d: (len(d), d))
    return {
        "name": node.name,
        "gpuModel": node.gpu_model or "",
        "gpus": node.gpu_count,
        "gpuMemoryMiB": node.gpu_memory_mib,
        "sharing": node.sharing.mode.value if node.gpu_count else "",
        "allocatable": dict(node.allocatable),
        "devicesInUse": in_use,
        "runningPods": len(mine),
        "labels": dict(node.labels),
    }
