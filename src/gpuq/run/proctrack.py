"""Which processes belong to a pod, so that every one of them ends with it, not only its process group.

Every pod's first process is a small **supervisor** (:data:`SUPERVISE`, importing nothing of gpuq)
that outlives a killed server. It is forked by the executor's forkserver (:mod:`gpuq.run.forkserver`,
one ``python -I`` that imported it once), or, where none runs, started as a ``python -I`` of its own
(:data:`SUPERVISOR`, :func:`supervisor_argv`); either way it is the same code in a new session:

1. before anything of the pod runs, it records who it is (pid, start time and boot id,
   ``leader.json``) in the pod's record directory, or runs nothing when a recovering leader
   has already written there that the pod is abandoned (both sides create the file with
   ``link``, which fails when it exists: exactly one wins);
2. it is a subreaper (``PR_SET_CHILD_SUBREAPER``): orphans of the pod stay its children;
3. it runs the command (which first joins the pod's cgroup, when there is one) and, when the
   command exits, kills whatever is left of the pod and waits until nothing is;
4. it records the command's status (``exit.json``, written to a temporary file, fsynced and
   renamed) and exits with that status.

So a pod's exit is never lost: a server that runs reaps the supervisor (or its forkserver does and
says so); one that was killed, or whose forkserver died, finds the record (:mod:`gpuq.run.podrecords`).
Once the command has exited, the supervisor walks ``/proc`` for leftovers only while it still has
children: a subreaper without children has no descendants.

Two trackers hold the pod's processes:

* :class:`CgroupTracker` (preferred, where the server may create cgroup v2 groups): each pod's
  command runs in a cgroup of its own below the server's, joined before the command starts,
  so nothing it starts can leave it. Killing is ``cgroup.kill``; the pod is gone when
  ``cgroup.events`` says ``populated 0``. The groups outlive a killed server; the next
  executor of the same workdir adopts those its loop takes back and kills the others of
  dead executors (:meth:`CgroupTracker.sweep`).
* :class:`TreeTracker` otherwise: the pod's processes are the supervisor's descendants (as a
  subreaper it keeps every orphan; bwrap's PID namespace keeps the sandboxed ones too).

Neither blocks: ``kill`` sends signals and returns; the executor polls ``empty``.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

_COUNTER = itertools.count(1)
_STALE_WAIT_S = 1.0


class Tracker(Protocol):
    """The processes of each pod, by pod key. A pod's leader is always its supervisor."""

    name: str

    def prepare(self, key: str) -> Path | None:
        """The cgroup directory the pod's command joins before it runs (None: none, the tree holds it)."""
        ...

    def started(self, key: str, pid: int) -> None:
        """The pod's leader (the supervisor ``Popen`` started) is ``pid``."""
        ...

    def adopt(self, key: str, pid: int, group: Path | None) -> None:
        """Hold a pod a previous executor started: its supervisor ``pid``, its cgroup ``group`` if any."""
        ...

    def pids(self, key: str) -> set[int]:
        """The pod's live processes (the supervisor excluded for a cgroup, included for a tree)."""
        ...

    def kill(self, key: str) -> None:
        """SIGKILL every process of the pod but its supervisor (which then exits by itself); at once."""
        ...

    def empty(self, key: str) -> bool:
        """Whether no process of the pod is left (asked once its leader has exited)."""
        ...

    def release(self, key: str) -> None:
        """Forget the pod (its processes are gone)."""
        ...

    def sweep(self, keep: Collection[Path]) -> None:
        """Kill and remove what dead executors of the same workdir left, except the groups in ``keep``."""
        ...

    def close(self) -> None:
        """Kill what is left of every pod and release the tracker's resources."""
        ...


def make_tracker(workdir: Path, *, prefer: str = "auto") -> Tracker:
    """A cgroup tracker where cgroups can be created (``prefer`` ``"auto"`` or ``"cgroup"``), else a tree
    tracker."""
    if prefer != "tree":
        tracker = CgroupTracker.create(workdir)
        if tracker is not None:
            return tracker
        if prefer == "cgroup":
            raise OSError("cgroup v2 groups cannot be created here")
    return TreeTracker()


