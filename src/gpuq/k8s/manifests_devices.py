"""NVIDIA device plugin and mig-parted ConfigMaps for node pools whose GPUs are shared.

Formats follow NVIDIA's k8s-device-plugin and the GPU operator's documentation:

* ``gpuq-device-plugin``: ONE ConfigMap, the one the ClusterPolicy's
  ``devicePlugin.config.name`` names, with the device plugin's config file of each
  shared pool under the key ``<pool>`` (``version: v1``, ``flags.migStrategy``
  single / mixed / none, and for time-slicing ``sharing.timeSlicing.resources[]``
  with ``replicas`` and ``renameByDefault``). The device plugin picks the key of a
  node from its label ``nvidia.com/device-plugin.config`` (:func:`node_config_labels`;
  GPU operator docs, "Time-Slicing GPUs in Kubernetes", multiple node configurations).
* ``gpuq-mig-parted``: ONE ConfigMap, the one ``migManager.config.name`` names, whose
  ``config.yaml`` holds a mig-parted config with ``all-disabled`` (the MIG Manager's
  default) and one ``mig-configs`` entry per MIG pool, named ``<pool>``: ``devices:
  all`` when every GPU has the same layout, else one entry per GPU index; MIG Manager
  applies to each node the entry its label ``nvidia.com/mig.config`` names (GPU
  operator docs, "GPU Operator with MIG", custom MIG configuration).

Pools with fractional sharing (HAMi-style) or none get no ConfigMap. On GKE the
node pool's own GPU sharing settings take the place of these files.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import yaml

from gpuq.api import machines
from gpuq.api.diagnostics import Manifest
from gpuq.api.nodes_convert import effective_model, sharing_of
from gpuq.core.gpus import GPUCatalogue
from gpuq.core.mig import MigLayoutError, expand_layout
from gpuq.core.nodes import SharingMode
from gpuq.k8s.export_common import ExportOptions, Obj, first_models, make

DEVICE_PLUGIN_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
DEVICE_PLUGIN_CONFIG_MAP = "gpuq-device-plugin"
MIG_PARTED_CONFIG_MAP = "gpuq-mig-parted"
ALL_DISABLED: dict[str, object] = {"all-disabled": [{"devices": "all", "mig-enabled": False}]}
_MIG_STRATEGY = {SharingMode.MIG_SINGLE: "single", SharingMode.MIG_MIXED: "mixed"}
_SHARED_MODES = (SharingMode.MIG_SINGLE, SharingMode.MIG_MIXED, SharingMode.TIME_SLICING)


def node_config_labels(pool: machines.NodePool) -> dict[str, str]:
    """Labels that make the GPU operator apply the pool's configs to its nodes (none when unshared)."""
    mode = sharing_of(pool.spec.gpu).mode
    labels = {DEVICE_PLUGIN_LABEL: str(pool.metadata.name)} if mode in _SHARED_MODES else {}
    if mode in _MIG_STRATEGY:
        labels[MIG_CONFIG_LABEL] = str(pool.metadata.name)
    return labels


def device_plugin_config(pool: machines.NodePool) -> dict[str, object] | None:
    """The device plugin config file for a pool, or None when its GPUs are not MIG or time-sliced."""
    sharing = sharing_of(pool.spec.gpu)
    if sharing.mode in _MIG_STRATEGY:
        return {"version": "v1", "flags": {"migStrategy": _MIG_STRATEGY[sharing.mode]}}
    if sharing.mode != SharingMode.TIME_SLICING:
        return None
    resource = {"name": "nvidia.com/gpu", "replicas": sharing.replicas}
    time_slicing = {"renameByDefault": sharing.rename_by_default, "resources": [resource]}
    return {"version": "v1", "flags": {"migStrategy": "none"}, "sharing": {"timeSlicing": time_slicing}}


def mig_parted_config(pool: machines.NodePool, catalogue: GPUCatalogue) -> dict[str, object] | None:
    """The mig-parted config for a MIG pool, or None (not MIG, or no MIG table for its GPU)."""
    gpu = pool.spec.gpu
    sharing = sharing_of(gpu)
    model = effective_model(gpu, catalogue)
    if sharing.mode not in _MIG_STRATEGY or model is None or model.mig_table is None or gpu is None:
        return None
    try:
        layouts = [_mig_devices(model.mig_table, entry) for entry in sharing.mig_layout]
    except MigLayoutError:
        return None
    if len(layouts) == 1:
        entries = [{"devices": "all", "mig-enabled": True, "mig-devices": layouts[0]}]
    else:
        entries = [
            {"devices": [index], "mig-enabled": True, "mig-devices": devices}
            for index, devices in enumerate(layouts[: gpu.count])
        ]
    return {"version": "v1", "mig-configs": {str(pool.metadata.name): entries}}


def _mig_devices(table: str, entry: Sequence[str]) -> dict[str, int]:
    """Instances per profile of one GPU's layout (a named layout or a list of profiles)."""
    layout: str | Sequence[str] = entry[0] if len(entry) == 1 else entry
    return dict(sorted(Counter(expand_layout(table, layout)).items()))


def device_config_maps(
    manifests: Sequence[Manifest], catalogue: GPUCatalogue, options: ExportOptions
) -> list[Obj]:
    """The device plugin ConfigMap (a key per shared pool) and, when a pool is MIG, the mig-parted one."""
    namespace = options.gpu_operator_namespace
    plugin_data: dict[str, str] = {}
    mig_configs: dict[str, object] = {}
    for pool in first_models(manifests, machines.NodePool):
        plugin = device_plugin_config(pool)
        if plugin is None:
            continue
        plugin_data[str(pool.metadata.name)] = yaml.safe_dump(plugin, sort_keys=False)
        parted = mig_parted_config(pool, catalogue)
        if parted is not None:
            mig_configs.update(parted["mig-configs"])  # type: ignore[call-overload]
    out: list[Obj] = []
    if plugin_data:
        out.append({**make("v1", "ConfigMap", DEVICE_PLUGIN_CONFIG_MAP, namespace), "data": plugin_data})
    if mig_configs:
        document = {"version": "v1", "mig-configs": {**ALL_DISABLED, **mig_configs}}
        data = {"config.yaml": yaml.safe_dump(document, sort_keys=False)}
        out.append({**make("v1", "ConfigMap", MIG_PARTED_CONFIG_MAP, namespace), "data": data})
    return out
