"""The control plane's durable state: objects, workloads, conditions, pods, events and users.

One SQLAlchemy store on a SQLite file or PostgreSQL. Every public method that changes
state is one transaction that bumps ``resource_version`` once (``base.py`` says how);
reads return frozen records (``records.py``), never ORM objects.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import delete, func, select, tuple_

from gpuq.run.store import convert
from gpuq.run.store import workloads as wl
from gpuq.run.store.base import StoreBase
from gpuq.run.store.batch import StepWrites, apply_writes
from gpuq.run.store.models import (
    RESOURCE_VERSION,
    ConditionRow,
    Counter,
    EventRow,
    ObjectRow,
    TombstoneRow,
    UserRow,
    WorkloadRow,
)
from gpuq.run.store.notify import bump_objects_generation, objects_generation
from gpuq.run.store.records import (
    FINISHED_STATES,
    LIVE_POD_STATES,
    WORKLOAD_STATES,
    ConditionRecord,
    EventRecord,
    Feed,
    NewWorkload,
    ObjectRecord,
    PodRecord,
    StoreConflict,
    Tombstone,
    UserRecord,
    WorkloadChange,
    WorkloadRecord,
)

__all__ = [
    "ConditionRecord",
    "EventRecord",
    "ObjectRecord",
    "PodRecord",
    "Store",
    "StoreConflict",
    "UserRecord",
    "WorkloadChange",
    "WorkloadRecord",
    "token_hash",
]

EVENTS_LIMIT = 1000
"""Most events one :meth:`Store.events` call returns; page on with ``since_id``."""

_OBJECTS_SIGNATURE = select(func.count(ObjectRow.id), func.coalesce(func.max(ObjectRow.resource_version), 0))

FEED_LIMIT = 5000
"""Most new workloads one :meth:`Store.read_feed` returns (a step takes in at most about this many)."""

FINISHED_BATCH = 1000
"""Most finished workloads one :meth:`Store.delete_finished` call deletes."""


def token_hash(token: str) -> str:
    """The sha256 hex digest stored in place of a bearer token."""
    return hashlib.sha256(token.encode()).hexdigest()


def _object_key(manifest: dict[str, Any]) -> tuple[str, str, str, str]:
    metadata = manifest.get("metadata") or {}
    kind, name = manifest.get("kind"), metadata.get("name")
    if not isinstance(kind, str) or not kind or not isinstance(name, str) or not name:
        raise ValueError("a manifest needs a kind and metadata.name")
    return kind, str(manifest.get("apiVersion", "")), str(metadata.get("namespace") or ""), name


class SubmissionCombiner:
    """Group commit of submissions: concurrent callers' workloads are inserted in one transaction.

    Each caller queues its workloads, then waits for the commit lock; whoever holds it commits
    everything queued (its own and those of the callers that arrived while the previous commit
    ran) and hands each caller its ids. When the combined insert conflicts (a name taken), each
    caller's workloads are inserted alone, so one caller's conflict is never another's. A commit
    costs the same for one workload as for fifty: under load this is what lets submissions keep
    up, on SQLite (one writer at a time) and PostgreSQL (one version counter) alike."""

    @dataclass
    class _Queued:
        workloads: list[NewWorkload]
        ids: list[int] | None = None
        error: Exception | None = None  # raised in the caller's thread, as if it had inserted alone

    def __init__(self) -> None:
        self._queue: list[SubmissionCombiner._Queued] = []
        self._queue_lock = threading.Lock()
        self._commit_lock = threading.Lock()

    def submit(
        self, workloads: list[NewWorkload], insert: Callable[[Sequence[NewWorkload]], list[int]]
    ) -> list[int]:
        mine = SubmissionCombiner._Queued(workloads)
        with self._queue_lock:
            self._queue.append(mine)
        with self._commit_lock:
            if mine.ids is None and mine.error is None:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._commit(batch, insert)
        if mine.error is not None:
            raise mine.error
        assert mine.ids is not None
        return mine.ids

    @staticmethod
    def _commit(
        batch: list[SubmissionCombiner._Queued], insert: Callable[[Sequence[NewWorkload]], list[int]]
    ) -> None:
        if len(batch) > 1:
            try:
                ids = insert([w for queued in batch for w in queued.workloads])
            except StoreConflict:
                pass
            else:
                start = 0
                for queued in batch:
                    queued.ids = ids[start : start + len(queued.workloads)]
                    start += len(queued.workloads)
                return
        for queued in batch:
            try:
                queued.ids = insert(queued.workloads)
            except Exception as error:
                queued.error = error


class Store(StoreBase):
    """Objects, workloads, conditions, pods, events and users of one control plane."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._submissions = SubmissionCombiner()

    # -- objects -----------------------------------------------------------------------------------------

    def apply_object(self, manifest: dict[str, Any], *, now: float | None = None) -> tuple[str, int]:
        """Store a manifest keyed by (kind, namespace or '', name).

        Returns ("created" | "configured" | "unchanged", resource version).

        "unchanged" writes nothing and returns the object's stored version.
        """
        kind, api_version, namespace, name = _object_key(manifest)
        document = json.loads(json.dumps(manifest))  # as it will read back: lists, not tuples
        now = time.time() if now is None else now
        with self._write(notify=True) as write:
            row = write.session.scalars(
                select(ObjectRow).where(
                    ObjectRow.kind == kind, ObjectRow.namespace == namespace, ObjectRow.name == name
                )
            ).one_or_none()
            if row is None:
                write.session.add(
                    ObjectRow(
                        kind=kind,
                        api_version=api_version,
                        namespace=namespace,
                        name=name,
                        manifest=document,
                        resource_version=write.version,
                        created_at=now,
                        updated_at=now,
                    )
                )
                bump_objects_generation(self.url)
                return "created", write.version
            if row.manifest == document and row.api_version == api_version:
                write.changed = False
                return "unchanged", row.resource_version
            row.api_version, row.manifest = api_version, document
            row.resource_version, row.updated_at = write.version, now
            bump_objects_generation(self.url)
            return "configured", write.version

    def objects_generation(self) -> int:
        """How many objects this process has changed in this database: a cache of the objects made in
        this process is stale when it moved (other processes' changes show in the signature)."""
        return objects_generation(self.url)

    def objects_signature(self) -> tuple[int, int]:
        """The objects' count and newest version: it changes whenever one is created, changed or deleted."""
        with self.reading() as connection:
            count, newest = connection.execute(_OBJECTS_SIGNATURE).one()
            return int(count), int(newest)

    def get_object(self, kind: str, name: str, namespace: str = "") -> ObjectRecord | None:
        with self.transaction() as session:
            row = session.scalars(
                select(ObjectRow).where(
                    ObjectRow.kind == kind, ObjectRow.namespace == namespace, ObjectRow.name == name
                )
            ).one_or_none()
            return None if row is None else convert.object_record(row)

    def list_objects(self, kind: str | None = None, namespace: str | None = None) -> list[ObjectRecord]:
        """Objects ordered by (kind, namespace, name)."""
        query = select(ObjectRow).order_by(ObjectRow.kind, ObjectRow.namespace, ObjectRow.name)
        if kind is not None:
            query = query.where(ObjectRow.kind == kind)
        if namespace is not None:
            query = query.where(ObjectRow.namespace == namespace)
        with self.transaction() as session:
            return [convert.object_record(row) for row in session.scalars(query)]

    def delete_object(self, kind: str, name: str, namespace: str = "") -> bool:
        """Delete one object; False (and no write) when there was none."""
        with self._write(notify=True) as write:
            result = write.session.execute(
                delete(ObjectRow).where(
                    ObjectRow.kind == kind, ObjectRow.namespace == namespace, ObjectRow.name == name
                )
            )
            write.changed = bool(getattr(result, "rowcount", 0))
            if write.changed:
                bump_objects_generation(self.url)
            return write.changed

    # -- workloads -------------------------------------------------------------------------------------------

    def add_workload(
        self,
        namespace: str,
        name: str,
        queue_name: str,
        source_kind: str,
        manifest: dict[str, Any],
        priority: int,
        created_at: float,
    ) -> int:
        """Store a new Pending workload and return its id; a taken (namespace, name) raises StoreConflict."""
        new = NewWorkload(namespace, name, queue_name, source_kind, manifest, priority, created_at)
        return self.add_workloads([new])[0]

    def add_workloads(self, workloads: Sequence[NewWorkload]) -> list[int]:
        """Store new Pending workloads in one transaction (all or none); their ids, in order.

        One insert per workload and no read before it: a taken (namespace, name) is found by the unique
        index, and raises StoreConflict naming the first such workload, with nothing written.
        Concurrent callers share transactions (:class:`SubmissionCombiner`): under load, one commit
        holds the submissions of every thread that arrived meanwhile."""
        if not workloads:
            return []
        return self._submissions.submit(list(workloads), self._insert_workloads)

    def _insert_workloads(self, workloads: Sequence[NewWorkload]) -> list[int]:
        try:
            with self._write(notify=True) as write:
                rows = [
                    WorkloadRow(
                        namespace=w.namespace,
                        name=w.name,
                        queue_name=w.queue_name,
                        source_kind=w.source_kind,
                        manifest=json.loads(json.dumps(w.manifest)),
                        priority=w.priority,
                        state=WORKLOAD_STATES[0],
                        cluster_queue=None,
                        admission=None,
                        requeue_count=0,
                        requeue_at=None,
                        created_at=w.created_at,
                        message="",
                        resource_version=write.version,
                        created_version=write.version,
                    )
                    for w in workloads
                ]
                write.session.add_all(rows)
                write.session.flush()
                return [row.id for row in rows]
        except StoreConflict:
            taken = self._taken([(w.namespace, w.name) for w in workloads])
            if not taken:
                raise
            namespace, name, found = taken
            raise StoreConflict(f"workload {namespace}/{name} already exists (id {found})") from None

    def _taken(self, keys: Sequence[tuple[str, str]]) -> tuple[str, str, int] | None:
        """The first of ``keys`` a stored workload has, with its id (after a conflicting insert)."""
        with self.transaction() as session:
            for namespace, name in keys:
                found = session.scalar(
                    select(WorkloadRow.id).where(WorkloadRow.namespace == namespace, WorkloadRow.name == name)
                )
                if found is not None:
                    return namespace, name, found
        return None

    def get_workload(self, namespace: str, name: str) -> WorkloadRecord | None:
        with self.transaction() as session:
            row = session.scalars(
                select(WorkloadRow).where(WorkloadRow.namespace == namespace, WorkloadRow.name == name)
            ).one_or_none()
            return None if row is None else convert.workload_record(row)

    def list_workloads(
        self,
        states: Iterable[str] | None = None,
        namespace: str | None = None,
        *,
        namespaces: Collection[str] | None = None,
        queue: str | None = None,
        after_id: int = 0,
        limit: int | None = None,
    ) -> list[WorkloadRecord]:
        """Workloads in id (submission) order, optionally only some states, one namespace, the
        ``namespaces`` a user may read, one LocalQueue; ``after_id`` and ``limit`` read one page
        (the API's ``limit`` / ``continue``) with the filters applied in the query, so a page is full."""
        query = select(WorkloadRow.__table__).order_by(WorkloadRow.id)
        query = _workload_filters(query, states, namespace, namespaces, queue)
        if after_id:
            query = query.where(WorkloadRow.id > after_id)
        if limit is not None:
            query = query.limit(limit)
        with self.reading() as connection:
            return [convert.workload_record(cast(WorkloadRow, row)) for row in connection.execute(query)]

    def count_workloads(
        self,
        states: Iterable[str] | None = None,
        namespace: str | None = None,
        *,
        namespaces: Collection[str] | None = None,
        queue: str | None = None,
        after_id: int = 0,
    ) -> int:
        """How many workloads :meth:`list_workloads` with the same filters would return (a list's
        ``remainingItemCount``)."""
        query = _workload_filters(select(func.count(WorkloadRow.id)), states, namespace, namespaces, queue)
        if after_id:
            query = query.where(WorkloadRow.id > after_id)
        with self.reading() as connection:
            return int(connection.execute(query).scalar_one())

    def set_workload_state(
        self, workload_id: int, state: str, *, condition: ConditionRecord | None = None, **fields: object
    ) -> int:
        """Move a workload to ``state``, set ``fields`` (``workloads.WORKLOAD_FIELDS``), append ``condition``.

        Returns the new resource version; an unknown id raises StoreNotFound.
        """
        return self.apply_decisions([WorkloadChange(workload_id, state, condition, None, fields)])

    def apply_decisions(self, changes: Sequence[WorkloadChange]) -> int:
        """Apply a scheduling cycle's changes in one transaction: all of them or, if one fails, none.

        Returns the resource version they committed (the current one when ``changes`` is empty).
        """
        if not changes:
            return self.resource_version()
        with self._write() as write:
            for change in changes:
                wl.change_workload(
                    write.session,
                    write.version,
                    change.workload_id,
                    change.state,
                    change.condition,
                    change.fields,
                )
                if change.pods is not None:
                    wl.replace_pods(write.session, change.workload_id, change.pods)
            return write.version

    def commit(self, writes: StepWrites) -> int:
        """A loop step's writes (:mod:`~gpuq.run.store.batch`) in one transaction; the version committed
        (the current one when there is nothing to write). Workloads deleted meanwhile are skipped."""
        if not writes:
            return self.resource_version()
        with self._write() as write:
            apply_writes(write.session, write.version, writes)
            return write.version

    def read_feed(self, since: int, limit: int = FEED_LIMIT) -> Feed:
        """What changed after version ``since``: new workloads (at most ``limit``, oldest first), the
        tombstones of deleted ones, the objects' signature; indexed reads whatever the store holds.

        Everything up to the version read first is committed (versions commit in order), so reading
        up to it misses nothing and never sees half of a later transaction."""
        workloads = WorkloadRow.__table__.c
        with self.reading() as connection:
            version = int(
                connection.execute(select(Counter.value).where(Counter.name == RESOURCE_VERSION)).scalar_one()
            )
            rows = list(
                connection.execute(
                    select(WorkloadRow.__table__)
                    .where(workloads.created_version > since, workloads.created_version <= version)
                    .order_by(workloads.created_version, workloads.id)
                    .limit(limit)
                )
            )
            more = len(rows) >= limit
            upto = int(rows[-1].created_version) if more else version
            if more:  # the rest of that last version's workloads (one request's), so none is skipped
                rows += connection.execute(
                    select(WorkloadRow.__table__)
                    .where(workloads.created_version == upto, workloads.id > rows[-1].id)
                    .order_by(workloads.id)
                )
            deleted = connection.execute(
                select(
                    TombstoneRow.version, TombstoneRow.workload_id, TombstoneRow.namespace, TombstoneRow.name
                )
                .where(TombstoneRow.version > since, TombstoneRow.version <= upto)
                .order_by(TombstoneRow.version)
            )
            tombstones = tuple(Tombstone(t.version, t.workload_id, t.namespace, t.name) for t in deleted)
            count, newest = connection.execute(_OBJECTS_SIGNATURE).one()
            return Feed(
                version,
                upto,
                tuple(convert.workload_record(cast(WorkloadRow, row)) for row in rows),
                tombstones,
                (int(count), int(newest)),
                more,
            )

    def conditions(self, workload_id: int) -> list[ConditionRecord]:
        """A workload's condition history, oldest first (by time, then insertion)."""
        query = (
            select(ConditionRow)
            .where(ConditionRow.workload_id == workload_id)
            .order_by(ConditionRow.time, ConditionRow.id)
        )
        with self.transaction() as session:
            return [convert.condition_record(row) for row in session.scalars(query)]

    def delete_workload(self, namespace: str, name: str) -> bool:
        """Delete a workload with its pods and conditions, leaving a tombstone for the leader; False (and
        no write) when there was none."""
        with self._write(notify=True) as write:
            found = write.session.scalar(
                select(WorkloadRow.id).where(WorkloadRow.namespace == namespace, WorkloadRow.name == name)
            )
            if found is None:
                write.changed = False
                return False
            write.session.execute(delete(WorkloadRow).where(WorkloadRow.id == found))
            write.session.add(
                TombstoneRow(version=write.version, workload_id=found, namespace=namespace, name=name)
            )
            return True

    def delete_finished(self, before: float, limit: int = FINISHED_BATCH) -> list[tuple[str, str]]:
        """Delete at most ``limit`` workloads that finished (Succeeded or Failed) before ``before``, oldest
        first, with their pods, conditions and the events about them, in one transaction: a fixed number
        of statements whatever the count (one bounded select, one delete of their events, one of the
        workloads, whose pods and conditions cascade). Returns their (namespace, name), oldest first;
        none found writes nothing.
        """
        with self._write() as write:
            found = write.session.execute(
                select(WorkloadRow.id, WorkloadRow.namespace, WorkloadRow.name)
                .where(WorkloadRow.state.in_(FINISHED_STATES), WorkloadRow.finished_at < before)
                .order_by(WorkloadRow.finished_at, WorkloadRow.id)
                .limit(limit)
            ).all()
            if not found:
                write.changed = False
                return []
            keys = [(row.namespace, row.name) for row in found]
            write.session.execute(
                delete(EventRow)
                .where(EventRow.kind == "Workload", tuple_(EventRow.namespace, EventRow.name).in_(keys))
                .execution_options(synchronize_session=False)
            )
            write.session.execute(
                delete(WorkloadRow)
                .where(WorkloadRow.id.in_([row.id for row in found]))
                .execution_options(synchronize_session=False)
            )
            return keys

    # -- pods ------------------------------------------------------------------------------------------------

    def set_pods(self, workload_id: int, pods: Sequence[PodRecord]) -> int:
        """Replace all of a workload's pods at once; returns the new resource version."""
        with self._write() as write:
            wl.replace_pods(write.session, workload_id, pods)
            return write.version

    def update_pod(self, pod_id: int, **fields: object) -> int:
        """Set some of a pod's columns (``workloads.POD_FIELDS``); returns the new resource version."""
        with self._write() as write:
            wl.change_pod(write.session, pod_id, fields)
            return write.version

    def pods_of(self, workload_id: int) -> list[PodRecord]:
        with self.transaction() as session:
            return [convert.pod_record(row) for row in session.scalars(wl.pods_query(workload_id))]

    def running_pods(self) -> list[PodRecord]:
        """Pods whose process may be alive (Running, Terminating), in id order: what the loop polls."""
        with self.transaction() as session:
            return [convert.pod_record(row) for row in session.scalars(wl.pods_query(states=LIVE_POD_STATES))]

    # -- events ----------------------------------------------------------------------------------------------

    def add_event(
        self, type: str, reason: str, kind: str, namespace: str, name: str, message: str, time: float
    ) -> int:
        """Record an event (``type`` Normal or Warning) about an object; returns its id."""
        with self._write() as write:
            row = EventRow(
                time=time,
                type=type,
                reason=reason,
                kind=kind,
                namespace=namespace,
                name=name,
                message=message,
            )
            write.session.add(row)
            write.session.flush()
            return row.id

    def events(
        self,
        kind: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        since_id: int = 0,
        limit: int = EVENTS_LIMIT,
    ) -> list[EventRecord]:
        """Events with id > ``since_id`` about the given object(s), oldest first, at most ``limit``."""
        query = select(EventRow).where(EventRow.id > since_id).order_by(EventRow.id).limit(limit)
        for column, value in ((EventRow.kind, kind), (EventRow.namespace, namespace), (EventRow.name, name)):
            if value is not None:
                query = query.where(column == value)
        with self.transaction() as session:
            return [convert.event_record(row) for row in session.scalars(query)]

    # -- users -----------------------------------------------------------------------------------------------

    def add_user(self, name: str, token: str, roles: Sequence[str], namespaces: Sequence[str]) -> None:
        """Create a user; only sha256(token) is stored. An existing name or token raises StoreConflict."""
        with self._write() as write:
            if write.session.get(UserRow, name) is not None:
                raise StoreConflict(f"user {name!r} already exists")
            write.session.add(
                UserRow(
                    name=name, token_hash=token_hash(token), roles=list(roles), namespaces=list(namespaces)
                )
            )

    def user_for_token(self, token: str) -> UserRecord | None:
        """The user whose token this is, or None (every API request asks: a plain indexed read)."""
        with self.reading() as connection:
            row = connection.execute(
                select(UserRow.name, UserRow.roles, UserRow.namespaces).where(
                    UserRow.token_hash == token_hash(token)
                )
            ).one_or_none()
            return None if row is None else UserRecord(row.name, tuple(row.roles), tuple(row.namespaces))

    def delete_user(self, name: str, *, keep_role: str | None = None) -> bool:
        """Delete a user: its token stops working at once. False (and no write) when there was none.

        With ``keep_role``, deleting the last user holding that role raises StoreConflict (and writes
        nothing), in the same transaction as the delete, so two concurrent deletes cannot both pass.
        """
        with self._write() as write:
            row = write.session.get(UserRow, name)
            if row is None:
                write.changed = False
                return False
            if keep_role is not None and keep_role in row.roles:
                others = write.session.scalars(select(UserRow).where(UserRow.name != name))
                if not any(keep_role in other.roles for other in others):
                    raise StoreConflict(f"user {name!r} is the last {keep_role}")
            write.session.delete(row)
            return True

    def set_token(self, name: str, token: str) -> bool:
        """Give a user a new token (only its sha256 is stored): the old one stops working at once.

        False (and no write) when there is no such user."""
        with self._write() as write:
            row = write.session.get(UserRow, name)
            if row is None:
                write.changed = False
                return False
            row.token_hash = token_hash(token)
            return True


def _workload_filters(
    query: Any,
    states: Iterable[str] | None,
    namespace: str | None,
    namespaces: Collection[str] | None,
    queue: str | None,
) -> Any:
    if states is not None:
        query = query.where(WorkloadRow.state.in_(list(states)))
    if namespace is not None:
        query = query.where(WorkloadRow.namespace == namespace)
    if namespaces is not None:
        query = query.where(WorkloadRow.namespace.in_(sorted(namespaces)))
    if queue is not None:
        query = query.where(WorkloadRow.queue_name == queue)
    return query