def tracking_for(workdir: Path, *, sandboxed: bool) -> str:
    """How :func:`make_tracker` would hold a pod's processes here, in words (for ``gpuq serve``'s start)."""
    mount = cgroup2_mount()
    if mount is not None and _joinable(mount / own_cgroup().lstrip("/")):
        return "a cgroup v2 group per pod"
    if sandboxed:
        return "its process tree (a supervisor and bwrap's PID namespace)"
    return "its process tree (a subreaper supervisor)"


# -- who a process is --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """A process beyond its pid, which the kernel reuses: its start time (``/proc/<pid>/stat`` field 22,
    clock ticks since boot) and the boot it started in."""

    pid: int
    start: int
    boot: str

    def alive(self) -> bool:
        """Whether this very process still runs (not a zombie, not a newer process with the same pid)."""
        found = identity(self.pid)
        return found is not None and found == self


def identity(pid: int) -> Identity | None:
    """The identity of the live (not zombie) process ``pid``, or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X") or len(fields) < 20:
        return None
    return Identity(pid, int(fields[19]), boot_id())


_BOOT: list[str] = []


def boot_id() -> str:
    """This boot's id (``/proc/sys/kernel/random/boot_id``), '' where it cannot be read."""
    if not _BOOT:
        try:
            _BOOT.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
        except OSError:
            _BOOT.append("")
    return _BOOT[0]


# -- cgroups ---------------------------------------------------------------------------------------------


def cgroup2_mount(mountinfo: str | None = None) -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup``, or ``.../unified`` on hybrid hosts)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    for line in mountinfo.splitlines():
        before, sep, after = line.partition(" - ")
        if sep and after.split(" ", 1)[0] == "cgroup2":
            return Path(before.split()[4])
    return None


def own_cgroup(text: str | None = None) -> str:
    """This process's cgroup v2 path (``0::<path>`` in ``/proc/self/cgroup``), ``/`` if none is listed."""
    if text is None:
        try:
            text = Path("/proc/self/cgroup").read_text()
        except OSError:
            return "/"
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:] or "/"
    return "/"


class CgroupTracker:
    """One cgroup per pod below ``<server's cgroup>/gpuq-<workdir hash>-<pid>-<n>``, which exists only
    while the executor has pods (so an executor that is never closed leaves nothing behind)."""

    name = "cgroup"

    def __init__(self, parent: Path, scope: str) -> None:
        self.parent = parent
        self.scope = scope
        self.base = parent / f"gpuq-{scope}-{os.getpid()}-{next(_COUNTER)}"
        self._dirs: dict[str, Path] = {}
        self._count = itertools.count(1)

    @classmethod
    def create(cls, workdir: Path) -> CgroupTracker | None:
        """A tracker, or None where cgroup v2 groups cannot be made and joined here.

        Removes the empty groups dead executors left; populated ones (a killed server's pods) are
        kept for the next loop to adopt, and what it does not adopt goes at :meth:`sweep`.
        """
        mount = cgroup2_mount()
        if mount is None:
            return None
        parent = mount / own_cgroup().lstrip("/")
        if not _joinable(parent):
            return None
        scope = hashlib.sha256(str(Path(workdir).resolve()).encode()).hexdigest()[:10]
        _remove_stale(parent, scope, kill=False)
        return cls(parent, scope)

    def prepare(self, key: str) -> Path:
        self.base.mkdir(exist_ok=True)
        directory = self.base / f"pod-{next(self._count)}"
        directory.mkdir()
        self._dirs[key] = directory
        return directory

    def started(self, key: str, pid: int) -> None:
        pass  # the pod's command moves itself in before running anything

    def adopt(self, key: str, pid: int, group: Path | None) -> None:
        if group is not None:
            self._dirs[key] = group

    def pids(self, key: str) -> set[int]:
        directory = self._dirs.get(key)
        return _procs(directory) if directory else set()

    def kill(self, key: str) -> None:
        directory = self._dirs.get(key)
        if directory is not None:
            _kill_group(directory)

    def empty(self, key: str) -> bool:
        directory = self._dirs.get(key)
        return directory is None or not _populated(directory)

    def release(self, key: str) -> None:
        directory = self._dirs.pop(key, None)
        if directory is not None:
            _remove_group(directory)
            others = {d.parent for d in self._dirs.values()}
            if directory.parent != self.base and directory.parent not in others:
                _remove_group(directory.parent)  # an adopted pod's: the dead executor's group, empty now
        if not self._dirs:
            _remove_group(self.base)

    def sweep(self, keep: Collection[Path]) -> None:
        _remove_stale(self.parent, self.scope, kill=True, keep={*keep, *self._dirs.values()})

    def close(self) -> None:
        for directory in self._dirs.values():
            _kill_group(directory)
        deadline = time.monotonic() + _STALE_WAIT_S
        while any(_populated(d) for d in self._dirs.values()) and time.monotonic() < deadline:
            time.sleep(0.01)
        for key in list(self._dirs):
            self.release(key)
        _remove_group(self.base)


