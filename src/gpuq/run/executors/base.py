"""The executor port: what the control loop asks of whatever runs pods (design note 0003).

The loop decides; an executor only starts processes, reports their exits and
stops them. Keeping the port this small lets the loop be tested against a fake
and lets local processes and Ray stand behind the same five calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable


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
    attempt: int = 0  # the pod row's attempt: recorded with the start, checked when a new leader adopts it
    node: str = ""  # the gpuq node placement bound it to (Ray pins the pod there); empty: anywhere


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


@dataclass(frozen=True)
class NodeChanges:
    """Nodes that left (each with why) or joined since the last call, by gpuq node name."""

    lost: tuple[tuple[str, str], ...] = ()
    added: tuple[str, ...] = ()


@runtime_checkable
class NodeWatcher(Executor, Protocol):
    """An executor whose pods run on nodes it can see come and go (Ray). Optional: the loop asks only
    executors that have it; a local executor's one node never leaves."""

    def node_changes(self) -> NodeChanges:
        """Nodes lost and added since the last call, each reported once; cheap enough for every loop
        step. Once it has been called, the exits of pods that died with a lost node are returned by
        ``poll`` only after this call reported that node, so that the loop sees the node lost first
        (an eviction, not a pod failure)."""
        ...


ProbeState = Literal["running", "exited", "lost"]


@dataclass(frozen=True)
class PodProbe:
    """What became of a pod that an earlier executor (a killed server's) started.

    ``running``: the very process it started runs (same pid, start time and boot); ``exited``: it is
    gone and recorded its exit (``exit_code``, negative for a signal, at ``time``); ``lost``: neither
    (it never started, its record is gone or names another attempt or process).
    """

    key: str
    state: ProbeState
    exit_code: int | None = None
    time: float | None = None
    pid: int | None = None


@runtime_checkable
class RecoveringExecutor(Executor, Protocol):
    """An executor whose pods outlive the server, so that the next leader takes them back (docs/serve.md,
    "Recovery"). The loop probes every pod of a workload, adopts them all or none, then sweeps."""

    def probe(self, key: str, *, attempt: int | None = None, pid: int | None = None) -> PodProbe:
        """What became of the pod ``key`` (its ``attempt`` and ``pid`` as the store recorded them, when
        known); changes nothing, except that a pod recorded but not yet running is abandoned (lost)."""
        ...

    def adopt(self, key: str, *, attempt: int | None = None, pid: int | None = None) -> PodProbe:
        """Take the pod back: a running one is held as if this executor had started it (``poll`` reports
        its exit, ``terminate`` stops it, ``running`` lists it); the recorded exit of one that is gone is
        returned by the next ``poll``. A lost one is left to :meth:`sweep`."""
        ...

    def sweep(self) -> list[str]:
        """Kill (and wait, briefly, for) every pod that executors no longer running started and nothing
        adopted, and forget them; their keys. Call it once recovery has adopted what it keeps."""
        ...
