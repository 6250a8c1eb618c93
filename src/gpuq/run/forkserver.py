"""A pre-forked supervisor: one long-lived ``python -I`` per executor that forks each pod's supervisor.

Starting every pod with a fresh interpreter (:func:`~gpuq.run.proctrack.supervisor_argv`) costs
tens of milliseconds of CPU per pod, most of it Python starting up and importing ``ctypes``. The
forkserver (:data:`FORKSERVER`) pays that once: the executor sends it a start request over a Unix
socket (argv, environment, working directory, umask, record and cgroup directories, with the
pod's stdin and log as descriptors) and it ``fork``\\ s a child that becomes exactly the
supervisor :data:`~gpuq.run.proctrack.SUPERVISE` describes: a new session, ``leader.json`` with its
own pid and start time, subreaper, the command in its cgroup, what is left killed, ``exit.json``
fsynced, its status as its own. The reply is the supervisor's pid and start time, or why nothing
started (the working directory, ``fork`` itself).

The forkserver reaps its children (after SIGKILLing what is left of their process group while
the pid cannot be reused) and writes ``<pid> <wait status>`` lines to an event pipe that the
executor reads without blocking in ``poll``: no work per running pod.

It is not a single point of failure for running pods. Supervisors are independent processes that
record themselves and their exit: when the forkserver dies (the event pipe reaches its end), the
executor watches its pods as it watches adopted ones (:class:`~gpuq.run.proctrack.Identity` and
``exit.json``) and starts a new forkserver at the next start. It exits as soon as its socket
closes (the executor closed, or the server was killed): the pods run on, as they always did.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from gpuq.run.proctrack import SUPERVISE

_HEADER = struct.Struct("!I")
_READY_TIMEOUT_S = 30.0
_PIPE_SIZE = 1 << 20  # F_SETPIPE_SZ: room for ~80,000 unread exit lines before the forkserver buffers them
_F_SETPIPE_SZ = 1031

FORKSERVER = (
    SUPERVISE
    + r"""
import array, fcntl, select, socket, struct
# The forkserver (gpuq.run.forkserver): fork a supervisor per request, reap them, report their statuses.
channel = socket.socket(fileno=int(sys.argv[1]))
events = int(sys.argv[2])
os.set_blocking(events, False)
wake_r, wake_w = os.pipe()
os.set_blocking(wake_r, False)
os.set_blocking(wake_w, False)
signal.signal(signal.SIGCHLD, lambda *_: None)
signal.set_wakeup_fd(wake_w)
# The thread that started us may block signals (Ray's workers do): a blocked SIGCHLD would never wake
# us, and pods would inherit the mask (a blocked SIGTERM). Pods start with none blocked.
signal.pthread_sigmask(signal.SIG_SETMASK, [])
os.chdir("/")
HEADER = struct.Struct("!I")
def send(data):
    body = json.dumps(data).encode()
    channel.sendall(HEADER.pack(len(body)) + body)
