"""HPA v2 algorithm: replica proposals, tolerance, missing/unready pods, behavior, conditions.

Expected numbers come from the Kubernetes docs (horizontal-pod-autoscale.md, "Algorithm details",
"Configurable scaling behavior", "Tolerance", "Default behavior") and from replica_calculator.go /
horizontal.go; each case says which.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuq.core.autoscaling.behavior import (
    ScaleEvent,
    TimestampedRecommendation,
    scale_down_limit,
    scale_up_limit,
)
from gpuq.core.autoscaling.hpa import ConditionType, HPAObservation, HPAState, decide
from gpuq.core.autoscaling.replicas import (
    MetricFetchError,
    ObjectMetric,
    Pod,
    PodMetrics,
    PodPhase,
    PodSample,
)
from gpuq.core.autoscaling.spec import (
    HPABehavior,
    HPAScalingRules,
    HPASpec,
    MetricSourceType,
    MetricSpec,
    ScalingPolicy,
    ScalingPolicyType,
    SelectPolicy,
    average_value,
    utilization,
)

NOW = 10_000.0
CPU_REQUEST = 1000  # 1 core, in millicores
NO_DOWN_WINDOW = HPABehavior(scale_down=HPAScalingRules(stabilization_window_s=0))

CPU50 = MetricSpec(MetricSourceType.RESOURCE, "cpu", utilization(50))


def pods(n: int) -> tuple[Pod, ...]:
    return tuple(Pod(f"p{i}", requests_milli={"cpu": CPU_REQUEST}) for i in range(n))


def pods_metric(name: str, target_milli: int) -> MetricSpec:
    return MetricSpec(MetricSourceType.PODS, name, average_value(target_milli))


def queue_metric(target_milli: int, name: str = "queue") -> MetricSpec:
    return MetricSpec(MetricSourceType.EXTERNAL, name, average_value(target_milli))


def samples(values: dict[str, int]) -> PodMetrics:
    return PodMetrics(dict(values))


def sync(
    spec: HPASpec, obs: HPAObservation, state: HPAState | None = None, now: float = NOW
) -> tuple[int, str]:
    decision, _ = decide(spec, state or HPAState(), obs, now)
    limited = decision.condition(ConditionType.SCALING_LIMITED)
    return decision.desired_replicas, limited.reason if limited else ""


# --- documented examples -------------------------------------------------------------------------


def test_docs_200m_against_100m_doubles_the_replicas() -> None:
    """Algorithm details: "current metric value is 200m, desired 100m: the replicas will be doubled"."""
    spec = HPASpec(max_replicas=20, metrics=(pods_metric("rps", 100),))
    obs = HPAObservation(3, {"rps": samples({"p0": 200, "p1": 200, "p2": 200})}, pods(3))
    assert sync(spec, obs) == (6, "DesiredWithinRange")


def test_docs_50m_against_100m_halves_the_replicas() -> None:
    """Algorithm details: "if the current value is instead 50m, you'll halve the number of replicas"."""
    spec = HPASpec(max_replicas=20, metrics=(pods_metric("rps", 100),), behavior=NO_DOWN_WINDOW)
    obs = HPAObservation(4, {"rps": samples({f"p{i}": 50 for i in range(4)})}, pods(4))
    assert sync(spec, obs) == (2, "DesiredWithinRange")


def test_docs_utilization_is_the_ratio_of_summed_usage_to_summed_requests() -> None:
    """A 50 % CPU target with 3 pods at 100 % of their request doubles to 6 (usage / request / target)."""
    spec = HPASpec(max_replicas=10, metrics=(CPU50,))
    obs = HPAObservation(3, {"cpu": samples({"p0": 1000, "p1": 1000, "p2": 1000})}, pods(3))
    decision, _ = decide(spec, HPAState(), obs, NOW)
    assert (decision.desired_replicas, decision.reason) == (
        6,
        "cpu resource utilization (percentage of request) above target",
    )
    assert decision.metric_statuses[0].current_utilization_percent == 100


@pytest.mark.parametrize(
    ("name", "usage_milli", "expected"),
    [
        ("104Mi with a 5 % scale-up tolerance: no scale-up", 104, 10),
        ("106Mi with a 5 % scale-up tolerance: scale up", 106, 11),
        ("91Mi with the default 10 % scale-down tolerance: no scale-down", 91, 10),
        ("89Mi with the default 10 % scale-down tolerance: scale down", 89, 9),
    ],
)
def test_docs_scale_up_tolerance_of_5_percent_on_a_100mi_target(
    name: str, usage_milli: int, expected: int
) -> None:
    """Tolerance: "target memory consumption of 100MiB and a scale-up tolerance of 5% ... only consider
    scaling up if the memory consumption is higher than 105MiB". Values in Mi for readability."""
    behavior = HPABehavior(
        scale_up=HPAScalingRules(tolerance=0.05), scale_down=HPAScalingRules(stabilization_window_s=0)
    )
    spec = HPASpec(
        max_replicas=20,
        metrics=(MetricSpec(MetricSourceType.RESOURCE, "memory", average_value(100)),),
        behavior=behavior,
    )
    obs = HPAObservation(10, {"memory": samples({f"p{i}": usage_milli for i in range(10)})}, pods(10))
    assert sync(spec, obs)[0] == expected, name


