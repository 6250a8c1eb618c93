"""This machine's GPUs: discovered through NVML, or made up for ``--gpus N --gpu-model M``.

``discover`` reads what nvidia-ml-py (``pynvml``) reports and never raises for
a missing library, driver or GPU: ``gpuq serve`` must start on a laptop too,
and says why it found no GPU. ``local_node`` turns the devices into the core
``Node`` the placer sees, with the allocatable and GPU Feature Discovery labels
the NVIDIA device plugin would give the machine (MIG slices in the mixed
strategy), so ResourceFlavors written for a cluster match it. ``device_env``
is the one place that decides which GPUs a pod process may see.

``pynvml`` has no type stubs: the module (or a test fake of it) is handled as
``Any`` and only the values read from it are typed.
"""

from __future__ import annotations

import importlib
import logging
import re
import uuid as uuidlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from gpuq.core.devices import gfd_labels
from gpuq.core.gpus import DEFAULT_CATALOGUE, GPUCatalogue, GPUModelSpec
from gpuq.core.mig import MIG_TABLES
from gpuq.core.nodes import GPU, HOSTNAME_LABEL, MIG_PREFIX, PODS, GPUSharing, Node, SharingMode

_log = logging.getLogger(__name__)
MIB = 2**20
MAX_VIRTUAL_GPUS = 64
_MIG_ENABLED = 1  # NVML_DEVICE_MIG_ENABLE: the current mode, first of GetMigMode's pair
_ECC_UNCORRECTED, _ECC_VOLATILE = 1, 0  # NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC
_PROFILE_IN_NAME = re.compile(r"\b(\d+g\.\d+gb(?:\+[a-z]+)?)", re.IGNORECASE)
_VIRTUAL_NAMESPACE = uuidlib.UUID("5f6b3c1e-7a0d-4c8e-9b2f-0a1d2c3e4f50")


class MigDevice(NamedTuple):
    """One MIG slice: its UUID (``MIG-...``, usable in ``CUDA_VISIBLE_DEVICES``), profile and memory."""

    uuid: str
    profile: str  # e.g. "1g.10gb"
    memory_mib: int


@dataclass(frozen=True, slots=True)
class GPUTelemetry:
    """One GPU's readings; each is None when NVML could not give it (unsupported, no permission).

    XID errors are not here: NVML reports them only as events on a registered
    event set, not as a value that can be polled.
    """

    index: int
    uuid: str
    utilization_pct: int | None = None
    memory_utilization_pct: int | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    ecc_uncorrected: int | None = None  # volatile (since the driver loaded) uncorrected ECC errors


@dataclass(frozen=True, slots=True)
class GPUDevice:
    """One physical GPU. ``index`` is NVML's (PCI bus order); ``name`` is NVML's product name."""

    index: int
    uuid: str
    name: str
    memory_mib: int
    mig_enabled: bool = False
    mig_devices: tuple[MigDevice, ...] = ()
    telemetry: GPUTelemetry | None = None


@dataclass(frozen=True, slots=True)
class Discovery:
    """What ``discover`` found. ``reason`` says why ``devices`` is empty; ``problems`` lists GPUs left out."""

    devices: tuple[GPUDevice, ...] = ()
    reason: str | None = None
    problems: tuple[str, ...] = ()
    driver_version: str | None = None


# --- NVML ---------------------------------------------------------------------------------------


def discover(
    nvml: Any = None, *, catalogue: GPUCatalogue = DEFAULT_CATALOGUE, with_telemetry: bool = False
) -> Discovery:
    """This machine's GPUs through ``nvml`` (default: ``pynvml``, imported now); never raises for NVML.

    1. No library: empty, with the reason. 2. ``nvmlInit`` fails (no driver, no
    ``libnvidia-ml``): empty, with NVML's message. 3. Each GPU is described; one
    whose calls fail is left out and named in ``problems``. 4. ``nvmlShutdown``.
    """
    nv = _Nvml.open(nvml)
    if isinstance(nv, str):
        return Discovery(reason=nv)
    try:
        driver = nv.maybe("nvmlSystemGetDriverVersion")
        try:
            count = int(nv("nvmlDeviceGetCount"))
        except nv.errors as error:
            return Discovery(reason=f"NVML could not count the GPUs: {error}", driver_version=_text(driver))
        devices: list[GPUDevice] = []
        problems: list[str] = []
        for index in range(count):
            try:
                devices.append(_describe(nv, index, catalogue, with_telemetry))
            except nv.errors as error:
                problems.append(f"GPU {index} left out: {error}")
        reason = None if devices else ("no usable NVIDIA GPU" if problems else "no NVIDIA GPU found")
        return Discovery(tuple(devices), reason, tuple(problems), _text(driver))
    finally:
        nv.close()


