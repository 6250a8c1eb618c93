"""Leader election: exactly one replica runs the control loop; every replica serves the API.

One mechanism on both backends: a ``leases`` row (``holder``, ``token``, ``renewed_at``,
``expires_at``). A replica acquires the lease when it is free, expired, or already its own,
and every acquisition increments ``token``, the *fencing token* of that tenure. The leader
renews every ``lease_s / 3`` (while the row still carries its token: a lapsed lease nobody
took is renewed in the same tenure); a follower trying at the same pace takes over at most
``lease_s + lease_s / 3`` after the leader's last renewal (6.7 s by default), whether the
leader exited, died, lost its machine or is frozen (``SIGSTOP``, a long GC or swap storm, a
VM paused): nothing depends on a connection staying open. :meth:`LeaderElector.release`
hands over at the follower's next try.

Fencing: a leader that wakes up after its lease was taken over still believes it leads
until it looks. So the leader's store carries :attr:`LeaderElector.fence`, and every write
the loop makes checks in its own transaction that the lease row still carries this
leader's token and has not expired (``StoreBase.check_fence``); otherwise it raises
:class:`~gpuq.run.store.records.LeaseLost` and writes nothing, and the runner steps down.

Time: expiry is judged by each replica's clock (``clock``, ``time.time``), as Kubernetes'
leader election does: replicas on several machines need clocks in step (NTP) to well
under ``lease_s``. Skew can only make a takeover early or late; it can never let two
leaders write, because a takeover changes the token that every fenced write checks.

Lease writes do not bump the store's ``resource_version``: they are not state the loop
or a watch reacts to, and renewing would wake them every ``lease_s / 3``.
An elector is used from one thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import ColumnElement, or_, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from gpuq.run.store.models import LeaseRow
from gpuq.run.store.records import Fence
from gpuq.run.store.store import Store

LEASE_NAME = "gpuq-leader"


class LeaderElector:
    """Campaigns for leadership of ``store`` as ``identity``; the leader renews every ``renew_interval_s``."""

    def __init__(
        self,
        store: Store,
        identity: str,
        lease_s: float = 5.0,
        *,
        clock: Callable[[], float] = time.time,
        name: str = LEASE_NAME,
    ) -> None:
        if lease_s <= 0:
            raise ValueError("lease_s must be positive")
        self.store, self.identity, self.lease_s, self.name = store, identity, lease_s, name
        self._clock = clock
        self._held = False
        self._token = 0
        self._expires_at = 0.0

    @property
    def renew_interval_s(self) -> float:
        return self.lease_s / 3

    @property
    def is_leader(self) -> bool:
        """True while this elector holds the lease: only until it runs out, unless renewed (no query)."""
        return self._held and self._clock() < self._expires_at

    @property
    def token(self) -> int:
        """The fencing token of the current (or last) tenure; 0 before the first acquisition."""
        return self._token

    @property
    def expires_at(self) -> float:
        """When the current tenure's lease runs out unless renewed (by ``clock``); 0 before any tenure."""
        return self._expires_at

    @property
    def fence(self) -> Fence | None:
        """What the leader's writes must check (set it as ``store.fence``); None before any tenure.

        It stays valid only as long as the tenure: after a takeover, or once the lease has
        expired, writes checked against it raise ``LeaseLost``.
        """
        if not self._token:
            return None
        return Fence(self.name, self.identity, self._token, self._clock)

    def try_acquire(self) -> bool:
        """Become leader if nobody else is (a leader just renews); True when this elector leads.

        A new tenure (a free, expired or released lease, or one this identity held in a previous
        process or an earlier tenure) gets the next fencing token.
        """
        if self._held and self.renew():
            return True
        now = self._clock()
        insert = postgresql_insert if self.store.backend == "postgresql" else sqlite_insert
        with self.store.transaction(write=True) as session:
            session.execute(
                insert(LeaseRow)
                .values(name=self.name, holder="", token=0, renewed_at=0.0, expires_at=0.0)
                .on_conflict_do_nothing()
            )
            token = session.execute(
                update(LeaseRow)
                .where(
                    LeaseRow.name == self.name,
                    or_(LeaseRow.holder == self.identity, LeaseRow.expires_at <= now),
                )
                .values(
                    holder=self.identity,
                    token=LeaseRow.token + 1,
                    renewed_at=now,
                    expires_at=now + self.lease_s,
                )
                .returning(LeaseRow.token)
                .execution_options(synchronize_session=False)
            ).scalar_one_or_none()
        self._held = token is not None
        if token is not None:
            self._token, self._expires_at = token, now + self.lease_s
        return self._held

    def renew(self) -> bool:
        """Extend the lease while this tenure holds it; False, and no longer leader, once it was taken over.

        The tenure holds it while the row names this identity with this tenure's token: then even a
        lease that lapsed (this replica was too busy or frozen to renew) and that nobody took is
        renewed, with the same token, since no other replica can have led meanwhile (every acquisition
        changes the token). Writes fenced by it fail while it is lapsed, and pass again once renewed.
        """
        if not self._held:
            return False
        now = self._clock()
        with self.store.transaction(write=True) as session:
            result = session.execute(
                update(LeaseRow)
                .where(*self._mine())
                .values(renewed_at=now, expires_at=now + self.lease_s)
                .execution_options(synchronize_session=False)
            )
            renewed = getattr(result, "rowcount", 0) == 1
        self._held = renewed
        if renewed:
            self._expires_at = now + self.lease_s
        return renewed

    def release(self) -> None:
        """Give leadership up now, so a follower need not wait for the lease to run out.

        Only this tenure's lease is freed: after a takeover it changes nothing.
        """
        if self._token:
            with self.store.transaction(write=True) as session:
                session.execute(
                    update(LeaseRow)
                    .where(*self._mine())
                    .values(expires_at=0.0)
                    .execution_options(synchronize_session=False)
                )
        self._held = False

    def holder(self) -> tuple[str, int, float] | None:
        """The lease row as stored: (holder, token, expires_at), or None before anyone campaigned."""
        with self.store.transaction() as session:
            row = session.execute(
                select(LeaseRow.holder, LeaseRow.token, LeaseRow.expires_at).where(LeaseRow.name == self.name)
            ).first()
        return None if row is None else (row.holder, row.token, row.expires_at)

    def _mine(self) -> tuple[ColumnElement[bool], ...]:
        """This tenure's lease row: our name, our holder, our token."""
        return (LeaseRow.name == self.name, LeaseRow.holder == self.identity, LeaseRow.token == self._token)
