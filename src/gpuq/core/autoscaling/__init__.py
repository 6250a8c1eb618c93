"""Exact, pure autoscaling: the Kubernetes HPA v2 algorithm and KEDA ScaledObjects.

- :mod:`~gpuq.core.autoscaling.spec`: metric targets, scaling rules, behavior, controller flags.
- :mod:`~gpuq.core.autoscaling.replicas`: per-metric replica proposals (the replica calculator).
- :mod:`~gpuq.core.autoscaling.behavior`: stabilization windows, policy rate limits, min/max.
- :mod:`~gpuq.core.autoscaling.hpa`: one HPA sync, ``decide(spec, state, observation, now)``.
- :mod:`~gpuq.core.autoscaling.keda`: activation, scale to/from zero, cooldown, fallback.
- :mod:`~gpuq.core.autoscaling.sync`: one sync of a service (HPA or KEDA), activation on held
  requests, and the ReplicaSet's scale plan (ordinals to add, victims in deletion order): what
  both the simulator and the live controller call.
- :mod:`~gpuq.core.autoscaling.serving_metrics`: vLLM / TGI / Triton / DCGM metric names.

No I/O, clock or randomness: time is the ``now`` argument, state goes in and comes out.
See docs/autoscaling.md for the sources of each rule.
"""

from gpuq.core.autoscaling.hpa import HPADecision, HPAObservation, HPAState, decide
from gpuq.core.autoscaling.keda import KedaDecision, KedaObservation, ScaledObjectSpec, ScaledObjectState
from gpuq.core.autoscaling.spec import HPABehavior, HPAScalingRules, HPASpec, MetricSpec

__all__ = [
    "HPABehavior",
    "HPADecision",
    "HPAObservation",
    "HPAScalingRules",
    "HPASpec",
    "HPAState",
    "KedaDecision",
    "KedaObservation",
    "MetricSpec",
    "ScaledObjectSpec",
    "ScaledObjectState",
    "decide",
]
