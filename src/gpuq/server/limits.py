"""What one user may cost the server: request bodies, concurrent watches.

Each limit has a ``gpuq serve`` option (docs/serve.md, "Limits"); :class:`Limits` holds them and
:func:`gpuq.server.app.create_app` installs the ASGI middleware of this module:

* :class:`BodyLimit`: a body whose ``Content-Length`` exceeds the limit is a 413 before a byte of it is
  read; a body without one (chunked) or longer than it says is counted as it streams in and refused
  (413) at the first chunk past the limit, so the server never holds more than the limit and a chunk.

The watch cap lives with the change feed (:mod:`gpuq.server.watch`).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuq.server.errors import ApiError

SERVICES_PREFIX = "/services/"


@dataclass(frozen=True)
class Limits:
    """The server's limits (``gpuq serve``'s options)."""

    max_body_bytes: int = 4 << 20
    """Largest request body of the API and the dashboard (manifests): 413 beyond."""
    service_max_body_bytes: int = 64 << 20
    """Largest request body of service traffic (``/services/...``: prompts, images)."""
    max_watches_per_user: int = 16
    """Concurrent long-poll watches of one user: 429 beyond; 0: no limit."""
    watch_poll_s: float = 0.1
    """How often the one change feed of the process reads the store's version while anyone watches."""

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1 or self.service_max_body_bytes < 1:
            raise ValueError("body limits must be at least one byte")
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


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None
