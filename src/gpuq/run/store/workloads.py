"""Workload, condition and pod writes inside an open session, and the row -> record conversions.

The :class:`~gpuq.run.store.store.Store` methods wrap these in one transaction each;
:meth:`~gpuq.run.store.store.Store.apply_decisions` runs several in one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import Select, delete, select
from sqlalchemy.orm import Session

from gpuq.run.store.models import ConditionRow, PodRow, WorkloadRow
from gpuq.run.store.records import (
    POD_STATES,
    WORKLOAD_STATES,
    ConditionRecord,
    PodRecord,
    StoreNotFound,
)

WORKLOAD_FIELDS = frozenset(
    {
        "cluster_queue",
        "admission",
        "requeue_count",
        "requeue_at",
        "admitted_at",
        "started_at",
        "finished_at",
        "message",
        "priority",
    }
)
"""Workload columns a state change may set besides ``state``."""

POD_FIELDS = frozenset(
    {"node", "devices", "state", "attempt", "pid", "exit_code", "started_at", "finished_at", "log_path"}
)
"""Pod columns :meth:`Store.update_pod` may set."""


def check_value(value: str, allowed: Sequence[str], what: str) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; expected one of {', '.join(allowed)}")


def check_fields(fields: Mapping[str, object], allowed: frozenset[str], what: str) -> None:
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise ValueError(
            f"cannot set {what} field(s) {', '.join(unknown)}; settable: {', '.join(sorted(allowed))}"
        )


def _workload_row(session: Session, workload_id: int) -> WorkloadRow:
    row = session.get(WorkloadRow, workload_id)
    if row is None:
        raise StoreNotFound(f"no workload with id {workload_id}")
    return row


def change_workload(
    session: Session,
    version: int,
    workload_id: int,
    state: str,
    condition: ConditionRecord | None,
    fields: Mapping[str, object],
) -> None:
    """Set ``state`` and ``fields``, stamp ``version``, append ``condition``; invalid input raises first."""
    check_value(state, WORKLOAD_STATES, "workload state")
    check_fields(fields, WORKLOAD_FIELDS, "workload")
    row = _workload_row(session, workload_id)
    row.state = state
    for name, value in fields.items():
        setattr(row, name, value)
    row.resource_version = version
    if condition is not None:
        session.add(
            ConditionRow(
                workload_id=workload_id,
                type=condition.type,
                status=condition.status,
                reason=condition.reason,
                message=condition.message,
                time=condition.time,
            )
        )


def replace_pods(session: Session, workload_id: int, pods: Sequence[PodRecord]) -> None:
    """Delete every pod of the workload and insert ``pods`` (their ``id``/``workload_id`` are ignored)."""
    _workload_row(session, workload_id)
    for pod in pods:
        check_value(pod.state, POD_STATES, "pod state")
    session.execute(delete(PodRow).where(PodRow.workload_id == workload_id))
    session.add_all(
        PodRow(
            workload_id=workload_id,
            name=pod.name,
            pod_set=pod.pod_set,
            node=pod.node,
            devices=list(pod.devices),
            state=pod.state,
            attempt=pod.attempt,
            pid=pod.pid,
            exit_code=pod.exit_code,
            started_at=pod.started_at,
            finished_at=pod.finished_at,
            log_path=pod.log_path,
        )
        for pod in pods
    )


def change_pod(session: Session, pod_id: int, fields: Mapping[str, object]) -> None:
    """Set ``fields`` on one pod; ``devices`` may be any sequence of ids."""
    check_fields(fields, POD_FIELDS, "pod")
    state = fields.get("state")
    if state is not None:
        check_value(str(state), POD_STATES, "pod state")
    row = session.get(PodRow, pod_id)
    if row is None:
        raise StoreNotFound(f"no pod with id {pod_id}")
    for name, value in fields.items():
        setattr(row, name, list(value) if name == "devices" and isinstance(value, list | tuple) else value)


def pods_query(workload_id: int | None = None, states: Sequence[str] | None = None) -> Select[PodRow]:
    """Pods in id order, optionally of one workload and in some states."""
    query = select(PodRow).order_by(PodRow.id)
    if workload_id is not None:
        query = query.where(PodRow.workload_id == workload_id)
    if states is not None:
        query = query.where(PodRow.state.in_(states))
    return query