_JOINABLE: dict[Path, bool] = {}


def _joinable(parent: Path) -> bool:
    """Whether this process may create a group below ``parent`` and move a process into it (which needs
    write access up to the common ancestor, not only to the new directory); probed once per process."""
    if parent not in _JOINABLE:
        probe = parent / f"gpuq-probe-{os.getpid()}-{next(_COUNTER)}"
        try:
            probe.mkdir()
            joined = subprocess.run(
                ["/bin/sh", "-c", 'echo 0 > "$0"', str(probe / "cgroup.procs")],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=10,
                check=False,
            )
            _JOINABLE[parent] = joined.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _JOINABLE[parent] = False
        finally:
            _remove_group(probe)
    return _JOINABLE[parent]


def _procs(directory: Path) -> set[int]:
    try:
        return {int(line) for line in (directory / "cgroup.procs").read_text().split()}
    except (OSError, ValueError):
        return set()


def populated(directory: Path) -> bool:
    """Whether a process is left in the cgroup ``directory`` (False once it is removed)."""
    return _populated(directory)


def _populated(directory: Path) -> bool:
    try:
        events = (directory / "cgroup.events").read_text()
    except OSError:
        return False  # removed: nothing left in it
    return "populated 1" in events


def kill_group(directory: Path) -> None:
    """SIGKILL every process of the cgroup ``directory``."""
    _kill_group(directory)


def _kill_group(directory: Path) -> None:
    """``cgroup.kill`` (Linux 5.14+), else SIGKILL every member (a few passes, for ones forked meanwhile)."""
    try:
        (directory / "cgroup.kill").write_text("1")
        return
    except OSError:
        pass
    for _ in range(3):
        for pid in _procs(directory):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def remove_group(directory: Path) -> None:
    """Remove a cgroup and its (empty) children; a group still populated is left for later."""
    _remove_group(directory)


def _remove_group(directory: Path) -> None:
    with contextlib.suppress(OSError):
        for child in sorted(directory.iterdir(), reverse=True):
            if child.is_dir():
                _remove_group(child)
    with contextlib.suppress(OSError):
        directory.rmdir()


def _remove_stale(parent: Path, scope: str, *, kill: bool, keep: Collection[Path] = ()) -> None:
    """Groups of executors whose process is gone: of this workdir (a killed server's pods outlive it) killed
    (``kill``; except the pods in ``keep``, which a loop adopted) and removed, of another one removed where
    empty (its own server cleans the rest when it restarts)."""
    try:
        entries = [entry for entry in parent.glob("gpuq-*-*-*") if entry.is_dir()]
    except OSError:
        return
    for entry in entries:
        fields = entry.name.split("-")
        if len(fields) != 4 or not fields[2].isdigit() or _alive(int(fields[2])):
            continue
        if fields[1] == scope and kill:
            pods = [child for child in entry.iterdir() if child.is_dir() and child not in keep]
            for pod in pods:
                _kill_group(pod)
            deadline = time.monotonic() + _STALE_WAIT_S
            while any(_populated(p) for p in pods) and time.monotonic() < deadline:
                time.sleep(0.01)
            for pod in pods:
                _remove_group(pod)
        if not any(_within(kept, entry) for kept in keep):
            _remove_group(entry)


