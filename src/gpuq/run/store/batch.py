"""One loop step's writes, gathered in memory and committed in one transaction (:meth:`Store.commit`).

The leader decides many things per step (admissions, pod bindings, pod starts and exits, conditions,
events); writing each in its own transaction made every decision pay a commit and serialised the API's
inserts behind them. :class:`StepWrites` coalesces them per workload as they come, in order:

* a workload's state and fields: the last value of each wins, conditions are appended in order;
* a replacement of its pods (``WorkloadChange.pods``) drops the pod updates gathered before it (they
  were about rows it deletes), and later updates of a pod in that replacement are folded into the row
  to insert (it does not exist yet);
* events are appended in order.

:func:`apply_writes` then issues a fixed number of statements per kind of change (``executemany``),
whatever the number of workloads. A workload deleted meanwhile (through the API, between the step's
reads and its commit) is skipped, its tombstone tells the leader; nothing else is lost.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from gpuq.run.store.models import ConditionRow, EventRow, PodRow, TombstoneRow, WorkloadRow
from gpuq.run.store.records import POD_STATES, WORKLOAD_STATES, ConditionRecord, PodRecord, WorkloadChange
from gpuq.run.store.workloads import POD_FIELDS, WORKLOAD_FIELDS, check_fields, check_value

_CHUNK = 500  # ids per IN (...) list: well below SQLite's bound-parameter limit


@dataclass
class _Writes:
    """What one step writes about one workload."""

    state: str | None = None
    fields: dict[str, object] = field(default_factory=dict)
    conditions: list[ConditionRecord] = field(default_factory=list)
    pods: dict[str, PodRecord] | None = None  # a replacement of all its pods, not written yet
    pod_updates: dict[str, dict[str, object]] = field(default_factory=dict)  # stored pods by name


@dataclass(frozen=True)
class EventWrite:
    """An event to insert (the columns of ``events``)."""

    type: str
    reason: str
    kind: str
    namespace: str
    name: str
    message: str
    time: float


class StepWrites:
    """The writes of one step, in order, coalesced per workload; empty (falsy) when there are none.

    Invalid states and fields raise ``ValueError`` here, when they are added, as the store's own
    methods would: a bad change never reaches the commit of the others."""

    def __init__(self) -> None:
        self._workloads: dict[int, _Writes] = {}
        self.events: list[EventWrite] = []
        self.tombstones_upto: int | None = None
        """Delete the tombstones up to this version (the leader has read them)."""

    def __bool__(self) -> bool:
        return bool(self._workloads or self.events or self.tombstones_upto is not None)

    def __len__(self) -> int:
        return len(self._workloads) + len(self.events)

    def change(self, change: WorkloadChange) -> None:
        """A workload's state change (``Store.apply_decisions``' unit), after those already added."""
        check_value(change.state, WORKLOAD_STATES, "workload state")
        check_fields(change.fields, WORKLOAD_FIELDS, "workload")
        writes = self._workloads.setdefault(change.workload_id, _Writes())
        writes.state = change.state
        writes.fields.update(change.fields)
        if change.condition is not None:
            writes.conditions.append(change.condition)
        if change.pods is not None:
            for pod in change.pods:
                check_value(pod.state, POD_STATES, "pod state")
            writes.pods = {pod.name: pod for pod in change.pods}
            writes.pod_updates.clear()

    def update_pod(self, workload_id: int, name: str, **fields: object) -> None:
        """Set some columns (``workloads.POD_FIELDS``) of the workload's pod ``name``."""
        check_fields(fields, POD_FIELDS, "pod")
        state = fields.get("state")
        if state is not None:
            check_value(str(state), POD_STATES, "pod state")
        if "devices" in fields:
            fields["devices"] = list(fields["devices"])  # type: ignore[call-overload]
        writes = self._workloads.setdefault(workload_id, _Writes())
        if writes.pods is not None and name in writes.pods:
            writes.pods[name] = dataclasses.replace(writes.pods[name], **fields)  # type: ignore[arg-type]
            return
        writes.pod_updates.setdefault(name, {}).update(fields)

    def event(
        self, type: str, reason: str, kind: str, namespace: str, name: str, message: str, time: float
    ) -> None:
        self.events.append(EventWrite(type, reason, kind, namespace, name, message, time))

    def items(self) -> Iterable[tuple[int, _Writes]]:
        return self._workloads.items()


