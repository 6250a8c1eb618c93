"""A gpuq NodePool as a ``google_container_node_pool`` (hashicorp/google 7.x), and the cloud a pool's
machine type belongs to.

The rule (docs/terraform.md): one resource per pool, in the cluster, project and location of
Terraform variables; ``node_config`` carries the machine type, the GPUs as ``guest_accelerator``
(GKE installs the default driver; a MIG pool with one profile size gets ``gpu_partition_size``, a
time-sliced one ``gpu_sharing_config``), ``spot``, the reservation of reserved and calendar pools,
``flex_start``, labels and taints; the pool's zones are ``node_locations``; a fixed pool has a
``node_count`` per zone, an autoscaled one ``total_min_node_count`` / ``total_max_node_count``; a
pool in one topology block gets COMPACT placement. What GKE cannot take is a warning, never a
silent change: labels GKE sets itself are left out, a mixed MIG layout is written as whole GPUs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from gpuq.api import machines
from gpuq.api.diagnostics import Manifest
from gpuq.api.machines import SPOT_LABEL
from gpuq.api.nodes_convert import sharing_of
from gpuq.core.gpus import GPUCatalogue
from gpuq.core.mig import MigLayoutError, expand_layout
from gpuq.core.nodes import SharingMode
from gpuq.k8s.export_common import Obj, drop_empty
from gpuq.k8s.manifests_devices import DEVICE_PLUGIN_LABEL, MIG_CONFIG_LABEL
from gpuq.k8s.manifests_nodes import pool_labels

Cloud = Literal["gke", "aws"]
_GCE_MACHINE = re.compile(
    r"^(a[234]x?|a4|g[24]|n[124]d?|c[234][ad]?|c4a|e2|t2[ad]|m[1-4]|h[34]d?|z3|x4|ct[3-6][a-z]*)-[a-z0-9-]+$"
)
"""GCE machine families (``a3-highgpu-8g``, ``g2-standard-24``, ``n1-standard-8``, TPU ``ct5lp-...``)."""
_EC2_INSTANCE = re.compile(r"^[a-z][a-z0-9-]*\.[0-9]*[a-z][a-z0-9]*$")
"""EC2 instance types are ``family.size`` (``p5.48xlarge``, ``g6e.12xlarge``)."""
ACCELERATOR_TYPES = {
    "T4": "nvidia-tesla-t4",
    "P4": "nvidia-tesla-p4",
    "P100": "nvidia-tesla-p100",
    "V100-16GB": "nvidia-tesla-v100",
    "L4": "nvidia-l4",
    "A100-40GB": "nvidia-tesla-a100",
    "A100-80GB": "nvidia-a100-80gb",
    "H100-80GB": "nvidia-h100-80gb",
    "H200": "nvidia-h200-141gb",
    "B200": "nvidia-b200",
}
"""GCE accelerator type of each catalogue model GCE offers (``gcloud compute accelerator-types list``);
an A3 Mega machine's H100s are ``nvidia-h100-mega-80gb``."""
_TAINT_EFFECTS = {
    "NoSchedule": "NO_SCHEDULE",
    "PreferNoSchedule": "PREFER_NO_SCHEDULE",
    "NoExecute": "NO_EXECUTE",
}
RESERVATION_LABEL = "cloud.google.com/reservation-name"
_SET_BY_GKE = (SPOT_LABEL, "cloud.google.com/gke-provisioning", "cloud.google.com/gke-nodepool")
_GPU_OPERATOR = (DEVICE_PLUGIN_LABEL, MIG_CONFIG_LABEL)
"""The GPU operator's config labels: GKE's own GPU settings replace its ConfigMaps."""
_KUBERNETES_DOMAINS = ("kubernetes.io", "k8s.io")


class PoolShapeError(ValueError):
    """A pool gpuq cannot write for any cloud; the message names the file, pool and field."""


@dataclass(frozen=True)
class GkePool:
    resource: Obj
    warnings: tuple[str, ...]


def where(manifest: Manifest, field: str) -> str:
    """``path:line: NodePool/name: field`` as the CLI's diagnostics print it."""
    path = tuple(field.split("."))
    return f"{manifest.path}:{manifest.line_of(path)}: {manifest.kind}/{manifest.name}: {field}"


