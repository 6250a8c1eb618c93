"""gpuq.api.machine_checks: every NodePool, GPUModel and Node rule, with file, line and field."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpuq.api.loader import LoadResult, load

POOL = """\
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata:
  name: h100
spec:
  machineType: a3-highgpu-8g
  count: 2
  max: 4
  cpu: "208"
  memory: 1800Gi
  gpu:
    model: H100-80GB
    count: 8
    sharing:
      strategy: none
  capacityType: on-demand
  zone: us-central1-a
  labels:
    team: ml
  taints:
  - {key: gpu, value: "true", effect: NoSchedule}
  topology:
    block: b1
    rack: r1
  price: 88.0
"""

GPU_MODEL = """\
apiVersion: gpuq.dev/v1alpha1
kind: GPUModel
metadata:
  name: MI300X
spec:
  product: AMD-Instinct-MI300X
  memory: 192Gi
  computeCapability: "9.4"
  pricePerHour: 4.0
"""

NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: gpu-node-1
  labels:
    nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
spec:
  taints:
  - {key: gpu, effect: NoSchedule}
status:
  allocatable: {cpu: "200", memory: 1700Gi, nvidia.com/gpu: "8", pods: "110"}
"""

Edit = Callable[[str], str]


def sub(old: str, new: str, target: str = "pool") -> tuple[str, str, str]:
    return (target, old, new)


def load_text(tmp_path: Path, text: str, name: str = "machines.yaml") -> tuple[str, LoadResult]:
    file = tmp_path / name
    file.write_text(text)
    return str(file), load([str(file)])


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def documents(pool: str = POOL, model: str = GPU_MODEL, node: str = NODE) -> str:
    return "---\n".join((pool, model, node))


