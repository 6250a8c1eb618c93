"""Bad dumps: every problem is named by object and field; errors write nothing, warnings do not stop."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuq.cli import app
from gpuq.k8s.importer import import_dump

runner = CliRunner()

QUEUES = """\
- apiVersion: kueue.x-k8s.io/v1beta1
  kind: ResourceFlavor
  metadata: {name: gpu, uid: 0c5e2f1a, resourceVersion: "7"}
- apiVersion: kueue.x-k8s.io/v1beta1
  kind: ClusterQueue
  metadata: {name: team}
  spec:
    namespaceSelector: {}
    resourceGroups:
    - coveredResources: [nvidia.com/gpu]
      flavors:
      - name: gpu
        resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
- apiVersion: kueue.x-k8s.io/v1beta1
  kind: LocalQueue
  metadata: {name: q, namespace: ml}
  spec: {clusterQueue: team}
"""
GPU_NODE = """\
- apiVersion: v1
  kind: Node
  metadata:
    name: gpu-node-1
    labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count: "8",
             node.kubernetes.io/instance-type: a3-highgpu-8g}
  status:
    allocatable: {cpu: "200", memory: 1800Gi, nvidia.com/gpu: "8", pods: "110"}
"""


def dump(*items: str) -> str:
    return "apiVersion: v1\nkind: List\nitems:\n" + "".join(items)


def workload(name: str, status: str = "", cluster_queue: str = "team") -> str:
    text = f"""\
- apiVersion: kueue.x-k8s.io/v1beta1
  kind: Workload
  metadata: {{name: {name}, namespace: ml, creationTimestamp: "2025-06-01T10:00:00Z"}}
  spec:
    queueName: q
    podSets:
    - name: main
      count: 1
      template:
        spec:
          containers:
          - name: c
            resources: {{requests: {{nvidia.com/gpu: "1"}}}}
"""
    if status == "admitted":
        text += f"""\
  status:
    admission:
      clusterQueue: {cluster_queue}
      podSetAssignments: [{{name: main, count: 1, flavors: {{nvidia.com/gpu: gpu}}}}]
    conditions:
    - {{type: QuotaReserved, status: "True", lastTransitionTime: "2025-06-01T10:00:05Z"}}
"""
    if status == "finished-early":
        text += """\
  status:
    admission:
      clusterQueue: team
      podSetAssignments: [{name: main, count: 1, flavors: {nvidia.com/gpu: gpu}}]
    conditions:
    - {type: Admitted, status: "True", lastTransitionTime: "2025-06-01T11:00:00Z"}
    - {type: Finished, status: "True", reason: Succeeded, lastTransitionTime: "2025-06-01T10:30:00Z"}
