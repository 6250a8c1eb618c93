"""The leader's change feed: new workloads by the version that created them, deletions as tombstones.

``workloads.created_version`` is the store version of the insert (never changed; versions are never
reused, unlike SQLite row ids), so the leader takes in new workloads with one indexed range read instead
of listing them all. ``tombstones`` records each workload deleted through the API with the version of
the delete, so the leader learns of deletions the same way.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("created_version", sa.BigInteger(), nullable=False, server_default="0"))
    op.execute("UPDATE workloads SET created_version = resource_version")
    op.create_index("ix_workloads_created_version", "workloads", ["created_version"])
    op.create_table(
        "tombstones",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("namespace", sa.String(253), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tombstones"),
    )
    op.create_index("ix_tombstones_version", "tombstones", ["version"])


def downgrade() -> None:
    op.drop_index("ix_tombstones_version", table_name="tombstones")
    op.drop_table("tombstones")
    op.drop_index("ix_workloads_created_version", table_name="workloads")
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("created_version")
