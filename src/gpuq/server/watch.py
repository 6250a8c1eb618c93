"""Long-poll watches: a list request with ``watch=true&resourceVersion=N`` waits for a change.

Every list answer carries the store's ``resourceVersion``, read *before* the list, so a client that
watches from it never misses a change (it may see one twice). A watch returns as soon as the store's
version exceeds ``N``, or after ``timeoutSeconds`` (default 30, at most 300) with the list unchanged.

Watches are served from one shared :class:`ChangeFeed` per process: while anyone watches, one thread
reads the store's version (one primary-key read) every ``poll_s`` and wakes, in memory, every watch
the new version answers, so N watches cost one query per poll interval, not N, and hold no thread
while they wait. The thread exits when no one has watched for a few seconds. A user holds at most
``max_per_user`` watches at once (429 beyond; ``gpuq serve --max-watches-per-user``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from gpuq.run.store import Store, UserRecord
from gpuq.server.auth import bearer_user
from gpuq.server.errors import ApiError

POLL_S = 0.1
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 300.0
DISCONNECT_CHECK_S = 1.0
"""How often a waiting watch asks whether its client went away (no store query)."""
IDLE_EXIT_S = 5.0
"""The feed's thread exits after this long without a watch (the next watch starts it again)."""

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Waiter:
    since: int
    loop: asyncio.AbstractEventLoop
    event: asyncio.Event = field(default_factory=asyncio.Event)
    version: int | None = None

    def wake(self, version: int) -> None:
        self.version = version
        with contextlib.suppress(RuntimeError):  # its event loop is closed: the request is gone
            self.loop.call_soon_threadsafe(self.event.set)


class ChangeFeed:
    """The store's version, polled by one thread while anyone watches, fanned out to the watches."""

    def __init__(
        self,
        read_version: Callable[[], int],
        *,
        poll_s: float = POLL_S,
        max_per_user: int = 0,
        idle_exit_s: float = IDLE_EXIT_S,
    ) -> None:
        self._read = read_version
        self.poll_s = poll_s
        self.max_per_user = max_per_user
        self.idle_exit_s = idle_exit_s
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._waiters: set[_Waiter] = set()
        self._thread: threading.Thread | None = None
        self._watches: dict[str, int] = {}
        self.latest: int | None = None
        """The version the last poll read (None before the first)."""
        self.polls = 0
        """Store reads made by the feed so far."""

    # -- the per-user cap --------------------------------------------------------------------------------

    def hold(self, user: str) -> None:
        """Count a watch of ``user``; 429 when it already holds :attr:`max_per_user`."""
        with self._lock:
            held = self._watches.get(user, 0)
            if self.max_per_user and held >= self.max_per_user:
                raise ApiError(
                    429,
                    f'user "{user}" already holds {held} watches, the most one user may hold at once '
                    "(gpuq serve --max-watches-per-user); let one end first",
                    headers={"Retry-After": "1"},
                )
            self._watches[user] = held + 1

    def release(self, user: str) -> None:
        with self._lock:
            held = self._watches.get(user, 0) - 1
            if held > 0:
                self._watches[user] = held
            else:
                self._watches.pop(user, None)

    def watches(self, user: str) -> int:
        with self._lock:
            return self._watches.get(user, 0)

    # -- waiting -----------------------------------------------------------------------------------------

    async def wait(
        self, since: int, timeout_s: float, disconnected: Callable[[], Awaitable[bool]] | None = None
    ) -> int:
        """The store's version once it exceeds ``since``, or the last one read after ``timeout_s``
        (or when ``disconnected()`` says the client left)."""
        loop = asyncio.get_running_loop()
        timeout_s = min(max(timeout_s, 0.0), MAX_TIMEOUT_S)
        waiter = _Waiter(since, loop)
        with self._lock:
            latest = self.latest
            if latest is not None and latest > since:
                return latest
            if timeout_s > 0:
                self._waiters.add(waiter)
                self._start()
        if timeout_s <= 0:
            current: int = await run_in_threadpool(self._read)
            return current
        deadline = loop.time() + timeout_s
        try:
            while not waiter.event.is_set():
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    await asyncio.wait_for(waiter.event.wait(), min(left, DISCONNECT_CHECK_S))
                except TimeoutError:
                    if disconnected is not None and await disconnected():
                        break
        finally:
            with self._lock:
                self._waiters.discard(waiter)
        if waiter.version is not None:
            return waiter.version
        if self.latest is not None:
            return self.latest
        version: int = await run_in_threadpool(self._read)
        return version

    # -- the poller --------------------------------------------------------------------------------------

    def _start(self) -> None:
        """Start the poller unless it runs (called with the lock held); wake it if it idles."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpuq-watch-feed", daemon=True)
            self._thread.start()
        self._wake.notify()

    def _run(self) -> None:
        failing = False
        while True:
            with self._lock:
                if not self._waiters:
                    self._wake.wait(self.idle_exit_s)
                    if not self._waiters:
                        self._thread = None
                        return
            started = time.monotonic()
            try:
                version = self._read()
            except Exception as error:  # the store is away for a moment: the watches time out meanwhile
                if not failing:
                    log.warning("watch feed: cannot read the store's version: %s", error)
                failing = True
            else:
                failing = False
                with self._lock:
                    self.polls += 1
                    self.latest = version
                    ready = [w for w in self._waiters if version > w.since]
                    self._waiters.difference_update(ready)
                for waiter in ready:
                    waiter.wake(version)
            time.sleep(max(0.0, self.poll_s - (time.monotonic() - started)))


def feed_of(request: Request) -> ChangeFeed:
    feed: ChangeFeed = request.app.state.watch_feed
    return feed


async def watch_gate(
    request: Request,
    user: Annotated[UserRecord, Depends(bearer_user)],
    watch: Annotated[bool, Query(description="Long-poll: wait until resourceVersion is exceeded.")] = False,
    resource_version: Annotated[
        int | None, Query(alias="resourceVersion", description="With watch=true: the version last seen.")
    ] = None,
    timeout_s: Annotated[
        float, Query(alias="timeoutSeconds", ge=0, le=MAX_TIMEOUT_S, description="Longest wait of a watch.")
    ] = DEFAULT_TIMEOUT_S,
) -> int:
    """A dependency of every watchable list: waits when asked to, then returns the version to report."""
    store: Store = request.app.state.store
    if not watch:
        version: int = await run_in_threadpool(store.resource_version)
        return version
    if resource_version is None:
        raise ApiError(400, "watch=true needs resourceVersion=N (the version of the last list)")
    feed = feed_of(request)
    feed.hold(user.name)
    try:
        return await feed.wait(resource_version, timeout_s, request.is_disconnected)
    finally:
        feed.release(user.name)
