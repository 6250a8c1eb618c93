"""Pods as local processes: the executor behind ``gpuq serve`` on one machine.

Each pod runs in its own session under a supervisor (:data:`~gpuq.run.proctrack.SUPERVISE`), its
first process, whose pid is the pod's. Supervisors are forked by the executor's forkserver
(:mod:`gpuq.run.forkserver`: one interpreter, not one per pod), which reports their ends through a
pipe that ``poll`` reads without blocking; where it cannot run, each is a ``python -I`` of its own
(``start_new_session=True``). A forkserver that dies leaves its pods running: they are watched through
their records as adopted ones are, and the next start starts a new forkserver.
As in Kubernetes, where a container ends when its first process does, whatever is
left of a pod when its command exits is killed: a pod leaves no stragglers holding
GPUs. "Whatever is left" is every process of the pod, not only its group: a tracker
(:mod:`gpuq.run.proctrack`) holds the whole tree, a cgroup per pod where the server
may create them, else the supervisor's descendants (it is a subreaper), so a
descendant that calls ``setsid`` dies with the pod too. A pod's exit is reported,
and so its GPUs freed, only once every one of its processes is gone.

**Pods outlive the server** (docs/serve.md, "Recovery"). Before a pod's supervisor
starts, the executor writes its intent into the pod's record directory
(:mod:`gpuq.run.podrecords`); the supervisor records its identity there before the
command runs, and the command's status once the pod is gone. The next executor of the
same workdir probes a pod the store names (:meth:`~LocalExecutor.probe`), adopts it
(:meth:`~LocalExecutor.adopt`: held like one it started, or its recorded exit reported by the
next ``poll``) and kills what no one adopted (:meth:`~LocalExecutor.sweep`). A record is
removed once the loop has had the pod's exit (at the following ``poll``), or when this
executor killed the pod itself in :meth:`~LocalExecutor.close` (the next leader then requeues
it, as a stop it caused). A pod another executor adopted meanwhile (a leader that lost its
lease while the next one took over) is never stopped by this one: ``terminate`` and ``close``
forget it.

With an :class:`~gpuq.run.sandbox.Isolation` (``gpuq serve`` always passes one) a
pod runs as its namespace's unprivileged user, with a clean environment, its own
directories (``workdir/pods/<namespace>/<pod>``, mode 0700, owned by that user) and,
with bwrap, a private view of the filesystem without the server's state; see
docs/serve.md, "Job isolation". Without one (tests, library use) pods run as the
caller.

Termination never blocks the caller: ``terminate`` sends SIGTERM and records
a SIGKILL deadline; ``poll`` enforces due deadlines before it collects exits.
A deadline is therefore kept to within one poll interval of the control
loop, which polls every cycle; a timer thread would be more punctual but
adds a thread per pod and races with reaping for no gain at that scale.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuq.run.executors.base import ExecutorError, PodExit, PodLaunch, PodProbe
from gpuq.run.forkserver import Forkserver, ForkserverError, current_umask
from gpuq.run.gpus import device_env
from gpuq.run.podrecords import Intent, Owner, PodRecords
from gpuq.run.proctrack import (
    Identity,
    Tracker,
    boot_id,
    children,
    descendants,
    identity,
    kill_group,
    make_tracker,
    populated,
    remove_group,
    supervisor_argv,
)
from gpuq.run.sandbox import POD_PATH, Isolation, IsolationError, PodUser, first_blocked, may_execute

_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_CLOSE_POLL_S = 0.02
_CLOSE_KILL_WAIT_S = 1.0  # for SIGKILLed processes to die: only one stuck in the kernel takes longer
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_POD_UMASK = 0o022
_SWEEP_WAIT_S = 5.0  # for a dead server's pods to die at recovery (only a process stuck in the kernel lasts)
_LIVE: set[str] = set()  # ids of this process's executors not closed yet (their pods are never swept)
_FORKSERVER_RETRY_S = 30.0  # after a forkserver failed to start, pods get an interpreter each for this long
log = logging.getLogger(__name__)


@dataclass
class _Pod:
    """A pod this executor holds: its supervisor (``process`` when this executor started it, else the
    ``leader`` identity of one it adopted), where its log and record go, the SIGKILL deadline once
    terminating, and, once the supervisor has exited, its code while the rest of the pod is being killed."""

    key: str
    pid: int  # the supervisor's
    process: subprocess.Popen[bytes] | None  # None: adopted, or forked by a forkserver
    log_path: Path
    record: Path
    token: str  # names this start in its record
    sandboxed: bool  # bwrap runs it: its monitor is spared signals, and it reports signal N as exit 128 + N
    leader: Identity | None = None  # adopted: the supervisor, to tell it from a process reusing its pid
    kill_at: float | None = None  # time.monotonic() at which the pod gets SIGKILL
    code: int | None = None  # the supervisor's exit code, once it has exited
    exited_at: float | None = None  # when an adopted pod's supervisor recorded the exit
    sent: set[int] = field(default_factory=set)  # signals this executor sent
    server: Forkserver | None = None  # the forkserver that forked it and reports its status (leader set)


class LocalExecutor:
    """Runs pods as processes under ``workdir``; see the module docstring for the guarantees.

    ``clock`` gives the epoch seconds written into ``PodExit.time`` and log lines.
    ``isolation``: how pods are isolated (None: not at all, they run as the caller).
    ``tracking``: ``"auto"`` (a cgroup per pod where possible, else the process tree),
    ``"cgroup"`` or ``"tree"``. ``forkserver``: fork supervisors from a forkserver
    (:mod:`gpuq.run.forkserver`): True starts it at the first start; None (the default) at the
    second, since it only pays off for an executor that runs more than one pod (a Ray actor runs
    one, whose supervisor stays the actor's child); False, or while one cannot start, every pod's
    supervisor is a fresh interpreter (:func:`~gpuq.run.proctrack.supervisor_argv`).

    Thread safety: every method may be called from any thread. The pod table is guarded by one
    lock, held only for bookkeeping: ``start`` prepares and spawns a pod without it (several
    threads start pods at once, the forkserver's socket serializing only the fork itself), so
    ``poll``, ``terminate`` and ``running`` never wait for a spawn. A key is reserved before its
    spawn: a second ``start`` of it, concurrent or later, is refused until ``poll`` returned its
    exit. ``running`` lists pods once their ``start`` returned; ``close`` waits for the starts in
    progress and stops their pods too.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        clock: Callable[[], float] = time.time,
        isolation: Isolation | None = None,
        tracking: str = "auto",
        forkserver: bool | None = None,
    ) -> None:
        self._workdir = Path(workdir)
        self._clock = clock
        self._isolation = isolation
        self._tracker: Tracker = make_tracker(self._workdir, prefer=tracking)
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)  # notified when a start in progress ends
        self._pods: dict[str, _Pod] = {}
        self._starting: set[str] = set()  # keys being started (reserved; not in _pods yet)
        self._watch: set[str] = set()  # pods each poll looks at (see _needs_watch)
        self._due: set[str] = set()  # forkserver pods whose supervisor's status arrived
        self._use_forkserver = forkserver
        self._spawn_lock = threading.Lock()  # starting (or restarting) the forkserver
        self._server: Forkserver | None = None  # the one new pods are forked from
        self._servers: list[Forkserver] = []  # those whose event pipes are still read
        self._server_retry_at = 0.0
        self._first_start = True  # forkserver None: the first pod gets an interpreter of its own
        self._exits: list[tuple[PodExit, Path, str]] = []  # with the record (and its token) to remove
        self._handed: list[tuple[Path, str]] = []  # records of the exits the last poll returned
        self._records = PodRecords(self._workdir)
        self._id = uuid.uuid4().hex
        me = identity(os.getpid())
        self._owner = Owner(me or Identity(os.getpid(), 0, ""), self._id)
        self._swept = False
        self._closed = False
        _LIVE.add(self._id)

    @property
    def tracking(self) -> str:
        """How the executor holds each pod's processes: ``cgroup`` or ``process tree``."""
        return self._tracker.name

    @property
    def forkserver_pid(self) -> int | None:
        """The pid of the forkserver new pods are forked from; None before the first start, once it died
        (until the next start) and when pods get an interpreter each."""
        server = self._server
        return server.pid if server is not None and server.alive and server.running() else None

    # --- the Executor port ----------------------------------------------------------------------

    def start(self, pod: PodLaunch) -> int:
        """Start ``command + args`` as a new session; its pid (also the process-group id).

        Raises ``ExecutorError``, with nothing started, for a closed executor, a key
        already running, an empty or unknown command, an unusable working directory or
        log file, or a pod whose user or sandbox cannot be set up. The first start of an
        executor that was never asked to recover sweeps what dead executors left first.
        """
        argv = [*pod.command, *pod.args]
        with self._lock:
            if self._closed:
                raise ExecutorError(f"{pod.key}: the executor is closed")
            if not self._swept:
                self._sweep(everything=False)
            if pod.key in self._pods:
                raise ExecutorError(f"{pod.key}: already running (pid {self._pods[pod.key].pid})")
            if pod.key in self._starting:
                raise ExecutorError(f"{pod.key}: already running (being started)")
            if not argv or not argv[0]:
                raise ExecutorError(f"{pod.key}: no command to run (command and args are empty)")
            self._starting.add(pod.key)
        try:
            started = self._start(pod, argv)
            with self._lock:
                self._pods[pod.key] = started
                self._tracker.started(pod.key, started.pid)
                if started.server is not None:
                    started.server.pods[started.pid] = pod.key
                    if started.pid in started.server.exited or not started.server.alive:
                        self._due.add(pod.key)
                else:
                    self._watch.add(pod.key)
            return started.pid
        finally:
            with self._lock:
                self._starting.discard(pod.key)
                self._idle.notify_all()

    def _start(self, pod: PodLaunch, argv: list[str]) -> _Pod:
        """Everything of ``start`` but the bookkeeping: run without the lock, the key reserved."""
        user = self._user(pod)
        home = self._own_dir(pod, user)
        writable = [home, *self._writable_dirs(pod, user)]
        cwd = self._working_dir(pod, home, writable)
        if cwd not in writable:
            writable.append(cwd)
        env = self._environment(pod, home)
        self._check_executable(pod.key, argv[0], cwd, env["PATH"], user, writable)
        log_path = Path(pod.log_path)
        return self._spawn(pod, argv, env, cwd, log_path, user, writable)

    def poll(self) -> list[PodExit]:
        """Exits since the last poll, in the order they were detected; enforces due SIGKILL deadlines.

        A pod whose leader has exited is killed whole and reported once none of its
        processes is left (usually at the same poll, else at a later one). The records of
        the exits the previous poll returned are removed now: the caller has had them.
        """
        with self._lock:
            for record, token in self._handed:
                self._records.remove(record, token, self._id)
            self._scan()
            exits, self._exits = self._exits, []
            self._handed = [(record, token) for _, record, token in exits]
            return [exit_ for exit_, _, _ in exits]

    def terminate(self, key: str, grace_s: float) -> None:
        """SIGTERM every process of the pod now; SIGKILL them at the first poll ``grace_s`` seconds later.

        ``grace_s <= 0`` sends SIGKILL at once. Idempotent: a repeated call sends no
        second SIGTERM and never delays an earlier deadline (the earliest wins).
        Unknown or already-exited keys are ignored, and so is a pod another executor has
        adopted since (a new leader's: it is forgotten here, never signalled).
        """
        with self._lock:
            pod = self._pods.get(key)
            if pod is None or pod.code is not None or (pod.process and pod.process.returncode is not None):
                return
            if self._taken_elsewhere(pod):
                return
            if grace_s <= 0:  # no grace: straight to SIGKILL, as `kubectl delete --grace-period=0 --force`
                self._kill(pod)
            elif pod.kill_at is None:
                self._signal(pod, signal.SIGTERM)
            deadline = time.monotonic() + max(grace_s, 0.0)
            pod.kill_at = deadline if pod.kill_at is None else min(pod.kill_at, deadline)
            self._watch.add(key)

    def running(self) -> set[str]:
        """Keys started and not yet reported by ``poll`` (a pod leaves this set when its exit is returned)."""
        with self._lock:
            return set(self._pods)

    def close(self, grace_s: float = 1.0) -> None:
        """Terminate every pod, wait up to ``grace_s`` for them, SIGKILL the rest and reap them all.

        Blocks for at most about ``grace_s`` plus one second. Exits found here are
        still returned by a final ``poll``; ``start`` refuses from now on. The records of
        the pods this stops are removed (the next leader requeues them: the control plane
        stopped them, they did not fail); a pod that had exited by itself keeps its record.
        """
        with self._lock:
            self._closed = True
            while self._starting:  # their pods are stopped with the others
                self._idle.wait()
            for pod in list(self._pods.values()):
                self._taken_elsewhere(pod)
            self._scan()
            natural = {exit_.key for exit_, _, _ in self._exits}
            keys = list(self._pods)
        for key in keys:
            self.terminate(key, grace_s)
        deadline = time.monotonic() + grace_s
        while self.running() and time.monotonic() < deadline:
            time.sleep(_CLOSE_POLL_S)
            with self._lock:
                self._scan()
        with self._lock:
            for pod in self._pods.values():
                if pod.code is None:
                    self._kill(pod)
                else:
                    self._tracker.kill(pod.key)
            deadline = time.monotonic() + _CLOSE_KILL_WAIT_S
            for pod in list(self._pods.values()):
                while pod.code is None and time.monotonic() < deadline:
                    pod.code = self._leader_code(pod)
                    if pod.code is None:
                        self._kill(pod)  # one that joined its cgroup after the last kill
                        time.sleep(_CLOSE_POLL_S)
                while not self._tracker.empty(pod.key) and time.monotonic() < deadline:
                    time.sleep(_CLOSE_POLL_S)
                if pod.code is None:
                    self._kill_supervisor(pod)
                self._record_exit(pod, pod.code)
            for exit_, record, token in self._exits:
                if exit_.key not in natural:
                    self._records.remove(record, token, self._id)
            self._tracker.close()
            with self._spawn_lock:
                for server in {*self._servers, *([self._server] if self._server else [])}:
                    server.release()
                self._servers.clear()
                self._server = None
            _LIVE.discard(self._id)

    # --- recovery (the RecoveringExecutor port) -------------------------------------------------------

    def probe(self, key: str, *, attempt: int | None = None, pid: int | None = None) -> PodProbe:
        """What became of the pod ``key`` an earlier executor of this workdir started: ``running`` (its
        supervisor, the very process, runs), ``exited`` (gone, its exit recorded) or ``lost``.

        ``attempt`` and ``pid``, as the store recorded them, must match the record when given. A pod
        whose intent is recorded but whose supervisor has not recorded itself yet is abandoned here
        (it will run nothing) and so lost.
        """
        with self._lock:
            own = self._pods.get(key)
            if own is not None:
                return PodProbe(key, "running", pid=own.pid)
            directory = self._records.path(key)
            intent = self._records.intent(directory)
            if intent is None or intent.key != key or (attempt is not None and intent.attempt != attempt):
                return PodProbe(key, "lost")
            leader = self._records.leader(directory)
            if leader is None and self._records.abandon(directory):
                return PodProbe(key, "lost")
            leader = leader or self._records.leader(directory)
            if not isinstance(leader, Identity) or (pid is not None and leader.pid != pid):
                return PodProbe(key, "lost")
            if leader.alive():
                return PodProbe(key, "running", pid=leader.pid)
            exited = self._records.exited(directory)
            if exited is None:
                return PodProbe(key, "lost", pid=leader.pid)
            return PodProbe(key, "exited", exited.code, exited.time, leader.pid)

    def adopt(self, key: str, *, attempt: int | None = None, pid: int | None = None) -> PodProbe:
        """Take back the pod ``key`` (see :meth:`probe`): a running one is held as if started here; the
        recorded exit of one that is gone is returned by the next :meth:`poll`. A lost one is left to
        :meth:`sweep`. A pod whose supervisor dies between the probe and now reports SIGKILL."""
        with self._lock:
            found = self.probe(key, attempt=attempt, pid=pid)
            if key in self._pods or found.state == "lost":
                return found
            directory = self._records.path(key)
            intent = self._records.intent(directory)
            leader = self._records.leader(directory)
            assert intent is not None and isinstance(leader, Identity)
            intent = self._records.set_owner(directory, intent, self._owner)
            if found.state == "running":
                self._tracker.adopt(key, leader.pid, intent.group)
                log_path = Path(intent.log_path) if intent.log_path else directory / "pod.log"
                self._pods[key] = _Pod(
                    key, leader.pid, None, log_path, directory, intent.token, intent.sandboxed, leader
                )
                self._watch.add(key)
                return found
            if intent.group is not None:
                remove_group(intent.group)
            assert found.exit_code is not None and found.time is not None
            self._exits.append((PodExit(key, found.exit_code, found.time), directory, intent.token))
            return found

    def sweep(self) -> list[str]:
        """Kill every pod recorded in this workdir that this executor does not hold (it started or adopted
        it), wait (up to a few seconds) for them to be gone, and remove their records and cgroups; their
        keys. The recovering loop calls it once it has adopted what it keeps: the workdir is its own.

        Also kills the cgroups dead executors of this workdir left without a record (pods of a server
        older than records).
        """
        return self._sweep(everything=True)

    def _sweep(self, *, everything: bool) -> list[str]:
        """:meth:`sweep`; without ``everything`` (a first start nobody recovered before), only the pods of
        executors that no longer run (another process's that runs, or this process's not closed, stay)."""
        with self._lock:
            self._swept = True
            victims: list[tuple[Path, Intent | None, Identity | None]] = []
            unread = {record for _, record, _ in self._exits} | {record for record, _ in self._handed}
            for directory in self._records.all():
                if directory in unread:  # an exit the loop has not had (or not written) yet
                    continue
                intent = self._records.intent(directory)
                if intent is not None:
                    if intent.key in self._starting:  # being started by another thread: its record
                        continue
                    held = self._pods.get(intent.key)
                    if held is not None and held.record == directory:
                        continue
                    if not everything and self._owned_elsewhere(intent):
                        continue
                leader = self._records.leader(directory)
                if leader is None and not self._records.abandon(directory):
                    leader = self._records.leader(directory)
                victims.append((directory, intent, leader if isinstance(leader, Identity) else None))
            deadline = time.monotonic() + _SWEEP_WAIT_S
            while True:
                left = [v for v in victims if _still_there(v[1], v[2])]
                if not left or time.monotonic() >= deadline:
                    break
                for _, intent, leader in left:
                    _kill_leftover(intent, leader)
                time.sleep(_CLOSE_POLL_S)
            for _, _, leader in left:
                if leader is not None and leader.alive():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(leader.pid, signal.SIGKILL)
            for directory, intent, _ in victims:
                if intent is not None and intent.group is not None:
                    remove_group(intent.group)
                self._records.remove(directory)
            self._tracker.sweep(())
            return [intent.key if intent else str(directory) for directory, intent, _ in victims]

    def _taken_elsewhere(self, pod: _Pod) -> bool:
        """Whether another executor adopted the pod (its record names a new owner): a leader that lost its
        lease while the next one took its pods back must not stop them. Such a pod is forgotten here."""
        intent = self._records.intent(pod.record)
        if intent is None or intent.token != pod.token or intent.owner is None:
            return False
        if intent.owner.executor == self._id:
            return False
        self._forget(pod)
        return True

    def _forget(self, pod: _Pod) -> None:
        """Drop the pod from the table, the tracker and its forkserver's bookkeeping."""
        self._pods.pop(pod.key, None)
        self._tracker.release(pod.key)
        self._watch.discard(pod.key)
        self._due.discard(pod.key)
        if pod.server is not None:
            pod.server.pods.pop(pod.pid, None)
            pod.server.exited.pop(pod.pid, None)

    def _owned_elsewhere(self, intent: Intent) -> bool:
        """Whether the pod belongs to an executor that still runs (and so will stop it itself)."""
        owner = intent.owner
        if owner is None or owner.executor == self._id:
            return False
        if owner.process == self._owner.process:
            return owner.executor in _LIVE
        return owner.process.alive()

    # --- steps ------------------------------------------------------------------------------------

    def _scan(self) -> None:
        """Enforce due SIGKILL deadlines and move the pods that are entirely gone to the pending exits.

        Looks only at the pods whose forkserver reported their supervisor's end and at those it cannot
        hear about (started by ``Popen``, adopted, terminating, exited but not yet empty, or orphaned
        by a dead forkserver), not at every running pod.
        """
        self._pump()
        due, self._due = self._due, set()
        now = time.monotonic()
        for key in [*due, *(self._watch - due)]:
            pod = self._pods.get(key)
            if pod is None:
                self._watch.discard(key)
                continue
            if pod.code is None and pod.kill_at is not None and now >= pod.kill_at:
                self._kill(pod)
            ended = False
            if pod.code is None:
                pod.code = self._leader_code(pod)
                ended = pod.code is not None
            if pod.code is not None:
                if self._tracker.empty(pod.key):
                    self._record_exit(pod, pod.code)
                    continue
                if ended:
                    self._tracker.kill(pod.key)  # what the supervisor missed (it kills its own)
            if self._needs_watch(pod):
                self._watch.add(key)
            else:
                self._watch.discard(key)

    def _needs_watch(self, pod: _Pod) -> bool:
        """Whether each poll must look at the pod: nothing will tell this executor about it otherwise."""
        if pod.kill_at is not None or pod.code is not None or pod.process is not None:
            return True
        return pod.server is None or not pod.server.alive

    def _pump(self) -> None:
        """Read what the forkservers reported (without blocking); a dead one's pods are watched from now."""
        for server in list(self._servers):
            for pid, status in server.statuses():
                server.exited[pid] = status
                key = server.pods.get(pid)
                if key is not None:
                    self._due.add(key)
            if not server.alive:
                self._servers.remove(server)
                self._due.update(server.pods.values())

    def _leader_code(self, pod: _Pod) -> int | None:
        """The supervisor's status once it has exited: reaped when this executor started it, reported by
        the forkserver that forked it, else (adopted, or its forkserver died) the exit it recorded (SIGKILL
        where it recorded none: it was killed itself)."""
        if pod.process is not None:
            return _reap(pod.process)
        if pod.server is not None:
            status = pod.server.exited.get(pod.pid)
            if status is None and pod.server.alive:
                self._pump()
                status = pod.server.exited.get(pod.pid)
            if status is not None:
                return os.waitstatus_to_exitcode(status)
            if pod.server.alive:
                return None
        if pod.leader is not None and pod.leader.alive():
            return None
        exited = self._records.exited(pod.record)
        if exited is None:
            return -signal.SIGKILL
        pod.exited_at = exited.time
        return exited.code

    def _signal(self, pod: _Pod, sig: signal.Signals) -> None:
        """Send ``sig`` once to every process of the pod, setsid'd ones included, sparing its supervisor
        (which would forward it) and, sandboxed, bwrap's monitor (whose death would SIGKILL the pod) and
        the init of its PID namespace (which ignores a signal it has no handler for: one sent to it alone
        is lost). Once: a second SIGTERM could interrupt the pod's handler of the first.

        When nothing of the command runs yet, the supervisor gets it: before it handles signals it dies
        of it (the command never starts), after, it forwards it to what it started (sandboxed, bwrap,
        whose end ends the pod: the supervisor then kills what is left). Never only at the next poll:
        a short pod could end meanwhile."""
        pod.sent.add(sig)
        spared = {pod.pid} | (children(pod.pid) if pod.sandboxed else set())
        pids = {pid for pid in self._tracker.pids(pod.key) - spared if not _namespace_init(pid)}
        if not pids and self._leader_code(pod) is None:
            pids = {pod.pid}
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def _kill(self, pod: _Pod) -> None:
        """SIGKILL every process of the pod but its supervisor, which then records the exit and exits (a
        command that has not joined its cgroup yet is still the supervisor's descendant)."""
        pod.sent.add(signal.SIGKILL)
        members = self._tracker.pids(pod.key) - {pod.pid}
        self._tracker.kill(pod.key)
        if pod.code is None:
            below = descendants(pod.pid)
            for pid in below:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if not below and not members and self._leader_code(pod) is None:
                # Nothing of the command exists yet: the supervisor goes, before it can start it.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pod.pid, signal.SIGKILL)

    def _kill_supervisor(self, pod: _Pod) -> None:
        """The last resort of ``close``: SIGKILL the supervisor's whole group (an unreaped child's group
        id is still its own; an adopted one is checked to be the very process)."""
        if pod.process is not None:
            _signal_group(pod.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                pod.process.wait(timeout=_CLOSE_KILL_WAIT_S)
            pod.code = _reap(pod.process)
        elif pod.leader is not None and pod.leader.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pod.pid, signal.SIGKILL)

    def _user(self, pod: PodLaunch) -> PodUser | None:
        """The user the pod runs as: its namespace's under isolation as root, else None (the server's)."""
        if self._isolation is None or self._isolation.users is None:
            return None
        try:
            return self._isolation.users.for_namespace(_namespace(pod))
        except IsolationError as error:
            raise ExecutorError(f"{pod.key}: {error}") from error

    def _environment(self, pod: PodLaunch, home: Path) -> dict[str, str]:
        """A clean base, then the pod's env, then the device variables, which the pod cannot override.

        Nothing else of the server's environment reaches the pod: not its variables (a
        database URL, a token), not its home (``HOME`` is the pod's own directory), and
        not its ``CUDA_VISIBLE_DEVICES``, which would hand the pod GPUs placement gave to
        another. An isolated pod's default ``PATH`` is the system's, not the server's.
        """
        isolated = self._isolation is not None
        base = {
            "PATH": POD_PATH if isolated else os.environ.get("PATH", _DEFAULT_PATH),
            "HOME": str(home),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONUNBUFFERED": "1",
        }
        try:
            devices = device_env(pod.devices)
        except ValueError as error:
            raise ExecutorError(f"{pod.key}: {error}") from error
        return {**base, **pod.env, **devices}

    def _own_dir(self, pod: PodLaunch, user: PodUser | None) -> Path:
        """``workdir/pods/<namespace>/<pod>``: the pod's home and default working directory.

        Isolated: ``workdir`` and ``pods`` mode 0711 (passable, not listable), the
        namespace's directory and the pod's mode 0700, owned by the pod's user.
        """
        namespace = _namespace(pod)
        rest = pod.key.removeprefix(f"{namespace}/")
        parts = [_safe(namespace), _safe(rest)]
        if self._isolation is None:
            cwd = self._workdir / "pods" / Path(*parts)
            try:
                cwd.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise ExecutorError(f"{pod.key}: cannot create working directory {cwd}: {error}") from error
            return cwd
        return self._private_tree(pod.key, ["pods", *parts], user)

    def _writable_dirs(self, pod: PodLaunch, user: PodUser | None) -> list[Path]:
        """The pod's other own directories (its checkpoint directory), made its user's like its home when
        they lie in the workdir; elsewhere they are left as they are."""
        found = []
        for raw in pod.writable_dirs:
            path = Path(raw)
            if self._isolation is not None and _within(path, self._workdir) and path != self._workdir:
                parts = list(path.relative_to(self._workdir).parts)
                path = self._private_tree(pod.key, parts, user)
            elif not path.is_dir():
                raise ExecutorError(f"{pod.key}: directory {path} does not exist")
            found.append(path)
        return found

    def _private_tree(self, key: str, parts: list[str], user: PodUser | None) -> Path:
        """``workdir/parts[0]/...`` created without following links: ``workdir`` and ``parts[0]`` mode 0711
        owned by the server, each deeper level mode 0700 owned by ``user`` (a team owns its namespace's
        directory, so it could plant a link there: every level is opened with ``O_NOFOLLOW``)."""
        target = self._workdir.joinpath(*parts)
        try:
            self._workdir.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(self._workdir, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as error:
            raise ExecutorError(f"{key}: cannot create working directory {target}: {error}") from error
        try:
            os.fchmod(descriptor, 0o711)
            for depth, name in enumerate(parts):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=descriptor)
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=descriptor)
                os.close(descriptor)
                descriptor = child
                if depth == 0:
                    os.fchmod(descriptor, 0o711)
                    continue
                if user is not None:
                    os.fchown(descriptor, user.uid, user.gid)
                os.fchmod(descriptor, 0o700)
        except OSError as error:
            raise ExecutorError(f"{key}: cannot prepare directory {target}: {error}") from error
        finally:
            os.close(descriptor)
        return target

    def _working_dir(self, pod: PodLaunch, home: Path, writable: list[Path]) -> Path:
        """The pod's ``working_dir`` (must exist, and not be hidden from pods), or its own directory."""
        if pod.working_dir is None:
            return home
        cwd = Path(pod.working_dir)
        if not cwd.is_dir():
            raise ExecutorError(f"{pod.key}: working directory {cwd} does not exist")
        real = Path(os.path.realpath(cwd))
        if self._isolation is not None and not self._isolation.view.visible(real, writable):
            raise ExecutorError(
                f"{pod.key}: working directory {cwd} is hidden from pods "
                "(it lies in the server's state, home or /tmp)"
            )
        return cwd

    def _check_executable(
        self, key: str, program: str, cwd: Path, path: str, user: PodUser | None, writable: list[Path]
    ) -> None:
        """Refuse a program that cannot be run, as ``exec`` would resolve it (relative paths from ``cwd``),
        and, isolated, one the pod could not see (bwrap) or its user could not execute (no sandbox)."""
        if os.sep in program:
            candidate = Path(program) if os.path.isabs(program) else cwd / program
            if not (candidate.is_file() and os.access(candidate, os.X_OK)):
                raise ExecutorError(f"{key}: command {program!r} is not an executable file")
        else:
            found = shutil.which(program, path=path)
            if found is None:
                raise ExecutorError(f"{key}: command {program!r} not found on PATH {path}")
            candidate = Path(found)
        isolation = self._isolation
        if isolation is None:
            return
        real = Path(os.path.realpath(candidate))
        if isolation.bwrap is not None:
            for shown in (candidate.absolute(), real):
                if not isolation.view.visible(shown, writable):
                    raise ExecutorError(
                        f"{key}: command {program!r} ({shown}) is in a directory pods do not see (the "
                        "server's home or state): install it elsewhere or show it with --pod-expose"
                    )
        elif user is not None:
            ids = (user.gid, *user.groups)
            if not may_execute(real, user.uid, ids):
                raise ExecutorError(
                    f"{key}: command {program!r} ({real}) cannot be executed by the pod's user "
                    f"{user.describe()}"
                )
            blocked = first_blocked(cwd, user.uid, ids)
            if blocked is not None:
                raise ExecutorError(
                    f"{key}: the pod's user {user.describe()} cannot reach its directory {cwd} ({blocked} "
                    "is closed to it): choose a --workdir outside the server's home, or install bubblewrap"
                )

    def _spawn(
        self,
        pod: PodLaunch,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        log_path: Path,
        user: PodUser | None,
        writable: list[Path],
    ) -> _Pod:
        """Record the pod's intent, open the log (header line first), start the pod's supervisor with its
        cgroup, user and sandbox (forked by the forkserver, else a fresh interpreter), close the parent's
        copy of the log."""
        header = f"--- {self._stamp()} start {pod.key}: {shlex.join(argv)}"
        header += f" (image {pod.image})" if pod.image else ""
        header += f" as {user.describe()}" if user is not None else ""
        command, start_env, stdin_data = list(argv), env, None
        umask: int | None = None
        isolation = self._isolation
        if isolation is not None:
            try:
                wrapped = isolation.wrap(command, env=env, user=user, cwd=cwd, writable=writable)
            except IsolationError as error:
                raise ExecutorError(f"{pod.key}: {error}") from error
            command, start_env, stdin_data = wrapped.argv, wrapped.env, wrapped.stdin
            umask = _POD_UMASK
        with self._lock:
            group = self._tracker.prepare(pod.key)
        sandboxed = isolation is not None and isolation.bwrap is not None
        token = uuid.uuid4().hex
        intent = Intent(pod.key, pod.attempt, token, group, self._owner, str(log_path), sandboxed)
        try:  # record first: whatever starts from here on, the next leader finds it
            record = self._records.create(intent)
        except OSError as error:
            self._release(pod.key)
            raise ExecutorError(
                f"{pod.key}: cannot record the pod in {self._records.root}: {error}"
            ) from error
        try:
            log = _open_log(log_path)
            stdin = _memory_file(stdin_data) if stdin_data is not None else subprocess.DEVNULL
        except OSError as error:
            self._release(pod.key)
            self._records.remove(record)
            raise ExecutorError(f"{pod.key}: cannot open log {log_path}: {error}") from error
        made = _Pod(pod.key, 0, None, log_path, record, token, sandboxed)
        with log:
            log.write((header + "\n").encode())
            log.flush()
            try:
                server = self._forkserver()
                if server is not None:
                    self._fork(made, server, command, start_env, cwd, umask, group, log.fileno(), stdin)
                else:
                    made.process = subprocess.Popen(
                        [*supervisor_argv(record, group, start_env.get("LC_CTYPE")), *command],
                        env=start_env,
                        cwd=cwd,
                        stdin=stdin,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        umask=-1 if umask is None else umask,  # -1: the server's
                    )
                    made.pid = made.process.pid
            except OSError as error:
                self._release(pod.key)
                self._records.remove(record)
                raise ExecutorError(f"{pod.key}: cannot start {argv[0]!r}: {error}") from error
            finally:
                if stdin != subprocess.DEVNULL:
                    os.close(stdin)
        return made

    def _fork(
        self,
        made: _Pod,
        server: Forkserver,
        command: list[str],
        env: dict[str, str],
        cwd: Path,
        umask: int | None,
        group: Path | None,
        log: int,
        stdin: int,
    ) -> None:
        """Have ``server`` fork the pod's supervisor; ``made`` gets its pid and identity. A forkserver that
        dies meanwhile may have started it: its record says (held as an orphan then); if it has not, the
        record is abandoned, so that nothing runs from it, and the start fails (OSError)."""
        try:
            pid, start = server.spawn(
                argv=command,
                env=env,
                cwd=os.path.abspath(cwd),
                umask=current_umask() if umask is None else umask,
                record=os.path.abspath(made.record),
                group=str(group) if group is not None else "",
                log=log,
                stdin=None if stdin == subprocess.DEVNULL else stdin,
            )
        except ForkserverError as error:
            leader = self._records.leader(made.record)
            if leader is None and self._records.abandon(made.record):
                raise ForkserverError(f"the forkserver died while starting it ({error})") from error
            leader = self._records.leader(made.record)
            if not isinstance(leader, Identity):
                raise
            made.pid, made.leader = leader.pid, leader  # watched as an adopted pod is
            return
        made.pid, made.leader, made.server = pid, Identity(pid, start, boot_id()), server

    def _forkserver(self) -> Forkserver | None:
        """The forkserver new pods are forked from, started (again) when there is none or it died; None
        (a fresh interpreter for this pod) when disabled, for the default's first pod, or when it cannot
        start (tried again a while later)."""
        if self._use_forkserver is False:
            return None
        with self._spawn_lock:
            if self._use_forkserver is None and self._first_start:
                self._first_start = False
                return None
            server = self._server
            if server is not None and server.alive and server.running():
                return server
            if server is not None:
                server.close()  # dead: its pods are watched through their records once its pipe ends
                self._server = None
            if self._closed or time.monotonic() < self._server_retry_at:
                return None
            try:
                server = Forkserver()
            except ForkserverError as error:
                log.warning("pods start without a forkserver for a while: %s", error)
                self._server_retry_at = time.monotonic() + _FORKSERVER_RETRY_S
                return None
            self._server = server
            with self._lock:
                self._servers.append(server)
            return server

    def _release(self, key: str) -> None:
        with self._lock:
            self._tracker.release(key)

    def _record_exit(self, pod: _Pod, code: int | None) -> None:
        """Forget a finished pod, queue its ``PodExit`` and note the exit in its log."""
        exit_code = code if code is not None else -signal.SIGKILL
        if pod.sandboxed and exit_code > 128 and exit_code - 128 in pod.sent:
            exit_code = -(exit_code - 128)  # bwrap's 128 + N for a signal this executor sent: as unsandboxed
        self._forget(pod)
        at = pod.exited_at if pod.exited_at is not None else self._clock()
        self._exits.append((PodExit(pod.key, exit_code, at), pod.record, pod.token))
        with contextlib.suppress(OSError), pod.log_path.open("a") as log:
            log.write(f"--- {self._stamp()} exit {pod.key}: code {exit_code}\n")

    def _stamp(self) -> str:
        return datetime.fromtimestamp(self._clock(), UTC).isoformat(timespec="milliseconds")


