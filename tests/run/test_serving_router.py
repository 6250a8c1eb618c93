"""The router on its own: canary split, least outstanding requests, hold and release from zero, timeouts.

Replicas are an ``httpx.MockTransport`` (no sockets); each test runs in its own event loop.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable

import httpx
import pytest

from gpuq.run.serving.router import RouteError, Router

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


async def _ok(request: httpx.Request) -> httpx.Response:
    target = {"port": request.url.port, "path": request.url.path, "query": request.url.query.decode()}
    return httpx.Response(200, json=target)


def router(handler: Handler = _ok, **options: float) -> Router:
    return Router(client_factory=lambda: httpx.AsyncClient(transport=httpx.MockTransport(handler)), **options)  # type: ignore[arg-type]


async def call(
    r: Router, key: str = "ns/chat", path: str = "/v1/chat/completions"
) -> tuple[int, dict[str, str], bytes]:
    answer = await r.handle(key, "POST", path, [("content-type", "application/json")], b"{}")
    body = b"".join([chunk async for chunk in answer.body])
    return answer.status, dict(answer.headers), body


def test_canary_gets_exactly_its_percent_in_a_deterministic_order() -> None:
    async def run() -> list[str]:
        r = router()
        r.set_route("ns/chat", [("ns/chat", 75), ("ns/chat-canary", 25)])
        r.set_replicas("ns/chat", {"chat-0": "http://127.0.0.1:1"})
        r.set_replicas("ns/chat-canary", {"chat-canary-0": "http://127.0.0.1:2"})
        return [(await call(r))[1]["x-gpuq-revision"] for _ in range(100)]

    first, second = asyncio.run(run()), asyncio.run(run())
    assert Counter(first) == {"chat": 75, "chat-canary": 25}
    assert first == second
    assert first[:4] == ["chat", "chat", "chat-canary", "chat"]  # smooth weighted round robin


def test_paths_pass_through_unchanged_with_the_query() -> None:
    async def run() -> bytes:
        r = router()
        r.set_route("ns/embed", [("ns/embed", 100)])
        r.set_replicas("ns/embed", {"embed-0": "http://127.0.0.1:9"})
        return (await call(r, "ns/embed", "/v1/embeddings?x=1"))[2]

    assert json.loads(asyncio.run(run())) == {"port": 9, "path": "/v1/embeddings", "query": "x=1"}


def test_a_new_request_goes_to_the_replica_with_the_fewest_outstanding() -> None:
    release = asyncio.Event()

    async def slow_on_port_1(request: httpx.Request) -> httpx.Response:
        if request.url.port == 1:
            await release.wait()
        return await _ok(request)

    async def run() -> list[str]:
        r = router(slow_on_port_1)
        r.set_route("ns/chat", [("ns/chat", 100)])
        r.set_replicas("ns/chat", {"a": "http://127.0.0.1:1", "b": "http://127.0.0.1:2"})
        stuck = asyncio.create_task(call(r))  # ties go by name: "a", which then holds it
        while r.in_flight("ns/chat", "a") == 0:
            await asyncio.sleep(0.01)
        replicas = [(await call(r))[1]["x-gpuq-replica"] for _ in range(3)]
        release.set()
        await stuck
        return replicas

    assert asyncio.run(run()) == ["b", "b", "b"]


def test_requests_are_held_while_no_replica_is_ready_and_released_when_one_is() -> None:
    async def run() -> tuple[int, int, list[int]]:
        r = router()
        r.set_route("ns/embed", [("ns/embed", 100)])
        tasks = [asyncio.create_task(call(r, "ns/embed")) for _ in range(5)]
        for _ in range(500):
            stats = r.stats("ns/embed")
            if stats is not None and stats.held == 5:
                break
            await asyncio.sleep(0.01)
        held = r.stats("ns/embed").held  # type: ignore[union-attr]
        r.set_replicas("ns/embed", {"embed-0": "http://127.0.0.1:3"})
        codes = [status for status, _, _ in await asyncio.gather(*tasks)]
        after = r.stats("ns/embed")
        assert after is not None
        return held, after.hold_count, codes

    held, released, codes = asyncio.run(run())
    assert (held, released, codes) == (5, 5, [200] * 5)


def test_a_held_request_times_out_with_a_503_and_is_counted() -> None:
    async def run() -> tuple[int, dict[int, int], int]:
        r = router(hold_timeout_s=0.2)
        r.set_route("ns/embed", [("ns/embed", 100)])
        with pytest.raises(RouteError) as caught:
            await call(r, "ns/embed")
        stats = r.stats("ns/embed")
        assert stats is not None
        return caught.value.status, dict(stats.responses), stats.held

    assert asyncio.run(run()) == (503, {503: 1}, 0)


def test_the_hold_queue_is_bounded() -> None:
    async def run() -> int:
        r = router(hold_timeout_s=30, max_held=1)
        r.set_route("ns/embed", [("ns/embed", 100)])
        first = asyncio.create_task(call(r, "ns/embed"))
        while r.stats("ns/embed").held == 0:  # type: ignore[union-attr]
            await asyncio.sleep(0.01)
        with pytest.raises(RouteError) as caught:
            await call(r, "ns/embed")
        first.cancel()
        return caught.value.status

    assert asyncio.run(run()) == 503


def test_an_unknown_service_is_a_404() -> None:
    with pytest.raises(RouteError) as caught:
        asyncio.run(call(router(), "ns/nope"))
    assert caught.value.status == 404


def test_a_replica_refusing_connections_is_skipped() -> None:
    async def refuse_port_1(request: httpx.Request) -> httpx.Response:
        if request.url.port == 1:
            raise httpx.ConnectError("refused", request=request)
        return await _ok(request)

    async def run() -> tuple[int, str]:
        r = router(refuse_port_1)
        r.set_route("ns/chat", [("ns/chat", 100)])
        r.set_replicas("ns/chat", {"a": "http://127.0.0.1:1", "b": "http://127.0.0.1:2"})
        status, headers, _ = await call(r)
        return status, headers["x-gpuq-replica"]

    assert asyncio.run(run()) == (200, "b")


def test_a_drained_replica_gets_no_new_request_and_is_forgotten_when_idle() -> None:
    async def run() -> tuple[str, int]:
        r = router()
        r.set_route("ns/chat", [("ns/chat", 100)])
        r.set_replicas("ns/chat", {"a": "http://127.0.0.1:1", "b": "http://127.0.0.1:2"})
        r.set_replicas("ns/chat", {"b": "http://127.0.0.1:2"})
        _, headers, _ = await call(r)
        stats = r.stats("ns/chat")
        assert stats is not None
        return headers["x-gpuq-replica"], len(stats.in_flight)

    assert asyncio.run(run()) == ("b", 1)
