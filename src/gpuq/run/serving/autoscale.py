"""One live autoscaler sync: the router's measurements through :mod:`gpuq.core.autoscaling`.

The same ``hpa.decide`` / ``keda.decide`` the simulator calls, on what the router measured
(:mod:`gpuq.run.serving.router_metrics`) and the replicas' real states. A ScaledObject that may scale to
zero gets one more trigger, :data:`~gpuq.run.serving.router_metrics.ROUTER_TRIGGER`, active while the
router holds requests; its target is so large that it never asks for more than one replica. When
requests are held and the service has no replica, the controller runs a sync at once with the
poll due (:func:`activate`): KEDA's activation without waiting for ``pollingInterval``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuq.api.serving import Autoscaler, ServiceSpec
from gpuq.core.autoscaling import hpa, keda
from gpuq.core.autoscaling.keda import ScaledObjectSpec, ScaledObjectState, Trigger
from gpuq.core.autoscaling.replicas import Pod
from gpuq.core.autoscaling.spec import HPASpec
from gpuq.run.serving.router_metrics import ROUTER_TRIGGER, Load, hpa_readings, keda_readings

AutoscalerState = hpa.HPAState | ScaledObjectState
_NEVER_MORE_THAN_ONE_MILLI = 10**12


@dataclass(frozen=True)
class SyncResult:
    """A sync's outcome: the count to set and a line a person can read."""

    replicas: int
    reason: str
    state: AutoscalerState


def live_autoscaler(autoscaler: Autoscaler, sync_period_s: int | None) -> Autoscaler:
    """The autoscaler as run live: the controller's sync period when given, the router trigger added."""
    if isinstance(autoscaler, ScaledObjectSpec):
        if sync_period_s is not None:
            config = replace(autoscaler.hpa_config, sync_period_s=sync_period_s)
            autoscaler = replace(autoscaler, hpa_config=config)
        if autoscaler.min_replica_count == 0 and all(t.name != ROUTER_TRIGGER for t in autoscaler.triggers):
            router = Trigger(ROUTER_TRIGGER, "external-push", _NEVER_MORE_THAN_ONE_MILLI)
            autoscaler = replace(autoscaler, triggers=(*autoscaler.triggers, router))
        return autoscaler
    if sync_period_s is not None:
        autoscaler = replace(autoscaler, config=replace(autoscaler.config, sync_period_s=sync_period_s))
    return autoscaler


def sync_period_s(autoscaler: Autoscaler) -> float:
    if isinstance(autoscaler, ScaledObjectSpec):
        return float(autoscaler.hpa_config.sync_period_s)
    return float(autoscaler.config.sync_period_s)


def sync(
    spec: ServiceSpec,
    autoscaler: Autoscaler,
    state: AutoscalerState | None,
    current: int,
    existing: int,
    pods: tuple[Pod, ...],
    load: Load,
    now: float,
) -> SyncResult:
    """One HPA or KEDA sync of ``spec`` at ``current`` replicas (``existing`` pods exist)."""
    if isinstance(autoscaler, ScaledObjectSpec):
        keda_state = state if isinstance(state, ScaledObjectState) else ScaledObjectState()
        readings = keda_readings(spec, autoscaler, load)
        observation = keda.KedaObservation(current, readings, pods, existing)
        decision, new_state = keda.decide(autoscaler, keda_state, observation, now)
        why = decision.action.value if decision.action is not None else ""
        if decision.hpa is not None and decision.hpa.rescale:
            why = decision.hpa.reason
        return SyncResult(decision.replicas, why or "NoChange", new_state)
    assert isinstance(autoscaler, HPASpec)
    hpa_state = state if isinstance(state, hpa.HPAState) else hpa.HPAState()
    metrics = [(m.source, m.name) for m in autoscaler.metrics]
    observation_h = hpa.HPAObservation(current, hpa_readings(spec, metrics, load), pods, existing)
    decision_h, new_hpa = hpa.decide(autoscaler, hpa_state, observation_h, now)
    reason = decision_h.reason if decision_h.rescale else (decision_h.error or "NoChange")
    return SyncResult(decision_h.desired_replicas, reason, new_hpa)


def activate(
    spec: ServiceSpec,
    autoscaler: Autoscaler | None,
    state: AutoscalerState | None,
    pods: tuple[Pod, ...],
    load: Load,
    now: float,
) -> SyncResult | None:
    """Requests are held and the service has no replica: a sync now with the KEDA poll due (its router
    trigger is active), or, for an HPA that may scale to zero, one replica. None: nothing to do
    (a fixed count of zero stays at zero; its requests time out)."""
    if isinstance(autoscaler, ScaledObjectSpec):
        keda_state = state if isinstance(state, ScaledObjectState) else ScaledObjectState()
        due = replace(keda_state, last_poll_s=None)
        result = sync(spec, autoscaler, due, 0, len(pods), pods, load, now)
        return replace(result, reason=f"activated by {load.held} held request(s): {result.reason}")
    if isinstance(autoscaler, HPASpec) and autoscaler.min_replicas == 0:
        return SyncResult(1, f"activated by {load.held} held request(s)", state or hpa.HPAState())
    return None
