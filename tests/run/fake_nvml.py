"""A stand-in for the ``pynvml`` module boundary: the same function names, no driver needed.

Only what ``gpuq.run.gpus`` calls is here. Handles are the fake devices
themselves. A function name listed in a device's ``fail`` raises ``NVMLError``
for that device, as a real driver does for unsupported or broken queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

MIB = 2**20
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_UNKNOWN = 999
_MESSAGES = {
    ERROR_INVALID_ARGUMENT: "Invalid Argument",
    ERROR_NOT_SUPPORTED: "Not Supported",
    ERROR_NOT_FOUND: "Not Found",
    ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Like pynvml's: carries the NVML return code in ``value``; ``str`` is NVML's message."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML error {self.value}")


@dataclass
class FakeMig:
    uuid: str
    name: str  # NVML names a MIG device "<GPU name> MIG <profile>"
    memory_mib: int
    gi_slices: int
    fail: frozenset[str] = frozenset()


@dataclass
class FakeGPU:
    name: str | bytes
    uuid: str
    memory_mib: int
    mig_mode: int | None = None  # None: the GPU cannot do MIG (GetMigMode: Not Supported)
    mig_slots: list[FakeMig | None] = field(default_factory=list)  # None: an empty slot
    max_mig: int = 7
    utilization: tuple[int, int] = (0, 0)  # gpu %, memory %
    used_mib: int = 0
    temperature_c: int = 35
    power_mw: int = 70_000
    ecc_uncorrected: int = 0
    fail: frozenset[str] = frozenset()


class FakeNvml:
    """The module: pass an instance wherever ``gpuq.run.gpus`` takes ``nvml``."""

    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = 0

    def __init__(
        self, gpus: list[FakeGPU], *, init_error: int | None = None, driver: str | bytes = b"550.54.15"
    ) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.driver = driver
        self.inits = 0
        self.shutdowns = 0

    def _check(self, device: FakeGPU | FakeMig, function: str) -> None:
        if self.inits <= self.shutdowns:
            raise NVMLError(1)  # Uninitialized
        if function in device.fail:
            raise NVMLError(ERROR_UNKNOWN)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGPU:
        if not 0 <= index < len(self.gpus):
            raise NVMLError(ERROR_INVALID_ARGUMENT)
        self._check(self.gpus[index], "nvmlDeviceGetHandleByIndex")
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle: FakeGPU | FakeMig) -> str | bytes:
        self._check(handle, "nvmlDeviceGetName")
        return handle.name

    def nvmlDeviceGetUUID(self, handle: FakeGPU | FakeMig) -> str:
        self._check(handle, "nvmlDeviceGetUUID")
        return handle.uuid

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGPU | FakeMig) -> SimpleNamespace:
        self._check(handle, "nvmlDeviceGetMemoryInfo")
        used = handle.used_mib if isinstance(handle, FakeGPU) else 0
        total = handle.memory_mib * MIB
        return SimpleNamespace(total=total, used=used * MIB, free=total - used * MIB)

    def nvmlDeviceGetMigMode(self, handle: FakeGPU) -> list[int]:
        self._check(handle, "nvmlDeviceGetMigMode")
        if handle.mig_mode is None:
            raise NVMLError(ERROR_NOT_SUPPORTED)
        return [handle.mig_mode, handle.mig_mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGPU) -> int:
        self._check(handle, "nvmlDeviceGetMaxMigDeviceCount")
        return handle.max_mig

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeGPU, index: int) -> FakeMig:
        self._check(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        slot = handle.mig_slots[index] if index < len(handle.mig_slots) else None
        if slot is None:
            raise NVMLError(ERROR_NOT_FOUND)
        return slot

    def nvmlDeviceGetAttributes(self, handle: FakeMig) -> SimpleNamespace:
        self._check(handle, "nvmlDeviceGetAttributes")
        return SimpleNamespace(gpuInstanceSliceCount=handle.gi_slices, memorySizeMB=handle.memory_mib)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGPU) -> SimpleNamespace:
        self._check(handle, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=handle.utilization[0], memory=handle.utilization[1])

    def nvmlDeviceGetTemperature(self, handle: FakeGPU, sensor: int) -> int:
        self._check(handle, "nvmlDeviceGetTemperature")
        if sensor != self.NVML_TEMPERATURE_GPU:
            raise NVMLError(ERROR_INVALID_ARGUMENT)
        return handle.temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: FakeGPU) -> int:
        self._check(handle, "nvmlDeviceGetPowerUsage")
        return handle.power_mw

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeGPU, error_type: int, counter_type: int) -> int:
        self._check(handle, "nvmlDeviceGetTotalEccErrors")
        if (error_type, counter_type) != (1, 0):  # uncorrected, volatile
            raise NVMLError(ERROR_INVALID_ARGUMENT)
        return handle.ecc_uncorrected


H100 = "NVIDIA H100 80GB HBM3"
H100_MIB = 81559


def mig(slot: int, profile: str, memory_mib: int, gi_slices: int) -> FakeMig:
    """A slice of an H100 as NVML names it."""
    return FakeMig(
        f"MIG-0000000{slot}-aaaa-bbbb-cccc-dddddddddddd", f"{H100} MIG {profile}", memory_mib, gi_slices
    )


def two_h100(*, mig_on_second: bool = True) -> FakeNvml:
    """Two H100s: GPU 0 whole (name as bytes, as old bindings return it), GPU 1 in MIG mode

    with 3g.40gb + 2g.20gb + 1g.10gb × 2 in slots 0, 1, 3, 4 (slot 2 empty), NVML's real sizes.
    """
    slots: list[FakeMig | None] = [
        mig(0, "3g.40gb", 40448, 3),
        mig(1, "2g.20gb", 20096, 2),
        None,
        mig(3, "1g.10gb", 9984, 1),
        mig(4, "1g.10gb", 9984, 1),
    ]
    return FakeNvml(
        [
            FakeGPU(H100.encode(), "GPU-11111111-0000-0000-0000-000000000000", H100_MIB, mig_mode=0),
            FakeGPU(
                H100,
                "GPU-22222222-0000-0000-0000-000000000000",
                H100_MIB,
                mig_mode=1 if mig_on_second else 0,
                mig_slots=slots if mig_on_second else [],
            ),
        ]
    )


class FakeEvents(FakeNvml):
    """A :class:`FakeNvml` with an event set that delivers the ``pending`` XID events."""

    nvmlEventTypeXidCriticalError = 0x8
    NVML_ERROR_TIMEOUT = 10

    def __init__(self, gpus: list[FakeGPU], pending: list[tuple[int, int]]) -> None:
        super().__init__(gpus)
        self.pending = list(pending)  # (gpu index, xid)
        self.registered: list[str] = []

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, handle: FakeGPU, types: int, event_set: object) -> None:
        self.registered.append(handle.uuid)

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> SimpleNamespace:
        if not self.pending:
            raise NVMLError(self.NVML_ERROR_TIMEOUT)
        index, xid = self.pending.pop(0)
        return SimpleNamespace(device=self.gpus[index], eventType=0x8, eventData=xid)

    def nvmlEventSetFree(self, event_set: object) -> None:
        pass
