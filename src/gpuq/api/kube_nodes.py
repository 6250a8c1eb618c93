"""Kubernetes ``v1`` Nodes (``kubectl get nodes -o yaml``) as core nodes.

A node keeps its labels, taints and allocatable (capacity when allocatable is
absent). The rest is read back from what the NVIDIA GPU operator writes:

1. the GPU model: ``nvidia.com/gpu.product`` without the suffixes sharing
   adds (``-SHARED``, ``-MIG-<profile>``), through the GPU catalogue; else,
   on GKE nodes whose drivers GKE installs (no GPU Feature Discovery, GKE's
   default), ``cloud.google.com/gke-accelerator`` (:data:`GKE_ACCELERATORS`);
   an unknown product leaves ``gpu_model`` None;
2. the sharing mode: ``nvidia.com/mig.strategy`` (single with a ``-MIG-``
   product, mixed with ``nvidia.com/mig-*`` slices), else
   ``nvidia.com/gpu.sharing-strategy`` / ``nvidia.com/gpu.replicas``
   (time-slicing; MPS is read as time-slicing, the same accounting), else
   GKE's ``cloud.google.com/gke-gpu-partition-size`` (MIG: every GPU holds the
   most instances of that one profile, each an ``nvidia.com/gpu``, GKE's
   "Running multi-instance GPUs") or ``cloud.google.com/gke-gpu-sharing-strategy``
   with ``cloud.google.com/gke-max-shared-clients-per-gpu`` (time-sharing or MPS:
   each GPU is that many ``nvidia.com/gpu``, GKE's "Time-sharing GPUs on GKE"), else
   ``gpuq.dev/gpu-milli`` in allocatable (fractional), else whole GPUs;
3. the physical GPU count: ``nvidia.com/gpu.count``, else derived from
   allocatable (``nvidia.com/gpu``, divided by time-slicing replicas);
4. schedulability: a node that is cordoned or whose ``Ready`` condition is
   not True loads with ``unschedulable=True``.

MIG layouts are not in GFD's labels, so they are rebuilt from the slices:
mixed shares the ``nvidia.com/mig-*`` slices evenly over the partitioned GPUs
when they divide evenly, else packs them largest first; single assumes every
GPU holds the most instances of its one profile.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

from gpuq.api import machines
from gpuq.api.machines import CAPACITY_TYPE_LABEL, POOL_LABEL, PRODUCT_LABEL, SPOT_LABEL
from gpuq.core.gpus import GPUCatalogue, GPUModelSpec
from gpuq.core.mig import MIG_TABLES, layout_problems
from gpuq.core.model import Taint
from gpuq.core.nodes import GPU, GPU_MILLI, GPU_SHARED, MIG_PREFIX, GPUSharing, Node, SharingMode
from gpuq.core.quantity import to_amount

MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
COUNT_LABEL = "nvidia.com/gpu.count"
MEMORY_LABEL = "nvidia.com/gpu.memory"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
SHARING_LABEL = "nvidia.com/gpu.sharing-strategy"
_MIG_MARKER = "-MIG-"
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
GKE_PARTITION_LABEL = "cloud.google.com/gke-gpu-partition-size"
GKE_SHARING_LABEL = "cloud.google.com/gke-gpu-sharing-strategy"
GKE_CLIENTS_LABEL = "cloud.google.com/gke-max-shared-clients-per-gpu"
GKE_ACCELERATORS = {
    "nvidia-tesla-p100": "P100",
    "nvidia-tesla-v100": "V100-16GB",
    "nvidia-tesla-t4": "T4",
    "nvidia-l4": "L4",
    "nvidia-tesla-a100": "A100-40GB",
    "nvidia-a100-80gb": "A100-80GB",
    "nvidia-h100-80gb": "H100-80GB",
    "nvidia-h100-mega-80gb": "H100-80GB",
    "nvidia-h200-141gb": "H200",
    "nvidia-b200": "B200",
}
"""GKE's ``cloud.google.com/gke-accelerator`` values (its GPU types, "About GPUs in GKE") -> the
built-in catalogue's models. Others (``nvidia-tesla-p4``, ``nvidia-gb200``...) stay unknown unless a
GPUModel names the value as its name or an alias."""

POOL_LABELS = (
    POOL_LABEL,
    "cloud.google.com/gke-nodepool",
    "karpenter.sh/nodepool",
    "eks.amazonaws.com/nodegroup",
    "kubernetes.azure.com/agentpool",
)
"""Node labels naming the node's pool: gpuq's own, then GKE, Karpenter, EKS and AKS."""


def base_product(product: str) -> str:
    """GFD's product label without the suffixes sharing adds (``-SHARED``, ``-MIG-<profile>``)."""
    product = product.removesuffix("-SHARED")
    head, marker, _profile = product.partition(_MIG_MARKER)
    return head if marker else product


