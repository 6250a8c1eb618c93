"""NodePools expanded into core nodes, GPUModels in the catalogue, ``v1`` Nodes read back."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.api.loader import LoadResult, load
from gpuq.api.nodes_convert import NodePoolSummary
from gpuq.core.devices import per_gpu_layouts
from gpuq.core.gpus import DEFAULT_CATALOGUE
from gpuq.core.model import Taint
from gpuq.core.nodes import GPUSharing, Node, SharingMode
from gpuq.core.quantity import format_amount

ROOT = Path(__file__).resolve().parents[2]
GI = 2**30


def pool(name: str = "p", **spec: Any) -> dict[str, Any]:
    body = {"machineType": "a3-highgpu-8g", "count": 2, "cpu": "208", "memory": "1800Gi", **spec}
    return {"apiVersion": "gpuq.dev/v1alpha1", "kind": "NodePool", "metadata": {"name": name}, "spec": body}


def load_docs(tmp_path: Path, *docs: dict[str, Any]) -> LoadResult:
    file = tmp_path / "machines.yaml"
    file.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
    result = load([str(file)])
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    return result


H100 = {"model": "H100-80GB", "count": 8}

# id, pool, expected (name, allocatable, selected labels, sharing) of its first node
EXPANSIONS: list[tuple[str, dict[str, Any], tuple[str, dict[str, int], dict[str, str], GPUSharing]]] = [
    (
        "a CPU pool has cpu, memory and pods",
        pool(pods=64),
        ("p-00", {"cpu": 208000, "memory": 1800 * GI, "pods": 64}, {"gpuq.dev/node-pool": "p"}, GPUSharing()),
    ),
    (
        "whole GPUs with GFD labels",
        pool(gpu=H100),
        (
            "p-00",
            {"cpu": 208000, "memory": 1800 * GI, "nvidia.com/gpu": 8, "pods": 110},
            {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"},
            GPUSharing(),
        ),
    ),
    (
        "MIG mixed slices on every GPU",
        pool(gpu={**H100, "sharing": {"strategy": "mig-mixed", "migLayout": ["3g.40gb", "4g.40gb"]}}),
        (
            "p-00",
            {
                "cpu": 208000,
                "memory": 1800 * GI,
                "nvidia.com/mig-3g.40gb": 8,
                "nvidia.com/mig-4g.40gb": 8,
                "pods": 110,
            },
            {"nvidia.com/mig.strategy": "mixed"},
            GPUSharing(SharingMode.MIG_MIXED, (("3g.40gb", "4g.40gb"),)),
        ),
    ),
    (
        "MIG single from a named layout",
        pool(gpu={**H100, "sharing": {"strategy": "mig-single", "migLayout": "all-1g.10gb"}}),
        (
            "p-00",
            {"cpu": 208000, "memory": 1800 * GI, "nvidia.com/gpu": 56, "pods": 110},
            {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"},
            GPUSharing(SharingMode.MIG_SINGLE, (("all-1g.10gb",),)),
        ),
    ),
    (
        "time-slicing replicas, renamed",
        pool(gpu={**H100, "sharing": {"strategy": "time-slicing", "replicas": 4, "renameByDefault": True}}),
        (
            "p-00",
            {"cpu": 208000, "memory": 1800 * GI, "nvidia.com/gpu.shared": 32, "pods": 110},
            {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"},
            GPUSharing(SharingMode.TIME_SLICING, replicas=4, rename_by_default=True),
        ),
    ),
    (
        "fractional shares with the GPU memory override",
        pool(gpu={**H100, "memory": "40Gi", "sharing": {"strategy": "fractional"}}),
        (
            "p-00",
            {
                "cpu": 208000,
                "gpuq.dev/gpu-memory": 8 * 40960,
                "gpuq.dev/gpu-milli": 8000,
                "memory": 1800 * GI,
                "nvidia.com/gpu": 8,
                "pods": 110,
            },
            {"nvidia.com/gpu.memory": "40960"},
            GPUSharing(SharingMode.FRACTIONAL),
        ),
    ),
    (
        "spot pools carry GKE's spot label, zones and NVLink domains their labels",
        pool(capacityType="spot", zone="us-east5-a", nvlinkDomain="nvswitch", machineType="a3-megagpu-8g"),
        (
            "p-00",
            {"cpu": 208000, "memory": 1800 * GI, "pods": 110},
            {
                "cloud.google.com/gke-spot": "true",
                "gpuq.dev/capacity-type": "spot",
                "topology.kubernetes.io/zone": "us-east5-a",
                "gpuq.dev/nvlink-domain": "nvswitch",
                "node.kubernetes.io/instance-type": "a3-megagpu-8g",
                "kubernetes.io/hostname": "p-00",
            },
            GPUSharing(),
        ),
    ),
    (
        "topology labels follow spec.topologyLabels",
        pool(
            topology={"block": "b1", "rack": "r7"},
            topologyLabels={
                "block": "example.com/block",
                "rack": "example.com/rack",
                "host": "example.com/host",
            },
        ),
        (
            "p-00",
            {"cpu": 208000, "memory": 1800 * GI, "pods": 110},
            {"example.com/block": "b1", "example.com/rack": "r7", "example.com/host": "p-00"},
            GPUSharing(),
        ),
    ),
]


@pytest.mark.parametrize(("doc", "expected"), [c[1:] for c in EXPANSIONS], ids=[c[0] for c in EXPANSIONS])
def test_pool_expansion(
    tmp_path: Path, doc: dict[str, Any], expected: tuple[str, dict[str, int], dict[str, str], GPUSharing]
) -> None:
    name, allocatable, labels, sharing = expected
    node = load_docs(tmp_path, doc).nodes[0]
    assert (node.name, dict(node.allocatable), node.sharing) == (name, allocatable, sharing)
    assert {k: node.labels.get(k) for k in labels} == labels


@pytest.mark.parametrize(
    ("sizes", "names"),
    [
        ({"count": 3}, ["p-00", "p-01", "p-02"]),
        ({"count": 2, "max": 120}, ["p-000", "p-001"]),
        ({"min": 1, "max": 4}, ["p-00"]),
        ({"max": 4}, []),
        ({"count": 3, "nodeNames": ["gke-a", "gke-b"]}, ["gke-a", "gke-b", "p-02"]),
    ],
    ids=[
        "a fixed pool",
        "indexes are padded to the width of max",
        "count defaults to min",
        "min defaults to 0",
        "given node names come first, later nodes are indexed",
    ],
)
def test_node_names(tmp_path: Path, sizes: dict[str, int], names: list[str]) -> None:
    doc = pool()
    del doc["spec"]["count"]
    doc["spec"].update(sizes)
    assert [n.name for n in load_docs(tmp_path, doc).nodes] == names


def test_racks_fill_in_order(tmp_path: Path) -> None:
    doc = pool(count=5, max=6, topology={"block": "b", "racks": ["r1", "r2", "r3"], "nodesPerRack": 2})
    nodes = load_docs(tmp_path, doc).nodes
    racks = [n.labels["cloud.google.com/gce-topology-subblock"] for n in nodes]
    assert racks == ["r1", "r1", "r2", "r2", "r3"]
    assert {n.labels["cloud.google.com/gce-topology-block"] for n in nodes} == {"b"}


def test_racks_without_a_size_spread_max_evenly(tmp_path: Path) -> None:
    nodes = load_docs(tmp_path, pool(count=4, topology={"racks": ["r1", "r2"]})).nodes
    assert [n.labels["cloud.google.com/gce-topology-subblock"] for n in nodes] == ["r1", "r1", "r2", "r2"]


def test_node_pools_and_nodes_in_the_load_result(tmp_path: Path) -> None:
    taint = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}
    spot = pool("spot", count=1, max=3, capacityType="spot", gpu=H100, price=30.5, taints=[taint])
    result = load_docs(tmp_path, pool("cpu", zone="z1"), spot)
    assert result.node_pools == (
        NodePoolSummary("cpu", "a3-highgpu-8g", 2, 2, 2, "on-demand", "z1", None, None, 0),
        NodePoolSummary("spot", "a3-highgpu-8g", 1, 1, 3, "spot", None, 30.5, "H100-80GB", 8),
    )
    assert [n.name for n in result.nodes] == ["cpu-00", "cpu-01", "spot-00"]
    node = result.nodes[2]
    assert (node.pool, node.capacity_type, node.gpu_model, node.gpu_count, node.gpu_memory_mib) == (
        "spot",
        "spot",
        "H100-80GB",
        8,
        81559,
    )
    assert node.taints == (Taint("cloud.google.com/gke-spot", "true", "NoSchedule"),)


def test_a_gpu_model_extends_the_catalogue(tmp_path: Path) -> None:
    model = {
        "apiVersion": "gpuq.dev/v1alpha1",
        "kind": "GPUModel",
        "metadata": {"name": "MI300X"},
        "spec": {
            "product": "AMD-Instinct-MI300X",
            "memory": "192Gi",
            "computeCapability": 9.4,
            "pricePerHour": 4.5,
            "aliases": ["mi300"],
        },
    }
    result = load_docs(tmp_path, model, pool(gpu={"model": "mi300", "count": 8}))
    spec = result.gpu_catalogue.get("AMD-Instinct-MI300X")
    assert spec is not None and (spec.name, spec.memory_mib, spec.compute_major, spec.compute_minor) == (
        "MI300X",
        196608,
        9,
        4,
    )
    assert (spec.family, spec.hourly_price_usd, spec.aliases) == ("hopper", 4.5, ("mi300",))
    node = result.nodes[0]
    assert (node.gpu_model, node.labels["nvidia.com/gpu.product"]) == ("MI300X", "AMD-Instinct-MI300X")


# --- v1 Node ----------------------------------------------------------------------------------


def kube_node(node: Node, **status: Any) -> dict[str, Any]:
    """``node`` as ``kubectl get node -o yaml`` prints it."""
    taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.taints]
    allocatable = {k: format_amount(k, v) for k, v in node.allocatable.items()}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": dict(node.labels), "resourceVersion": "1", "uid": "u"},
        "spec": {"taints": taints, "podCIDR": "10.0.0.0/24", "providerID": "gce://p/z/n"},
        "status": {"allocatable": allocatable, "capacity": allocatable, **status},
    }


def _shape(node: Node) -> tuple[Any, ...]:
    spec = DEFAULT_CATALOGUE.get(node.gpu_model or "")
    layouts = tuple(sorted(layout) for layout in per_gpu_layouts(spec, node.gpu_count, node.sharing))
    sharing = (node.sharing.mode, node.sharing.replicas, node.sharing.rename_by_default, layouts)
    return (
        node.name,
        dict(node.labels),
        dict(node.allocatable),
        node.taints,
        node.gpu_model,
        node.gpu_count,
        node.gpu_memory_mib,
        node.pool,
        node.capacity_type,
        sharing,
    )


ROUND_TRIPS = [
    ("whole GPUs", {**H100}),
    (
        "MIG mixed",
        {**H100, "sharing": {"strategy": "mig-mixed", "migLayout": ["3g.40gb", "2g.20gb", "1g.10gb"]}},
    ),
    (
        "MIG mixed, per GPU",
        {
            "model": "A100-80GB",
            "count": 2,
            "sharing": {"strategy": "mig-mixed", "migLayout": [["7g.80gb"], ["3g.40gb", "3g.40gb"]]},
        },
    ),
    ("MIG single", {**H100, "sharing": {"strategy": "mig-single", "migLayout": "all-1g.10gb"}}),
    ("time-slicing", {**H100, "sharing": {"strategy": "time-slicing", "replicas": 3}}),
    (
        "time-slicing, renamed",
        {**H100, "sharing": {"strategy": "time-slicing", "replicas": 2, "renameByDefault": True}},
    ),
    ("fractional", {**H100, "sharing": {"strategy": "fractional"}}),
]


@pytest.mark.parametrize("gpu", [c[1] for c in ROUND_TRIPS], ids=[c[0] for c in ROUND_TRIPS])
def test_a_pool_node_printed_by_kubectl_reads_back_the_same(tmp_path: Path, gpu: dict[str, Any]) -> None:
    taint = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
    (generated,) = load_docs(tmp_path, pool("gen", count=1, gpu=gpu, taints=[taint], zone="z")).nodes
    doc = kube_node(generated)
    doc["metadata"]["name"] = "real"
    doc["metadata"]["labels"]["kubernetes.io/hostname"] = "real"
    (read,) = load_docs(tmp_path, doc).nodes
    expected = _shape(generated)
    assert _shape(read) == ("real", {**expected[1], "kubernetes.io/hostname": "real"}, *expected[2:])


KUBECTL = """\
apiVersion: v1
kind: List
metadata: {resourceVersion: ""}
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: gke-a3-pool-1
    creationTimestamp: "2025-01-01T00:00:00Z"
    annotations: {node.alpha.kubernetes.io/ttl: "0"}
    labels:
      kubernetes.io/hostname: gke-a3-pool-1
      nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
      nvidia.com/gpu.count: "8"
      cloud.google.com/gke-spot: "true"
      cloud.google.com/gke-nodepool: a3-pool
  spec:
    podCIDR: 10.4.1.0/24
    podCIDRs: [10.4.1.0/24]
    providerID: gce://proj/us-central1-a/gke-a3-pool-1
  status:
    addresses: [{type: InternalIP, address: 10.128.0.5}]
    allocatable:
      {cpu: 207830m, ephemeral-storage: "47060071478", memory: 1857254408Ki, nvidia.com/gpu: "8", pods: "110"}
    capacity: {cpu: "208", memory: 1919096472Ki, nvidia.com/gpu: "8", pods: "110"}
    conditions:
    - type: MemoryPressure
      status: "False"
      lastHeartbeatTime: "2025-01-01T00:00:00Z"
      reason: KubeletHasSufficientMemory
    - {type: Ready, status: "True", lastTransitionTime: "2025-01-01T00:00:00Z", reason: KubeletReady}
    daemonEndpoints: {kubeletEndpoint: {Port: 10250}}
    images: [{names: [nvcr.io/nvidia/k8s-device-plugin], sizeBytes: 12345}]
    nodeInfo: {kubeletVersion: v1.30.5-gke.1, architecture: amd64}
    volumesInUse: []
    volumesAttached: []
