"""Connections and transactions of the store, and the version counter every write bumps.

Contract (design note 0003): every public method that changes state runs in one
transaction and bumps the store-wide ``resource_version`` exactly once; a call that
changes nothing writes nothing and bumps nothing. The bump is the transaction's first
statement, an ``UPDATE ... RETURNING`` of the one ``counters`` row, which locks that row
until commit (PostgreSQL's row lock, the one ``SELECT ... FOR UPDATE`` takes; SQLite
writers are serialised by ``BEGIN IMMEDIATE``). So writers are serialised, no version is
used twice, and versions become visible in order: a reader that saw version ``v`` has
seen every change up to ``v``.

Fencing: a store whose :attr:`StoreBase.fence` is set (the leader's, by the runner) checks,
in every such write transaction and before anything else, that the lease row still names
its holder with its fencing token and has not expired; otherwise it raises
:class:`~gpuq.run.store.records.LeaseLost` and writes nothing. On PostgreSQL the check
reads the row ``FOR SHARE``, so a takeover (an ``UPDATE`` of that row) waits for the write
to commit, and a write after the takeover sees the new token; SQLite's ``BEGIN IMMEDIATE``
serialises the two. Stores without a fence (the API's) write as before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, select, text, update
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from gpuq.run.store.engine import WRITE_OPTION, make_engine, normalize_url
from gpuq.run.store.models import RESOURCE_VERSION, Counter, LeaseRow
from gpuq.run.store.notify import channel_for, local_signal
from gpuq.run.store.records import Fence, LeaseLost, StoreConflict

MIGRATIONS = Path(__file__).parent / "migrations"
MIGRATION_LOCK_KEY = 0x6770_7571_6D69_6772  # "gpuqmigr": two replicas never migrate at once (PostgreSQL)


_writer_locks: dict[str, threading.RLock] = {}
_writer_locks_guard = threading.Lock()


def writer_lock(url: URL) -> threading.RLock:
    """This process's lock of one SQLite database's writes.

    SQLite admits one writer at a time and makes the others retry on a timer (its busy handler
    sleeps up to 100 ms between tries): twenty API threads and the loop contending that way waited
    far longer than their transactions took. Writers of one process queue on this lock instead and
    meet SQLite's lock only against other processes."""
    key = url.render_as_string(hide_password=True)
    with _writer_locks_guard:
        return _writer_locks.setdefault(key, threading.RLock())


_VERSION = select(Counter.value).where(Counter.name == RESOURCE_VERSION)


@dataclass
class Write:
    """An open write transaction and the version it will commit; ``changed=False`` rolls it back."""

    session: Session
    version: int
    changed: bool = True


