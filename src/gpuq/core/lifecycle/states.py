"""Workload states, the edges between them, and the timers a workload can wait on.

One enum for every layer: the engine, the simulator, the live loop, the store,
the API and the CLI print these values. ``Succeeded`` / ``Failed`` are the
reasons Kueue's ``Finished`` condition carries; ``Inactive`` is a workload
with ``spec.active: false`` (deactivated after a rejected admission check or
``backoffLimitCount`` requeues); ``Inadmissible`` is one that no queue routes.
"""

from __future__ import annotations

from enum import StrEnum


class WorkloadState(StrEnum):
    PENDING = "Pending"  # in its queue, holding nothing
    QUOTA_RESERVED = "QuotaReserved"  # holds quota; an admission check is not Ready yet
    ADMITTED = "Admitted"  # holds quota, checks Ready; pods bound or waiting for a node, or starting
    RUNNING = "Running"  # every pod started
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    INACTIVE = "Inactive"  # deactivated: it will not be queued again
    INADMISSIBLE = "Inadmissible"  # no LocalQueue / ClusterQueue routes it

    @property
    def holds_quota(self) -> bool:
        return self in HOLDING_QUOTA

    @property
    def ended(self) -> bool:
        return self in ENDED


HOLDING_QUOTA = frozenset({WorkloadState.QUOTA_RESERVED, WorkloadState.ADMITTED, WorkloadState.RUNNING})
ENDED = frozenset({WorkloadState.SUCCEEDED, WorkloadState.FAILED, WorkloadState.INACTIVE})
ACTIVE = (WorkloadState.PENDING, WorkloadState.QUOTA_RESERVED, WorkloadState.ADMITTED, WorkloadState.RUNNING)

_S = WorkloadState
TRANSITIONS: dict[WorkloadState, frozenset[WorkloadState]] = {
    _S.PENDING: frozenset({_S.QUOTA_RESERVED, _S.ADMITTED, _S.SUCCEEDED, _S.FAILED, _S.INACTIVE}),
    _S.QUOTA_RESERVED: frozenset({_S.ADMITTED, _S.PENDING, _S.SUCCEEDED, _S.FAILED, _S.INACTIVE}),
    _S.ADMITTED: frozenset({_S.RUNNING, _S.PENDING, _S.SUCCEEDED, _S.FAILED, _S.INACTIVE}),
    _S.RUNNING: frozenset({_S.PENDING, _S.SUCCEEDED, _S.FAILED, _S.INACTIVE}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.INACTIVE: frozenset(),
    _S.INADMISSIBLE: frozenset({_S.SUCCEEDED}),  # withdrawn
}


class IllegalTransition(RuntimeError):
    """A workload was asked to move along an edge the table does not have (a bug, never input)."""

    def __init__(self, key: str, old: WorkloadState, new: WorkloadState) -> None:
        super().__init__(f"{key}: illegal transition {old} -> {new}")
        self.key, self.old, self.new = key, old, new


def check_transition(key: str, old: WorkloadState, new: WorkloadState) -> None:
    if new != old and new not in TRANSITIONS[old]:
        raise IllegalTransition(key, old, new)


class Timer(StrEnum):
    """What a :class:`~gpuq.core.lifecycle.effects.WakeAt` wakes the lifecycle for."""

    PODS_READY = "PodsReadyTimeout"  # waitForPodsReady: admitted and not running by then
    REQUEUE = "Requeue"  # a requeue backoff ends: the workload may be tried again
    RESTART = "Restart"  # a failed pod's restart backoff ends
    DEADLINE = "ActiveDeadline"  # activeDeadlineSeconds since the first start
    MAX_EXECUTION = "MaximumExecutionTime"  # maximumExecutionTimeSeconds admitted, over all admissions
    PROTECTION = "PreemptionProtection"  # gpuq.dev/min-runtime since quota was reserved: preemptable now
    USAGE_SAMPLE = "AdmissionFairSharingSample"  # usageSamplingInterval elapsed (key: USAGE_SAMPLE_KEY)


USAGE_SAMPLE_KEY = ""
"""The key of the Admission Fair Sharing sampling timer: it belongs to no workload."""
