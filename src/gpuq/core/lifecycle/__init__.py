"""The workload lifecycle: one pure state machine, driven by the simulator and the live loop.

Events with a time go in (:mod:`.events`), effects come out as frozen data
(:mod:`.effects`), states and their legal edges are a table (:mod:`.states`).
:class:`~gpuq.core.lifecycle.machine.Lifecycle` owns everything that happens
to a workload after a decision: the cycles-until-quiet loop, admission-check
states, eviction and requeue with Kueue's backoff, waitForPodsReady, pod
restarts under ``backoffLimit``, deadlines and deactivation. See
``docs/design/0003-lifecycle.md``.
"""

from gpuq.core.lifecycle.effects import (
    Effect,
    Ended,
    NodeDown,
    NodeUp,
    Noted,
    Preempted,
    Released,
    Requeued,
    Reserved,
    RestartPod,
    StartPods,
    StateChanged,
    StopPods,
    WaitReason,
    WakeAt,
)
from gpuq.core.lifecycle.events import JobPolicy
from gpuq.core.lifecycle.machine import Life, Lifecycle, LifecycleHooks
from gpuq.core.lifecycle.states import IllegalTransition, Timer, WorkloadState

__all__ = [
    "Effect",
    "Ended",
    "IllegalTransition",
    "JobPolicy",
    "Life",
    "Lifecycle",
    "LifecycleHooks",
    "NodeDown",
    "NodeUp",
    "Noted",
    "Preempted",
    "Released",
    "Requeued",
    "Reserved",
    "RestartPod",
    "StartPods",
    "StateChanged",
    "StopPods",
    "Timer",
    "WaitReason",
    "WakeAt",
    "WorkloadState",
]
