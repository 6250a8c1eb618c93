"""``gpuq get nodes`` and ``gpuq describe node``: allocatable, allocated and free, per node and per GPU.

Both read the same snapshot as ``gpuq admit``: the nodes (NodePools expanded,
``v1`` Nodes as dumped) and the workloads that already hold quota are bound
first; ``--admit`` runs the scheduling cycles before showing the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table

from gpuq.core.nodes import GPU, GPU_MILLI, MIG_PREFIX, is_device_resource
from gpuq.core.placement.capacity import NodeCapacity
from gpuq.core.placement.engine import Placer
from gpuq.core.quantity import format_amount

GFD_PREFIX = "nvidia.com/"


def node_summary(capacity: NodeCapacity) -> dict[str, Any]:
    """One row of ``gpuq get nodes``: the node's GPUs and the devices in use."""
    node = capacity.node
    allocated = capacity.allocated()
    devices = sorted(r for r in node.allocatable if is_device_resource(r))
    return {
        "name": node.name,
        "pool": node.pool or "",
        "gpuModel": node.gpu_model or "",
        "gpus": node.gpu_count,
        "sharing": node.sharing.mode.value if node.gpu_count else "",
        "capacityType": node.capacity_type or "",
        "devices": {
            name: {
                "allocatable": node.allocatable[name],
                "allocated": allocated.get(name, 0),
                "free": node.allocatable[name] - allocated.get(name, 0),
            }
            for name in devices
        },
        "cpu": _triple("cpu", node.allocatable, allocated),
        "memory": _triple("memory", node.allocatable, allocated),
        "pods": len(capacity.bound),
        "schedulable": not node.unschedulable,
    }


def _triple(resource: str, allocatable: Mapping[str, int], allocated: Mapping[str, int]) -> dict[str, str]:
    total = allocatable.get(resource, 0)
    used = allocated.get(resource, 0)
    return {
        "allocatable": format_amount(resource, total),
        "allocated": format_amount(resource, used),
        "free": format_amount(resource, total - used),
    }


def node_detail(capacity: NodeCapacity) -> dict[str, Any]:
    """``gpuq describe node``: everything in the summary plus labels, taints, GPUs and pods."""
    node = capacity.node
    detail = node_summary(capacity)
    detail["labels"] = dict(sorted(node.labels.items()))
    detail["gfdLabels"] = {k: v for k, v in sorted(node.labels.items()) if k.startswith(GFD_PREFIX)}
    detail["taints"] = [
        f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in node.taints
    ]
    detail["resources"] = {
        name: {
            "allocatable": format_amount(name, amount),
            "allocated": format_amount(name, capacity.allocated().get(name, 0)),
            "free": format_amount(name, amount - capacity.allocated().get(name, 0)),
        }
        for name, amount in sorted(node.allocatable.items())
    }
    detail["gpuDevices"] = _devices(capacity)
    detail["migLayout"] = _mig_layout(capacity)
    detail["boundPods"] = [
        {
            "pod": pod,
            "gpus": list(gpus),
            "requests": _requests(shape.counted, shape.gpu.count, shape.gpu.milli),
        }
        for pod, (shape, gpus) in sorted(capacity.bound.items())
    ]
    return detail


def _devices(capacity: NodeCapacity) -> list[dict[str, Any]]:
    """Per GPU, for whole and fractional sharing: free thousandths and the pods on it."""
    if not capacity.per_device:
        return []
    pods_on: dict[int, list[str]] = {}
    for pod, (_, gpus) in sorted(capacity.bound.items()):
        for index in gpus:
            pods_on.setdefault(index, []).append(pod)
    return [
        {
            "index": index,
            "freeMilli": milli,
            "freeMemoryMiB": capacity.gpu_memory[index],
            "pods": pods_on.get(index, []),
        }
        for index, milli in enumerate(capacity.gpu_milli)
    ]


def _mig_layout(capacity: NodeCapacity) -> list[dict[str, Any]]:
    """MIG slices per GPU as configured, and per profile how many are in use on the node."""
    layout = capacity.node.sharing.mig_layout
    if not layout:
        return []
    used = capacity.allocated()
    per_gpu = [list(profiles) for profiles in layout]
    profiles = sorted({p for gpu in layout for p in gpu})
    return [{"gpu": i, "slices": slices} for i, slices in enumerate(per_gpu)] + [
        {
            "profile": profile,
            "allocatable": capacity.node.allocatable.get(MIG_PREFIX + profile, 0),
            "allocated": used.get(MIG_PREFIX + profile, 0),
        }
        for profile in profiles
    ]


def _requests(counted: Mapping[str, int], gpus: int, milli: int) -> dict[str, str]:
    shown = {name: format_amount(name, amount) for name, amount in sorted(counted.items()) if name != "pods"}
    if gpus and milli < 1000:
        shown[GPU_MILLI] = str(milli)
    elif gpus:
        shown[GPU] = str(gpus)
    return shown


def nodes_document(placer: Placer) -> list[dict[str, Any]]:
    return [node_summary(capacity) for _, capacity in sorted(placer.nodes.items())]


def nodes_table(document: list[dict[str, Any]]) -> Table:
    """``gpuq get nodes`` as a table: one row of :func:`nodes_document` per node."""
    table = Table(title="Nodes", title_justify="left")
    for column in (
        "name",
        "pool",
        "gpu model",
        "sharing",
        "devices free/allocatable",
        "cpu free",
        "pods",
    ):
        table.add_column(column)
    for row in document:
        devices = ", ".join(
            f"{name.removeprefix('nvidia.com/')} {d['free']}/{d['allocatable']}"
            for name, d in row["devices"].items()
        )
        pool = row["pool"] + (f" ({row['capacityType']})" if row["capacityType"] else "")
        table.add_row(
            row["name"], pool, row["gpuModel"], row["sharing"], devices, row["cpu"]["free"], str(row["pods"])
        )
    return table
