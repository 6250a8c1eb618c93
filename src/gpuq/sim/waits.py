"""Who waited, why, and whether deadlines held: the ``waits`` and ``deadlines`` blocks of a variant.

The reasons are what the engine recorded for each workload while it waited
(:attr:`gpuq.sim.simulator.SimRun.waits`: Kueue's pending message each time it changed, an
eviction's message, an admission check's), never guessed afterwards. A wait is told by its
*cause*, the recorded message that held longest while it waited:

1. the stretch before its first message is spent behind the head of its ClusterQueue that was
   waiting when it arrived (``behind``; a StrictFIFO head blocks everything after it), or just
   queued (``queued``) when no head was waiting;
2. each message covers the time from when it began to the next one, or to when its pods were next
   bound (a wait counts until its pods first ran and, after each eviction, until they ran again);
   after an eviction, the messages until its pods are bound again count for the eviction (a
   preempted workload waits because it was preempted, whatever quota message follows);
3. a message is sorted into a kind: ``quota`` (the flavors and resources it lacked), ``topology``
   (no domain fits), ``provisioning`` (an admission check such as a ProvisioningRequest is not
   Ready), ``no-node`` (quota reserved, no node has room yet), ``preempting`` (its victims are
   still being evicted), ``preempted`` / ``evicted`` (after an eviction), ``inadmissible``, or
   ``other``;
4. the cause is the kind of the longest stretch (ties: the earliest).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuq.core.lifecycle import WorkloadState
from gpuq.sim.simulator import SimRun

TOP_WAITS = 15
NO_LONGER_FITS = "Workload no longer fits after processing another workload"
MAX_MESSAGES = 12
_QUOTA = re.compile(r"insufficient (?:unused )?quota for (\S+) in flavor ([^,\s;]+)")
_EVICTED = frozenset({"preempted", "evicted"})
_EVICTION_REASONS = frozenset({"PodsReadyTimeout", "Evicted", "NodeFailures", "Retrying"})


@dataclass(frozen=True, slots=True)
class Cause:
    """Why a workload waited: ``kind`` (module docstring, step 3) and a line a person reads."""

    kind: str
    text: str


def classify(reason: str, message: str) -> Cause:
    """The kind of one recorded message (step 3 of the module docstring)."""
    if message.startswith("Preempted by") or reason == "Preempted":
        return Cause("preempted", message.split(" (", 1)[0].replace("Preempted", "preempted", 1))
    if reason in _EVICTION_REASONS:
        return Cause("evicted", f"evicted: {message}")
    if reason == "Inadmissible":
        return Cause("inadmissible", message)
    if "waiting for admission checks" in message:
        checks = message.split("waiting for admission checks:", 1)[1].strip()
        return Cause("provisioning", f"capacity being provisioned (admission checks {checks})")
    if reason == "TopologyPlacementFailed" or "topology" in message.lower():
        return Cause("topology", f"topology: {message}")
    if message.startswith("Waiting for preempted workloads"):
        return Cause("preempting", message[0].lower() + message[1:])
    shortages: dict[str, list[str]] = {}
    for resource, flavor in _QUOTA.findall(message):
        flavors = shortages.setdefault(resource, [])
        if flavor not in flavors:
            flavors.append(flavor)
    if shortages:
        return Cause("quota", "quota: " + "; ".join(f"{r} in {', '.join(f)}" for r, f in shortages.items()))
    if message == NO_LONGER_FITS:
        return Cause("quota", "quota: taken by another workload admitted in the same cycle")
    if reason in ("NoNode", "Unschedulable"):
        return Cause("no-node", "no node with room: " + message)
    return Cause("other", message)


def waited_s(run: SimRun, end_s: float) -> tuple[float, bool] | None:
    """``(seconds from submission until its pods first ran, still waiting at the end)``; None for a
    workload never queued (inadmissible, or ended before it could wait)."""
    created = run.job.workload.creation_time
    if run.first_bound is not None:
        return run.first_bound - created, False
    if run.status == WorkloadState.INADMISSIBLE:
        return None
    stop = run.ended if run.ended is not None else end_s
    return max(stop - max(created, 0.0), 0.0), run.ended is None


def pending_s(run: SimRun, end_s: float) -> float:
    """Every simulated second it spent pending: until its pods first ran, and after each eviction
    (a workload of an initial state that waited before time 0 did so outside the run)."""
    waited = waited_s(run, end_s)
    if waited is None:
        return 0.0
    before_zero = max(-run.job.workload.creation_time, 0.0)
    return max(waited[0] - before_zero, 0.0) + run.requeued_wait_s


def stretches(run: SimRun, end_s: float) -> list[tuple[float, float, Cause]]:
    """``(start, seconds, cause)`` of each stretch it waited (steps 1 and 2): a message lasts until
    the next one or until its pods were next bound, the last one at most until the run's end."""
    created = max(run.job.workload.creation_time, 0.0)
    stop_s = run.ended if run.ended is not None else end_s
    bound = run.bound_times
    first_bound = bound[0] if bound else stop_s
    entries = run.waits
    out: list[tuple[float, float, Cause]] = []
    first = min(entries[0][0], first_bound) if entries else first_bound
    if first > created:
        head = f"behind {run.behind}, the head of its ClusterQueue" if run.behind else ""
        out.append((created, first - created, Cause("behind" if head else "queued", head or "queued")))
    evicted: tuple[Cause, float] | None = None  # the eviction it waits after, until bound again
    for index, (at, reason, message) in enumerate(entries):
        following = entries[index + 1][0] if index + 1 < len(entries) else stop_s
        next_bound = bound[i] if (i := bisect_left(bound, at)) < len(bound) else stop_s
        cause = classify(reason, message)
        if cause.kind in _EVICTED:
            evicted = (cause, next_bound)
        elif evicted is not None and at < evicted[1]:
            cause = evicted[0]
        out.append((at, max(min(following, next_bound, stop_s) - at, 0.0), cause))
    return out


