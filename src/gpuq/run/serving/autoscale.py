"""What a live autoscaler sync is given: the autoscaler as run live and the router's readings.

The replica count itself is decided in core (:func:`gpuq.core.autoscaling.sync.sync` and
:func:`~gpuq.core.autoscaling.sync.activate`, the functions the simulator calls); this module only
says what the live shell observes. A ScaledObject that may scale to zero gets one more trigger,
:data:`~gpuq.run.serving.router_metrics.ROUTER_TRIGGER`, active while the router holds requests; its
target is so large that it never asks for more than one replica. When requests are held and the
service has no replica, the controller calls ``activate`` at once: KEDA's activation without
waiting for ``pollingInterval``.
"""

from __future__ import annotations

from dataclasses import replace

from gpuq.api.serving import Autoscaler, ServiceSpec
from gpuq.core.autoscaling.keda import ScaledObjectSpec, Trigger
from gpuq.core.autoscaling.sync import Reading
from gpuq.run.serving.router_metrics import ROUTER_TRIGGER, Load, hpa_readings, keda_readings

_NEVER_MORE_THAN_ONE_MILLI = 10**12


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


def readings(spec: ServiceSpec, autoscaler: Autoscaler, load: Load) -> dict[str, Reading]:
    """What the router measured, as the autoscaler reads it: KEDA trigger values (milli-units, the
    router trigger's being the held requests) or HPA metric readings."""
    if isinstance(autoscaler, ScaledObjectSpec):
        return dict(keda_readings(spec, autoscaler, load))
    return dict(hpa_readings(spec, [(m.source, m.name) for m in autoscaler.metrics], load))
