"""``gpuq serve`` (the API, leader election and the control loop in one process) and ``gpuq users``.

The store's schema is migrated at start; the first start creates an admin and prints
its token once (also written to the context file); ``gpuq users add`` creates members
against the store directly, so it works before, during and without a running server.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpuq.core.placement.scoring import CHOOSERS
from gpuq.forecast.defaults import DEFAULT_EXACT_STARTS
from gpuq.snapshot.runtimes import EstimatorSettings

if TYPE_CHECKING:
    from gpuq.core.nodes import Node
    from gpuq.run.gpus import GPUDevice
    from gpuq.run.loop import ControlLoop
    from gpuq.run.sandbox import Isolation
    from gpuq.run.serving.router import Router
    from gpuq.run.store import Store
    from gpuq.run.xid import XidWatcher
    from gpuq.server.limits import Limits
    from gpuq.server.runner import GpuMonitor

ESTIMATES = EstimatorSettings()  # the runtime estimator's defaults, shown by --help
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
users_app = typer.Typer(
    help="API users and their tokens (run against the store directly).", no_args_is_help=True
)

DatabaseOption = Annotated[
    str | None,
    typer.Option(
        "--database", help="Store URL: sqlite:///path.db or postgresql+psycopg://... (default ~/.gpuq)."
    ),
]


def _fail(message: str) -> typer.Exit:
    err.print(f"error: {message}", style="red", highlight=False, markup=False)
    return typer.Exit(1)


def _open_store(database: str | None) -> Store:
    from gpuq.run.store import Store, default_url

    try:
        store = Store(database or default_url())
        store.migrate()
    except Exception as error:
        raise _fail(f"cannot open the store {database or default_url()}: {error}") from error
    return store


def serve(
    database: DatabaseOption = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")] = 8470,
    workdir: Annotated[
        Path, typer.Option("--workdir", help="Pods' logs, working and checkpoint directories.")
    ] = Path("~/.gpuq/work"),
    gpus: Annotated[
        int | None, typer.Option("--gpus", min=1, help="Virtual GPUs instead of discovery.")
    ] = None,
    gpu_model: Annotated[
        str | None, typer.Option("--gpu-model", help="Catalogue model of the virtual GPUs (A100-80GB...).")
    ] = None,
    policy: Annotated[
        str, typer.Option("--policy", help=f"Placement scoring policy: {', '.join(sorted(CHOOSERS))}.")
    ] = "binpack",
    identity: Annotated[
        str | None, typer.Option("--identity", help="This replica's name in leader election (host:pid).")
    ] = None,
    admin_token: Annotated[
        str | None, typer.Option("--admin-token", envvar="GPUQ_ADMIN_TOKEN", help="Make this an admin token.")
    ] = None,
    lease_seconds: Annotated[
        float, typer.Option("--lease-seconds", min=0.5, help="Leader lease: takeover within about 4/3 of it.")
    ] = 5.0,
    cpus: Annotated[
        str | None,
        typer.Option(
            "--cpus", help="Declare the node's CPUs (a quantity: 600, 1500m); default: this machine's."
        ),
    ] = None,
    memory: Annotated[
        str | None,
        typer.Option(
            "--memory", help="Declare the node's memory (a quantity: 64Gi); default: this machine's."
        ),
    ] = None,
    pods: Annotated[
        int, typer.Option("--pods", min=1, help="The node's pod capacity (the kubelet's 110).")
    ] = 110,
    idle_threshold_minutes: Annotated[
        float,
        typer.Option(
            "--idle-threshold-minutes", min=0.0, help="Record a GPUIdle event for a GPU idle this long."
        ),
    ] = 30.0,
    metrics_open: Annotated[
        bool,
        typer.Option("--metrics-open", help="Serve /metrics without a token (default: any user's token)."),
    ] = False,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            help="Run pods on a Ray cluster (an address: its alive nodes are the nodes; or 'local' to "
            "start one for this node), not as local processes.",
        ),
    ] = None,
    eta_low_quantile: Annotated[
        float, typer.Option("--eta-low-quantile", min=0.0, max=1.0, help="ETAs: past runtimes' low quantile.")
    ] = ESTIMATES.low,
    eta_high_quantile: Annotated[
        float,
        typer.Option("--eta-high-quantile", min=0.0, max=1.0, help="ETAs: past runtimes' high quantile."),
    ] = ESTIMATES.high,
    eta_default_runtime: Annotated[
        str,
        typer.Option(
            "--eta-default-runtime",
            help="ETAs: the runtime of a job with no declaration nor history (1h, 30m).",
        ),
    ] = "1h",
    eta_exact_starts: Annotated[
        int,
        typer.Option(
            "--eta-exact-starts",
            min=0,
            help="ETAs: admissions simulated exactly before a deep queue goes on by quota alone "
            "(0: no limit).",
        ),
    ] = DEFAULT_EXACT_STARTS,
    hpa_sync_period: Annotated[
        int,
        typer.Option(
            "--hpa-sync-period",
            min=1,
            help="Services: seconds between autoscaler syncs (the HPA controller's sync period).",
        ),
    ] = 15,
    service_hold_timeout: Annotated[
        float,
        typer.Option(
            "--service-hold-timeout",
            min=0.1,
            help="Services: seconds a request waits for a ready replica (scale from zero) before a 503.",
        ),
    ] = 120.0,
    sandbox: Annotated[
        str,
        typer.Option(
            "--sandbox",
            help="Pod isolation: bwrap (a private filesystem view and a user per namespace), user (a user "
            "per namespace only), none (pods run as the server); auto: bwrap where it works, else user.",
        ),
    ] = "auto",
    pod_user: Annotated[
        list[str] | None,
        typer.Option(
            "--pod-user",
            help="NAMESPACE=USER (a name, uid or uid:gid): run that namespace's pods as USER instead of "
            "the system user gpuq-NAMESPACE created on demand. Repeatable.",
        ),
    ] = None,
    pod_expose: Annotated[
        list[Path] | None,
        typer.Option(
            "--pod-expose",
            help="A path pods see read-only though it lies in a hidden directory (a toolchain in the "
            "server's home). Repeatable.",
        ),
    ] = None,
    pod_bind: Annotated[
        list[Path] | None,
        typer.Option(
            "--pod-bind",
            help="A directory every pod may write (shared data or scratch; its own modes still apply). "
            "Repeatable.",
        ),
    ] = None,
    max_body_size: Annotated[
        str,
        typer.Option(
            "--max-body-size", help="Limits: the largest API or dashboard request body (a quantity: 4Mi)."
        ),
    ] = "4Mi",
    service_max_body_size: Annotated[
        str,
        typer.Option(
            "--service-max-body-size", help="Limits: the largest request body of service traffic (64Mi)."
        ),
    ] = "64Mi",
    max_watches_per_user: Annotated[
        int,
        typer.Option(
            "--max-watches-per-user", min=0, help="Limits: concurrent watches of one user (0: no limit)."
        ),
    ] = 16,
    rate_limit: Annotated[
        float,
        typer.Option(
            "--rate-limit", min=0.0, help="Limits: API requests a second per token, sustained (0: no limit)."
        ),
    ] = 20.0,
    rate_burst: Annotated[
        int, typer.Option("--rate-burst", min=1, help="Limits: requests a token may make at once.")
    ] = 100,
    service_rate_limit: Annotated[
        float,
        typer.Option(
            "--service-rate-limit",
            min=0.0,
            help="Limits: service traffic requests per second per token (0: no limit).",
        ),
    ] = 0.0,
    finished_ttl: Annotated[
        str | None,
        typer.Option(
            "--finished-ttl",
            help="Delete finished workloads (Succeeded, Failed) this long after they finished, with their "
            "logs and pod directories, as a Job's ttlSecondsAfterFinished (seconds, 30m, 24h, 7d); "
            "default: kept.",
        ),
    ] = None,
) -> None:
    """Run the control plane: REST API, leader election, (while leader) the control loop, and the router
    in front of live services."""
    import uvicorn

    from gpuq.forecast.defaults import PARALLEL_MIN
    from gpuq.forecast.forecast import ForecastSettings
    from gpuq.run.serving.router import Router
    from gpuq.run.store import default_url
    from gpuq.server.app import create_app
    from gpuq.server.auth import ensure_admin
    from gpuq.server.context import client_address, context_path, write_context
    from gpuq.server.forecasts import CacheSettings, ForecastCache
    from gpuq.server.runner import LoopRunner

    if policy not in CHOOSERS:
        raise _fail(f"unknown --policy {policy!r}; known: {', '.join(sorted(CHOOSERS))}")
    limits = _limits(
        max_body_size,
        service_max_body_size,
        max_watches_per_user=max_watches_per_user,
        rate_per_s=rate_limit,
        rate_burst=rate_burst,
        service_rate_per_s=service_rate_limit,
    )
    forecast_settings = _forecast_settings(eta_low_quantile, eta_high_quantile, eta_default_runtime)
    finished_ttl_s = _finished_ttl(finished_ttl)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    os.umask(0o077)  # the database, the context file, logs: the server's alone (pods get their own umask)
    url = database or default_url()
    workdir = workdir.expanduser().resolve()
    # The port first: a second server on a taken port must neither lead, run pods nor touch the store
    # (opening it, migrating it and closing it under the running server was seen to lose that one's writes).
    listener = _listen(host, port)
    isolation = _isolation(
        sandbox, url, workdir, pod_user or [], pod_expose or [], pod_bind or [], ray=ray_address is not None
    )
    node, devices = _node(gpus, gpu_model, cpus=cpus, memory=memory, pods=pods)
    nodes = _ray_nodes(ray_address) if ray_address not in (None, "local") else [node]
    store = _open_store(url)
    try:
        token = ensure_admin(store, admin_token)
    except ValueError as error:
        raise _fail(str(error)) from error
    address = client_address(host, listener.getsockname()[1])
    written = write_context(address, token or admin_token)
    if token and not admin_token:
        out.print(f"admin token (shown once; saved in {written}):\n{token}", highlight=False, markup=False)
    monitor, xids = _gpu_monitor(node, virtual=gpus is not None, idle_minutes=idle_threshold_minutes)
    router = Router(hold_timeout_s=service_hold_timeout)
    runner = LoopRunner(
        url,
        identity or f"{socket.gethostname()}:{os.getpid()}",
        _loop_factory(node, devices, workdir, policy, ray_address, router, hpa_sync_period, isolation),
        lease_s=lease_seconds,
        gpus=monitor,
        finished_ttl_s=finished_ttl_s,
    )
    # A large forecast's second run goes to a forked process; not beside a Ray driver, whose gRPC
    # threads do not survive a fork.
    ahead = ForecastSettings(
        exact_starts=eta_exact_starts or None, parallel_min=None if ray_address else PARALLEL_MIN
    )
    forecasts = ForecastCache(runner.read, store, CacheSettings(estimator=forecast_settings, forecast=ahead))
    app = create_app(
        store,
        loop_status=runner.status,
        nodes=nodes,
        workdir=workdir,
        queue_usage=runner.queue_usage,
        fair_sharing=runner.fair_sharing,
        metrics=runner.metrics,
        metrics_open=metrics_open,
        forecasts=forecasts,
        router=router,
        services=lambda: runner.read(lambda loop: loop.services.views() if loop and loop.services else None),
        limits=limits,
    )
    stopping: list[int] = []

    def _on_signal(signum: int, _frame: FrameType | None) -> None:  # uvicorn re-raises its signals at exit
        stopping.append(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _on_signal)
    gpu_text = f"{node.gpu_count} x {node.gpu_model or 'GPU'}" if node.gpu_count else "no GPU"
    where = f"node {node.name} ({gpu_text})"
    if nodes != [node]:
        shown = ", ".join(f"{n.name} ({n.gpu_count} GPU)" for n in nodes)
        where = f"Ray cluster {ray_address}, {len(nodes)} node(s): {shown}"
    err.print(
        f"gpuq serve: {address} store {store.url.render_as_string(hide_password=True)}, {where}, "
        f"workdir {workdir}, context {context_path()}; dashboard {address}/",
        highlight=False,
        markup=False,
    )
    if isolation is not None:
        from gpuq.run.proctrack import tracking_for

        tracked = tracking_for(workdir, sandboxed=isolation.bwrap is not None)
        err.print(
            f"gpuq serve: pods isolated by {isolation.describe()}; each pod's processes held by {tracked}",
            highlight=False,
            markup=False,
        )
        for warning in isolation.warnings:  # logged once, and shown where the operator looks
            logging.getLogger("gpuq.serve").warning("pod isolation: %s", warning)
            err.print(f"WARNING: pod isolation: {warning}", style="bold red", highlight=False, markup=False)
    runner.start()
    forecasts.start()
    try:
        if not stopping:
            uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[listener])
    finally:
        forecasts.stop()
        runner.stop()
        if xids is not None:
            xids.close()
        store.close()
        listener.close()
        err.print("gpuq serve: stopped (pods terminated, leadership released)", highlight=False)


def _isolation(
    mode: str,
    url: str,
    workdir: Path,
    users: list[str],
    expose: list[Path],
    shared: list[Path],
    *,
    ray: bool,
) -> Isolation | None:
    """How local pods are isolated (docs/serve.md, "Job isolation"), or a clear error; None with Ray.

    Hidden from pods: the database's directory (SQLite), the context file's, the workdir
    (each pod sees only its own directories in it) and the server's home.
    """
    from sqlalchemy.engine import make_url

    from gpuq.run.sandbox import MODES, configure, parse_user_mapping
    from gpuq.server.context import context_path

    if mode not in MODES:
        raise _fail(f"unknown --sandbox {mode!r}; known: {', '.join(MODES)}")
    if ray:
        if users or expose or shared or mode != "auto":
            raise _fail("--sandbox, --pod-user, --pod-expose and --pod-bind apply to local pods, not Ray's")
        err.print(
            "WARNING: pod isolation: --ray-address: pods run as Ray actors, without gpuq's isolation",
            style="bold red",
            highlight=False,
            markup=False,
        )
        return None
    state = [context_path().expanduser().parent]
    database = make_url(url).database if url.startswith("sqlite") else None
    if database and database != ":memory:" and not database.startswith("file:"):
        state.insert(0, Path(database).expanduser().resolve().parent)
    try:
        return configure(
            mode,  # a Mode: checked against MODES above
            users=parse_user_mapping(users),
            state=state,
            workdir=workdir,
            home=[Path.home()],
            expose=expose,
            shared=shared,
        )
    except ValueError as error:
        raise _fail(str(error)) from error


def _limits(
    max_body_size: str,
    service_max_body_size: str,
    *,
    max_watches_per_user: int,
    rate_per_s: float,
    rate_burst: int,
    service_rate_per_s: float,
) -> Limits:
    """The server's limits from the ``--max-body-size`` ... options, or a clear error."""
    from gpuq.server.limits import Limits

    return Limits(
        max_body_bytes=_declared("--max-body-size", max_body_size, "memory"),
        service_max_body_bytes=_declared("--service-max-body-size", service_max_body_size, "memory"),
        max_watches_per_user=max_watches_per_user,
        rate_per_s=rate_per_s,
        rate_burst=rate_burst,
        service_rate_per_s=service_rate_per_s,
    )