def telemetry(nvml: Any = None) -> list[GPUTelemetry]:
    """Current readings of every GPU, in index order; empty when NVML is unavailable."""
    nv = _Nvml.open(nvml)
    if isinstance(nv, str):
        return []
    try:
        found: list[GPUTelemetry] = []
        for index in range(int(nv.maybe("nvmlDeviceGetCount") or 0)):
            handle = nv.maybe("nvmlDeviceGetHandleByIndex", index)
            if handle is not None:
                found.append(_read_telemetry(nv, index, handle))
        return found
    finally:
        nv.close()


class _Nvml:
    """One ``nvmlInit`` .. ``nvmlShutdown`` session over the untyped module: calls by function name."""

    def __init__(self, module: Any) -> None:
        self.module = module
        nvml_error: type[Exception] = module.NVMLError
        # What a call raises when the GPU, driver or binding cannot answer (AttributeError: old binding).
        self.errors: tuple[type[Exception], ...] = (nvml_error, OSError, AttributeError)

    @classmethod
    def open(cls, nvml: Any) -> _Nvml | str:
        """An initialised session, or why there is none."""
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError:
                return "nvidia-ml-py (pynvml) is not installed"
        session = cls(nvml)
        try:
            session("nvmlInit")
        except session.errors as error:
            return f"NVML is not available: {error}"
        return session

    def __call__(self, function: str, *args: Any) -> Any:
        return getattr(self.module, function)(*args)

    def maybe(self, function: str, *args: Any) -> Any:
        """The call's result, or None when NVML cannot answer it."""
        try:
            return self(function, *args)
        except self.errors:
            return None

    def close(self) -> None:
        self.maybe("nvmlShutdown")


