"""Machines as core nodes: NodePools expanded, ``v1`` Nodes read, the GPU catalogue assembled.

Callers convert only manifests that passed :mod:`gpuq.api.machine_checks` with
no error; this module then never fails.

A NodePool becomes ``count`` identical nodes (docs/manifests/nodepool.md):

1. names ``spec.nodeNames[index]`` where given (an imported pool keeps its real nodes' names),
   else ``<pool>-<index>``, the index zero-padded to the width of ``max - 1`` (at least 2 digits),
   so names stay stable as the pool scales;
2. labels: the user's, then GPU Feature Discovery's (:func:`gpuq.core.devices.gfd_labels`),
   then gpuq's own (hostname, instance type, zone, pool, capacity type, spot,
   NVLink domain, topology levels), later ones winning;
3. allocatable: ``cpu`` (milli), ``memory`` (bytes), ``pods``, plus the device
   plugin's resources (:func:`gpuq.core.devices.device_resources`).

``v1`` Nodes are read by :mod:`gpuq.api.kube_nodes`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from gpuq.api import kube_nodes, machines
from gpuq.api.diagnostics import Manifest
from gpuq.api.machines import (
    CAPACITY_TYPE_LABEL,
    INSTANCE_TYPE_LABEL,
    NVLINK_LABEL,
    POOL_LABEL,
    SPOT_LABEL,
    ZONE_LABEL,
)
from gpuq.core.devices import device_resources, gfd_labels
from gpuq.core.gpus import GPUCatalogue, GPUModelSpec
from gpuq.core.model import Taint
from gpuq.core.nodes import (
    HOSTNAME_LABEL,
    PODS,
    GPUSharing,
    Node,
    SharingMode,
)
from gpuq.core.provisioning.autoscaler import PoolSpec
from gpuq.core.provisioning.disruption import Budget, DisruptionPolicy
from gpuq.core.provisioning.options import StockStep
from gpuq.core.quantity import to_amount

_T = TypeVar("_T")
MIB = 2**20
_STRATEGIES = {
    "none": SharingMode.EXCLUSIVE,
    "mig-single": SharingMode.MIG_SINGLE,
    "mig-mixed": SharingMode.MIG_MIXED,
    "time-slicing": SharingMode.TIME_SLICING,
    "fractional": SharingMode.FRACTIONAL,
}


@dataclass(frozen=True, slots=True)
class NodePoolSummary:
    """One NodePool at a glance: sizes, capacity type, zone, price per node-hour and GPUs per node."""

    name: str
    machine_type: str
    count: int
    min_count: int
    max_count: int
    capacity_type: str
    zone: str | None
    hourly_price_usd: float | None
    gpu_model: str | None
    gpus_per_node: int


@dataclass(frozen=True, slots=True)
class Machines:
    """What the machine manifests describe: every node sorted by name, the pools, the catalogue."""

    nodes: tuple[Node, ...]
    node_pools: tuple[NodePoolSummary, ...]
    catalogue: GPUCatalogue


def convert_machines(manifests: Sequence[Manifest]) -> Machines:
    """Nodes of every NodePool and ``v1`` Node (first definition of a name wins), pools sorted by name."""
    catalogue = build_catalogue(manifests)
    pools = _first(machines.NodePool, manifests)
    nodes: dict[str, Node] = {}
    for pool in pools:
        for node in expand_pool(pool, catalogue):
            nodes.setdefault(node.name, node)
    for kube_node in _first(machines.Node, manifests):
        node = kube_nodes.node_from_v1(kube_node, catalogue)
        nodes.setdefault(node.name, node)
    summaries = tuple(sorted((pool_summary(p, catalogue) for p in pools), key=lambda s: s.name))
    return Machines(tuple(nodes[name] for name in sorted(nodes)), summaries, catalogue)


def _first(kind: type[_T], manifests: Sequence[Manifest]) -> list[_T]:
    seen: dict[str, _T] = {}
    for manifest in manifests:
        if isinstance(manifest.model, kind):
            seen.setdefault(manifest.name, manifest.model)
    return list(seen.values())


# --- the catalogue ----------------------------------------------------------------------------


def family_of(major: int, minor: int) -> str:
    """GFD's family for a compute capability (``9.0`` -> hopper)."""
    if major >= 10:
        return "blackwell"
    if major == 9:
        return "hopper"
    if major == 8:
        return "ada-lovelace" if minor >= 9 else "ampere"
    if major == 7:
        return "turing" if minor >= 5 else "volta"
    return {6: "pascal", 5: "maxwell", 3: "kepler"}.get(major, "undefined")


