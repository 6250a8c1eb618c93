"""Normalizing a metric recommendation: stabilization windows, rate limits, min/max.

Port of the normalization half of ``pkg/controller/podautoscaler/horizontal.go``
(kubernetes/kubernetes): ``normalizeDesiredReplicasWithBehaviors``,
``stabilizeRecommendationWithBehaviors``, ``convertDesiredReplicasWithBehaviorRate``,
``calculateScaleUpLimitWithScalingRules``, ``calculateScaleDownLimitWithBehaviors``,
``storeScaleEvent`` / ``markScaleEventsOutdated`` and, for HPAs without ``behavior``,
``normalizeDesiredReplicas`` / ``stabilizeRecommendation`` / ``convertDesiredReplicasWithRules``.

With a behavior, in this order:

1. **Stabilize.** Over the recommendations of the last ``scaleUp.stabilizationWindowSeconds`` take
   the minimum (``up``), over those of the last ``scaleDown.stabilizationWindowSeconds`` the maximum
   (``down``), both including the new recommendation; the result is the current count raised to
   ``up`` and then lowered to ``down``. The unstabilized recommendation is recorded, reusing the
   slot of one sample that is outside both windows.
2. **Rate-limit.** Each policy looks back ``periodSeconds`` over the scale events to find the
   replica count at the start of its period: ``start = current - added + removed``. Scale-up:
   Pods gives ``start + value``, Percent ``ceil(start × (1 + value/100))``; ``selectPolicy: Max``
   takes the largest limit, Min the smallest, Disabled keeps the current count. Scale-down: Pods
   gives ``start - value``, Percent ``trunc(start × (1 - value/100))``; Max takes the smallest
   limit (the largest change). A limit never moves past the current count the wrong way.
3. **Clamp** to ``[minReplicas, maxReplicas]``; the reported reason is the binding bound
   (``ScaleUpLimit`` / ``TooManyReplicas``, ``ScaleDownLimit`` / ``TooFewReplicas``) or
   ``DesiredWithinRange``.

Timestamps are seconds (simulated or wall); "inside the window" is strictly after
``now - window``, as Go's ``time.After``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpuq.core.autoscaling.spec import HPAScalingRules, ScalingPolicyType, SelectPolicy

MIN_INT32 = -(2**31)
MAX_INT32 = 2**31 - 1


@dataclass(frozen=True)
class TimestampedRecommendation:
    """``timestampedRecommendation``: an unstabilized recommendation and when it was made."""

    replicas: int
    at_s: float


@dataclass(frozen=True)
class ScaleEvent:
    """``timestampedScaleEvent``: a replica change (always positive; the list says the direction)."""

    replica_change: int
    at_s: float
    outdated: bool = False


@dataclass(frozen=True)
class Normalized:
    """What normalization decided, with the AbleToScale and ScalingLimited reasons it reports."""

    replicas: int
    stabilized: int
    able_reason: str
    able_message: str
    limited_reason: str
    limited_message: str
    recommendations: tuple[TimestampedRecommendation, ...]


SCALE_UP_LIMIT_FACTOR = 2.0
SCALE_UP_LIMIT_MINIMUM = 4.0
READY_FOR_NEW_SCALE = ("ReadyForNewScale", "recommended size matches current size")
WITHIN_RANGE = ("DesiredWithinRange", "the desired count is within the acceptable range")
SCALE_UP_LIMIT = (
    "ScaleUpLimit",
    "the desired replica count is increasing faster than the maximum scale rate",
)
TOO_MANY = ("TooManyReplicas", "the desired replica count is more than the maximum replica count")
SCALE_DOWN_LIMIT = (
    "ScaleDownLimit",
    "the desired replica count is decreasing faster than the maximum scale rate",
)
TOO_FEW = ("TooFewReplicas", "the desired replica count is less than the minimum replica count")


def replicas_change_in_period(period_s: int, events: tuple[ScaleEvent, ...], now: float) -> int:
    """``getReplicasChangePerPeriod``: the sum of changes strictly after ``now - period``."""
    cutoff = now - period_s
    return sum(e.replica_change for e in events if e.at_s > cutoff)


def _period_start(
    policy_period_s: int, current: int, up: tuple[ScaleEvent, ...], down: tuple[ScaleEvent, ...], now: float
) -> int:
    added = replicas_change_in_period(policy_period_s, up, now)
    removed = replicas_change_in_period(policy_period_s, down, now)
    return current - added + removed


def scale_up_limit(
    current: int,
    up_events: tuple[ScaleEvent, ...],
    down_events: tuple[ScaleEvent, ...],
    rules: HPAScalingRules,
    now: float,
) -> int:
    """``calculateScaleUpLimitWithScalingRules``: the most replicas the policies allow now."""
    if rules.select_policy is SelectPolicy.DISABLED:
        return current
    pick_min = rules.select_policy is SelectPolicy.MIN
    result = MAX_INT32 if pick_min else MIN_INT32
    for policy in rules.policies or ():
        start = _period_start(policy.period_s, current, up_events, down_events, now)
        if policy.type is ScalingPolicyType.PODS:
            proposed = start + policy.value
        else:
            proposed = math.ceil(start * (1 + policy.value / 100))
        result = min(result, proposed) if pick_min else max(result, proposed)
    return result


def scale_down_limit(
    current: int,
    up_events: tuple[ScaleEvent, ...],
    down_events: tuple[ScaleEvent, ...],
    rules: HPAScalingRules,
    now: float,
) -> int:
    """``calculateScaleDownLimitWithBehaviors``: the fewest replicas the policies allow now."""
    if rules.select_policy is SelectPolicy.DISABLED:
        return current
    pick_min_change = rules.select_policy is SelectPolicy.MIN
    result = MIN_INT32 if pick_min_change else MAX_INT32
    for policy in rules.policies or ():
        start = _period_start(policy.period_s, current, up_events, down_events, now)
        if policy.type is ScalingPolicyType.PODS:
            proposed = start - policy.value
        else:
            proposed = int(start * (1 - policy.value / 100))  # Go int32(float64): truncation
        result = max(result, proposed) if pick_min_change else min(result, proposed)
    return result


def stabilize_with_behaviors(
    recommendations: tuple[TimestampedRecommendation, ...],
    desired: int,
    current: int,
    up_window_s: int,
    down_window_s: int,
    now: float,
) -> tuple[int, str, str, tuple[TimestampedRecommendation, ...]]:
    """``stabilizeRecommendationWithBehaviors`` (step 1): (stabilized, reason, message, history)."""
    up_cutoff, down_cutoff = now - up_window_s, now - down_window_s
    up_rec = down_rec = desired
    old_index: int | None = None
    for i, rec in enumerate(recommendations):
        if rec.at_s > up_cutoff:
            up_rec = min(rec.replicas, up_rec)
        if rec.at_s > down_cutoff:
            down_rec = max(rec.replicas, down_rec)
        if rec.at_s < up_cutoff and rec.at_s < down_cutoff:
            old_index = i
    stabilized = min(max(current, up_rec), down_rec)
    history = _record(recommendations, old_index, TimestampedRecommendation(desired, now))
    if desired >= current:
        reason = "ScaleUpStabilized"
        message = (
            "recent recommendations were lower than current one, applying the lowest recent recommendation"
        )
    else:
        reason = "ScaleDownStabilized"
        message = (
            "recent recommendations were higher than current one, applying the highest recent recommendation"
        )
    return stabilized, reason, message, history


def _record(
    recommendations: tuple[TimestampedRecommendation, ...],
    old_index: int | None,
    new: TimestampedRecommendation,
) -> tuple[TimestampedRecommendation, ...]:
    if old_index is None:
        return (*recommendations, new)
    return (*recommendations[:old_index], new, *recommendations[old_index + 1 :])


def rate_limited(
    desired: int,
    current: int,
    min_replicas: int,
    max_replicas: int,
    up_rules: HPAScalingRules,
    down_rules: HPAScalingRules,
    up_events: tuple[ScaleEvent, ...],
    down_events: tuple[ScaleEvent, ...],
    now: float,
) -> tuple[int, str, str]:
    """``convertDesiredReplicasWithBehaviorRate`` (steps 2-3): (replicas, reason, message)."""
    if desired > current:
        limit = max(scale_up_limit(current, up_events, down_events, up_rules, now), current)
        allowed, why = (limit, SCALE_UP_LIMIT) if max_replicas > limit else (max_replicas, TOO_MANY)
        if desired > allowed:
            return allowed, *why
    elif desired < current:
        limit = min(scale_down_limit(current, up_events, down_events, down_rules, now), current)
        allowed, why = (limit, SCALE_DOWN_LIMIT) if min_replicas < limit else (min_replicas, TOO_FEW)
        if desired < allowed:
            return allowed, *why
    return desired, *WITHIN_RANGE


def normalize_with_behaviors(
    recommendations: tuple[TimestampedRecommendation, ...],
    desired: int,
    current: int,
    min_replicas: int,
    max_replicas: int,
    up_rules: HPAScalingRules,
    down_rules: HPAScalingRules,
    up_events: tuple[ScaleEvent, ...],
    down_events: tuple[ScaleEvent, ...],
    now: float,
) -> Normalized:
    """``normalizeDesiredReplicasWithBehaviors``: steps 1-3. Rules must be fully defaulted."""
    assert up_rules.stabilization_window_s is not None and down_rules.stabilization_window_s is not None
    stabilized, reason, message, history = stabilize_with_behaviors(
        recommendations,
        desired,
        current,
        up_rules.stabilization_window_s,
        down_rules.stabilization_window_s,
        now,
    )
    able = (reason, message) if stabilized != desired else READY_FOR_NEW_SCALE
    replicas, limited_reason, limited_message = rate_limited(
        stabilized, current, min_replicas, max_replicas, up_rules, down_rules, up_events, down_events, now
    )
    return Normalized(replicas, stabilized, *able, limited_reason, limited_message, history)


def stabilize_legacy(
    recommendations: tuple[TimestampedRecommendation, ...], desired: int, window_s: int, now: float
) -> tuple[int, tuple[TimestampedRecommendation, ...]]:
    """``stabilizeRecommendation``: the max of the recommendations not older than the window."""
    cutoff = now - window_s
    highest = desired
    old_index: int | None = None
    for i, rec in enumerate(recommendations):
        if rec.at_s < cutoff:
            old_index = i
        elif rec.replicas > highest:
            highest = rec.replicas
    return highest, _record(recommendations, old_index, TimestampedRecommendation(desired, now))


def normalize_legacy(
    recommendations: tuple[TimestampedRecommendation, ...],
    desired: int,
    current: int,
    min_replicas: int,
    max_replicas: int,
    window_s: int,
    now: float,
) -> Normalized:
    """``normalizeDesiredReplicas``: the path for an HPA without ``behavior``."""
    stabilized, history = stabilize_legacy(recommendations, desired, window_s, now)
    if stabilized != desired:
        able = (
            "ScaleDownStabilized",
            "recent recommendations were higher than current one, applying the highest recent recommendation",
        )
    else:
        able = READY_FOR_NEW_SCALE
    up_limit = int(max(SCALE_UP_LIMIT_FACTOR * current, SCALE_UP_LIMIT_MINIMUM))
    allowed, why = (up_limit, SCALE_UP_LIMIT) if max_replicas > up_limit else (max_replicas, TOO_MANY)
    if stabilized < min_replicas:
        replicas, limited = min_replicas, TOO_FEW
    elif stabilized > allowed:
        replicas, limited = allowed, why
    else:
        replicas, limited = stabilized, WITHIN_RANGE
    return Normalized(replicas, stabilized, *able, *limited, history)


def longest_policy_period_s(rules: HPAScalingRules) -> int:
    return max((p.period_s for p in rules.policies or ()), default=0)


def store_scale_event(
    events: tuple[ScaleEvent, ...], change: int, longest_period_s: int, now: float
) -> tuple[ScaleEvent, ...]:
    """``storeScaleEvent`` for one direction: mark outdated events, reuse the last outdated slot."""
    cutoff = now - longest_period_s
    marked = tuple(replace(e, outdated=True) if e.at_s < cutoff else e for e in events)
    old_index = max((i for i, e in enumerate(marked) if e.outdated), default=None)
    new = ScaleEvent(change, now)
    if old_index is None:
        return (*marked, new)
    return (*marked[:old_index], new, *marked[old_index + 1 :])
