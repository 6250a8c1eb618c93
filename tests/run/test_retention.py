"""Retention of finished workloads (``--finished-ttl``): rows, pods, conditions, events, logs, pod dirs.

On both backends: 1,000 workloads finished past the TTL are gone after one run, which is a fixed
number of SQL statements (the same for 10 as for 1,000: one bounded select and two deletes, not a
query per workload); what is not finished, finished recently, not a workload's, or a checkpoint, stays.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
from sqlalchemy import event

from gpuq.run.loop import ControlLoop
from gpuq.run.retention import clean_finished
from gpuq.run.store import ConditionRecord, LeaderElector, LeaseLost, PodRecord, Store
from gpuq.run.store.models import ConditionRow, EventRow, PodRow, WorkloadRow
from gpuq.server.runner import LoopRunner

NOW = 1_000_000.0
TTL = 3600.0


def manifest(name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "ns"}}


def add_workloads(store: Store, names: list[str], state: str, finished_at: float | None) -> None:
    """Workloads with two pods, a condition and an event each, written in one transaction (fast)."""
    with store.transaction(write=True) as session:
        rows = [
            WorkloadRow(
                namespace="ns",
                name=name,
                queue_name="q",
                source_kind="Job",
                manifest=manifest(name),
                priority=0,
                state=state,
                requeue_count=0,
                created_at=1.0,
                finished_at=finished_at,
                message="",
                resource_version=0,
            )
            for name in names
        ]
        session.add_all(rows)
        session.flush()
        for row in rows:
            for index in range(2):
                session.add(
                    PodRow(
                        workload_id=row.id,
                        name=f"main-{index}",
                        pod_set="main",
                        devices=[],
                        state="Succeeded",
                        attempt=0,
                    )
                )
            session.add(
                ConditionRow(
                    workload_id=row.id,
                    type="Finished",
                    status="True",
                    reason="Succeeded",
                    message="",
                    time=2.0,
                )
            )
            session.add(
                EventRow(
                    time=2.0,
                    type="Normal",
                    reason="Completed",
                    kind="Workload",
                    namespace="ns",
                    name=row.name,
                    message="",
                )
            )


def make_files(workdir: Path, name: str) -> list[Path]:
    """The directories a workload's pods leave: logs, two pod directories (a file inside each)."""
    made = [
        workdir / "logs" / "ns" / name,
        workdir / "pods" / "ns" / f"{name}_main-0",
        workdir / "pods" / "ns" / f"{name}_main-1",
    ]
    for directory in made:
        directory.mkdir(parents=True)
        (directory / "f").write_text("x")
    return made


