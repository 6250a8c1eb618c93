"""PodDisruptionBudgets over a cycle's preemptions: one rule for the simulator and the live loop.

Kueue's victim search does not look at PodDisruptionBudgets (the eviction API would refuse later).
gpuq checks them on the cycle's decisions instead: a preemptor whose evictions would take a
protected service below its budget keeps none of them and waits, with the budget named. A victim
that is not ready goes only when the budget allows unhealthy pods to go, or the service is at or
above its budget anyway; each ready victim uses one of the disruptions the budget allows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from gpuq.core.decisions import CycleResult, Pending


@dataclass(frozen=True, slots=True)
class Protected:
    """A replica under a PodDisruptionBudget, with its service's state at the cycle."""

    service: str  # the service's name, as messages show it
    budget: str  # the PodDisruptionBudget's name
    healthy: int  # the service's ready replicas
    required: int  # replicas the budget wants healthy
    ready: bool  # this replica is ready
    unhealthy_may_go: bool  # unhealthyPodEvictionPolicy: AlwaysAllow


def vet_preemptions(
    result: CycleResult,
    protected: Callable[[str], Protected | None],
    queue_of: Callable[[str], str | None] = lambda _: None,
) -> CycleResult:
    """``result`` without the evictions of any preemptor that would break a budget; those
    preemptors wait with the budget named (``queue_of`` gives each one's ClusterQueue)."""
    if not result.preempted:
        return result
    allowed: dict[str, int] = {}
    blocked: dict[str, str] = {}
    for preempt in result.preempted:
        victim = protected(preempt.workload)
        if victim is None or preempt.by in blocked:
            continue
        left = allowed.setdefault(victim.service, victim.healthy - victim.required)
        if not victim.ready:
            if victim.unhealthy_may_go or victim.healthy >= victim.required:
                continue
        elif left > 0:
            allowed[victim.service] = left - 1
            continue
        blocked[preempt.by] = (
            f"PodDisruptionBudget {victim.budget} of {victim.service} allows no more disruptions "
            f"({victim.healthy} healthy, {victim.required} required): {preempt.workload} is not preempted"
        )
    if not blocked:
        return result
    kept = tuple(p for p in result.preempted if p.by not in blocked)
    waiting = tuple(Pending(by, "Pending", why, queue_of(by)) for by, why in sorted(blocked.items()))
    return dataclasses.replace(result, preempted=kept, pending=result.pending + waiting)
