"""Watches come from one shared change feed: N watches cost one store query per poll interval, not N,
and a user holds at most ``max_watches_per_user`` of them (429 beyond)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuq.server.kinds import API_PREFIX
from gpuq.server.limits import Limits
from gpuq.server.watch import ChangeFeed
from server.conftest import Plane, job, make_plane

POLL_S = 0.05


def plane_with(tmp_path: Path, limits: Limits) -> Plane:
    return make_plane(f"sqlite:///{tmp_path / 'gpuq.db'}", tmp_path / "work", limits=limits)


@pytest.fixture
def counted(tmp_path: Path) -> Iterator[tuple[Plane, list[float]]]:
    """A plane without a watch cap whose store records the time of every transaction it opens."""
    plane = plane_with(tmp_path, Limits(max_watches_per_user=0, watch_poll_s=POLL_S))
    opened: list[float] = []
    transaction, reading = plane.store.transaction, plane.store.reading

    def counting(*args: Any, **kwargs: Any) -> AbstractContextManager[Any]:
        opened.append(time.monotonic())
        return transaction(*args, **kwargs)

    def counting_reads() -> AbstractContextManager[Any]:
        opened.append(time.monotonic())
        return reading()

    plane.store.transaction = counting  # type: ignore[method-assign]
    plane.store.reading = counting_reads  # type: ignore[method-assign]
    yield plane, opened
    plane.store.close()


def watch(client: httpx.AsyncClient, token: str, version: int, timeout_s: float) -> Any:
    params = {"watch": "true", "resourceVersion": version, "timeoutSeconds": timeout_s}
    return client.get(f"{API_PREFIX}/workloads", params=params, headers={"Authorization": f"Bearer {token}"})


def run(plane: Plane, body: Callable[[httpx.AsyncClient], Any]) -> Any:
    """``body(client)`` in one event loop, the app served in process (many requests at once)."""

    async def main() -> Any:
        transport = httpx.ASGITransport(app=plane.client.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30) as client:
            return await body(client)

    return asyncio.run(main())


def test_n_watches_cost_one_query_per_poll_interval_not_n(counted: tuple[Plane, list[float]]) -> None:
    plane, opened = counted
    version = plane.store.resource_version()
    watches = 40

    async def body(client: httpx.AsyncClient) -> tuple[int, list[httpx.Response]]:
        waiting = [asyncio.ensure_future(watch(client, plane.team_a, version, 10)) for _ in range(watches)]
        await asyncio.sleep(0.5)  # every watch is waiting now
        start = time.monotonic()
        await asyncio.sleep(1.0)
        during = sum(1 for at in opened if start <= at < start + 1.0)
        plane.store.add_workload("team-a", "late", "q", "Job", job("late"), 0, time.time())
        return during, await asyncio.gather(*waiting)

    started = time.monotonic()
    during, answers = run(plane, body)
    assert time.monotonic() - started < 5, "the watches did not return on the change"
    polls = 1.0 / POLL_S
    assert during <= polls + 3, f"{during} store transactions in 1 s for {watches} watches"
    assert during >= polls / 4, "the feed did not poll while watched"
    assert {a.status_code for a in answers} == {200}
    assert all(a.json()["resourceVersion"] > version for a in answers)
    assert all([w["name"] for w in a.json()["items"]] == ["late"] for a in answers)


def test_a_user_holds_at_most_the_watch_cap_and_others_are_unaffected(tmp_path: Path) -> None:
    plane = plane_with(tmp_path, Limits(max_watches_per_user=2, watch_poll_s=POLL_S))
    version = plane.store.resource_version()

    async def body(client: httpx.AsyncClient) -> dict[str, Any]:
        held = [asyncio.ensure_future(watch(client, plane.team_a, version, 1.0)) for _ in range(2)]
        await asyncio.sleep(0.3)
        refused = await watch(client, plane.team_a, version, 1.0)
        other = await watch(client, plane.team_b, version, 0.1)  # bob's watches are his own
        plain = await client.get(
            f"{API_PREFIX}/workloads", headers={"Authorization": f"Bearer {plane.team_a}"}
        )
        ended = await asyncio.gather(*held)
        again = await watch(client, plane.team_a, version, 0.1)  # a slot is free again
        return {"refused": refused, "other": other, "plain": plain, "ended": ended, "again": again}

    try:
        answers = run(plane, body)
    finally:
        plane.store.close()
    refused = answers["refused"]
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["message"].startswith('user "alice" already holds 2 watches')
    assert "--max-watches-per-user" in refused.json()["message"]
    assert answers["other"].status_code == answers["plain"].status_code == answers["again"].status_code == 200
    assert [a.status_code for a in answers["ended"]] == [200, 200]


def test_the_feed_wakes_only_the_watches_a_version_answers_and_stops_when_idle() -> None:
    version = [5]
    reads: list[int] = []

    def read() -> int:
        reads.append(version[0])
        return version[0]

    feed = ChangeFeed(read, poll_s=0.02, idle_exit_s=0.2)

    async def body() -> tuple[int, int, float]:
        behind = asyncio.ensure_future(feed.wait(4, 5))  # already answered by version 5
        current = asyncio.ensure_future(feed.wait(5, 5))
        await asyncio.sleep(0.2)
        assert await behind == 5 and not current.done()
        version[0] = 6
        started = time.monotonic()
        woke = await current
        return woke, await feed.wait(6, 0.1), time.monotonic() - started

    woke, timed_out, latency = asyncio.run(body())
    assert (woke, timed_out) == (6, 6)
    assert latency < 1.0
    deadline = time.monotonic() + 5
    while feed._thread is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert feed._thread is None, "the feed's thread outlived its watches"
    polled = len(reads)
    time.sleep(0.2)
    assert len(reads) == polled, "an idle feed still reads the store"
