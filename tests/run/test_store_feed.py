"""The leader's side of the store: the feed of what changed, one transaction per step, wake-ups.

Every test runs on SQLite and PostgreSQL (``store`` fixture of conftest.py).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from gpuq.run.store import (
    ConditionRecord,
    NewWorkload,
    PodRecord,
    StepWrites,
    Store,
    StoreConflict,
    Wakeup,
    WorkloadChange,
)


def job(name: str, namespace: str = "team-a") -> NewWorkload:
    manifest: dict[str, Any] = {"kind": "Job", "metadata": {"name": name, "namespace": namespace}}
    return NewWorkload(namespace, name, "q", "Job", manifest, 0, 100.0)


def test_the_feed_returns_each_new_workload_once_in_submission_order(store: Store) -> None:
    first = store.read_feed(0)
    assert (first.workloads, first.deleted, first.more) == ((), (), False)
    store.add_workloads([job("a"), job("b")])
    store.add_workloads([job("c")])
    feed = store.read_feed(first.upto)
    assert [w.name for w in feed.workloads] == ["a", "b", "c"]
    again = store.read_feed(feed.upto)
    assert again.workloads == () and again.upto == feed.upto == store.resource_version()


def test_the_feed_pages_without_splitting_a_request(store: Store) -> None:
    store.add_workloads([job(f"a{i}") for i in range(3)])  # one version for three workloads
    store.add_workloads([job("b")])
    page = store.read_feed(0, limit=2)
    assert page.more and [w.name for w in page.workloads] == ["a0", "a1", "a2"]
    rest = store.read_feed(page.upto, limit=2)
    assert not rest.more and [w.name for w in rest.workloads] == ["b"]


def test_a_deleted_workload_leaves_a_tombstone_and_a_reused_id_is_still_new(store: Store) -> None:
    (first,) = store.add_workloads([job("a")])
    seen = store.read_feed(0).upto
    assert store.delete_workload("team-a", "a")
    (second,) = store.add_workloads([job("a")])  # SQLite may give it the same id: the version differs
    feed = store.read_feed(seen)
    assert [(t.workload_id, t.name) for t in feed.deleted] == [(first, "a")]
    assert [(w.id, w.name) for w in feed.workloads] == [(second, "a")]
    writes = StepWrites()
    writes.tombstones_upto = feed.upto
    store.commit(writes)
    assert store.read_feed(seen).deleted == ()


def test_objects_signature_moves_with_every_object_change(store: Store) -> None:
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "f"}}
    empty = store.read_feed(0).objects
    store.apply_object(flavor)
    created = store.read_feed(0).objects
    store.apply_object({**flavor, "spec": {"nodeLabels": {"a": "b"}}})
    changed = store.read_feed(0).objects
    store.delete_object("ResourceFlavor", "f")
    assert len({empty, created, changed}) == 3
    assert store.read_feed(0).objects == store.objects_signature() == (0, 0)


def test_add_workloads_is_all_or_nothing_with_one_version(store: Store) -> None:
    store.add_workloads([job("taken")])
    version = store.resource_version()
    with pytest.raises(StoreConflict, match="workload team-a/taken already exists"):
        store.add_workloads([job("new"), job("taken")])
    assert store.get_workload("team-a", "new") is None and store.resource_version() == version
    ids = store.add_workloads([job("x"), job("y")])
    assert store.resource_version() == version + 1 and len(set(ids)) == 2


def test_one_commit_coalesces_a_steps_writes_per_workload(store: Store) -> None:
    (wid,) = store.add_workloads([job("a")])
    pods = [PodRecord("main-0", "main"), PodRecord("main-1", "main")]
    writes = StepWrites()
    writes.change(
        WorkloadChange(wid, "Admitted", ConditionRecord("Admitted", "True", "Admitted", "", 1.0), pods=pods)
    )
    writes.update_pod(wid, "main-0", state="Running", pid=11, started_at=2.0)  # not stored yet: folded in
    writes.change(
        WorkloadChange(wid, "Running", ConditionRecord("PodsReady", "True", "PodsReady", "", 2.0), fields={})
    )
    writes.event("Normal", "Started", "Workload", "team-a", "a", "started", 2.0)
    version = store.resource_version()
    assert store.commit(writes) == version + 1
    record = store.get_workload("team-a", "a")
    assert record is not None and (record.state, record.resource_version) == ("Running", version + 1)
    assert [c.type for c in store.conditions(wid)] == ["Admitted", "PodsReady"]
    rows = {p.name: p for p in store.pods_of(wid)}
    assert (rows["main-0"].state, rows["main-0"].pid, rows["main-1"].state) == ("Running", 11, "Pending")
    assert [e.reason for e in store.events()] == ["Started"]
    later = StepWrites()
    later.update_pod(wid, "main-1", state="Succeeded", exit_code=0)  # a stored pod: an UPDATE
    store.commit(later)
    assert {p.name: p.state for p in store.pods_of(wid)} == {"main-0": "Running", "main-1": "Succeeded"}


def test_a_replacement_drops_the_pod_updates_before_it(store: Store) -> None:
    (wid,) = store.add_workloads([job("a")])
    store.set_pods(wid, [PodRecord("main-0", "main", state="Running")])
    writes = StepWrites()
    writes.update_pod(wid, "main-0", state="Failed")
    writes.change(WorkloadChange(wid, "Pending", pods=[]))
    store.commit(writes)
    assert store.pods_of(wid) == []


def test_a_commit_skips_workloads_deleted_meanwhile(store: Store) -> None:
    gone, kept = store.add_workloads([job("gone"), job("kept")])
    writes = StepWrites()
    for wid in (gone, kept):
        writes.change(WorkloadChange(wid, "Admitted", pods=[PodRecord("main-0", "main")]))
    store.delete_workload("team-a", "gone")
    store.commit(writes)
    record = store.get_workload("team-a", "kept")
    assert record is not None and record.state == "Admitted" and len(store.pods_of(kept)) == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda w: w.change(WorkloadChange(1, "Sleeping")), "unknown workload state"),
        (lambda w: w.change(WorkloadChange(1, "Pending", fields={"colour": 1})), "cannot set workload"),
        (lambda w: w.update_pod(1, "p", state="Zombie"), "unknown pod state"),
        (lambda w: w.update_pod(1, "p", size=3), "cannot set pod"),
    ],
    ids=["state", "workload field", "pod state", "pod field"],
)
def test_bad_writes_are_refused_when_added(change: Any, message: str) -> None:
    writes = StepWrites()
    with pytest.raises(ValueError, match=message):
        change(writes)
    assert not writes


def test_a_submission_wakes_the_waiting_leader(store: Store) -> None:
    wakeup = Wakeup(store.url)
    try:
        assert not wakeup.wait(0.05)  # nothing written
        other = Store(store.url.render_as_string(hide_password=False))
        try:
            timer = threading.Timer(0.2, lambda: other.add_workloads([job("a")]))
            timer.start()
            started = time.monotonic()
            assert wakeup.wait(10.0)
            assert time.monotonic() - started < 5.0
            timer.join()
        finally:
            other.close()
    finally:
        wakeup.close()


def test_the_leaders_own_commits_do_not_wake_it(store: Store) -> None:
    (wid,) = store.add_workloads([job("a")])
    wakeup = Wakeup(store.url)
    try:
        wakeup.wait(0.0)  # the submission's signal, consumed
        writes = StepWrites()
        writes.change(WorkloadChange(wid, "Admitted"))
        store.commit(writes)
        assert not wakeup.wait(0.1)
    finally:
        wakeup.close()
