"""Which processes belong to a pod, so that every one of them ends with it, not only its process group.

A pod's process group does not hold a descendant that calls ``setsid``: killing the
group would leave it running on the pod's GPUs. Two trackers hold the whole tree:

* :class:`CgroupTracker` (preferred, where the server may create cgroup v2 groups): each pod
  runs in a cgroup of its own below the server's, joined before the pod's command starts
  (``sh -c 'echo 0 > cgroup.procs; exec ...'``), so nothing it starts can leave it. Killing
  is ``cgroup.kill``; the pod is gone when ``cgroup.events`` says ``populated 0``. The
  groups outlive a killed server; the next executor of the same workdir kills and removes
  those whose owner is dead.
* :class:`TreeTracker` otherwise: the pod's processes are the descendants of its leader.
  Without a PID namespace (bwrap gives one) an orphan would be reparented out of the tree,
  so the leader is then a small reaper (``PR_SET_CHILD_SUBREAPER``, run by the server's
  own Python) that runs the command, keeps every orphan as its child, kills what is left
  when the command exits, and exits with the command's status once all are gone.

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
from pathlib import Path
from typing import Protocol

_COUNTER = itertools.count(1)
_STALE_WAIT_S = 1.0


class Tracker(Protocol):
    """The processes of each pod, by pod key."""

    name: str

    def prepare(self, key: str) -> list[str]:
        """The argv prefix that puts the pod's command under tracking (before it runs anything)."""
        ...

    def started(self, key: str, pid: int) -> None:
        """The pod's leader (the process ``Popen`` started) is ``pid``."""
        ...

    def pids(self, key: str) -> set[int]:
        """The pod's live processes, the leader included while it runs."""
        ...

    def kill(self, key: str) -> None:
        """SIGKILL every process of the pod; returns at once."""
        ...

    def empty(self, key: str) -> bool:
        """Whether no process of the pod is left (asked once its leader has exited)."""
        ...

    def release(self, key: str) -> None:
        """Forget the pod (its processes are gone)."""
        ...

    def close(self) -> None:
        """Kill what is left of every pod and release the tracker's resources."""
        ...


def make_tracker(workdir: Path, *, reaper: bool, prefer: str = "auto") -> Tracker:
    """A cgroup tracker where cgroups can be created (``prefer`` ``"auto"`` or ``"cgroup"``), else a tree
    tracker (``reaper``: run a reaper as each pod's leader, needed without a PID namespace)."""
    if prefer != "tree":
        tracker = CgroupTracker.create(workdir)
        if tracker is not None:
            return tracker
        if prefer == "cgroup":
            raise OSError("cgroup v2 groups cannot be created here")
    return TreeTracker(reaper=reaper)


def tracking_for(workdir: Path, *, sandboxed: bool) -> str:
    """How :func:`make_tracker` would hold a pod's processes here, in words (for ``gpuq serve``'s start)."""
    mount = cgroup2_mount()
    if mount is not None and _joinable(mount / own_cgroup().lstrip("/")):
        return "a cgroup v2 group per pod"
    return "its process tree (bwrap's PID namespace)" if sandboxed else "its process tree (a reaper leader)"


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
        self.base = parent / f"gpuq-{scope}-{os.getpid()}-{next(_COUNTER)}"
        self._dirs: dict[str, Path] = {}
        self._count = itertools.count(1)

    @classmethod
    def create(cls, workdir: Path) -> CgroupTracker | None:
        """A tracker, or None where cgroup v2 groups cannot be made and joined here.

        First kills and removes the groups left by dead executors of the same workdir
        (a killed server's pods), and removes the empty ones of any dead executor.
        """
        mount = cgroup2_mount()
        if mount is None:
            return None
        parent = mount / own_cgroup().lstrip("/")
        if not _joinable(parent):
            return None
        scope = hashlib.sha256(str(Path(workdir).resolve()).encode()).hexdigest()[:10]
        _remove_stale(parent, scope)
        return cls(parent, scope)

    def prepare(self, key: str) -> list[str]:
        self.base.mkdir(exist_ok=True)
        directory = self.base / f"pod-{next(self._count)}"
        directory.mkdir()
        self._dirs[key] = directory
        # dash exports PWD: unset, so the pod's environment is exactly the one it was given
        return ["/bin/sh", "-c", 'echo 0 > "$0" && unset PWD && exec "$@"', str(directory / "cgroup.procs")]

    def started(self, key: str, pid: int) -> None:
        pass  # the pod moved itself in before running anything

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
        if not self._dirs:
            _remove_group(self.base)

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


