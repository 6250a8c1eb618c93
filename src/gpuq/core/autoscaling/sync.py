"""The replica count of an autoscaled service, decided once for both shells.

One sync of a service's HPA or ScaledObject, and the ReplicaSet's plan for reaching the new count.
The simulator (:mod:`gpuq.sim.serving.fleet`) and the live controller
(:mod:`gpuq.run.serving.controller`) call these functions; each keeps only what it observes (the
simulator's modelled metrics, the live router's measurements, each replica's phase) and how it
applies the result (the simulator submits and withdraws workloads, the live controller writes the
store and drains ready replicas).

- :func:`sync`: one pass of the controller's sync loop: :func:`gpuq.core.autoscaling.hpa.decide` for
  an :class:`~gpuq.core.autoscaling.spec.HPASpec`, :func:`gpuq.core.autoscaling.keda.decide` for a
  :class:`~gpuq.core.autoscaling.keda.ScaledObjectSpec`; the count wanted, a reason a person can
  read and the autoscaler's new memory.
- :func:`activate`: requests are held in front of a service that has no replica; a ScaledObject
  polls at once (its router trigger is active), an HPA that may scale to zero asks for one replica.
- :func:`scale_down_order` / :func:`scale_plan`: which ordinals a scale-up creates and which
  replicas a scale-down removes, in the ReplicaSet's order (``ActivePodsWithRanks`` as both shells
  read it): not admitted (unscheduled) first, then admitted but not yet started, then started but
  not ready, then ready; within a phase the newest (latest created, then highest ordinal) first.

Readings are keyed by metric name (HPA) or trigger name (KEDA): a KEDA trigger's value is an
``int`` in milli-units (or a :class:`~gpuq.core.autoscaling.replicas.MetricFetchError`); an HPA
metric's is a :data:`~gpuq.core.autoscaling.replicas.MetricReading`.

No I/O, clock or randomness: time is the ``now`` argument, state goes in and comes out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import IntEnum

from gpuq.core.autoscaling import hpa, keda
from gpuq.core.autoscaling.hpa import HPAState
from gpuq.core.autoscaling.keda import ScaledObjectSpec, ScaledObjectState
from gpuq.core.autoscaling.replicas import MetricFetchError, MetricReading, Pod
from gpuq.core.autoscaling.spec import HPASpec

Autoscaler = HPASpec | ScaledObjectSpec
AutoscalerState = HPAState | ScaledObjectState
Reading = int | MetricReading
"""A KEDA trigger's value in milli-units (``int``), or an HPA metric's reading."""

NO_CHANGE = "NoChange"


@dataclass(frozen=True)
class SyncResult:
    """A sync's outcome: the replica count to set, why (a line a person can read), the new state."""

    replicas: int
    reason: str
    state: AutoscalerState


def sync_period_s(autoscaler: Autoscaler) -> float:
    """How often a shell calls :func:`sync` (``--horizontal-pod-autoscaler-sync-period``)."""
    if isinstance(autoscaler, ScaledObjectSpec):
        return float(autoscaler.hpa_config.sync_period_s)
    return float(autoscaler.config.sync_period_s)


def _keda_readings(readings: Mapping[str, Reading]) -> dict[str, int | MetricFetchError]:
    out: dict[str, int | MetricFetchError] = {}
    for name, reading in readings.items():
        if not isinstance(reading, int | MetricFetchError):
            raise TypeError(
                f"KEDA trigger {name!r}: a value in milli-units or a fetch error, got {reading!r}"
            )
        out[name] = reading
    return out


def _hpa_readings(readings: Mapping[str, Reading]) -> dict[str, MetricReading]:
    out: dict[str, MetricReading] = {}
    for name, reading in readings.items():
        if isinstance(reading, int):
            raise TypeError(f"HPA metric {name!r}: a metric reading, got the trigger value {reading!r}")
        out[name] = reading
    return out


