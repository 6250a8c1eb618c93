"""``resources.quotaCheckStrategy`` (Kueue v0.19, gate QuotaCheckStrategy beta and on): with
``IgnoreUndeclared`` a request for a resource the ClusterQueue does not cover is not checked against
quota; with ``BlockUndeclared`` (the default) such a workload cannot be admitted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuq.api.loader import load_texts
from gpuq.cli import app

runner = CliRunner()

SETUP = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: gpu, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: default}
spec: {clusterQueue: cq}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train, labels: {kueue.x-k8s.io/queue-name: q}}
spec:
  template:
    spec:
      containers:
      - {name: c, image: x, resources: {requests: {cpu: "4", memory: 16Gi, nvidia.com/gpu: 2}}}
"""
CONFIG = "---\napiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"


@pytest.mark.parametrize(
    ("config", "admitted", "message"),
    [
        pytest.param(
            "", False, "resource cpu unavailable in ClusterQueue cq", id="no Configuration: blocked"
        ),
        pytest.param(
            CONFIG + "resources: {quotaCheckStrategy: BlockUndeclared}\n",
            False,
            "resource cpu unavailable in ClusterQueue cq",
            id="BlockUndeclared",
        ),
        pytest.param(
            CONFIG + "resources: {quotaCheckStrategy: IgnoreUndeclared}\n", True, "", id="IgnoreUndeclared"
        ),
        pytest.param(
            CONFIG + "resources: {quotaCheckStrategy: IgnoreUndeclared}\n"
            "featureGates: {QuotaCheckStrategy: false}\n",
            False,
            "resource cpu unavailable in ClusterQueue cq",
            id="IgnoreUndeclared with its gate off",
        ),
    ],
)
def test_undeclared_resources_block_or_are_ignored(
    tmp_path: Path, config: str, admitted: bool, message: str
) -> None:
    (tmp_path / "all.yaml").write_text(SETUP + config)
    result = runner.invoke(app, ["admit", "-f", str(tmp_path / "all.yaml"), "-o", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert bool(out["admitted"]) is admitted
    if not admitted:
        (why,) = out["pending"].values()
        assert message in why


def test_ignore_undeclared_refuses_excluded_prefixes_as_kueue_does() -> None:
    text = (
        SETUP
        + CONFIG
        + "resources: {quotaCheckStrategy: IgnoreUndeclared, excludeResourcePrefixes: [example.com/]}\n"
    )
    result = load_texts([("all.yaml", text)])
    assert [(d.kind, d.field) for d in result.errors] == [
        ("Configuration", "resources.excludeResourcePrefixes")
    ]


def test_an_unknown_strategy_is_an_error_naming_the_field() -> None:
    result = load_texts([("all.yaml", SETUP + CONFIG + "resources: {quotaCheckStrategy: Sometimes}\n")])
    assert [d.field for d in result.errors] == ["resources.quotaCheckStrategy"]