# id, (which document, text replaced, replacement), (kind, name, field, line needle, message substring)
ERRORS: list[tuple[str, tuple[str, str, str], tuple[str, str, str, str, str]]] = [
    (
        "an unknown GPU model is an error listing the known ones",
        sub("model: H100-80GB", "model: H1000"),
        (
            "NodePool",
            "h100",
            "spec.gpu.model",
            "model: H1000",
            "unknown GPU model 'H1000'; known: A10, A100-40GB",
        ),
    ),
    (
        "a negative node count is an error",
        sub("count: 2\n", "count: -1\n"),
        ("NodePool", "h100", "spec.count", "count: -1", "must be greater than or equal to 0"),
    ),
    (
        "an absurd node count is an error",
        sub("count: 2\n  max: 4", "count: 20000\n  max: 20000"),
        ("NodePool", "h100", "spec.count", "count: 20000", "more than 10000 in one pool"),
    ),
    (
        "zero GPUs per node is an error",
        sub("count: 8", "count: 0"),
        ("NodePool", "h100", "spec.gpu.count", "count: 0", "must be at least 1"),
    ),
    (
        "an absurd GPU count per node is an error",
        sub("count: 8", "count: 64"),
        ("NodePool", "h100", "spec.gpu.count", "count: 64", "more than 16 per node"),
    ),
    (
        "min above max is an error",
        sub("max: 4", "max: 4\n  min: 5"),
        ("NodePool", "h100", "spec.min", "min: 5", "min 5 is greater than max 4"),
    ),
    (
        "a count outside min and max is an error",
        sub("count: 2\n", "count: 6\n"),
        ("NodePool", "h100", "spec.count", "count: 6", "count 6 is greater than max 4"),
    ),
    (
        "a count below min is an error",
        sub("max: 4", "max: 4\n  min: 3"),
        ("NodePool", "h100", "spec.count", "count: 2", "count 2 is outside [min, max] = [3, 4]"),
    ),
    (
        "a max of zero is an error",
        sub("count: 2\n  max: 4", "max: 0"),
        ("NodePool", "h100", "spec.max", "max: 0", "a pool needs max ≥ 1"),
    ),
    (
        "a pool without any size is an error",
        sub("  count: 2\n  max: 4\n", ""),
        ("NodePool", "h100", "spec", "spec:", "a pool needs max ≥ 1"),
    ),
    (
        "MIG slices that collide on one GPU are an error naming them",
        sub("strategy: none", "strategy: mig-mixed\n      migLayout: [4g.40gb, 4g.40gb]"),
        ("NodePool", "h100", "spec.gpu.sharing.migLayout", "migLayout", "4g.40gb"),
    ),
    (
        "a MIG layout that uses too many slices is an error",
        sub("strategy: none", "strategy: mig-mixed\n      migLayout: [7g.80gb, 1g.10gb]"),
        ("NodePool", "h100", "spec.gpu.sharing.migLayout", "migLayout", "compute slices"),
    ),
    (
        "an unknown MIG profile is an error",
        sub("strategy: none", "strategy: mig-single\n      migLayout: all-9g.90gb"),
        ("NodePool", "h100", "spec.gpu.sharing.migLayout", "migLayout", "unknown MIG profile '9g.90gb'"),
    ),
    (
        "a per-GPU layout points at the GPU's entry",
        sub(
            "count: 8\n    sharing:\n      strategy: none",
            "count: 2\n    sharing:\n      strategy: mig-mixed\n      migLayout:\n"
            "      - [3g.40gb, 4g.40gb]\n      - [4g.40gb, 4g.40gb]",
        ),
        ("NodePool", "h100", "spec.gpu.sharing.migLayout[1]", "- [4g.40gb, 4g.40gb]", "GPU 1:"),
    ),
    (
        "MIG single with two profiles is an error",
        sub("strategy: none", "strategy: mig-single\n      migLayout: [3g.40gb, 4g.40gb]"),
        ("NodePool", "h100", "spec.gpu.sharing.migLayout", "migLayout", "same single profile"),
    ),
    (
        "MIG on a GPU without MIG is an error naming the MIG-capable models",
        sub(
            "model: H100-80GB\n    count: 8\n    sharing:\n      strategy: none",
            "model: L4\n    count: 8\n    sharing:\n      strategy: mig-mixed\n      migLayout: all-1g.10gb",
        ),
        (
            "NodePool",
            "h100",
            "spec.gpu.sharing.strategy",
            "strategy: mig-mixed",
            "MIG-capable models: A100-40GB",
        ),
    ),
    (
        "replicas without time-slicing are an error",
        sub("strategy: none", "strategy: none\n      replicas: 4"),
        ("NodePool", "h100", "spec.gpu.sharing.replicas", "replicas: 4", "needs time-slicing"),
    ),
    (
        "time-slicing with one replica is an error",
        sub("strategy: none", "strategy: time-slicing\n      replicas: 1"),
        ("NodePool", "h100", "spec.gpu.sharing.replicas", "replicas: 1", "at least 2"),
    ),
    (
        "renameByDefault without time-slicing is an error",
        sub("strategy: none", "strategy: fractional\n      renameByDefault: true"),
        (
            "NodePool",
            "h100",
            "spec.gpu.sharing.renameByDefault",
            "renameByDefault",
            "only applies to time-slicing",
        ),
    ),
    (
        "a MIG layout without a MIG strategy is an error",
        sub("strategy: none", "strategy: none\n      migLayout: all-1g.10gb"),
        ("NodePool", "h100", "spec.gpu.sharing.migLayout", "migLayout", "migLayout is set but the mode is"),
    ),
    (
        "an unknown sharing strategy is an error",
        sub("strategy: none", "strategy: mps"),
        ("NodePool", "h100", "spec.gpu.sharing.strategy", "strategy: mps", "Input should be"),
    ),
    (
        "a bad taint effect is an error",
        sub("effect: NoSchedule", "effect: Sometimes"),
        (
            "NodePool",
            "h100",
            "spec.taints[0].effect",
            "effect: Sometimes",
            "'NoSchedule', 'PreferNoSchedule'",
        ),
    ),
    (
        "a duplicate taint is an error",
        sub(
            '  - {key: gpu, value: "true", effect: NoSchedule}',
            "  - {key: gpu, effect: NoSchedule}\n  - {key: gpu, value: x, effect: NoSchedule}",
        ),
        ("NodePool", "h100", "spec.taints[1]", "value: x", "duplicate taint gpu:NoSchedule"),
    ),
    (
        "a CPU amount that is not a quantity is an error",
        sub('cpu: "208"', "cpu: lots"),
        ("NodePool", "h100", "spec.cpu", "cpu: lots", "'lots' is not a quantity"),
    ),
    (
        "zero CPUs is an error",
        sub('cpu: "208"', "cpu: 0"),
        ("NodePool", "h100", "spec.cpu", "cpu: 0", "must be greater than 0"),
    ),
    (
        "memory without a unit is an error",
        sub("memory: 1800Gi", "memory: 1800"),
        ("NodePool", "h100", "spec.memory", "memory: 1800", "less than 1Gi per node"),
    ),
    (
        "an absurd GPU memory override is an error",
        sub("count: 8\n", "count: 8\n    memory: 80\n"),
        ("NodePool", "h100", "spec.gpu.memory", "memory: 80", "between 1Gi and 1Ti"),
    ),
    (
        "zero pods per node is an error",
        sub("capacityType: on-demand", "capacityType: on-demand\n  pods: 0"),
        ("NodePool", "h100", "spec.pods", "pods: 0", "between 1 and 1000"),
    ),
    (
        "an unknown capacity type is an error",
        sub("capacityType: on-demand", "capacityType: preemptible"),
        ("NodePool", "h100", "spec.capacityType", "capacityType", "'spot', 'flex-start' or 'calendar'"),
    ),
    (
        "a missing machine type is an error",
        sub("  machineType: a3-highgpu-8g\n", ""),
        ("NodePool", "h100", "spec.machineType", "spec:", "is required"),
    ),
    (
        "a label that contradicts a generated one is an error",
        sub("team: ml", "nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB"),
        ("NodePool", "h100", "spec.labels[nvidia.com/gpu.product]", "NVIDIA-A100", "contradicts"),
    ),
    (
        "an invalid label value is an error",
        sub("team: ml", "team: machine learning"),
        ("NodePool", "h100", "spec.labels.team", "team: machine", "invalid label value"),
    ),
    (
        "rack and racks together are an error",
        sub("rack: r1", "rack: r1\n    racks: [r1, r2]"),
        ("NodePool", "h100", "spec.topology.racks", "racks:", "either rack or racks"),
    ),
    (
        "racks too small for max are an error",
        sub("rack: r1", "racks: [r1, r2]\n    nodesPerRack: 1"),
        (
            "NodePool",
            "h100",
            "spec.topology.nodesPerRack",
            "nodesPerRack",
            "hold 2 nodes, fewer than the pool's max 4",
        ),
    ),
    (
        "nodesPerRack without racks is an error",
        sub("rack: r1", "rack: r1\n    nodesPerRack: 2"),
        ("NodePool", "h100", "spec.topology.nodesPerRack", "nodesPerRack", "only applies with racks"),
    ),
    (
        "a duplicate rack is an error",
        sub("rack: r1", "racks: [r1, r1]"),
        ("NodePool", "h100", "spec.topology.racks[1]", "racks:", "duplicate rack 'r1'"),
    ),
    (
        "a pool name too long for its node hostnames is an error",
        sub("name: h100", "name: " + "h" * 62),
        ("NodePool", "h" * 62, "metadata.name", "name: hhh", "longer than 63 characters"),
    ),
    (
        "a negative price is an error",
        sub("price: 88.0", "price: -1"),
        ("NodePool", "h100", "spec.price", "price: -1", "greater than or equal to 0"),
    ),
    (
        "a GPUModel with an unknown MIG table is an error",
        sub("pricePerHour: 4.0", "pricePerHour: 4.0\n  migTable: MI300X", "model"),
        ("GPUModel", "MI300X", "spec.migTable", "migTable", "unknown MIG table 'MI300X'; known: A100-40GB"),
    ),
    (
        "a GPUModel with a malformed compute capability is an error",
        sub('computeCapability: "9.4"', "computeCapability: nine", "model"),
        ("GPUModel", "MI300X", "spec.computeCapability", "computeCapability", "must be major.minor"),
    ),
    (
        "a GPUModel with memory without a unit is an error",
        sub("memory: 192Gi", "memory: 192", "model"),
        ("GPUModel", "MI300X", "spec.memory", "memory: 192", "between 1Gi and 1Ti"),
    ),
    (
        "a GPUModel name with spaces is an error",
        sub("name: MI300X", "name: MI 300X", "model"),
        ("GPUModel", "MI 300X", "metadata.name", "name: MI 300X", "invalid name"),
    ),
    (
        "a Node with a negative allocatable is an error",
        sub('nvidia.com/gpu: "8"', 'nvidia.com/gpu: "-8"', "node"),
        (
            "Node",
            "gpu-node-1",
            "status.allocatable[nvidia.com/gpu]",
            "allocatable:",
            "greater than or equal to 0",
        ),
    ),
    (
        "a Node with a bad taint effect is an error",
        sub("effect: NoSchedule", "effect: Never", "node"),
        ("Node", "gpu-node-1", "spec.taints[0].effect", "effect: Never", "Input should be"),
    ),
    (
        "a pool naming more nodes than its max is an error",
        sub("  price: 88.0", "  price: 88.0\n  nodeNames: [a, b, c, d, e]"),
        ("NodePool", "h100", "spec.nodeNames", "nodeNames:", "names 5 nodes but the pool holds at most 4"),
    ),
    (
        "a pool naming one node twice is an error",
        sub("  price: 88.0", "  price: 88.0\n  nodeNames: [gke-a, gke-a]"),
        ("NodePool", "h100", "spec.nodeNames[1]", "nodeNames:", "node name 'gke-a' is given twice"),
    ),
    (
        "a pool's node name that is no hostname is an error",
        sub("  price: 88.0", "  price: 88.0\n  nodeNames: [GKE_A]"),
        ("NodePool", "h100", "spec.nodeNames[0]", "nodeNames:", "invalid node name 'GKE_A'"),
    ),
    (
        "a Node named like a pool's given node name is an error",
        sub("  price: 88.0", "  price: 88.0\n  nodeNames: [gpu-node-1]"),
        ("Node", "gpu-node-1", "metadata.name", "name: gpu-node-1", "is also generated by NodePool/h100"),
    ),
    (
        "a Node named like a pool's node is an error",
        sub("name: gpu-node-1", "name: h100-03", "node"),
        ("Node", "h100-03", "metadata.name", "name: h100-03", "is also generated by NodePool/h100"),
    ),
]