def _text(value: str | bytes | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _describe(nv: _Nvml, index: int, catalogue: GPUCatalogue, with_telemetry: bool) -> GPUDevice:
    handle = nv("nvmlDeviceGetHandleByIndex", index)
    name = str(_text(nv("nvmlDeviceGetName", handle)))
    uuid = str(_text(nv("nvmlDeviceGetUUID", handle)))
    memory_mib = int(nv("nvmlDeviceGetMemoryInfo", handle).total) // MIB
    # GPUs that cannot do MIG answer GetMigMode with NVMLError_NotSupported.
    mode = nv.maybe("nvmlDeviceGetMigMode", handle)
    mig_enabled = mode is not None and int(mode[0]) == _MIG_ENABLED
    slices = _mig_devices(nv, handle, model_spec(name, catalogue)) if mig_enabled else ()
    readings = _read_telemetry(nv, index, handle, uuid) if with_telemetry else None
    return GPUDevice(index, uuid, name, memory_mib, mig_enabled, slices, readings)


def _mig_devices(nv: _Nvml, handle: Any, spec: GPUModelSpec | None) -> tuple[MigDevice, ...]:
    """The MIG slices that exist (empty slots answer NotFound); a slice that cannot be read raises."""
    found: list[MigDevice] = []
    for slot in range(int(nv("nvmlDeviceGetMaxMigDeviceCount", handle))):
        mig = nv.maybe("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
        if mig is None:
            continue
        uuid = str(_text(nv("nvmlDeviceGetUUID", mig)))
        match = _PROFILE_IN_NAME.search(_text(nv.maybe("nvmlDeviceGetName", mig)) or "")
        memory = nv.maybe("nvmlDeviceGetMemoryInfo", mig)
        if match and memory is not None:
            found.append(MigDevice(uuid, match.group(1).lower(), int(memory.total) // MIB))
            continue
        attributes = nv("nvmlDeviceGetAttributes", mig)
        memory_mib = int(memory.total) // MIB if memory is not None else int(attributes.memorySizeMB)
        profile = match.group(1).lower() if match else _profile_by_size(attributes, spec)
        found.append(MigDevice(uuid, profile, memory_mib))
    return tuple(found)


def _profile_by_size(attributes: Any, spec: GPUModelSpec | None) -> str:
    """A slice's profile when its NVML name does not carry it, read from its size.

    The model's MIG profile with the same compute slices and the nearest memory
    (NVML reports a little less than the name's nominal GB), or ``<g>g.<GiB>gb``
    for a model gpuq has no MIG table for.
    """
    slices, memory_mib = int(attributes.gpuInstanceSliceCount), int(attributes.memorySizeMB)
    table = MIG_TABLES.get(spec.mig_table) if spec is not None and spec.mig_table else None
    fitting = [p for p in (table or {}).values() if p.compute_slices == slices]
    if fitting:
        return min(fitting, key=lambda p: (abs(p.memory_mib - memory_mib), p.memory_slices)).name
    return f"{slices}g.{round(memory_mib / 1024)}gb"


def _read_telemetry(nv: _Nvml, index: int, handle: Any, uuid: str | None = None) -> GPUTelemetry:
    uuid = uuid or _text(nv.maybe("nvmlDeviceGetUUID", handle)) or f"index-{index}"
    rates = nv.maybe("nvmlDeviceGetUtilizationRates", handle)
    memory = nv.maybe("nvmlDeviceGetMemoryInfo", handle)
    sensor = getattr(nv.module, "NVML_TEMPERATURE_GPU", 0)
    temperature = nv.maybe("nvmlDeviceGetTemperature", handle, sensor)
    milliwatts = nv.maybe("nvmlDeviceGetPowerUsage", handle)
    ecc = nv.maybe("nvmlDeviceGetTotalEccErrors", handle, _ECC_UNCORRECTED, _ECC_VOLATILE)
    return GPUTelemetry(
        index=index,
        uuid=uuid,
        utilization_pct=int(rates.gpu) if rates is not None else None,
        memory_utilization_pct=int(rates.memory) if rates is not None else None,
        memory_used_mib=int(memory.used) // MIB if memory is not None else None,
        memory_free_mib=int(memory.free) // MIB if memory is not None else None,
        temperature_c=int(temperature) if temperature is not None else None,
        power_w=int(milliwatts) / 1000 if milliwatts is not None else None,
        ecc_uncorrected=int(ecc) if ecc is not None else None,
    )


# --- virtual GPUs, the node, the environment ------------------------------------------------------


def virtual_devices(count: int, model: str, catalogue: GPUCatalogue = DEFAULT_CATALOGUE) -> list[GPUDevice]:
    """``count`` made-up GPUs of a catalogue model, with stable UUIDs, for a machine without them."""
    spec = catalogue.get(model)
    if spec is None:
        raise ValueError(f"unknown GPU model {model!r}; known: {', '.join(catalogue.names())}")
    if not 1 <= count <= MAX_VIRTUAL_GPUS:
        raise ValueError(f"--gpus must be between 1 and {MAX_VIRTUAL_GPUS}, got {count}")
    return [
        GPUDevice(
            i, f"GPU-{uuidlib.uuid5(_VIRTUAL_NAMESPACE, f'{spec.name}/{i}')}", spec.product, spec.memory_mib
        )
        for i in range(count)
    ]


def model_spec(name: str, catalogue: GPUCatalogue = DEFAULT_CATALOGUE) -> GPUModelSpec | None:
    """The catalogue model of an NVML name (``NVIDIA H100 80GB HBM3``: GFD's product with dashes)."""
    return catalogue.get(name) or catalogue.get("-".join(name.split()))


def model_of(
    devices: Iterable[GPUDevice], catalogue: GPUCatalogue = DEFAULT_CATALOGUE
) -> tuple[GPUModelSpec | None, str | None]:
    """The one catalogue model of these GPUs, and a note when there is none (unknown or mixed models)."""
    names = sorted({device.name for device in devices})
    specs = {model_spec(name, catalogue) for name in names}
    if not names:
        return None, None
    if len(specs) > 1:
        return None, f"GPUs of different models ({', '.join(names)}): the node names no GPU model"
    spec = specs.pop()
    if spec is None:
        return (
            None,
            f"GPU {names[0]!r} is not in the GPU catalogue: the node names no GPU model (add a GPUModel)",
        )
    return spec, None


def local_node(
    devices: Iterable[GPUDevice],
    *,
    name: str,
    cpu_milli: int,
    memory_bytes: int,
    catalogue: GPUCatalogue = DEFAULT_CATALOGUE,
    labels: Mapping[str, str] | None = None,
    pods: int = 110,
) -> Node:
    """This machine as a core ``Node``.

    Allocatable: cpu, memory, pods, ``nvidia.com/gpu`` per GPU without MIG and
    ``nvidia.com/mig-<profile>`` per existing slice (mixed strategy). Labels: the
    given ones, then GFD's (the catalogue model's; for an unknown model the few
    GFD would still write), then the hostname. ``pods`` defaults to the kubelet's 110.
    """
    gpus = tuple(devices)
    spec, note = model_of(gpus, catalogue)
    if note:
        _log.warning("%s", note)
    sharing = _sharing(gpus)
    allocatable = {"cpu": cpu_milli, "memory": memory_bytes, PODS: pods, **_device_resources(gpus)}
    gfd = gfd_labels(spec, len(gpus), sharing) if spec is not None else _unknown_model_labels(gpus)
    return Node(
        name=name,
        allocatable=dict(sorted(allocatable.items())),
        labels=dict(sorted({**(labels or {}), **gfd, HOSTNAME_LABEL: name}.items())),
        gpu_model=spec.name if spec is not None else None,
        gpu_count=len(gpus),
        gpu_memory_mib=min((gpu.memory_mib for gpu in gpus), default=0),
        sharing=sharing,
    )


def _sharing(gpus: tuple[GPUDevice, ...]) -> GPUSharing:
    """MIG mixed with each GPU's actual slices when any GPU has MIG on; otherwise exclusive."""
    if not any(gpu.mig_enabled for gpu in gpus):
        return GPUSharing()
    layout = tuple(tuple(m.profile for m in gpu.mig_devices) if gpu.mig_enabled else () for gpu in gpus)
    return GPUSharing(mode=SharingMode.MIG_MIXED, mig_layout=layout)


def _device_resources(gpus: tuple[GPUDevice, ...]) -> dict[str, int]:
    whole = sum(1 for gpu in gpus if not gpu.mig_enabled)
    slices = Counter(m.profile for gpu in gpus if gpu.mig_enabled for m in gpu.mig_devices)
    found = {GPU: whole} | {MIG_PREFIX + profile: slices[profile] for profile in sorted(slices)}
    return {resource: amount for resource, amount in found.items() if amount > 0}


def _unknown_model_labels(gpus: tuple[GPUDevice, ...]) -> dict[str, str]:
    if not gpus:
        return {}
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "-".join(gpus[0].name.split()),
        "nvidia.com/gpu.count": str(len(gpus)),
        "nvidia.com/gpu.memory": str(min(gpu.memory_mib for gpu in gpus)),
    }


def device_env(devices: tuple[str, ...]) -> dict[str, str]:
    """The variables that give a process exactly these GPUs (NVML indices or GPU / MIG UUIDs).

    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes CUDA number GPUs as NVML does (CUDA's
    default puts the fastest first). No devices: ``CUDA_VISIBLE_DEVICES=""`` (no
    GPU, where unset would mean all) and ``NVIDIA_VISIBLE_DEVICES=void``.
    """
    for device in devices:
        if not device or "," in device or device != device.strip():
            raise ValueError(f"not a device id: {device!r}")
    visible = ",".join(devices)
    return {
        "CUDA_VISIBLE_DEVICES": visible,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NVIDIA_VISIBLE_DEVICES": visible or "void",
    }
