"""Rows of the CLI's tables from the API's documents: what ``gpuq get`` and ``describe`` print.

Pure functions of the JSON the server returns, so the CLI stays a thin shell and the
shapes can be tested without a terminal.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from gpuq.core.lifecycle.states import ENDED, WorkloadState

Row = tuple[str, ...]

WORKLOAD_COLUMNS = (
    "namespace",
    "name",
    "kind",
    "queue",
    "cluster queue",
    "priority",
    "state",
    "age",
    "eta",
    "message",
)
WORKLOAD_WIDE_COLUMNS = (*WORKLOAD_COLUMNS[:-1], "flavors", "requeues", "admitted", "started", "message")
CLUSTER_QUEUE_COLUMNS = ("name", "cohort", "nominal quota", "pending", "admitted")
LOCAL_QUEUE_COLUMNS = ("namespace", "name", "cluster queue", "pending", "admitted")
PENDING_COLUMNS = ("position", "in local queue", "workload", "local queue", "priority", "why it waits")
NODE_COLUMNS = ("name", "gpu model", "gpus in use", "devices in use", "running pods")
POD_COLUMNS = ("pod", "state", "node", "devices", "attempt", "exit code", "started", "finished")
CONDITION_COLUMNS = ("time", "type", "status", "reason", "message")


def age(since: float | None, now: float | None = None) -> str:
    """``12s``, ``5m``, ``2h``, ``3d`` since ``since`` (epoch seconds); ``-`` when unknown."""
    if since is None:
        return "-"
    seconds = max(0, int((time.time() if now is None else now) - since))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def clock(at: float | None) -> str:
    """An epoch time as UTC ``HH:MM:SS`` (``-`` when unset)."""
    return "-" if at is None else datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S")


def span(seconds: float) -> str:
    """A duration as people read it: ``45s``, ``12m``, ``2h05m``, ``3d04h``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _in(at: float, now: float) -> str:
    return "now" if at <= now else f"in {span(at - now)}"


def _range(bounds: dict[str, Any] | None, now: float) -> str:
    """`` (8m–25m)``: a range relative to ``now``; empty when both ends read the same."""
    bounds = bounds or {}
    earliest, latest = bounds.get("earliest"), bounds.get("latest")
    if earliest is None:
        return ""
    low = span(earliest - now)
    high = span(latest - now) if latest is not None else "?"
    return "" if low == high else f" ({low}–{high})"


FINISHED = tuple(s.value for s in WorkloadState if s in ENDED)


def eta_text(workload: dict[str, Any], now: float | None = None) -> str:
    """The ETA column: ``in 12m (8m–25m)`` for a waiting workload (``≈ in 3h`` from the queue model),
    ``ends in 30m`` for a running one, ``—`` beyond the forecast's horizon, ``-`` without a forecast,
    nothing once finished."""
    now = time.time() if now is None else now
    eta = workload.get("eta")
    if workload.get("state") in FINISHED:
        return ""
    if not eta:
        return "-"
    if workload.get("state") == "Running" or eta.get("state") == "Running":
        end = eta.get("endAt")
        return "—" if end is None else f"ends {_in(end, now)}{_range(eta.get('endRange'), now)}"
    start = eta.get("startAt")
    if start is None:
        return "—"
    rough = "≈ " if eta.get("method") == "queue model" else ""  # past the exact part of a deep queue
    return f"{rough}{_in(start, now)}{_range(eta.get('startRange'), now)}"


def forecast_summary(workload: dict[str, Any], now: float | None = None) -> list[tuple[str, str]]:
    """``describe workload``'s forecast: predicted admission, start (with its range) and end, and the
    runtime estimate with where it came from; nothing for a finished workload."""
    now = time.time() if now is None else now
    if workload.get("state") in FINISHED:
        return []
    eta = workload.get("eta")
    if not eta:
        return [("Forecast", "none yet (the leader forecasts every few seconds; see docs/serve.md)")]
    horizon = span(eta.get("horizonSeconds") or 0)

    def when(at: float | None, bounds: dict[str, Any] | None = None) -> str:
        if at is None:
            return f"beyond the forecast horizon ({horizon})"
        return f"{_in(at, now)} at {clock(at)}{_range(bounds, now)}"

    runtime = eta["runtime"]
    low, high = span(runtime["lowSeconds"]), span(runtime["highSeconds"])
    pairs = [("Forecast", f"made {age(eta['computedAt'], now)} ago")]
    if eta["state"] == "Pending" and workload.get("state") == "Pending":
        pairs.append(("Admission", when(eta.get("admitAt"))))
    if eta["state"] != "Running" and workload.get("state") != "Running":
        pairs.append(("Start", when(eta.get("startAt"), eta.get("startRange"))))
    pairs.append(("End", when(eta.get("endAt"), eta.get("endRange"))))
    pairs.append(("Runtime", f"{low if low == high else f'{low}–{high}'} ({runtime['text']})"))
    if eta.get("method") == "queue model":
        pairs.append(("Method", "queue model: deep in a long queue, past the admissions simulated exactly"))
    return pairs