def apply_writes(session: Session, version: int, writes: StepWrites) -> int:
    """Issue ``writes`` in the open transaction ``session`` (``version``: the one it commits); how many
    workloads were skipped because they no longer exist."""
    ids = [workload_id for workload_id, _ in writes.items()]
    alive = _existing(session, ids)
    kept = [(workload_id, w) for workload_id, w in writes.items() if workload_id in alive]
    _update_workloads(session, version, kept)
    replaced = [(workload_id, w.pods) for workload_id, w in kept if w.pods is not None]
    for chunk in _chunks([workload_id for workload_id, _ in replaced]):
        session.execute(delete(PodRow).where(PodRow.workload_id.in_(chunk)))
    pod_rows = [_pod_row(workload_id, pod) for workload_id, pods in replaced for pod in (pods or {}).values()]
    if pod_rows:
        session.execute(insert(PodRow), pod_rows)
    _update_pods(session, kept)
    conditions = [
        {
            "workload_id": workload_id,
            "type": c.type,
            "status": c.status,
            "reason": c.reason,
            "message": c.message,
            "time": c.time,
        }
        for workload_id, w in kept
        for c in w.conditions
    ]
    if conditions:
        session.execute(insert(ConditionRow), conditions)
    if writes.events:
        session.execute(insert(EventRow), [dataclasses.asdict(e) for e in writes.events])
    if writes.tombstones_upto is not None:
        session.execute(delete(TombstoneRow).where(TombstoneRow.version <= writes.tombstones_upto))
    return len(ids) - len(kept)


def _existing(session: Session, ids: Sequence[int]) -> set[int]:
    found: set[int] = set()
    for chunk in _chunks(ids):
        found.update(session.scalars(select(WorkloadRow.id).where(WorkloadRow.id.in_(chunk))))
    return found


def _update_workloads(session: Session, version: int, kept: Sequence[tuple[int, _Writes]]) -> None:
    """One ``UPDATE ... WHERE id = ?`` executemany per set of columns changed."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for workload_id, writes in kept:
        if writes.state is None:
            continue
        values: dict[str, Any] = {"state": writes.state, **writes.fields, "resource_version": version}
        groups[tuple(sorted(values))].append(
            {"b_id": workload_id, **{f"v_{k}": v for k, v in values.items()}}
        )
    table = cast(Table, WorkloadRow.__table__)
    for columns, rows in groups.items():
        statement = (
            update(table)
            .where(table.c.id == bindparam("b_id"))
            .values({column: bindparam(f"v_{column}") for column in columns})
        )
        session.execute(statement, rows)


def _update_pods(session: Session, kept: Sequence[tuple[int, _Writes]]) -> None:
    """One ``UPDATE ... WHERE workload_id = ? AND name = ?`` executemany per set of columns changed."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for workload_id, writes in kept:
        for name, fields in writes.pod_updates.items():
            if fields:
                row = {"b_workload": workload_id, "b_name": name, **{f"v_{k}": v for k, v in fields.items()}}
                groups[tuple(sorted(fields))].append(row)
    table = cast(Table, PodRow.__table__)
    for columns, rows in groups.items():
        statement = (
            update(table)
            .where(table.c.workload_id == bindparam("b_workload"), table.c.name == bindparam("b_name"))
            .values({column: bindparam(f"v_{column}") for column in columns})
        )
        session.execute(statement, rows)


def _pod_row(workload_id: int, pod: PodRecord) -> dict[str, Any]:
    return {
        "workload_id": workload_id,
        "name": pod.name,
        "pod_set": pod.pod_set,
        "node": pod.node,
        "devices": list(pod.devices),
        "state": pod.state,
        "attempt": pod.attempt,
        "pid": pod.pid,
        "exit_code": pod.exit_code,
        "started_at": pod.started_at,
        "finished_at": pod.finished_at,
        "log_path": pod.log_path,
    }


def _chunks(ids: Sequence[int]) -> Iterable[Sequence[int]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]
