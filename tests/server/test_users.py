"""Deleting users and rotating tokens, through the API (admins only) and ``gpuq users``: the old token
is refused (401) from the next request on."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import Result
from typer.testing import CliRunner

from gpuq.cli import app
from gpuq.server.auth import add_user, list_users
from server.conftest import Plane

runner = CliRunner()


def names(plane: Plane) -> list[str]:
    return [u.name for u in list_users(plane.store)]


def test_an_admin_rotates_a_token_and_the_old_one_stops_at_once(any_plane: Plane) -> None:
    old = any_plane.team_a
    cookie = {"Cookie": f"gpuq_token={old}"}
    assert any_plane.client.get("/dashboard/content", headers=cookie).status_code == 200
    answer = any_plane.call("POST", "/users/alice/token", any_plane.admin)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["name"], body["action"]) == ("alice", "rotated")
    new = body["token"]
    assert new != old
    refused = any_plane.get("/whoami", old)
    assert refused.status_code == 401 and refused.json()["message"] == "invalid token: no user has it"
    assert any_plane.client.get("/dashboard/content", headers=cookie).status_code == 401
    assert any_plane.get("/whoami", new).json() == {
        "name": "alice",
        "roles": ["member"],
        "namespaces": ["team-a"],
    }
    assert any_plane.call("POST", "/users/nobody/token", any_plane.admin).status_code == 404


def test_an_admin_deletes_a_user_whose_token_then_gets_401(any_plane: Plane) -> None:
    assert any_plane.get("/whoami", any_plane.team_b).status_code == 200
    answer = any_plane.call("DELETE", "/users/bob", any_plane.admin)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"kind": "User", "name": "bob", "action": "deleted"}
    assert any_plane.get("/whoami", any_plane.team_b).status_code == 401
    assert any_plane.get("/workloads", any_plane.team_b).status_code == 401
    assert names(any_plane) == ["admin", "alice"]
    assert any_plane.call("DELETE", "/users/bob", any_plane.admin).status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "verb"),
    [("DELETE", "/users/bob", "delete"), ("POST", "/users/bob/token", "rotate the token of")],
)
def test_a_member_manages_no_user_and_changes_nothing(
    any_plane: Plane, method: str, path: str, verb: str
) -> None:
    for target in ("bob", "alice"):  # not another's, not even its own
        answer = any_plane.call(method, path.replace("bob", target), any_plane.team_a)
        assert answer.status_code == 403, answer.text
    assert answer.json()["message"] == (
        f'user "alice" (member of team-a) may not {verb} User alice (cluster-scoped): '
        "users are an admin's to manage"
    )
    assert names(any_plane) == ["admin", "alice", "bob"]
    assert any_plane.get("/whoami", any_plane.team_a).status_code == 200
    assert any_plane.get("/whoami", any_plane.team_b).status_code == 200


def test_the_last_admin_cannot_be_deleted(any_plane: Plane) -> None:
    refused = any_plane.call("DELETE", "/users/admin", any_plane.admin)
    assert refused.status_code == 409
    assert "user 'admin' is the last admin: add another admin first" in refused.json()["message"]
    assert any_plane.get("/whoami", any_plane.admin).status_code == 200
    second = add_user(any_plane.store, "root2", admin=True)
    assert any_plane.call("DELETE", "/users/admin", second).status_code == 200
    assert any_plane.get("/whoami", any_plane.admin).status_code == 401
    assert any_plane.call("DELETE", "/users/root2", second).status_code == 409  # the last one again


# -- gpuq users ------------------------------------------------------------------------------------------


def users(plane: Plane, *args: str) -> Result:
    url = plane.store.url.render_as_string(hide_password=False)
    return runner.invoke(app, ["users", *args, "--database", url])


def test_gpuq_users_rotate_token_and_delete(
    any_plane: Plane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = tmp_path / "context.yaml"
    context.write_text(yaml.safe_dump({"server": "http://127.0.0.1:9", "token": any_plane.admin}))
    monkeypatch.setenv("GPUQ_CONTEXT", str(context))
    rotated = users(any_plane, "rotate-token", "alice")
    assert rotated.exit_code == 0, rotated.output
    token = rotated.stdout.strip()
    assert any_plane.get("/whoami", any_plane.team_a).status_code == 401
    assert any_plane.get("/whoami", token).json()["name"] == "alice"
    assert yaml.safe_load(context.read_text())["token"] == any_plane.admin  # not alice's: left alone

    mine = users(any_plane, "rotate-token", "admin")  # the context file's own token follows
    assert mine.exit_code == 0, mine.output
    new_admin = mine.stdout.strip()
    assert yaml.safe_load(context.read_text()) == {"server": "http://127.0.0.1:9", "token": new_admin}
    assert any_plane.get("/whoami", any_plane.admin).status_code == 401

    deleted = users(any_plane, "delete", "bob")
    assert deleted.exit_code == 0 and deleted.stdout == "user/bob deleted\n"
    assert any_plane.get("/whoami", any_plane.team_b).status_code == 401
    for args, says in (
        (("delete", "bob"), "no user 'bob'"),
        (("rotate-token", "bob"), "no user 'bob'"),
        (("delete", "admin"), "the last admin"),
    ):
        failed = users(any_plane, *args)
        assert failed.exit_code == 1 and says in failed.stderr, failed.output
    assert names(any_plane) == ["admin", "alice"]