def _run(
    spec: HPASpec,
    metric: Callable[[float, int], int],
    start_replicas: int,
    until_s: float,
    step_s: float = 15.0,
) -> list[tuple[float, int]]:
    """Sync every ``step_s`` on an External queue metric; return (time, replicas) after each change."""
    state, replicas, t = HPAState(), start_replicas, 0.0
    changes = [(0.0, replicas)]
    while t <= until_s:
        obs = HPAObservation(replicas, {"queue": ObjectMetric.of(metric(t, replicas))})
        decision, state = decide(spec, state, obs, t)
        if decision.rescale:
            replicas = decision.desired_replicas
            changes.append((t, replicas))
        t += step_s
    return changes


def test_docs_scale_down_80_to_10_with_pods_4_and_percent_10_per_minute() -> None:
    """Scaling policies: "if there are 80 replicas and the target has to be scaled down to 10 replicas
    then during the first step 8 replicas will be reduced. In the next iteration when the number of
    replicas is 72, 10% of the pods is 7.2 but the number is rounded up to 8 ... When the number of
    replicas falls below 40 the first policy (Pods) is applied and 4 replicas will be reduced at a
    time." The default 300 s scale-down window delays the first step; each step then waits out the
    60 s period."""
    behavior = HPABehavior(
        scale_down=HPAScalingRules(
            policies=(
                ScalingPolicy(ScalingPolicyType.PODS, 4, 60),
                ScalingPolicy(ScalingPolicyType.PERCENT, 10, 60),
            )
        )
    )
    spec = HPASpec(max_replicas=100, metrics=(queue_metric(1000),), behavior=behavior)
    changes = _run(spec, lambda t, r: 10 * 1000, start_replicas=80, until_s=1500)
    assert [r for _, r in changes] == [80, 72, 64, 57, 51, 45, 40, 36, 32, 28, 24, 20, 16, 12, 10]
    assert [t for t, _ in changes[1:4]] == [300.0, 360.0, 420.0]


def test_docs_default_scale_up_adds_4_pods_or_100_percent_every_15_seconds() -> None:
    """Default behavior: "4 pods or a 100% of the currently running replicas may at most be added
    every 15 seconds till the HPA reaches its steady state"."""
    spec = HPASpec(max_replicas=100, metrics=(queue_metric(1000),), behavior=HPABehavior())
    changes = _run(spec, lambda t, r: 100 * 1000, start_replicas=1, until_s=120)
    assert changes == [(0.0, 1), (0.0, 5), (15.0, 10), (30.0, 20), (45.0, 40), (60.0, 80), (75.0, 100)]


def test_without_behavior_the_legacy_limit_is_twice_the_current_or_4_per_sync() -> None:
    """horizontal.go ``calculateScaleUpLimit``: max(2 × current, 4) when ``behavior`` is not set."""
    spec = HPASpec(max_replicas=100, metrics=(queue_metric(1000),))
    changes = _run(spec, lambda t, r: 100 * 1000, start_replicas=1, until_s=120)
    assert [r for _, r in changes] == [1, 4, 8, 16, 32, 64, 100]


