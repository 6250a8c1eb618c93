"""``gpuq export k8s`` of the Kubeflow-family sources: they are written, and they validate."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from gpuq.cli import app

DATA = Path(__file__).resolve().parents[1] / "data"
EXAMPLES = DATA / "kueue-v0.19.2" / "site" / "static" / "examples"
JOBS = [
    "sample-tfjob.yaml",
    "sample-xgboostjob.yaml",
    "sample-paddlejob.yaml",
    "sample-jaxjob.yaml",
    "sample-pytorchjob.yaml",
    "sample-mpijob.yaml",
    "sample-sparkapplication.yaml",
]
TRAINER = DATA / "trainer-v2.2.1"


def test_the_kubeflow_examples_export_and_validate(tmp_path: Path) -> None:
    files = [EXAMPLES / "admin" / "single-clusterqueue-setup.yaml", *(EXAMPLES / "jobs" / j for j in JOBS)]
    files += [TRAINER / "manifests/base/runtimes/torch_distributed.yaml"]
    files += [TRAINER / "kueue-v0.19.2-docs/trainjob-pytorch-distributed.yaml"]
    args = ["export", "k8s", *(a for f in files for a in ("-f", str(f))), "--out-dir", str(tmp_path / "out")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    written = [
        doc
        for path in sorted((tmp_path / "out").rglob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    kinds = {doc["kind"] for doc in written}
    assert {
        "TFJob",
        "XGBoostJob",
        "PaddleJob",
        "JAXJob",
        "PyTorchJob",
        "MPIJob",
        "SparkApplication",
        "TrainJob",
    } <= kinds
