"""The control plane's first schema: objects, workloads, conditions, pods, events, leases, users, counters.

Written by hand to mirror ``gpuq.run.store.models``; a test checks that the migrated
schema and the models agree on SQLite and PostgreSQL.

Revision ID: 0001
Revises:
Create Date: 2026-05-10
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _name(length: int = 253) -> sa.String:
    return sa.String(length)


def _float(name: str, nullable: bool = False) -> sa.Column[float]:
    return sa.Column(name, sa.Double(), nullable=nullable)


def upgrade() -> None:
    counters = op.create_table(
        "counters",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_counters"),
    )
    op.bulk_insert(counters, [{"name": "resource_version", "value": 0}])
    op.create_table(
        "objects",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(63), nullable=False),
        sa.Column("api_version", _name(), nullable=False),
        sa.Column("namespace", _name(), nullable=False),
        sa.Column("name", _name(), nullable=False),
        sa.Column("manifest", sa.JSON(), nullable=False),
        sa.Column("resource_version", sa.BigInteger(), nullable=False),
        _float("created_at"),
        _float("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_objects"),
        sa.UniqueConstraint("kind", "namespace", "name", name="uq_objects_kind_namespace_name"),
    )
    _create_workloads()
    op.create_table(
        "conditions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(63), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", _name(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        _float("time"),
        sa.PrimaryKeyConstraint("id", name="pk_conditions"),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workloads.id"], name="fk_conditions_workload_id_workloads", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_conditions_workload_id", "conditions", ["workload_id"])
    _create_pods()
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), nullable=False),
        _float("time"),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("reason", _name(), nullable=False),
        sa.Column("kind", sa.String(63), nullable=False),
        sa.Column("namespace", _name(), nullable=False),
        sa.Column("name", _name(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
    )
    op.create_index("ix_events_kind_namespace_name", "events", ["kind", "namespace", "name"])
    op.create_table(
        "leases",
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("holder", _name(), nullable=False),
        _float("renewed_at"),
        _float("expires_at"),
        sa.PrimaryKeyConstraint("name", name="pk_leases"),
    )
    op.create_table(
        "users",
        sa.Column("name", _name(), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("roles", sa.JSON(), nullable=False),
        sa.Column("namespaces", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_users"),
        sa.UniqueConstraint("token_hash", name="uq_users_token_hash"),
    )


def _create_workloads() -> None:
    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("namespace", _name(), nullable=False),
        sa.Column("name", _name(), nullable=False),
        sa.Column("queue_name", _name(), nullable=False),
        sa.Column("source_kind", sa.String(63), nullable=False),
        sa.Column("manifest", sa.JSON(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("cluster_queue", _name(), nullable=True),
        sa.Column("admission", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("requeue_count", sa.Integer(), nullable=False),
        _float("requeue_at", nullable=True),
        _float("created_at"),
        _float("admitted_at", nullable=True),
        _float("started_at", nullable=True),
        _float("finished_at", nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("resource_version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_workloads"),
        sa.UniqueConstraint("namespace", "name", name="uq_workloads_namespace_name"),
    )
    op.create_index("ix_workloads_state", "workloads", ["state"])


def _create_pods() -> None:
    op.create_table(
        "pods",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("name", _name(), nullable=False),
        sa.Column("pod_set", _name(), nullable=False),
        sa.Column("node", _name(), nullable=True),
        sa.Column("devices", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        _float("started_at", nullable=True),
        _float("finished_at", nullable=True),
        sa.Column("log_path", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_pods"),
        sa.UniqueConstraint("workload_id", "name", name="uq_pods_workload_id_name"),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workloads.id"], name="fk_pods_workload_id_workloads", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_pods_state", "pods", ["state"])


def downgrade() -> None:
    for table in ("users", "leases", "events", "pods", "conditions", "workloads", "objects", "counters"):
        op.drop_table(table)
