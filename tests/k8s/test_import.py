"""``gpuq import k8s``: a realistic ``kubectl get ... -A -o yaml`` dump becomes a scenario that simulates."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuq.api import kueue
from gpuq.api.loader import load
from gpuq.cli import app
from gpuq.k8s.importer import ImportSettings, import_dump
from gpuq.sim.scenario import load_workloads, plan_scenario, prepare
from gpuq.sim.simulator import Simulation

DUMP = Path(__file__).parent / "data" / "cluster-dump.yaml"
runner = CliRunner()


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("import") / "ml-prod"
    result = runner.invoke(app, ["import", "k8s", "-f", str(DUMP), "--out-dir", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_nodes_become_one_pool_per_real_pool_and_topology_block(imported: Path) -> None:
    pools = {d["metadata"]["name"]: d["spec"] for d in _documents(imported / "cluster" / "nodes.yaml")}
    assert {name: (spec["count"], spec.get("gpu", {}).get("model")) for name, spec in pools.items()} == {
        "a100-mig-pool": (2, "A100-40GB"),
        "default-pool": (1, None),
        "h100-pool-7a1f0c9e3b2d": (2, "H100-80GB"),
        "h100-pool-c42e8b5f1a07": (2, "H100-80GB"),
        "l4-spot-pool": (2, "L4"),
    }
    assert pools["a100-mig-pool"]["gpu"]["sharing"] == {
        "strategy": "mig-mixed",
        "migLayout": ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"],
    }
    assert pools["l4-spot-pool"]["gpu"]["sharing"] == {"strategy": "time-slicing", "replicas": 2}
    assert pools["l4-spot-pool"]["capacityType"] == "spot"
    assert pools["h100-pool-c42e8b5f1a07"]["topology"] == {
        "block": "c42e8b5f1a07",
        "racks": ["c42e8b5f1a07-01", "c42e8b5f1a07-02"],
        "nodesPerRack": 1,
    }
    assert pools["h100-pool-7a1f0c9e3b2d"]["labels"]["cloud.google.com/gke-nodepool"] == "h100-pool"
    assert "kubernetes.io/hostname" not in pools["h100-pool-7a1f0c9e3b2d"]["labels"]


def _shape(nodes: tuple) -> list[tuple]:
    """What a node offers, whatever its name: GPUs, sharing, cpu, memory, capacity type."""
    return sorted(
        (
            n.gpu_model or "",
            n.gpu_count,
            n.sharing,
            n.allocatable.get("cpu"),
            n.allocatable.get("memory"),
            n.capacity_type or "on-demand",
        )
        for n in nodes
    )


def test_expanded_pools_offer_what_the_real_nodes_offer(imported: Path) -> None:
    pooled = load([str(imported / "cluster")])
    assert not pooled.errors
    assert _shape(pooled.nodes) == _shape(load([str(DUMP)]).nodes)


def test_kueue_objects_are_kept_without_status_or_server_metadata(imported: Path) -> None:
    documents = _documents(imported / "cluster" / "kueue.yaml")
    kinds = [d["kind"] for d in documents]
    assert kinds.count("ClusterQueue") == 4 and kinds.count("LocalQueue") == 4
    assert {"Topology", "Cohort", "WorkloadPriorityClass", "ResourceFlavor"} <= set(kinds)
    for document in documents:
        assert "status" not in document
        assert set(document["metadata"]) <= {"name", "namespace", "labels", "annotations"}
    vision = next(d for d in documents if d["metadata"]["name"] == "team-vision")
    assert vision["spec"]["cohort"] == "research"  # as written (v1beta1)


def test_current_workloads_form_the_state_with_their_real_topology_hosts(imported: Path) -> None:
    state = {d["metadata"]["name"]: d for d in _documents(imported / "state" / "workloads.yaml")}
    assert sorted(state) == [
        "job-bert-pretrain-6c7d8",
        "job-llama-eval-7a8b9",
        "job-resnet-sweep-0a1b2",
        "job-triton-mig-4e5f6",
        "job-vit-large-c3d4e",
    ]
    vit = state["job-vit-large-c3d4e"]
    assert vit["metadata"]["creationTimestamp"] == "2025-06-03T06:00:00Z"
    domains = vit["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]["domains"]
    assert domains == [{"count": 1, "values": ["gke-ml-prod-h100-pool-8f2c1d0a-0k3x"]}]  # as recorded
    loaded = load([str(imported / "cluster"), str(imported / "state")])
    assert not loaded.errors
    assert sorted(w.name for w in loaded.workloads if w.admission is not None) == [
        "job-llama-eval-7a8b9",
        "job-triton-mig-4e5f6",
        "job-vit-large-c3d4e",
    ]


def test_history_becomes_trace_rows_from_the_first_creation(imported: Path) -> None:
    with open(imported / "trace.csv") as handle:
        rows = [
            (
                r["name"],
                r["queue"],
                r["submit_s"],
                r["duration_s"],
                r["pods"],
                r["gpus"],
                r["priority"],
                r["status"],
            )
            for r in csv.DictReader(handle)
        ]
    assert rows == [
        ("job-resnet-train-5b7c2", "vision", "0", "14400", "2", "8", "high-priority", ""),
        ("jobset-llama-ft-8d2e1-driver", "nlp", "5400", "8100", "1", "0", "high-priority", "failed"),
        ("jobset-llama-ft-8d2e1-workers", "nlp", "5400", "8100", "2", "8", "high-priority", "failed"),
        ("job-data-prep-2f9a1", "vision", "7200", "1800", "1", "0", "0", ""),
        ("job-vit-large-c3d4e", "vision", "79200", "21600", "1", "8", "high-priority", ""),
        ("job-llama-eval-7a8b9", "nlp-spot", "90000", "2700", "1", "1", "low-priority", ""),
        ("job-bert-pretrain-6c7d8", "nlp", "92700", "7200", "4", "8", "low-priority", ""),
    ]
    history = (imported / "history.csv").read_text().splitlines()
    assert len(history) == 1 + 4


def test_the_scenario_starts_from_the_state_at_the_dump_time(imported: Path) -> None:
    scenario = _documents(imported / "scenario.yaml")[0]["spec"]
    assert scenario["initialState"] == {
        "paths": ["state/"],
        "at": "2025-06-03T09:45:01Z",  # the newest timestamp: job-bert-pretrain's QuotaReserved=False
        "traceOrigin": "2025-06-02T08:00:00Z",  # the first creation, trace time 0
    }
    assert scenario["workloads"] == {"trace": {"path": "trace.csv", "format": "csv"}}


def _simulated(scenario: Path) -> dict[str, tuple[float | None, float | None, str]]:
    plan = plan_scenario([str(scenario)])
    prepared = prepare(plan, plan.variants[0], load_workloads(plan))
    result = prepared.simulation().run()
    return {key: (run.first_started, run.ended, run.status.value) for key, run in result.runs.items()}


def test_pools_keep_the_real_node_names(imported: Path) -> None:
    pools = {d["metadata"]["name"]: d["spec"] for d in _documents(imported / "cluster" / "nodes.yaml")}
    assert pools["h100-pool-7a1f0c9e3b2d"]["nodeNames"] == [
        "gke-ml-prod-h100-pool-8f2c1d0a-0k3x",
        "gke-ml-prod-h100-pool-8f2c1d0a-4hq2",
    ]
    pooled = {n.name for n in load([str(imported / "cluster")]).nodes}
    assert pooled == {n.name for n in load([str(DUMP)]).nodes}


def test_an_admitted_tas_workload_runs_on_its_recorded_hosts(imported: Path) -> None:
    plan = plan_scenario([str(imported / "scenario.yaml")])
    prepared = prepare(plan, plan.variants[0], load_workloads(plan))
    seen: dict[str, set[str]] = {}

    def at_start(_t: float, sim: Simulation) -> None:
        seen.update({key: {b.node for b in run.bindings} for key, run in sim.runs.items()})

    prepared.simulation(probes=[0.0], on_probe=at_start).run()
    assert seen["vision/job-vit-large-c3d4e"] == {"gke-ml-prod-h100-pool-8f2c1d0a-0k3x"}


def test_the_imported_scenario_simulates_from_the_cluster_as_dumped(imported: Path) -> None:
    # Time 0 is 2025-06-03T09:45:01Z. Admitted workloads run on from there with their run time
    # left; ones that declare none get 1h in all (warned). Every trace row is older: history.
    #   vit-large    8 H100, 6h declared, PodsReady 06:02:10: 21600 - 13371 s run = 8229 s left
    #   triton-mig   2 MIG slices, nothing declared, PodsReady 07:01:12: 9829 s > 3600 s: ends at 0
    #   llama-eval   1 L4, nothing declared, PodsReady 09:00:48: 3600 - 2653 = 947 s left
    # Pending, queued at 0 by creation: resnet-sweep (24 GPUs, 1h assumed) fits team-vision's
    # 16 + 8 borrowable H100s only once vit-large frees its 8 (8229 s), and bert-pretrain (32 GPUs,
    # 2h) needs the whole cohort's 32 H100s: after resnet-sweep ends (8229 + 3600 = 11829 s).
    assert _simulated(imported / "scenario.yaml") == {
        "vision/job-vit-large-c3d4e": (-13498.0, 8229.0, "Succeeded"),  # started at its QuotaReserved
        "inference/job-triton-mig-4e5f6": (-9900.0, 0.0, "Succeeded"),
        "nlp/job-llama-eval-7a8b9": (-2700.0, 947.0, "Succeeded"),
        "vision/job-resnet-sweep-0a1b2": (8229.0, 11829.0, "Succeeded"),
        "nlp/job-bert-pretrain-6c7d8": (11829.0, 19029.0, "Succeeded"),
    }


def test_the_imported_scenario_simulates(imported: Path, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["simulate", "-f", str(imported / "scenario.yaml"), "--out-dir", str(tmp_path), "-q"]
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    workloads = metrics["variants"][0]["workloads"]
    assert metrics["scenario"] == "ml-prod"
    assert (workloads["submitted"], workloads["finished"], workloads["pending_at_end"]) == (5, 5, 0)
    assert "7 trace row(s) submitted at or before the initial state (2025-06-03T09:45:01Z)" in result.output
    assert "job-llama-eval-7a8b9: metadata.annotations: warning: declares no run time" in result.output


def test_assume_duration_reaches_the_initial_state(tmp_path: Path) -> None:
    out = tmp_path / "assumed"
    args = ["import", "k8s", "-f", str(DUMP), "--out-dir", str(out), "--assume-duration", "4h"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert _documents(out / "scenario.yaml")[0]["spec"]["initialState"]["assumeDuration"] == "14400s"
    simulated = _simulated(out / "scenario.yaml")
    assert simulated["inference/job-triton-mig-4e5f6"][1] == 14400 - 9829
    assert simulated["nlp/job-llama-eval-7a8b9"][1] == 14400 - 2653
    assert simulated["vision/job-resnet-sweep-0a1b2"] == (8229.0, 8229.0 + 14400, "Succeeded")


def test_a_now_before_a_workload_was_created_is_an_error() -> None:
    now = kueue.parse_timestamp("2025-06-03T09:40:00Z")  # before job-bert-pretrain (09:45:00)
    result = import_dump([("dump.yaml", DUMP.read_text())], ImportSettings(now_s=now))
    assert result.files == {}
    assert [str(d) for d in result.errors] == [
        "state/workloads.yaml:270: Workload/job-bert-pretrain-6c7d8: metadata.creationTimestamp: "
        "created after the initial state's instant (2025-06-03T09:40:00Z, spec.initialState.at)"
    ]


def test_warnings_name_the_workloads_left_out_and_the_guesses() -> None:
    result = import_dump([("dump.yaml", DUMP.read_text())])
    warnings = [str(d) for d in result.diagnostics]
    assert not result.errors
    assert any(
        "Node/gke-ml-prod-default-pool-a0b1c2d3-q8rs" in w and "CPU-only node, kept" in w for w in warnings
    )
    assert any(
        "Workload/inference/job-triton-mig-4e5f6: spec.podSets[0]" in w and "mig-1g.5gb" in w
        for w in warnings
    )
    assert any("Workload/vision/job-resnet-sweep-0a1b2" in w and "--assume-duration" in w for w in warnings)
    assert any(
        "Workload/nlp/job-llama-eval-7a8b9" in w and "2700s" in w and "lower bound" in w for w in warnings
    )
    assumed = import_dump([("dump.yaml", DUMP.read_text())], ImportSettings(assume_s=3600))
    assert assumed.trace_rows == result.trace_rows + 1


def test_nodes_mode_keeps_every_node_as_written() -> None:
    result = import_dump([("dump.yaml", DUMP.read_text())], ImportSettings(nodes="nodes"))
    nodes = _documents_of(result.files["cluster/nodes.yaml"])
    assert [d["kind"] for d in nodes] == ["Node"] * 9
    assert all("managedFields" not in d["metadata"] and "nodeInfo" not in d["status"] for d in nodes)
    assert result.pools == []


def _documents_of(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]
