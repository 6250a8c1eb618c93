"""Live services: their state under the API prefix, and their traffic at ``/services/<ns>/<name>/...``.

- ``GET /apis/gpuq.dev/v1alpha1/services`` and ``.../namespaces/<ns>/services[/<name>]``: each
  service (a revision of a canary is its own entry) with desired and per-state replica counts,
  each replica (a pending one with Kueue's reason for waiting), the router's counters, the last
  rescale. They come from the leader's service controller; a follower answers
  ``available: false``.
- ``/services/<ns>/<name>/<path>`` (any method): the request is routed to the service's replicas
  by :class:`gpuq.run.serving.router.Router` with ``<path>`` unchanged (``/v1/chat/completions``...). It
  takes the same bearer token as the API, so an OpenAI client's API key is a gpuq token; a member
  may call the services of its namespaces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from gpuq.run.serving.router import RouteError, Router
from gpuq.run.store import Store, UserRecord
from gpuq.server.auth import authorize, bearer_user, readable_namespaces
from gpuq.server.errors import ApiError, not_found
from gpuq.server.kinds import WORKLOAD

ServiceViews = Callable[[], list[dict[str, Any]] | None]
router = APIRouter(tags=["services"])
proxy_router = APIRouter(tags=["services"])
User = Annotated[UserRecord, Depends(bearer_user)]
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def service_views(request: Request) -> list[dict[str, Any]] | None:
    """The leader's services with each pending replica's reason from the store; None on a follower."""
    source: ServiceViews | None = getattr(request.app.state, "services", None)
    found = source() if source is not None else None
    if found is None:
        return None
    store: Store = request.app.state.store
    reasons = {(w.namespace, w.name): w.message for w in store.list_workloads(states=("Pending",))}
    for service in found:
        for replica in service["replicaList"]:
            if replica["state"] == "Pending":
                replica["reason"] = reasons.get((service["namespace"], replica["name"]), "")
    return found


def _listing(request: Request, user: UserRecord, namespace: str | None) -> dict[str, Any]:
    found = service_views(request)
    if found is None:
        return {
            "available": False,
            "reason": "this replica runs no control loop (not the leader)",
            "items": [],
        }
    readable = readable_namespaces(user)
    items = [
        s
        for s in found
        if (namespace is None or s["namespace"] == namespace)
        and (readable is None or s["namespace"] in readable)
    ]
    return {"available": True, "items": items}


@router.get("/services", summary="Live services of every namespace the user may read.")
def list_services(request: Request, user: User) -> dict[str, Any]:
    return _listing(request, user, None)


@router.get("/namespaces/{namespace}/services", summary="Live services of one namespace.")
def list_namespace_services(request: Request, namespace: str, user: User) -> dict[str, Any]:
    authorize(user, "list", WORKLOAD, namespace, shown="services")
    return _listing(request, user, namespace)


@router.get("/namespaces/{namespace}/services/{name}", summary="One live service (or canary revision).")
def get_service(request: Request, namespace: str, name: str, user: User) -> dict[str, Any]:
    authorize(user, "get", WORKLOAD, namespace, shown="service")
    for service in _listing(request, user, namespace)["items"]:
        if service["name"] == name:
            return dict(service)
    raise not_found(f"service {namespace}/{name}")


async def proxy(request: Request, namespace: str, name: str, path: str) -> StreamingResponse:
    user = await run_in_threadpool(bearer_user, request)
    authorize(user, "get", WORKLOAD, namespace, shown="service")
    routing: Router | None = getattr(request.app.state, "router", None)
    if routing is None:
        raise not_found("services (this server routes none)")
    target = "/" + path + (f"?{request.url.query}" if request.url.query else "")
    body = await request.body()
    try:
        answer = await routing.handle(
            f"{namespace}/{name}", request.method, target, request.headers.items(), body
        )
    except RouteError as error:
        raise ApiError(error.status, str(error)) from error
    headers = {k: v for k, v in answer.headers if k.lower() != "content-length"}
    media = headers.pop("content-type", None)
    return StreamingResponse(answer.body, status_code=answer.status, headers=headers, media_type=media)


for _method in METHODS:  # one route per method: OpenAPI operation ids must be unique
    proxy_router.add_api_route(
        "/services/{namespace}/{name}/{path:path}",
        proxy,
        methods=[_method],
        operation_id=f"service_traffic_{_method.lower()}",
        summary="A service's traffic: routed to its ready replicas (OpenAI paths pass through unchanged).",
    )