def cloud_of(manifest: Manifest, pool: machines.NodePool) -> Cloud:
    """``gke`` for a GCE machine type, ``aws`` for an EC2 instance type; else :class:`PoolShapeError`."""
    machine = pool.spec.machine_type
    if _EC2_INSTANCE.match(machine):
        return "aws"
    if _GCE_MACHINE.match(machine):
        return "gke"
    raise PoolShapeError(
        f"{where(manifest, 'spec.machineType')}: {machine!r} is neither a GCE machine type (a3-highgpu-8g) "
        "nor an EC2 instance type (p5.48xlarge): no cloud's Terraform resource can create it"
    )


def accelerator_type(manifest: Manifest, pool: machines.NodePool, catalogue: GPUCatalogue) -> str:
    """The GCE accelerator type of the pool's GPUs; :class:`PoolShapeError` for a model GCE lacks."""
    gpu = pool.spec.gpu
    assert gpu is not None
    model = catalogue.get(gpu.model)
    name = model.name if model is not None else gpu.model
    if name == "H100-80GB" and pool.spec.machine_type.startswith("a3-megagpu"):
        return "nvidia-h100-mega-80gb"
    if name not in ACCELERATOR_TYPES:
        raise PoolShapeError(
            f"{where(manifest, 'spec.gpu.model')}: {gpu.model!r} has no GCE accelerator type "
            f"(known: {', '.join(sorted(ACCELERATOR_TYPES))})"
        )
    return ACCELERATOR_TYPES[name]


def _guest_accelerator(
    manifest: Manifest, pool: machines.NodePool, catalogue: GPUCatalogue, warnings: list[str]
) -> Obj:
    gpu = pool.spec.gpu
    assert gpu is not None
    accelerator: Obj = {
        "type": accelerator_type(manifest, pool, catalogue),
        "count": gpu.count,
        "gpu_driver_installation_config": {"gpu_driver_version": "DEFAULT"},
    }
    sharing = sharing_of(gpu)
    if sharing.mode in (SharingMode.MIG_SINGLE, SharingMode.MIG_MIXED):
        size = _partition_size(pool, catalogue)
        if size is None:
            warnings.append(
                f"{where(manifest, 'spec.gpu.sharing.migLayout')}: GKE partitions a node pool's GPUs into "
                "one profile size only (gpu_partition_size): written as whole GPUs"
            )
        else:
            accelerator["gpu_partition_size"] = size
    elif sharing.mode == SharingMode.TIME_SLICING:
        accelerator["gpu_sharing_config"] = {
            "gpu_sharing_strategy": "TIME_SHARING",
            "max_shared_clients_per_gpu": sharing.replicas,
        }
    elif sharing.mode == SharingMode.FRACTIONAL:
        warnings.append(
            f"{where(manifest, 'spec.gpu.sharing.strategy')}: GKE has no fractional GPUs: written as whole "
            "GPUs (the fractional scheduler, e.g. HAMi, shares them)"
        )
    return accelerator


def _partition_size(pool: machines.NodePool, catalogue: GPUCatalogue) -> str | None:
    """The one MIG profile every GPU of the pool is cut into, or None (several, or unknown)."""
    gpu = pool.spec.gpu
    model = catalogue.get(gpu.model) if gpu is not None else None
    if model is None or model.mig_table is None:
        return None
    try:
        profiles = {
            name
            for entry in sharing_of(gpu).mig_layout
            for name in expand_layout(model.mig_table, entry[0] if len(entry) == 1 else entry)
        }
    except MigLayoutError:
        return None
    return profiles.pop() if len(profiles) == 1 else None


