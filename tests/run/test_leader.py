"""Leader election (design note 0003): advisory lock on PostgreSQL, an expiring lease row on SQLite."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from gpuq.run.store import LeaderElector, Store
from gpuq.run.store.leader import leader_lock_key


class Clock:
    """A settable clock for lease expiry."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def replicas(url: str) -> Iterator[tuple[Store, Store]]:
    """Two stores on one database, as two replicas would open it."""
    first, second = Store(url), Store(url)
    first.migrate()
    yield first, second
    first.close()
    second.close()


@pytest.fixture
def pg_replicas(postgres_url: str) -> Iterator[tuple[Store, Store]]:
    yield from replicas(postgres_url)


@pytest.fixture
def sqlite_replicas(sqlite_url: str) -> Iterator[tuple[Store, Store]]:
    yield from replicas(sqlite_url)


def kill_lock_holder(admin_url: str, key: int) -> int:
    """Terminate the backend holding the advisory lock ``key``, as if its process had died."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    with psycopg.connect(admin_url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'"
            " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1",
            (unsigned >> 32, unsigned & 0xFFFF_FFFF),
        ).fetchall()
    return len(rows)


def test_postgres_first_wins_and_a_dead_leader_is_replaced(
    pg_replicas: tuple[Store, Store], postgres_url: str, postgres_admin: str
) -> None:
    first, second = (LeaderElector(store, name) for store, name in zip(pg_replicas, ("a", "b"), strict=True))
    assert first.try_acquire() and first.is_leader
    assert first.try_acquire(), "a leader trying again stays leader"
    assert not second.try_acquire() and not second.is_leader
    assert first.renew()
    assert not second.renew(), "a follower has nothing to renew"

    schema = postgres_url.rsplit("%3D", 1)[1]
    assert kill_lock_holder(postgres_admin, leader_lock_key(schema)) == 1
    assert second.try_acquire() and second.is_leader
    assert not first.renew() and not first.is_leader
    assert not first.try_acquire()

    second.release()
    assert not second.is_leader
    assert first.try_acquire()
    first.release()


def test_postgres_lock_is_per_schema(postgres_url: str, postgres_admin: str) -> None:
    other_schema = f"gpuq_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_admin, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{other_schema}"')
    here, there = Store(postgres_url), Store(f"{postgres_url.rsplit('%3D', 1)[0]}%3D{other_schema}")
    try:
        electors = [LeaderElector(here, "a"), LeaderElector(there, "b")]
        assert [e.try_acquire() for e in electors] == [True, True]
        for elector in electors:
            elector.release()
    finally:
        here.close()
        there.close()
        with psycopg.connect(postgres_admin, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA "{other_schema}" CASCADE')


def test_sqlite_lease_is_taken_over_once_expired(sqlite_replicas: tuple[Store, Store]) -> None:
    clock = Clock()
    first, second = (
        LeaderElector(store, name, lease_s=3.0, clock=clock)
        for store, name in zip(sqlite_replicas, ("a", "b"), strict=True)
    )
    assert first.renew_interval_s == 1.0
    assert first.try_acquire() and first.is_leader
    assert not second.try_acquire()
    clock.now += 2.0
    assert first.renew(), "renewed at t+2: the lease now runs to t+5"
    clock.now += 2.5
    assert not second.try_acquire(), "t+4.5: still the first's lease"
    clock.now += 0.5
    assert not first.is_leader, "t+5: the first's lease ran out, it knows without asking"
    assert second.try_acquire() and second.is_leader
    assert not first.renew() and not first.try_acquire()
    second.release()
    assert first.try_acquire(), "a released lease is free at once"


def test_sqlite_short_lease_in_real_time(sqlite_replicas: tuple[Store, Store]) -> None:
    first, second = (
        LeaderElector(store, name, lease_s=0.2)
        for store, name in zip(sqlite_replicas, ("a", "b"), strict=True)
    )
    assert first.try_acquire()
    assert not second.try_acquire()
    time.sleep(0.25)
    assert second.try_acquire()
    assert not first.renew()


def test_lease_writes_do_not_bump_the_resource_version(sqlite_replicas: tuple[Store, Store]) -> None:
    store = sqlite_replicas[0]
    elector = LeaderElector(store, "a")
    elector.try_acquire()
    elector.renew()
    elector.release()
    assert store.resource_version() == 0
