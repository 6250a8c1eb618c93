"""Free capacity of one node, per resource and per GPU, and how many pods of a shape fit on it.

Whole and fractional GPUs are tracked per device (``gpu_milli`` and
``gpu_memory_mib`` free on each GPU) so a sharing pod lands on a particular
GPU, as the device plugin or HAMi binds it. MIG slices and time-sliced
replicas are plain counted resources: the device plugin hands out any free
slice of the requested profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuq.core.model import Resources
from gpuq.core.nodes import (
    GPU,
    GPU_MEMORY,
    GPU_MILLI,
    HAMI_CORES,
    HAMI_MEMORY,
    PODS,
    GPUDemand,
    Node,
    SharingMode,
)

PER_DEVICE_MODES = frozenset({SharingMode.EXCLUSIVE, SharingMode.FRACTIONAL})
PER_DEVICE_RESOURCES = frozenset({GPU, GPU_MILLI, GPU_MEMORY, HAMI_CORES, HAMI_MEMORY})
UNBOUNDED = 1 << 30  # slots on a GPU for a share that reserves neither compute nor memory


@dataclass(frozen=True, slots=True)
class PodShape:
    """What one pod needs from a node: counted resources plus its per-device GPU demand."""

    counted: Resources  # everything except the per-device GPU resources, plus one "pods" slot
    gpu: GPUDemand

    @property
    def key(self) -> tuple[object, ...]:
        return (tuple(sorted(self.counted.items())), self.gpu)


def pod_shape(requests: Resources) -> PodShape:
    """Split a pod's requests into counted resources and per-device GPU demand."""
    from gpuq.core.nodes import gpu_demand

    counted = {
        name: amount for name, amount in requests.items() if name not in PER_DEVICE_RESOURCES and amount
    }
    counted[PODS] = counted.get(PODS, 0) + 1
    return PodShape(counted=counted, gpu=gpu_demand(requests))


