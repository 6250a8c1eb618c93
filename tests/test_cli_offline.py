"""``gpuq get`` / ``describe`` with ``-f``: a snapshot's objects in the server's shapes (``--admit``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuq.cli import app

EXAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "symbol-retail")
runner = CliRunner()


def _json(*args: str) -> Any:
    result = runner.invoke(app, [*args, "-f", EXAMPLE, "-o", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _admit() -> dict[str, Any]:
    document: dict[str, Any] = _json("admit")
    return document


def test_workloads_after_admit_agree_with_gpuq_admit() -> None:
    decided = _admit()
    items = {f"{w['namespace']}/{w['name']}": w for w in _json("get", "workloads", "--admit")}
    for key, decision in decided["admitted"].items():
        assert items[key]["state"] == "Admitted"
        assert items[key]["clusterQueue"] == decision["clusterQueue"]
        assigned = {p["name"]: p["count"] for p in items[key]["admission"]["podSetAssignments"]}
        assert assigned == {name: ps["count"] for name, ps in decision["podSets"].items()}
    for key, message in decided["pending"].items():
        assert (items[key]["state"], items[key]["message"]) == ("Pending", message)
    assert {w["kind"] for w in items.values()} >= {"Job", "PyTorchJob", "Workload"}


def test_without_admit_the_state_is_the_snapshot_s() -> None:
    items = _json("get", "workloads")
    assert {w["state"] for w in items} <= {"Admitted", "QuotaReserved", "Pending"}
    pending = [w for w in items if w["state"] == "Pending"]
    assert pending and all(w["message"] == "waiting for the next scheduling cycle" for w in pending)
    assert all(w["admission"] is None for w in pending)


@pytest.mark.parametrize(
    ("verb", "count_of"),
    [
        ("clusterqueues", lambda w, q: w["clusterQueue"] == q["name"]),
        ("localqueues", lambda w, q: (w["namespace"], w["queue"]) == (q["namespace"], q["name"])),
    ],
)
def test_queues_count_the_workloads_they_hold(verb: str, count_of: Any) -> None:
    workloads = _json("get", "workloads", "--admit")
    queues = _json("get", verb, "--admit")
    assert queues
    for queue in queues:
        mine = [w for w in workloads if count_of(w, queue)]
        assert queue["status"] == {
            "pendingWorkloads": sum(w["state"] == "Pending" for w in mine),
            "admittedWorkloads": sum(w["state"] != "Pending" for w in mine),
        }
        assert queue["manifest"]["kind"] == queue["kind"]


def test_cluster_queue_quotas_read_as_written() -> None:
    table = runner.invoke(app, ["get", "clusterqueues", "-f", EXAMPLE])
    assert table.exit_code == 0, table.output
    assert "memory=384Gi" in table.stdout


def test_pending_workloads_in_queue_order_with_positions() -> None:
    entries = _json("get", "pendingworkloads", "--clusterqueue", "research", "--admit")
    assert [e["positionInClusterQueue"] for e in entries] == list(range(len(entries)))
    keys = [(-e["priority"], e["createdAt"]) for e in entries]
    assert keys == sorted(keys)
    assert all(e["reason"].startswith("couldn't assign flavors") for e in entries)


@pytest.mark.parametrize(
    "name", ["job-feature-backfill-5d0bc", "feature-backfill"], ids=["workload", "source"]
)
def test_describe_finds_a_workload_by_its_name_or_its_source_s(name: str) -> None:
    workload = _json("describe", "workload", name, "-n", "recsys", "--admit")
    assert (workload["name"], workload["kind"], workload["state"]) == (
        "job-feature-backfill-5d0bc",
        "Job",
        "Admitted",
    )
    assert workload["pods"] == [] and workload["events"] == []


def test_describe_of_an_unknown_workload_names_it() -> None:
    result = runner.invoke(app, ["describe", "workload", "nope", "-n", "recsys", "-f", EXAMPLE])
    assert result.exit_code == 1
    assert "no workload 'nope' in namespace 'recsys'" in result.stderr


def test_a_broken_snapshot_prints_its_diagnostics_and_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: q}\nspec: 3\n")
    result = runner.invoke(app, ["get", "clusterqueues", "-f", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}:" in result.stderr and "ClusterQueue/q" in result.stderr
