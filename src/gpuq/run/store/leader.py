"""Leader election: exactly one replica runs the control loop; every replica serves the API.

PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``) on a connection of
its own, outside the pool. The server frees it the moment that connection ends, so
takeover time is the follower's retry interval after the leader exits or dies (its
socket closes with the process). A leader whose *machine* vanishes is noticed only when
the server's TCP keepalive (``tcp_keepalives_*``) or ``client_connection_check_interval``
gives up on the connection; set those on the server for a bound.

SQLite (one machine): a ``leases`` row with ``holder`` and ``expires_at``, taken over
once expired. With renewals every ``lease_s / 3``, a follower trying at the same pace
takes over at most ``lease_s + lease_s / 3`` after the leader's last renewal (6.7 s by
default); :meth:`LeaderElector.release` hands over at the follower's next try.

Lease writes do not bump the store's ``resource_version``: they are not state the loop
or a watch reacts to, and renewing would wake them every ``lease_s / 3``.
An elector is used from one thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable

from sqlalchemy import or_, text, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from gpuq.run.store.models import LeaseRow
from gpuq.run.store.store import Store

LEASE_NAME = "gpuq-leader"


def leader_lock_key(schema: str) -> int:
    """The advisory-lock key of the store in ``schema``: fixed per store, distinct across schemas.

    Advisory locks are database-wide, so two stores in two schemas of one database
    (deployments, or tests side by side) must not share a key.
    """
    digest = hashlib.sha256(f"{LEASE_NAME}:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class LeaderElector:
    """Campaigns for leadership of ``store`` as ``identity``; the leader renews every ``renew_interval_s``."""

    def __init__(
        self,
        store: Store,
        identity: str,
        lease_s: float = 5.0,
        *,
        clock: Callable[[], float] = time.time,
        lock_key: int | None = None,
    ) -> None:
        if lease_s <= 0:
            raise ValueError("lease_s must be positive")
        self.store, self.identity, self.lease_s = store, identity, lease_s
        self._clock = clock
        self._lock_key = lock_key
        self._conn: Connection | None = None
        self._held = False
        self._expires_at = 0.0

    @property
    def renew_interval_s(self) -> float:
        return self.lease_s / 3

    @property
    def is_leader(self) -> bool:
        """True while this elector holds leadership (on SQLite, only until its lease runs out)."""
        if self.store.backend == "postgresql":
            return self._held
        return self._held and self._clock() < self._expires_at

    def try_acquire(self) -> bool:
        """Become leader if nobody else is (a leader just renews); True when this elector leads."""
        if self._held:
            return self.renew()
        if self.store.backend == "postgresql":
            self._held = self._pg_try_lock()
        else:
            self._held = self._sqlite_claim(take_expired=True)
        return self._held

    def renew(self) -> bool:
        """Confirm leadership (extend the lease on SQLite); False, and no longer leader, once it is lost."""
        if not self._held:
            return False
        if self.store.backend == "postgresql":
            self._held = self._pg_still_locked()
        else:
            self._held = self._sqlite_claim(take_expired=False)
        return self._held

    def release(self) -> None:
        """Give leadership up now, so a follower need not wait for the lease to run out."""
        if self.store.backend == "postgresql":
            self._drop_connection()
        elif self._held:
            with self.store.transaction(write=True) as session:
                session.execute(
                    update(LeaseRow)
                    .where(LeaseRow.name == LEASE_NAME, LeaseRow.holder == self.identity)
                    .values(expires_at=0.0)
                    .execution_options(synchronize_session=False)
                )
        self._held = False

    # -- PostgreSQL ------------------------------------------------------------------------------------------

    def _pg_try_lock(self) -> bool:
        try:
            if self._conn is None:
                self._conn = self.store.dedicated_connection().execution_options(isolation_level="AUTOCOMMIT")
            if self._lock_key is None:
                self._lock_key = leader_lock_key(
                    self._conn.execute(text("SELECT current_schema()")).scalar_one()
                )
            got = self._conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": self._lock_key})
            if got.scalar_one():
                return True
        except DBAPIError:
            pass
        self._drop_connection()  # a follower holds no connection between tries
        return False

    def _pg_still_locked(self) -> bool:
        if self._conn is None or self._lock_key is None:
            return False
        unsigned = self._lock_key & 0xFFFF_FFFF_FFFF_FFFF
        try:
            held = self._conn.execute(
                text(
                    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
                    " AND pid = pg_backend_pid() AND classid::bigint = :high AND objid::bigint = :low"
                    " AND objsubid = 1)"
                ),
                {"high": unsigned >> 32, "low": unsigned & 0xFFFF_FFFF},
            ).scalar_one()
        except DBAPIError:
            held = False
        if not held:
            self._drop_connection()
        return bool(held)

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(DBAPIError):
                self._conn.close()
            self._conn = None

    # -- SQLite ----------------------------------------------------------------------------------------------

    def _sqlite_claim(self, *, take_expired: bool) -> bool:
        """Write ourselves into the lease row if we hold it (or it expired and ``take_expired``).

        Both statements write, so the transaction takes SQLite's write lock before it
        reads anything and two replicas cannot both see an expired lease.
        """
        now = self._clock()
        claimable = LeaseRow.holder == self.identity
        if take_expired:
            claimable = or_(claimable, LeaseRow.expires_at <= now)
        with self.store.transaction(write=True) as session:
            session.execute(
                sqlite_insert(LeaseRow)
                .values(name=LEASE_NAME, holder="", renewed_at=0.0, expires_at=0.0)
                .on_conflict_do_nothing()
            )
            result = session.execute(
                update(LeaseRow)
                .where(LeaseRow.name == LEASE_NAME, claimable)
                .values(holder=self.identity, renewed_at=now, expires_at=now + self.lease_s)
                .execution_options(synchronize_session=False)
            )
            claimed = getattr(result, "rowcount", 0) == 1
        if claimed:
            self._expires_at = now + self.lease_s
        return claimed