class NodeCapacity:
    """Mutable free capacity of one node; every change goes through :meth:`take` and :meth:`give`."""

    __slots__ = ("bound", "free", "gpu_memory", "gpu_memory_full", "gpu_milli", "node", "per_device")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.per_device = node.sharing.mode in PER_DEVICE_MODES and node.gpu_count > 0
        alloc = node.allocatable
        self.free: dict[str, int] = {
            name: amount
            for name, amount in alloc.items()
            if not (self.per_device and name in PER_DEVICE_RESOURCES)
        }
        if self.per_device:
            count = node.gpu_count
            memory = node.gpu_memory_mib or (alloc.get(GPU_MEMORY, 0) // count if count else 0)
            self.gpu_milli = [1000] * count
            self.gpu_memory = [memory] * count
            self.gpu_memory_full = memory
        else:
            self.gpu_milli = []
            self.gpu_memory = []
            self.gpu_memory_full = 0
        self.bound: dict[str, tuple[PodShape, tuple[int, ...]]] = {}

    @property
    def fractional(self) -> bool:
        return self.per_device and self.node.sharing.mode is SharingMode.FRACTIONAL

    def signature(self) -> tuple[int, ...]:
        """The GPU part of the free state, for bucketing equivalent nodes (larger first)."""
        if self.per_device:
            if self.fractional:
                return tuple(sorted(self.gpu_milli, reverse=True))
            return (sum(1 for milli in self.gpu_milli if milli == 1000),)
        return tuple(amount for name, amount in sorted(self.free.items()) if name.startswith("nvidia.com/"))

    def gpu_free_milli(self) -> int:
        """Free GPU capacity in thousandths of a GPU, across the node's devices."""
        if self.per_device:
            return sum(self.gpu_milli)
        return 1000 * sum(amount for name, amount in self.free.items() if name.startswith("nvidia.com/"))

    def shortage(self, shape: PodShape) -> str | None:
        """Why one pod of ``shape`` does not fit now (kube-scheduler's wording), or None."""
        for name, amount in shape.counted.items():
            if self.free.get(name, 0) < amount:
                return "Too many pods" if name == PODS else f"Insufficient {name}"
        demand = shape.gpu
        if demand.count == 0:
            return None
        missing = f"Insufficient {GPU_MILLI if demand.partial else GPU}"
        if not self.per_device:
            return None if not demand.partial and self.free.get(GPU, 0) >= demand.count else missing
        if demand.partial and not self.fractional:
            return missing
        return None if len(self.pick_gpus(demand)) == demand.count else missing

    def _holds(self, index: int, demand: GPUDemand) -> bool:
        if demand.partial:
            return self.gpu_milli[index] >= demand.milli and self.gpu_memory[index] >= demand.memory_mib
        return self.gpu_milli[index] == 1000

    def pick_gpus(self, demand: GPUDemand) -> tuple[int, ...]:
        """GPU indices for a demand: whole GPUs lowest index first; shares on the fullest GPUs that fit.

        Returns fewer than ``demand.count`` indices (none) when the node cannot hold it.
        """
        if demand.count == 0 or not self.per_device:
            return ()
        fitting = [i for i in range(len(self.gpu_milli)) if self._holds(i, demand)]
        if len(fitting) < demand.count:
            return ()
        if demand.partial:
            fitting.sort(key=lambda i: (self.gpu_milli[i], i))
        return tuple(sorted(fitting[: demand.count])) if demand.count > 1 else (fitting[0],)

    def fit_count(self, shape: PodShape, limit: int) -> int:
        """How many pods of ``shape`` fit on the node at once (capped at ``limit``)."""
        count = limit
        for name, amount in shape.counted.items():
            count = min(count, self.free.get(name, 0) // amount)
            if count == 0:
                return 0
        demand = shape.gpu
        if demand.count == 0:
            return count
        if not self.per_device:
            return 0 if demand.partial else min(count, self.free.get(GPU, 0) // demand.count)
        if not demand.partial:
            whole = sum(1 for milli in self.gpu_milli if milli == 1000)
            return min(count, whole // demand.count)
        if not self.fractional:
            return 0
        slots = [self._slots(i, demand) for i in range(len(self.gpu_milli))]
        return min(count, _pods_over_distinct_gpus(slots, demand.count, count))

    def _slots(self, index: int, demand: GPUDemand) -> int:
        """How many shares of ``demand`` GPU ``index`` holds."""
        by_compute = self.gpu_milli[index] // demand.milli if demand.milli else UNBOUNDED
        by_memory = self.gpu_memory[index] // demand.memory_mib if demand.memory_mib else UNBOUNDED
        return min(by_compute, by_memory)

    def take(self, pod: str, shape: PodShape, gpus: tuple[int, ...] | None = None) -> tuple[int, ...]:
        """Bind one pod; the caller has checked :meth:`shortage`. Returns its GPU indices.

        ``gpus`` overrides the node's own choice (a policy's); it must hold the demand.
        """
        if gpus is None or not self._can_hold(gpus, shape):
            gpus = self.pick_gpus(shape.gpu)
        for name, amount in shape.counted.items():
            self.free[name] = self.free.get(name, 0) - amount
        if self.per_device:
            for index in gpus:
                self.gpu_milli[index] -= shape.gpu.milli
                self.gpu_memory[index] -= (
                    shape.gpu.memory_mib if shape.gpu.partial else self.gpu_memory[index]
                )
        elif shape.gpu.count:
            self.free[GPU] = self.free.get(GPU, 0) - shape.gpu.count
        self.bound[pod] = (shape, gpus)
        return gpus

    def _can_hold(self, gpus: tuple[int, ...], shape: PodShape) -> bool:
        demand = shape.gpu
        if not self.per_device or len(set(gpus)) != demand.count:
            return False
        return all(0 <= i < len(self.gpu_milli) and self._holds(i, demand) for i in gpus)

    def give(self, pod: str) -> None:
        """Unbind one pod and return what it held."""
        shape, gpus = self.bound.pop(pod)
        for name, amount in shape.counted.items():
            self.free[name] += amount
        if self.per_device:
            full = self.gpu_memory_full
            for index in gpus:
                self.gpu_milli[index] += shape.gpu.milli
                if shape.gpu.partial:
                    self.gpu_memory[index] += shape.gpu.memory_mib
                else:
                    self.gpu_memory[index] = full
        elif shape.gpu.count:
            self.free[GPU] += shape.gpu.count

    def allocated(self) -> Mapping[str, int]:
        """Allocated amount per allocatable resource (per-device GPU resources included)."""
        used = {name: self.node.allocatable[name] - free for name, free in self.free.items()}
        if self.per_device:
            used[GPU] = sum(1 for milli in self.gpu_milli if milli < 1000)
            if self.fractional:
                used[GPU_MILLI] = 1000 * len(self.gpu_milli) - sum(self.gpu_milli)
        return used


def _pods_over_distinct_gpus(slots: list[int], per_pod: int, limit: int) -> int:
    """The most pods, each taking one share on ``per_pod`` distinct GPUs, that ``slots`` hold.

    k pods fit exactly when sum(min(slots_i, k)) >= k * per_pod (a GPU serves each pod at most
    once); the largest such k is found by bisection.
    """
    low, high = 0, min(limit, sum(min(s, limit) for s in slots) // per_pod)
    while low < high:
        mid = (low + high + 1) // 2
        if sum(min(s, mid) for s in slots) >= mid * per_pod:
            low = mid
        else:
            high = mid - 1
    return low
