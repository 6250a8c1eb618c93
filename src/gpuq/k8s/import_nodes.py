"""Real nodes as gpuq NodePools: identical nodes grouped, each group checked to expand back to its nodes.

Steps (``import_nodes``):

1. read every ``v1`` Node as gpuq's loader does (:func:`gpuq.api.kube_nodes.node_from_v1`): GPU
   model, count and sharing (MIG layout, time-slicing replicas) from GPU Feature Discovery's labels;
   a GPU product the catalogue lacks becomes a ``GPUModel`` built from GFD's labels;
2. set aside, as ``v1`` Nodes, what a pool cannot express: cordoned or NotReady nodes, GPUs of an
   unknown model; with ``mode="nodes"`` every node stays a ``v1`` Node;
3. group the rest by everything a NodePool holds: labels (instance type, zone, capacity type,
   topology block, the cloud's pool name...) except per-node ones (hostname, the Topology's rack and
   host levels, GFD's timestamp), taints, GPU model/count/sharing, allocatable cpu, memory, pods and
   device resources; a group whose racks hold unequal node counts is split per rack;
4. write one NodePool per group, its ``nodeNames`` the real nodes' names (a pool groups nodes, it
   never renames them: recorded TAS assignments name real hosts), expand it with gpuq's own
   :func:`~gpuq.api.nodes_convert.expand_pool` and compare every generated node with its real one;
   a group that does not come back identical (a host label that is not the node's name, too)
   stays ``v1`` Nodes, with a warning that says what differed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuq.api import machines, nodes_convert
from gpuq.api.diagnostics import Diagnostic
from gpuq.api.kube_nodes import GKE_ACCELERATOR_LABEL, MEMORY_LABEL, POOL_LABELS, base_product, node_from_v1
from gpuq.api.machines import HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, PRODUCT_LABEL, ZONE_LABEL, TopologyLabels
from gpuq.core.devices import gfd_labels
from gpuq.core.gpus import GPUCatalogue, GPUModelSpec
from gpuq.core.nodes import Node, SharingMode
from gpuq.k8s.import_dump import DumpObject, cleaned, mapping

GPUQ_API = "gpuq.dev/v1alpha1"
PER_NODE_LABELS = frozenset(
    {HOSTNAME_LABEL, "cloud.google.com/gce-topology-host", "nvidia.com/gfd.timestamp"}
)
KEPT_RESOURCES = ("cpu", "memory", "pods")
_DEVICE_PREFIXES = ("nvidia.com/", "gpuq.dev/")
_STRATEGY = {
    SharingMode.MIG_MIXED: "mig-mixed",
    SharingMode.MIG_SINGLE: "mig-single",
    SharingMode.TIME_SLICING: "time-slicing",
    SharingMode.FRACTIONAL: "fractional",
}


@dataclass(frozen=True)
class PoolSummary:
    """One imported pool: its real nodes in pool order (the NodePool's ``nodeNames``)."""

    name: str
    nodes: tuple[str, ...]
    machine_type: str
    gpu_model: str | None
    gpus_per_node: int
    sharing: str
    capacity_type: str
    zone: str | None
    block: str | None
    racks: tuple[str, ...]
    dropped: tuple[str, ...]  # allocatable resources a NodePool does not carry (ephemeral-storage...)


@dataclass
class NodeImport:
    """NodePools, GPUModels and the nodes kept as ``v1`` Nodes (with why), in output order."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    pools: list[PoolSummary] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)


@dataclass(frozen=True)
class _Read:
    obj: DumpObject
    node: Node


def import_nodes(nodes: Sequence[DumpObject], topologies: Sequence[DumpObject], mode: str) -> NodeImport:
    """The nodes of the dump as NodePools (``mode="pools"``) or ``v1`` Nodes (``mode="nodes"``)."""
    out = NodeImport()
    levels = topology_labels(topologies, out.diagnostics)
    models = _gpu_models(nodes, out)
    catalogue = GPUCatalogue(models)
    read = [_Read(obj, node_from_v1(obj.model, catalogue)) for obj in nodes if _has_allocatable(obj, out)]
    pooled: list[_Read] = []
    for item in read:
        why = _kept_because(item, mode)
        if why:
            out.kept.append((item.node.name, why))
            if mode != "nodes":
                out.diagnostics.append(item.obj.diagnostic((), f"kept as a v1 Node: {why}", "warning"))
        else:
            pooled.append(item)
        if item.node.gpu_model is None and not _devices(item.node):
            message = "no GPU labels and no GPUs: a CPU-only node, kept"
            out.diagnostics.append(item.obj.diagnostic(("metadata", "labels"), message, "warning"))
    groups = _groups(pooled, levels or TopologyLabels())
    names = _pool_names(groups, levels or TopologyLabels())
    for name, group in zip(names, groups, strict=True):
        _add_pool(name, group, levels, catalogue, out)
    kept_names = {name for name, _ in out.kept}
    out.objects += [_v1_node(item.obj) for item in read if item.node.name in kept_names]
    return out


def topology_labels(topologies: Sequence[DumpObject], diagnostics: list[Diagnostic]) -> TopologyLabels | None:
    """The node labels the Topology objects name, as a NodePool's block / rack / host levels.

    None (with a warning) when the Topologies disagree or have more levels than a pool can
    generate; without Topologies, GKE's labels (the NodePool default).
    """
    found: set[tuple[str, ...]] = set()
    for obj in topologies:
        found.add(tuple(level.node_label for level in obj.model.spec.levels))
    if not found:
        return TopologyLabels()
    if len(found) > 1 or not 1 <= len(levels := next(iter(found))) <= 3:
        message = (
            "the Topologies name levels a NodePool cannot generate (at most block, rack and host, "
            "the same in every Topology): nodes are kept as v1 Nodes"
        )
        diagnostics.append(topologies[0].diagnostic(("spec", "levels"), message, "warning"))
        return None
    *upper, host = levels
    block = upper[0] if upper else TopologyLabels().block
    rack = upper[1] if len(upper) > 1 else TopologyLabels().rack
    return TopologyLabels(block=block, rack=rack, host=host)


# --- step 1: reading ----------------------------------------------------------------------------


def _has_allocatable(obj: DumpObject, out: NodeImport) -> bool:
    status = mapping(obj.data.get("status"))
    if status.get("allocatable"):
        return True
    if status.get("capacity"):
        message = "status.allocatable is missing: capacity is used instead (no room reserved for the system)"
        out.diagnostics.append(obj.diagnostic(("status",), message, "warning"))
        return True
    out.diagnostics.append(obj.diagnostic(("status",), "status.allocatable (and capacity) is missing"))
    return False


def _gpu_models(nodes: Sequence[DumpObject], out: NodeImport) -> list[GPUModelSpec]:
    """GPUModels for products the built-in catalogue lacks, from GFD's memory and compute labels."""
    known = GPUCatalogue()
    specs: dict[str, GPUModelSpec] = {}
    for obj in nodes:
        labels = obj.model.metadata.labels
        product = base_product(labels.get(PRODUCT_LABEL, ""))
        if not product or known.get(product) is not None or product in specs:
            continue
        model = _gpu_model_object(product, labels)
        if model is None:
            continue
        out.objects.append(model)
        specs[product] = nodes_convert.gpu_model_spec(machines.GPUModel.model_validate(model))
    return list(specs.values())


def _gpu_model_object(product: str, labels: Mapping[str, str]) -> dict[str, Any] | None:
    memory = labels.get(MEMORY_LABEL, "")
    major = labels.get("nvidia.com/gpu.compute.major", "")
    minor = labels.get("nvidia.com/gpu.compute.minor", "")
    if not (memory.isdigit() and major.isdigit() and minor.isdigit()):
        return None
    spec: dict[str, Any] = {
        "product": product,
        "memory": f"{memory}Mi",
        "computeCapability": f"{major}.{minor}",
    }
    if labels.get("nvidia.com/gpu.family"):
        spec["family"] = labels["nvidia.com/gpu.family"]
    return {"apiVersion": GPUQ_API, "kind": "GPUModel", "metadata": {"name": product}, "spec": spec}


def _devices(node: Node) -> dict[str, int]:
    return {k: v for k, v in node.allocatable.items() if k.startswith(_DEVICE_PREFIXES) and v}


# --- step 2: what stays a v1 Node ---------------------------------------------------------------


def _kept_because(item: _Read, mode: str) -> str:
    node = item.node
    if mode == "nodes":
        return "--nodes nodes"
    if node.unschedulable:
        return "cordoned or not Ready (a NodePool's nodes are all schedulable)"
    if node.gpu_model is None and _devices(node):
        product = node.labels.get(PRODUCT_LABEL)
        if product:
            return (
                f"GPU product {product!r} is not in the catalogue and GFD's memory/compute labels are missing"
            )
        accelerator = node.labels.get(GKE_ACCELERATOR_LABEL)
        if accelerator:
            return f"GKE accelerator {accelerator!r} is not in the catalogue (add a GPUModel aliasing it)"
        return (
            "it has GPUs but no nvidia.com/gpu.product (GPU Feature Discovery) or "
            "cloud.google.com/gke-accelerator label: the model is unknown"
        )
    return ""


def _v1_node(obj: DumpObject) -> dict[str, Any]:
    """The node as ``v1`` Node, without server metadata and with only the status the loader reads."""
    out = cleaned(obj.data, keep_status=True)
    status = out.get("status") or {}
    kept = {k: status[k] for k in ("allocatable", "capacity") if k in status}
    ready = [
        {"type": "Ready", "status": c.get("status")}
        for c in status.get("conditions") or []
        if isinstance(c, dict) and c.get("type") == "Ready"
    ]
    out["status"] = {**kept, **({"conditions": ready} if ready else {})}
    spec = {k: v for k, v in (out.get("spec") or {}).items() if k in ("taints", "unschedulable")}
    out["spec"] = spec
    return out


# --- step 3: groups -----------------------------------------------------------------------------


def _per_node(levels: TopologyLabels) -> frozenset[str]:
    return PER_NODE_LABELS | {levels.rack, levels.host}


def _key(item: _Read, levels: TopologyLabels) -> tuple[Any, ...]:
    node = item.node
    skip = _per_node(levels)
    labels = tuple(sorted((k, v) for k, v in node.labels.items() if k not in skip))
    resources = tuple(
        sorted((k, v) for k, v in node.allocatable.items() if k in KEPT_RESOURCES or k in _devices(node))
    )
    taints = tuple(sorted((t.key, t.value, t.effect) for t in node.taints))
    return labels, resources, taints, node.gpu_model, node.gpu_count, node.sharing, node.gpu_memory_mib


def _groups(items: Sequence[_Read], levels: TopologyLabels) -> list[list[_Read]]:
    """Nodes a NodePool can describe together, each group in pool order (rack, then name)."""
    by_key: dict[tuple[Any, ...], list[_Read]] = defaultdict(list)
    for item in sorted(items, key=lambda i: i.node.name):
        by_key[_key(item, levels)].append(item)
    groups: list[list[_Read]] = []
    for members in by_key.values():
        racks: dict[str, list[_Read]] = defaultdict(list)
        for item in members:
            racks[item.node.labels.get(levels.rack, "")].append(item)
        if len({len(v) for v in racks.values()}) == 1 and ("" not in racks or len(racks) == 1):
            groups.append([item for rack in sorted(racks) for item in racks[rack]])
        else:
            groups += [racks[rack] for rack in sorted(racks)]
    return sorted(groups, key=lambda g: g[0].node.name)


def _pool_names(groups: Sequence[Sequence[_Read]], levels: TopologyLabels) -> list[str]:
    """The cloud's pool name (else the instance type), with the block and rack where several
    groups share it, and a number where that is not enough."""
    bases = [_base_name(g[0].node) for g in groups]
    names = []
    for base, group in zip(bases, groups, strict=True):
        labels = group[0].node.labels
        parts = [base]
        if bases.count(base) > 1:
            parts += [labels[key] for key in (levels.block,) if labels.get(key)]
            racks = {i.node.labels.get(levels.rack, "") for i in group}
            siblings = [g for g, b in zip(groups, bases, strict=True) if b == base and g is not group]
            if len(racks) == 1 and any(
                s[0].node.labels.get(levels.block) == labels.get(levels.block) for s in siblings
            ):
                parts += [r for r in racks if r]
        names.append(_dns_label("-".join(parts)))
    for name in sorted(set(names)):
        if names.count(name) > 1:
            indices = [i for i, n in enumerate(names) if n == name]
            for number, index in enumerate(indices, start=1):
                names[index] = f"{name[:55]}-{number}"
    return names


def _base_name(node: Node) -> str:
    found = next((node.labels[key] for key in POOL_LABELS if node.labels.get(key)), None)
    return found or node.labels.get(INSTANCE_TYPE_LABEL) or "pool"


def _dns_label(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:55].strip("-") or "pool"


# --- step 4: the NodePool and its check ---------------------------------------------------------


def _add_pool(
    name: str, group: list[_Read], levels: TopologyLabels | None, catalogue: GPUCatalogue, out: NodeImport
) -> None:
    first = group[0].node
    if levels is None:
        out.kept += [(i.node.name, "the Topology levels do not map onto a NodePool") for i in group]
        return
    pool = _pool_object(name, group, levels, catalogue)
    problems = _round_trip(pool, group, catalogue)
    if problems:
        message = f"kept as v1 Nodes: as NodePool {name} they would differ ({'; '.join(problems[:3])})"
        out.diagnostics.append(group[0].obj.diagnostic((), message, "warning"))
        out.kept += [(i.node.name, f"NodePool {name} would differ") for i in group]
        return
    out.objects.append(pool)
    topology = pool["spec"].get("topology") or {}
    dropped = sorted(
        k for k, v in first.allocatable.items() if v and k not in KEPT_RESOURCES and k not in _devices(first)
    )
    out.pools.append(
        PoolSummary(
            name=name,
            nodes=tuple(i.node.name for i in group),
            machine_type=pool["spec"]["machineType"],
            gpu_model=first.gpu_model,
            gpus_per_node=first.gpu_count,
            sharing=_STRATEGY.get(first.sharing.mode, "none"),
            capacity_type=pool["spec"]["capacityType"],
            zone=pool["spec"].get("zone"),
            block=topology.get("block"),
            racks=tuple(topology.get("racks") or ([topology["rack"]] if topology.get("rack") else [])),
            dropped=tuple(dropped),
        )
    )


def _pool_object(
    name: str, group: list[_Read], levels: TopologyLabels, catalogue: GPUCatalogue
) -> dict[str, Any]:
    first = group[0]
    node = first.node
    allocatable = (first.obj.data.get("status") or {}).get("allocatable") or first.obj.data["status"][
        "capacity"
    ]
    spec: dict[str, Any] = {
        "machineType": node.labels.get(INSTANCE_TYPE_LABEL, "unknown"),
        "count": len(group),
        "cpu": str(allocatable["cpu"]),
        "memory": str(allocatable["memory"]),
    }
    if "pods" in allocatable:
        spec["pods"] = int(str(allocatable["pods"]))
    gpu = _gpu_spec(node, catalogue)
    if gpu is not None:
        spec["gpu"] = gpu
    spec["capacityType"] = capacity_type(node.labels)
    if node.labels.get(ZONE_LABEL):
        spec["zone"] = node.labels[ZONE_LABEL]
    topology = _topology(group, levels)
    if topology:
        spec["topology"] = topology
    if levels != TopologyLabels():
        spec["topologyLabels"] = levels.model_dump(by_alias=True)
    if node.taints:
        spec["taints"] = [
            {"key": t.key, "value": t.value, "effect": t.effect}
            if t.value
            else {"key": t.key, "effect": t.effect}
            for t in node.taints
        ]
    spec["nodeNames"] = [item.node.name for item in group]  # a pool groups real nodes, never renames them
    pool = {"apiVersion": GPUQ_API, "kind": "NodePool", "metadata": {"name": name}, "spec": spec}
    spec["labels"] = _pool_labels(machines.NodePool.model_validate(pool), node, levels, catalogue)
    return pool


def _gpu_spec(node: Node, catalogue: GPUCatalogue) -> dict[str, Any] | None:
    if node.gpu_model is None:
        return None
    gpu: dict[str, Any] = {"model": node.gpu_model, "count": node.gpu_count}
    model = catalogue.get(node.gpu_model)
    mode = node.sharing.mode
    if (
        model is not None
        and node.gpu_memory_mib
        and node.gpu_memory_mib != model.memory_mib
        and mode not in (SharingMode.MIG_SINGLE,)
    ):
        gpu["memory"] = f"{node.gpu_memory_mib}Mi"
    if mode in _STRATEGY:
        gpu["sharing"] = _sharing(node)
    return gpu


def _sharing(node: Node) -> dict[str, Any]:
    sharing = node.sharing
    out: dict[str, Any] = {"strategy": _STRATEGY[sharing.mode]}
    layout = sharing.mig_layout
    if sharing.mode is SharingMode.MIG_SINGLE and layout:
        out["migLayout"] = layout[0][0]
    elif sharing.mode is SharingMode.MIG_MIXED:
        out["migLayout"] = list(layout[0]) if len(layout) == 1 else [list(gpu) for gpu in layout]
    elif sharing.mode is SharingMode.TIME_SLICING:
        out["replicas"] = sharing.replicas
        if sharing.rename_by_default:
            out["renameByDefault"] = True
    return out


def capacity_type(labels: Mapping[str, str]) -> str:
    """``spot``, ``reserved`` or ``on-demand`` from gpuq's, GKE's, Karpenter's or EKS's node labels."""
    if labels.get(machines.CAPACITY_TYPE_LABEL) in ("spot", "reserved", "on-demand"):
        return labels[machines.CAPACITY_TYPE_LABEL]
    if "true" in (labels.get("cloud.google.com/gke-spot"), labels.get("cloud.google.com/gke-preemptible")):
        return "spot"
    karpenter = labels.get("karpenter.sh/capacity-type", "")
    eks = labels.get("eks.amazonaws.com/capacityType", "")
    if karpenter == "spot" or eks == "SPOT":
        return "spot"
    if karpenter == "reserved" or eks == "CAPACITY_BLOCK" or labels.get("cloud.google.com/reservation-name"):
        return "reserved"
    return "on-demand"


def _topology(group: list[_Read], levels: TopologyLabels) -> dict[str, Any]:
    labels = group[0].node.labels
    racks = list(dict.fromkeys(i.node.labels[levels.rack] for i in group if i.node.labels.get(levels.rack)))
    topology: dict[str, Any] = {}
    if labels.get(levels.block):
        topology["block"] = labels[levels.block]
    if len(racks) == 1:
        topology["rack"] = racks[0]
    elif racks:
        topology["racks"] = racks
        topology["nodesPerRack"] = len(group) // len(racks)
    return topology


def _pool_labels(
    pool: machines.NodePool, node: Node, levels: TopologyLabels, catalogue: GPUCatalogue
) -> dict[str, str]:
    """The node's labels less the per-node ones and those the pool generates itself."""
    name = next(nodes_convert.node_names(pool, 1))
    generated = {
        **gfd_labels(nodes_convert.effective_model(pool.spec.gpu, catalogue), node.gpu_count, node.sharing),
        **nodes_convert.generated_labels(pool, name, 0),
    }
    skip = _per_node(levels) | set(generated)
    return {k: v for k, v in sorted(node.labels.items()) if k not in skip}


def _round_trip(pool: dict[str, Any], group: list[_Read], catalogue: GPUCatalogue) -> list[str]:
    """What the pool's generated nodes get wrong about the real ones (empty: a faithful pool)."""
    model = machines.NodePool.model_validate(pool)
    problems: list[str] = []
    for generated, item in zip(nodes_convert.expand_pool(model, catalogue), group, strict=True):
        real = item.node
        for key in (HOSTNAME_LABEL, model.spec.topology_labels.host):
            if real.labels.get(key, real.name) != generated.labels.get(key):
                problems.append(f"{real.name}: label {key}={real.labels[key]!r} is not the node's name")
        want = {
            k: v for k, v in real.allocatable.items() if v and (k in KEPT_RESOURCES or k in _devices(real))
        }
        got = {k: v for k, v in generated.allocatable.items() if v}
        if want != got:
            differ = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
            problems.append(f"{real.name}: allocatable {', '.join(differ)}")
        for key, value in sorted(real.labels.items()):
            if key in PER_NODE_LABELS or key == model.spec.topology_labels.host:
                continue
            if generated.labels.get(key, value) != value:
                problems.append(f"{real.name}: label {key}={value!r} would be {generated.labels[key]!r}")
        if (real.gpu_model, real.gpu_count, real.sharing) != (
            generated.gpu_model,
            generated.gpu_count,
            generated.sharing,
        ):
            problems.append(
                f"{real.name}: GPUs {real.gpu_count}× {real.gpu_model} would be "
                f"{generated.gpu_count}× {generated.gpu_model}"
            )
    return problems
