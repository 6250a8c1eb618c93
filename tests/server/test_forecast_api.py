"""ETAs through the API and the CLI: /forecast, the workload view's eta, dry runs, submitted-by stamping.

A real loop on the Plane's store runs a 2-GPU job declared to take 10 minutes on the
node's 2 GPUs; a 1-GPU job waits behind it (admitted within the 4-GPU quota, waiting for a GPU
of the node), so its ETA is the first one's end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuq.run.executors.local import LocalExecutor
from gpuq.run.gpus import local_node, virtual_devices
from gpuq.run.loop import ControlLoop
from gpuq.server.forecasts import ForecastCache
from gpuq.server.tables import eta_text, span
from server.conftest import Plane, dump, job
from server.test_cli_commands import Gpuq, gpuq, write  # noqa: F401  (gpuq: a fixture)

EXPECTED = "gpuq.dev/expected-duration"
SUBMITTED_BY = "gpuq.dev/submitted-by"


def declared(name: str, gpus: int, duration: str, namespace: str = "team-a", **kw: Any) -> dict[str, Any]:
    document = job(name, namespace, "import time; time.sleep(120)", gpus=gpus, **kw)
    document["metadata"]["annotations"] = {EXPECTED: duration}
    return document


@dataclass
class Live:
    plane: Plane
    loop: ControlLoop
    cache: ForecastCache
    started: float  # when the long job started


@pytest.fixture
def live(plane: Plane) -> Iterator[Live]:
    node = local_node(virtual_devices(2, "A100-80GB"), name="box", cpu_milli=16_000, memory_bytes=64 << 30)
    loop = ControlLoop(plane.store, LocalExecutor(plane.workdir), [node], workdir=plane.workdir)
    try:
        assert plane.apply(dump(declared("long", 2, "10m")), plane.team_a).status_code == 200
        deadline = time.time() + 20
        while (record := plane.store.get_workload("team-a", "long")) is None or record.state != "Running":
            assert time.time() < deadline, "the long job never started"
            loop.step()
            time.sleep(0.02)
        assert plane.apply(dump(declared("next", 1, "5m")), plane.team_a).status_code == 200
        loop.step()
        cache = ForecastCache(lambda reader: reader(loop), plane.store)
        assert cache.refresh(force=True)
        plane.client.app.state.forecasts = cache  # type: ignore[attr-defined]
        assert record.started_at is not None
        yield Live(plane, loop, cache, record.started_at)
    finally:
        loop.close()


def test_forecast_lists_the_etas_a_user_may_read(live: Live) -> None:
    plane = live.plane
    body = plane.get("/forecast", plane.team_a).json()
    assert body["available"] and body["ageSeconds"] >= 0
    etas = {i["name"]: i for i in body["items"]}
    assert set(etas) == {"long", "next"}
    assert etas["long"]["state"] == "Running"
    assert etas["long"]["endAt"] == pytest.approx(live.started + 600, abs=2)
    assert etas["next"]["startAt"] == pytest.approx(live.started + 600, abs=2)
    assert etas["next"]["runtime"]["source"] == "annotation"
    assert etas["next"]["endAt"] == pytest.approx(live.started + 900, abs=2)
    assert plane.get("/forecast", plane.team_b).json()["items"] == []
    assert plane.get("/forecast", None).status_code == 401


def test_a_workload_view_carries_its_eta(live: Live) -> None:
    plane = live.plane
    view = plane.get("/namespaces/team-a/workloads/next", plane.team_a).json()
    eta = view["eta"]
    assert eta["startAt"] == pytest.approx(live.started + 600, abs=2)
    assert eta["startRange"]["earliest"] == pytest.approx(eta["startAt"])
    assert eta["runtime"]["lowSeconds"] == eta["runtime"]["highSeconds"] == 300
    assert eta["computedAt"] == live.cache.latest().at  # type: ignore[union-attr]
    listed = plane.get("/workloads", plane.admin).json()["items"]
    assert all(item["eta"] is not None for item in listed)


def test_without_a_forecast_the_eta_is_null_and_forecast_says_why(plane: Plane) -> None:
    assert plane.apply(dump(job("a")), plane.team_a).status_code == 200
    assert plane.get("/namespaces/team-a/workloads/a", plane.team_a).json()["eta"] is None
    body = plane.get("/forecast", plane.team_a).json()
    assert body["available"] is False and "control loop" in body["reason"]
    refused = plane.call("POST", "/forecast/dry-run", plane.team_a, content=dump(job("b")).encode())
    assert refused.status_code == 503


def test_a_dry_run_forecasts_without_storing(live: Live) -> None:
    plane = live.plane
    before = plane.snapshot()
    answer = plane.call(
        "POST", "/forecast/dry-run", plane.team_a, content=dump(declared("probe", 1, "1h")).encode()
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["dryRun"] and (body["namespace"], body["name"]) == ("team-a", "probe")
    # Behind "next" (same ClusterQueue, earlier): one GPU frees when "long" ends at +600.
    assert body["eta"]["startAt"] == pytest.approx(live.started + 600, abs=2)
    assert body["eta"]["runtime"]["highSeconds"] == 3600
    assert plane.snapshot() == before


def test_a_dry_run_of_a_name_in_use_is_forecast_beside_it(live: Live) -> None:
    plane = live.plane
    answer = plane.call(
        "POST", "/forecast/dry-run", plane.team_a, content=dump(declared("next", 2, "1h")).encode()
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["name"] == "next" and body["eta"]["name"] == "next"
    assert body["eta"]["runtime"]["highSeconds"] == 3600


@pytest.mark.parametrize(
    ("text", "token", "status", "says"),
    [
        ("kind: [", "team_a", 422, "not valid YAML"),
        (dump(job("lost", queue="nope")), "team_a", 422, "nope"),
        (dump(job("neg", gpus=-1)), "team_a", 422, "not valid"),
        (dump(job("other", namespace="team-b")), "team_a", 403, "may not apply"),
        (dump(job("a"), job("b")), "team_a", 422, "exactly one workload"),
        ("", "team_a", 422, "no document"),
        (dump(job("a")), "", 401, "bearer"),
    ],
)
def test_a_bad_dry_run_is_refused_clearly_and_stores_nothing(
    live: Live, text: str, token: str, status: int, says: str
) -> None:
    plane = live.plane
    before = plane.snapshot()
    bearer = getattr(plane, token) if token else None
    answer = plane.call("POST", "/forecast/dry-run", bearer, content=text.encode())
    assert answer.status_code == status, answer.text
    assert says in answer.json()["message"] + json.dumps(answer.json().get("diagnostics", []))
    assert plane.snapshot() == before


def test_apply_stamps_the_authenticated_submitter_whatever_the_manifest_says(plane: Plane) -> None:
    """A member who writes another's name (or anything) as the submitter gets its own."""
    forged = job("forged")
    forged["metadata"]["annotations"] = {SUBMITTED_BY: "bob", "team": "vision"}
    assert plane.apply(dump(job("mine"), forged), plane.team_a).status_code == 200
    stored = {n: plane.store.get_workload("team-a", n) for n in ("mine", "forged")}
    assert {n: r.manifest["metadata"]["annotations"] for n, r in stored.items() if r} == {
        "mine": {SUBMITTED_BY: "alice"},
        "forged": {SUBMITTED_BY: "alice", "team": "vision"},  # other annotations kept
    }
    again = plane.apply(dump(job("mine"), forged), plane.admin)  # the same files again, by someone else
    assert again.status_code == 200, again.text
    assert [r["action"] for r in again.json()["results"]] == ["unchanged", "unchanged"]
    stored_again = plane.store.get_workload("team-a", "forged")
    assert (
        stored_again is not None and stored_again.manifest["metadata"]["annotations"][SUBMITTED_BY] == "alice"
    )