def sync(
    autoscaler: Autoscaler,
    state: AutoscalerState | None,
    desired: int,
    existing: int,
    pods: tuple[Pod, ...],
    readings: Mapping[str, Reading],
    now: float,
) -> SyncResult:
    """One HPA or KEDA sync of a scale target whose spec asks ``desired`` replicas.

    ``existing`` is how many pods exist (the target's ``status.replicas``), ``pods`` their
    readiness, ``readings`` what the metrics read now. A state of the other autoscaler's kind
    (or ``None``) starts from nothing. The reason is the HPA's rescale reason, else KEDA's poll
    action, else the HPA's error, else ``NoChange``.
    """
    if isinstance(autoscaler, ScaledObjectSpec):
        keda_state = state if isinstance(state, ScaledObjectState) else ScaledObjectState()
        observation = keda.KedaObservation(desired, _keda_readings(readings), pods, existing)
        decision, new_state = keda.decide(autoscaler, keda_state, observation, now)
        why = decision.action.value if decision.action is not None else ""
        if decision.hpa is not None and decision.hpa.rescale:
            why = decision.hpa.reason
        return SyncResult(decision.replicas, why or NO_CHANGE, new_state)
    hpa_state = state if isinstance(state, HPAState) else HPAState()
    observation_h = hpa.HPAObservation(desired, _hpa_readings(readings), pods, existing)
    decision_h, new_hpa = hpa.decide(autoscaler, hpa_state, observation_h, now)
    reason = decision_h.reason if decision_h.rescale else (decision_h.error or NO_CHANGE)
    return SyncResult(decision_h.desired_replicas, reason, new_hpa)


def activate(
    autoscaler: Autoscaler | None,
    state: AutoscalerState | None,
    pods: tuple[Pod, ...],
    readings: Mapping[str, Reading],
    held: int,
    now: float,
) -> SyncResult | None:
    """``held`` requests wait for a service at zero: a sync now with the KEDA poll due (so a trigger
    that is active scales it from zero without waiting for ``pollingInterval``), or, for an HPA that
    may scale to zero, one replica. None: nothing to do (a fixed count of zero stays at zero)."""
    if isinstance(autoscaler, ScaledObjectSpec):
        keda_state = state if isinstance(state, ScaledObjectState) else ScaledObjectState()
        due = replace(keda_state, last_poll_s=None)
        result = sync(autoscaler, due, 0, len(pods), pods, readings, now)
        return replace(result, reason=f"activated by {held} held request(s): {result.reason}")
    if isinstance(autoscaler, HPASpec) and autoscaler.min_replicas == 0:
        hpa_state = state if isinstance(state, HPAState) else HPAState()
        return SyncResult(1, f"activated by {held} held request(s)", hpa_state)
    return None


class ReplicaPhase(IntEnum):
    """Where a replica is, in the ReplicaSet's deletion rank (lower goes first)."""

    PENDING = 0  # not admitted: waiting for quota, or requeued (an unscheduled pod)
    ADMITTED = 1  # quota reserved, not yet started on a node
    STARTING = 2  # started (bound, its process running), not ready
    READY = 3  # its readiness probe passed


@dataclass(frozen=True)
class ReplicaView:
    """What the scale plan reads of one replica: its name, ordinal, creation time and phase."""

    name: str
    ordinal: int
    created_s: float
    phase: ReplicaPhase


def scale_down_order(replicas: Iterable[ReplicaView]) -> tuple[ReplicaView, ...]:
    """The replicas in the order a scale-down removes them: by phase (pending, admitted, starting,
    ready), then newest first (latest creation, then highest ordinal)."""
    return tuple(sorted(replicas, key=lambda r: (r.phase, -r.created_s, -r.ordinal)))


@dataclass(frozen=True)
class ScalePlan:
    """How to reach a count: the ordinals to create (in order) and the replicas to remove (in order)."""

    add: tuple[int, ...] = ()
    remove: tuple[str, ...] = ()


def scale_plan(replicas: Iterable[ReplicaView], wanted: int, next_ordinal: int) -> ScalePlan:
    """From the replicas that exist to ``wanted``: new ordinals from ``next_ordinal`` up, or the
    first victims of :func:`scale_down_order`; nothing when the count is already right."""
    existing = tuple(replicas)
    if len(existing) < wanted:
        return ScalePlan(add=tuple(range(next_ordinal, next_ordinal + wanted - len(existing))))
    victims = scale_down_order(existing)[: len(existing) - wanted]
    return ScalePlan(remove=tuple(r.name for r in victims))
