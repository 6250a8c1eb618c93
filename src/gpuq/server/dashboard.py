"""The web dashboard at ``/`` and ``/dashboard``: queues against quota, pending and running work, GPUs.

Server-rendered HTML over the same store and tokens as the API, with no external resource:
the CSS and script of ``static/`` are inlined under a per-response CSP nonce, so even a
string that slipped past :func:`html.escape` could not run. Sign in once with ``?token=T``
(or the form); the token is kept in an HttpOnly cookie and the script re-fetches
``/dashboard/content`` every few seconds. A member sees only its namespaces' workloads,
pods and events; ClusterQueues and nodes are cluster-scoped, readable by everyone.
"""

from __future__ import annotations

import html
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources
from string import Template
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from gpuq.core.quantity import MILLI_RESOURCES
from gpuq.run.store import EventRecord, PodRecord, Store, UserRecord, WorkloadRecord
from gpuq.run.store.convert import event_record
from gpuq.run.store.models import EventRow
from gpuq.server import tables, views
from gpuq.server.auth import is_admin, readable_namespaces
from gpuq.server.forecasts import ForecastCache, workload_eta
from gpuq.server.routes_services import service_views
from gpuq.server.runner import QueueUsage, QuotaBar

router = APIRouter(include_in_schema=False)
COOKIE = "gpuq_token"
REFRESH_MS = 5000
EVENTS_SHOWN = 30
_STATIC = resources.files("gpuq.server") / "static"
PAGE = Template((_STATIC / "dashboard.html").read_text(encoding="utf-8"))
CSS = (_STATIC / "dashboard.css").read_text(encoding="utf-8")
JS = (_STATIC / "dashboard.js").read_text(encoding="utf-8")
LOGIN = Template((_STATIC / "login.html").read_text(encoding="utf-8"))
CSP = (
    "default-src 'none'; style-src 'nonce-%s'; script-src 'nonce-%s'; connect-src 'self'; "
    "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage"})
LocalToCluster = Mapping[tuple[str, str], str]
"""(namespace, LocalQueue) -> ClusterQueue."""


def pending_entries(workloads: Iterable[WorkloadRecord], lq_to_cq: LocalToCluster) -> list[dict[str, Any]]:
    """Every ClusterQueue's pending workloads in Kueue's queue order (the API's entries), queue by queue."""
    by_queue: dict[str, list[WorkloadRecord]] = {}
    for record in views.queue_order(workloads):
        by_queue.setdefault(lq_to_cq.get((record.namespace, record.queue_name), ""), []).append(record)
    return [entry for name in sorted(by_queue) for entry in views.pending_view(by_queue[name], lq_to_cq)]


def recent_events(store: Store, namespaces: frozenset[str] | None, limit: int) -> list[EventRecord]:
    """The newest ``limit`` events the reader may see (None: all), newest first."""
    query = select(EventRow).order_by(EventRow.id.desc()).limit(limit)
    if namespaces is not None:
        query = query.where(EventRow.namespace.in_(sorted(namespaces)))
    with store.transaction() as session:
        return [event_record(row) for row in session.scalars(query)]


# -- routes ----------------------------------------------------------------------------------------------


@router.get("/")
@router.get("/dashboard")
def dashboard(request: Request, token: str | None = None) -> Response:
    if token is not None:  # sign in, then drop the token from the address bar and history
        return _sign_in(request, token, request.url.path)
    user = _user(request)
    if user is None:
        return _login(401)
    return _page(render_content(request, user, time.time()), _who(user), REFRESH_MS)


@router.post("/dashboard/login")
async def login(request: Request) -> Response:
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    return await run_in_threadpool(_sign_in, request, (form.get("token") or [""])[0], "/dashboard")


