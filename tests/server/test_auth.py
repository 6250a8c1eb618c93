"""Access control: 401 without a valid token, 403 outside a member's grants, and no change either way."""

from __future__ import annotations

import pytest

from gpuq.run.store import StoreConflict
from gpuq.server.auth import add_user, allowed, ensure_admin, list_users
from gpuq.server.kinds import SERVING_KINDS
from server.conftest import CONFIG, Plane, dump, job

CLUSTER_QUEUE = CONFIG.split("---")[2]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": "Basic abc"},
        {"Authorization": "Bearer "},
    ],
    ids=["no header", "unknown token", "not a bearer token", "empty token"],
)
def test_requests_without_a_valid_token_are_401_and_change_nothing(
    any_plane: Plane, headers: dict[str, str]
) -> None:
    before = any_plane.snapshot()
    for method, path in (("GET", "/workloads"), ("POST", "/apply"), ("DELETE", "/clusterqueues/shared")):
        response = any_plane.client.request(
            method, f"/apis/gpuq.dev/v1alpha1{path}", headers=headers, content=dump(job("x")).encode()
        )
        assert response.status_code == 401, (method, path, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
    assert any_plane.snapshot() == before


def test_health_and_openapi_need_no_token(any_plane: Plane) -> None:
    assert any_plane.client.get("/healthz").json()["ok"] is True
    paths = any_plane.client.get("/openapi.json").json()["paths"]
    assert "/apis/gpuq.dev/v1alpha1/apply" in paths
    assert "/apis/gpuq.dev/v1alpha1/clusterqueues/{name}/pendingworkloads" in paths


def test_a_member_cannot_touch_another_teams_namespace(any_plane: Plane) -> None:
    assert any_plane.apply(dump(job("theirs", "team-b")), any_plane.team_b).status_code == 200
    before = any_plane.snapshot()
    refused = [
        any_plane.apply(dump(job("mine", "team-b")), any_plane.team_a),
        any_plane.get("/namespaces/team-b/workloads", any_plane.team_a),
        any_plane.get("/namespaces/team-b/workloads/theirs", any_plane.team_a),
        any_plane.get("/namespaces/team-b/workloads/theirs/logs", any_plane.team_a),
        any_plane.call("DELETE", "/namespaces/team-b/workloads/theirs", any_plane.team_a),
        any_plane.get("/namespaces/team-b/localqueues/q/pendingworkloads", any_plane.team_a),
        any_plane.get("/events", any_plane.team_a, namespace="team-b"),
    ]
    for response in refused:
        assert response.status_code == 403, response.request.url
    assert refused[0].json()["message"] == (
        'user "alice" (member of team-a) may not apply Job in namespace "team-b": '
        "the namespace is not granted"
    )
    assert any_plane.snapshot() == before


def test_a_member_reads_but_never_writes_cluster_scoped_objects(any_plane: Plane) -> None:
    before = any_plane.snapshot()
    write = any_plane.apply(CLUSTER_QUEUE.replace("nominalQuota: 4", "nominalQuota: 8"), any_plane.team_a)
    assert write.status_code == 403
    assert 'user "alice"' in write.json()["message"]
    assert "apply ClusterQueue (cluster-scoped)" in write.json()["message"]
    assert any_plane.call("DELETE", "/clusterqueues/shared", any_plane.team_a).status_code == 403
    assert any_plane.call("DELETE", "/namespaces/team-a/localqueues/q", any_plane.team_a).status_code == 403
    assert any_plane.snapshot() == before
    assert any_plane.get("/clusterqueues/shared", any_plane.team_a).status_code == 200
    assert [o["name"] for o in any_plane.get("/resourceflavors", any_plane.team_a).json()["items"]] == ["gpu"]
    assert any_plane.get("/nodes", any_plane.team_a).status_code == 200


def test_a_member_sees_only_its_namespaces_in_lists(any_plane: Plane) -> None:
    for token, namespace in ((any_plane.team_a, "team-a"), (any_plane.team_b, "team-b")):
        assert any_plane.apply(dump(job("j", namespace)), token).status_code == 200
    seen = any_plane.get("/workloads", any_plane.team_a).json()["items"]
    assert [(w["namespace"], w["name"]) for w in seen] == [("team-a", "j")]
    queues = any_plane.get("/localqueues", any_plane.team_a).json()["items"]
    assert [(q["namespace"], q["name"]) for q in queues] == [("team-a", "q")]
    everything = any_plane.get("/objects", any_plane.team_a).json()["items"]
    assert ("LocalQueue", "team-b") not in {(o["kind"], o["namespace"]) for o in everything}
    assert len(any_plane.get("/workloads", any_plane.admin).json()["items"]) == 2


def test_an_admin_may_delete_configuration(any_plane: Plane) -> None:
    assert any_plane.call("DELETE", "/namespaces/team-b/localqueues/q", any_plane.admin).status_code == 200
    assert any_plane.store.get_object("LocalQueue", "q", "team-b") is None
    assert any_plane.call("DELETE", "/namespaces/team-b/localqueues/q", any_plane.admin).status_code == 404


def test_whoami_names_the_user_and_grants(any_plane: Plane) -> None:
    me = any_plane.get("/whoami", any_plane.team_a).json()
    assert me == {"name": "alice", "roles": ["member"], "namespaces": ["team-a"]}


def test_bootstrap_creates_one_admin_and_honours_a_given_token(any_plane: Plane) -> None:
    store = any_plane.store
    assert ensure_admin(store) is None  # an admin exists already
    assert ensure_admin(store, "chosen-token") == "chosen-token"
    user = store.user_for_token("chosen-token")
    assert user is not None and user.name == "admin-2" and user.roles == ("admin",)
    assert ensure_admin(store, "chosen-token") is None  # idempotent
    with pytest.raises(ValueError, match="not an admin"):
        ensure_admin(store, any_plane.team_a)
    assert [u.name for u in list_users(store)] == ["admin", "admin-2", "alice", "bob"]


def test_adding_users_checks_names_and_namespaces(any_plane: Plane) -> None:
    with pytest.raises(ValueError, match="at least one namespace"):
        add_user(any_plane.store, "carol")
    with pytest.raises(StoreConflict):
        add_user(any_plane.store, "alice", namespaces=["x"])
    token = add_user(any_plane.store, "carol", namespaces=["team-c", " team-a "])
    user = any_plane.store.user_for_token(token)
    assert user is not None and user.namespaces == ("team-a", "team-c")


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {{name: embed, namespace: {namespace}}}
spec:
  replicas: 0
  selector: {{matchLabels: {{app: embed}}}}
  template:
    metadata: {{labels: {{app: embed, kueue.x-k8s.io/queue-name: q}}}}
    spec:
      containers:
      - name: server
        image: demo
        command: [python, -m, gpuq.serving_demo]
        resources: {{requests: {{cpu: "1"}}}}
"""


def test_serving_objects_are_an_admins_to_write_and_a_members_to_read(any_plane: Plane) -> None:
    """docs/serve.md, "Live services": applying serving objects is an admin's verb; members read them
    (and call their namespaces' services through the router)."""
    before = any_plane.snapshot()
    for namespace in ("team-a", "team-b"):
        refused = any_plane.apply(DEPLOYMENT.format(namespace=namespace), any_plane.team_a)
        assert refused.status_code == 403, refused.text
    assert refused.json()["message"].endswith('in namespace "team-b": the namespace is not granted')
    own = any_plane.apply(DEPLOYMENT.format(namespace="team-a"), any_plane.team_a).json()["message"]
    assert own == (
        'user "alice" (member of team-a) may not apply Deployment in namespace "team-a": serving objects '
        "are an admin's to apply and delete (members read them and call their services)"
    )
    assert any_plane.snapshot() == before
    assert any_plane.apply(DEPLOYMENT.format(namespace="team-a"), any_plane.admin).status_code == 200
    after = any_plane.snapshot()
    assert (
        any_plane.call("DELETE", "/namespaces/team-a/deployments/embed", any_plane.team_a).status_code == 403
    )
    assert any_plane.snapshot() == after
    assert any_plane.get("/namespaces/team-a/deployments/embed", any_plane.team_a).status_code == 200
    listed = any_plane.get("/namespaces/team-a/deployments", any_plane.team_a).json()["items"]
    assert [o["name"] for o in listed] == ["embed"]
    assert any_plane.get("/namespaces/team-a/deployments", any_plane.team_b).status_code == 403
    alice = any_plane.store.user_for_token(any_plane.team_a)
    assert alice is not None
    for kind in SERVING_KINDS:
        assert not allowed(alice, "apply", kind, "team-a") and not allowed(alice, "delete", kind, "team-a")
        assert allowed(alice, "get", kind, "team-a") and allowed(alice, "list", kind, "team-a")
