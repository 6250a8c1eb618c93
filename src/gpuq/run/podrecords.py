"""A pod's record directory: what lets the next leader take back, or finish, a pod a killed server started.

``<workdir>/records/<namespace>/<workload>_<pod>/``, mode 0700 and the server's own (hidden from pods
with bwrap, closed to their users without it), so a pod can neither read nor forge it:

``intent.json``
    written by the executor *before* the pod's supervisor starts (record first): the pod's key, its
    attempt, a token naming this start, its cgroup, and the executor that owns it;
``leader.json``
    written by the supervisor *before* the pod's command runs: its pid, start time and boot id. A
    recovering leader that finds an intent without it writes ``{"abandoned": true}`` there instead:
    both create the file with ``link`` (which fails when it exists), so either the supervisor
    recorded itself first and can be found, or it sees the pod abandoned and runs nothing;
``exit.json``
    written by the supervisor once every process of the pod is gone: the command's status and when.

Every file is written to a temporary file, fsynced and renamed (or linked), and the directory
fsynced, so a reader sees a whole record or none. The executor removes a pod's directory once the
loop has had its exit (at the next poll) or when it kills the pod itself (``close``); what is left
belongs to a pod whose exit nobody has read yet. Records of different pods may be created and removed
from several threads at once (a removal that empties a namespace's directory does not fail a creation).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuq.run.proctrack import EXIT_FILE, LEADER_FILE, Identity

INTENT_FILE = "intent.json"
_CREATE_TRIES = 5
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class Owner:
    """The executor that started (or adopted) a pod: its process and an id unique within that process."""

    process: Identity
    executor: str

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.process.pid,
            "start": self.process.start,
            "boot": self.process.boot,
            "executor": self.executor,
        }


@dataclass(frozen=True)
class Intent:
    """What the executor wrote before it started the pod."""

    key: str
    attempt: int
    token: str
    group: Path | None  # the pod's cgroup, or None (its supervisor's process tree holds it)
    owner: Owner | None
    log_path: str = ""
    sandboxed: bool = False  # bwrap runs it (its monitor is spared signals; 128 + N is signal N)


@dataclass(frozen=True)
class Exited:
    """The status the supervisor recorded (negative: killed by that signal) and when (epoch seconds)."""

    code: int
    time: float


ABANDONED = "abandoned"


class PodRecords:
    """The record directories under ``<workdir>/records``."""

    def __init__(self, workdir: Path) -> None:
        self.root = Path(workdir) / "records"

    def path(self, key: str) -> Path:
        namespace, _, rest = key.partition("/")
        return self.root / _safe(namespace) / _safe(rest)

    def create(self, intent: Intent) -> Path:
        """A fresh directory for ``intent.key`` holding only the intent (an older start's files removed).

        The directory appears with its intent already in it (made under a hidden name, then renamed):
        another executor sweeping the same records (Ray pod actors on one machine, or a shared work
        directory) never sees a record without an intent, which it would take for an abandoned one
        and remove while the pod starts."""
        directory = self.path(intent.key)
        shutil.rmtree(directory, ignore_errors=True)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)  # the server's alone: pods never read nor write a record
        staging = directory.parent / f".{directory.name}.{os.getpid()}.{threading.get_ident()}.tmp"
        for attempt in range(_CREATE_TRIES):
            directory.parent.mkdir(mode=0o700, exist_ok=True)
            shutil.rmtree(staging, ignore_errors=True)
            try:
                staging.mkdir(mode=0o700)
                write_atomic(staging / INTENT_FILE, _intent_json(intent))
                os.rename(staging, directory)
                break
            except FileNotFoundError:  # another thread's remove took the namespace's (empty) directory
                if attempt == _CREATE_TRIES - 1:
                    raise
        _sync_directory(directory.parent)
        return directory

    def intent(self, directory: Path) -> Intent | None:
        data = _read(directory / INTENT_FILE)
        if not isinstance(data, dict) or not isinstance(data.get("key"), str):
            return None
        owner = data.get("owner")
        group = data.get("group")
        return Intent(
            key=data["key"],
            attempt=int(data.get("attempt") or 0),
            token=str(data.get("token") or ""),
            group=Path(group) if isinstance(group, str) and group else None,
            owner=_owner(owner) if isinstance(owner, dict) else None,
            log_path=str(data.get("log") or ""),
            sandboxed=bool(data.get("sandboxed")),
        )

    def set_owner(self, directory: Path, intent: Intent, owner: Owner) -> Intent:
        """Rewrite the intent with a new owner (an executor that adopted the pod)."""
        updated = dataclasses.replace(intent, owner=owner)
        with contextlib.suppress(OSError):
            write_atomic(directory / INTENT_FILE, _intent_json(updated))
        return updated

    def leader(self, directory: Path) -> Identity | str | None:
        """The supervisor's identity, :data:`ABANDONED`, or None (not recorded yet, or never)."""
        data = _read(directory / LEADER_FILE)
        if not isinstance(data, dict):
            return None
        if data.get(ABANDONED):
            return ABANDONED
        try:
            return Identity(int(data["pid"]), int(data["start"]), str(data.get("boot") or ""))
        except (KeyError, TypeError, ValueError):
            return None

    def abandon(self, directory: Path) -> bool:
        """Mark a pod whose supervisor has not recorded itself as abandoned; False when it had (it runs)."""
        try:
            link_atomic(directory / LEADER_FILE, {ABANDONED: True})
        except FileExistsError:
            return False
        except OSError:
            return True  # no directory: nothing can start there either
        return True

    def exited(self, directory: Path) -> Exited | None:
        data = _read(directory / EXIT_FILE)
        if not isinstance(data, dict):
            return None
        try:
            return Exited(int(data["code"]), float(data["time"]))
        except (KeyError, TypeError, ValueError):
            return None

    def remove(self, directory: Path, token: str | None = None, owner: str | None = None) -> None:
        """Remove the directory; only if it still records the start ``token`` and is still owned by the
        executor ``owner`` (not adopted by another since), when they are given."""
        if token is not None or owner is not None:
            intent = self.intent(directory)
            if intent is None or (token is not None and intent.token != token):
                return
            if owner is not None and intent.owner is not None and intent.owner.executor != owner:
                return
        shutil.rmtree(directory, ignore_errors=True)
        with contextlib.suppress(OSError):
            directory.parent.rmdir()  # the namespace's, when it was the last

    def all(self) -> list[Path]:
        """Every record directory, in name order."""
        try:
            return sorted(
                d
                for ns in self.root.iterdir()
                if ns.is_dir()
                for d in ns.iterdir()
                if d.is_dir() and not d.name.startswith(".")  # a record being made (see create)
            )
        except OSError:
            return []


def write_atomic(path: Path, data: Any) -> None:
    """``data`` as JSON in ``path``: a temporary file written, fsynced, renamed, the directory fsynced."""
    temporary = _write_temporary(path, data)
    os.replace(temporary, path)
    _sync_directory(path.parent)


def link_atomic(path: Path, data: Any) -> None:
    """As :func:`write_atomic`, but FileExistsError (and nothing written) when ``path`` exists."""
    temporary = _write_temporary(path, data)
    try:
        os.link(temporary, path)
    finally:
        os.unlink(temporary)
    _sync_directory(path.parent)


def _write_temporary(path: Path, data: Any) -> Path:
    temporary = path.parent / f".{path.name}.{os.getpid()}.tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(descriptor, json.dumps(data).encode())
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    return temporary


def _sync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _intent_json(intent: Intent) -> dict[str, Any]:
    return {
        "key": intent.key,
        "attempt": intent.attempt,
        "token": intent.token,
        "group": str(intent.group) if intent.group else None,
        "owner": intent.owner.to_json() if intent.owner else None,
        "log": intent.log_path,
        "sandboxed": intent.sandboxed,
    }


def _owner(data: dict[str, Any]) -> Owner | None:
    try:
        process = Identity(int(data["pid"]), int(data["start"]), str(data.get("boot") or ""))
    except (KeyError, TypeError, ValueError):
        return None
    return Owner(process, str(data.get("executor") or ""))


def _safe(name: str) -> str:
    """A path component for ``name``: unsafe characters replaced, never ``.`` or ``..``."""
    cleaned = _UNSAFE.sub("_", name)
    return "_" + cleaned if cleaned.strip(".") == "" else cleaned