def _finished_ttl(text: str | None) -> float | None:
    """``--finished-ttl`` in seconds (a number, a Go duration, or days: ``7d``), or a clear error."""
    from gpuq.api.kueue import parse_duration

    if text is None:
        return None
    try:
        if text.endswith("d"):
            seconds = float(text[:-1]) * 86400
        elif text.replace(".", "", 1).isdigit():
            seconds = float(text)
        else:
            seconds = parse_duration(text)
    except ValueError as error:
        raise _fail(f"--finished-ttl {text!r}: not a duration (seconds, 30m, 24h, 7d): {error}") from error
    if seconds < 0:
        raise _fail(f"--finished-ttl must not be negative, not {text!r}")
    return seconds


def _forecast_settings(low: float, high: float, default_runtime: str) -> EstimatorSettings:
    """The runtime estimator's settings from the ``--eta-*`` options, or a clear error."""
    from gpuq.api.kueue import parse_duration

    try:
        return EstimatorSettings(low=low, high=high, default_s=parse_duration(default_runtime))
    except ValueError as error:
        raise _fail(f"--eta-low-quantile / --eta-high-quantile / --eta-default-runtime: {error}") from error


def _gpu_monitor(node: Node, *, virtual: bool, idle_minutes: float) -> tuple[GpuMonitor, XidWatcher | None]:
    """``/metrics``' GPU side and GPUIdle events: NVML telemetry and XID events for real GPUs. Virtual
    GPUs (``--gpus``) have neither, so a machine's real GPUs are never reported as the virtual ones."""
    from gpuq.run.gpus import discover, telemetry
    from gpuq.run.xid import XidWatcher
    from gpuq.server.runner import GpuMonitor

    threshold_s = idle_minutes * 60
    # Discovered again (once, at start) for NVML's product name: DCGM's modelName label.
    found = discover().devices if node.gpu_count and not virtual else ()
    if not found:
        return GpuMonitor(hostname=node.name, idle_threshold_s=threshold_s), None
    watcher = XidWatcher()
    monitor = GpuMonitor(
        telemetry,
        hostname=node.name,
        model_name=found[0].name,
        idle_threshold_s=threshold_s,
        xids=watcher.poll,
    )
    return monitor, watcher


