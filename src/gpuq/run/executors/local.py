"""Pods as local process groups: the executor behind ``gpuq serve`` on one machine.

Each pod runs in its own session (``start_new_session=True``), so its pid is
also its process-group id and one ``killpg`` reaches the whole tree the pod
started. As in Kubernetes, where a container ends when its first process
does, whatever is left of a group when its leader exits is killed: a pod
leaves no stragglers holding GPUs. (A descendant that calls ``setsid``
escapes the group; only cgroups would catch it, which is out of scope here.)

Termination never blocks the caller: ``terminate`` sends SIGTERM and records
a SIGKILL deadline; ``poll`` enforces due deadlines before it collects exits.
A deadline is therefore kept to within one poll interval of the control
loop, which polls every cycle; a timer thread would be more punctual but
adds a thread per pod and races with reaping for no gain at that scale.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpuq.run.executors.base import ExecutorError, PodExit, PodLaunch
from gpuq.run.gpus import device_env

_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_CLOSE_POLL_S = 0.02
_CLOSE_KILL_WAIT_S = 1.0  # for SIGKILLed processes to die: only one stuck in the kernel takes longer
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class _Pod:
    """A started pod: its process, where its log goes, and the SIGKILL deadline once terminating."""

    key: str
    process: subprocess.Popen[bytes]
    log_path: Path
    kill_at: float | None = None  # time.monotonic() at which the group gets SIGKILL


class LocalExecutor:
    """Runs pods as process groups under ``workdir``; see the module docstring for the guarantees.

    ``clock`` gives the epoch seconds written into ``PodExit.time`` and log lines.
    Safe to share between the loop thread (start/poll/terminate) and API threads
    (``running``): every access to the pod table holds one lock.
    """

    def __init__(self, workdir: Path, *, clock: Callable[[], float] = time.time) -> None:
        self._workdir = Path(workdir)
        self._clock = clock
        self._lock = threading.RLock()
        self._pods: dict[str, _Pod] = {}
        self._exits: list[PodExit] = []
        self._closed = False

    # --- the Executor port ----------------------------------------------------------------------

    def start(self, pod: PodLaunch) -> int:
        """Start ``command + args`` as a new session; its pid (also the process-group id).

        Raises ``ExecutorError``, with nothing started, for a closed executor, a key
        already running, an empty or unknown command, or an unusable working
        directory or log file.
        """
        argv = [*pod.command, *pod.args]
        with self._lock:
            if self._closed:
                raise ExecutorError(f"{pod.key}: the executor is closed")
            if pod.key in self._pods:
                raise ExecutorError(f"{pod.key}: already running (pid {self._pods[pod.key].process.pid})")
            if not argv or not argv[0]:
                raise ExecutorError(f"{pod.key}: no command to run (command and args are empty)")
            env = self._environment(pod)
            cwd = self._working_dir(pod)
            _check_executable(pod.key, argv[0], cwd, env["PATH"])
            log_path = Path(pod.log_path)
            process = self._spawn(pod, argv, env, cwd, log_path)
            self._pods[pod.key] = _Pod(pod.key, process, log_path)
            return process.pid

    def poll(self) -> list[PodExit]:
        """Exits since the last poll, in the order they were detected; enforces due SIGKILL deadlines."""
        with self._lock:
            now = time.monotonic()
            for pod in list(self._pods.values()):
                if pod.kill_at is not None and now >= pod.kill_at:
                    _signal_group(pod.process.pid, signal.SIGKILL)
                code = _reap(pod.process)
                if code is not None:
                    self._record_exit(pod, code)
            exits, self._exits = self._exits, []
            return exits

    def terminate(self, key: str, grace_s: float) -> None:
        """SIGTERM the pod's group now; SIGKILL it at the first poll ``grace_s`` seconds later.

        ``grace_s <= 0`` sends SIGKILL at once. Idempotent: a repeated call sends no
        second SIGTERM and never delays an earlier deadline (the earliest wins).
        Unknown or already-exited keys are ignored.
        """
        with self._lock:
            pod = self._pods.get(key)
            if pod is None or pod.process.returncode is not None:
                return
            if grace_s <= 0:  # no grace: straight to SIGKILL, as `kubectl delete --grace-period=0 --force`
                _signal_group(pod.process.pid, signal.SIGKILL)
            elif pod.kill_at is None:
                _signal_group(pod.process.pid, signal.SIGTERM)
            deadline = time.monotonic() + max(grace_s, 0.0)
            pod.kill_at = deadline if pod.kill_at is None else min(pod.kill_at, deadline)

    def running(self) -> set[str]:
        """Keys started and not yet reported by ``poll`` (a pod leaves this set when its exit is returned)."""
        with self._lock:
            return set(self._pods)

    def close(self, grace_s: float = 1.0) -> None:
        """Terminate every pod, wait up to ``grace_s`` for them, SIGKILL the rest and reap them all.

        Blocks for at most about ``grace_s`` plus one second. Exits found here are
        still returned by a final ``poll``; ``start`` refuses from now on.
        """
        with self._lock:
            self._closed = True
            keys = list(self._pods)
        for key in keys:
            self.terminate(key, grace_s)
        deadline = time.monotonic() + grace_s
        while self.running() and time.monotonic() < deadline:
            time.sleep(_CLOSE_POLL_S)
            self._collect()
        with self._lock:
            for pod in self._pods.values():
                _signal_group(pod.process.pid, signal.SIGKILL)
            deadline = time.monotonic() + _CLOSE_KILL_WAIT_S
            for pod in list(self._pods.values()):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    pod.process.wait(timeout=max(deadline - time.monotonic(), 0.0))
                self._record_exit(pod, _reap(pod.process))

    # --- steps ------------------------------------------------------------------------------------

    def _collect(self) -> None:
        """Move finished pods into the pending exits without handing them out (``close``'s wait)."""
        with self._lock:
            pending = self.poll()
            self._exits = pending + self._exits

    def _environment(self, pod: PodLaunch) -> dict[str, str]:
        """A clean base, then the pod's env, then the device variables, which the pod cannot override.

        Nothing else of the server's environment reaches the pod: in particular not
        its ``CUDA_VISIBLE_DEVICES``, which would hand the pod GPUs placement gave
        to another.
        """
        base = {
            "PATH": os.environ.get("PATH", _DEFAULT_PATH),
            "HOME": os.environ.get("HOME", str(self._workdir)),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONUNBUFFERED": "1",
        }
        try:
            devices = device_env(pod.devices)
        except ValueError as error:
            raise ExecutorError(f"{pod.key}: {error}") from error
        return {**base, **pod.env, **devices}

    def _working_dir(self, pod: PodLaunch) -> Path:
        """The pod's ``working_dir`` (must exist), or a per-pod directory under ``workdir/pods``."""
        if pod.working_dir is not None:
            cwd = Path(pod.working_dir)
            if not cwd.is_dir():
                raise ExecutorError(f"{pod.key}: working directory {cwd} does not exist")
            return cwd
        name = _UNSAFE.sub("_", pod.key)
        cwd = self._workdir / "pods" / ("_" + name if name.strip(".") == "" else name)
        try:
            cwd.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ExecutorError(f"{pod.key}: cannot create working directory {cwd}: {error}") from error
        return cwd

    def _spawn(
        self, pod: PodLaunch, argv: list[str], env: dict[str, str], cwd: Path, log_path: Path
    ) -> subprocess.Popen[bytes]:
        """Open the log (header line first), start the process group, close the parent's copy of the log."""
        header = f"--- {self._stamp()} start {pod.key}: {shlex.join(argv)}"
        header += f" (image {pod.image})\n" if pod.image else "\n"
        try:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log = log_path.open("ab")
        except OSError as error:
            raise ExecutorError(f"{pod.key}: cannot open log {log_path}: {error}") from error
        with log:
            log.write(header.encode())
            log.flush()
            try:
                return subprocess.Popen(
                    argv,
                    env=env,
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as error:
                raise ExecutorError(f"{pod.key}: cannot start {argv[0]!r}: {error}") from error

    def _record_exit(self, pod: _Pod, code: int | None) -> None:
        """Forget a finished pod, queue its ``PodExit`` and note the exit in its log."""
        exit_code = code if code is not None else -signal.SIGKILL
        self._pods.pop(pod.key, None)
        self._exits.append(PodExit(pod.key, exit_code, self._clock()))
        with contextlib.suppress(OSError), pod.log_path.open("a") as log:
            log.write(f"--- {self._stamp()} exit {pod.key}: code {exit_code}\n")

    def _stamp(self) -> str:
        return datetime.fromtimestamp(self._clock(), UTC).isoformat(timespec="milliseconds")


def _check_executable(key: str, program: str, cwd: Path, path: str) -> None:
    """Refuse a program that cannot be run, as ``exec`` would resolve it (relative paths from ``cwd``)."""
    if os.sep in program:
        candidate = Path(program) if os.path.isabs(program) else cwd / program
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            raise ExecutorError(f"{key}: command {program!r} is not an executable file")
    elif shutil.which(program, path=path) is None:
        raise ExecutorError(f"{key}: command {program!r} not found on PATH {path}")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    """Signal a whole process group; a group that is already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _reap(process: subprocess.Popen[bytes]) -> int | None:
    """The leader's exit code once it has exited, after killing what is left of its group.

    The group is killed while the leader is still an unreaped zombie (``waitid``
    with ``WNOWAIT``), so its pid, and so the group id, cannot have been reused
    by an unrelated process. Where ``waitid`` is missing (macOS) the kill
    follows the reaping instead.
    """
    if process.returncode is not None:
        return process.returncode
    waitid = getattr(os, "waitid", None)
    if waitid is None:
        code = process.poll()
        if code is not None:
            _signal_group(process.pid, signal.SIGKILL)
        return code
    try:
        exited = waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        exited = True  # reaped already (by Popen itself): poll() below reports it
    if not exited:
        return None
    _signal_group(process.pid, signal.SIGKILL)
    return process.poll()
