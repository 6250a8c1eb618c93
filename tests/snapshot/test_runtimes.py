"""Runtime estimates: declaration first, then the closest history with enough runs, then a default."""

from __future__ import annotations

import pytest

from gpuq.snapshot.runtimes import (
    OVERDUE_FLOOR_S,
    EstimatorSettings,
    Finished,
    Profile,
    RuntimeEstimator,
    Source,
    quantile,
)

ALICE_8 = Profile("team-a", "q", "alice", 8)


def history(profile: Profile, *runs: float) -> list[Finished]:
    return [Finished(profile, r) for r in runs]


@pytest.mark.parametrize(("q", "expected"), [(0.0, 1.0), (0.1, 1.5), (0.5, 4.0), (0.9, 8.0), (1.0, 9.0)])
def test_quantiles_interpolate_between_ranks(q: float, expected: float) -> None:
    assert quantile([1.0, 2.0, 3.0, 5.0, 7.0, 9.0], q) == expected


@pytest.mark.parametrize(
    ("profile", "elapsed", "expected"),
    [
        # The annotation wins, even over history.
        (Profile("team-a", "q", "alice", 8, expected_s=500), 0, (500, 500, Source.ANNOTATION)),
        (Profile("team-a", "q", "alice", 8, expected_s=500), 200, (300, 300, Source.ANNOTATION)),
        # Past its declaration: at least the floor again.
        (
            Profile("team-a", "q", "alice", 8, expected_s=500),
            900,
            (OVERDUE_FLOOR_S,) * 2 + (Source.ANNOTATION,),
        ),
        # Same queue, user and size: alice's 8-GPU runs (100..500): p50 300, p90 460.
        (ALICE_8, 0, (300, 460, Source.HISTORY)),
        # 250 s in: the runs that lasted longer (300, 400, 500) less 250.
        (ALICE_8, 250, (150, 230, Source.HISTORY)),
        # activeDeadlineSeconds caps history.
        (Profile("team-a", "q", "alice", 8, deadline_s=350), 0, (300, 350, Source.HISTORY)),
        # Bob has no runs of his own: the queue's 8-GPU runs (alice's and carol's): p50 400, p90 1880.
        (Profile("team-a", "q", "bob", 8), 0, (400, 1880, Source.HISTORY)),
        # Another size: the whole queue.
        (Profile("team-a", "q", "bob", 2), 0, (400, 1880, Source.HISTORY)),
        # Another queue with no history: the whole cluster.
        (Profile("team-b", "q", "dan", 1), 0, (400, 1880, Source.HISTORY)),
    ],
)
def test_estimates_by_source(profile: Profile, elapsed: float, expected: tuple[float, float, Source]) -> None:
    estimator = RuntimeEstimator.from_history(
        history(ALICE_8, 100, 200, 300, 400, 500) + history(Profile("team-a", "q", "carol", 8), 1800, 2000),
        EstimatorSettings(low=0.5, high=0.9),
    )
    estimate = estimator.remaining(profile, elapsed)
    assert (estimate.low_s, estimate.high_s, estimate.source) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        (Profile("team-a", "q", deadline_s=900), (900, 900, Source.DEADLINE)),
        (Profile("team-a", "q"), (3600, 3600, Source.DEFAULT)),
    ],
)
def test_without_history(profile: Profile, expected: tuple[float, float, Source]) -> None:
    estimate = RuntimeEstimator().estimate(profile)
    assert (estimate.low_s, estimate.high_s, estimate.source) == expected
    assert "no history" in estimate.text


def test_too_few_runs_fall_back_to_a_coarser_level_and_the_window_keeps_the_latest() -> None:
    settings = EstimatorSettings(min_runs=3, window=3)
    estimator = RuntimeEstimator.from_history(history(ALICE_8, 10, 10), settings)
    assert estimator.estimate(ALICE_8).source == Source.DEFAULT
    for ran in (1000, 1000, 1000):
        estimator.add(Finished(ALICE_8, ran))
    estimate = estimator.estimate(ALICE_8)
    assert (estimate.low_s, estimate.high_s) == (1000, 1000)  # the two 10 s runs left the window
    assert estimate.text.startswith("history (queue+user+size, 3 runs")


def test_running_longer_than_every_past_run() -> None:
    estimator = RuntimeEstimator.from_history(history(ALICE_8, 100, 200, 300))
    estimate = estimator.remaining(ALICE_8, 1000)
    assert (estimate.low_s, estimate.high_s) == (OVERDUE_FLOOR_S, 500)
    assert "longer than all of them" in estimate.detail


@pytest.mark.parametrize(
    "kwargs", [{"low": 0.9, "high": 0.5}, {"low": -0.1}, {"high": 1.5}, {"default_s": 0}, {"min_runs": 0}]
)
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        EstimatorSettings(**kwargs)  # type: ignore[arg-type]


def test_negative_or_infinite_runtimes_are_not_learned() -> None:
    estimator = RuntimeEstimator(EstimatorSettings(min_runs=1))
    estimator.add(Finished(ALICE_8, -5))
    estimator.add(Finished(ALICE_8, float("inf")))
    assert estimator.estimate(ALICE_8).source == Source.DEFAULT


@pytest.mark.parametrize(
    ("pod_sets", "gpus"),
    [
        ([("main", 4, {"nvidia.com/gpu": 2})], 8.0),
        ([("main", 3, {"gpuq.dev/gpu-milli": 500})], 1.5),
        ([("launcher", 1, {"cpu": 1000}), ("workers", 2, {"nvidia.com/gpu": 8})], 16.0),
    ],
    ids=["whole GPUs", "shares of one GPU", "a CPU launcher beside GPU workers"],
)
def test_a_workload_size_counts_every_pod(
    pod_sets: list[tuple[str, int, dict[str, int]]], gpus: float
) -> None:
    from gpuq.core.model import PodSet, Workload
    from gpuq.snapshot.manifests import total_gpus

    workload = Workload("team-a", "w", "q", tuple(PodSet(n, c, r) for n, c, r in pod_sets))
    assert total_gpus(workload) == gpus
