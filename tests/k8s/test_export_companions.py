"""``gpuq export k8s`` writes what the workloads need on a cluster beside them, as written: every pod of
a pod group (not only the first, whose document carries the group's Workload), the DRA objects their
pods claim, and the training runtimes TrainJobs name; each is checked against its schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from gpuq.cli import app

DATA = Path(__file__).resolve().parents[1] / "data"
EXAMPLES = DATA / "kueue-v0.19.2" / "site" / "static" / "examples"
SETUP = EXAMPLES / "admin" / "single-clusterqueue-setup.yaml"
TRAINER = DATA / "trainer-v2.2.1"


def export(
    tmp_path: Path, *files: Path, extra: tuple[str, ...] = ()
) -> tuple[int, str, list[dict[str, Any]]]:
    out = tmp_path / "out"
    args = ["export", "k8s", *(a for f in files for a in ("-f", str(f))), "--out-dir", str(out), *extra]
    result = CliRunner().invoke(app, args)
    path = out / "70-workloads.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d] if path.exists() else []
    return result.exit_code, result.output, docs


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return [d["kind"] for d in docs]


def test_every_pod_of_a_pod_group_is_written_with_its_queue(tmp_path: Path) -> None:
    code, output, docs = export(tmp_path, SETUP, EXAMPLES / "pods-kueue" / "kueue-pod-group.yaml")
    assert code == 0, output
    assert kinds(docs) == ["Pod", "Pod"]
    for pod in docs:
        labels = pod["metadata"]["labels"]
        assert labels["kueue.x-k8s.io/pod-group-name"] == "sample-group"
        assert labels["kueue.x-k8s.io/queue-name"] == "user-queue"


def test_a_pod_group_across_files_is_written_whole(tmp_path: Path) -> None:
    group = yaml.safe_load_all((EXAMPLES / "pods-kueue" / "kueue-pod-group.yaml").read_text())
    first, second = [d for d in group if d]
    for index, pod in enumerate((first, second)):
        (tmp_path / f"pod-{index}.yaml").write_text(yaml.safe_dump(pod))
    code, output, docs = export(tmp_path, SETUP, tmp_path / "pod-0.yaml", tmp_path / "pod-1.yaml")
    assert code == 0, output
    assert kinds(docs) == ["Pod", "Pod"]


def test_the_claim_templates_a_job_claims_are_written_before_it(tmp_path: Path) -> None:
    files = (
        EXAMPLES / "dra" / "sample-dra-counter-queues.yaml",
        EXAMPLES / "dra" / "sample-dra-counter-job.yaml",
    )
    code, output, docs = export(tmp_path, *files, extra=("--kubernetes-version", "1.34"))
    assert code == 0, output
    assert kinds(docs) == ["ResourceClaimTemplate", "Job"]
    written = yaml.safe_load_all((EXAMPLES / "dra" / "sample-dra-counter-job.yaml").read_text())
    template = next(d for d in written if d and d["kind"] == "ResourceClaimTemplate")
    assert docs[0]["spec"] == template["spec"], "as written"


def test_a_kubernetes_release_that_does_not_serve_dra_v1_is_refused_naming_it(tmp_path: Path) -> None:
    files = (
        EXAMPLES / "dra" / "sample-dra-counter-queues.yaml",
        EXAMPLES / "dra" / "sample-dra-counter-job.yaml",
    )
    code, output, docs = export(tmp_path, *files, extra=("--kubernetes-version", "1.33"))
    assert code != 0 and docs == []
    assert "ResourceClaimTemplate/default/gpu-partition: kind: no Kubernetes 1.33.0 schema" in output


def test_the_runtime_a_trainjob_names_is_written_before_it_and_validates(tmp_path: Path) -> None:
    runtime = TRAINER / "manifests/base/runtimes/torch_distributed.yaml"
    code, output, docs = export(
        tmp_path, SETUP, runtime, TRAINER / "kueue-v0.19.2-docs/trainjob-pytorch-distributed.yaml"
    )
    assert code == 0, output
    assert kinds(docs) == ["ClusterTrainingRuntime", "TrainJob"]


def test_a_runtime_trainer_v2_2_1_refuses_is_named_with_its_field(tmp_path: Path) -> None:
    """Kueue's TrainJob page writes ``mlPolicy.torch.numProcPerNode``, a field Trainer v2.2.1's CRD
    no longer has (its ``torch`` policy is an empty object): a strict API server refuses it."""
    runtime = TRAINER / "kueue-v0.19.2-docs/trainingruntime-torch-custom.yaml"
    code, output, docs = export(
        tmp_path, SETUP, runtime, TRAINER / "kueue-v0.19.2-docs/trainjob-pytorch-custom.yaml"
    )
    assert code != 0 and docs == []
    assert "TrainingRuntime/team-a/torch-custom: spec.mlPolicy.torch.numProcPerNode: unknown field" in output