def _listen(host: str, port: int) -> socket.socket:
    """A bound socket for the API (``--port 0``: any free port), or a clear error when it is taken.

    The protocol is named (``IPPROTO_TCP``) and ``TCP_NODELAY`` set on it, which accepted connections
    inherit: asyncio sets no-delay only on sockets whose ``proto`` says TCP, and without it a response
    written as headers then body waits for the client's delayed ACK (about 40 ms a request)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        listener.bind((host, port))
    except OSError as error:
        listener.close()
        raise _fail(f"cannot listen on {host}:{port}: {error.strerror or error}") from error
    return listener


def _node(
    gpus: int | None, gpu_model: str | None, *, cpus: str | None, memory: str | None, pods: int
) -> tuple[Node, tuple[GPUDevice, ...]]:
    """This machine: ``--gpus`` virtual GPUs, else the discovered ones, else a CPU-only node.

    ``cpus`` / ``memory`` (quantities) declare the node's allocatable instead of the machine's
    own, e.g. to place a scenario whose quota is larger than this machine on it.
    """
    from gpuq.run.gpus import discover, local_node, virtual_devices

    if gpu_model is not None and gpus is None:
        raise _fail("--gpu-model needs --gpus N")
    if gpus is not None:
        if gpu_model is None:
            raise _fail("--gpus needs --gpu-model (A100-80GB, H100-80GB...)")
        try:
            devices = virtual_devices(gpus, gpu_model)
        except ValueError as error:
            raise _fail(str(error)) from error
    else:
        found = discover()
        devices = list(found.devices)
        if not devices:
            err.print(f"no GPU: {found.reason}; running a CPU-only node", style="yellow", highlight=False)
    cpu_milli = _declared("--cpus", cpus, "cpu") if cpus is not None else (os.cpu_count() or 1) * 1000
    memory_bytes = (
        _declared("--memory", memory, "memory")
        if memory is not None
        else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    )
    node = local_node(
        devices, name=socket.gethostname(), cpu_milli=cpu_milli, memory_bytes=memory_bytes, pods=pods
    )
    return node, tuple(devices)


def _declared(option: str, text: str, resource: str) -> int:
    """A declared allocatable in the core's units (CPU milli, memory bytes), or a clear error."""
    from gpuq.core.quantity import QuantityError, to_amount

    try:
        amount = to_amount(resource, text)
    except QuantityError as error:
        raise _fail(f"{option}: {error}") from error
    if amount <= 0:
        raise _fail(f"{option} must be positive, not {text!r}")
    return amount


