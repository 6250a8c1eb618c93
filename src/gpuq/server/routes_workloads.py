"""Workloads: list, get (pods, conditions, why it waits), delete, logs; pending visibility; events.

A member sees only its namespaces: lists across namespaces are filtered, a request
naming another namespace is refused (403).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import PlainTextResponse

from gpuq.run.store import PodRecord, Store, UserRecord, WorkloadRecord
from gpuq.server import paging, views
from gpuq.server.auth import EVENT, Verb, authorize, bearer_user, readable_namespaces
from gpuq.server.errors import ApiError, not_found
from gpuq.server.forecasts import ForecastCache, workload_eta
from gpuq.server.kinds import WORKLOAD
from gpuq.server.watch import watch_gate

router = APIRouter(tags=["workloads"])
User = Annotated[UserRecord, Depends(bearer_user)]
Version = Annotated[int, Depends(watch_gate)]
MAX_TAIL = 100_000


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def _view(request: Request, record: WorkloadRecord, **parts: Any) -> dict[str, Any]:
    """A workload's view with its ETA from the latest forecast, when this replica makes forecasts."""
    cache: ForecastCache | None = getattr(request.app.state, "forecasts", None)
    return views.workload_view(record, eta=workload_eta(cache, record.namespace, record.name), **parts)


def _workload(request: Request, user: UserRecord, verb: Verb, namespace: str, name: str) -> WorkloadRecord:
    authorize(user, verb, WORKLOAD, namespace)
    record = _store(request).get_workload(namespace, name)
    if record is None:
        raise not_found(f"workload {namespace}/{name}")
    return record


Limit = Annotated[
    int | None, Query(ge=1, le=paging.MAX_LIMIT, description="At most this many items; `continue` reads on.")
]
Continue = Annotated[
    str | None, Query(alias="continue", description="The `continue` token of the previous page.")
]


@router.get("/workloads", summary="Workloads of every namespace the user may read (watchable, paged).")
def list_all_workloads(
    request: Request,
    user: User,
    version: Version,
    state: str | None = None,
    queue: str | None = None,
    limit: Limit = None,
    continue_: Continue = None,
) -> dict[str, Any]:
    namespaces = readable_namespaces(user)
    return _list(request, version, limit, continue_, state=state, queue=queue, namespaces=namespaces)


@router.get("/namespaces/{namespace}/workloads", summary="Workloads of one namespace (watchable, paged).")
def list_workloads(
    request: Request,
    namespace: str,
    user: User,
    version: Version,
    state: str | None = None,
    limit: Limit = None,
    continue_: Continue = None,
) -> dict[str, Any]:
    authorize(user, "list", WORKLOAD, namespace)
    return _list(request, version, limit, continue_, state=state, namespace=namespace)


def _list(
    request: Request, version: int, limit: int | None, token: str | None, *, state: str | None, **filters: Any
) -> dict[str, Any]:
    """One page (all of it without ``limit``): ``continue`` and ``remainingItemCount`` when more follow."""
    after = paging.decode(token).after_id
    states = [state] if state else None
    store = _store(request)
    records = store.list_workloads(
        states, after_id=after, limit=None if limit is None else limit + 1, **filters
    )
    answer: dict[str, Any] = {"resourceVersion": version}
    if limit is not None and len(records) > limit:
        records = records[:limit]
        last = records[-1].id
        answer["continue"] = paging.encode(paging.PageToken(last))
        answer["remainingItemCount"] = store.count_workloads(states, after_id=last, **filters)
    answer["items"] = [_view(request, r) for r in records]
    return answer


@router.get("/namespaces/{namespace}/workloads/{name}", summary="One workload with pods and conditions.")
def get_workload(request: Request, namespace: str, name: str, user: User) -> dict[str, Any]:
    record = _workload(request, user, "get", namespace, name)
    store = _store(request)
    return _view(
        request, record, pods=store.pods_of(record.id), conditions=store.conditions(record.id), manifest=True
    )


@router.delete(
    "/namespaces/{namespace}/workloads/{name}",
    summary="Delete a workload; the control loop stops its running pods.",
)
def delete_workload(request: Request, namespace: str, name: str, user: User) -> dict[str, Any]:
    authorize(user, "delete", WORKLOAD, namespace)
    if not _store(request).delete_workload(namespace, name):
        raise not_found(f"workload {namespace}/{name}")
    return {"kind": WORKLOAD, "namespace": namespace, "name": name, "action": "deleted"}


