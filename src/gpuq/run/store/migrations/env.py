"""Alembic environment run only through :meth:`gpuq.run.store.Store.migrate` (no alembic.ini).

``Store.migrate`` passes an open connection, already inside its transaction, as
``config.attributes["connection"]``; migrations run on it and commit with it.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from gpuq.run.store.models import Base


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if not isinstance(connection, Connection):
        raise RuntimeError("gpuq migrations run through Store.migrate(), which passes a connection")
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("gpuq migrations have no offline (SQL script) mode")
run_migrations_online()