# --- tolerance -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "per_pod_milli", "expected"),
    [
        ("exactly 1.1 is inside the band", 110, 10),
        ("1.09 is inside the band", 109, 10),
        ("1.11 is outside: ceil(11.1) = 12", 111, 12),
        ("exactly 0.9 is inside the band", 90, 10),
        ("0.89 is outside: ceil(8.9) = 9", 89, 9),
        ("exactly on target", 100, 10),
    ],
)
def test_default_tolerance_band(name: str, per_pod_milli: int, expected: int) -> None:
    spec = HPASpec(max_replicas=50, metrics=(pods_metric("rps", 100),), behavior=NO_DOWN_WINDOW)
    obs = HPAObservation(10, {"rps": samples({f"p{i}": per_pod_milli for i in range(10)})}, pods(10))
    assert sync(spec, obs)[0] == expected, name


# --- missing metrics and unready pods --------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "usage", "pod_set", "expected"),
    [
        (
            "scale-up: missing pods count as 0 %, and when that flips the direction nothing changes",
            {"p0": 900, "p1": 900},
            pods(4),
            4,
        ),
        (
            "scale-down: missing pods count as 100 % of request, which lands inside the band",
            {"p0": 100, "p1": 100},
            pods(4),
            4,
        ),
        (
            "scale-down: missing pods count as 100 %, damping 4 -> 1 into 4 -> 3",
            {"p0": 100, "p1": 100, "p2": 100},
            pods(4),
            3,
        ),
        (
            "scale-up: an unready (pending) pod counts as 0 %, bringing the ratio into the band",
            {"p0": 900, "p1": 900},
            (*pods(2), Pod("pending", PodPhase.PENDING, requests_milli={"cpu": CPU_REQUEST})),
            3,
        ),
        (
            "scale-down: unready pods are left out entirely",
            {"p0": 100, "p1": 100},
            (*pods(2), Pod("pending", PodPhase.PENDING, requests_milli={"cpu": CPU_REQUEST})),
            1,
        ),
        (
            "a deleting pod's sample is ignored (counted, it would give 4)",
            {"p0": 500, "p1": 500, "gone": 1000},
            (*pods(2), Pod("gone", deleting=True, requests_milli={"cpu": CPU_REQUEST})),
            2,
        ),
    ],
)
def test_missing_metrics_and_unready_pods(
    name: str, usage: dict[str, int], pod_set: tuple[Pod, ...], expected: int
) -> None:
    """Algorithm details: "assuming those pods were consuming 100% of the desired value in case of a
    scale down, and 0% in case of a scale up ... If the new ratio reverses the scale direction, or is
    within the tolerance, the controller doesn't take any scaling action"."""
    target = 60 if "unready (pending)" in name else 50
    spec = HPASpec(
        max_replicas=20,
        metrics=(MetricSpec(MetricSourceType.RESOURCE, "cpu", utilization(target)),),
        behavior=NO_DOWN_WINDOW,
    )
    current = len(pod_set) - (1 if "deleting" in name else 0)
    obs = HPAObservation(current, {"cpu": samples(usage)}, pod_set)
    assert sync(spec, obs)[0] == expected, name


def test_a_cpu_sample_taken_during_start_up_is_set_aside_but_a_custom_metric_is_not() -> None:
    """groupPods: only for the cpu resource, a pod within --horizontal-pod-autoscaler-cpu-initialization-
    period whose sample window began before it became ready is unready."""
    young = Pod(
        "young", start_time_s=NOW - 60, ready_transition_s=NOW - 50, requests_milli={"cpu": CPU_REQUEST}
    )
    pod_set = (*pods(2), young)
    usage = {"p0": 1000, "p1": 1000, "young": PodSample(1000, timestamp_s=NOW, window_s=60)}
    cpu = HPASpec(max_replicas=20, metrics=(CPU50,))
    # ratio 2 on 2 ready pods, the young pod as 0 % -> 66 % -> ceil(1.32 * 3) = 4
    assert sync(cpu, HPAObservation(3, {"cpu": PodMetrics(usage)}, pod_set))[0] == 4
    rps = HPASpec(max_replicas=20, metrics=(pods_metric("rps", 500),))
    # the same pod reporting a custom metric counts: ceil(2 * 3) = 6
    assert sync(rps, HPAObservation(3, {"rps": PodMetrics(usage)}, pod_set))[0] == 6


