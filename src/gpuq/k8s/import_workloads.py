"""Kueue Workloads of a dump: the current state (pending and admitted) and the history as trace rows.

Times come from the Workload's own record: ``creationTimestamp`` is the
submission, the ``Admitted`` condition (else ``QuotaReserved``) the admission,
the ``Finished`` condition the end, so a finished run lasted finish − admission.
A workload still running has no end yet: its declared duration
(``gpuq.dev/expected-duration``, else ``spec.maximumExecutionTimeSeconds``) is
used, else the time it has run so far, a lower bound said so in a warning. A
pending workload without a declared duration gets ``assume_s`` when given, else
stays out of the trace (warned). Rows use the generic CSV format
(docs/traces.md), one per pod set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuq.api import convert, kueue
from gpuq.api.diagnostics import Diagnostic
from gpuq.api.workload_gates import expected_duration
from gpuq.core.nodes import GPU, GPU_MILLI
from gpuq.core.quantity import format_amount
from gpuq.k8s.import_dump import DumpObject, cleaned
from gpuq.sim.traces.generic import OPTIONAL, REQUIRED

COLUMNS = (*REQUIRED, *OPTIONAL)
TRACE_RESOURCES = frozenset({"cpu", "memory", GPU, GPU_MILLI, "ephemeral-storage"})
PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class Times:
    """A workload's recorded instants, seconds since the epoch (None: not recorded)."""

    created: float | None
    admitted: float | None
    finished: float | None
    failed: bool


@dataclass
class WorkloadImport:
    """The current workloads (cleaned, with status) and the trace rows, with counts by state."""

    state: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, str]] = field(default_factory=list)
    history: list[dict[str, str]] = field(default_factory=list)  # rows of finished runs
    counts: dict[str, int] = field(default_factory=lambda: {"pending": 0, "admitted": 0, "finished": 0})
    origin_s: float = 0.0
    diagnostics: list[Diagnostic] = field(default_factory=list)


def times_of(model: kueue.Workload) -> Times:
    """Creation, admission (Admitted, else QuotaReserved) and end (Finished), each when True."""
    true = {c.type: c for c in model.status.conditions if c.status == "True"}
    admitted = true.get("Admitted") or true.get("QuotaReserved")
    finished = true.get("Finished")
    return Times(
        model.metadata.creation_timestamp,
        admitted.last_transition_time if admitted is not None else None,
        finished.last_transition_time if finished is not None else None,
        finished is not None and str(getattr(finished, "reason", "")) == "Failed",
    )


def latest_time(objects: Sequence[DumpObject]) -> float | None:
    """The newest timestamp of the dump's workloads and node heartbeats: about when it was taken."""
    found: list[float] = []
    for obj in objects:
        if obj.kind == "Workload":
            found += [t for t in (obj.model.metadata.creation_timestamp,) if t is not None]
            found += [c.last_transition_time for c in obj.model.status.conditions if c.last_transition_time]
        elif obj.kind == "Node":
            for condition in (obj.data.get("status") or {}).get("conditions") or []:
                stamp = condition.get("lastHeartbeatTime") if isinstance(condition, dict) else None
                if stamp:
                    found.append(kueue.parse_timestamp(stamp))
    return max(found, default=None)


def import_workloads(
    workloads: Sequence[DumpObject],
    cluster_queues: set[str],
    local_queues: set[tuple[str, str]],
    now: float,
    assume_s: float | None,
) -> WorkloadImport:
    """State and trace rows of ``workloads``; contradictions become diagnostics naming the field."""
    out = WorkloadImport()
    timed = [(obj, times_of(obj.model)) for obj in workloads]
    out.origin_s = min((t.created for _, t in timed if t.created is not None), default=now)
    for obj, times in sorted(timed, key=lambda p: (p[1].created or 0.0, p[0].namespace, p[0].name)):
        state = _state(obj, times)
        out.counts[state] += 1
        _check(obj, state, cluster_queues, local_queues, out.diagnostics)
        if state != "finished":
            out.state.append(cleaned(obj.data, keep_status=True, keep_created=True))
        blocked = _untraceable(obj)
        if blocked is not None:
            out.diagnostics.append(blocked)
            continue
        duration = _duration(obj, state, times, now, assume_s, out.diagnostics)
        if duration is not None and times.created is not None:
            rows = _rows(obj, times.created - out.origin_s, duration, times.failed, out.diagnostics)
            out.rows += rows
            out.history += rows if state == "finished" else []
    return out


def _state(obj: DumpObject, times: Times) -> str:
    if times.finished is not None:
        return "finished"
    return "admitted" if obj.model.status.admission is not None else "pending"


def _check(
    obj: DumpObject,
    state: str,
    cluster_queues: set[str],
    local_queues: set[tuple[str, str]],
    diagnostics: list[Diagnostic],
) -> None:
    model: kueue.Workload = obj.model
    admission = model.status.admission
    if "status" not in obj.data:
        message = "no status (Kueue has not reconciled it yet): imported as pending"
        diagnostics.append(obj.diagnostic(("status",), message, "warning"))
    if admission is not None and admission.cluster_queue not in cluster_queues:
        message = f"admitted to ClusterQueue {admission.cluster_queue!r}, which the dump does not hold"
        severity = "warning" if state == "finished" else "error"
        diagnostics.append(obj.diagnostic(("status", "admission", "clusterQueue"), message, severity))
    if (obj.namespace or "default", model.spec.queue_name) not in local_queues:
        message = f"LocalQueue {model.spec.queue_name!r} is not in the dump (namespace {obj.namespace!r})"
        if state != "finished":
            message += ": imported; it stays pending, as Kueue leaves it"
        severity = "warning"
        diagnostics.append(obj.diagnostic(("spec", "queueName"), message, severity))