class StoreBase:
    """An engine, its sessions and the version counter; :class:`Store` adds the tables' methods."""

    def __init__(self, url: str) -> None:
        self.url = normalize_url(url)
        self.backend = self.url.get_backend_name()
        self._engine = make_engine(self.url)
        self._dedicated: Engine | None = None
        self._reads = sessionmaker(self._engine, expire_on_commit=False)
        self._writes = sessionmaker(
            self._engine.execution_options(**{WRITE_OPTION: True}), expire_on_commit=False
        )
        self._channel: str | None = None  # PostgreSQL's NOTIFY channel of this store's schema
        self.fence: Fence | None = None
        """Set on the leader's store: every state-changing method checks it first (module docstring)."""

    # -- lifecycle -------------------------------------------------------------------------------------------

    def migrate(self) -> None:
        """Bring the schema to the newest revision (idempotent); replicas may call it concurrently."""
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
        with self._engine.execution_options(**{WRITE_OPTION: True}).begin() as connection:
            if self.backend == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    def close(self) -> None:
        """Close every pooled connection; the store is unusable afterwards."""
        self._engine.dispose()
        if self._dedicated is not None:
            self._dedicated.dispose()

    def dedicated_connection(self) -> Connection:
        """A connection outside the pool that really closes when closed (session-level locks die with it)."""
        if self._dedicated is None:
            self._dedicated = make_engine(self.url, pooled=False)
        return self._dedicated.connect()

    @contextmanager
    def transaction(self, *, write: bool = False) -> Iterator[Session]:
        """A session in one transaction: committed when the block ends, rolled back if it raises.

        ``write=True`` takes SQLite's write lock up front, after this process's own lock of the
        database (:func:`writer_lock`). Raw writes through this do not bump ``resource_version``;
        the public methods do.
        """
        lock = writer_lock(self.url) if write and self.backend == "sqlite" else None
        if lock is not None:
            lock.acquire()
        session = (self._writes if write else self._reads)()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()
            if lock is not None:
                lock.release()

    def check_fence(self, session: Session) -> None:
        """Raise :class:`LeaseLost` unless this store has no fence or its lease is still held (in SQL)."""
        fence = self.fence
        if fence is None:
            return
        now = fence.clock()
        held = select(LeaseRow.token).where(
            LeaseRow.name == fence.name,
            LeaseRow.holder == fence.holder,
            LeaseRow.token == fence.token,
            LeaseRow.expires_at > now,
        )
        if self.backend == "postgresql":
            held = held.with_for_update(read=True)  # FOR SHARE: a takeover waits for this commit
        if session.execute(held).first() is not None:
            return
        row = session.execute(
            select(LeaseRow.holder, LeaseRow.token, LeaseRow.expires_at).where(LeaseRow.name == fence.name)
        ).first()
        if row is None:
            now_held = "no lease row exists"
        elif (row.holder, row.token) != (fence.holder, fence.token):
            now_held = f"it is held by {row.holder!r} with token {row.token}"
        else:
            now_held = f"it expired {now - row.expires_at:.1f}s ago"
        raise LeaseLost(
            f"{fence.holder!r} no longer holds lease {fence.name!r} with fencing token {fence.token}: "
            f"{now_held}; nothing was written"
        )

    @contextmanager
    def _write(self, *, notify: bool = False) -> Iterator[Write]:
        """A fenced write transaction that bumps the version; ``notify``: a change the leader must
        learn of at once (a submission, a deletion, an object): it wakes the leader's
        :class:`~gpuq.run.store.notify.Wakeup` when it commits (PostgreSQL ``NOTIFY``, delivered at
        commit; this process's waiters on either backend)."""
        try:
            with self.transaction(write=True) as session:
                self.check_fence(session)
                stmt = (
                    update(Counter)
                    .where(Counter.name == RESOURCE_VERSION)
                    .values(value=Counter.value + 1)
                    .returning(Counter.value)
                    .execution_options(synchronize_session=False)
                )
                write = Write(session, session.execute(stmt).scalar_one())
                yield write
                if write.changed:
                    session.flush()
                    if notify and self.backend == "postgresql":
                        if self._channel is None:
                            self._channel = channel_for(
                                session.execute(text("SELECT current_schema()")).scalar()
                            )
                        session.execute(text(f"NOTIFY {self._channel}"))
                else:
                    session.rollback()
                    notify = False
        except IntegrityError as err:
            raise StoreConflict(f"the write conflicts with stored rows: {err.orig}") from err
        if notify:
            local_signal(self.url).set()

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A plain connection in one read transaction, without an ORM session: the reads the leader and
        the API make at every step or request (a version, a signature, the feed) cost what their SQL
        costs."""
        with self._engine.connect() as connection:
            try:
                yield connection
            finally:
                connection.rollback()

    def resource_version(self) -> int:
        """The version of the newest committed change (0 for a fresh store)."""
        with self.reading() as connection:
            return int(connection.execute(_VERSION).scalar_one())

    def changes_since(self, version: int) -> bool:
        """Whether anything was committed after ``version`` (one primary-key read)."""
        return self.resource_version() > version