def product_model(labels: Mapping[str, str], catalogue: GPUCatalogue) -> GPUModelSpec | None:
    """The catalogue model of a node's ``nvidia.com/gpu.product`` label, else of its
    ``cloud.google.com/gke-accelerator`` label (step 1), or None."""
    product = labels.get(PRODUCT_LABEL)
    if product:
        return catalogue.get(base_product(product))
    accelerator = labels.get(GKE_ACCELERATOR_LABEL)
    if not accelerator:
        return None
    return catalogue.get(accelerator) or catalogue.get(GKE_ACCELERATORS.get(accelerator, accelerator))


def node_from_v1(node: machines.Node, catalogue: GPUCatalogue) -> Node:
    """A ``kubectl get node -o yaml`` object as a core node (see the module's steps)."""
    labels = dict(node.metadata.labels)
    raw = node.status.allocatable or node.status.capacity
    allocatable = {name: to_amount(name, value) for name, value in sorted(raw.items())}
    spec = product_model(labels, catalogue)
    sharing, gpu_count = _sharing(labels, allocatable, spec)
    memory = spec.memory_mib if spec is not None else _int_label(labels, MEMORY_LABEL)
    return Node(
        name=str(node.metadata.name),
        allocatable=allocatable,
        labels=labels,
        taints=tuple(Taint(t.key, t.value, t.effect) for t in node.spec.taints),
        gpu_model=spec.name if spec is not None else None,
        gpu_count=gpu_count,
        gpu_memory_mib=memory or 0,
        sharing=sharing,
        pool=next((labels[key] for key in POOL_LABELS if key in labels), None),
        capacity_type=_capacity_type(labels),
        unschedulable=node.spec.unschedulable or not node.ready(),
    )


def _int_label(labels: Mapping[str, str], key: str) -> int | None:
    value = labels.get(key, "")
    return int(value) if value.isdigit() else None


def _capacity_type(labels: Mapping[str, str]) -> str | None:
    if labels.get(CAPACITY_TYPE_LABEL):
        return labels[CAPACITY_TYPE_LABEL]
    return "spot" if labels.get(SPOT_LABEL) == "true" else None


