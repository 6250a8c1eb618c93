"""Pod isolation for the local executor: which user a pod runs as, what it sees, and its command line.

``gpuq serve`` runs pods of several teams on one machine; a pod must not read the
server's database, its context file (the admin token) or another team's files. Two
layers, each useful alone (docs/serve.md, "Job isolation"):

* **A user per namespace.** When the server is root, each namespace's pods run as an
  unprivileged user: one named by ``--pod-user NS=USER``, else the system user
  ``gpuq-<namespace>``, created with ``useradd --system`` at its first pod. The switch
  is ``setpriv`` (util-linux): real and effective ids, supplementary groups, no
  capabilities, ``no_new_privs``. A server that is not root cannot switch users: its
  pods run as itself and a warning says so.
* **A private view of the filesystem** with bubblewrap (``bwrap``): the system read-only,
  a private ``/tmp``, ``/dev/shm`` and ``/dev`` (GPU device nodes bound in), a new PID
  namespace with its own ``/proc`` (a pod sees only its processes, never the server's
  command line), and the server's state (database and context directories, the workdir,
  the server's home) replaced by empty directories; only the pod's own directories,
  ``--pod-bind`` directories (writable) and ``--pod-expose`` paths (read-only) are
  shown again. Where bwrap is absent or does not work, pods see the real filesystem and
  only file modes protect the server's files; a warning says so.

The command line is built by pure functions (:func:`bwrap_argv`, :func:`setpriv_argv`);
:func:`configure` probes what this machine offers and collects the warnings.
"""

from __future__ import annotations

import grp
import hashlib
import logging
import os
import pwd
import re
import shlex
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

Mode = Literal["auto", "bwrap", "user", "none"]
MODES: tuple[Mode, ...] = ("auto", "bwrap", "user", "none")
USER_PREFIX = "gpuq-"
_NAME_MAX = 32  # useradd's limit on a user name
_NAME_OK = re.compile(r"[a-z_][a-z0-9_-]*")
POD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""An isolated pod's PATH unless its spec sets one: the server's own may name its home."""
WRAPPER_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
"""The whole environment of the processes that wrap an isolated pod as root (bwrap, setpriv)."""
ENV_TOOL = "/usr/bin/env"
ENV_LOADER = 'eval "$(cat)" && exec </dev/null && exec "$@"'
"""Run as the pod's user: its environment from stdin, then stdin closed to /dev/null, then the command."""

# Directories a state directory may not be hidden over: the pod would lose the system.
_SYSTEM_DIRS = frozenset(
    Path(p)
    for p in ("/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/var", "/opt", "/dev")
) | frozenset(Path(p) for p in ("/proc", "/sys", "/run", "/boot", "/home", "/srv", "/mnt", "/media"))
_TMP_DIRS = (Path("/tmp"), Path("/var/tmp"))


class IsolationError(RuntimeError):
    """A pod's user or view cannot be set up (no useradd, a bad mapping...): the pod does not start."""


# -- users -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodUser:
    """An unprivileged account a pod runs as; ``name`` is None for a bare uid without a passwd entry."""

    uid: int
    gid: int
    name: str | None = None
    groups: tuple[int, ...] = ()

    def describe(self) -> str:
        return f"{self.name or 'uid'} ({self.uid}:{self.gid})"


def system_user_name(namespace: str) -> str:
    """``gpuq-<namespace>``, a valid user name of at most 32 characters, distinct per namespace.

    A namespace that is not already a valid name, or too long, gets a short hash of itself
    appended, so that two namespaces never share a user (``a.b`` and ``a-b`` differ).
    """
    plain = f"{USER_PREFIX}{namespace}"
    if _NAME_OK.fullmatch(plain) and len(plain) <= _NAME_MAX:
        return plain
    digest = hashlib.sha256(namespace.encode()).hexdigest()[:8]
    cleaned = re.sub(r"[^a-z0-9_-]", "-", namespace.lower())
    room = _NAME_MAX - len(USER_PREFIX) - len(digest) - 1
    return f"{USER_PREFIX}{cleaned[:room]}-{digest}"