def receive(count):
    chunks = []
    while count:
        chunk = channel.recv(min(count, 1 << 20))
        if not chunk:
            os._exit(0)  # the executor is gone: the pods run on without us
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)
def request():
    fds = array.array("i")
    head, ancillary, _, _ = channel.recvmsg(HEADER.size, socket.CMSG_SPACE(2 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if not head:
        os._exit(0)
    if len(head) < HEADER.size:
        head += receive(HEADER.size - len(head))
    return json.loads(receive(HEADER.unpack(head)[0])), list(fds)
def child(job, fds):
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in (channel.fileno(), events, wake_r, wake_w):
        os.close(fd)
    os.setsid()
    os.umask(job["umask"])
    stdin = fds[1] if job["stdin"] else os.open(os.devnull, os.O_RDWR)
    os.dup2(stdin, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[0], 2)
    for fd in {stdin, *fds}:
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(job["env"])
    supervise(job["record"], job["group"], job["argv"])
def spawn(job, fds):
    try:
        os.chdir(job["cwd"])  # here, so that a bad one is the start's error, as Popen's would be
        pid = os.fork()
    except OSError as error:
        os.chdir("/")
        return {"error": str(error)}
    if pid == 0:
        try:
            child(job, fds)
        except BaseException as error:
            os.write(2, f"gpuq: cannot start the pod's supervisor: {error!r}\n".encode())
        os._exit(126)
    os.chdir("/")
    with open(f"/proc/{pid}/stat") as handle:  # unreaped: the pid is still this child's
        start = int(handle.read().rsplit(")", 1)[1].split()[19])
    return {"pid": pid, "start": start}
pending = b""
def reap():
    global pending
    while True:
        try:
            found = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if found is None or found.si_pid == 0:
            return
        try:
            os.killpg(found.si_pid, signal.SIGKILL)  # what is left of its session: the pid is not reused yet
        except (ProcessLookupError, PermissionError):
            pass
        pid, status = os.waitpid(found.si_pid, 0)
        pending += f"{pid} {status}\n".encode()
def flush():
    global pending
    try:
        pending = pending[os.write(events, pending):]
    except BlockingIOError:
        pass
    except OSError:
        pending = b""  # the executor closed its end: nobody reads the statuses any more
import gc
gc.disable()  # a forked supervisor touching every object (a collection) would copy most pages
gc.freeze()
send({"ready": os.getpid()})
poller = select.poll()
poller.register(channel.fileno(), select.POLLIN)
poller.register(wake_r, select.POLLIN)
writing = False
while True:
    if bool(pending) != writing:
        writing = bool(pending)
        if writing:
            poller.register(events, select.POLLOUT)
        else:
            poller.unregister(events)
    ready = poller.poll(1000)
    if not ready:
        reap()  # a backstop: a SIGCHLD that was lost would otherwise leave a supervisor unreported
    for fd, _ in ready:
        if fd == wake_r:
            try:
                while os.read(wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
            reap()
        elif fd == channel.fileno():
            job, fds = request()
            try:
                send(spawn(job, fds))
            finally:
                for received in fds:
                    os.close(received)
            reap()
        if pending:
            flush()
"""
)
"""The forkserver, run as ``python -I -c FORKSERVER <socket fd> <event pipe fd>``: the supervisor's code
(:data:`~gpuq.run.proctrack.SUPERVISE`) and a loop serving start requests; no import of gpuq."""


class ForkserverError(OSError):
    """The forkserver is gone (or never started): its socket or pipe broke, or it did not say it is ready."""


class Forkserver:
    """The executor's side of one forkserver: :meth:`spawn` (any thread, one request at a time) and
    :meth:`statuses` (the exits it reported since the last call, without blocking)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        events_r, events_w = os.pipe2(os.O_CLOEXEC)
        with contextlib.suppress(OSError):
            fcntl.fcntl(events_w, _F_SETPIPE_SZ, _PIPE_SIZE)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-c", FORKSERVER, str(theirs.fileno()), str(events_w)],
                pass_fds=(theirs.fileno(), events_w),
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # no terminal's SIGINT, as pods' supervisors
                cwd="/",
            )
        except OSError as error:
            ours.close()
            os.close(events_r)
            raise ForkserverError(f"cannot start the forkserver: {error}") from error
        finally:
            theirs.close()
            os.close(events_w)  # its only writer is the forkserver: its end is the pipe's end
        self._channel = ours
        self._events = events_r
        os.set_blocking(events_r, False)
        self._lock = threading.Lock()
        self._partial = b""
        self.alive = True  # False once the event pipe ended: every status it will ever send was read
        self.pods: dict[int, str] = {}  # the executor's, under its lock: supervisor pid -> pod key
        self.exited: dict[int, int] = {}  # the executor's: supervisor pid -> wait status, until reported
        self._channel.settimeout(_READY_TIMEOUT_S)
        try:
            ready = self._receive()
        except (OSError, ValueError) as error:
            self.release()
            raise ForkserverError(f"the forkserver did not start: {error}") from error
        self._channel.settimeout(None)
        if "ready" not in ready:
            self.release()
            raise ForkserverError(f"the forkserver did not start: {ready}")

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        """Whether the forkserver process still runs (it is reaped here once it has exited)."""
        return self.process.poll() is None

    def spawn(
        self,
        *,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        umask: int,
        record: str,
        group: str,
        log: int,
        stdin: int | None,
    ) -> tuple[int, int]:
        """Fork a supervisor for one pod; its pid and start time (``/proc/<pid>/stat`` field 22).

        OSError (with the forkserver's message) when nothing started; :class:`ForkserverError` when
        the forkserver is gone, in which case the pod may or may not have started (its record says).
        """
        job = {
            "argv": argv,
            "env": env,
            "cwd": cwd,
            "umask": umask,
            "record": record,
            "group": group,
            "stdin": stdin is not None,
        }
        body = json.dumps(job).encode()
        fds = array.array("i", [log] if stdin is None else [log, stdin])
        message = _HEADER.pack(len(body)) + body
        with self._lock:
            try:
                sent = self._channel.sendmsg(
                    [message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())]
                )
                self._channel.sendall(message[sent:])
                reply = self._receive()
            except (OSError, ValueError) as error:
                raise ForkserverError(f"the forkserver is gone: {error}") from error
        if "error" in reply:
            raise OSError(str(reply["error"]))
        return int(reply["pid"]), int(reply["start"])

    def statuses(self) -> list[tuple[int, int]]:
        """``(pid, wait status)`` of the supervisors reaped since the last call; sets :attr:`alive` to
        False at the pipe's end (after the last status the forkserver wrote)."""
        if not self.alive:
            return []
        chunks = [self._partial]
        while True:
            try:
                chunk = os.read(self._events, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.alive = False
                with contextlib.suppress(OSError):
                    os.close(self._events)
                break
            chunks.append(chunk)
        data = b"".join(chunks)
        lines = data.split(b"\n")
        self._partial = lines.pop()
        found = []
        for line in lines:
            pid, status = line.split()
            found.append((int(pid), int(status)))
        return found

    def close(self) -> None:
        """Close the socket (the forkserver then exits at once, its pods run on) and reap it. The event
        pipe stays open: :meth:`statuses` still returns what it wrote before it exited."""
        self._channel.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        if self.process.returncode is None:
            self.process.kill()
            self.process.wait()

    def release(self) -> None:
        """Close the event pipe too (the executor is done with every pod it started)."""
        self.close()
        if self.alive:
            self.alive = False
            with contextlib.suppress(OSError):
                os.close(self._events)

    def _receive(self) -> dict[str, Any]:
        head = _exactly(self._channel, _HEADER.size)
        reply: dict[str, Any] = json.loads(_exactly(self._channel, _HEADER.unpack(head)[0]))
        return reply


def _exactly(channel: socket.socket, count: int) -> bytes:
    chunks = []
    while count:
        chunk = channel.recv(count)
        if not chunk:
            raise ForkserverError("the forkserver closed its socket")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def current_umask() -> int:
    """This process's umask without changing it (``/proc/self/status``; threads share it, so ``os.umask``
    set-and-restore would race with other threads' file creation)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


_UMASK_LOCK = threading.Lock()
