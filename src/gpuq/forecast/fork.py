"""Run one computation in a forked child while the parent does another: the forecast's two runs.

Why fork: the child starts with the parent's memory (the snapshot, the estimates) at no cost, so
nothing is pickled but the result. A forked child of a threaded process holds only the forking
thread, so the work done there must be plain computation on data already in memory (no locks
other threads may hold, no I/O but the result pipe); the simulation is exactly that. The child
leaves with ``os._exit`` (no atexit handlers, no flushing of the parent's buffers). Where fork is
missing, or the child fails, the caller gets None and computes in-process instead.
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


def can_fork() -> bool:
    """Fork exists and there is more than one CPU to run the child on."""
    return hasattr(os, "fork") and (os.cpu_count() or 1) > 1 and sys.platform != "emscripten"


class Forked(Generic[T]):
    """``compute`` running in a child process; :meth:`join` waits for its result."""

    def __init__(self, compute: Callable[[], T]) -> None:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            status = 1
            try:
                os.close(read)
                with os.fdopen(write, "wb") as out:
                    pickle.dump(compute(), out, protocol=pickle.HIGHEST_PROTOCOL)
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        self._pid = pid
        self._read = read

    def join(self) -> T | None:
        """The child's result, or None when it failed (its exit status was not 0)."""
        with os.fdopen(self._read, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(self._pid, 0)
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0 or not data:
            return None
        result: T = pickle.loads(data)
        return result