def parse_user_mapping(items: Iterable[str]) -> dict[str, str]:
    """``NS=USER`` items (``--pod-user``) as a mapping; ValueError for a malformed or repeated item."""
    mapping: dict[str, str] = {}
    for item in items:
        namespace, sep, user = item.partition("=")
        namespace, user = namespace.strip(), user.strip()
        if not sep or not namespace or not user:
            raise ValueError(f"--pod-user {item!r}: expected NAMESPACE=USER (a name, a uid or uid:gid)")
        if namespace in mapping:
            raise ValueError(f"--pod-user: namespace {namespace!r} is mapped twice")
        mapping[namespace] = user
    return mapping


def lookup_user(spec: str) -> PodUser:
    """A user by name, ``uid`` or ``uid:gid``; uid 0 is refused (a pod never runs as root).

    A bare uid without a passwd entry is allowed (its gid defaults to the uid, no
    supplementary groups). ValueError for an unknown name or a malformed spec.
    """
    name, _, group = spec.partition(":")
    if name.isdigit():
        uid = int(name)
        try:
            entry: pwd.struct_passwd | None = pwd.getpwuid(uid)
        except KeyError:
            entry = None
    else:
        try:
            entry = pwd.getpwnam(name)
        except KeyError as error:
            raise ValueError(f"no user {name!r} on this machine") from error
        uid = entry.pw_uid
    if group and not group.isdigit():
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError as error:
            raise ValueError(f"no group {group!r} on this machine") from error
    else:
        gid = int(group) if group else (entry.pw_gid if entry else uid)
    if uid == 0 or gid == 0:
        raise ValueError(f"user {spec!r} is root: pods never run as root")
    groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, gid)) - {gid})) if entry else ()
    return PodUser(uid, gid, entry.pw_name if entry else None, groups)


