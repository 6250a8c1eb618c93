"""XID errors: NVML reports them as events on a registered event set, not as values to read.

:class:`XidWatcher` registers every GPU for critical XID events once and
drains the set without waiting on each scrape, keeping per GPU the last XID
(what the DCGM exporter's ``DCGM_FI_DEV_XID_ERRORS`` shows) and a count.
Without NVML it stays empty, never raising.
"""

from __future__ import annotations

import importlib
from typing import Any

XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
TIMEOUT = 10  # NVML_ERROR_TIMEOUT: the set is empty


class XidWatcher:
    def __init__(self, nvml: Any = None) -> None:
        self.last: dict[str, int] = {}  # GPU UUID -> last XID
        self.counts: dict[str, int] = {}
        self.reason = ""
        self._nvml: Any = None
        self._set: Any = None
        self._open(nvml)

    def _open(self, nvml: Any) -> None:
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError:
                self.reason = "nvidia-ml-py (pynvml) is not installed"
                return
        try:
            nvml.nvmlInit()
            event_set = nvml.nvmlEventSetCreate()
            kind = getattr(nvml, "nvmlEventTypeXidCriticalError", XID_CRITICAL)
            for index in range(nvml.nvmlDeviceGetCount()):
                nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(index), kind, event_set)
        except (nvml.NVMLError, OSError, AttributeError) as error:
            self.reason = f"XID events are not available: {error}"
            return
        self._nvml, self._set = nvml, event_set

    def poll(self, limit: int = 1000) -> dict[str, int]:
        """Drain pending events (no waiting); the last XID per GPU UUID seen so far."""
        nvml = self._nvml
        if nvml is None:
            return dict(self.last)
        for _ in range(limit):
            try:
                event = nvml.nvmlEventSetWait_v2(self._set, 0)
            except nvml.NVMLError:
                break  # timeout: nothing pending (or the set failed; the next scrape retries)
            uuid = nvml.nvmlDeviceGetUUID(event.device)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            self.last[uuid] = int(event.eventData)
            self.counts[uuid] = self.counts.get(uuid, 0) + 1
        return dict(self.last)

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlEventSetFree(self._set)
                self._nvml.nvmlShutdown()
            except (self._nvml.NVMLError, OSError, AttributeError):
                pass
            self._nvml = None