def compute_capability(text: str) -> tuple[int, int]:
    """``"9.0"`` -> ``(9, 0)``; malformed text (reported by the checks) reads as ``(0, 0)``."""
    major, _, minor = text.partition(".")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else (0, 0)


def gpu_model_spec(model: machines.GPUModel) -> GPUModelSpec:
    spec = model.spec
    major, minor = compute_capability(spec.compute_capability)
    return GPUModelSpec(
        name=str(model.metadata.name),
        product=spec.product,
        memory_mib=math.ceil(spec.memory / MIB),
        compute_major=major,
        compute_minor=minor,
        family=spec.family or family_of(major, minor),
        mig_table=spec.mig_table,
        hourly_price_usd=spec.price_per_hour,
        aliases=tuple(spec.aliases),
    )


def build_catalogue(manifests: Sequence[Manifest]) -> GPUCatalogue:
    """The built-in models plus every parsed GPUModel (the first definition of a name wins)."""
    return GPUCatalogue(gpu_model_spec(m) for m in _first(machines.GPUModel, manifests))


# --- NodePool -----------------------------------------------------------------------------------


def mig_layouts(layout: machines.MigLayout | None) -> tuple[tuple[str, ...], ...]:
    """The written layout as ``GPUSharing.mig_layout``: one entry for every GPU, or one per GPU."""
    if layout is None:
        return ()
    if isinstance(layout, str):
        return ((layout,),)
    if all(isinstance(item, str) for item in layout):
        return (tuple(str(item) for item in layout),)
    return tuple((item,) if isinstance(item, str) else tuple(item) for item in layout)


def sharing_of(gpu: machines.NodeGPUSpec | None) -> GPUSharing:
    if gpu is None:
        return GPUSharing()
    sharing = gpu.sharing
    return GPUSharing(
        mode=_STRATEGIES[sharing.strategy],
        mig_layout=mig_layouts(sharing.mig_layout),
        replicas=sharing.replicas if sharing.replicas is not None else 1,
        rename_by_default=sharing.rename_by_default,
    )


def effective_model(gpu: machines.NodeGPUSpec | None, catalogue: GPUCatalogue) -> GPUModelSpec | None:
    """The pool's GPU model, with its memory overridden by ``spec.gpu.memory`` when given."""
    if gpu is None:
        return None
    spec = catalogue.get(gpu.model)
    if spec is None or gpu.memory is None:
        return spec
    return dataclasses.replace(spec, memory_mib=math.ceil(gpu.memory / MIB))


def index_width(max_nodes: int) -> int:
    """Digits of a pool's node index: enough for ``max - 1``, at least 2."""
    return max(2, len(str(max(max_nodes - 1, 0))))


def node_names(pool: machines.NodePool, upto: int | None = None) -> Iterator[str]:
    """Names of the pool's nodes ``0 .. upto-1`` (default: its current count): ``spec.nodeNames[i]``
    where given, else ``<pool>-<index>``."""
    count, _low, high = pool.spec.sizes()
    width = index_width(high)
    given = pool.spec.node_names
    for index in range(count if upto is None else upto):
        yield given[index] if index < len(given) else f"{pool.metadata.name}-{index:0{width}d}"


