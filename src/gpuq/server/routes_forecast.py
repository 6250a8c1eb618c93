"""When will my job start? The latest forecast's ETAs, and a dry run of a workload not submitted.

``GET /forecast`` lists the ETAs of the workloads the user may read (a member: its namespaces),
with the forecast's time and age; ``POST /forecast/dry-run`` validates one workload manifest as
apply does (same 422 shape), stores nothing, and forecasts it as if submitted now.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from gpuq.run.snapshot import manifest_profile
from gpuq.run.store import Store, UserRecord
from gpuq.server import apply
from gpuq.server.auth import authorize, bearer_user, readable_namespaces
from gpuq.server.errors import ApiError, diagnostic_document
from gpuq.server.forecasts import NO_LOOP, ForecastCache, eta_view
from gpuq.server.routes_objects import APPLY_BODY, request_text

router = APIRouter(tags=["forecast"])
User = Annotated[UserRecord, Depends(bearer_user)]


def _cache(request: Request) -> ForecastCache | None:
    cache: ForecastCache | None = getattr(request.app.state, "forecasts", None)
    return cache


@router.get("/forecast", summary="Predicted admission, start and end of the workloads the user may read.")
def get_forecast(request: Request, user: User) -> dict[str, Any]:
    cache = _cache(request)
    computed = cache.latest() if cache is not None else None
    if cache is None or computed is None:
        reason = (cache.reason if cache is not None else "") or NO_LOOP
        return {"available": False, "reason": reason, "items": []}
    namespaces = readable_namespaces(user)
    items = [
        eta_view(eta, computed)
        for key, eta in sorted(computed.forecast.etas.items())
        if namespaces is None or key.partition("/")[0] in namespaces
    ]
    return {
        "available": True,
        "reason": "",
        "computedAt": computed.at,
        "ageSeconds": cache.age(),
        "tookSeconds": computed.forecast.took_s,
        "horizonSeconds": computed.forecast.horizon_s,
        "items": items,
    }


@router.post(
    "/forecast/dry-run",
    summary="Forecast one workload manifest as if submitted now; validated like apply, never stored.",
    openapi_extra=APPLY_BODY,
)
async def dry_run(request: Request, user: User) -> dict[str, Any]:
    text = await request_text(request)
    result: dict[str, Any] = await run_in_threadpool(_dry_run, request, user, text)
    return result


def _dry_run(request: Request, user: UserRecord, text: str) -> dict[str, Any]:
    items = apply.read_request(text)
    for item in items:
        if item.key[0]:
            authorize(user, "apply", item.key[0], item.key[1], shown=item.kind)
    store: Store = request.app.state.store
    configuration = request.app.state.stored_configuration
    workloads, warnings = apply.validate(store, items, text, request.app.state.nodes, configuration)
    if len(items) != 1 or not items[0].is_workload:
        kinds = ", ".join(i.kind for i in items)
        raise ApiError(
            422, f"a dry run forecasts exactly one workload (a Job, JobSet...); the request holds {kinds}"
        )
    item = items[0]
    _, namespace, name = item.key
    cache = _cache(request)
    if cache is None:
        raise ApiError(503, f"no forecast here: {NO_LOOP}")
    workload = workloads[(namespace, name)]
    document = apply.stamped(item.document, user.name)
    profiled = manifest_profile(namespace, workload.queue_name, document)
    done = cache.dry_run(dataclasses.replace(workload, name=name), profiled)
    if done is None:
        raise ApiError(503, f"no forecast here: {NO_LOOP}")
    computed, key = done
    eta = computed.forecast.get(key)
    view = eta_view(eta, computed) if eta is not None else None
    if view is not None:
        view["name"] = name
    return {
        "dryRun": True,
        "namespace": namespace,
        "name": name,
        "eta": view,
        "warnings": [diagnostic_document(d) for d in warnings],
    }
