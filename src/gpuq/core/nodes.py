"""Machines as the placement core sees them: frozen node descriptions and GPU demand.

A ``Node`` is what the kubelet and the NVIDIA device plugin advertise: labels
(GPU Feature Discovery's included), taints and ``allocatable`` resources in
core units (CPU milli, memory bytes, devices in whole units). Its GPUs are
described once more, per device, so that fractional GPU sharing can be
placed on a particular GPU rather than on the node's total.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpuq.core.model import Resources, Taint

GPU = "nvidia.com/gpu"
"""Whole GPUs (and, with time-slicing without renaming, shared replicas)."""
GPU_SHARED = "nvidia.com/gpu.shared"
"""Time-sliced replicas when the device plugin's ``renameByDefault`` is on."""
MIG_PREFIX = "nvidia.com/mig-"
"""MIG slices are advertised as ``nvidia.com/mig-<profile>`` (mixed strategy)."""
GPU_MILLI = "gpuq.dev/gpu-milli"
"""A share of one GPU in thousandths (fractional sharing, as HAMi and the openb trace express it)."""
GPU_MEMORY = "gpuq.dev/gpu-memory"
"""GPU memory of a fractional share, in MiB."""
HAMI_CORES = "nvidia.com/gpucores"
"""HAMi: the percentage of each requested GPU's compute (with ``nvidia.com/gpu`` vGPUs)."""
HAMI_MEMORY = "nvidia.com/gpumem"
"""HAMi: MiB of memory on each requested GPU."""
PODS = "pods"


def is_device_resource(name: str) -> bool:
    """GPUs, MIG slices, time-sliced replicas and fractional shares, as node and queue reports show them."""
    return name.startswith("nvidia.com/") or name == GPU_MILLI


HOSTNAME_LABEL = "kubernetes.io/hostname"


class SharingMode(StrEnum):
    """How a node's GPUs are exposed (NVIDIA device plugin configuration)."""

    EXCLUSIVE = "exclusive"
    MIG_SINGLE = "mig-single"
    MIG_MIXED = "mig-mixed"
    TIME_SLICING = "time-slicing"
    FRACTIONAL = "fractional"


@dataclass(frozen=True, slots=True)
class GPUSharing:
    mode: SharingMode = SharingMode.EXCLUSIVE
    mig_layout: tuple[tuple[str, ...], ...] = ()  # per GPU: MIG profile names, e.g. ("3g.40gb", "3g.40gb")
    replicas: int = 1  # time-slicing replicas per GPU
    rename_by_default: bool = False


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    gpu_model: str | None = None  # catalogue name, e.g. "H100-80GB"
    gpu_count: int = 0
    gpu_memory_mib: int = 0  # per GPU
    sharing: GPUSharing = GPUSharing()
    pool: str | None = None
    capacity_type: str | None = None  # reserved | on-demand | spot
    unschedulable: bool = False


@dataclass(frozen=True, slots=True)
class GPUDemand:
    """What one pod asks of a node's GPUs beyond plain counted resources.

    ``count`` GPUs each with at least ``milli`` thousandths free (1000 = the whole
    GPU) and ``memory_mib`` GPU memory free; ``count == 0`` means no GPU.
    """

    count: int = 0
    milli: int = 1000
    memory_mib: int = 0

    @property
    def fractional(self) -> bool:
        """A share of a single GPU (the openb trace's GPU-sharing pods)."""
        return self.count == 1 and self.milli < 1000

    @property
    def partial(self) -> bool:
        """Shares of one or more GPUs: each of ``count`` distinct GPUs gives ``milli`` and ``memory_mib``."""
        return self.count > 0 and self.milli < 1000

    @property
    def total_milli(self) -> int:
        return self.count * self.milli


NO_GPU = GPUDemand(count=0, milli=0)


def gpu_demand(requests: Resources) -> GPUDemand:
    """The per-device part of a pod's requests.

    A pod asking ``gpuq.dev/gpu-milli: m`` (m < 1000) wants a share of one GPU;
    ``nvidia.com/gpu: n`` wants n whole GPUs, or, with HAMi's
    ``nvidia.com/gpucores: p`` and / or ``nvidia.com/gpumem: MiB``, a share of
    each of n distinct GPUs (p percent of its compute, 10·p thousandths; without
    ``gpucores`` the compute is shared, not reserved). Other device resources
    (MIG slices, time-sliced replicas) are plain counted resources.
    """
    milli = requests.get(GPU_MILLI, 0)
    memory = requests.get(GPU_MEMORY, 0) or requests.get(HAMI_MEMORY, 0)
    whole = requests.get(GPU, 0)
    if whole and (HAMI_CORES in requests or HAMI_MEMORY in requests) and not milli:
        cores = requests.get(HAMI_CORES, 0)
        return GPUDemand(count=whole, milli=min(1000, 10 * cores), memory_mib=memory)
    if milli:
        if milli >= 1000 and milli % 1000 == 0 and not whole:
            return GPUDemand(count=milli // 1000, milli=1000, memory_mib=memory)
        return GPUDemand(count=1, milli=milli, memory_mib=memory)
    if whole:
        return GPUDemand(count=whole, milli=1000, memory_mib=memory)
    return NO_GPU
