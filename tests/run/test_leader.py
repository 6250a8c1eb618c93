"""Leader election (design note 0003): an expiring lease row with a fencing token, on both backends.

A leader that stops renewing (dead, or frozen: SIGSTOP, a paused VM) is replaced once its
lease expires; every write of the leader's store checks the lease's token in its own
transaction, so a leader that lost the lease writes nothing (``LeaseLost``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from gpuq.run.store import ConditionRecord, LeaderElector, LeaseLost, PodRecord, Store, WorkloadChange
from gpuq.run.store.models import EventRow


class Clock:
    """A settable clock for lease expiry."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def replicas(store_url: str) -> Iterator[tuple[Store, Store]]:
    """Two stores on one database (each backend), as two replicas would open it."""
    first, second = Store(store_url), Store(store_url)
    first.migrate()
    yield first, second
    first.close()
    second.close()


def electors(replicas: tuple[Store, Store], clock: Clock, lease_s: float = 3.0) -> list[LeaderElector]:
    return [
        LeaderElector(store, name, lease_s=lease_s, clock=clock)
        for store, name in zip(replicas, ("a", "b"), strict=True)
    ]


def add_job(store: Store, name: str = "w") -> int:
    manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "ns"}}
    return store.add_workload("ns", name, "q", "Job", manifest, 0, 1.0)


def everything(store: Store) -> tuple[object, ...]:
    """What a refused write must leave as it was: the version and every row the loop writes."""
    workloads = store.list_workloads()
    return (
        store.resource_version(),
        workloads,
        [store.pods_of(w.id) for w in workloads],
        [store.conditions(w.id) for w in workloads],
        store.events(),
        store.list_objects(),
    )


def test_first_wins_and_an_expired_lease_is_taken_over_with_a_new_token(
    replicas: tuple[Store, Store],
) -> None:
    clock = Clock()
    first, second = electors(replicas, clock)
    assert first.renew_interval_s == 1.0
    assert first.fence is None, "no tenure, no fence"
    assert first.try_acquire() and first.is_leader
    assert first.token == 1 and first.holder() == ("a", 1, 1003.0)
    assert first.try_acquire() and first.token == 1, "a leader trying again renews: same tenure"
    assert not second.try_acquire() and not second.is_leader
    assert not second.renew(), "a follower has nothing to renew"
    clock.now += 2.0
    assert first.renew(), "renewed at t+2: the lease now runs to t+5"
    clock.now += 2.5
    assert not second.try_acquire(), "t+4.5: still the first's lease"
    clock.now += 0.5
    assert not first.is_leader, "t+5: the first's lease ran out, it knows without asking"
    assert second.try_acquire() and second.is_leader and second.token == 2
    assert not first.renew() and not first.try_acquire()
    second.release()
    assert not second.is_leader
    assert first.try_acquire() and first.token == 3, "a released lease is free at once, a new tenure"
    first.release()


def test_a_lapsed_lease_nobody_took_is_renewed_in_the_same_tenure(replicas: tuple[Store, Store]) -> None:
    """Too busy (or frozen) to renew in time, and nobody campaigned: no other replica can have led
    meanwhile (an acquisition changes the token), so the tenure goes on; its writes fail only while the
    lease is lapsed."""
    clock = Clock()
    first, second = electors(replicas, clock)
    ours = replicas[0]
    assert first.try_acquire()
    ours.fence = first.fence
    clock.now += 4.0
    assert not first.is_leader
    with pytest.raises(LeaseLost, match="it expired"):
        add_job(ours)
    assert first.renew() and first.token == 1 and first.is_leader
    add_job(ours)  # renewed: the fence passes again
    clock.now += 4.0
    assert second.try_acquire() and second.token == 2
    assert not first.renew(), "taken over: the tenure is over"
    assert not first.try_acquire()


