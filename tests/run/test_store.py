"""The store's contract on SQLite and PostgreSQL (design note 0003, "Store")."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import func, select, text

from gpuq.run.store import (
    ConditionRecord,
    EventRecord,
    PodRecord,
    Store,
    StoreConflict,
    StoreNotFound,
    UserRecord,
    WorkloadChange,
    default_url,
)
from gpuq.run.store.base import MIGRATIONS
from gpuq.run.store.engine import normalize_url
from gpuq.run.store.models import Base, ConditionRow, PodRow, WorkloadRow


def queue(name: str, cpu: str = "8", namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue" if namespace is None else "LocalQueue",
        "metadata": metadata,
        "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "quota": cpu}]},
    }


def add_job(store: Store, name: str, namespace: str = "team-a", priority: int = 0) -> int:
    manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace}}
    return store.add_workload(namespace, name, "lq", "Job", manifest, priority, created_at=100.0)


def count(store: Store, model: type[Base]) -> int:
    with store.transaction() as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


def pods(*names: str, state: str = "Pending") -> list[PodRecord]:
    return [
        PodRecord(name=name, pod_set=name.rsplit("-", 1)[0], state=state, devices=["0"]) for name in names
    ]


# -- schema ------------------------------------------------------------------------------------------------

HEAD = "0003"


def test_the_shipped_migrations_have_one_head() -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(config).get_heads() == [HEAD]


def test_migrate_is_idempotent(store: Store) -> None:
    store.apply_object(queue("a"))
    store.migrate()
    store.migrate()
    with store.transaction() as session:
        assert session.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [HEAD]
    assert store.resource_version() == 1
    assert [o.name for o in store.list_objects()] == ["a"]


def test_a_store_of_the_first_schema_is_upgraded_with_its_lease(store_url: str) -> None:
    """0002 adds the lease's fencing token (0 for a row an older server wrote) and the retention index."""
    from alembic import command

    old = Store(store_url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with old._engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")
        connection.execute(
            text(
                "INSERT INTO leases (name, holder, renewed_at, expires_at) VALUES ('gpuq-leader', 'x', 1, 2)"
            )
        )
    old.migrate()
    with old.transaction() as session:
        assert session.execute(text("SELECT holder, token FROM leases")).all() == [("x", 0)]
    old.close()


def test_migrated_schema_matches_models(store: Store) -> None:
    with store.transaction() as session:
        diff = compare_metadata(MigrationContext.configure(session.connection()), Base.metadata)
    assert diff == []


def test_urls() -> None:
    assert normalize_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("sqlite:///x.db").drivername == "sqlite"
    with pytest.raises(ValueError, match="unsupported store URL"):
        normalize_url("mysql://u@h/db")
    with pytest.raises(ValueError, match="driver"):
        normalize_url("postgresql+psycopg2://u@h/db")


def test_default_url_creates_the_directory(tmp_path: Path) -> None:
    assert default_url(tmp_path) == f"sqlite:///{tmp_path / '.gpuq' / 'gpuq.db'}"
    assert (tmp_path / ".gpuq").is_dir()


# -- objects -----------------------------------------------------------------------------------------------


def test_apply_creates_configures_and_leaves_unchanged(store: Store) -> None:
    steps = [
        ("first apply creates", queue("a"), ("created", 1)),
        ("same document again is unchanged and keeps its version", queue("a"), ("unchanged", 1)),
        ("another object gets the next version", queue("b"), ("created", 2)),
        ("a changed spec is configured", queue("a", cpu="16"), ("configured", 3)),
        ("namespaced object with the same name is distinct", queue("a", namespace="ns"), ("created", 4)),
        ("back to the old spec is configured again", queue("a"), ("configured", 5)),
        ("b untouched", queue("b"), ("unchanged", 2)),
    ]
    for sentence, manifest, expected in steps:
        assert store.apply_object(manifest, now=10.0) == expected, sentence
    assert store.resource_version() == 5
    a = store.get_object("ClusterQueue", "a")
    assert a is not None
    assert (a.manifest, a.resource_version, a.namespace) == (queue("a"), 5, "")
    assert store.get_object("LocalQueue", "a", namespace="ns") is not None
    assert [(o.kind, o.name) for o in store.list_objects(kind="ClusterQueue")] == [
        ("ClusterQueue", "a"),
        ("ClusterQueue", "b"),
    ]
    assert [o.name for o in store.list_objects(namespace="ns")] == ["a"]


def test_apply_refuses_manifests_without_kind_or_name(store: Store) -> None:
    for manifest in ({"metadata": {"name": "x"}}, {"kind": "ClusterQueue", "metadata": {}}):
        with pytest.raises(ValueError, match=r"kind and metadata\.name"):
            store.apply_object(manifest)
    assert store.resource_version() == 0


def test_delete_object(store: Store) -> None:
    store.apply_object(queue("a"))
    assert store.delete_object("ClusterQueue", "missing") is False
    assert store.resource_version() == 1, "a delete of nothing bumps nothing"
    assert store.delete_object("ClusterQueue", "a") is True
    assert store.get_object("ClusterQueue", "a") is None
    assert store.resource_version() == 2
    assert store.changes_since(1) and not store.changes_since(2)


def test_concurrent_writers_never_share_a_version(store: Store) -> None:
    start = store.resource_version()
    versions: list[list[int]] = [[], []]

    def writer(index: int) -> None:
        for n in range(200):
            versions[index].append(store.apply_object(queue(f"w{index}-{n}"))[1])

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = versions[0] + versions[1]
    assert sorted(every) == list(range(start + 1, start + 401))
    assert versions[0] == sorted(versions[0]) and versions[1] == sorted(versions[1])
    assert store.resource_version() == start + 400


# -- workloads ---------------------------------------------------------------------------------------------


def test_add_and_read_a_workload(store: Store) -> None:
    workload_id = add_job(store, "train", priority=5)
    record = store.get_workload("team-a", "train")
    assert record is not None
    assert (record.id, record.key, record.state, record.priority) == (
        workload_id,
        "team-a/train",
        "Pending",
        5,
    )
    assert (record.admission, record.cluster_queue, record.requeue_count, record.message) == (
        None,
        None,
        0,
        "",
    )
    assert record.resource_version == store.resource_version() == 1
    assert store.get_workload("team-a", "other") is None


def test_duplicate_workload_conflicts_and_writes_nothing(store: Store) -> None:
    add_job(store, "train")
    with pytest.raises(StoreConflict, match="workload team-a/train already exists"):
        add_job(store, "train", priority=9)
    assert count(store, WorkloadRow) == 1
    assert store.resource_version() == 1
    record = store.get_workload("team-a", "train")
    assert record is not None and record.priority == 0


def test_state_change_sets_fields_and_appends_the_condition(store: Store) -> None:
    workload_id = add_job(store, "train")
    admission = {"podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "h100"}, "count": 2}]}
    condition = ConditionRecord("Admitted", "True", "Admitted", "admitted by cq", 110.0)
    version = store.set_workload_state(
        workload_id,
        "Admitted",
        condition=condition,
        cluster_queue="cq",
        admission=admission,
        admitted_at=110.0,
    )
    record = store.get_workload("team-a", "train")
    assert record is not None
    assert (record.state, record.cluster_queue, record.admission, record.admitted_at) == (
        "Admitted",
        "cq",
        admission,
        110.0,
    )
    assert record.resource_version == version == 2
    assert store.conditions(workload_id) == [
        ConditionRecord(
            "Admitted", "True", "Admitted", "admitted by cq", 110.0, id=1, workload_id=workload_id
        )
    ]


@pytest.mark.parametrize(
    ("sentence", "state", "fields", "error"),
    [
        ("unknown state", "Admited", {}, ValueError),
        ("field that is not settable", "Admitted", {"name": "renamed"}, ValueError),
    ],
)
def test_invalid_state_change_writes_nothing(
    store: Store, sentence: str, state: str, fields: dict[str, object], error: type[Exception]
) -> None:
    workload_id = add_job(store, "train")
    with pytest.raises(error):
        store.set_workload_state(workload_id, state, **fields)
    record = store.get_workload("team-a", "train")
    assert record is not None and (record.state, record.name) == ("Pending", "train"), sentence
    with pytest.raises(StoreNotFound, match="no workload with id 999"):
        store.set_workload_state(999, "Admitted")
    assert store.resource_version() == 1


def test_a_batch_bumps_the_version_once(store: Store) -> None:
    ids = [add_job(store, f"job{i}") for i in range(3)]
    version = store.apply_decisions(
        [WorkloadChange(i, "QuotaReserved", fields={"cluster_queue": "cq"}, pods=pods("main-0")) for i in ids]
    )
    assert version == 4 == store.resource_version()
    for record in store.list_workloads():
        assert (record.state, record.cluster_queue, record.resource_version) == ("QuotaReserved", "cq", 4)
    assert store.apply_decisions([]) == 4


@pytest.mark.parametrize(
    ("sentence", "third", "error"),
    [
        ("third change names a workload that does not exist", WorkloadChange(999, "Admitted"), StoreNotFound),
        ("third change has an unknown state", WorkloadChange(0, "Bogus"), ValueError),
        (
            "third change has duplicate pod names",
            WorkloadChange(0, "Admitted", pods=pods("a-0", "a-0")),
            StoreConflict,
        ),
    ],
)
def test_an_error_in_a_batch_rolls_back_the_earlier_changes(
    store: Store, sentence: str, third: WorkloadChange, error: type[Exception]
) -> None:
    ids = [add_job(store, f"job{i}") for i in range(3)]
    third = WorkloadChange(third.workload_id or ids[2], third.state, pods=third.pods)
    condition = ConditionRecord("QuotaReserved", "True", "QuotaReserved", "", 120.0)
    changes = [WorkloadChange(i, "Admitted", condition=condition, pods=pods("main-0")) for i in ids[:2]]
    with pytest.raises(error):
        store.apply_decisions([*changes, third])
    assert [r.state for r in store.list_workloads()] == ["Pending"] * 3, sentence
    assert (count(store, ConditionRow), count(store, PodRow)) == (0, 0), sentence
    assert store.resource_version() == 3, sentence


def test_conditions_read_in_time_order_then_insertion_order(store: Store) -> None:
    workload_id = add_job(store, "train")
    for kind, at in (("QuotaReserved", 10.0), ("Evicted", 30.0), ("Admitted", 20.0), ("Requeued", 30.0)):
        store.set_workload_state(
            workload_id, "Pending", condition=ConditionRecord(kind, "True", kind, "", at)
        )
    assert [(c.type, c.time) for c in store.conditions(workload_id)] == [
        ("QuotaReserved", 10.0),
        ("Admitted", 20.0),
        ("Evicted", 30.0),
        ("Requeued", 30.0),
    ]


def test_list_workloads_by_state_and_namespace(store: Store) -> None:
    a, b, c = add_job(store, "a"), add_job(store, "b", namespace="team-b"), add_job(store, "c")
    store.set_workload_state(b, "Running")
    store.set_workload_state(c, "Succeeded")
    assert [r.name for r in store.list_workloads()] == ["a", "b", "c"]
    assert [r.name for r in store.list_workloads(states=("Pending", "Running"))] == ["a", "b"]
    assert [r.name for r in store.list_workloads(namespace="team-a")] == ["a", "c"]
    assert [r.id for r in store.list_workloads(states=["Running"], namespace="team-a")] == []
    assert a < b < c


# -- pods --------------------------------------------------------------------------------------------------


def test_pods_are_replaced_atomically(store: Store) -> None:
    workload_id = add_job(store, "train")
    store.set_pods(workload_id, pods("main-0", "main-1"))
    assert [(p.name, p.devices, p.workload_id) for p in store.pods_of(workload_id)] == [
        ("main-0", ("0",), workload_id),
        ("main-1", ("0",), workload_id),
    ]
    with pytest.raises(StoreConflict):
        store.set_pods(workload_id, pods("main-0", "main-0"))
    assert [p.name for p in store.pods_of(workload_id)] == ["main-0", "main-1"], (
        "a failed replace keeps the old"
    )
    store.set_pods(workload_id, pods("worker-0"))
    assert [p.name for p in store.pods_of(workload_id)] == ["worker-0"]
    with pytest.raises(StoreNotFound):
        store.set_pods(999, pods("x-0"))


def test_update_pod_and_running_pods(store: Store) -> None:
    first, second = add_job(store, "a"), add_job(store, "b")
    store.set_pods(first, pods("main-0", "main-1"))
    store.set_pods(second, pods("main-0"))
    a0, a1 = store.pods_of(first)
    (b0,) = store.pods_of(second)
    store.update_pod(a0.id, state="Running", pid=4242, started_at=5.0, devices=("1", "2"))
    store.update_pod(b0.id, state="Terminating")
    store.update_pod(a1.id, state="Failed", exit_code=-9, finished_at=6.0)
    assert [(p.workload_id, p.name, p.state) for p in store.running_pods()] == [
        (first, "main-0", "Running"),
        (second, "main-0", "Terminating"),
    ]
    updated = store.pods_of(first)[0]
    assert (updated.pid, updated.started_at, updated.devices) == (4242, 5.0, ("1", "2"))
    for bad, error in (({"state": "Lost"}, ValueError), ({"workload_id": 9}, ValueError)):
        with pytest.raises(error):
            store.update_pod(a0.id, **bad)
    with pytest.raises(StoreNotFound):
        store.update_pod(999, state="Running")


def test_deleting_a_workload_deletes_its_pods_and_conditions(store: Store) -> None:
    keep, gone = add_job(store, "keep"), add_job(store, "gone")
    for workload_id in (keep, gone):
        store.set_pods(workload_id, pods("main-0"))
        store.set_workload_state(
            workload_id, "Admitted", condition=ConditionRecord("Admitted", "True", "", "", 1.0)
        )
    version = store.resource_version()
    assert store.delete_workload("team-a", "missing") is False
    assert store.resource_version() == version
    assert store.delete_workload("team-a", "gone") is True
    assert store.resource_version() == version + 1
    assert store.get_workload("team-a", "gone") is None
    assert (count(store, PodRow), count(store, ConditionRow)) == (1, 1)
    assert store.pods_of(gone) == [] and store.conditions(gone) == []
    assert len(store.pods_of(keep)) == 1


# -- events and users --------------------------------------------------------------------------------------


def test_events_filter_and_page(store: Store) -> None:
    rows = [
        ("Normal", "Admitted", "Workload", "team-a", "a"),
        ("Warning", "BackOff", "Workload", "team-a", "b"),
        ("Normal", "Created", "ClusterQueue", "", "cq"),
        ("Normal", "Started", "Workload", "team-b", "a"),
        ("Normal", "Finished", "Workload", "team-a", "a"),
    ]
    ids = [store.add_event(*row, message=f"m{i}", time=float(i)) for i, row in enumerate(rows)]
    assert ids == sorted(ids)
    assert store.events()[0] == EventRecord(
        ids[0], 0.0, "Normal", "Admitted", "Workload", "team-a", "a", "m0"
    )
    cases = [
        ("everything, oldest first", {}, [0, 1, 2, 3, 4]),
        ("by kind", {"kind": "ClusterQueue"}, [2]),
        ("by namespace", {"namespace": "team-a"}, [0, 1, 4]),
        ("one object", {"kind": "Workload", "namespace": "team-a", "name": "a"}, [0, 4]),
        ("since an id", {"since_id": ids[1]}, [2, 3, 4]),
        ("limited", {"name": "a", "limit": 2}, [0, 3]),
    ]
    for sentence, query, expected in cases:
        assert [e.message for e in store.events(**query)] == [f"m{i}" for i in expected], sentence


def test_tokens_are_stored_hashed(store: Store, store_url: str) -> None:
    token = "gpuq-secret-token-0123456789"
    store.add_user("alice", token, roles=["member"], namespaces=["team-a"])
    assert store.user_for_token(token) == UserRecord("alice", ("member",), ("team-a",))
    assert store.user_for_token("wrong") is None
    with pytest.raises(StoreConflict, match="user 'alice' already exists"):
        store.add_user("alice", "other", roles=["admin"], namespaces=[])
    with pytest.raises(StoreConflict):
        store.add_user("bob", token, roles=["admin"], namespaces=[])
    with store.transaction() as session:
        dumped = repr(session.execute(text("SELECT * FROM users")).all())
    assert "alice" in dumped and token not in dumped
    if store_url.startswith("sqlite"):
        path = Path(store_url.removeprefix("sqlite:///"))
        raw = b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
        assert b"alice" in raw and token.encode() not in raw