def _ray_nodes(address: str) -> list[Node]:
    """The alive nodes of the Ray cluster at ``address``, as gpuq nodes; this process stays connected
    (each leadership term's executor uses that connection)."""
    from gpuq.run.executors.ray import cluster_nodes

    try:
        found = cluster_nodes(address)
    except Exception as error:  # Ray's: ConnectionError, AuthenticationError, RuntimeError...
        why = f"{type(error).__name__}: {error}"
        raise _fail(f"--ray-address {address}: cannot read the Ray cluster's nodes: {why}") from error
    if not found:
        raise _fail(f"--ray-address {address}: the Ray cluster has no alive node")
    return found


def _loop_factory(
    node: Node,
    devices: tuple[GPUDevice, ...],
    workdir: Path,
    policy: str,
    ray_address: str | None,
    router: Router | None = None,
    hpa_sync_period: int | None = None,
    isolation: Isolation | None = None,
) -> Callable[[Store], ControlLoop]:
    """A new loop and executor per leadership term: a closed executor cannot start pods again.

    The node's devices let the loop give MIG slices concrete ids; with ``ray_address`` pods run as Ray
    actors (``local`` starts a Ray instance declaring this node's GPUs, named after it); on a cluster
    the nodes are the cluster's alive nodes when the term starts. With a ``router``, the loop
    runs live services (a service controller per term, feeding that router). ``isolation``: how local
    pods are isolated (None: they run as the server, unisolated).
    """
    from gpuq.run.executors.base import Executor
    from gpuq.run.executors.local import LocalExecutor
    from gpuq.run.loop import ControlLoop
    from gpuq.run.serving.controller import ServiceController

    def make(store: Store) -> ControlLoop:
        executor: Executor
        nodes, node_devices = [node], {node.name: devices}
        if ray_address is not None:
            from gpuq.run.executors.ray import RayExecutor

            ray_executor = RayExecutor(
                ray_address, workdir=workdir, num_gpus=node.gpu_count or None, node_name=node.name
            )
            if ray_address != "local":
                nodes, node_devices = ray_executor.nodes(), {}
            executor = ray_executor
        else:
            executor = LocalExecutor(workdir, isolation=isolation)
        services = ServiceController(store, router, sync_period_s=hpa_sync_period) if router else None
        return ControlLoop(
            store,
            executor,
            nodes,
            workdir=workdir,
            policy=policy,
            devices=node_devices,
            services=services,
        )

    return make


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(help="User name.")],
    namespaces: Annotated[
        str, typer.Option("--namespaces", help="Comma-separated namespaces a member may use.")
    ] = "",
    admin: Annotated[bool, typer.Option("--admin", help="An admin instead of a member.")] = False,
    database: DatabaseOption = None,
) -> None:
    """Create a user and print its token (shown once: only its hash is stored)."""
    from gpuq.run.store import StoreConflict
    from gpuq.server.auth import add_user

    store = _open_store(database)
    try:
        token = add_user(store, name, namespaces=namespaces.split(","), admin=admin)
    except (ValueError, StoreConflict) as error:
        raise _fail(str(error)) from error
    finally:
        store.close()
    out.print(token, highlight=False, markup=False)