def _sharing(
    labels: Mapping[str, str], allocatable: Mapping[str, int], spec: GPUModelSpec | None
) -> tuple[GPUSharing, int]:
    """``(sharing, physical GPU count)`` (steps 2 and 3)."""
    strategy = labels.get(MIG_STRATEGY_LABEL)
    counted = _int_label(labels, COUNT_LABEL)
    product = labels.get(PRODUCT_LABEL, "")
    whole = allocatable.get(GPU, 0)
    if strategy == "single" and _MIG_MARKER in product:
        profile = product.partition(_MIG_MARKER)[2]
        instances = whole if GPU in allocatable else (counted or 0)
        layout = ((f"all-{profile}",),)
        return GPUSharing(SharingMode.MIG_SINGLE, layout), math.ceil(
            instances / _max_instances(spec, profile)
        )
    slices = _mig_slices(allocatable)
    if strategy == "mixed" and slices:
        gpu_count = counted if counted is not None else whole + 1
        return GPUSharing(SharingMode.MIG_MIXED, _deal(slices, gpu_count, whole, spec)), gpu_count
    replicas = _int_label(labels, REPLICAS_LABEL) or 1
    if labels.get(SHARING_LABEL) in ("time-slicing", "mps") or replicas > 1:
        renamed = GPU_SHARED in allocatable
        total = allocatable.get(GPU_SHARED if renamed else GPU, 0)
        gpu_count = counted if counted is not None else total // replicas
        sharing = GPUSharing(SharingMode.TIME_SLICING, replicas=max(replicas, 2), rename_by_default=renamed)
        return sharing, gpu_count
    gke = _gke_sharing(labels, whole, spec)
    if gke is not None:
        return gke
    gpu_count = counted if counted is not None else whole
    if GPU_MILLI in allocatable:
        return GPUSharing(SharingMode.FRACTIONAL), gpu_count or allocatable[GPU_MILLI] // 1000
    return GPUSharing(), gpu_count


def _gke_sharing(
    labels: Mapping[str, str], whole: int, spec: GPUModelSpec | None
) -> tuple[GPUSharing, int] | None:
    """GKE-managed GPU sharing (step 2), when GFD's labels said nothing: a MIG partition size, or
    time-sharing / MPS with a number of clients per GPU; None for whole GPUs."""
    partition = labels.get(GKE_PARTITION_LABEL)
    if partition and labels.get(PRODUCT_LABEL) is None:
        layout = ((f"all-{partition}",),)
        return GPUSharing(SharingMode.MIG_SINGLE, layout), math.ceil(whole / _max_instances(spec, partition))
    clients = _int_label(labels, GKE_CLIENTS_LABEL) or 1
    if labels.get(GKE_SHARING_LABEL) in ("time-sharing", "mps") and clients > 1:
        sharing = GPUSharing(SharingMode.TIME_SLICING, replicas=clients)
        return sharing, whole // clients
    return None


def _mig_slices(allocatable: Mapping[str, int]) -> list[str]:
    """One profile name per MIG slice in allocatable, largest name first (a fixed order)."""
    names = [name.removeprefix(MIG_PREFIX) for name, n in allocatable.items() if name.startswith(MIG_PREFIX)]
    return [name for name in sorted(names, reverse=True) for _ in range(allocatable[MIG_PREFIX + name])]


def _max_instances(spec: GPUModelSpec | None, profile: str) -> int:
    table = MIG_TABLES.get(spec.mig_table or "") if spec is not None else None
    found = table.get(profile) if table is not None else None
    return found.max_instances if found is not None else 1


def _deal(
    slices: Sequence[str], gpu_count: int, whole: int, spec: GPUModelSpec | None
) -> tuple[tuple[str, ...], ...]:
    """Per-GPU layouts that hold ``slices``; one shared layout when every GPU can hold the same.

    Counts that divide evenly over the partitioned GPUs give each the same
    layout; otherwise slices go largest first to the first GPU they still fit
    on (``layout_problems``), or, when none has room, to the emptiest.
    """
    partitioned = max(gpu_count - whole, 1)
    counts = Counter(slices)
    if all(n % partitioned == 0 for n in counts.values()):
        return (tuple(name for name in sorted(counts) for _ in range(counts[name] // partitioned)),)
    table = spec.mig_table if spec is not None and spec.mig_table in MIG_TABLES else None
    profiles = MIG_TABLES[table] if table else {}
    order = sorted(slices, key=lambda n: (-(profiles[n].memory_slices if n in profiles else 0), n))
    gpus: list[list[str]] = [[] for _ in range(partitioned)]
    for name in order:
        fits = [g for g in gpus if table and not layout_problems(table, [*g, name])]
        (fits[0] if fits else min(gpus, key=len)).append(name)
    return tuple(tuple(sorted(g)) for g in gpus) + ((),) * whole
