"""Machine lists of the public traces as gpuq NodePool manifests (docs/manifests/nodepool.md).

Identical machines (same GPU model and count, CPU, memory) become one
fixed-size pool with ``count``. GPU models are resolved in this order:

1. the spellings the catalogue lacks for models it has (``A100-SXM4-80GB``
   -> ``A100-80GB``), then any catalogue name, alias or product
   (``V100M16``, ``V100`` -> ``V100-16GB``, ``T4``);
2. real models the catalogue lacks (``A800-SXM4-80GB``, ``H800``): a
   GPUModel manifest with their published facts;
3. models a trace does not disclose (openb ``G2``/``G3``, PAI ``MISC``, spot
   ``GPU-series-N``, Philly's GPUs known only by memory): a GPUModel under
   the trace's own name, so a job's ``gpu_model`` still matches it, with
   compute capability ``0.0`` (family ``undefined``) and, where the memory
   is not given, a placeholder; the ``gpuq.dev/assumed`` annotation says which.

A value a list lacks (Philly CPU and memory, spot memory) is assumed from a
parameter and annotated the same way. Manifests are plain dicts, GPUModels
first, each kind sorted by name, ready for ``yaml.safe_dump_all``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from gpuq.core.gpus import DEFAULT_CATALOGUE
from gpuq.core.quantity import QuantityError, format_amount, to_amount
from gpuq.sim.traces.model import TraceError
from gpuq.sim.traces.reading import column_index, read_csv

API_VERSION = "gpuq.dev/v1alpha1"
ASSUMED = "gpuq.dev/assumed"
SOURCE = "gpuq.dev/source"
UNKNOWN_GPU_MEMORY = "16Gi"
"""Placeholder memory of an undisclosed GPU model (it only matters for memory-based GPU sharing)."""

_RENAMED = {"A100-SXM4-80GB": "A100-80GB"}
_PUBLISHED: dict[str, dict[str, Any]] = {  # NVIDIA's specifications; MIG as their A100 / H100 siblings
    "A800-SXM4-80GB": {
        "name": "A800-80GB", "product": "NVIDIA-A800-SXM4-80GB", "memory": "81920Mi",
        "computeCapability": "8.0", "migTable": "A100-80GB", "aliases": ["A800-SXM4-80GB", "A800"],
    },
    "H800": {
        "name": "H800-80GB", "product": "NVIDIA-H800", "memory": "81559Mi",
        "computeCapability": "9.0", "migTable": "H100-80GB", "aliases": ["H800"],
    },
}  # fmt: skip
_SLUG = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True, slots=True)
class Machine:
    """One machine as a list describes it: GPU model as written (None: no GPU), CPU and memory quantities."""

    gpu_model: str | None
    gpus: int
    cpu: str
    memory: str
    gpu_memory: str | None = None  # per GPU, when the list gives it
    assumed: str = ""  # what was not in the list and comes from a parameter


@dataclass(frozen=True, slots=True)
class NodePools:
    """GPUModel and NodePool manifests for one machine list, and what a reader should know."""

    manifests: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]

    def to_yaml(self) -> str:
        return yaml.safe_dump_all(self.manifests, sort_keys=False)


def openb_pools(path: Path) -> NodePools:
    """``openb_node_list_*.csv``: ``sn,cpu_milli,memory_mib,gpu,model`` (empty model: CPU-only)."""
    rows = _rows(path, ("cpu_milli", "memory_mib", "gpu", "model"))
    machines = (_machine(path, n, r[3] or None, r[2], f"{r[0]}m", f"{r[1]}Mi") for n, r in rows)
    return pools("openb", path, machines)


def philly_pools(path: Path, *, cpu_per_gpu: int = 4, memory_per_gpu: str = "32Gi") -> NodePools:
    """``cluster_machine_list.csv``: GPUs and their memory only; CPU and memory scale with the GPUs."""
    rows = _rows(path, ("number of GPUs", "single GPU mem"))
    per_gpu = _amount(path, 0, "memory", memory_per_gpu)
    assumed = f"cpu {cpu_per_gpu} and memory {memory_per_gpu} per GPU (not in the machine list)"
    machines = []
    for line, (gpus_text, memory_text) in rows:
        gpus = _int(path, line, gpus_text)
        size = max(gpus, 1)
        gpu_memory = memory_text.upper().removesuffix("GB") + "Gi"
        memory = format_amount("memory", per_gpu * size)
        model = f"philly-{memory_text.upper()}"
        machine = _machine(path, line, model, gpus_text, str(cpu_per_gpu * size), memory)
        machines.append(replace(machine, gpu_memory=_quantity(path, line, gpu_memory), assumed=assumed))
    return pools("philly", path, machines)


def pai_pools(path: Path) -> NodePools:
    """``pai_machine_spec.csv``: ``gpu_type`` (``CPU``: no GPU), cores, memory in GB (read as GiB), GPUs."""
    rows = _rows(path, ("gpu_type", "cap_cpu", "cap_mem", "cap_gpu"))
    machines = (_machine(path, n, None if r[0] == "CPU" else r[0], r[3], r[1], f"{r[2]}Gi") for n, r in rows)
    return pools("pai", path, machines, ["memory in GB is read as GiB; V100 is read as V100-16GB"])


def spot_pools(path: Path, *, memory_per_vcpu: str = "4Gi") -> NodePools:
    """``node_info_df.csv``: ``gpu_model,gpu_capacity_num,cpu_num``; memory is not listed."""
    rows = _rows(path, ("gpu_model", "gpu_capacity_num", "cpu_num"))
    per_vcpu = _amount(path, 0, "memory", memory_per_vcpu)
    assumed = f"memory {memory_per_vcpu} per vCPU (not in the node list)"
    machines = []
    for line, (model, gpus, cpus) in rows:
        memory = format_amount("memory", per_vcpu * _int(path, line, cpus))
        machines.append(replace(_machine(path, line, model, gpus, cpus, memory), assumed=assumed))
    return pools("spot", path, machines)


_BY_NAME = (
    ("openb_node_list", openb_pools),
    ("cluster_machine_list", philly_pools),
    ("pai_machine_spec", pai_pools),
    ("node_info_df", spot_pools),
)
MACHINE_LISTS = tuple(prefix for prefix, _ in _BY_NAME)


def node_pools(path: str | Path) -> NodePools:
    """The NodePools of a machine list, its kind known by its file name (:data:`MACHINE_LISTS`)."""
    source = Path(path)
    for prefix, reader in _BY_NAME:
        if source.name.startswith(prefix):
            return reader(source)
    raise TraceError(f"{source}: not a known machine list (names start with: {', '.join(MACHINE_LISTS)})")


def pools(source: str, path: Path, machines: Iterable[Machine], notes: Iterable[str] = ()) -> NodePools:
    """Identical machines as fixed-size pools named ``<source>-<model>-<N>gpu-<cpu>cpu[-<memory>]``."""
    counts = Counter(machines)
    models: dict[str, dict[str, Any]] = {}
    manifests: dict[str, dict[str, Any]] = {}
    for machine, count in sorted(counts.items(), key=lambda item: _pool_name(source, item[0])):
        name = _pool_name(source, machine)
        if name in manifests:  # two shapes differing only in what the name leaves out
            name = f"{name}-{len(manifests)}"
        spec: dict[str, Any] = {"machineType": name, "count": count}
        spec |= {"cpu": machine.cpu, "memory": machine.memory}
        if machine.gpu_model is not None and machine.gpus > 0:
            model, extra = resolve_model(machine.gpu_model, machine.gpu_memory)
            spec["gpu"] = {"model": model, "count": machine.gpus}
            if extra is not None:
                models.setdefault(model, extra)
        annotations = {SOURCE: f"{path.name}: {machine.gpus} x {machine.gpu_model or 'no GPU'}"}
        if machine.assumed:
            annotations[ASSUMED] = machine.assumed
        metadata = {"name": name, "annotations": annotations}
        manifests[name] = {"apiVersion": API_VERSION, "kind": "NodePool", "metadata": metadata, "spec": spec}
    total = sum(machine.gpus * count for machine, count in counts.items())
    summary = f"{len(manifests)} pools of {sum(counts.values())} machines, {total} GPUs"
    added = [f"GPUModel {name}: {_model_note(model)}" for name, model in sorted(models.items())]
    ordered = [models[n] for n in sorted(models)] + [manifests[n] for n in sorted(manifests)]
    return NodePools(tuple(ordered), (summary, *notes, *added))


def resolve_model(model: str, gpu_memory: str | None = None) -> tuple[str, dict[str, Any] | None]:
    """The catalogue name a pool uses, and the GPUModel manifest to add (None: the catalogue has it)."""
    if model in _RENAMED:
        return _RENAMED[model], None
    if model in _PUBLISHED:
        spec = dict(_PUBLISHED[model])
        name = spec.pop("name")
        return name, {"apiVersion": API_VERSION, "kind": "GPUModel", "metadata": {"name": name}, "spec": spec}
    known = DEFAULT_CATALOGUE.get(model)
    if known is not None:
        return known.name, None
    assumed = "undisclosed model: computeCapability 0.0 is a placeholder"
    if gpu_memory is None:
        assumed = f"undisclosed model: memory {UNKNOWN_GPU_MEMORY} and computeCapability 0.0 are placeholders"
    spec = {"product": model, "memory": gpu_memory or UNKNOWN_GPU_MEMORY, "computeCapability": "0.0"}
    metadata = {"name": model, "annotations": {ASSUMED: assumed}}
    return model, {"apiVersion": API_VERSION, "kind": "GPUModel", "metadata": metadata, "spec": spec}


def _model_note(model: dict[str, Any]) -> str:
    annotations: dict[str, str] = model["metadata"].get("annotations", {})
    return annotations.get(ASSUMED, "not in the built-in catalogue; added with its published specification")


def _pool_name(source: str, machine: Machine) -> str:
    model = _SLUG.sub("-", (machine.gpu_model or "cpu").lower()).strip("-").removeprefix(source + "-")
    parts = [source, model, f"{machine.gpus}gpu" if machine.gpus else "", f"{_slug(machine.cpu)}cpu"]
    if not machine.assumed:
        parts.append(_slug(machine.memory))
    return "-".join(p for p in parts if p)


def _slug(quantity: str) -> str:
    return _SLUG.sub("-", quantity.lower()).strip("-")


def _rows(path: Path, columns: tuple[str, ...]) -> list[tuple[int, list[str]]]:
    """The named columns of every row, stripped (Philly's header has spaces after the commas)."""
    header, rows = read_csv(path)
    index = column_index(header, path, columns)
    out = []
    for line, row in rows:
        if len(row) != len(header):
            raise TraceError(f"{path}:{line}: {len(row)} fields where the header has {len(header)}")
        out.append((line, [row[index[c]].strip() for c in columns]))
    return out


def _machine(path: Path, line: int, model: str | None, gpus: str, cpu: str, memory: str) -> Machine:
    """A machine with canonical quantities (``96000m`` -> ``96``, ``393216Mi`` -> ``384Gi``)."""
    cpu_milli = _amount(path, line, "cpu", cpu)
    memory_bytes = _amount(path, line, "memory", memory)
    count = _int(path, line, gpus)
    if (model is None) != (count == 0):
        shown = model or "(none)"
        raise TraceError(f"{path}:{line}: {count} GPUs of model {shown}: both or neither expected")
    cpu_text, memory_text = format_amount("cpu", cpu_milli), format_amount("memory", memory_bytes)
    return Machine(model, count, cpu_text, memory_text)


def _amount(path: Path, line: int, resource: str, text: str) -> int:
    try:
        amount = to_amount(resource, text)
    except QuantityError as err:
        raise TraceError(f"{path}:{line}: {resource}: {err}") from None
    if amount <= 0 and resource == "cpu":
        raise TraceError(f"{path}:{line}: cpu {text!r}: must be greater than 0")
    return amount


def _quantity(path: Path, line: int, text: str) -> str:
    return format_amount("memory", _amount(path, line, "memory", text))


def _int(path: Path, line: int, text: str) -> int:
    if not text.isdigit():
        raise TraceError(f"{path}:{line}: {text!r} is not a whole number of GPUs or CPUs")
    return int(text)