"""
    return text


CASES = [
    pytest.param(
        dump(
            QUEUES,
            GPU_NODE,
            "- {apiVersion: example.com/v1, kind: Widget, metadata: {name: w-0, namespace: ml}}\n",
        ),
        "warning",
        "Widget/ml/w-0 (example.com/v1) is not a kind gpuq imports; skipped",
        id="an unknown kind is skipped with a warning naming it",
    ),
    pytest.param(
        dump(QUEUES, GPU_NODE, "- {apiVersion: v1, kind: Service, metadata: {name: svc-0, namespace: ml}}\n"),
        "warning",
        "not scheduled by gpuq, ignored: 1 Service",
        id="a built-in kind that schedules nothing is listed as not scheduled",
    ),
    pytest.param(
        dump(QUEUES, GPU_NODE, "- {apiVersion: v1, kind: Pod, metadata: {name: runner-0, namespace: ml}}\n"),
        "warning",
        "Pod/runner-0: spec: warning: expected a mapping, got missing: left out",
        id="a workload source the loader cannot read is left out, the import goes on",
    ),
    pytest.param(
        dump(QUEUES, GPU_NODE, workload("no-status")),
        "warning",
        "Workload/ml/no-status: status: warning: no status (Kueue has not reconciled it yet): "
        "imported as pending",
        id="a workload without status is imported as pending, with a warning",
    ),
    pytest.param(
        dump(
            QUEUES,
            GPU_NODE,
            "- {apiVersion: v1, kind: Node, metadata: {name: cpu-1}, status: {allocatable: {cpu: '8', "
            "memory: 32Gi}}}\n",
        ),
        "warning",
        "Node/cpu-1: metadata.labels: warning: no GPU labels and no GPUs: a CPU-only node, kept",
        id="a node without GPU labels is kept as a CPU-only node",
    ),
    pytest.param(
        dump(QUEUES, GPU_NODE, "- {apiVersion: v1, kind: Node, metadata: {name: bare-1}, status: {}}\n"),
        "error",
        "Node/bare-1: status: status.allocatable (and capacity) is missing",
        id="a node without allocatable is an error",
    ),
    pytest.param(
        "apiVersion: v1\nkind: List\nitems:\n- kind: Node\n  metadata: {name: x\n",
        "error",
        "malformed YAML",
        id="malformed YAML is an error with its line",
    ),
    pytest.param(
        "apiVersion: v1\nkind: List\nitems: []\nmetadata: {resourceVersion: ''}\n",
        "error",
        "the dump holds no objects",
        id="an empty list is an error",
    ),
    pytest.param(
        dump(QUEUES, GPU_NODE, workload("lost", "admitted", cluster_queue="gone")),
        "error",
        "Workload/ml/lost: status.admission.clusterQueue: admitted to ClusterQueue 'gone', which the dump "
        "does not hold",
        id="a workload admitted to a missing ClusterQueue is an error",
    ),
    pytest.param(
        dump(QUEUES, GPU_NODE, workload("odd", "finished-early")),
        "warning",
        "Workload/ml/odd: status.conditions: warning: the Finished condition is not later than the admission",
        id="a workload finished before it was admitted is left out of the trace",
    ),
    pytest.param(
        dump(
            QUEUES,
            GPU_NODE,
            "- {apiVersion: kueue.x-k8s.io/v1beta1, kind: LocalQueue, metadata: {name: b, "
            "namespace: ml}, spec: {}}\n",
        ),
        "error",
        "LocalQueue/b: spec.clusterQueue: is required",
        id="an object of an imported kind that fails to type is an error",
    ),
]


@pytest.mark.parametrize(("text", "severity", "message"), CASES)
def test_bad_dumps_are_reported_by_object_and_field(text: str, severity: str, message: str) -> None:
    result = import_dump([("dump.yaml", text)])
    found = [str(d) for d in result.diagnostics]
    assert any(message in line for line in found), found
    if severity == "error":
        assert result.errors and result.files == {}
    else:
        assert not result.errors, found
        assert "scenario.yaml" in result.files


def test_errors_exit_1_and_write_nothing(tmp_path: Path) -> None:
    source = tmp_path / "dump.yaml"
    source.write_text(dump(QUEUES, GPU_NODE, workload("lost", "admitted", cluster_queue="gone")))
    target = tmp_path / "out"
    result = runner.invoke(app, ["import", "k8s", "-f", str(source), "--out-dir", str(target)])
    assert result.exit_code == 1
    assert "nothing written" in result.output
    assert not target.exists()


def test_stdin_and_a_non_empty_directory(tmp_path: Path) -> None:
    target = tmp_path / "out"
    result = runner.invoke(app, ["import", "k8s", "--out-dir", str(target)], input=dump(QUEUES, GPU_NODE))
    assert result.exit_code == 0, result.output
    assert (target / "scenario.yaml").is_file()
    again = runner.invoke(app, ["import", "k8s", "--out-dir", str(target)], input=dump(QUEUES, GPU_NODE))
    assert again.exit_code == 2 and "not empty" in again.output