- apiVersion: v1
  kind: Node
  metadata:
    name: gke-a3-pool-2
    labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  spec:
    unschedulable: true
  status:
    capacity: {cpu: "208", memory: 1800Gi, nvidia.com/gpu: "8"}
- apiVersion: v1
  kind: Node
  metadata: {name: cpu-1}
  status:
    allocatable: {cpu: "16", memory: 64Gi}
    conditions:
    - {type: Ready, status: Unknown}
"""


def test_kubectl_nodes_load_without_warnings(tmp_path: Path) -> None:
    file = tmp_path / "nodes.yaml"
    file.write_text(KUBECTL)
    result = load([str(file)])
    assert result.diagnostics == ()
    nodes = {n.name: n for n in result.nodes}
    first, second, cpu = nodes["gke-a3-pool-1"], nodes["gke-a3-pool-2"], nodes["cpu-1"]
    assert (first.gpu_model, first.gpu_count, first.capacity_type, first.unschedulable) == (
        "H100-80GB",
        8,
        "spot",
        False,
    )
    assert dict(first.allocatable)["cpu"] == 207830 and dict(second.allocatable)["memory"] == 1800 * GI
    assert (second.gpu_count, second.unschedulable) == (8, True)
    assert (first.pool, second.pool) == ("a3-pool", None), "the GKE node pool label names the pool"
    assert (cpu.gpu_model, cpu.gpu_count, cpu.unschedulable) == (None, 0, True)


def test_an_unknown_product_keeps_the_node_without_a_model(tmp_path: Path) -> None:
    text = KUBECTL.replace(
        "NVIDIA-H100-80GB-HBM3\n      nvidia.com/gpu.count", "NVIDIA-X1\n      nvidia.com/gpu.count"
    )
    file = tmp_path / "nodes.yaml"
    file.write_text(text)
    result = load([str(file)])
    assert [d.severity for d in result.diagnostics] == ["warning"]
    node = next(n for n in result.nodes if n.name == "gke-a3-pool-1")
    assert (node.gpu_model, node.gpu_count, node.labels["nvidia.com/gpu.product"]) == (None, 8, "NVIDIA-X1")


# --- shipped manifests ------------------------------------------------------------------------


def test_the_documented_example_loads(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "manifests" / "nodepool.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", doc, re.S)
    assert blocks
    for index, block in enumerate(blocks):
        file = tmp_path / f"block{index}.yaml"
        file.write_text(textwrap.dedent(block))
        result = load([str(file)])
        assert result.errors == () and result.warnings == (), "\n".join(map(str, result.diagnostics))
        assert result.nodes


def test_the_example_nodes_hold_every_flavor_quota() -> None:
    result = load([str(ROOT / "examples" / "symbol-retail")])
    assert result.errors == () and result.warnings == (), "\n".join(map(str, result.diagnostics))
    assert result.config is not None
    for name, flavor in result.config.flavors.items():
        nodes = [n for n in result.nodes if all(n.labels.get(k) == v for k, v in flavor.node_labels.items())]
        assert nodes, name
        for resource in ("cpu", "memory", "nvidia.com/gpu"):
            quota = sum(
                f.resources[resource].nominal
                for cq in result.config.cluster_queues.values()
                for group in cq.resource_groups
                for f in group.flavors
                if f.name == name and resource in f.resources
            )
            held = sum(n.allocatable.get(resource, 0) for n in nodes)
            assert 0 < quota <= held, (name, resource, quota, held)
    spread = {
        n.labels["cloud.google.com/gce-topology-subblock"] for n in result.nodes if n.pool == "h100-ondemand"
    }
    assert len(spread) == 2 and "retail-gpus" in result.config.topologies