def workload_rows(items: list[dict[str, Any]]) -> list[Row]:
    return [
        (
            w["namespace"],
            w["name"],
            w["kind"],
            w["queue"],
            w["clusterQueue"] or "-",
            str(w["priority"]),
            w["state"],
            age(w["createdAt"]),
            eta_text(w),
            w["message"],
        )
        for w in items
    ]


def workload_wide_rows(items: list[dict[str, Any]]) -> list[Row]:
    """``-o wide``: the workload rows with the flavors of the admission, requeues and times."""
    rows = []
    for w, row in zip(items, workload_rows(items), strict=True):
        admission = w.get("admission") or {}
        flavors = sorted(
            {f for ps in admission.get("podSetAssignments") or [] for f in (ps.get("flavors") or {}).values()}
        )
        extra = (", ".join(flavors) or "-", str(w.get("requeueCount") or 0))
        rows.append((*row[:-1], *extra, clock(w.get("admittedAt")), clock(w.get("startedAt")), row[-1]))
    return rows


def cluster_queue_rows(items: list[dict[str, Any]]) -> list[Row]:
    rows: list[Row] = []
    for queue in items:
        spec = queue["manifest"].get("spec") or {}
        quotas = [
            f"{flavor.get('name')}: "
            + ", ".join(f"{r.get('name')}={r.get('nominalQuota')}" for r in flavor.get("resources") or [])
            for group in spec.get("resourceGroups") or []
            for flavor in group.get("flavors") or []
        ]
        status = queue.get("status") or {}
        cohort = spec.get("cohortName") or spec.get("cohort") or "-"
        rows.append(
            (
                queue["name"],
                str(cohort),
                "; ".join(quotas),
                str(status.get("pendingWorkloads", 0)),
                str(status.get("admittedWorkloads", 0)),
            )
        )
    return rows


def local_queue_rows(items: list[dict[str, Any]]) -> list[Row]:
    return [
        (
            q["namespace"],
            q["name"],
            str((q["manifest"].get("spec") or {}).get("clusterQueue", "")),
            str((q.get("status") or {}).get("pendingWorkloads", 0)),
            str((q.get("status") or {}).get("admittedWorkloads", 0)),
        )
        for q in items
    ]


def pending_rows(items: list[dict[str, Any]]) -> list[Row]:
    return [
        (
            str(i["positionInClusterQueue"]),
            str(i["positionInLocalQueue"]),
            f"{i['namespace']}/{i['name']}",
            i["localQueue"],
            str(i["priority"]),
            i["reason"],
        )
        for i in items
    ]


def node_rows(items: list[dict[str, Any]]) -> list[Row]:
    return [
        (
            n["name"],
            n["gpuModel"] or "-",
            f"{len(n['devicesInUse'])}/{n['gpus']}",
            ",".join(n["devicesInUse"]) or "-",
            str(n["runningPods"]),
        )
        for n in items
    ]


def pod_rows(pods: list[dict[str, Any]]) -> list[Row]:
    return [
        (
            p["name"],
            p["state"],
            p["node"] or "-",
            ",".join(p["devices"]) or "-",
            str(p["attempt"]),
            "-" if p["exitCode"] is None else str(p["exitCode"]),
            clock(p["startedAt"]),
            clock(p["finishedAt"]),
        )
        for p in pods
    ]


def condition_rows(conditions: list[dict[str, Any]]) -> list[Row]:
    return [(clock(c["time"]), c["type"], c["status"], c["reason"], c["message"]) for c in conditions]


EVENT_COLUMNS = ("type", "reason", "age", "message")


def event_rows(events: list[dict[str, Any]], now: float | None = None) -> list[Row]:
    """``kubectl describe``'s Events: oldest first, the age of each."""
    return [(e["type"], e["reason"], age(e["time"], now), e["message"]) for e in events]


def workload_summary(workload: dict[str, Any]) -> list[tuple[str, str]]:
    """``describe workload``'s header: label and value pairs, why it waits included when pending."""
    admission = workload.get("admission") or {}
    flavors = sorted(
        {f for ps in admission.get("podSetAssignments") or [] for f in (ps.get("flavors") or {}).values()}
    )
    pairs = [
        ("Name", f"{workload['namespace']}/{workload['name']}"),
        ("Kind", workload["kind"]),
        ("State", workload["state"]),
        ("Queue", f"{workload['queue']} -> {workload['clusterQueue'] or '-'}"),
        ("Priority", str(workload["priority"])),
        ("Flavors", ", ".join(flavors) or "-"),
        ("Created", f"{clock(workload['createdAt'])} ({age(workload['createdAt'])} ago)"),
        ("Admitted", clock(workload["admittedAt"])),
        ("Started", clock(workload["startedAt"])),
        ("Finished", clock(workload["finishedAt"])),
        ("Requeued", str(workload["requeueCount"])),
    ]
    if workload["message"]:
        label = "Why it waits" if workload["state"] == "Pending" else "Message"
        pairs.append((label, workload["message"]))
    return pairs