# --- several metrics, invalid metrics ------------------------------------------------------------


def test_the_largest_proposal_across_metrics_wins() -> None:
    spec = HPASpec(max_replicas=20, metrics=(CPU50, queue_metric(10_000)))
    obs = HPAObservation(
        2, {"cpu": samples({"p0": 1000, "p1": 1000}), "queue": ObjectMetric.of(70_000)}, pods(2)
    )
    decision, _ = decide(spec, HPAState(), obs, NOW)
    assert (decision.metric_replicas, decision.desired_replicas, decision.reason) == (
        7,
        4,
        "external metric queue(<nil>) above target",
    )


@pytest.mark.parametrize(
    ("name", "queue_milli", "desired", "active_reason"),
    [
        ("the valid metric scales down: skipped", 10_000, 4, "FailedGetResourceMetric"),
        ("the valid metric scales up: it scales", 80_000, 8, "ValidMetricFound"),
    ],
)
def test_an_invalid_metric_blocks_scale_down_but_not_scale_up(
    name: str, queue_milli: int, desired: int, active_reason: str
) -> None:
    """Algorithm details: "If any of these metrics cannot be converted into a desired replica count ...
    and a scale down is suggested by the metrics which can be fetched, scaling is skipped"."""
    spec = HPASpec(max_replicas=20, metrics=(CPU50, queue_metric(10_000)), behavior=NO_DOWN_WINDOW)
    obs = HPAObservation(
        4,
        {"cpu": MetricFetchError("metrics-server unavailable"), "queue": ObjectMetric.of(queue_milli)},
        pods(4),
    )
    decision, _ = decide(spec, HPAState(), obs, NOW)
    active = decision.condition(ConditionType.SCALING_ACTIVE)
    assert active is not None
    assert (decision.desired_replicas, active.reason) == (desired, active_reason), name
    assert decision.error is not None and decision.error.startswith("invalid metrics (1 invalid out of 2)")


def test_all_metrics_invalid_means_no_scaling_and_scaling_active_false() -> None:
    spec = HPASpec(max_replicas=20, metrics=(queue_metric(10_000),))
    decision, state = decide(spec, HPAState(), HPAObservation(3, {}), NOW)
    active = decision.condition(ConditionType.SCALING_ACTIVE)
    assert (decision.rescale, decision.desired_replicas) == (False, 3)
    assert active is not None and (active.status, active.reason) == (False, "FailedGetExternalMetric")
    assert state.conditions == decision.conditions


# --- min / max -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "current", "queue_milli", "expected"),
    [
        ("a desire above max is clamped to max", 8, 500_000, (10, "TooManyReplicas")),
        ("a desire below min is clamped to min", 5, 0, (2, "TooFewReplicas")),
        ("a desire inside the range is kept", 5, 60_000, (6, "DesiredWithinRange")),
        ("current above max goes to max without reading metrics", 14, 500_000, (10, "")),
        ("current below min goes to min without reading metrics", 1, 0, (2, "")),
    ],
)
def test_min_max_clamp(name: str, current: int, queue_milli: int, expected: tuple[int, str]) -> None:
    spec = HPASpec(min_replicas=2, max_replicas=10, metrics=(queue_metric(10_000),), behavior=NO_DOWN_WINDOW)
    assert sync(spec, HPAObservation(current, {"queue": ObjectMetric.of(queue_milli)})) == expected, name


def test_a_target_scaled_to_zero_disables_autoscaling() -> None:
    """Implicit maintenance-mode deactivation: replicas 0 and minReplicas > 0 -> ScalingActive=False."""
    spec = HPASpec(max_replicas=10, metrics=(queue_metric(10_000),))
    decision, _ = decide(spec, HPAState(), HPAObservation(0, {"queue": ObjectMetric.of(90_000)}), NOW)
    active = decision.condition(ConditionType.SCALING_ACTIVE)
    assert decision.desired_replicas == 0
    assert active is not None and (active.status, active.reason) == (False, "ScalingDisabled")


# --- policies --------------------------------------------------------------------------------------

PODS4 = ScalingPolicy(ScalingPolicyType.PODS, 4, 60)
PCT50 = ScalingPolicy(ScalingPolicyType.PERCENT, 50, 60)