@users_app.command("list")
def users_list(database: DatabaseOption = None) -> None:
    """Users with their roles and namespaces (tokens are not stored, so not shown)."""
    from gpuq.server.auth import list_users

    store = _open_store(database)
    try:
        users = list_users(store)
    finally:
        store.close()
    table = Table(title="Users", title_justify="left")
    for column in ("name", "roles", "namespaces"):
        table.add_column(column)
    for user in users:
        table.add_row(user.name, ", ".join(user.roles), ", ".join(user.namespaces) or "-")
    out.print(table)


@users_app.command("delete")
def users_delete(
    name: Annotated[str, typer.Argument(help="User name.")], database: DatabaseOption = None
) -> None:
    """Delete a user: its token gets 401 from the next request on (the last admin cannot be deleted)."""
    from gpuq.server.auth import delete_user

    store = _open_store(database)
    try:
        deleted = delete_user(store, name)
    except ValueError as error:
        raise _fail(str(error)) from error
    finally:
        store.close()
    if not deleted:
        raise _fail(f"no user {name!r} (gpuq users list)")
    out.print(f"user/{name} deleted", highlight=False, markup=False)


@users_app.command("rotate-token")
def users_rotate_token(
    name: Annotated[str, typer.Argument(help="User name.")], database: DatabaseOption = None
) -> None:
    """Give a user a new token and print it (shown once); the old one gets 401 from the next request on.

    When the context file holds the old token (your own), it is updated with the new one."""
    from gpuq.server.auth import rotate_token
    from gpuq.server.context import DEFAULT_SERVER, read_context, write_context

    store = _open_store(database)
    try:
        context = read_context()
        held = store.user_for_token(context["token"]) if context.get("token") else None
        token = rotate_token(store, name)
    finally:
        store.close()
    if token is None:
        raise _fail(f"no user {name!r} (gpuq users list)")
    if held is not None and held.name == name:
        written = write_context(context.get("server", DEFAULT_SERVER), token)
        note = f"the context file {written} held the old token: it now holds the new one"
        err.print(note, highlight=False, markup=False)
    out.print(token, highlight=False, markup=False)