def _apply(edit: tuple[str, str, str]) -> str:
    target, old, new = edit
    parts = {"pool": POOL, "model": GPU_MODEL, "node": NODE}
    assert old in parts[target], old
    parts[target] = parts[target].replace(old, new, 1)
    return documents(parts["pool"], parts["model"], parts["node"])


@pytest.mark.parametrize(("edit", "expected"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_error(tmp_path: Path, edit: tuple[str, str, str], expected: tuple[str, str, str, str, str]) -> None:
    kind, name, field, needle, message = expected
    text = _apply(edit)
    path, result = load_text(tmp_path, text)
    found = [
        d for d in result.errors if (d.kind, d.name, d.field) == (kind, name, field) and message in d.message
    ]
    assert found, "\n".join(map(str, result.diagnostics))
    start = line_of(text, f"kind: {kind}")
    expected_line = start + line_of("\n".join(text.splitlines()[start - 1 :]), needle) - 1
    assert (found[0].path, found[0].line) == (path, expected_line), str(found[0])
    assert result.config is None and result.nodes == () and result.node_pools == ()


def test_base_machines_are_valid(tmp_path: Path) -> None:
    _, result = load_text(tmp_path, documents())
    assert result.diagnostics == ()
    assert [n.name for n in result.nodes] == ["gpu-node-1", "h100-00", "h100-01"]


def test_duplicate_node_pools_report_both(tmp_path: Path) -> None:
    text = POOL + "---\n" + POOL
    path, result = load_text(tmp_path, text)
    lines = sorted(d.line for d in result.errors if "duplicate NodePool" in d.message)
    assert lines == [1, line_of(text, "---") + 1] and all(d.path == path for d in result.errors)
    assert result.nodes == ()


def test_malformed_yaml_in_a_nodes_file_loads_nothing(tmp_path: Path) -> None:
    good = tmp_path / "a.yaml"
    good.write_text(POOL)
    bad = tmp_path / "b-nodes.yaml"
    bad.write_text(POOL.replace("  labels:\n    team: ml\n", "  labels: [team: ml\n"))
    result = load([str(good), str(bad)])
    (error,) = result.errors
    assert error.path == str(bad) and error.line == 19 and "malformed YAML" in error.message
    assert result.config is None and result.nodes == ()


FLAVOR = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec:
  nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  topologyName: tas
"""
TOPOLOGY = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: tas}
spec:
  levels:
  - nodeLabel: cloud.google.com/gce-topology-block
  - nodeLabel: example.com/row
  - nodeLabel: kubernetes.io/hostname
"""

# id, text, (kind, name, field, line needle, message substring)
WARNINGS: list[tuple[str, str, tuple[str, str, str, str, str]]] = [
    (
        "a Topology level the flavor's nodes do not carry is a warning",
        "---\n".join((POOL, FLAVOR, TOPOLOGY)),
        (
            "Topology",
            "tas",
            "spec.levels[1].nodeLabel",
            "example.com/row",
            "do not carry label 'example.com/row'",
        ),
    ),
    (
        "a flavor no node matches is a warning",
        "---\n".join((POOL, FLAVOR.replace("H100-80GB-HBM3", "B200"), TOPOLOGY)),
        ("ResourceFlavor", "h100", "spec.nodeLabels", "nodeLabels", "no node carries these labels"),
    ),
    (
        "an unknown GPU product on a Node is a warning",
        NODE.replace("NVIDIA-H100-80GB-HBM3", "NVIDIA-Z9"),
        ("Node", "gpu-node-1", "metadata.labels[nvidia.com/gpu.product]", "NVIDIA-Z9", "unknown GPU product"),
    ),
    (
        "a GPUModel replacing a built-in one is a warning",
        GPU_MODEL.replace("name: MI300X", "name: H100-80GB"),
        ("GPUModel", "H100-80GB", "metadata.name", "name: H100", "replaces the built-in GPU model"),
    ),
    (
        "an unknown NodePool field is a warning",
        POOL.replace("  zone:", "  colour: red\n  zone:"),
        ("NodePool", "h100", "spec.colour", "colour", "unknown field"),
    ),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in WARNINGS], ids=[c[0] for c in WARNINGS])
def test_warning(tmp_path: Path, text: str, expected: tuple[str, str, str, str, str]) -> None:
    kind, name, field, needle, message = expected
    path, result = load_text(tmp_path, text)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    found = [d for d in result.warnings if (d.kind, d.name, d.field) == (kind, name, field)]
    assert found and message in found[0].message, "\n".join(map(str, result.diagnostics))
    assert (found[0].path, found[0].line) == (path, line_of(text, needle))
    assert result.config is not None