@pytest.mark.parametrize(
    ("name", "rules", "up_events", "down_events", "up_limit", "down_limit"),
    [
        ("Pods 4 per 60 s", HPAScalingRules(policies=(PODS4,)), (), (), 14, 6),
        ("Percent 50 per 60 s", HPAScalingRules(policies=(PCT50,)), (), (), 15, 5),
        (
            "Pods and Percent, Max picks the larger change",
            HPAScalingRules(policies=(PODS4, PCT50)),
            (),
            (),
            15,
            5,
        ),
        (
            "Pods and Percent, Min picks the smaller change",
            HPAScalingRules(select_policy=SelectPolicy.MIN, policies=(PODS4, PCT50)),
            (),
            (),
            14,
            6,
        ),
        (
            "Disabled keeps the current count",
            HPAScalingRules(select_policy=SelectPolicy.DISABLED, policies=(PODS4,)),
            (),
            (),
            10,
            10,
        ),
        (
            "4 pods added 30 s ago count against the period: the period started at 6",
            HPAScalingRules(policies=(PODS4,)),
            (ScaleEvent(4, NOW - 30),),
            (),
            10,
            2,
        ),
        (
            "an event exactly one period ago is out of the period",
            HPAScalingRules(policies=(PODS4,)),
            (ScaleEvent(4, NOW - 60),),
            (),
            14,
            6,
        ),
        (
            "3 pods removed 10 s ago: the period started at 13",
            HPAScalingRules(policies=(PCT50,)),
            (),
            (ScaleEvent(3, NOW - 10),),
            20,
            6,
        ),
    ],
)
def test_policy_limits(
    name: str,
    rules: HPAScalingRules,
    up_events: tuple[ScaleEvent, ...],
    down_events: tuple[ScaleEvent, ...],
    up_limit: int,
    down_limit: int,
) -> None:
    """calculateScaleUpLimitWithScalingRules / calculateScaleDownLimitWithBehaviors from 10 replicas."""
    limits = (
        scale_up_limit(10, up_events, down_events, rules, NOW),
        scale_down_limit(10, up_events, down_events, rules, NOW),
    )
    assert limits == (up_limit, down_limit), name


def test_scale_up_limited_by_a_policy_reports_scale_up_limit() -> None:
    behavior = HPABehavior(scale_up=HPAScalingRules(policies=(PODS4,)))
    spec = HPASpec(max_replicas=50, metrics=(queue_metric(1000),), behavior=behavior)
    decision, state = decide(spec, HPAState(), HPAObservation(10, {"queue": ObjectMetric.of(30_000)}), NOW)
    limited = decision.condition(ConditionType.SCALING_LIMITED)
    assert decision.desired_replicas == 14
    assert limited is not None and (limited.status, limited.reason) == (True, "ScaleUpLimit")
    assert state.scale_up_events == (ScaleEvent(4, NOW),)
    assert state.last_scale_time_s == NOW


def test_disabled_scale_down_never_removes_pods() -> None:
    behavior = HPABehavior(
        scale_down=HPAScalingRules(stabilization_window_s=0, select_policy=SelectPolicy.DISABLED)
    )
    spec = HPASpec(max_replicas=50, metrics=(queue_metric(1000),), behavior=behavior)
    assert sync(spec, HPAObservation(10, {"queue": ObjectMetric.of(1000)})) == (10, "ScaleDownLimit")


# --- stabilization -------------------------------------------------------------------------------


def test_scale_down_window_applies_the_highest_recent_recommendation() -> None:
    spec = HPASpec(max_replicas=20, metrics=(queue_metric(1000),), behavior=HPABehavior())
    history = (TimestampedRecommendation(10, NOW - 200), TimestampedRecommendation(8, NOW - 100))
    decision, state = decide(
        spec, HPAState(recommendations=history), HPAObservation(10, {"queue": ObjectMetric.of(5000)}), NOW
    )
    able = decision.condition(ConditionType.ABLE_TO_SCALE)
    assert (decision.rescale, decision.desired_replicas) == (False, 10)
    assert able is not None and able.reason == "ScaleDownStabilized"
    assert state.recommendations == (*history, TimestampedRecommendation(5, NOW))


