"""The store's tables (design note 0003, "Store"), as SQLAlchemy 2 declarative models.

The hand-written migrations in ``versions/`` (0001, then each change) create exactly these; a test
compares the migrated schema with this metadata on SQLite and PostgreSQL. Constraint
names come from one naming convention so both agree on them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

RESOURCE_VERSION = "resource_version"
"""Name of the one ``counters`` row holding the store-wide resource version."""

# Nullable JSON columns store SQL NULL for None (not the JSON literal 'null').
NullableJSON = JSON(none_as_null=True)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 (SQLAlchemy reads it from the class)
        float: Double(),
        str: String(253),
        dict[str, Any]: JSON(),
        list[str]: JSON(),
    }


class Counter(Base):
    """Store-wide counters; every write locks the ``resource_version`` row, so its order is commit order."""

    __tablename__ = "counters"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)


class ObjectRow(Base):
    """Applied manifests; the unique (kind, namespace, name) index also serves look-ups by kind."""

    __tablename__ = "objects"
    __table_args__ = (UniqueConstraint("kind", "namespace", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(63))
    api_version: Mapped[str]
    namespace: Mapped[str]
    name: Mapped[str]
    manifest: Mapped[dict[str, Any]]
    resource_version: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[float]
    updated_at: Mapped[float]


class WorkloadRow(Base):
    """Workloads; the loop lists them by state every cycle."""

    __tablename__ = "workloads"
    __table_args__ = (
        UniqueConstraint("namespace", "name"),
        Index("ix_workloads_state", "state"),
        Index("ix_workloads_finished_at", "finished_at"),  # retention deletes the oldest finished first
        Index("ix_workloads_created_version", "created_version"),  # the leader's intake reads new ones
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    namespace: Mapped[str]
    name: Mapped[str]
    queue_name: Mapped[str]
    source_kind: Mapped[str] = mapped_column(String(63))
    manifest: Mapped[dict[str, Any]]
    priority: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(32))
    cluster_queue: Mapped[str | None]
    admission: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
    requeue_count: Mapped[int] = mapped_column(Integer)
    requeue_at: Mapped[float | None]
    created_at: Mapped[float]
    admitted_at: Mapped[float | None]
    started_at: Mapped[float | None]
    finished_at: Mapped[float | None]
    message: Mapped[str] = mapped_column(Text)
    resource_version: Mapped[int] = mapped_column(BigInteger)
    created_version: Mapped[int] = mapped_column(BigInteger, server_default="0")
    """The store version that created the row, never changed: versions are never reused (ids may be,
    on SQLite), so the leader reads what is new with ``created_version > seen``."""


class TombstoneRow(Base):
    """A workload deleted through the API, so the leader learns of it without listing every workload;
    the leader deletes the tombstones it has read."""

    __tablename__ = "tombstones"
    __table_args__ = (Index("ix_tombstones_version", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger)
    workload_id: Mapped[int] = mapped_column(Integer)
    namespace: Mapped[str]
    name: Mapped[str]


class ConditionRow(Base):
    """Append-only condition history of a workload; deleted with it."""

    __tablename__ = "conditions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"), index=True)
    type: Mapped[str] = mapped_column(String(63))
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(String(253))
    message: Mapped[str] = mapped_column(Text)
    time: Mapped[float]


class PodRow(Base):
    """Pods of a workload, unique by name within it; deleted with it."""

    __tablename__ = "pods"
    __table_args__ = (UniqueConstraint("workload_id", "name"), Index("ix_pods_state", "state"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"))
    name: Mapped[str]
    pod_set: Mapped[str]
    node: Mapped[str | None]
    devices: Mapped[list[str]]
    state: Mapped[str] = mapped_column(String(32))
    attempt: Mapped[int] = mapped_column(Integer)
    pid: Mapped[int | None] = mapped_column(Integer)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[float | None]
    finished_at: Mapped[float | None]
    log_path: Mapped[str | None] = mapped_column(Text)


class EventRow(Base):
    """Events, read in id order and filtered by the object they are about."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_kind_namespace_name", "kind", "namespace", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    time: Mapped[float]
    type: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(String(253))
    kind: Mapped[str] = mapped_column(String(63))
    namespace: Mapped[str]
    name: Mapped[str]
    message: Mapped[str] = mapped_column(Text)


class LeaseRow(Base):
    """Leader leases on both backends; ``token`` (the fencing token) grows by one at every acquisition."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    holder: Mapped[str]
    token: Mapped[int] = mapped_column(BigInteger, server_default="0")
    renewed_at: Mapped[float]
    expires_at: Mapped[float]


class UserRow(Base):
    """API users; ``token_hash`` is the sha256 hex of the bearer token, unique for look-up."""

    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    roles: Mapped[list[str]]
    namespaces: Mapped[list[str]]
