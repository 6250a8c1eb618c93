"""Configuration objects: apply (objects and workloads), list, get and delete by kind.

Paths: cluster-scoped kinds at ``/<plural>[/<name>]``, LocalQueues at
``/namespaces/<ns>/localqueues[/<name>]`` (and ``/localqueues`` across namespaces),
any kind at ``/objects?kind=&namespace=``. ClusterQueue and LocalQueue views carry a
``status`` with their pending and quota-holding workload counts.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from gpuq.run.store import ObjectRecord, Store, UserRecord
from gpuq.server import apply, views
from gpuq.server.auth import allowed, authorize, bearer_user, readable_namespaces
from gpuq.server.errors import ApiError, diagnostic_document, not_found
from gpuq.server.kinds import BY_PLURAL, CLUSTER_KINDS, NAMESPACED_KINDS
from gpuq.server.watch import watch_gate

router = APIRouter(tags=["objects"])
User = Annotated[UserRecord, Depends(bearer_user)]
Version = Annotated[int, Depends(watch_gate)]

APPLY_BODY = {
    "requestBody": {
        "required": True,
        "description": "One or many YAML or JSON documents (a `kind: List` is expanded).",
        "content": {"application/yaml": {"schema": {"type": "string"}}, "application/json": {}},
    }
}


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


@router.post(
    "/apply",
    summary="Create or update objects and submit workloads, all or nothing (?dryRun=true: validate only).",
    openapi_extra=APPLY_BODY,
)
async def apply_manifests(
    request: Request, user: User, dry_run: Annotated[bool, Query(alias="dryRun")] = False
) -> dict[str, Any]:
    text = await request_text(request)
    result: dict[str, Any] = await run_in_threadpool(_apply, request, user, text, dry_run)
    return result


async def request_text(request: Request) -> str:
    """The body of a manifest request as text, 400 when not UTF-8 (one too large never gets here: the
    ``BodyLimit`` middleware refuses it with a 413 as it streams in, see ``gpuq.server.limits``)."""
    body = await request.body()
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(400, f"the request body is not UTF-8: {error}") from error


def _apply(request: Request, user: UserRecord, text: str, dry_run: bool) -> dict[str, Any]:
    items = apply.read_request(text)
    for item in items:
        if item.key[0] and not item.ignored:  # an ignored document is never stored
            authorize(user, "apply", item.key[0], item.key[1], shown=item.kind)
    store = _store(request)
    configuration = request.app.state.stored_configuration
    planned, warnings = apply.plan_apply(store, items, text, request.app.state.nodes, configuration)
    results = (
        [p.item.result(p.action) for p in planned]
        if dry_run
        else apply.execute(store, planned, user=user.name)
    )
    return {
        "dryRun": dry_run,
        "results": results,
        "warnings": [diagnostic_document(d) for d in warnings],
        "resourceVersion": store.resource_version(),
    }


@router.get("/objects", summary="Stored objects of any kind, by (kind, namespace, name) (watchable).")
def list_objects(
    request: Request, user: User, version: Version, kind: str | None = None, namespace: str | None = None
) -> dict[str, Any]:
    records = _store(request).list_objects(kind, namespace)
    items = [_view(request, r) for r in records if allowed(user, "list", r.kind, r.namespace)]
    return {"resourceVersion": version, "items": items}


@router.get("/localqueues", summary="LocalQueues of every namespace the user may read (watchable).")
def list_all_local_queues(request: Request, user: User, version: Version) -> dict[str, Any]:
    namespaces = readable_namespaces(user)
    records = [
        r
        for r in _store(request).list_objects("LocalQueue")
        if namespaces is None or r.namespace in namespaces
    ]
    return {"resourceVersion": version, "items": _views(request, records)}


@router.get("/namespaces/{namespace}/{plural}", summary="Namespaced objects of one kind (watchable).")
def list_namespaced(
    request: Request, namespace: str, plural: str, user: User, version: Version
) -> dict[str, Any]:
    kind = _kind(plural, namespaced=True)
    authorize(user, "list", kind, namespace)
    records = _store(request).list_objects(kind, namespace)
    return {"resourceVersion": version, "items": _views(request, records)}


@router.get("/namespaces/{namespace}/{plural}/{name}", summary="One namespaced object.")
def get_namespaced(request: Request, namespace: str, plural: str, name: str, user: User) -> dict[str, Any]:
    kind = _kind(plural, namespaced=True)
    authorize(user, "get", kind, namespace)
    record = _store(request).get_object(kind, name, namespace)
    if record is None:
        raise not_found(f"{kind} {namespace}/{name}")
    return _view(request, record)


@router.delete("/namespaces/{namespace}/{plural}/{name}", summary="Delete a namespaced object.")
def delete_namespaced(request: Request, namespace: str, plural: str, name: str, user: User) -> dict[str, Any]:
    kind = _kind(plural, namespaced=True)
    authorize(user, "delete", kind, namespace)
    if not _store(request).delete_object(kind, name, namespace):
        raise not_found(f"{kind} {namespace}/{name}")
    return {"kind": kind, "namespace": namespace, "name": name, "action": "deleted"}


@router.get("/{plural}", summary="Cluster-scoped objects of one kind (watchable).")
def list_cluster(request: Request, plural: str, user: User, version: Version) -> dict[str, Any]:
    kind = _kind(plural, namespaced=False)
    authorize(user, "list", kind)
    return {"resourceVersion": version, "items": _views(request, _store(request).list_objects(kind))}


@router.get("/{plural}/{name}", summary="One cluster-scoped object.")
def get_cluster(request: Request, plural: str, name: str, user: User) -> dict[str, Any]:
    kind = _kind(plural, namespaced=False)
    authorize(user, "get", kind)
    record = _store(request).get_object(kind, name)
    if record is None:
        raise not_found(f"{kind} {name}")
    return _view(request, record)


@router.delete("/{plural}/{name}", summary="Delete a cluster-scoped object.")
def delete_cluster(request: Request, plural: str, name: str, user: User) -> dict[str, Any]:
    kind = _kind(plural, namespaced=False)
    authorize(user, "delete", kind)
    if not _store(request).delete_object(kind, name):
        raise not_found(f"{kind} {name}")
    return {"kind": kind, "namespace": "", "name": name, "action": "deleted"}


def _kind(plural: str, *, namespaced: bool) -> str:
    kind = BY_PLURAL.get(plural)
    if kind is None or (kind in NAMESPACED_KINDS) != namespaced:
        scope = NAMESPACED_KINDS if namespaced else CLUSTER_KINDS
        raise not_found(f"resource type {plural!r} (known here: {', '.join(sorted(scope.values()))})")
    return kind


def _views(request: Request, records: list[ObjectRecord]) -> list[dict[str, Any]]:
    """Object views; queues get a ``status`` with the counts of their workloads (one read for all)."""
    if not any(r.kind in ("ClusterQueue", "LocalQueue") for r in records):
        return [views.object_view(r) for r in records]
    store = _store(request)
    workloads = store.list_workloads()
    lq_to_cq = views.cluster_queue_of(store.list_objects("LocalQueue"))
    reader = request.app.state.fair_sharing
    read = reader() if reader is not None else None
    fair = read.status if read is not None else {}
    out = []
    for record in records:
        status: dict[str, object]
        if record.kind == "LocalQueue":
            status = dict(views.queue_status(workloads, [(record.namespace, record.name)]))
            if (lq := fair.get((record.namespace, record.name))) is not None:
                status["fairSharing"] = lq  # the leader's Admission Fair Sharing usage
        elif record.kind == "ClusterQueue":
            status = dict(
                views.queue_status(workloads, [lq for lq, cq in lq_to_cq.items() if cq == record.name])
            )
        else:
            out.append(views.object_view(record))
            continue
        out.append(views.object_view(record, status))
    return out


def _view(request: Request, record: ObjectRecord) -> dict[str, Any]:
    return _views(request, [record])[0]