def rack_of(topology: machines.PoolTopology | None, index: int, max_nodes: int) -> str | None:
    """The rack of node ``index``: ``rack``, or ``racks[index // nodesPerRack]``."""
    if topology is None:
        return None
    if not topology.racks:
        return topology.rack
    per_rack = max(topology.nodes_per_rack or math.ceil(max_nodes / len(topology.racks)), 1)
    return topology.racks[min(index // per_rack, len(topology.racks) - 1)]


def generated_labels(pool: machines.NodePool, name: str, index: int) -> dict[str, str]:
    """The labels gpuq itself sets on node ``index`` of ``pool`` (user and GFD labels aside)."""
    spec = pool.spec
    labels = {
        HOSTNAME_LABEL: name,
        INSTANCE_TYPE_LABEL: spec.machine_type,
        POOL_LABEL: str(pool.metadata.name),
        CAPACITY_TYPE_LABEL: spec.capacity_type,
    }
    if spec.zone:
        labels[ZONE_LABEL] = spec.zone
    if spec.capacity_type == "spot":
        labels[SPOT_LABEL] = "true"
    if spec.nvlink_domain and spec.nvlink_domain != "none":
        labels[NVLINK_LABEL] = spec.nvlink_domain
    levels = spec.topology_labels
    if spec.topology is not None and spec.topology.block:
        labels[levels.block] = spec.topology.block
    rack = rack_of(spec.topology, index, spec.sizes()[2])
    if rack:
        labels[levels.rack] = rack
    labels[levels.host] = name
    return labels


def expand_pool(
    pool: machines.NodePool, catalogue: GPUCatalogue, upto: int | None = None
) -> tuple[Node, ...]:
    """The pool's ``count`` nodes (or its first ``upto``, up to ``max``), in index order."""
    spec = pool.spec
    model = effective_model(spec.gpu, catalogue)
    gpu_count = spec.gpu.count if spec.gpu is not None else 0
    sharing = sharing_of(spec.gpu)
    allocatable = {
        "cpu": to_amount("cpu", spec.cpu),
        "memory": to_amount("memory", spec.memory),
        PODS: spec.pods,
        **device_resources(model, gpu_count, sharing),
    }
    gfd = gfd_labels(model, gpu_count, sharing)
    taints = tuple(Taint(t.key, t.value, t.effect) for t in spec.taints)
    return tuple(
        Node(
            name=name,
            allocatable=dict(sorted(allocatable.items())),
            labels=dict(sorted({**spec.labels, **gfd, **generated_labels(pool, name, index)}.items())),
            taints=taints,
            gpu_model=model.name if model is not None else None,
            gpu_count=gpu_count,
            gpu_memory_mib=model.memory_mib if model is not None else 0,
            sharing=sharing,
            pool=str(pool.metadata.name),
            capacity_type=spec.capacity_type,
        )
        for index, name in enumerate(node_names(pool, upto))
    )


def pool_summary(pool: machines.NodePool, catalogue: GPUCatalogue) -> NodePoolSummary:
    spec = pool.spec
    count, low, high = spec.sizes()
    model = catalogue.get(spec.gpu.model) if spec.gpu is not None else None
    return NodePoolSummary(
        name=str(pool.metadata.name),
        machine_type=spec.machine_type,
        count=count,
        min_count=low,
        max_count=high,
        capacity_type=spec.capacity_type,
        zone=spec.zone,
        hourly_price_usd=spec.price,
        gpu_model=model.name if model is not None else None,
        gpus_per_node=spec.gpu.count if spec.gpu is not None else 0,
    )


# --- provisioning -------------------------------------------------------------------------------


def pool_spec(pool: machines.NodePool, catalogue: GPUCatalogue) -> PoolSpec:
    """The pool as :mod:`gpuq.core.provisioning.autoscaler` sees it (limits in core units)."""
    spec = pool.spec
    _count, low, high = spec.sizes()
    node = expand_pool(pool, catalogue, upto=1)
    allocatable = dict(node[0].allocatable) if node else {}
    scale_down = spec.scale_down or machines.ScaleDownSpec()
    return PoolSpec(
        name=str(pool.metadata.name),
        machine_type=spec.machine_type,
        zone=spec.zone or "",
        capacity_type=spec.capacity_type,
        min_nodes=low,
        max_nodes=high,
        node_allocatable=allocatable,
        limits={name: to_amount(name, value) for name, value in sorted(spec.limits.items())},
        usd_per_node_hour=spec.price,
        provisioning_delay_s=spec.provisioning.total_s() if spec.provisioning else 0.0,
        scale_down_enabled=scale_down.enabled,
        idle_after_s=scale_down.idle_after,
        disruption=disruption_policy(spec.disruption),
    )


def disruption_policy(disruption: machines.PoolDisruption | None) -> DisruptionPolicy:
    if disruption is None:
        return DisruptionPolicy()
    budgets = tuple(
        Budget(str(b.nodes), tuple(b.reasons), b.schedule, b.duration) for b in disruption.budgets
    )
    expire = disruption.expire_after if isinstance(disruption.expire_after, float) else None
    return DisruptionPolicy(disruption.consolidation_policy, disruption.consolidate_after, budgets, expire)


def stock_steps(pool: machines.NodePool) -> tuple[StockStep, ...]:
    """The pool's ``stock`` entries with the pool's machine type, zone and capacity type filled in."""
    spec = pool.spec
    return tuple(
        StockStep(
            entry.machine_type or spec.machine_type,
            entry.zone or spec.zone or "",
            entry.capacity_type or spec.capacity_type,
            entry.available,
            entry.from_,
        )
        for entry in spec.stock
    )


def pool_specs(manifests: Sequence[Manifest]) -> tuple[tuple[PoolSpec, ...], tuple[StockStep, ...]]:
    """Every NodePool as a :class:`PoolSpec` (sorted by name) and all their stock steps."""
    catalogue = build_catalogue(manifests)
    pools = sorted(_first(machines.NodePool, manifests), key=lambda p: str(p.metadata.name))
    steps = tuple(step for pool in pools for step in stock_steps(pool))
    return tuple(pool_spec(p, catalogue) for p in pools), steps