def _labels(manifest: Manifest, pool: machines.NodePool, warnings: list[str]) -> dict[str, str]:
    """The pool's labels less those GKE sets itself (spot, provisioning, topology) or refuses
    (Kubernetes' domains) and the GPU operator's; a label the user wrote and GKE sets is a warning."""
    spec = pool.spec
    topology = (spec.topology_labels.block, spec.topology_labels.rack)
    out = {}
    for key, value in pool_labels(pool).items():
        domain = key.partition("/")[0] if "/" in key else ""
        kubernetes = any(domain == d or domain.endswith(f".{d}") for d in _KUBERNETES_DOMAINS)
        if key in _SET_BY_GKE or key in topology or kubernetes or key in _GPU_OPERATOR:
            if key in spec.labels and key != SPOT_LABEL:
                warnings.append(f"{where(manifest, f'spec.labels.{key}')}: set by GKE itself: not written")
            continue
        out[key] = value
    return out


def _reservation(pool: machines.NodePool) -> Obj | None:
    capacity = pool.spec.capacity_type
    if capacity in ("reserved", "calendar"):
        name = pool.spec.labels.get(RESERVATION_LABEL)
        if name is None:
            return {"consume_reservation_type": "ANY_RESERVATION"}
        return {
            "consume_reservation_type": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [name],
        }
    if capacity == "flex-start":
        return {"consume_reservation_type": "NO_RESERVATION"}
    return None


def _node_config(
    manifest: Manifest, pool: machines.NodePool, catalogue: GPUCatalogue, warnings: list[str]
) -> Obj:
    spec = pool.spec
    taints = [{"key": t.key, "value": t.value or "", "effect": _TAINT_EFFECTS[t.effect]} for t in spec.taints]
    return drop_empty(
        {
            "machine_type": spec.machine_type,
            "guest_accelerator": [_guest_accelerator(manifest, pool, catalogue, warnings)]
            if spec.gpu
            else None,
            "spot": True if spec.capacity_type == "spot" else None,
            "flex_start": True if spec.capacity_type == "flex-start" else None,
            "reservation_affinity": _reservation(pool),
            "labels": _labels(manifest, pool, warnings),
            "taint": taints,
        }
    )


def _sizes(manifest: Manifest, pool: machines.NodePool, warnings: list[str]) -> Obj:
    """``node_count`` (per zone) of a fixed pool; ``initial_node_count`` and total bounds of an
    autoscaled one (a pool whose ``min`` and ``max`` differ)."""
    count, low, high = pool.spec.sizes()
    zones = max(1, len(pool.spec.known_zones()))
    if not pool.spec.known_zones():
        warnings.append(
            f"{where(manifest, 'spec.zone')}: none given: GKE's node counts are per zone of the cluster's "
            "node locations, so a regional cluster gets this pool's nodes in each of its zones"
        )
    if low == high:
        if count % zones:
            raise PoolShapeError(
                f"{where(manifest, 'spec.count')}: {count} nodes do not split evenly over {zones} zones "
                "(GKE's node_count is per zone)"
            )
        return {"node_count": count // zones}
    autoscaling: Obj = {"total_min_node_count": low, "total_max_node_count": high}
    if pool.spec.capacity_type in ("spot", "flex-start"):
        autoscaling["location_policy"] = "ANY"
    return {"initial_node_count": count // zones, "autoscaling": autoscaling}


def gke_node_pool(manifest: Manifest, pool: machines.NodePool, catalogue: GPUCatalogue) -> GkePool:
    """The ``google_container_node_pool`` body of ``pool`` (the cluster comes from variables)."""
    spec = pool.spec
    warnings: list[str] = []
    body: Obj = {
        "name": str(pool.metadata.name),
        "project": "${var.project}",
        "location": "${var.location}",
        "cluster": "${var.cluster_name}",
    }
    if spec.known_zones():
        body["node_locations"] = spec.known_zones()
    body.update(_sizes(manifest, pool, warnings))
    if spec.pods != machines.DEFAULT_PODS:
        body["max_pods_per_node"] = spec.pods
    body["node_config"] = _node_config(manifest, pool, catalogue, warnings)
    if spec.topology is not None and spec.topology.block:
        if len(spec.known_zones()) > 1:
            warnings.append(
                f"{where(manifest, 'spec.topology.block')}: compact placement needs one zone: not written"
            )
        else:
            body["placement_policy"] = {"type": "COMPACT"}
    return GkePool(body, tuple(warnings))
