"""Workload lists in pages (``limit`` / ``continue``), on both stores, with the member's filter."""

from __future__ import annotations

import pytest

from server.conftest import Plane, dump, job


def _submit(plane: Plane, count: int, namespace: str = "team-a") -> None:
    jobs = [job(f"j{i:02d}", namespace) for i in range(count)]
    assert plane.apply(dump(*jobs), plane.admin).status_code == 200


def _read_all(plane: Plane, path: str, token: str, limit: int, **params: str) -> list[list[str]]:
    pages: list[list[str]] = []
    cont: str | None = None
    while True:
        answer = plane.get(path, token, limit=limit, **params, **({"continue": cont} if cont else {}))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        pages.append([w["name"] for w in body["items"]])
        cont = body.get("continue")
        if cont is None:
            assert "remainingItemCount" not in body
            return pages
        assert body["remainingItemCount"] > 0


@pytest.mark.parametrize(
    ("limit", "sizes"), [(1, [1] * 7), (3, [3, 3, 1]), (7, [7]), (100, [7])], ids=["1", "3", "7", "100"]
)
def test_pages_cover_every_workload_once_in_submission_order(
    any_plane: Plane, limit: int, sizes: list[int]
) -> None:
    _submit(any_plane, 7)
    pages = _read_all(any_plane, "/namespaces/team-a/workloads", any_plane.admin, limit)
    assert [len(p) for p in pages] == sizes
    assert [name for page in pages for name in page] == [f"j{i:02d}" for i in range(7)]


def test_the_remaining_count_and_the_member_filter_apply_in_the_query(plane: Plane) -> None:
    _submit(plane, 4, "team-a")
    _submit(plane, 4, "team-b")
    first = plane.get("/workloads", plane.team_a, limit=3).json()
    assert [w["namespace"] for w in first["items"]] == ["team-a"] * 3  # full page of her own
    assert first["remainingItemCount"] == 1
    pages = _read_all(plane, "/workloads", plane.team_b, 3)
    assert [len(p) for p in pages] == [3, 1]
    filtered = _read_all(plane, "/workloads", plane.admin, 5, queue="q", state="Pending")
    assert filtered == [["j00", "j01", "j02", "j03", "j00"], ["j01", "j02", "j03"]]
    assert plane.get("/workloads", plane.admin, limit=5, state="Running").json()["items"] == []


def test_without_limit_the_whole_list_comes_in_one_answer(plane: Plane) -> None:
    _submit(plane, 5)
    body = plane.get("/workloads", plane.admin).json()
    assert len(body["items"]) == 5
    assert "continue" not in body


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"continue": "not-a-token"}, "continue: not a continue token of this server"),
        ({"continue": "eyJ2IjoyLCJhZnRlciI6MX0"}, "continue: not a continue token"),  # {"v":2,...}
        ({"continue": "eyJ2IjoxLCJhZnRlciI6LTF9"}, "continue: not a continue token"),  # after -1
    ],
    ids=["garbage", "other-version", "negative"],
)
def test_a_bad_token_is_refused_naming_the_parameter(
    plane: Plane, params: dict[str, str], message: str
) -> None:
    answer = plane.get("/workloads", plane.admin, limit=2, **params)
    assert answer.status_code == 400
    assert message in answer.json()["message"]


@pytest.mark.parametrize("limit", ["0", "-1", "10001", "many"])
def test_an_absurd_limit_is_refused(plane: Plane, limit: str) -> None:
    assert plane.get("/workloads", plane.admin, limit=limit).status_code in (400, 422)
