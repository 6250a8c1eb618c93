"""Rows of the CLI's tables from the API's documents: what ``gpuq get`` and ``describe`` print.

Pure functions of the JSON the server returns, so the CLI stays a thin shell and the
shapes can be tested without a terminal.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

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
    "message",
)
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
            w["message"],
        )
        for w in items
    ]


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
