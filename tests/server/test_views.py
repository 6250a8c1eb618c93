"""Reading the plane: workload details, pending visibility in queue order, watches, logs, events, nodes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gpuq.run.store import ConditionRecord, PodRecord
from server.conftest import Plane, dump, job


def submit(plane: Plane, name: str, namespace: str, priority: str | None = None) -> None:
    token = plane.team_a if namespace == "team-a" else plane.team_b
    response = plane.apply(dump(job(name, namespace, priority=priority)), token)
    assert response.status_code == 200, response.text


def test_pending_workloads_are_listed_in_queue_order_with_positions_and_reasons(plane: Plane) -> None:
    submit(plane, "a", "team-a")
    submit(plane, "b", "team-b", priority="high")
    submit(plane, "c", "team-b")
    submit(plane, "d", "team-a", priority="high")
    record = plane.store.get_workload("team-b", "c")
    assert record is not None
    plane.store.set_workload_state(record.id, "Pending", message="insufficient quota for nvidia.com/gpu")
    items = plane.get("/clusterqueues/shared/pendingworkloads", plane.admin).json()["items"]
    assert [(i["name"], i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in items] == [
        ("b", 0, 0),
        ("d", 1, 0),
        ("a", 2, 1),
        ("c", 3, 1),
    ]
    assert items[3]["reason"] == "insufficient quota for nvidia.com/gpu"
    mine = plane.get("/clusterqueues/shared/pendingworkloads", plane.team_a).json()["items"]
    assert [(i["name"], i["positionInClusterQueue"]) for i in mine] == [("d", 1), ("a", 2)]
    local = plane.get("/namespaces/team-b/localqueues/q/pendingworkloads", plane.team_b).json()
    assert [(i["name"], i["positionInLocalQueue"]) for i in local["items"]] == [("b", 0), ("c", 1)]
    assert local["clusterQueue"] == "shared"
    assert plane.get("/clusterqueues/nope/pendingworkloads", plane.admin).status_code == 404


def test_queue_views_count_their_workloads(plane: Plane) -> None:
    submit(plane, "a", "team-a")
    submit(plane, "b", "team-b")
    queue = plane.get("/clusterqueues/shared", plane.admin).json()
    assert queue["status"] == {"pendingWorkloads": 2, "admittedWorkloads": 0}
    local = plane.get("/namespaces/team-a/localqueues/q", plane.team_a).json()
    assert local["status"] == {"pendingWorkloads": 1, "admittedWorkloads": 0}


def test_a_workload_shows_pods_conditions_and_why_it_waits(plane: Plane) -> None:
    submit(plane, "a", "team-a")
    record = plane.store.get_workload("team-a", "a")
    assert record is not None
    condition = ConditionRecord("Evicted", "True", "Preempted", "to make room", 5.0)
    plane.store.set_workload_state(record.id, "Pending", condition=condition, message="waiting for quota")
    plane.store.set_pods(record.id, [PodRecord("main-0", "main", "Failed", "box", ("1",), exit_code=3)])
    view = plane.get("/namespaces/team-a/workloads/a", plane.team_a).json()
    assert (view["state"], view["message"], view["queue"], view["kind"]) == (
        "Pending",
        "waiting for quota",
        "q",
        "Job",
    )
    assert [(p["name"], p["node"], p["devices"], p["exitCode"]) for p in view["pods"]] == [
        ("main-0", "box", ["1"], 3)
    ]
    assert [(c["type"], c["reason"]) for c in view["conditions"]] == [("Evicted", "Preempted")]
    assert view["manifest"]["kind"] == "Job"
    assert plane.get("/namespaces/team-a/workloads/zzz", plane.team_a).status_code == 404


def test_deleting_a_workload_removes_it(plane: Plane) -> None:
    submit(plane, "a", "team-a")
    response = plane.call("DELETE", "/namespaces/team-a/workloads/a", plane.team_a)
    assert response.status_code == 200 and response.json()["action"] == "deleted"
    assert plane.store.get_workload("team-a", "a") is None
    assert plane.call("DELETE", "/namespaces/team-a/workloads/a", plane.team_a).status_code == 404


def test_a_watch_returns_when_the_store_changes(plane: Plane) -> None:
    version = plane.get("/workloads", plane.admin).json()["resourceVersion"]
    writer = threading.Timer(
        0.3, lambda: plane.store.add_workload("team-a", "late", "q", "Job", job("late"), 0, time.time())
    )
    writer.start()
    started = time.monotonic()
    answer = plane.get("/workloads", plane.admin, watch="true", resourceVersion=version, timeoutSeconds=20)
    writer.join()
    assert time.monotonic() - started < 10
    assert answer.json()["resourceVersion"] > version
    assert [w["name"] for w in answer.json()["items"]] == ["late"]


def test_a_watch_without_changes_returns_after_its_timeout(plane: Plane) -> None:
    version = plane.get("/workloads", plane.admin).json()["resourceVersion"]
    started = time.monotonic()
    answer = plane.get("/workloads", plane.admin, watch="true", resourceVersion=version, timeoutSeconds=0.3)
    assert 0.3 <= time.monotonic() - started < 5
    assert answer.json()["resourceVersion"] == version
    assert plane.get("/workloads", plane.admin, watch="true").status_code == 400


def test_logs_of_all_pods_one_pod_and_the_tail(plane: Plane, tmp_path: Path) -> None:
    submit(plane, "a", "team-a")
    record = plane.store.get_workload("team-a", "a")
    assert record is not None
    pods = []
    for name in ("main-0", "main-1"):
        path = tmp_path / f"{name}.log"
        path.write_text("".join(f"{name} line {i}\n" for i in range(5)))
        pods.append(PodRecord(name, "main", "Succeeded", "box", log_path=str(path)))
    plane.store.set_pods(record.id, pods)
    both = plane.get("/namespaces/team-a/workloads/a/logs", plane.team_a).text
    assert "==> main-0 <==\nmain-0 line 0" in both and "==> main-1 <==" in both
    one = plane.get("/namespaces/team-a/workloads/a/logs", plane.team_a, pod="main-1", tail=2).text
    assert one == "main-1 line 3\nmain-1 line 4\n"
    missing = plane.get("/namespaces/team-a/workloads/a/logs", plane.team_a, pod="main-7")
    assert missing.status_code == 404 and "main-0, main-1" in missing.json()["message"]


def test_logs_outlive_a_requeue_that_dropped_the_pods(plane: Plane) -> None:
    submit(plane, "a", "team-a")
    directory = plane.workdir / "logs" / "team-a" / "a"
    directory.mkdir(parents=True)
    (directory / "main-0.log").write_text("first attempt\n")
    assert plane.get("/namespaces/team-a/workloads/a/logs", plane.team_a).text == "first attempt\n"


def test_events_are_filtered_to_the_members_namespaces(plane: Plane) -> None:
    plane.store.add_event("Normal", "Started", "Workload", "team-a", "a", "started", 1.0)
    plane.store.add_event("Warning", "BackOff", "Workload", "team-b", "b", "failed", 2.0)
    seen = plane.get("/events", plane.team_a).json()["items"]
    assert [(e["namespace"], e["reason"]) for e in seen] == [("team-a", "Started")]
    assert len(plane.get("/events", plane.admin).json()["items"]) == 2


def test_nodes_show_the_devices_running_pods_hold(plane: Plane) -> None:
    submit(plane, "a", "team-a")
    record = plane.store.get_workload("team-a", "a")
    assert record is not None
    plane.store.set_pods(record.id, [PodRecord("main-0", "main", "Running", "box", ("1",))])
    (node,) = plane.get("/nodes", plane.team_b).json()["items"]
    assert (node["name"], node["gpuModel"], node["gpus"], node["devicesInUse"]) == (
        "box",
        "A100-80GB",
        2,
        ["1"],
    )
    assert plane.get("/nodes/box", plane.team_b).json()["runningPods"] == 1
    assert plane.get("/nodes/other", plane.team_b).status_code == 404


def test_status_reports_the_loop(plane: Plane) -> None:
    assert plane.get("/status", plane.team_a).json() == {"loop": {"identity": "test", "leader": True}}
