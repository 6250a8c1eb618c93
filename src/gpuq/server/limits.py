"""What one user may cost the server: request bodies, requests per token, concurrent watches.

Each limit has a ``gpuq serve`` option (docs/serve.md, "Limits"); :class:`Limits` holds them and
:func:`gpuq.server.app.create_app` installs the two ASGI middlewares of this module:

* :class:`RateLimit` (outermost): a token bucket per bearer token (the ``Authorization`` header or the
  dashboard's cookie), refilled at ``rate_per_s`` up to ``rate_burst``; an empty bucket is a 429 with
  ``Retry-After`` before anything else runs (no token lookup, no body read). Service traffic at
  ``/services/`` has its own buckets (``service_rate_per_s``; off by default: the router bounds it).
* :class:`BodyLimit`: a body whose ``Content-Length`` exceeds the limit is a 413 before a byte of it is
  read; a body without one (chunked) or longer than it says is counted as it streams in and refused
  (413) at the first chunk past the limit, so the server never holds more than the limit and a chunk.

The watch cap lives with the change feed (:mod:`gpuq.server.watch`).
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuq.server.dashboard import COOKIE
from gpuq.server.errors import ApiError

SERVICES_PREFIX = "/services/"
MAX_BUCKETS = 10_000
"""Buckets kept at most; the least recently used goes first (a bucket left alone that long is full)."""


@dataclass(frozen=True)
class Limits:
    """The server's limits (``gpuq serve``'s options); ``create_app``'s defaults keep rate limiting off
    (tests make many quick requests with one token), ``gpuq serve`` turns it on."""

    max_body_bytes: int = 4 << 20
    """Largest request body of the API and the dashboard (manifests): 413 beyond."""
    service_max_body_bytes: int = 64 << 20
    """Largest request body of service traffic (``/services/...``: prompts, images)."""
    rate_per_s: float = 0.0
    """API and dashboard requests per second per token, sustained; 0: no limit."""
    rate_burst: int = 100
    """Requests a token may make at once before the sustained rate applies."""
    service_rate_per_s: float = 0.0
    """Service traffic requests per second per token (its own buckets, same burst); 0: no limit."""
    max_watches_per_user: int = 16
    """Concurrent long-poll watches of one user: 429 beyond; 0: no limit."""
    watch_poll_s: float = 0.1
    """How often the one change feed of the process reads the store's version while anyone watches."""

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1 or self.service_max_body_bytes < 1:
            raise ValueError("body limits must be at least one byte")
        if self.rate_per_s < 0 or self.service_rate_per_s < 0 or self.rate_burst < 1:
            raise ValueError("rates must be >= 0 and the burst at least 1")
        if self.max_watches_per_user < 0 or self.watch_poll_s <= 0:
            raise ValueError("the watch cap must be >= 0 and the poll interval positive")


def refusal(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """An answer in the API's one error shape (``gpuq.server.errors``), sent by a middleware."""
    return JSONResponse(ApiError(status, message).body(), status_code=status, headers=headers)


# -- request bodies --------------------------------------------------------------------------------------


class BodyTooLarge(ApiError):
    """Raised by the counting ``receive`` of :class:`BodyLimit`; the API's handler answers it (413)."""

    def __init__(self, limit: int, service: bool) -> None:
        super().__init__(413, body_message(limit, service), headers={"Connection": "close"})


def body_message(limit: int, service: bool) -> str:
    option = "--service-max-body-size" if service else "--max-body-size"
    return f"the request body is larger than {limit} bytes, the most this server reads (gpuq serve {option})"


class BodyLimit:
    """Refuse request bodies past a limit (413) without ever holding more than the limit and a chunk."""

    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        service = str(scope.get("path", "")).startswith(SERVICES_PREFIX)
        limit = self.limits.service_max_body_bytes if service else self.limits.max_body_bytes
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                await refusal(400, f"bad Content-Length {declared!r}")(scope, receive, send)
                return
            if length > limit:  # refused before a byte of the body is read
                answer = refusal(413, body_message(limit, service), {"Connection": "close"})
                await answer(scope, receive, send)
                return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit, service)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge as error:  # read outside a route's error handling (a middleware, say)
            if started:
                raise
            answer = refusal(413, error.message, {"Connection": "close"})
            await answer(scope, receive, send)


# -- requests per token ----------------------------------------------------------------------------------


class TokenBuckets:
    """A token bucket per key: ``rate`` tokens a second up to ``burst``; thread-safe, at most
    :data:`MAX_BUCKETS` kept (the least recently used dropped: it would be full by now or soon)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Take one token for ``key``: 0.0 when granted, else the seconds until one is available."""
        now = self.clock()
        with self._lock:
            tokens, at = self._buckets.pop(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / self.rate
            self._buckets[key] = (tokens, now)
            while len(self._buckets) > MAX_BUCKETS:
                self._buckets.popitem(last=False)
            return wait


class RateLimit:
    """429 with ``Retry-After`` for a token whose bucket is empty (requests without a token pass: they
    are 401s, or need none)."""

    def __init__(self, app: ASGIApp, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.api = TokenBuckets(limits.rate_per_s, limits.rate_burst, clock) if limits.rate_per_s else None
        self.services = (
            TokenBuckets(limits.service_rate_per_s, limits.rate_burst, clock)
            if limits.service_rate_per_s
            else None
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        service = str(scope.get("path", "")).startswith(SERVICES_PREFIX)
        buckets = self.services if service else self.api
        token = request_token(scope) if buckets is not None else ""
        if buckets is not None and token:
            wait = buckets.take(hashlib.sha256(token.encode()).hexdigest())
            if wait > 0:
                option = "--service-rate-limit" if service else "--rate-limit / --rate-burst"
                message = (
                    f"too many requests with this token: at most {buckets.rate:g} a second after a burst of "
                    f"{buckets.burst:g} (gpuq serve {option}); retry in {wait:.2f} s"
                )
                headers = {"Retry-After": str(max(1, math.ceil(wait)))}
                await refusal(429, message, headers)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def request_token(scope: Scope) -> str:
    """The bearer token of a request (its ``Authorization`` header, else the dashboard's cookie); ''."""
    header = (_header(scope, b"authorization") or "").strip()
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    cookies = _header(scope, b"cookie")
    if cookies and COOKIE in cookies:
        try:
            morsel = SimpleCookie(cookies).get(COOKIE)
        except CookieError:
            return ""
        return morsel.value if morsel is not None else ""
    return ""


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None
