"""The loop's view of one workload's pods, and how a pod becomes a process launch."""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from gpuq.core.model import Workload
from gpuq.run.executors.base import PodLaunch
from gpuq.run.jobs import JobRun
from gpuq.run.store import PodRecord


@dataclass
class PodState:
    name: str  # "<pod set>-<index>"
    pod_set: str
    node: str
    devices: tuple[str, ...]
    attempt: int = 0
    running: bool = False
    succeeded: bool = False
    retry_at: float | None = None
    starting: bool = False  # its start is queued or in flight (run.starts)
    started_at: float | None = None  # when its last start returned
    log_path: str | None = None


@dataclass
class Tracked:
    """One workload the loop is responsible for."""

    record_id: int
    key: str
    workload: Workload
    run: JobRun
    state: str = "Pending"
    pods: dict[str, PodState] = field(default_factory=dict)
    failures: int = 0
    admitted_at: float | None = None
    started_at: float | None = None
    evicting: str = ""  # the eviction reason while its pods are being stopped
    ready_timeouts: int = 0
    message: str = ""  # why it waits, as last written (written again only when it changes)
    start_failures: list[tuple[str, str]] = field(default_factory=list)  # (pod, why) of its first starts

    @property
    def namespace(self) -> str:
        return self.workload.namespace

    @property
    def name(self) -> str:
        return self.workload.name


def pod_launch(tracked: Tracked, pod: PodState, workdir: Path) -> PodLaunch:
    """The process for ``pod``: the container's command and env, the devices placement chose, the
    workload's checkpoint directory when it asked for one, and a log file per pod."""
    container = tracked.run.pod_set(pod.pod_set).container
    env = dict(container.env)
    env |= {
        "CUDA_VISIBLE_DEVICES": ",".join(pod.devices),
        "NVIDIA_VISIBLE_DEVICES": ",".join(pod.devices) or "void",
        "GPUQ_WORKLOAD": tracked.key,
        "GPUQ_POD": pod.name,
        "GPUQ_NODE": pod.node,
        "GPUQ_ATTEMPT": str(pod.attempt),
    }
    writable: tuple[str, ...] = ()
    if tracked.run.checkpoint:
        directory = workdir / "checkpoints" / tracked.namespace / tracked.name
        directory.mkdir(parents=True, exist_ok=True)
        env["GPUQ_CHECKPOINT_DIR"] = str(directory)
        writable = (str(directory),)
    log_path = workdir / "logs" / tracked.namespace / tracked.name / f"{pod.name}.log"
    return PodLaunch(
        key=pod_key(tracked, pod),
        command=list(container.command),
        args=list(container.args),
        env=env,
        working_dir=container.working_dir,
        image=container.image,
        devices=pod.devices,
        log_path=str(log_path),
        resources={"num_gpus": float(len(pod.devices))},
        namespace=tracked.namespace,
        writable_dirs=writable,
        attempt=pod.attempt,
        node=pod.node,
    )


def pod_key(tracked: Tracked, pod: PodState) -> str:
    return f"{tracked.key}/{pod.name}"


def pod_record(pod: PodState) -> PodRecord:
    return PodRecord(
        name=pod.name,
        pod_set=pod.pod_set,
        state="Running" if pod.running else "Pending",
        node=pod.node,
        devices=pod.devices,
        attempt=pod.attempt,
    )


def kill_leftover(pid: int | None) -> None:
    """SIGKILL a previous loop's process group, if it still exists (for an executor that cannot take its
    pods back: the pid is all there is to go by)."""
    if not pid:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