@pytest.mark.parametrize("write", ["apply_decisions", "update_pod", "set_pods", "add_event", "add_workload"])
def test_a_leader_whose_lease_expired_cannot_write_and_the_next_one_can(
    replicas: tuple[Store, Store], write: str
) -> None:
    clock = Clock()
    first, second = electors(replicas, clock)
    ours, theirs = replicas
    workload = add_job(ours)
    ours.set_pods(workload, [PodRecord("main-0", "main")])
    (pod,) = ours.pods_of(workload)
    assert first.try_acquire()
    ours.fence = first.fence
    condition = ConditionRecord("QuotaReserved", "True", "QuotaReserved", "", 1.0)
    writes = {
        "apply_decisions": lambda s: s.apply_decisions([WorkloadChange(workload, "Admitted", condition)]),
        "update_pod": lambda s: s.update_pod(pod.id, state="Running", pid=4242),
        "set_pods": lambda s: s.set_pods(workload, [PodRecord("main-0", "main", state="Running")]),
        "add_event": lambda s: s.add_event("Normal", "Started", "Workload", "ns", "w", "started", 1.0),
        "add_workload": lambda s: add_job(s, "another"),
    }
    writes[write](ours)  # while the lease holds, the fenced store writes
    clock.now += 3.0  # the leader is frozen: no renewal; its lease runs out
    before = everything(theirs)
    with pytest.raises(LeaseLost, match="fencing token 1: it expired"):
        writes[write](ours)
    assert everything(theirs) == before, "nothing was written"
    assert second.try_acquire() and second.token == 2, "a second store object takes over"
    theirs.fence = second.fence
    with pytest.raises(LeaseLost, match="held by 'b' with token 2"):
        writes[write](ours)
    assert everything(theirs) == before
    theirs.delete_workload("ns", "another")  # the new leader's own writes pass its fence
    writes[write](theirs)
    assert theirs.resource_version() > before[0]


def test_the_api_store_writes_without_a_fence(replicas: tuple[Store, Store]) -> None:
    clock = Clock()
    first, second = electors(replicas, clock)
    ours, api = replicas
    assert first.try_acquire()
    ours.fence = first.fence
    clock.now += 10.0
    assert second.try_acquire()
    add_job(api)  # no fence: callers that are not the loop are unchanged
    with pytest.raises(LeaseLost):
        add_job(ours, "late")
    assert [w.name for w in api.list_workloads()] == ["w"]


def test_a_takeover_waits_for_a_fenced_write_in_flight_and_fences_the_next(
    replicas: tuple[Store, Store],
) -> None:
    """The check and the write are one transaction: a takeover cannot slip between them."""
    clock = Clock()
    first, second = electors(replicas, clock)
    ours, theirs = replicas
    assert first.try_acquire()
    ours.fence = first.fence
    in_write, finish = threading.Event(), threading.Event()

    def slow_write() -> None:
        with ours._write() as write:  # what every public write does, held open half way
            in_write.set()
            finish.wait(10)
            write.session.add(
                EventRow(
                    time=1.0,
                    type="Normal",
                    reason="InFlight",
                    kind="Workload",
                    namespace="ns",
                    name="w",
                    message="",
                )
            )

    writer = threading.Thread(target=slow_write)
    writer.start()
    assert in_write.wait(10)
    clock.now += 3.0  # expired while the write is in flight
    taken: list[bool] = []
    taker = threading.Thread(target=lambda: taken.append(second.try_acquire()))
    taker.start()
    taker.join(0.5)
    assert taker.is_alive(), "the takeover waits for the write that checked the lease"
    finish.set()
    writer.join(10)
    taker.join(10)
    assert taken == [True] and second.token == 2
    assert [e.reason for e in theirs.events()] == ["InFlight"], "the write committed before the takeover"
    with pytest.raises(LeaseLost):
        ours.add_event("Normal", "Late", "Workload", "ns", "w", "", 1.0)
    assert [e.reason for e in theirs.events()] == ["InFlight"]


def test_a_frozen_leader_is_replaced_in_real_time(replicas: tuple[Store, Store]) -> None:
    """No renewal for longer than the lease (SIGSTOP, a paused VM): the follower leads, on PostgreSQL too
    (an advisory lock held by a frozen process's open connection would never be freed)."""
    first, second = (LeaderElector(s, n, lease_s=1.0) for s, n in zip(replicas, ("a", "b"), strict=True))
    before = time.monotonic()
    assert first.try_acquire()
    replicas[0].fence = first.fence
    assert not second.try_acquire()
    while not second.try_acquire():
        assert time.monotonic() - before < 10, "the follower never took over"
        time.sleep(0.05)
    assert time.monotonic() - before >= 0.99, "not before the lease ran out"
    assert not first.renew()
    with pytest.raises(LeaseLost):
        add_job(replicas[0])


def test_lease_writes_do_not_bump_the_resource_version(replicas: tuple[Store, Store]) -> None:
    store = replicas[0]
    elector = LeaderElector(store, "a")
    elector.try_acquire()
    elector.renew()
    elector.release()
    assert store.resource_version() == 0
