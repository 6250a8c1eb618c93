"""The simulator's parts: event order, step series, the generator, borrowing ledgers, metrics helpers."""

from __future__ import annotations

import pytest

from gpuq.api.scenario import Distribution, Generator, TeamArrivals
from gpuq.core.model import ClusterConfig, ClusterQueue, FlavorQuotas, ResourceGroup, ResourceQuota
from gpuq.sim.events import EventKind, EventQueue
from gpuq.sim.generator import draw, generate
from gpuq.sim.metrics import jain, percentile, quantiles, workload_class
from gpuq.sim.recorder import Recorder
from gpuq.sim.series import StepSeries, binned


def test_events_pop_by_time_then_kind_then_insertion() -> None:
    queue = EventQueue()
    queue.push(5.0, EventKind.ARRIVAL, "late-arrival")
    queue.push(5.0, EventKind.FINISH, "finish")
    queue.push(1.0, EventKind.ARRIVAL, "first")
    queue.push(5.0, EventKind.FINISH, "finish-2")
    queue.push(5.0, EventKind.NODE_UP, "node")
    order = [queue.pop().key for _ in range(len(queue))]
    assert order == ["first", "finish", "finish-2", "node", "late-arrival"]


def test_a_cancelled_event_is_never_returned_and_no_longer_counts() -> None:
    """A PodsReady timer taken out once its workload runs (the simulator's use)."""
    queue = EventQueue()
    timer = queue.push(1.0, EventKind.PODS_READY_TIMEOUT, "timer")
    queue.push(2.0, EventKind.FINISH, "finish")
    queue.cancel(timer)
    queue.cancel(timer)  # twice is once
    assert len(queue) == 1 and queue.peek_time() == 2.0
    assert [e.key for e in queue.due(3.0, {EventKind.FINISH, EventKind.PODS_READY_TIMEOUT})] == ["finish"]
    assert len(queue) == 0 and queue.peek_time() is None


SERIES_CASES = [
    ("constant zero", [], 10.0, 2, [0.0, 0.0]),
    ("a step in the middle of a bin is averaged", [(5.0, 4.0)], 10.0, 1, [2.0]),
    ("steps across bins", [(2.0, 1.0), (7.0, 3.0)], 10.0, 2, [0.6, 2.2]),
    ("changes at one instant keep the last value", [(2.0, 1.0), (2.0, 5.0)], 4.0, 2, [0.0, 5.0]),
    ("changes after the end are ignored", [(1.0, 2.0), (20.0, 9.0)], 2.0, 2, [0.0, 2.0]),
]


@pytest.mark.parametrize(
    ("title", "changes", "end", "bins", "expected"), SERIES_CASES, ids=[c[0] for c in SERIES_CASES]
)
def test_step_series_bins_are_time_weighted_averages(
    title: str, changes: list[tuple[float, float]], end: float, bins: int, expected: list[float]
) -> None:
    series = StepSeries()
    for time, value in changes:
        series.set(time, value)
    assert binned(series, end, bins) == pytest.approx(expected)


def test_step_series_integral() -> None:
    series = StepSeries()
    series.set(0.0, 2.0)
    series.add(3.0, 1.0)
    assert series.integral(5.0) == pytest.approx(2 * 3 + 3 * 2)


def team(**extra: object) -> TeamArrivals:
    fields: dict[str, object] = {"namespace": "a", "queue": "q", "duration": Distribution(constant=60)}
    return TeamArrivals.model_validate({**fields, **extra})


def test_fixed_intervals_start_at_start_and_stop_at_count() -> None:
    jobs = generate(Generator(horizon=100, teams=[team(every=0.5, count=3, start=1)]), seed=0)
    assert [j.submit_s for j in jobs] == [1.0, 1.5, 2.0]
    assert [j.name for j in jobs] == ["q-00000", "q-00001", "q-00002"]


