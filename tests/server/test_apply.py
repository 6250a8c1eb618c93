"""Apply: validation by the loader before any write, all or nothing, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from server.conftest import CONFIG, Plane, dump, job


def test_configuration_is_created_then_unchanged_then_configured(any_plane: Plane) -> None:
    again = any_plane.apply(CONFIG, any_plane.admin)
    assert again.status_code == 200
    assert {r["action"] for r in again.json()["results"]} == {"unchanged"}
    changed = CONFIG.replace("value: 1000", "value: 2000")
    results = any_plane.apply(changed, any_plane.admin).json()["results"]
    assert [(r["kind"], r["action"]) for r in results if r["action"] != "unchanged"] == [
        ("WorkloadPriorityClass", "configured")
    ]


def test_a_job_becomes_a_pending_workload_with_its_queue_and_priority(any_plane: Plane) -> None:
    response = any_plane.apply(dump(job("train", priority="high")), any_plane.team_a)
    assert response.status_code == 200, response.text
    assert response.json()["results"] == [
        {"kind": "Job", "namespace": "team-a", "name": "train", "action": "created"}
    ]
    record = any_plane.store.get_workload("team-a", "train")
    assert record is not None
    assert (record.state, record.queue_name, record.source_kind, record.priority) == (
        "Pending",
        "q",
        "Job",
        1000,
    )


def test_reapplying_an_identical_workload_is_unchanged_and_a_different_one_conflicts(
    any_plane: Plane,
) -> None:
    text = dump(job("train"))
    assert any_plane.apply(text, any_plane.team_a).status_code == 200
    before = any_plane.snapshot()
    same = any_plane.apply(text, any_plane.team_a)
    assert same.status_code == 200 and same.json()["results"][0]["action"] == "unchanged"
    other = any_plane.apply(dump(job("train", script="print('other')")), any_plane.team_a)
    assert other.status_code == 409
    assert "team-a/train already exists" in other.json()["message"]
    assert any_plane.snapshot() == before


BAD_REQUESTS = [
    pytest.param("kind: [unclosed\n", 422, "malformed YAML", id="malformed YAML"),
    pytest.param(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQuota\nmetadata: {name: x}\n",
        422,
        "unknown kind 'ClusterQuota'",
        id="unknown kind",
    ),
    pytest.param(dump(job("neg", gpus=-1)), 422, "greater than or equal to 0", id="negative quantity"),
    pytest.param(
        dump(job("lost", queue="nope")),
        422,
        "LocalQueue 'nope' not found in namespace 'team-a'",
        id="missing queue",
    ),
    pytest.param(dump(job("huge", gpus=5)), 422, "can never hold more than 4", id="larger than the quota"),
    pytest.param(dump(job("wide", gpus=3)), 422, "no node can hold one pod", id="larger than any node"),
    pytest.param(dump(job("twin"), job("twin")), 422, "duplicate", id="duplicate in one request"),
    pytest.param(
        dump(job("twin"), {**job("twin"), "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}),
        422,
        "duplicate workload",
        id="two sources of one name",
    ),
    pytest.param(
        dump(job("fine"), job("broken", gpus="lots")),
        422,
        "Job/broken",
        id="one bad document spoils the request",
    ),
    pytest.param(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: w, namespace: team-a}\n",
        422,
        "Workload objects are made by gpuq",
        id="a Workload object",
    ),
    pytest.param("", 422, "no document", id="empty body"),
    pytest.param(
        "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c, namespace: team-a}\n",
        422,
        "gpuq serve does not run a CronJob live",
        id="a kind read by admit and simulate only",
    ),
    pytest.param(
        "apiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\n"
        "metadata: {name: l, namespace: team-a}\nspec: {replicas: 2}\n",
        422,
        "gpuq serve runs a LeaderWorkerSet of one group",
        id="a LeaderWorkerSet of two groups",
    ),
    pytest.param(
        dump(
            {
                **job("g"),
                "apiVersion": "v1",
                "kind": "Pod",
                "spec": job("g")["spec"]["template"]["spec"],
                "metadata": {
                    "name": "g",
                    "namespace": "team-a",
                    "labels": {"kueue.x-k8s.io/pod-group-name": "grp"},
                },
            }
        ),
        422,
        "gpuq serve does not run a pod group's pods ('grp') live",
        id="a pod group's pod",
    ),
]


@pytest.mark.parametrize(("text", "status", "message"), BAD_REQUESTS)
def test_bad_input_is_refused_with_diagnostics_and_nothing_written(
    plane: Plane, text: str, status: int, message: str
) -> None:
    before = plane.snapshot()
    response = plane.apply(text, plane.team_a)
    assert response.status_code == status, response.text
    body = response.json()
    found = [body["message"], *(d["text"] for d in body.get("diagnostics", []))]
    assert any(message in line for line in found), found
    assert all(d["path"] == "<request>" for d in body.get("diagnostics", []) if d["severity"] == "error")
    assert plane.snapshot() == before


def test_diagnostics_name_the_line_object_and_field(plane: Plane) -> None:
    text = "# leading comment\n" + dump(job("neg", gpus=-1))
    diagnostic = plane.apply(text, plane.team_a).json()["diagnostics"][0]
    assert diagnostic["path"] == "<request>"
    assert (diagnostic["kind"], diagnostic["name"]) == ("Job", "neg")
    assert diagnostic["field"] == "spec.template.spec.containers[0].resources.requests[nvidia.com/gpu]"
    assert text.splitlines()[diagnostic["line"] - 1].strip().startswith("nvidia.com/gpu")


def test_a_queue_and_a_job_using_it_apply_together(plane: Plane) -> None:
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "fresh", "namespace": "team-b"},
        "spec": {"clusterQueue": "shared"},
    }
    response = plane.apply(dump(job("j", "team-b", queue="fresh"), queue), plane.admin)
    assert response.status_code == 200, response.text
    assert [r["action"] for r in response.json()["results"]] == ["created", "created"]
    assert plane.store.get_object("LocalQueue", "fresh", "team-b") is not None


def test_dry_run_validates_and_writes_nothing(plane: Plane) -> None:
    before = plane.snapshot()
    response = plane.apply(dump(job("j")), plane.team_a, dryRun="true")
    assert response.status_code == 200
    assert response.json()["results"][0]["action"] == "created"
    assert plane.snapshot() == before


def test_a_cluster_queue_with_a_missing_flavor_is_refused(plane: Plane) -> None:
    queue = CONFIG.split("---")[2].replace("name: gpu", "name: ghost").replace("shared", "other")
    response = plane.apply(queue, plane.admin)
    assert response.status_code == 422
    assert any("ghost" in d["text"] for d in response.json()["diagnostics"])
    assert plane.store.get_object("ClusterQueue", "other") is None


def test_a_busy_store_is_a_503_in_the_error_shape() -> None:
    """SQLite's lock timeout under many writers: the client gets a JSON 503 with Retry-After."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from sqlalchemy.exc import OperationalError

    from gpuq.server.errors import install_handlers

    app = FastAPI()
    install_handlers(app)

    @app.get("/write")
    def write() -> None:
        raise OperationalError("INSERT ...", {}, Exception("database is locked"))

    response = TestClient(app).get("/write")
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    body = response.json()
    assert body["reason"] == "Service Unavailable" and "database is locked" in body["message"]


CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: team-a}\ndata: {a: b}\n"


def test_a_config_map_is_answered_ignored_and_never_stored(plane: Plane) -> None:
    before = plane.snapshot()
    alone = plane.apply(CONFIG_MAP, plane.team_a)
    assert alone.status_code == 422, alone.text
    assert alone.json()["message"] == (
        "nothing to apply: not scheduled by gpuq, ignored: 1 ConfigMap; "
        "a control plane stores only what gpuq schedules"
    )
    assert plane.snapshot() == before
    both = plane.apply(CONFIG_MAP + "---\n" + dump(job("with-config")), plane.team_a)
    assert both.status_code == 200, both.text
    assert [(r["kind"], r["name"], r["action"]) for r in both.json()["results"]] == [
        ("Job", "with-config", "created"),
        ("ConfigMap", "settings", "ignored"),
    ]
    assert [o for o in plane.store.list_objects() if o.kind == "ConfigMap"] == []


def test_a_kind_of_another_project_is_refused_by_a_live_apply(plane: Plane) -> None:
    response = plane.apply("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n", plane.admin)
    assert response.status_code == 422, response.text
    (diagnostic,) = response.json()["diagnostics"]
    assert "unknown kind 'Widget' in apiVersion 'example.com/v1'" in diagnostic["message"]


def test_an_appwrapper_becomes_one_pending_workload_of_its_wrapped_pods(any_plane: Plane) -> None:
    wrapped = job("inner")
    wrapped["spec"]["parallelism"] = 2
    appwrapper = {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "aw", "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"components": [{"template": wrapped}]},
    }
    response = any_plane.apply(dump(appwrapper), any_plane.team_a)
    assert response.status_code == 200, response.text
    assert response.json()["results"] == [
        {"kind": "AppWrapper", "namespace": "team-a", "name": "aw", "action": "created"}
    ]
    record = any_plane.store.get_workload("team-a", "aw")
    assert record is not None
    assert (record.state, record.queue_name, record.source_kind) == ("Pending", "q", "AppWrapper")
