"""The request router in front of each live service: canary split, balancing, hold from zero, metrics.

One :class:`Router` per ``gpuq serve`` process serves every service at
``/services/<namespace>/<name>/<path>`` on the API server (:mod:`gpuq.server.routes_services`); the
path after the prefix is passed through unchanged, so OpenAI clients use
``base_url=http://HOST:PORT/services/<ns>/<name>/v1``. The service controller
(:mod:`gpuq.run.serving.controller`) tells it each service's revisions and ready replicas; the router tells
the controller what traffic it sees. For one request (:meth:`Router.handle`):

1. choose the revision: smooth weighted round robin over the revisions' traffic percents (a
   KServe canary's ``100 - p`` / ``p``): deterministic, and every 100 requests split exactly;
2. while the revision has no ready replica, hold the request (at most ``max_held`` per revision,
   each for at most ``hold_timeout_s``; then 503). A held request is what wakes a service scaled
   to zero: the controller activates it at its next step (KEDA's activation, as KEDA's HTTP
   add-on or KServe's activator do);
3. send it to the ready replica with the fewest requests outstanding (ties: fewer served, then
   name); a replica that refuses the connection gets no request until the controller's next step
   says it is ready, and the request goes to another (three tries);
4. stream the answer back with ``x-gpuq-revision`` and ``x-gpuq-replica`` headers, and count it:
   requests by code, in flight per replica, held, latency from arrival to the last byte.

Thread-safety: the controller calls from the loop thread, requests run on the API server's event
loop; every access to the tables holds one lock, never across an ``await``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import httpx

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization"}
)
_HOLD_POLL_S = 0.02
_CONNECT_TRIES = 3


@dataclass
class Upstream:
    """One replica: its address and what the router has outstanding on it."""

    name: str
    url: str
    ready: bool = True  # False: draining, no new request
    in_flight: int = 0
    served: int = 0


@dataclass
class Revision:
    """One revision of a service (a :class:`~gpuq.api.serving.ServiceSpec`) and its counters."""

    key: str
    weight: int
    upstreams: dict[str, Upstream] = field(default_factory=dict)
    current: int = 0  # smooth weighted round robin
    arrived: int = 0
    held: int = 0
    hold_s_sum: float = 0.0
    hold_count: int = 0
    responses: dict[int, int] = field(default_factory=dict)
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    latency_sum_s: float = 0.0

    def ready(self) -> list[Upstream]:
        return [u for u in self.upstreams.values() if u.ready]


@dataclass(frozen=True)
class RevisionStats:
    """A copy of one revision's counters, for the controller's autoscaling and for ``/metrics``."""

    key: str
    arrived: int
    held: int
    in_flight: Mapping[str, int]
    hold_s_sum: float
    hold_count: int
    responses: Mapping[int, int]
    latency_buckets: tuple[int, ...]
    latency_sum_s: float

    @property
    def requests(self) -> int:
        return sum(self.responses.values())


@dataclass(frozen=True)
class ProxyResponse:
    status: int
    headers: list[tuple[str, str]]
    body: AsyncIterator[bytes]


class RouteError(Exception):
    """The request could not be routed: ``status`` (404, 503) and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


ClientFactory = Callable[[], httpx.AsyncClient]


def _default_client() -> httpx.AsyncClient:
    timeout = httpx.Timeout(connect=5.0, read=600.0, write=60.0, pool=60.0)
    return httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=1000))


