"""Which device a pod gets when placement only counted: MIG slices and GPUs of MIG-mixed nodes.

On a node whose GPUs placement tracks one by one (whole or fractional), a
binding already names the GPU indices. With MIG, the device plugin exposes
slices as counted resources (``nvidia.com/mig-1g.10gb: 3``) and placement
only checks the count; the kubelet's device manager then picks concrete
devices. This is that last step: free slice UUIDs of the asked profile, and
free whole GPUs, per node, handed back when the pod's workload stops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuq.core.nodes import GPU, MIG_PREFIX
from gpuq.run.gpus import GPUDevice


class DeviceAllocator:
    """Free devices of one node, by kind: whole GPU indices and MIG slice UUIDs per profile."""

    def __init__(self, devices: Sequence[GPUDevice]) -> None:
        self._free: dict[str, list[str]] = {GPU: [str(d.index) for d in devices if not d.mig_enabled]}
        for device in devices:
            if device.mig_enabled:
                for mig in device.mig_devices:
                    self._free.setdefault(MIG_PREFIX + mig.profile, []).append(mig.uuid)
        self._held: dict[str, list[tuple[str, str]]] = {}  # owner -> (resource, device id)

    def take(self, owner: str, requests: Mapping[str, int]) -> tuple[str, ...]:
        """Devices for one pod's device requests; raises ValueError (taking nothing) when too few are free."""
        wanted = {r: n for r, n in requests.items() if (r == GPU or r.startswith(MIG_PREFIX)) and n > 0}
        for resource, count in wanted.items():
            if len(self._free.get(resource, [])) < count:
                free = len(self._free.get(resource, []))
                raise ValueError(f"{owner}: {count} {resource} asked, {free} free on this node")
        taken: list[tuple[str, str]] = []
        for resource, count in sorted(wanted.items()):
            pool = self._free[resource]
            taken += [(resource, pool.pop(0)) for _ in range(count)]
        self._held.setdefault(owner, []).extend(taken)
        return tuple(device for _, device in taken)

    def give(self, owner: str) -> None:
        for resource, device in self._held.pop(owner, []):
            pool = self._free[resource]
            pool.append(device)
            pool.sort(key=_order)

    def free(self, resource: str) -> int:
        return len(self._free.get(resource, []))


def _order(device: str) -> tuple[int, str]:
    return (int(device), "") if device.isdigit() else (1 << 30, device)