def cause_of(run: SimRun, end_s: float) -> Cause | None:
    """The longest stretch's cause (step 4); None when the workload never waited."""
    if pending_s(run, end_s) <= 0:
        return None
    parts = [s for s in stretches(run, end_s) if s[1] > 0]
    if not parts:
        return None
    return max(parts, key=lambda s: (s[1], -s[0]))[2]


def reason_text(run: SimRun, end_s: float) -> str:
    """The ``reason`` column of workloads.csv: why it waited, then its last eviction or end."""
    cause = cause_of(run, end_s)
    parts = [cause.text if cause else "", run.reason]
    return "; ".join(p for p in dict.fromkeys(parts) if p)


def wait_table(
    runs: Iterable[SimRun], end_s: float, class_of: Callable[[str], str], top: int = TOP_WAITS
) -> dict[str, Any]:
    """The ``waits`` block: how many waited, per cause kind, and the ``top`` that were pending
    longest (until their pods first ran, and after evictions), each with its cause and the
    distinct messages it held, in order, with when each began after submission."""
    waited = [(p, run) for run in runs if (p := pending_s(run, end_s)) > 0]
    by_kind: dict[str, int] = {}
    for _, run in waited:
        cause = cause_of(run, end_s)
        if cause is not None:
            by_kind[cause.kind] = by_kind.get(cause.kind, 0) + 1
    waited.sort(key=lambda item: (-item[0], item[1].job.key))
    return {
        "waited": len(waited),
        "by_cause": dict(sorted(by_kind.items())),
        "longest": [_row(run, end_s, class_of) for _, run in waited[:top]],
    }


def _row(run: SimRun, end_s: float, class_of: Callable[[str], str]) -> dict[str, Any]:
    workload = run.job.workload
    wait_s, still = waited_s(run, end_s) or (0.0, False)
    cause = cause_of(run, end_s)
    created = workload.creation_time
    distinct: dict[str, tuple[float, str]] = {}
    for at, reason, message in run.waits:
        distinct.setdefault(message, (at, reason))
    messages = [
        {"since_s": _r(at - created), "reason": reason, "message": message}
        for message, (at, reason) in list(distinct.items())[:MAX_MESSAGES]
    ]
    return {
        "workload": workload.key,
        "team": run.job.team,
        "class": class_of(workload.name),
        "cluster_queue": run.cluster_queue or "",
        "gpus": _r(run.job.gpus),
        "submit_s": _r(created),
        "wait_s": _r(wait_s),
        "still_waiting": still,
        "requeued_wait_s": _r(run.requeued_wait_s),
        "cause": cause.kind if cause else "",
        "reason": cause.text if cause else "",
        "preempted_by": sorted(set(run.preempted_by)),
        "messages": messages,
        "messages_total": len(distinct),
    }


def deadline_table(runs: Sequence[SimRun], end_s: float) -> dict[str, Any] | None:
    """Per team, workloads with a deadline that met it (succeeded by then), missed it (succeeded
    late, failed, or unfinished past it) or are not yet finished (the run stopped before it);
    None when no workload declares one."""
    dated = [r for r in runs if r.job.workload.deadline is not None]
    if not dated:
        return None
    teams: dict[str, dict[str, int]] = {}
    late: list[tuple[float, SimRun]] = []
    for run in dated:
        verdict, lateness = _verdict(run, end_s)
        tally = teams.setdefault(run.job.team, {"declared": 0, "met": 0, "missed": 0, "unfinished": 0})
        tally["declared"] += 1
        tally[verdict] += 1
        if verdict == "missed":
            late.append((lateness, run))
    late.sort(key=lambda item: (-item[0], item[1].job.key))
    return {
        "teams": [{"name": team} | tally for team, tally in sorted(teams.items())],
        "missed": [
            {
                "workload": run.job.key,
                "team": run.job.team,
                "late_s": _r(lateness),
                "status": run.status.value,
            }
            for lateness, run in late[:TOP_WAITS]
        ],
    }


def _verdict(run: SimRun, end_s: float) -> tuple[str, float]:
    deadline = run.job.workload.deadline
    assert deadline is not None
    if run.status == WorkloadState.SUCCEEDED and run.ended is not None:
        return ("met", 0.0) if run.ended <= deadline else ("missed", run.ended - deadline)
    if run.ended is not None:  # failed, deactivated: it will not finish
        return "missed", max(run.ended - deadline, 0.0)
    return ("missed", end_s - deadline) if deadline < end_s else ("unfinished", 0.0)


def _r(value: float) -> float:
    rounded = round(float(value), 6)
    return 0.0 if rounded == 0 else rounded
