"""The API refuses a source whose name its own controller would refuse: a 422 naming the field, nothing
stored (a 253-character Job name used to be accepted, admitted, and its pods failed to start for ever)."""

from __future__ import annotations

from server.conftest import Plane, dump, job


def test_a_job_named_past_63_characters_is_refused_and_nothing_is_written(plane: Plane) -> None:
    before = plane.snapshot()
    name = "j" * 253
    response = plane.apply(dump(job(name)), plane.team_a)
    assert response.status_code == 422, response.text
    body = response.json()
    (diagnostic,) = [d for d in body["diagnostics"] if d["field"] == "metadata.name"]
    assert (diagnostic["path"], diagnostic["kind"], diagnostic["name"]) == ("<request>", "Job", name)
    assert diagnostic["line"] == 1 and diagnostic["severity"] == "error"
    assert "batch.kubernetes.io/job-name" in diagnostic["message"]
    assert diagnostic["text"].startswith(f"<request>:1: Job/{name}: metadata.name: invalid Job name")
    assert plane.snapshot() == before
    assert plane.apply(dump(job("j" * 63)), plane.team_a).status_code == 200


def test_a_job_with_generate_name_is_named_by_the_server_and_the_answer_gives_the_name(plane: Plane) -> None:
    document = job("unused")
    document["metadata"] = {**document["metadata"], "generateName": "sample-job-"}
    del document["metadata"]["name"]
    names = []
    for _ in range(2):
        response = plane.apply(dump(document), plane.team_a)
        assert response.status_code == 200, response.text
        (result,) = response.json()["results"]
        assert result["action"] == "created"
        names.append(result["name"])
    assert all(n.startswith("sample-job-") and len(n) == len("sample-job-") + 5 for n in names)
    assert names[0] != names[1]  # drawn at random, each apply a new object (as kubectl create)
    stored = {w.name for w in plane.store.list_workloads()}
    assert set(names) <= stored
