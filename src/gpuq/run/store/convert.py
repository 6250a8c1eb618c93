"""Row -> record conversions: what leaves a session is a frozen record, never an ORM object."""

from __future__ import annotations

from gpuq.run.store.models import ConditionRow, EventRow, ObjectRow, PodRow, UserRow, WorkloadRow
from gpuq.run.store.records import (
    ConditionRecord,
    EventRecord,
    ObjectRecord,
    PodRecord,
    UserRecord,
    WorkloadRecord,
)


def workload_record(row: WorkloadRow) -> WorkloadRecord:
    return WorkloadRecord(
        id=row.id,
        namespace=row.namespace,
        name=row.name,
        queue_name=row.queue_name,
        source_kind=row.source_kind,
        manifest=row.manifest,
        priority=row.priority,
        state=row.state,
        cluster_queue=row.cluster_queue,
        admission=row.admission,
        requeue_count=row.requeue_count,
        requeue_at=row.requeue_at,
        created_at=row.created_at,
        admitted_at=row.admitted_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        message=row.message,
        resource_version=row.resource_version,
    )


def condition_record(row: ConditionRow) -> ConditionRecord:
    return ConditionRecord(
        type=row.type,
        status=row.status,
        reason=row.reason,
        message=row.message,
        time=row.time,
        id=row.id,
        workload_id=row.workload_id,
    )


def pod_record(row: PodRow) -> PodRecord:
    return PodRecord(
        name=row.name,
        pod_set=row.pod_set,
        state=row.state,
        node=row.node,
        devices=tuple(row.devices),
        attempt=row.attempt,
        pid=row.pid,
        exit_code=row.exit_code,
        started_at=row.started_at,
        finished_at=row.finished_at,
        log_path=row.log_path,
        id=row.id,
        workload_id=row.workload_id,
    )


def object_record(row: ObjectRow) -> ObjectRecord:
    return ObjectRecord(
        id=row.id,
        kind=row.kind,
        api_version=row.api_version,
        namespace=row.namespace,
        name=row.name,
        manifest=row.manifest,
        resource_version=row.resource_version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def event_record(row: EventRow) -> EventRecord:
    return EventRecord(
        id=row.id,
        time=row.time,
        type=row.type,
        reason=row.reason,
        kind=row.kind,
        namespace=row.namespace,
        name=row.name,
        message=row.message,
    )


def user_record(row: UserRow) -> UserRecord:
    return UserRecord(name=row.name, roles=tuple(row.roles), namespaces=tuple(row.namespaces))