def _populated(directory: Path) -> bool:
    try:
        events = (directory / "cgroup.events").read_text()
    except OSError:
        return False  # removed: nothing left in it
    return "populated 1" in events


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


def _remove_group(directory: Path) -> None:
    """Remove a cgroup and its (empty) children; a group still populated is left for later."""
    with contextlib.suppress(OSError):
        for child in sorted(directory.iterdir(), reverse=True):
            if child.is_dir():
                _remove_group(child)
    with contextlib.suppress(OSError):
        directory.rmdir()


def _remove_stale(parent: Path, scope: str) -> None:
    """Groups of executors whose process is gone: of this workdir (a killed server's pods outlive it) killed
    and removed, of another one removed where empty (its own server cleans the rest when it restarts)."""
    try:
        entries = [entry for entry in parent.glob("gpuq-*-*-*") if entry.is_dir()]
    except OSError:
        return
    for entry in entries:
        fields = entry.name.split("-")
        if len(fields) != 4 or not fields[2].isdigit() or _alive(int(fields[2])):
            continue
        if fields[1] == scope:
            pods = [child for child in entry.iterdir() if child.is_dir()]
            for pod in pods:
                _kill_group(pod)
            deadline = time.monotonic() + _STALE_WAIT_S
            while any(_populated(p) for p in pods) and time.monotonic() < deadline:
                time.sleep(0.01)
        _remove_group(entry)


# -- process trees ---------------------------------------------------------------------------------------


class TreeTracker:
    """A pod's processes are its leader's descendants; ``reaper``: the leader is :data:`REAPER`."""

    name = "process tree"

    def __init__(self, *, reaper: bool) -> None:
        self.reaper = reaper
        self._leaders: dict[str, int] = {}

    def prepare(self, key: str) -> list[str]:
        return [sys.executable, "-I", "-c", REAPER] if self.reaper else []

    def started(self, key: str, pid: int) -> None:
        self._leaders[key] = pid

    def pids(self, key: str) -> set[int]:
        leader = self._leaders.get(key)
        if leader is None:
            return set()
        return {leader, *descendants(leader)} if _alive(leader) else set(descendants(leader))

    def kill(self, key: str) -> None:
        """SIGKILL the descendants (a reaper leader then exits by itself); a bwrap leader too, which
        ends its PID namespace."""
        leader = self._leaders.get(key)
        if leader is None:
            return
        for _ in range(3):
            for pid in descendants(leader):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        if not self.reaper:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(leader, signal.SIGKILL)

    def empty(self, key: str) -> bool:
        return True  # asked once the leader exited, which it does only when its tree is gone

    def release(self, key: str) -> None:
        self._leaders.pop(key, None)

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


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


REAPER = r"""
import ctypes, os, resource, signal, sys
# A pod's first process: orphans of the pod stay its children (PR_SET_CHILD_SUBREAPER); when the
# command exits, whatever is left is killed, and this exits with the command's status once all are gone.
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
argv = sys.argv[1:]
main = -1
def forward(signum, _frame):
    if main > 0:
        try:
            os.kill(main, signum)
        except ProcessLookupError:
            pass
for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signum, forward)
main = os.fork()
if main == 0:
    try:
        os.execvp(argv[0], argv)
    except OSError as error:
        os.write(2, f"gpuq: cannot run {argv[0]!r}: {error}\n".encode())
    os._exit(127)
def children():
    me, found = str(os.getpid()), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found.append((int(entry), fields[1]))
    tree, todo, parents = [], [me], {}
    for pid, ppid in found:
        parents.setdefault(ppid, []).append(pid)
    while todo:
        for pid in parents.get(todo.pop(), []):
            tree.append(pid)
            todo.append(str(pid))
    return tree
status, done = 0, False
while True:
    try:
        pid, code = os.waitpid(-1, 0)
    except ChildProcessError:
        break
    if pid == main:
        status, done = code, True
    if done:
        for pid in children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
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
"""The reaper run as ``python -I -c REAPER argv...``: the server's own interpreter, no import of gpuq."""