def _within(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


# -- process trees ---------------------------------------------------------------------------------------


class TreeTracker:
    """A pod's processes are its supervisor's descendants (a subreaper keeps its orphans)."""

    name = "process tree"

    def __init__(self) -> None:
        self._leaders: dict[str, int] = {}

    def prepare(self, key: str) -> None:
        return None

    def started(self, key: str, pid: int) -> None:
        self._leaders[key] = pid

    def adopt(self, key: str, pid: int, group: Path | None) -> None:
        self._leaders[key] = pid  # a cgroup it was started in holds nothing the supervisor does not

    def pids(self, key: str) -> set[int]:
        leader = self._leaders.get(key)
        if leader is None:
            return set()
        return {leader, *descendants(leader)} if _alive(leader) else set(descendants(leader))

    def kill(self, key: str) -> None:
        """SIGKILL the descendants; the supervisor then records the exit and exits by itself."""
        leader = self._leaders.get(key)
        if leader is None:
            return
        for _ in range(3):
            for pid in descendants(leader):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def empty(self, key: str) -> bool:
        return True  # asked once the supervisor exited, which it does only when its tree is gone

    def release(self, key: str) -> None:
        self._leaders.pop(key, None)

    def sweep(self, keep: Collection[Path]) -> None:
        pass  # a dead executor's trees: the executor kills them through their records

    def close(self) -> None:
        for key in list(self._leaders):
            self.kill(key)
        self._leaders.clear()


def descendants(root: int) -> list[int]:
    """Live (not zombie) descendants of ``root``, from ``/proc``."""
    children: dict[int, list[int]] = {}
    live: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        if fields[0] != "Z":
            live.add(pid)
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return [pid for pid in found if pid in live]


def children(parent: int) -> set[int]:
    """Live direct children of ``parent``."""
    found: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == parent and fields[0] != "Z":
                found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# -- the supervisor ----------------------------------------------------------------------------------------

LEADER_FILE = "leader.json"
"""In a pod's record directory: the supervisor's identity, or ``{"abandoned": true}`` (nothing runs)."""
EXIT_FILE = "exit.json"
"""In a pod's record directory: the command's status (negative: killed by that signal) and when it ended."""
ABANDONED_CODE = 125
"""The supervisor's status when a recovering leader abandoned the pod before it ran anything."""


def supervisor_argv(record: Path, group: Path | None, lc_ctype: str | None = None) -> list[str]:
    """The argv prefix that runs a pod's command under its supervisor (then the command). ``lc_ctype``:
    the ``LC_CTYPE`` of the environment it is started with, which Python's locale coercion (PEP 538)
    would otherwise change for the command."""
    locale = "" if lc_ctype is None else f"={lc_ctype}"
    return [sys.executable, "-I", "-c", SUPERVISOR, str(record), str(group) if group else "", locale]


SUPERVISE = r"""
import ctypes, json, os, resource, signal, sys, time
# A pod's first process (gpuq.run.proctrack): record who it is, run the command (in its cgroup), keep
# its orphans (subreaper), kill what is left when it exits, record its status, exit with it.
# supervise() never returns; the forkserver (gpuq.run.forkserver) calls it in each forked child.
PRCTL = ctypes.CDLL(None, use_errno=True).prctl
try:
    with open("/proc/sys/kernel/random/boot_id") as handle:
        BOOT = handle.read().strip()
except OSError:
    BOOT = ""
def publish(record, name, data, exclusive):
    tmp = os.path.join(record, f".{name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, json.dumps(data).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    target = os.path.join(record, name)
    try:
        if exclusive:
            os.link(tmp, target)  # fails when a recovering leader abandoned the pod first
        else:
            os.rename(tmp, target)
    finally:
        if exclusive:
            os.unlink(tmp)
    fd = os.open(record, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
def start_time():
    with open("/proc/self/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[19])
def descendants():
    me, parents = str(os.getpid()), {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parents.setdefault(handle.read().rsplit(")", 1)[1].split()[1], []).append(entry)
            except OSError:
                continue
    tree, todo = [], [me]
    while todo:
        for pid in parents.get(todo.pop(), []):
            tree.append(int(pid))
            todo.append(pid)
    return tree
def populated(group):
    try:
        with open(os.path.join(group, "cgroup.events")) as handle:
            return "populated 1" in handle.read()
    except OSError:
        return False
def kill_rest(group):
    if group:
        try:
            with open(os.path.join(group, "cgroup.kill"), "w") as handle:
                handle.write("1")
        except OSError:
            try:
                with open(os.path.join(group, "cgroup.procs")) as handle:
                    members = [int(line) for line in handle.read().split()]
            except (OSError, ValueError):
                members = []
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
    for pid in descendants():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
def supervise(record, group, argv):
    try:
        publish(record, "leader.json", {"pid": os.getpid(), "start": start_time(), "boot": BOOT}, True)
    except FileExistsError:
        os.write(2, b"gpuq: the pod was abandoned by a recovering control plane before it started\n")
        os._exit(125)
    except OSError as error:
        os.write(2, f"gpuq: cannot record the pod in {record}: {error}\n".encode())
        os._exit(126)
    PRCTL(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    main = -1
    def forward(signum, _frame):
        if main > 0:
            try:
                os.kill(main, signum)
            except ProcessLookupError:
                pass
    # A stop sent before the command exists must not be lost: the signals stay blocked across the
    # fork; the child unblocks them once their default action is back (a pending one ends it before
    # it runs anything), the parent once it knows whom to forward them to.
    stops = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    for signum in stops:
        signal.signal(signum, forward)
    main = os.fork()
    if main == 0:
        try:
            for signum in stops:
                signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
            if group:
                if not os.path.isdir(group):  # removed as empty by a server that restarted meanwhile
                    os.makedirs(group, exist_ok=True)
                with open(os.path.join(group, "cgroup.procs"), "w") as handle:
                    handle.write("0")
            os.execvp(argv[0], argv)
        except OSError as error:
            os.write(2, f"gpuq: cannot run {argv[0]!r}: {error}\n".encode())
        os._exit(127)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
    # Reap until no child is left. A subreaper's descendants are its children or below a living child,
    # so once the command has exited and no child is left, nothing of the tree is: the /proc walk of
    # kill_rest is needed only when orphans remain.
    status, done = 0, False
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG if done else 0)
            if pid == 0:
                kill_rest(group)
                pid, code = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == main:
            status, done = code, True
    while group and populated(group):
        kill_rest(group)
        time.sleep(0.02)
    result = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    try:
        publish(record, "exit.json", {"code": result, "time": time.time()}, False)
    except OSError:
        pass  # the record is gone: the control plane removed it, nobody will read it
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL cannot be caught: it is already the default
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status))
"""
"""The supervisor's code: ``supervise(record, group, argv)`` becomes a pod's supervisor and never returns.
Imports nothing of gpuq: it runs in ``python -I`` (:data:`SUPERVISOR`) or in the forkserver."""

SUPERVISOR = (
    SUPERVISE
    + r"""
if sys.argv[3]:  # the environment's own LC_CTYPE, as it was before Python's locale coercion
    os.environ["LC_CTYPE"] = sys.argv[3][1:]
else:
    os.environ.pop("LC_CTYPE", None)
supervise(sys.argv[1], sys.argv[2], sys.argv[4:])
"""
)
"""The supervisor run as ``python -I -c SUPERVISOR record group locale argv...``: the server's own
interpreter, no import of gpuq. ``group`` is the cgroup directory its command joins, or empty;
``locale`` is ``=`` and the original ``LC_CTYPE``, or empty where it was unset."""