def _duration(
    obj: DumpObject, state: str, times: Times, now: float, assume_s: float | None, out: list[Diagnostic]
) -> float | None:
    """Seconds of run time for the trace row, or None (with a warning) when there is none to give."""
    if times.created is None:
        out.append(obj.diagnostic(("metadata",), "no creationTimestamp: left out of the trace", "warning"))
        return None
    if state == "finished":
        return _finished_duration(obj, times, out)
    declared = _declared(obj.model)
    if declared is not None:
        return declared
    if state == "admitted" and times.admitted is not None and now > times.admitted:
        ran = now - times.admitted
        message = (
            f"still running with no declared duration: the trace uses the {ran:.0f}s it has run so far, "
            "a lower bound (set gpuq.dev/expected-duration to do better)"
        )
        out.append(obj.diagnostic(("status", "conditions"), message, "warning"))
        return ran
    if assume_s is not None:
        return assume_s
    message = f"{state} with no declared duration: left out of the trace (give --assume-duration)"
    out.append(obj.diagnostic(("metadata", "annotations"), message, "warning"))
    return None


def _finished_duration(obj: DumpObject, times: Times, out: list[Diagnostic]) -> float | None:
    where = ("status", "conditions")
    if times.admitted is None:
        out.append(obj.diagnostic(where, "finished but never admitted: left out of the trace", "warning"))
        return None
    if times.finished is not None and times.finished <= times.admitted:
        message = "the Finished condition is not later than the admission: left out of the trace"
        out.append(obj.diagnostic(where, message, "warning"))
        return None
    assert times.finished is not None
    return times.finished - times.admitted


def _declared(model: kueue.Workload) -> float | None:
    seconds, _problem = expected_duration(model.metadata.annotations.get("gpuq.dev/expected-duration"))
    if seconds is not None:
        return seconds
    limit = model.spec.maximum_execution_time_seconds
    return float(limit) if limit else None


def _untraceable(obj: DumpObject) -> Diagnostic | None:
    """Why the workload cannot be a trace row (a resource the format cannot hold), or None."""
    for index, ps in enumerate(obj.model.spec.pod_sets):
        requests = convert.pod_set(ps).requests
        other = sorted(r for r, v in requests.items() if v and r not in TRACE_RESOURCES)
        if other:
            message = (
                f"requests {', '.join(other)}, which the trace format cannot hold: left out of the trace"
            )
            return obj.diagnostic(("spec", "podSets", index), message, "warning")
    return None


def _rows(
    obj: DumpObject, submit_s: float, duration_s: float, failed: bool, out: list[Diagnostic]
) -> list[dict[str, str]]:
    """One generic-trace row per pod set (see :func:`_untraceable` for workloads that get none)."""
    model: kueue.Workload = obj.model
    pod_sets = model.spec.pod_sets
    rows = []
    for ps in pod_sets:
        requests = convert.pod_set(ps).requests
        name = obj.name if len(pod_sets) == 1 else f"{obj.name}-{ps.name}"
        rows.append(_row(obj, model, name, ps, requests, submit_s, duration_s, failed))
    if len(pod_sets) > 1:
        message = f"{len(pod_sets)} pod sets become {len(pod_sets)} trace rows, no longer admitted together"
        out.append(obj.diagnostic(("spec", "podSets"), message, "warning"))
    if any(ps.topology_request is not None for ps in pod_sets):
        message = "the trace format holds no topology request: the replay places it without one"
        out.append(obj.diagnostic(("spec", "podSets"), message, "warning"))
    return rows


def _row(
    obj: DumpObject,
    model: kueue.Workload,
    name: str,
    ps: kueue.PodSet,
    requests: Mapping[str, int],
    submit_s: float,
    duration_s: float,
    failed: bool,
) -> dict[str, str]:
    gpus = str(requests[GPU]) if requests.get(GPU) else f"{requests.get(GPU_MILLI, 0) / 1000:g}"
    return {
        "name": name,
        "namespace": obj.namespace or "default",
        "queue": model.spec.queue_name,
        "submit_s": _seconds(submit_s),
        "duration_s": _seconds(duration_s),
        "priority": _priority(model),
        "pods": str(ps.count),
        "gpus": gpus,
        "cpu": format_amount("cpu", requests["cpu"]) if requests.get("cpu") else "",
        "memory": format_amount("memory", requests["memory"]) if requests.get("memory") else "",
        "gpu_model": ps.template.spec.node_selector.get(PRODUCT_LABEL, ""),
        "checkpoint_s": "",
        "status": "failed" if failed else "",
    }


def _priority(model: kueue.Workload) -> str:
    """A WorkloadPriorityClass by name (the trace resolves it), else the recorded integer."""
    ref = model.priority_class()
    if ref is not None and ref[0] == kueue.WPC_SOURCE:
        return ref[1]
    return str(model.spec.priority) if model.spec.priority is not None else ""


def _seconds(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")