def test_get_workloads_shows_the_eta_and_describe_the_forecast(
    live: Live,
    gpuq: Gpuq,  # noqa: F811
    tmp_path: Path,
) -> None:
    plane = live.plane
    table = gpuq("get", "workloads", "-n", "team-a", token=plane.team_a)
    assert table.exit_code == 0, table.output
    assert "eta" in table.stdout
    rows = {line.split("│")[2].strip(): line for line in table.stdout.splitlines() if "│ team-a" in line}
    assert "ends in 9m" in rows["long"] or "ends in 10m" in rows["long"]
    assert "in 9m" in rows["next"] or "in 10m" in rows["next"]
    described = gpuq("describe", "workload", "next", "-n", "team-a", token=plane.team_a)
    assert described.exit_code == 0, described.output
    # "next" holds quota (4 GPUs of quota, 2 on the node) and waits for a GPU: admitted, not started.
    assert "State:        Admitted" in described.stdout
    for label in ("Forecast:", "Start:", "End:", "Runtime:"):
        assert label in described.stdout
    assert "5m (annotation" in described.stdout
    submitted = gpuq(
        "submit",
        "--dry-run",
        "-f",
        write(tmp_path / "p.yaml", dump(declared("p", 1, "1h"))),
        token=plane.team_a,
    )
    assert submitted.exit_code == 0, submitted.output
    assert (
        submitted.stdout.startswith("team-a/p would start in ")
        and "nothing was submitted" in submitted.stdout
    )
    assert plane.store.get_workload("team-a", "p") is None
    applied = gpuq("submit", "-f", str(tmp_path / "p.yaml"), token=plane.team_a)
    assert applied.exit_code == 0 and applied.stdout == "job/p created\n"


NOW = 10_000.0


def pending(
    start: float | None, earliest: float | None = None, latest: float | None = None
) -> dict[str, Any]:
    return {"state": "Pending", "startAt": start, "startRange": {"earliest": earliest, "latest": latest}}


def running(end: float | None) -> dict[str, Any]:
    return {"state": "Running", "endAt": end, "endRange": {"earliest": end, "latest": end}}


@pytest.mark.parametrize(
    ("state", "eta", "text"),
    [
        ("Succeeded", None, ""),
        ("Pending", None, "-"),
        ("Pending", pending(None), "—"),
        ("Pending", pending(NOW + 720, NOW + 480, NOW + 1500), "in 12m (8m–25m)"),
        ("Pending", pending(NOW + 720, NOW + 720, NOW + 720), "in 12m"),
        ("Pending", pending(NOW + 60, NOW + 60, None), "in 1m (1m–?)"),
        ("Pending", pending(NOW - 5), "now"),
        ("Pending", {**pending(NOW + 10800, NOW + 10800), "method": "queue model"}, "≈ in 3h00m (3h00m–?)"),
        ("Running", running(NOW + 7500), "ends in 2h05m"),
        ("Running", running(None), "—"),
    ],
)
def test_eta_text(state: str, eta: dict[str, Any] | None, text: str) -> None:
    assert eta_text({"state": state, "eta": eta}, NOW) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59.4, "59s"), (60, "1m"), (3599, "59m"), (3660, "1h01m"), (90000, "1d01h")],
)
def test_span(seconds: float, text: str) -> None:
    assert span(seconds) == text