@contextmanager
def counted(store: Store) -> Iterator[list[str]]:
    """The SQL statements the store sends while the block runs."""
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement.split()[0].upper())

    event.listen(store._engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(store._engine, "before_cursor_execute", record)


def counts(store: Store) -> dict[str, int]:
    with store.transaction() as session:
        return {
            table.__tablename__: session.query(table).count()
            for table in (WorkloadRow, PodRow, ConditionRow, EventRow)
        }


def test_a_thousand_finished_workloads_past_the_ttl_go_in_one_bounded_run(
    store: Store, tmp_path: Path
) -> None:
    workdir = tmp_path / "work"
    old = [f"old-{i}" for i in range(1000)]
    add_workloads(store, old[:600], "Succeeded", NOW - TTL - 10)
    add_workloads(store, old[600:], "Failed", NOW - TTL - 1)
    add_workloads(store, ["recent"], "Succeeded", NOW - TTL + 60)
    add_workloads(store, ["running"], "Running", None)
    add_workloads(store, ["inactive"], "Inactive", NOW - 10 * TTL)  # deactivated is not finished
    store.add_event("Normal", "Started", "Node", "", "box", "not a workload's", 1.0)
    files = [path for name in (*old[:3], old[-1]) for path in make_files(workdir, name)]
    kept = make_files(workdir, "recent") + make_files(workdir, "old-10x")  # another name, same prefix
    checkpoint = workdir / "checkpoints" / "ns" / "old-0"
    checkpoint.mkdir(parents=True)
    version = store.resource_version()

    with counted(store) as statements:
        done = clean_finished(store, workdir, TTL, now=NOW)
    assert len(done.workloads) == 1000 and done.full
    assert done.workloads[0] == ("ns", "old-0"), "oldest first"
    assert sorted(name for _, name in store_names(store)) == ["inactive", "recent", "running"]
    assert counts(store) == {"workloads": 3, "pods": 6, "conditions": 3, "events": 4}
    assert [e.kind for e in store.events()].count("Node") == 1
    assert not any(path.exists() for path in files)
    assert all(path.exists() for path in kept) and checkpoint.exists()
    assert store.resource_version() == version + 1, "one transaction"
    writes = [s for s in statements if s in ("SELECT", "DELETE", "UPDATE", "INSERT")]
    assert len(writes) <= 6, statements  # the fence check, the version, one select, two deletes

    add_workloads(store, [f"few-{i}" for i in range(10)], "Succeeded", NOW - TTL - 10)
    with counted(store) as few:
        assert len(clean_finished(store, workdir, TTL, now=NOW).workloads) == 10
    assert few == statements, "the same statements for 10 workloads as for 1,000"

    with counted(store) as nothing:
        assert clean_finished(store, workdir, TTL, now=NOW).workloads == []
    assert store.resource_version() == version + 2, "nothing due: nothing written"
    assert len(nothing) <= len(statements)


def store_names(store: Store) -> list[tuple[str, str]]:
    return [(w.namespace, w.name) for w in store.list_workloads()]


def test_a_batch_is_bounded_and_the_rest_goes_in_the_next_run(store: Store, tmp_path: Path) -> None:
    add_workloads(store, [f"w-{i}" for i in range(25)], "Succeeded", NOW - TTL - 10)
    first = clean_finished(store, tmp_path, TTL, now=NOW, batch=10)
    assert len(first.workloads) == 10 and len(store.list_workloads()) == 15
    assert len(clean_finished(store, tmp_path, TTL, now=NOW, batch=100).workloads) == 15


def test_a_leader_that_lost_its_lease_deletes_nothing(store: Store, tmp_path: Path) -> None:
    add_workloads(store, ["old"], "Succeeded", NOW - TTL - 10)
    files = make_files(tmp_path, "old")
    clock = [NOW]
    elector = LeaderElector(store, "a", lease_s=5.0, clock=lambda: clock[0])
    assert elector.try_acquire()
    store.fence = elector.fence
    clock[0] += 10  # the lease ran out
    with pytest.raises(LeaseLost):
        clean_finished(store, tmp_path, TTL, now=NOW)
    assert store_names(store) == [("ns", "old")] and all(path.exists() for path in files)


class IdleLoop:
    """What the runner needs of a loop for retention: steps that do nothing, and a workdir."""

    def __init__(self, workdir: Path) -> None:
        self.workdir, self.config_problem, self.scheduler, self.services = workdir, "", None, None

    def step(self) -> None:
        pass

    busy = backlog = False  # nothing starting or running, nothing left to read: the runner's interval

    def wake_with(self, callback: object) -> None:
        pass

    def close(self) -> None:
        pass


def test_the_leaders_runner_applies_the_ttl(store: Store, tmp_path: Path) -> None:
    url = store.url.render_as_string(hide_password=False)
    now = time.time()
    add_workloads(store, ["done"], "Succeeded", now - 120)
    add_workloads(store, ["fresh"], "Succeeded", now)
    files = make_files(tmp_path, "done")
    runner = LoopRunner(
        url, "a", lambda _s: cast(ControlLoop, IdleLoop(tmp_path)), interval_s=0.02, finished_ttl_s=60.0
    )
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while store_names(store) != [("ns", "fresh")]:
            assert time.monotonic() < deadline, store_names(store)
            time.sleep(0.05)
    finally:
        runner.stop()
    assert not any(path.exists() for path in files)


def test_conditions_records_are_untouched_by_a_cleanup_with_nothing_due(store: Store, tmp_path: Path) -> None:
    workload = store.add_workload("ns", "live", "q", "Job", manifest("live"), 0, 1.0)
    store.set_workload_state(
        workload, "Running", condition=ConditionRecord("PodsReady", "True", "PodsReady", "", 2.0)
    )
    store.set_pods(workload, [PodRecord("main-0", "main", state="Running")])
    assert clean_finished(store, tmp_path, 0.0).workloads == []
    assert len(store.conditions(workload)) == 1 and len(store.pods_of(workload)) == 1
