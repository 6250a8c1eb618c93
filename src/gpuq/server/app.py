"""The REST API of ``gpuq serve``: one FastAPI app over one store (design note 0003; docs/serve.md).

Every replica serves it; only the leader's control loop acts on what it writes. Paths
live under ``/apis/gpuq.dev/v1alpha1``; ``/healthz`` and ``/openapi.json`` need no token.
The same process serves ``/metrics`` (Prometheus text; any user's token unless
``metrics_open``) and the web dashboard at ``/`` (``gpuq.server.dashboard``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from gpuq import __version__
from gpuq.core.nodes import Node
from gpuq.run.serving.router import Router
from gpuq.run.store import Store, UserRecord
from gpuq.server import dashboard, views
from gpuq.server.apply import StoredConfiguration
from gpuq.server.auth import NODE, authorize, bearer_user
from gpuq.server.docs import install_docs
from gpuq.server.errors import install_handlers, not_found
from gpuq.server.forecasts import ForecastCache
from gpuq.server.kinds import API_PREFIX
from gpuq.server.limits import BodyLimit, Limits, RateLimit
from gpuq.server.routes_forecast import router as forecast_router
from gpuq.server.routes_objects import router as objects_router
from gpuq.server.routes_services import ServiceViews, proxy_router
from gpuq.server.routes_services import router as services_router
from gpuq.server.routes_users import router as users_router
from gpuq.server.routes_workloads import router as workloads_router
from gpuq.server.runner import FairSharingStatus, QueueUsage
from gpuq.server.watch import ChangeFeed

LoopStatus = Callable[[], Mapping[str, Any]]
User = Annotated[UserRecord, Depends(bearer_user)]
cluster_router = APIRouter(tags=["cluster"])


def create_app(
    store: Store,
    *,
    loop_status: LoopStatus | None = None,
    nodes: Sequence[Node] = (),
    workdir: Path | None = None,
    queue_usage: Callable[[], QueueUsage | None] | None = None,
    fair_sharing: Callable[[], FairSharingStatus | None] | None = None,
    metrics: Callable[[], bytes] | None = None,
    metrics_open: bool = False,
    forecasts: ForecastCache | None = None,
    router: Router | None = None,
    services: ServiceViews | None = None,
    limits: Limits | None = None,
) -> FastAPI:
    """The API over ``store``.

    ``loop_status`` reports this replica's control-loop thread (leader or not) at
    ``/status``; ``nodes`` are the live nodes, shown at ``/nodes`` and used to refuse
    pods no node could hold; ``workdir`` is where the loop writes pod logs.
    ``queue_usage`` gives the dashboard the leader's quota usage (``LoopRunner.queue_usage``);
    ``fair_sharing`` the LocalQueues' Admission Fair Sharing status (``LoopRunner.fair_sharing``);
    ``metrics`` renders ``/metrics`` (absent: 404), open to anyone when ``metrics_open``.
    ``forecasts`` gives workloads their ETAs and serves ``/forecast`` (absent: none is made).
    ``router`` serves live services' traffic at ``/services/<ns>/<name>/...`` and ``services`` lists
    them (the leader's service controller; None on a follower) at ``/services``.
    ``limits``: what one request or user may cost (``gpuq.server.limits``; default :class:`Limits`()).
    """
    app = FastAPI(
        title="gpuq control plane",
        version=__version__,
        description="Kueue-style queues, quotas and GPU placement on live machines; see docs/serve.md.",
        docs_url=None,  # gpuq.server.docs serves /docs from the package, not from a CDN
        redoc_url=None,
    )
    install_docs(app)
    app.state.store = store
    app.state.stored_configuration = StoredConfiguration()
    app.state.loop_status = loop_status
    app.state.nodes = tuple(nodes)
    app.state.workdir = workdir
    app.state.queue_usage = queue_usage
    app.state.fair_sharing = fair_sharing
    app.state.forecasts = forecasts
    app.state.router = router
    app.state.services = services
    app.state.limits = limits = limits or Limits()
    app.state.watch_feed = ChangeFeed(
        store.resource_version, poll_s=limits.watch_poll_s, max_per_user=limits.max_watches_per_user
    )
    install_handlers(app)
    app.add_middleware(BodyLimit, limits=limits)
    app.add_middleware(RateLimit, limits=limits)  # outermost: a limited token costs nothing more

    @app.get("/healthz", tags=["cluster"], summary="Liveness: the process answers and the store is readable.")
    def healthz() -> dict[str, Any]:
        return {"ok": True, "resourceVersion": store.resource_version()}

    @app.get(
        "/metrics", tags=["cluster"], summary="Prometheus metrics: Kueue's queue metrics, DCGM GPU metrics."
    )
    def prometheus_metrics(request: Request) -> Response:
        if not metrics_open:
            bearer_user(request)  # any user: scrapers hold a token, like kube-state-metrics behind RBAC
        if metrics is None:
            raise not_found("metrics (this server was started without them)")
        return Response(metrics(), media_type=CONTENT_TYPE_PLAIN_0_0_4)

    app.include_router(dashboard.router)
    app.include_router(proxy_router)
    # Order matters: specific paths before the generic /{plural} routes of the objects router.
    app.include_router(cluster_router, prefix=API_PREFIX)
    app.include_router(workloads_router, prefix=API_PREFIX)
    app.include_router(forecast_router, prefix=API_PREFIX)
    app.include_router(services_router, prefix=API_PREFIX)
    app.include_router(users_router, prefix=API_PREFIX)
    app.include_router(objects_router, prefix=API_PREFIX)
    return app


@cluster_router.get("/whoami", summary="The user the token belongs to.")
def whoami(user: User) -> dict[str, Any]:
    return {"name": user.name, "roles": list(user.roles), "namespaces": list(user.namespaces)}


@cluster_router.get("/status", summary="This replica: leader or follower, the loop's last step and problems.")
def status(request: Request, user: User) -> dict[str, Any]:
    report: LoopStatus | None = request.app.state.loop_status
    return {"loop": dict(report()) if report is not None else None}


@cluster_router.get("/nodes", summary="The live nodes: GPUs, allocatable resources, devices in use.")
def list_nodes(request: Request, user: User) -> dict[str, Any]:
    authorize(user, "list", NODE)
    store: Store = request.app.state.store
    pods = store.running_pods()
    return {"items": [views.node_view(n, pods) for n in request.app.state.nodes]}


@cluster_router.get("/nodes/{name}", summary="One live node.")
def get_node(request: Request, name: str, user: User) -> dict[str, Any]:
    authorize(user, "get", NODE)
    store: Store = request.app.state.store
    for node in request.app.state.nodes:
        if node.name == name:
            return views.node_view(node, store.running_pods())
    raise not_found(f"node {name}")