class Router:
    """Routes requests to the replicas of live services (steps 1-4 of the module docstring)."""

    def __init__(
        self,
        *,
        hold_timeout_s: float = 120.0,
        max_held: int = 1000,
        client_factory: ClientFactory = _default_client,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hold_timeout_s, self.max_held = hold_timeout_s, max_held
        self._client_factory, self._clock = client_factory, clock
        self._lock = threading.Lock()
        self._routes: dict[str, list[Revision]] = {}  # traffic key (namespace/name) -> revisions
        self._revisions: dict[str, Revision] = {}
        self._clients: dict[int, httpx.AsyncClient] = {}

    # ------------------------------------------------------------------ the controller's side
    def set_route(self, traffic_key: str, weights: Sequence[tuple[str, int]]) -> None:
        """The revisions (key, traffic percent) answering ``traffic_key``; counters are kept."""
        with self._lock:
            revisions = []
            for key, weight in weights:
                revision = self._revisions.setdefault(key, Revision(key, weight))
                revision.weight = weight
                revisions.append(revision)
            self._routes[traffic_key] = revisions

    def remove_route(self, traffic_key: str) -> None:
        with self._lock:
            for revision in self._routes.pop(traffic_key, []):
                self._revisions.pop(revision.key, None)

    def routes(self) -> dict[str, list[str]]:
        with self._lock:
            return {k: [r.key for r in v] for k, v in self._routes.items()}

    def set_replicas(self, revision_key: str, ready: Mapping[str, str]) -> None:
        """Ready replicas (name -> base URL) of a revision; the others are drained: no new request goes
        to them, and they are forgotten once nothing is outstanding on them."""
        with self._lock:
            revision = self._revisions.get(revision_key)
            if revision is None:
                return
            for name, url in ready.items():
                upstream = revision.upstreams.setdefault(name, Upstream(name, url))
                upstream.url, upstream.ready = url, True
            for name, upstream in list(revision.upstreams.items()):
                if name not in ready:
                    upstream.ready = False
                    if upstream.in_flight == 0:
                        del revision.upstreams[name]

    def in_flight(self, revision_key: str, replica: str) -> int:
        with self._lock:
            revision = self._revisions.get(revision_key)
            upstream = revision.upstreams.get(replica) if revision is not None else None
            return upstream.in_flight if upstream is not None else 0

    def stats(self, revision_key: str) -> RevisionStats | None:
        with self._lock:
            r = self._revisions.get(revision_key)
            if r is None:
                return None
            return RevisionStats(
                r.key,
                r.arrived,
                r.held,
                {u.name: u.in_flight for u in r.upstreams.values()},
                r.hold_s_sum,
                r.hold_count,
                dict(r.responses),
                tuple(r.latency_buckets),
                r.latency_sum_s,
            )

    def all_stats(self) -> list[RevisionStats]:
        keys = sorted(self._revisions)
        return [s for s in (self.stats(k) for k in keys) if s is not None]

    # ------------------------------------------------------------------ requests
    async def handle(
        self, traffic_key: str, method: str, path: str, headers: Sequence[tuple[str, str]], body: bytes
    ) -> ProxyResponse:
        """Route one request (steps 1-4); :class:`RouteError` when it cannot be routed."""
        arrived = self._clock()
        revision = self._choose_revision(traffic_key)
        forward = [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP | {"host", "authorization"}]
        for attempt in range(_CONNECT_TRIES):
            upstream = await self._acquire(revision, arrived, count=attempt == 0)
            request = self._client().build_request(method, upstream.url + path, headers=forward, content=body)
            try:
                response = await self._client().send(request, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout) as error:
                with self._lock:
                    upstream.ready = False  # until the controller's next step says otherwise
                self._release(revision, upstream, None, arrived)
                if attempt + 1 == _CONNECT_TRIES:
                    self._count(revision, 502, arrived)
                    message = f"replica {upstream.name} of {revision.key} refused the connection"
                    raise RouteError(502, message) from error
                continue
            except BaseException:
                self._release(revision, upstream, 502, arrived)
                raise
            out = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in HOP_BY_HOP]
            out += [("x-gpuq-revision", revision.key.split("/", 1)[1]), ("x-gpuq-replica", upstream.name)]
            return ProxyResponse(response.status_code, out, self._body(revision, upstream, response, arrived))
        raise AssertionError("unreachable")

    def _choose_revision(self, traffic_key: str) -> Revision:
        """Step 1: smooth weighted round robin (nginx's), ties to the first revision."""
        with self._lock:
            revisions = self._routes.get(traffic_key)
            if not revisions:
                raise RouteError(404, f"no service {traffic_key} is served here")
            weighted = [r for r in revisions if r.weight > 0] or revisions[:1]
            total = sum(r.weight for r in weighted)
            for r in weighted:
                r.current += r.weight
            chosen = max(weighted, key=lambda r: r.current)
            chosen.current -= total
            chosen.arrived += 1
            return chosen

    async def _acquire(self, revision: Revision, arrived: float, *, count: bool) -> Upstream:
        """Steps 2 and 3: the least loaded ready replica, holding the request while there is none."""
        held = False
        try:
            while True:
                with self._lock:
                    ready = revision.ready()
                    if ready:
                        upstream = min(ready, key=lambda u: (u.in_flight, u.served, u.name))
                        upstream.in_flight += 1
                        if held:
                            revision.hold_s_sum += self._clock() - arrived
                            revision.hold_count += 1
                        return upstream
                    if not held:
                        if revision.held >= self.max_held:
                            self._count_locked(revision, 503, arrived)
                            raise RouteError(503, f"{revision.key}: {self.max_held} requests already wait")
                        revision.held += 1
                        held = True
                if self._clock() - arrived >= self.hold_timeout_s:
                    self._count(revision, 503, arrived)
                    raise RouteError(
                        503, f"{revision.key}: no replica became ready within {self.hold_timeout_s:g}s"
                    )
                await asyncio.sleep(_HOLD_POLL_S)
        finally:
            if held:
                with self._lock:
                    revision.held -= 1

    async def _body(
        self, revision: Revision, upstream: Upstream, response: httpx.Response, arrived: float
    ) -> AsyncIterator[bytes]:
        status = response.status_code
        try:
            if response.is_stream_consumed:  # a body given whole (an in-memory transport)
                yield response.content
            else:
                async for chunk in response.aiter_raw():
                    yield chunk
        except BaseException:
            status = 502
            raise
        finally:
            await response.aclose()
            self._release(revision, upstream, status, arrived)

    def _release(self, revision: Revision, upstream: Upstream, status: int | None, arrived: float) -> None:
        with self._lock:
            upstream.in_flight -= 1
            if not upstream.ready and upstream.in_flight == 0:
                revision.upstreams.pop(upstream.name, None)
            if status is not None:
                upstream.served += 1
                self._count_locked(revision, status, arrived)

    def _count(self, revision: Revision, status: int, arrived: float) -> None:
        with self._lock:
            self._count_locked(revision, status, arrived)

    def _count_locked(self, revision: Revision, status: int, arrived: float) -> None:
        seconds = max(0.0, self._clock() - arrived)
        revision.responses[status] = revision.responses.get(status, 0) + 1
        revision.latency_sum_s += seconds
        bucket = next((i for i, b in enumerate(LATENCY_BUCKETS_S) if seconds <= b), len(LATENCY_BUCKETS_S))
        revision.latency_buckets[bucket] += 1

    def _client(self) -> httpx.AsyncClient:
        """One client per event loop (a connection pool belongs to the loop that opened it)."""
        loop_id = id(asyncio.get_running_loop())
        client = self._clients.get(loop_id)
        if client is None:
            client = self._clients[loop_id] = self._client_factory()
        return client
