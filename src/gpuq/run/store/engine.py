"""Engines for the store's two databases, with the per-connection settings each one needs.

SQLite: the ``sqlite3`` driver's own transaction handling is switched off (it never
sends BEGIN before a SELECT, so reads are not repeatable) and SQLAlchemy sends BEGIN
itself; write transactions send ``BEGIN IMMEDIATE`` so a writer waits for the lock
(``busy_timeout``) up front instead of failing when a read lock cannot be upgraded.
Every connection gets WAL, ``busy_timeout=5000`` and ``foreign_keys=ON`` (needed for
the cascades). PostgreSQL goes through psycopg 3.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.pool import NullPool

WRITE_OPTION = "gpuq_write"
"""Execution option marking a connection whose transaction will write (``BEGIN IMMEDIATE`` on SQLite)."""

BUSY_TIMEOUT_MS = 5000

SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
    "PRAGMA foreign_keys=ON",
    # WAL's recommended setting: commits stay atomic and the file consistent; a power
    # loss may drop the last commits, which the loop recomputes anyway.
    "PRAGMA synchronous=NORMAL",
)


def default_url(home: Path | None = None) -> str:
    """``sqlite:///~/.gpuq/gpuq.db`` (the directory is created), the store of a single machine."""
    directory = (home or Path.home()) / ".gpuq"
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory / 'gpuq.db'}"


def normalize_url(url: str) -> URL:
    """Parse ``url``; plain ``postgresql://`` (or ``postgres://``) is sent through psycopg 3."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise ValueError(f"unsupported store URL {url!r}: use sqlite:///path.db or postgresql+psycopg://...")
    if backend == "postgresql" and parsed.get_driver_name() != "psycopg":
        raise ValueError(f"unsupported PostgreSQL driver in {url!r}: use postgresql+psycopg://")
    return parsed


def make_engine(url: URL, *, pooled: bool = True) -> Engine:
    """An engine for ``url``; ``pooled=False`` gives connections that really close (leader election)."""
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if not pooled:
        kwargs["poolclass"] = NullPool
    engine = create_engine(url, **kwargs)
    if url.get_backend_name() == "sqlite":
        _configure_sqlite(engine)
    return engine


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy sends BEGIN, not the driver
        cursor = dbapi_connection.cursor()
        try:
            for pragma in SQLITE_PRAGMAS:
                cursor.execute(pragma)
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        write = connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