def create_system_user(
    name: str, *, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
) -> PodUser:
    """The system user ``name``, created (``useradd --system``, own group, no home, no login) if missing."""
    try:
        return lookup_user(name)
    except ValueError:
        pass
    useradd = shutil.which("useradd", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if useradd is None:
        raise IsolationError(f"cannot create user {name!r}: useradd is not installed (use --pod-user)")
    shell = next((s for s in ("/usr/sbin/nologin", "/sbin/nologin") if os.path.exists(s)), "/bin/false")
    argv = [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"]
    argv += ["--shell", shell, "--comment", "gpuq pods", name]
    result = run(argv, capture_output=True, text=True, timeout=30, check=False)
    try:  # another replica may have created it at the same moment: the user is what counts
        return lookup_user(name)
    except ValueError:
        detail = (result.stderr or result.stdout).strip()
        message = f"cannot create user {name!r}: useradd exited {result.returncode}: {detail}"
        raise IsolationError(message) from None


class Users:
    """Namespace -> the user its pods run as: the ``--pod-user`` mapping, else ``gpuq-<namespace>``."""

    def __init__(
        self,
        mapping: Mapping[str, PodUser] | None = None,
        *,
        create: Callable[[str], PodUser] = create_system_user,
    ) -> None:
        self._mapping = dict(mapping or {})
        self._create = create
        self._made: dict[str, PodUser] = {}
        self._lock = threading.Lock()

    def for_namespace(self, namespace: str) -> PodUser:
        """The namespace's user, creating the default one on first use; IsolationError when impossible."""
        if namespace in self._mapping:
            return self._mapping[namespace]
        with self._lock:
            if namespace not in self._made:
                self._made[namespace] = self._create(system_user_name(namespace))
            return self._made[namespace]

    def describe(self) -> str:
        mapped = ", ".join(f"{ns}={u.describe()}" for ns, u in sorted(self._mapping.items()))
        return f"{mapped}; others gpuq-<namespace>" if mapped else "gpuq-<namespace> per namespace"


# -- permissions -----------------------------------------------------------------------------------------


def may_traverse(path: Path, uid: int, gids: Iterable[int]) -> bool:
    """Whether ``uid`` (with ``gids``) may search directory ``path`` by its mode bits (root may)."""
    return _mode_allows(path, uid, gids, 0o1)


def may_execute(path: Path, uid: int, gids: Iterable[int]) -> bool:
    """Whether ``uid`` may reach and execute ``path``: every ancestor searchable, the file executable."""
    path = Path(os.path.realpath(path))
    return all(may_traverse(a, uid, gids) for a in path.parents) and _mode_allows(path, uid, gids, 0o1)


def first_blocked(path: Path, uid: int, gids: Iterable[int]) -> Path | None:
    """The first ancestor of ``path`` (or itself) that ``uid`` may not search; None when all may be.

    Directories that do not exist yet are not counted: gpuq creates them passable.
    """
    gids = tuple(gids)
    real = Path(os.path.realpath(path))
    for directory in (*reversed(real.parents), real):
        if not directory.exists():
            return None
        if not may_traverse(directory, uid, gids):
            return directory
    return None


def _mode_allows(path: Path, uid: int, gids: Iterable[int], bit: int) -> bool:
    if uid == 0:
        return True
    try:
        info = path.stat()
    except OSError:
        return False
    if info.st_uid == uid:
        return bool(info.st_mode & (bit << 6))
    if info.st_gid in set(gids):
        return bool(info.st_mode & (bit << 3))
    return bool(info.st_mode & bit)


# -- command lines ---------------------------------------------------------------------------------------


def setpriv_argv(setpriv: str, user: PodUser) -> list[str]:
    """``setpriv`` switching to ``user``: its ids and groups, no capability, no new privileges."""
    groups = ["--init-groups"] if user.name else ["--clear-groups"]
    return [
        setpriv,
        f"--reuid={user.uid}",
        f"--regid={user.gid}",
        *groups,
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


@dataclass(frozen=True)
class View:
    """What an isolated pod sees, as paths of the real filesystem (all absolute).

    ``private``: the server's state, replaced by empty directories and never shown again
    except for the pod's own directories below it. ``scratch``: hidden too (the server's
    home) but ``expose`` may show paths below it again. ``tmp``: replaced by private,
    world-writable directories. ``expose``: shown read-only. ``shared``: shown writable.
    """

    private: tuple[Path, ...] = ()
    scratch: tuple[Path, ...] = ()
    tmp: tuple[Path, ...] = _TMP_DIRS
    expose: tuple[Path, ...] = ()
    shared: tuple[Path, ...] = ()

    def visible(self, path: Path, writable: Sequence[Path] = ()) -> bool:
        """Whether ``path`` can be seen inside the sandbox (as itself, not an empty stand-in)."""
        shown = (*self.expose, *self.shared, *writable)
        hidden = [h for h in (*self.private, *self.scratch, *self.tmp) if _within(path, h)]
        if not hidden:
            return True
        deepest = max(hidden, key=lambda p: len(p.parts))
        return any(_within(path, s) and len(s.parts) > len(deepest.parts) for s in shown)


def bwrap_argv(
    bwrap: str,
    view: View,
    *,
    writable: Sequence[Path],
    cwd: Path,
    devices: Sequence[Path] = (),
    traversable: Callable[[Path], bool] = lambda _path: True,
) -> list[str]:
    """The ``bwrap`` command line (up to and including ``--``) running a pod in ``view``.

    ``writable``: the pod's own directories (working, home, checkpoint). ``devices``: GPU
    device nodes to bind into the private ``/dev``. ``traversable(dir)``: whether the pod's
    user may search ``dir``; a real directory on the way to a shown path that it may not
    search is hidden too (the pod could not pass it anyway), so that what is shown is
    reachable. Mounts are applied shallowest first, so a hidden directory below a shown
    one stays hidden and a shown directory below a hidden one is shown.
    """
    # No --die-with-parent: a pod outlives a killed server until the next leader kills it (docs/serve.md,
    # "Leader election and the loop"); the PID namespace's init is in the pod's process group, so
    # killing the group ends it all.
    args = [bwrap, "--unshare-pid", "--unshare-ipc"]
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    args += ["--perms", "1777", "--tmpfs", "/dev/shm"]
    for device in devices:
        args += ["--dev-bind", str(device), str(device)]
    # (path, order, kind): hidden before shown at the same depth.
    mounts: dict[Path, tuple[int, str]] = {}
    for path in view.tmp:
        mounts[path] = (0, "tmp")
    for path in (*view.private, *view.scratch):
        mounts[path] = (0, "hide")
    shown = [(p, "ro") for p in view.expose] + [(p, "rw") for p in (*view.shared, *writable)]
    for path, kind in shown:
        mounts[path] = (1 if kind == "ro" else 2, kind)
    for path, _kind in shown:
        for ancestor in path.parents:
            if (
                ancestor != Path("/")
                and ancestor not in mounts
                and not _hidden_by(ancestor, mounts)
                and not traversable(ancestor)
            ):
                mounts[ancestor] = (0, "hide")
    done: list[Path] = []
    for path, (_order, kind) in sorted(mounts.items(), key=lambda item: (len(item[0].parts), item[1][0])):
        if kind in ("hide", "tmp") and not path.is_dir():
            continue
        if kind == "tmp":
            args += ["--perms", "1777", "--tmpfs", str(path)]
        elif kind == "hide":
            args += ["--perms", "0755", "--tmpfs", str(path)]
        else:
            args += _mount_points(path, done, mounts)
            args += ["--ro-bind" if kind == "ro" else "--bind", str(path), str(path)]
        done.append(path)
    return [*args, "--chdir", str(cwd), "--"]


def _mount_points(path: Path, done: Sequence[Path], mounts: Mapping[Path, tuple[int, str]]) -> list[str]:
    """``--dir`` (mode 0755) for each directory between the hidden directory holding ``path`` and it,
    so the way to a shown path is searchable (bwrap would create them mode 0700)."""
    covering = [m for m in done if _within(path, m) and m != path]
    if not covering:
        return []
    deepest = max(covering, key=lambda p: len(p.parts))
    if mounts[deepest][1] not in ("hide", "tmp"):
        return []  # inside a real (bound) directory: the directories exist
    args: list[str] = []
    for ancestor in reversed(path.parents):
        if _within(ancestor, deepest) and ancestor != deepest:
            args += ["--perms", "0755", "--dir", str(ancestor)]
    return args


def _hidden_by(path: Path, mounts: Mapping[Path, tuple[int, str]]) -> bool:
    return any(kind in ("hide", "tmp") and _within(path, m) for m, (_o, kind) in mounts.items())


def _within(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


def gpu_devices(dev: Path = Path("/dev")) -> list[Path]:
    """The NVIDIA device nodes (``/dev/nvidia*``, ``/dev/nvidia-caps``) to bind into a pod's ``/dev``."""
    try:
        return sorted(p for p in dev.iterdir() if p.name.startswith("nvidia"))
    except OSError:
        return []


# -- the configuration -----------------------------------------------------------------------------------


@dataclass
class Isolation:
    """How the local executor isolates pods; built by :func:`configure` (``gpuq serve``) or a test.

    ``bwrap``: the bwrap binary (None: no private view). ``users``: None when pods run as
    the server's user; else ``setpriv`` switches to them.
    """

    view: View = field(default_factory=View)
    bwrap: str | None = None
    users: Users | None = None
    setpriv: str | None = None
    warnings: tuple[str, ...] = ()

    def describe(self) -> str:
        sandbox = "bwrap (private filesystem view, PID namespace)" if self.bwrap else "no filesystem sandbox"
        users = f"users {self.users.describe()}" if self.users else "as the server's user"
        return f"{sandbox}, {users}"

    def wrap(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        user: PodUser | None,
        cwd: Path,
        writable: Sequence[Path],
    ) -> Wrapped:
        """``argv`` behind the sandbox and the user switch (which runs inside it).

        The wrappers run as root: they start with :data:`WRAPPER_ENV` only, and the pod's
        environment reaches its command through its stdin, read by a shell after the switch
        (:func:`environment_script`); so a variable of the pod (``LD_PRELOAD``,
        ``LD_LIBRARY_PATH``...) never reaches a process running as root, and no command line
        others can read holds its values. The pod's stdin is ``/dev/null`` again after that.
        """
        if user is None and self.bwrap is None:
            return Wrapped(list(argv), dict(env), None)
        script, odd = environment_script(env)
        loader = ["/bin/sh", "-c", ENV_LOADER, "sh"]
        command = [*loader, *([ENV_TOOL, "--", *odd] if odd else []), *argv]
        if user is not None:
            if self.setpriv is None:
                raise IsolationError("setpriv is needed to run a pod as its namespace's user")
            command = setpriv_argv(self.setpriv, user) + command
        if self.bwrap is not None:
            ids = (user.gid, *user.groups) if user else (os.getgid(), *os.getgroups())
            uid = user.uid if user else os.getuid()
            prefix = bwrap_argv(
                self.bwrap,
                self.view,
                writable=writable,
                cwd=cwd,
                devices=gpu_devices(),
                traversable=lambda d: may_traverse(d, uid, ids),
            )
            command = prefix + command
        return Wrapped(command, dict(WRAPPER_ENV), script.encode())


@dataclass(frozen=True)
class Wrapped:
    """An isolated pod's start: the command line, its environment, what its stdin holds (None:
    ``/dev/null``)."""

    argv: list[str]
    env: dict[str, str]
    stdin: bytes | None


_SH_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def environment_script(env: Mapping[str, str]) -> tuple[str, list[str]]:
    """``env`` as POSIX sh code that exports exactly it, and the ``NAME=VALUE`` items sh cannot name
    (Kubernetes allows ``.`` and ``-`` in names; those go to ``env`` on the command line)."""
    lines = ["unset PWD"]  # sh sets it: only the pod's own variables remain
    odd = []
    for name, value in env.items():
        if _SH_NAME.fullmatch(name):
            lines.append(f"export {name}={shlex.quote(value)}")
        else:
            odd.append(f"{name}={value}")
    return "\n".join(lines) + "\n", odd


def configure(
    mode: Mode = "auto",
    *,
    users: Mapping[str, str] | None = None,
    state: Sequence[Path] = (),
    workdir: Path | None = None,
    home: Sequence[Path] = (),
    expose: Sequence[Path] = (),
    shared: Sequence[Path] = (),
    euid: int | None = None,
    which: Callable[[str], str | None] = shutil.which,
    probe: Callable[[str], str | None] | None = None,
    create: Callable[[str], PodUser] = create_system_user,
) -> Isolation:
    """What this machine can do for ``mode``, with a warning for every protection that is missing.

    ``state``: the server's state directories (the database's and the context file's);
    ``workdir``: the pods' workdir (every team's directories and logs); ``home``: other
    directories to hide that ``expose`` may show parts of (the server's home). ``expose`` /
    ``shared``: ``--pod-expose`` / ``--pod-bind``. ``probe(bwrap)`` runs bwrap once and
    returns why it fails (None: it works). Raises ValueError for a configuration that cannot
    be honoured (``--sandbox bwrap`` without a working bwrap, a bad ``--pod-user``, a shown
    path that would reveal the server's state).
    """
    if mode not in MODES:
        raise ValueError(f"unknown --sandbox {mode!r}; known: {', '.join(MODES)}")
    euid = os.geteuid() if euid is None else euid
    warnings: list[str] = []
    if mode == "none":
        warnings.append(
            "--sandbox none: pods run as the server's user with its view of the filesystem: a pod can read "
            "the database, the context file (the admin token) and every team's logs"
        )
        return Isolation(warnings=tuple(warnings))
    view, view_warnings = _view(state, workdir, home, expose, shared)
    warnings += view_warnings
    pod_users: Users | None = None
    setpriv = which("setpriv")
    if euid == 0:
        if setpriv is None:
            raise ValueError(
                "setpriv (util-linux) is needed to run pods as their namespace's user: install util-linux, "
                "or accept pods running as root with --sandbox none"
            )
        mapped = {}
        for namespace, spec in (users or {}).items():
            try:
                mapped[namespace] = lookup_user(spec)
            except ValueError as error:
                raise ValueError(f"--pod-user {namespace}={spec}: {error}") from error
        pod_users = Users(mapped, create=create)
        if which("useradd") is None and not os.path.exists("/usr/sbin/useradd"):
            warnings.append(
                "useradd is not installed: a namespace without --pod-user cannot get its gpuq-<namespace> "
                "user, and its pods will not start"
            )
    else:
        warnings.append(
            f"isolation by user is OFF: gpuq serve is not root (uid {euid}), so every pod runs as uid {euid} "
            "and can read whatever the server can (run it as root for a user per namespace)"
        )
        if users:
            raise ValueError("--pod-user needs gpuq serve to run as root")
    bwrap = which("bwrap") if mode != "user" else None
    why: str | None = None
    if mode != "user":
        if bwrap is None:
            why = "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
        else:
            why = (probe or probe_bwrap)(bwrap)
    if mode == "bwrap" and why is not None:
        raise ValueError(f"--sandbox bwrap: {why}")
    if why is not None:
        warnings.append(
            f"no filesystem sandbox: {why}; pods see this machine's whole filesystem and only file "
            "modes (0600/0700) keep them from the server's files and other teams' directories"
        )
    if mode == "user" or why is not None:
        if pod_users is not None and workdir is not None:
            blocked = first_blocked(workdir, 65534, ())
            if blocked is not None:
                warnings.append(
                    f"without a sandbox, pods must reach their directories under {workdir}, but {blocked} "
                    "may not be searched by other users: their pods will not start (choose a --workdir "
                    "outside the server's home, e.g. /var/lib/gpuq/work)"
                )
        return Isolation(view=view, users=pod_users, setpriv=setpriv, warnings=tuple(warnings))
    return Isolation(view=view, bwrap=bwrap, users=pod_users, setpriv=setpriv, warnings=tuple(warnings))


def _view(
    state: Sequence[Path],
    workdir: Path | None,
    home: Sequence[Path],
    expose: Sequence[Path],
    shared: Sequence[Path],
) -> tuple[View, list[str]]:
    """The view's paths made absolute and checked; warnings for state that cannot be hidden.

    A shown path may not be a state directory itself nor lie inside the workdir (which holds
    every team's directories and logs); one inside the database's directory, beside the
    database, may be shown.
    """
    warnings: list[str] = []
    private: list[Path] = []
    work = Path(os.path.realpath(workdir)) if workdir is not None else None
    for path in [Path(os.path.realpath(p)) for p in state] + ([work] if work else []):
        if path in _SYSTEM_DIRS:
            warnings.append(
                f"{path} holds the server's state but is a system directory: it cannot be hidden from "
                "pods, only file modes protect the state files (give the state a directory of its own)"
            )
        elif path not in private:
            private.append(path)
    hidden_home = [p for p in (Path(os.path.realpath(h)) for h in home) if p not in _SYSTEM_DIRS]
    shown: dict[str, list[Path]] = {"--pod-expose": [], "--pod-bind": []}
    for option, paths in (("--pod-expose", expose), ("--pod-bind", shared)):
        for raw in paths:
            path = Path(os.path.realpath(Path(raw).expanduser()))
            if not path.exists():
                raise ValueError(f"{option} {raw}: no such file or directory")
            if option == "--pod-bind" and not path.is_dir():
                raise ValueError(f"{option} {raw}: not a directory")
            if path in private or (work is not None and _within(path, work)):
                raise ValueError(f"{option} {raw}: would show pods the server's state")
            shown[option].append(path)
    view = View(
        private=tuple(private),
        scratch=tuple(p for p in hidden_home if p not in private),
        expose=tuple(shown["--pod-expose"]),
        shared=tuple(shown["--pod-bind"]),
    )
    return view, warnings


def probe_bwrap(bwrap: str) -> str | None:
    """Run bwrap once as pods will be run (the system read-only, a PID namespace): why it fails, or None."""
    argv = bwrap_argv(bwrap, View(), writable=(), cwd=Path("/"))
    try:
        result = subprocess.run([*argv, "true"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap cannot run: {error}"
    if result.returncode != 0:
        return f"bwrap does not work here ({(result.stderr or '').strip() or f'exit {result.returncode}'})"
    return None