def test_scale_down_window_uses_the_max_inside_the_window_only() -> None:
    spec = HPASpec(max_replicas=20, metrics=(queue_metric(1000),), behavior=HPABehavior())
    history = (TimestampedRecommendation(10, NOW - 400), TimestampedRecommendation(8, NOW - 100))
    decision, state = decide(
        spec, HPAState(recommendations=history), HPAObservation(10, {"queue": ObjectMetric.of(5000)}), NOW
    )
    assert decision.desired_replicas == 8
    # the sample older than both windows is reused for the new recommendation
    assert state.recommendations == (
        TimestampedRecommendation(5, NOW),
        TimestampedRecommendation(8, NOW - 100),
    )


def test_scale_up_window_applies_the_lowest_recent_recommendation() -> None:
    behavior = HPABehavior(scale_up=HPAScalingRules(stabilization_window_s=60))
    spec = HPASpec(max_replicas=20, metrics=(queue_metric(1000),), behavior=behavior)
    history = (TimestampedRecommendation(3, NOW - 30),)
    decision, _ = decide(
        spec, HPAState(recommendations=history), HPAObservation(3, {"queue": ObjectMetric.of(10_000)}), NOW
    )
    able = decision.condition(ConditionType.ABLE_TO_SCALE)
    assert decision.desired_replicas == 3
    assert able is not None and able.reason == "ScaleUpStabilized"


def test_flapping_metrics_do_not_flap_replicas() -> None:
    """Stability of workload scale: a metric alternating every sync between 10 and 4 replicas' worth
    scales up (within the default rate: 4 -> 8 -> 10) and never down while the 300 s window still holds
    a high recommendation."""
    spec = HPASpec(max_replicas=20, metrics=(queue_metric(1000),), behavior=HPABehavior())
    changes = _run(
        spec, lambda t, r: 10_000 if int(t // 15) % 2 == 0 else 4000, start_replicas=4, until_s=1200
    )
    assert changes == [(0.0, 4), (0.0, 8), (30.0, 10)]


def test_load_step_scales_up_within_rate_limits_then_a_drop_waits_for_the_window() -> None:
    spec = HPASpec(max_replicas=50, metrics=(queue_metric(10_000),), behavior=HPABehavior())
    changes = _run(spec, lambda t, r: 200_000 if t < 600 else 50_000, start_replicas=1, until_s=1200)
    # up: 4 pods or 100 % per 15 s; down: the last "20" recommendation was at 585 s, so at 885 s
    assert changes == [(0.0, 1), (0.0, 5), (15.0, 10), (30.0, 20), (885.0, 5)]


# --- properties ----------------------------------------------------------------------------------


@given(
    min_replicas=st.integers(1, 5),
    extra=st.integers(0, 20),
    current_offset=st.integers(0, 25),
    queue=st.integers(0, 10**6),
    with_behavior=st.booleans(),
)
def test_result_is_always_within_min_and_max(
    min_replicas: int, extra: int, current_offset: int, queue: int, with_behavior: bool
) -> None:
    max_replicas = min_replicas + extra
    current = max(1, current_offset)
    spec = HPASpec(
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        metrics=(queue_metric(1000),),
        behavior=HPABehavior() if with_behavior else None,
    )
    decision, _ = decide(spec, HPAState(), HPAObservation(current, {"queue": ObjectMetric.of(queue)}), NOW)
    if min_replicas <= current <= max_replicas:
        assert min_replicas <= decision.desired_replicas <= max_replicas
    else:
        assert decision.desired_replicas == min(max(current, min_replicas), max_replicas)


@given(n=st.integers(1, 30), per_pod=st.integers(900, 1100), with_behavior=st.booleans())
def test_within_tolerance_nothing_changes(n: int, per_pod: int, with_behavior: bool) -> None:
    spec = HPASpec(
        max_replicas=100,
        metrics=(pods_metric("rps", 1000),),
        behavior=NO_DOWN_WINDOW if with_behavior else None,
    )
    obs = HPAObservation(n, {"rps": samples({f"p{i}": per_pod for i in range(n)})}, pods(n))
    decision, _ = decide(spec, HPAState(), obs, NOW)
    assert (decision.rescale, decision.desired_replicas) == (False, n)