@router.post("/dashboard/logout")
def logout() -> Response:
    response = RedirectResponse("/dashboard", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


@router.get("/dashboard/content")
def content(request: Request) -> Response:
    """The page's main part, for the refreshing script; 401 when the cookie no longer signs in."""
    user = _user(request)
    if user is None:
        return Response(status_code=401)
    return HTMLResponse(render_content(request, user, time.time()), headers={"Cache-Control": "no-store"})


def _user(request: Request) -> UserRecord | None:
    """The user of the bearer header, else of the cookie."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else ""
    token = token or request.cookies.get(COOKIE, "")
    store: Store = request.app.state.store
    return store.user_for_token(token) if token else None


def _sign_in(request: Request, token: str, target: str) -> Response:
    store: Store = request.app.state.store
    token = token.strip()
    if not token or store.user_for_token(token) is None:
        return _login(401, "That token belongs to no user.")
    response = RedirectResponse(target, status_code=303)
    secure = request.url.scheme == "https"
    response.set_cookie(COOKIE, token, httponly=True, samesite="lax", secure=secure, path="/")
    return response


def _page(body: str, who: str, refresh_ms: int, status: int = 200) -> HTMLResponse:
    nonce = secrets.token_urlsafe(16)
    updated = f"rendered {time.strftime('%H:%M:%S')}" + f", refreshed every {refresh_ms // 1000} s" * (
        refresh_ms > 0
    )
    fields = {"nonce": nonce, "css": CSS, "js": JS, "who": who, "content": body, "updated": updated}
    text = PAGE.substitute(fields, title="gpuq dashboard", refresh_ms=refresh_ms)
    headers = {**HEADERS, "Content-Security-Policy": CSP % (nonce, nonce)}
    return HTMLResponse(text, status_code=status, headers=headers)


def _login(status: int, error: str = "") -> HTMLResponse:
    problem = f'<p class="error">{_e(error)}</p>' if error else ""
    return _page(LOGIN.substitute(problem=problem), "", 0, status)


def _who(user: UserRecord) -> str:
    grants = "admin" if is_admin(user) else f"member of {', '.join(user.namespaces) or 'no namespace'}"
    return (
        f"<span>{_e(user.name)} <span class='muted'>({_e(grants)})</span></span>"
        '<form method="post" action="/dashboard/logout"><button type="submit">Sign out</button></form>'
    )


# -- rendering -------------------------------------------------------------------------------------------


def render_content(request: Request, user: UserRecord, now: float) -> str:
    """The dashboard's sections for ``user``: one read of the store, one of the loop."""
    store: Store = request.app.state.store
    usage: Callable[[], QueueUsage | None] | None = request.app.state.queue_usage
    report = request.app.state.loop_status
    namespaces = readable_namespaces(user)
    workloads = store.list_workloads(states=views.PENDING + views.HOLDING_QUOTA)
    lq_to_cq = views.cluster_queue_of(store.list_objects("LocalQueue"))
    mine = [w for w in workloads if namespaces is None or w.namespace in namespaces]
    pending = [
        p for p in pending_entries(workloads, lq_to_cq) if namespaces is None or p["namespace"] in namespaces
    ]
    running = [w for w in mine if w.state in views.HOLDING_QUOTA]
    pods = {w.id: store.pods_of(w.id) for w in running}
    live = store.running_pods()
    cache: ForecastCache | None = getattr(request.app.state, "forecasts", None)
    etas = {
        (w.namespace, w.name): tables.eta_text(
            {"state": w.state, "eta": workload_eta(cache, w.namespace, w.name)}, now
        )
        for w in mine
    }
    return "".join(
        (
            _status(dict(report()) if report is not None else None, now),
            _queues(store, usage() if usage is not None else None, workloads, lq_to_cq),
            _pending(pending, now, etas),
            _running(running, pods, now, etas),
            _services(service_views(request), namespaces),
            _nodes(request.app.state.nodes, live, {w.id: w for w in mine}),
            _events(recent_events(store, namespaces, EVENTS_SHOWN), now),
        )
    )


def _status(report: Mapping[str, Any] | None, now: float) -> str:
    if report is None:
        return '<section><h2>Replica</h2><p class="muted">No control loop in this process.</p></section>'
    last = report.get("lastStepAt")
    items = (
        ("replica", _e(report.get("identity", ""))),
        ("role", "leader" if report.get("leader") else "follower (the leader runs the loop)"),
        ("steps", _e(report.get("steps", 0))),
        ("last step", _ago(last, now) if last else "never"),
    )
    spans = "".join(f"<span>{label} <b>{value}</b></span>" for label, value in items)
    banners = "".join(
        f'<div class="banner">{_e(report[k])}</div>' for k in ("configProblem", "lastError") if report.get(k)
    )
    return f'<section><h2>Replica</h2><div class="status">{spans}</div>{banners}</section>'


def _queues(
    store: Store, usage: QueueUsage | None, workloads: list[WorkloadRecord], lq_to_cq: LocalToCluster
) -> str:
    cards = []
    for record in store.list_objects("ClusterQueue"):
        counts = views.queue_status(workloads, [lq for lq, cq in lq_to_cq.items() if cq == record.name])
        cohort, bars = usage.get(record.name, ("", [])) if usage is not None else ("", [])
        meta = f"{counts['pendingWorkloads']} pending · {counts['admittedWorkloads']} admitted"
        meta += f" · cohort {_e(cohort)}" if cohort else ""
        rows = "".join(_quota(bar) for bar in bars)
        if usage is None:
            rows = '<p class="muted">A follower: the leader\'s dashboard shows quota usage.</p>'
        elif record.name not in usage:
            rows = '<p class="muted">Not in the loop\'s configuration (see the replica status).</p>'
        cards.append(
            f'<div class="queue"><h3>{_e(record.name)}</h3><div class="meta">{meta}</div>{rows}</div>'
        )
    body = f'<div class="queues">{"".join(cards)}</div>' if cards else '<p class="empty">No ClusterQueue.</p>'
    return f'<section><h2>ClusterQueues <span class="count">({len(cards)})</span></h2>{body}</section>'


def _quota(bar: QuotaBar) -> str:
    scale = max(bar.used, bar.nominal, 1)
    within = min(bar.used, bar.nominal) * 100 / scale
    over = max(bar.used - bar.nominal, 0) * 100 / scale
    used, nominal = _amount(bar.resource, bar.used), _amount(bar.resource, bar.nominal)
    label = f"{bar.flavor} · {bar.resource}"
    svg = (
        f'<svg class="bar" viewBox="0 0 100 10" preserveAspectRatio="none" role="img" '
        f'aria-label="{_e(f"{used} of {nominal}")}"><rect class="track" width="100" height="10"/>'
        f'<rect class="used" width="{within:.2f}" height="10"/>'
        f'<rect class="over" x="{within:.2f}" width="{over:.2f}" height="10"/></svg>'
    )
    return (
        f'<div class="quota"><span class="label" title="{_e(label)}">{_e(label)}</span>{svg}'
        f'<span class="amount">{_e(used)} / {_e(nominal)}</span></div>'
    )


def _pending(entries: Sequence[Mapping[str, Any]], now: float, etas: Mapping[tuple[str, str], str]) -> str:
    rows = [
        (_e(e["clusterQueue"] or "?"), _e(e["positionInClusterQueue"] + 1), _wl(e["namespace"], e["name"]),
         _e(e["localQueue"]), _e(e["priority"]), _ago(e["createdAt"], now),
         _e(etas.get((e["namespace"], e["name"]), "-")), _e(e["reason"]))
        for e in entries
    ]  # fmt: skip
    headers = ("ClusterQueue", "#", "workload", "LocalQueue", "priority", "waiting", "ETA", "why it waits")
    return _section("Pending workloads (queue order)", headers, rows, "Nothing is waiting.")


def _running(
    records: Sequence[WorkloadRecord],
    pods: Mapping[int, Sequence[PodRecord]],
    now: float,
    etas: Mapping[tuple[str, str], str],
) -> str:
    rows = []
    for record in records:
        since = record.started_at or record.admitted_at
        lines = [
            f"{_e(p.name)} {_tag(p.state)} on {_e(p.node or '?')} " + "".join(_gpu(d) for d in p.devices)
            for p in pods.get(record.id, ())
        ]
        rows.append(
            (_wl(record.namespace, record.name), _e(record.cluster_queue or ""), _tag(record.state),
             _ago(since, now) if since else "", _e(etas.get((record.namespace, record.name), "-")),
             "<br>".join(lines) or "<span class='muted'>no pod yet</span>")
        )  # fmt: skip
    headers = ("workload", "ClusterQueue", "state", "since", "ETA", "pods: node and GPUs")
    return _section("Admitted and running workloads", headers, rows, "Nothing is running.")


def _nodes(nodes: Sequence[Any], live: Sequence[PodRecord], visible: Mapping[int, WorkloadRecord]) -> str:
    blocks = []
    for node in nodes:
        view = views.node_view(node, live)
        holders: dict[str, list[str]] = {}
        for pod in (p for p in live if p.node == node.name):
            owner = visible.get(pod.workload_id)
            name = f"{owner.namespace}/{owner.name} {pod.name}" if owner is not None else "another namespace"
            for device in pod.devices:
                holders.setdefault(device, []).append(name)
        devices = [str(i) for i in range(view["gpus"])]
        devices += [d for d in view["devicesInUse"] if d not in devices]
        chips = "".join(
            f'<div class="chip {"used" if d in holders else "free"}"><b>GPU {_e(d)}</b>'
            f"{'<br>'.join(_e(h) for h in holders[d]) if d in holders else 'free'}</div>"
            for d in devices
        )
        used = len([d for d in devices if d in holders])
        model = f"{view['gpus']} × {view['gpuModel'] or 'GPU'}" if view["gpus"] else "no GPU"
        summary = (
            f"{_e(model)} · {len(devices) - used} free · {used} in use · running pods: {view['runningPods']}"
        )
        blocks.append(
            f'<div class="node"><h3>{_e(view["name"])} <span class="muted">{summary}</span></h3>'
            f'<div class="chips">{chips}</div></div>'
        )
    body = "".join(blocks) or '<p class="empty">No node.</p>'
    return f"<section><h2>Nodes and GPUs</h2>{body}</section>"


def _events(events: Sequence[EventRecord], now: float) -> str:
    rows = [
        (_ago(e.time, now), _tag(e.type), _e(e.reason),
         _e(f"{e.kind} {e.namespace}/{e.name}" if e.namespace else f"{e.kind} {e.name}"), _e(e.message))
        for e in events
    ]  # fmt: skip
    headers = ("age", "type", "reason", "object", "message")
    return _section(f"Recent events (newest {EVENTS_SHOWN})", headers, rows, "No event.")


def _services(found: Sequence[Mapping[str, Any]] | None, namespaces: frozenset[str] | None) -> str:
    """Live services: desired and ready replicas, traffic share, the router's counters."""
    if found is None:
        return ""
    headers = ("Service", "Traffic", "Autoscaler", "Desired", "Replicas", "Requests", "In flight", "Waiting")
    rows = []
    for s in found:
        if namespaces is not None and s["namespace"] not in namespaces:
            continue
        counts = ", ".join(f"{n} {_e(state.lower())}" for state, n in s["replicas"].items() if n) or "none"
        share = f"{s['trafficPercent']}% of {s['service']}"
        requests = s["requests"]
        rows.append(
            (
                _wl(s["namespace"], s["name"]),
                _e(share),
                _e(s.get("autoscaler") or "fixed"),
                _e(s["desiredReplicas"]),
                counts,
                _e(requests["total"]),
                _e(requests["inFlight"]),
                _e(requests["waiting"]),
            )
        )
    return _section("Live services", headers, rows, "No live service.")


def _section(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> str:
    """A titled table of ``rows`` (cells already escaped), or ``empty``."""
    if not rows:
        return f'<section><h2>{_e(title)}</h2><p class="empty">{_e(empty)}</p></section>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<section><h2>{_e(title)} <span class="count">({len(rows)})</span></h2>{table}</section>'


def _wl(namespace: str, name: str) -> str:
    return f"<span class='wl'>{_e(namespace)}/<b>{_e(name)}</b></span>"


def _tag(text: str) -> str:
    return f"<span class='tag {_e(text)}'>{_e(text)}</span>"


def _gpu(device: str) -> str:
    return f"<span class='gpu'>GPU {_e(device)}</span>"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _ago(at: float, now: float) -> str:
    """``3m`` ago, with the UTC time as a tooltip."""
    seconds = max(0, int(now - at))
    text = f"{seconds}s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            text = f"{seconds // size}{unit}"
            break
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
    return f'<span title="{stamp}">{text}</span>'


def _amount(resource: str, amount: int) -> str:
    """Core units as people read them: CPUs, binary bytes, counts."""
    if resource in MILLI_RESOURCES:
        return f"{amount / 1000:g}"
    if resource in BYTE_RESOURCES:
        for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if amount >= size:
                return f"{amount / size:.3g}{unit}"
    return str(amount)
