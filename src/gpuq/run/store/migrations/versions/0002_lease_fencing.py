"""Leader leases on both backends with a fencing token; finished workloads found by their end.

``leases.token`` is incremented at every acquisition of a lease: the leader's writes
check it (``gpuq.run.store.leader``), so a replica that lost the lease cannot write.
``ix_workloads_finished_at`` serves the retention of finished workloads (``gpuq serve
--finished-ttl``), which deletes the oldest first.

Revision ID: 0002
Revises: 0001
Create Date: 2026-06-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        batch.add_column(sa.Column("token", sa.BigInteger(), nullable=False, server_default="0"))
    op.create_index("ix_workloads_finished_at", "workloads", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_workloads_finished_at", table_name="workloads")
    with op.batch_alter_table("leases") as batch:
        batch.drop_column("token")