@router.get(
    "/namespaces/{namespace}/workloads/{name}/logs",
    response_class=PlainTextResponse,
    summary="The pods' stdout and stderr (all pods, or ?pod=NAME; ?tail=N last lines of each).",
)
def workload_logs(
    request: Request,
    namespace: str,
    name: str,
    user: User,
    pod: str | None = None,
    tail: Annotated[int | None, Query(ge=0, le=MAX_TAIL)] = None,
) -> str:
    record = _workload(request, user, "logs", namespace, name)
    files = _log_files(request, record, _store(request).pods_of(record.id))
    if pod is not None:
        if pod not in files:
            known = ", ".join(sorted(files)) or "none has started"
            raise not_found(f"pod {pod!r} of workload {namespace}/{name} (pods with logs: {known})")
        files = {pod: files[pod]}
    parts = []
    for pod_name, path in sorted(files.items()):
        text = _read_tail(path, tail)
        parts.append(f"==> {pod_name} <==\n{text}" if len(files) > 1 else text)
    return "\n".join(parts)


def _log_files(request: Request, record: WorkloadRecord, pods: Iterable[PodRecord]) -> dict[str, Path]:
    """Each pod's log: the stored ``log_path``, else what the loop left under ``workdir/logs`` (a requeued
    workload's pods are dropped from the store but their logs stay)."""
    files: dict[str, Path] = {}
    workdir: Path | None = request.app.state.workdir
    if workdir is not None:
        directory = workdir / "logs" / record.namespace / record.name
        if directory.is_dir():
            files |= {path.stem: path for path in directory.glob("*.log")}
    files |= {p.name: Path(p.log_path) for p in pods if p.log_path}
    return files


def _read_tail(path: Path, tail: int | None) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    except OSError as error:
        raise ApiError(500, f"cannot read log {path}: {error}") from error
    if tail is None:
        return text
    lines = text.splitlines(keepends=True)
    return "".join(lines[-tail:]) if tail else ""


# -- pending visibility ---------------------------------------------------------------------------------


@router.get(
    "/clusterqueues/{name}/pendingworkloads",
    summary="Pending workloads of a ClusterQueue in queue order, with positions and why each waits.",
)
def cluster_queue_pending(request: Request, name: str, user: User) -> dict[str, Any]:
    authorize(user, "get", "ClusterQueue")
    store = _store(request)
    if store.get_object("ClusterQueue", name) is None:
        raise not_found(f"ClusterQueue {name}")
    lq_to_cq = views.cluster_queue_of(store.list_objects("LocalQueue"))
    records = [w for w in store.list_workloads(states=views.PENDING) if lq_to_cq.get(_lq(w)) == name]
    items = views.pending_view(views.queue_order(records, _fair_usage(request)), lq_to_cq)
    namespaces = readable_namespaces(user)
    if namespaces is not None:  # a member keeps its workloads' true positions, sees no others
        items = [i for i in items if i["namespace"] in namespaces]
    return {"clusterQueue": name, "items": items}


@router.get(
    "/namespaces/{namespace}/localqueues/{name}/pendingworkloads",
    summary="Pending workloads of a LocalQueue in queue order, with positions and why each waits.",
)
def local_queue_pending(request: Request, namespace: str, name: str, user: User) -> dict[str, Any]:
    authorize(user, "get", "LocalQueue", namespace)
    store = _store(request)
    if store.get_object("LocalQueue", name, namespace) is None:
        raise not_found(f"LocalQueue {namespace}/{name}")
    lq_to_cq = views.cluster_queue_of(store.list_objects("LocalQueue"))
    cluster_queue = lq_to_cq[(namespace, name)]
    records = [w for w in store.list_workloads(states=views.PENDING) if lq_to_cq.get(_lq(w)) == cluster_queue]
    items = [
        i
        for i in views.pending_view(views.queue_order(records, _fair_usage(request)), lq_to_cq)
        if _lq_of(i) == (namespace, name)
    ]
    return {"localQueue": name, "namespace": namespace, "clusterQueue": cluster_queue, "items": items}


def _fair_usage(request: Request) -> dict[tuple[str, str], float] | None:
    """The leader's Admission Fair Sharing usage per LocalQueue (None on a follower)."""
    reader = request.app.state.fair_sharing
    read = reader() if reader is not None else None
    return read.usage if read is not None else None


def _lq(workload: WorkloadRecord) -> tuple[str, str]:
    return workload.namespace, workload.queue_name


def _lq_of(item: dict[str, Any]) -> tuple[str, str]:
    return str(item["namespace"]), str(item["localQueue"])


# -- events ---------------------------------------------------------------------------------------------


@router.get("/events", summary="Events, oldest first, after ?sinceId (watchable).")
def list_events(
    request: Request,
    user: User,
    version: Version,
    namespace: str | None = None,
    kind: str | None = None,
    name: str | None = None,
    since_id: Annotated[int, Query(alias="sinceId", ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
) -> dict[str, Any]:
    if namespace is not None:
        authorize(user, "list", EVENT, namespace)
    events = _store(request).events(kind, namespace, name, since_id, limit)
    namespaces = readable_namespaces(user)
    items = [views.event_view(e) for e in events if namespaces is None or e.namespace in namespaces]
    return {"resourceVersion": version, "items": items}
