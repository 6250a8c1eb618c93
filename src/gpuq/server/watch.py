"""Long-poll watches: a list request with ``watch=true&resourceVersion=N`` waits for a change.

Every list answer carries the store's ``resourceVersion``, read *before* the list, so
a client that watches from it never misses a change (it may see one twice). The wait
returns as soon as ``store.resource_version()`` exceeds ``N``, or after
``timeoutSeconds`` (default 30, at most 300) with the list unchanged; the store is
polled every 0.1 s off the event loop, one primary-key read each time.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

from fastapi import Query, Request
from starlette.concurrency import run_in_threadpool

from gpuq.run.store import Store
from gpuq.server.errors import ApiError

POLL_S = 0.1
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 300.0


async def wait_for_change(store: Store, since: int, timeout_s: float, request: Request | None = None) -> int:
    """The store's version once it exceeds ``since``, or the current one after ``timeout_s``."""
    deadline = time.monotonic() + min(max(timeout_s, 0.0), MAX_TIMEOUT_S)
    while True:
        current: int = await run_in_threadpool(store.resource_version)
        if current > since or time.monotonic() >= deadline:
            return current
        if request is not None and await request.is_disconnected():
            return current
        await asyncio.sleep(POLL_S)


async def watch_gate(
    request: Request,
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
    return await wait_for_change(store, resource_version, timeout_s, request)
