"""``gpuq import k8s`` of a GKE dump with GKE-managed GPU drivers (no GPU Feature Discovery), a v1beta2
Workload holding Kueue's compressed topology assignment, and workload sources and serving objects
beside the Kueue objects (``tests/k8s/data/gke-serving-dump.yaml``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuq.cli import app
from gpuq.k8s.importer import ImportResult, import_dump, write_files
from gpuq.sim.scenario import load_workloads, plan_scenario, prepare
from gpuq.sim.simulator import Simulation

DUMP = Path(__file__).parent / "data" / "gke-serving-dump.yaml"
H100_NODES = ["gke-ml-h100-pool-a3f2c1d0-4k2x", "gke-ml-h100-pool-a3f2c1d0-9q7m"]


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[ImportResult, Path]:
    result = import_dump([(str(DUMP), DUMP.read_text())])
    assert result.errors == (), result.errors
    out = tmp_path_factory.mktemp("gke") / "gke-prod"
    write_files(result, out)
    return result, out


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_gke_labels_give_the_pools_their_gpus(imported: tuple[ImportResult, Path]) -> None:
    result, _ = imported
    assert {(p.name, p.gpu_model, p.gpus_per_node, p.sharing) for p in result.pools} == {
        ("h100-pool", "H100-80GB", 8, "none"),
        ("l4-shared", "L4", 2, "time-slicing"),
        ("a100-mig", "A100-40GB", 1, "mig-single"),
        ("l4-gfd", "L4", 2, "none"),
    }
    assert result.kept_nodes == []


def test_sources_go_to_the_state_and_serving_objects_to_the_configuration(
    imported: tuple[ImportResult, Path],
) -> None:
    result, out = imported
    sources = [(d["kind"], d["metadata"]["name"]) for d in _documents(out / "state" / "sources.yaml")]
    serving = [(d["kind"], d["metadata"]["name"]) for d in _documents(out / "cluster" / "serving.yaml")]
    assert sources == [("Job", "eval-sweep"), ("JobSet", "rl-rollouts")]
    assert serving == [
        ("Deployment", "gemma-vllm"),
        ("HorizontalPodAutoscaler", "gemma-vllm"),
        ("StatefulSet", "embedder"),
        ("RayService", "summarizer"),
    ]
    # the Job its Workload stands for, its two pods, the Deployment's pod, the RayService's RayCluster
    assert result.represented == 5
    finished = [d for d in result.diagnostics if d.name == "research/tokenize"]
    assert [d.message.split(":")[0] for d in finished] == ["finished"]


def test_the_compressed_assignment_places_the_job_on_its_real_hosts(
    imported: tuple[ImportResult, Path],
) -> None:
    _, out = imported
    plan = plan_scenario([str(out / "scenario.yaml")])
    prepared = prepare(plan, plan.variants[0], load_workloads(plan))
    seen: dict[str, list[str]] = {}

    def at_start(_t: float, sim: Simulation) -> None:
        seen.update({key: sorted(b.node for b in run.bindings) for key, run in sim.runs.items()})

    prepared.simulation(probes=[0.0], on_probe=at_start).run()
    assert seen["research/job-llama-pretrain-3c9e1"] == H100_NODES


def test_the_imported_directory_simulates(imported: tuple[ImportResult, Path], tmp_path: Path) -> None:
    _, out = imported
    result = CliRunner().invoke(
        app, ["simulate", "-f", str(out / "scenario.yaml"), "--out-dir", str(tmp_path), "-q"]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "metrics.json").exists()
