"""The executor port: what the control loop asks of whatever runs pods (design note 0003).

The loop decides; an executor only starts processes, reports their exits and
stops them. Keeping the port this small lets the loop be tested against a fake
and lets local processes and Ray stand behind the same five calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class ExecutorError(RuntimeError):
    """A pod could not be started (empty or unknown command, bad working directory); nothing runs."""


@dataclass(frozen=True)
class PodLaunch:
    """Everything needed to start one pod; built by the loop from the admitted workload and placement."""

    key: str  # "<namespace>/<workload>/<pod set>-<index>"
    command: list[str]
    args: list[str]
    env: dict[str, str]  # the container's env plus CUDA_VISIBLE_DEVICES / GPUQ_* set by the loop
    working_dir: str | None
    image: str  # recorded, not pulled (local executor)
    devices: tuple[str, ...]  # device ids placement gave the pod (indices or MIG UUIDs)
    log_path: str
    resources: dict[str, float]  # for Ray: num_gpus, num_cpus, memory, custom
    namespace: str = ""  # the team: whose user the pod runs as (empty: the key's first part)
    writable_dirs: tuple[str, ...] = ()  # the pod's own directories besides its working one (checkpoints)


@dataclass(frozen=True)
class PodExit:
    """One pod's end as the executor saw it; ``time`` is when the exit was detected (epoch seconds)."""

    key: str
    exit_code: int  # negative: killed by that signal
    time: float


class Executor(Protocol):
    """Runs pods. Every call returns promptly; none of them waits for a pod to end."""

    def start(self, pod: PodLaunch) -> int | None:
        """Start the pod; its pid where there is one. Raises ``ExecutorError`` when it cannot start."""
        ...

    def poll(self) -> list[PodExit]:
        """Exits since the last poll, each reported once."""
        ...

    def terminate(self, key: str, grace_s: float) -> None:
        """SIGTERM now, SIGKILL after ``grace_s`` if still running; idempotent, unknown keys ignored."""
        ...

    def running(self) -> set[str]:
        """Keys of pods started and not yet reported by ``poll``."""
        ...

    def close(self) -> None:
        """Stop every pod and release resources; the executor is unusable afterwards."""
        ...