def _namespace_init(pid: int) -> bool:
    """Whether ``pid`` is the first process of a PID namespace below this one (bwrap's init in a pod)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            ids = line.split()[1:]
            return len(ids) > 1 and ids[-1] == "1"
    return False


def _still_there(intent: Intent | None, leader: Identity | None) -> bool:
    """Whether a swept pod's supervisor runs or its cgroup holds a process."""
    group = intent.group if intent is not None else None
    return (leader is not None and leader.alive()) or (group is not None and populated(group))


def _kill_leftover(intent: Intent | None, leader: Identity | None) -> None:
    """SIGKILL what is left of a pod nobody adopted: its cgroup, its supervisor's descendants (the
    supervisor then exits by itself)."""
    if intent is not None and intent.group is not None:
        kill_group(intent.group)
    if leader is not None and leader.alive():
        for pid in descendants(leader.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _namespace(pod: PodLaunch) -> str:
    return pod.namespace or pod.key.split("/", 1)[0]


def _safe(name: str) -> str:
    """A path component for ``name``: unsafe characters replaced, never ``.`` or ``..``."""
    cleaned = _UNSAFE.sub("_", name)
    return "_" + cleaned if cleaned.strip(".") == "" else cleaned


def _within(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


def _memory_file(data: bytes) -> int:
    """A descriptor of a memory file holding ``data``, read from the start (an isolated pod's first stdin:
    its environment, for the loader of :meth:`~gpuq.run.sandbox.Isolation.wrap`)."""
    descriptor = os.memfd_create("gpuq-pod-environment", 0)
    try:
        os.write(descriptor, data)
        os.lseek(descriptor, 0, os.SEEK_SET)
    except OSError:
        os.close(descriptor)
        raise
    return descriptor


def _open_log(path: Path) -> Any:
    """The log opened for appending, mode 0600 when created; missing directories are created 0700."""
    missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    return os.fdopen(descriptor, "ab")


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