def test_poisson_arrivals_are_seeded_per_team() -> None:
    one = Generator(horizon=36_000, teams=[team(arrivalsPerHour=10)])
    two = Generator(horizon=36_000, teams=[team(arrivalsPerHour=10), team(namespace="b", arrivalsPerHour=5)])
    first = [j for j in generate(two, seed=7) if j.namespace == "a"]
    assert generate(one, seed=7) == first  # adding a team leaves the others' arrivals alone
    assert generate(one, seed=7) != generate(one, seed=8)
    assert 60 <= len(first) <= 140  # about 100 in 10 hours


DRAW_CASES = [
    ("constant", Distribution(constant=3), {3.0}),
    ("choice with weights never picks a zero weight", Distribution(choice=[1, 8], weights=[1, 0]), {1.0}),
    ("uniform stays in bounds", Distribution(uniform=(2, 3)), None),
]


@pytest.mark.parametrize(("title", "distribution", "values"), DRAW_CASES, ids=[c[0] for c in DRAW_CASES])
def test_draws(title: str, distribution: Distribution, values: set[float] | None) -> None:
    import random

    rng = random.Random(1)
    drawn = {draw(distribution, rng) for _ in range(200)}
    if values is not None:
        assert drawn == values
    else:
        assert all(2 <= v <= 3 for v in drawn)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"constant": 1, "choice": [1]}, "exactly one of"),
        ({}, "exactly one of"),
        ({"choice": [1, 2], "weights": [1]}, "same length"),
        ({"uniform": [3, 1]}, "lower bound is above"),
        ({"exponential": -1}, "greater than 0"),
    ],
)
def test_bad_distributions_are_refused(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Distribution.model_validate(data)


def test_a_team_needs_exactly_one_arrival_rate() -> None:
    with pytest.raises(ValueError, match="exactly one of arrivalsPerHour or every"):
        team()


def queue(name: str, nominal: int) -> ClusterQueue:
    flavor = FlavorQuotas("gpu", {"nvidia.com/gpu": ResourceQuota(nominal)})
    return ClusterQueue(name, (ResourceGroup(("nvidia.com/gpu",), (flavor,)),), cohort="c")


def test_borrowed_and_lent_gpu_time_per_queue_and_cohort() -> None:
    """a (nominal 4) runs 8 GPUs for 10 s: it borrows 4, b (nominal 4, idle) lends them; then b
    uses 2 of its own for 10 s while a still borrows 4: b lends only 2 (c's own quota is none)."""
    config = ClusterConfig(cluster_queues={"a": queue("a", 4), "b": queue("b", 4)})
    recorder = Recorder(config)
    recorder.queue_usage(0.0, "a", {("gpu", "nvidia.com/gpu"): 8}, 1)
    recorder.queue_usage(10.0, "b", {("gpu", "nvidia.com/gpu"): 2}, 1)
    recorder.close(20.0)
    a, b = recorder.queues["a"], recorder.queues["b"]
    assert (a.borrowed_s, a.lent_s) == (80.0, 0.0)
    assert (b.borrowed_s, b.lent_s) == (0.0, 40.0 + 20.0)
    cohort = recorder.cohorts["c"]
    assert (cohort.borrowed_s, cohort.lent_s) == (80.0, 60.0)


def test_quantiles_interpolate_like_numpy() -> None:
    assert quantiles([1, 2, 3, 4]) == {"count": 4, "mean": 2.5, "p50": 2.5, "p90": 3.7, "p99": 3.97, "max": 4}
    assert quantiles([])["p50"] is None
    assert percentile([0, 10], 25) == 2.5


def test_jain_index() -> None:
    fair = [{"gpu_hours_share": 0.5, "quota_share": 0.5}, {"gpu_hours_share": 0.5, "quota_share": 0.5}]
    unfair = [{"gpu_hours_share": 1.0, "quota_share": 0.5}, {"gpu_hours_share": 0.0, "quota_share": 0.5}]
    assert jain(fair) == 1.0 and jain(unfair) == 0.5 and jain([]) is None


@pytest.mark.parametrize(
    ("name", "cls"),
    [("small-00042", "small"), ("retrain-7", "retrain"), ("single", "single"), ("a-b-c", "a-b-c")],
)
def test_workload_class_is_the_name_without_its_number(name: str, cls: str) -> None:
    assert workload_class(name) == cls
