"""Engines for the store's two databases, with the per-connection settings each one needs.

SQLite: the ``sqlite3`` driver's own transaction handling is switched off (it never
sends BEGIN before a SELECT, so reads are not repeatable) and SQLAlchemy sends BEGIN
itself; write transactions send ``BEGIN IMMEDIATE`` so a writer waits for the lock
(``busy_timeout``) up front instead of failing when a read lock cannot be upgraded.
Every connection gets WAL, ``busy_timeout=5000`` and ``foreign_keys=ON`` (needed for
the cascades). PostgreSQL goes through psycopg 3.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.pool import NullPool

WRITE_OPTION = "gpuq_write"
"""Execution option marking a connection whose transaction will write (``BEGIN IMMEDIATE`` on SQLite)."""

BUSY_TIMEOUT_MS = 5000
POOL_SIZE = 16
"""Connections a store keeps open (and as many more it may open under load, closed after use)."""

SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
    "PRAGMA foreign_keys=ON",
    # WAL's recommended setting: commits stay atomic and the file consistent; a power
    # loss may drop the last commits, which the loop recomputes anyway.
    "PRAGMA synchronous=NORMAL",
)


def default_url(home: Path | None = None) -> str:
    """``sqlite:///~/.gpuq/gpuq.db`` (the directory is created, mode 0700), the store of a single machine."""
    directory = (home or Path.home()) / ".gpuq"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    if directory.stat().st_uid == os.geteuid():
        directory.chmod(0o700)  # gpuq's own: the database and the context file's token live here
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
    # A file does not drop connections: a ping before each checkout is only a PostgreSQL server's need.
    kwargs: dict[str, Any] = {"pool_pre_ping": url.get_backend_name() == "postgresql"}
    if not pooled:
        kwargs["poolclass"] = NullPool
    else:  # the API's threads, the loop, its start threads: enough that none opens and closes its own
        kwargs |= {"pool_size": POOL_SIZE, "max_overflow": POOL_SIZE}
    if url.get_backend_name() == "sqlite":
        _private_database_file(url)
    engine = create_engine(url, **kwargs)
    if url.get_backend_name() == "sqlite":
        _configure_sqlite(engine)
    return engine


def _private_database_file(url: URL) -> None:
    """Create the SQLite file mode 0600, or take group and other access away from an existing one that
    has it (and from its ``-wal`` / ``-shm`` files, which SQLite creates with the database's mode).

    The database holds every workload, user and token hash: only the server may read it.

    An existing file is never opened here: SQLite's locks are POSIX record locks, which the kernel
    drops for the whole process as soon as *any* descriptor of the file is closed. Opening and closing
    the database while this process's connections held it (a second store, as the runner opens beside
    the API's) silently released their locks: another process (``gpuq users add``) then believed itself
    the last connection, checkpointed and removed the WAL, and every later query of this process failed
    with ``disk I/O error``. So only a file created here (``O_EXCL``: nobody else has it) is closed.
    """
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)
    if not path.exists():
        # a missing directory: SQLite's own error says it; a file created meanwhile: not ours to close
        with contextlib.suppress(FileNotFoundError, FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(OSError):
            info = file.stat()
            if info.st_mode & 0o077 and info.st_uid == os.geteuid():
                file.chmod(stat.S_IMODE(info.st_mode) & 0o700)


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
