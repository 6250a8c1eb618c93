"""Retention of finished workloads (``gpuq serve --finished-ttl``), in the spirit of a Job's
``ttlSecondsAfterFinished``: a workload that finished (Succeeded or Failed) more than the TTL ago is
deleted with its pods, conditions and events, then its logs and its pods' directories.

The leader runs :func:`clean_finished` periodically (``gpuq.server.runner``) with its own, fenced,
store: a replica that lost the lease deletes nothing, neither rows nor files. Each run is one store
transaction of a fixed number of statements for at most ``batch`` workloads
(:meth:`~gpuq.run.store.Store.delete_finished`), then the files of exactly those workloads:

- ``<workdir>/logs/<namespace>/<workload>/`` (every pod's log);
- ``<workdir>/pods/<namespace>/<workload>_<pod>`` (each pod's home and working directory; a
  workload's name has no ``_``, so the prefix ``<workload>_`` is its pods' alone).

Checkpoint directories (``<workdir>/checkpoints/...``) are kept: they are the job's output. Rows go
first: a directory that cannot be removed is logged and left behind (its workload is gone); nothing
else outside the workdir is ever touched.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpuq.run.store import Store
from gpuq.run.store.store import FINISHED_BATCH

_log = logging.getLogger("gpuq.retention")


@dataclass
class Cleanup:
    """What one run removed: workloads (namespace, name), directories, and the directories it could not."""

    workloads: list[tuple[str, str]] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def full(self) -> bool:
        """Whether the batch was full: more may be due, run again soon."""
        return len(self.workloads) >= FINISHED_BATCH


def clean_finished(
    store: Store,
    workdir: Path,
    ttl_s: float,
    *,
    now: float | None = None,
    batch: int = FINISHED_BATCH,
) -> Cleanup:
    """Delete the workloads that finished more than ``ttl_s`` before ``now`` (at most ``batch``, oldest
    first), then their log and pod directories under ``workdir``."""
    now = time.time() if now is None else now
    done = Cleanup(store.delete_finished(now - ttl_s, batch))
    root = workdir.resolve()
    for namespace, name in done.workloads:
        targets = [root / "logs" / namespace / name]
        pods = root / "pods" / namespace
        if pods.is_dir():
            targets += sorted(pods.glob(f"{_glob_escape(name)}_*"))
        for target in targets:
            _remove(target, root, done)
    if done.workloads:
        _log.info(
            "retention: deleted %d finished workload(s) and %d directories",
            len(done.workloads),
            len(done.removed),
        )
    return done


def _remove(target: Path, root: Path, done: Cleanup) -> None:
    """Remove ``target`` (a tree; a link itself, never what it points to) if it exists inside ``root``."""
    parent = target.parent.resolve()
    if (parent != root and root not in parent.parents) or not (target.exists() or target.is_symlink()):
        return
    try:
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()
    except OSError as error:
        done.failed.append(f"{target}: {error.strerror or error}")
        _log.warning("retention: cannot remove %s: %s", target, error)
        return
    done.removed.append(target)


def _glob_escape(name: str) -> str:
    """A workload name (a DNS subdomain: no glob characters) as a literal glob pattern, to be sure."""
    return "".join(f"[{c}]" if c in "*?[]" else c for c in name)
