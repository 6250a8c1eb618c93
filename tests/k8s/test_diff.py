"""``gpuq diff``: object by object, field by field, with quantities, versions and defaults normalised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuq.cli import app
from gpuq.k8s.diff import diff_paths, show

runner = CliRunner()

CQ = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: team}}
spec:
  cohortName: research
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {{name: cpu, nominalQuota: {cpu}}}
      - {{name: memory, nominalQuota: {memory}}}
      - {{name: nvidia.com/gpu, nominalQuota: {gpus}}}
    - name: l4
      resources:
      - {{name: cpu, nominalQuota: 8}}
      - {{name: memory, nominalQuota: 32Gi}}
      - {{name: nvidia.com/gpu, nominalQuota: 4}}
"""
LQ = """\
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: ml}
spec: {clusterQueue: team}
"""
LIVE_CQ = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: team
  uid: 6f7a8b9c-0d1e-4f2a-8b3c-4d5e6f7a8b9c
  resourceVersion: "9185377"
  generation: 2
  creationTimestamp: "2025-05-20T11:00:00Z"
  managedFields: [{manager: kubectl, operation: Update}]
  annotations: {kubectl.kubernetes.io/last-applied-configuration: "{}"}
spec:
  cohort: research
  queueingStrategy: BestEffortFIFO
  preemption: {reclaimWithinCohort: Never, withinClusterQueue: Never}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: cpu, nominalQuota: "1"}
      - {name: memory, nominalQuota: "17179869184"}
      - {name: nvidia.com/gpu, nominalQuota: "8"}
    - name: l4
      resources:
      - {name: cpu, nominalQuota: "8000m"}
      - {name: memory, nominalQuota: 32Gi}
      - {name: nvidia.com/gpu, nominalQuota: "4"}
status:
  admittedWorkloads: 3
"""


def cq(cpu: str = "1000m", memory: str = "16Gi", gpus: str = "8") -> str:
    return CQ.format(cpu=cpu, memory=memory, gpus=gpus)


L4_RESOURCES = (
    "resources: [{name: cpu, nominalQuota: 8}, {name: memory, nominalQuota: 34359738368}, "
    "{name: nvidia.com/gpu, nominalQuota: 4}]}"
)
FLAVOR_PATH = "spec.resourceGroups[0].flavors[name=h100].resources[name=nvidia.com/gpu].nominalQuota"
CASES = [
    pytest.param(cq(), cq(), [], id="the same configuration has no differences"),
    pytest.param(
        LIVE_CQ,
        cq(),
        [],
        id="a live v1beta1 object equals its tuned v1beta2 spelling (quantities, defaults, metadata, status)",
    ),
    pytest.param(
        cq(),
        cq(gpus="16"),
        [("~", "ClusterQueue/team", [(FLAVOR_PATH, "8", "16")])],
        id="a changed quota is named by flavor and resource",
    ),
    pytest.param(
        cq(),
        cq() + LQ,
        [("+", "LocalQueue/ml/q", [])],
        id="an added object",
    ),
    pytest.param(
        cq() + LQ,
        cq(),
        [("-", "LocalQueue/ml/q", [])],
        id="a removed object",
    ),
    pytest.param(
        cq(),
        cq().replace("    - name: l4\n", "    - name: a100\n"),
        [
            (
                "~",
                "ClusterQueue/team",
                [
                    ("spec.resourceGroups[0].flavors[name=l4]", "{name: l4, " + L4_RESOURCES, "<unset>"),
                    ("spec.resourceGroups[0].flavors[name=a100]", "<unset>", "{name: a100, " + L4_RESOURCES),
                ],
            )
        ],
        id="list items are matched by name, not position",
    ),
    pytest.param(
        cq(),
        cq().replace("  cohortName: research\n", "  cohortName: research\n  stopPolicy: Hold\n"),
        [("~", "ClusterQueue/team", [("spec.stopPolicy", "None", "Hold")])],
        id="a field set to a non-default value differs from the default",
    ),
]


@pytest.mark.parametrize(("old", "new", "expected"), CASES)
def test_diff_cases(old: str, new: str, expected: list) -> None:
    result = diff_paths([("old.yaml", old)], [("new.yaml", new)])
    marks = {"added": "+", "removed": "-", "changed": "~"}
    got = [
        (marks[o.change], o.ref, [(f.path, show(f.old), show(f.new)) for f in o.fields])
        for o in result.objects
    ]
    assert got == expected


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_exit_status_is_0_when_equal_1_when_different_2_on_bad_input(tmp_path: Path) -> None:
    same = runner.invoke(
        app, ["diff", _write(tmp_path / "a.yaml", LIVE_CQ), _write(tmp_path / "b.yaml", cq())]
    )
    assert same.exit_code == 0 and "no differences" in same.output
    changed = runner.invoke(
        app, ["diff", str(tmp_path / "a.yaml"), _write(tmp_path / "c.yaml", cq(gpus="16"))]
    )
    assert changed.exit_code == 1
    assert f"~ ClusterQueue/team\n    {FLAVOR_PATH}: 8 → 16\n" in changed.output
    bad = runner.invoke(app, ["diff", str(tmp_path / "a.yaml"), _write(tmp_path / "d.yaml", "kind: [\n")])
    assert bad.exit_code == 2 and "malformed YAML" in bad.output
    missing = runner.invoke(app, ["diff", str(tmp_path / "a.yaml"), str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "cannot read" in missing.output


def test_json_output_and_directories(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    _write(tmp_path / "old" / "cq.yaml", cq())
    _write(tmp_path / "new" / "cq.yaml", cq(memory="32Gi"))
    _write(tmp_path / "new" / "lq.yaml", LQ)
    result = runner.invoke(app, ["diff", str(tmp_path / "old"), str(tmp_path / "new"), "-o", "json"])
    assert result.exit_code == 1
    document = json.loads(result.output)
    assert document["equal"] is False
    assert [(o["object"], o["change"]) for o in document["objects"]] == [
        ("ClusterQueue/team", "changed"),
        ("LocalQueue/ml/q", "added"),
    ]
    assert document["objects"][0]["fields"] == [
        {
            "path": "spec.resourceGroups[0].flavors[name=h100].resources[name=memory].nominalQuota",
            "old": "17179869184",
            "new": "34359738368",
        }
    ]


def test_an_import_equals_the_dump_it_came_from_in_its_kueue_objects(tmp_path: Path) -> None:
    dump = Path(__file__).parent / "data" / "cluster-dump.yaml"
    out = tmp_path / "imported"
    assert runner.invoke(app, ["import", "k8s", "-f", str(dump), "--out-dir", str(out)]).exit_code == 0
    result = runner.invoke(app, ["diff", str(dump), str(out / "cluster" / "kueue.yaml"), "-o", "json"])
    changes = {o["change"] for o in json.loads(result.output)["objects"]}
    kinds = {o["kind"] for o in json.loads(result.output)["objects"]}
    assert changes == {"removed"} and kinds == {"Node", "Workload"}
