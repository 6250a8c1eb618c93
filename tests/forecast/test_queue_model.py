"""The queue model that carries a deep queue past the exact part of a forecast: hand-computed cases."""

from __future__ import annotations

import math

import pytest

from builders import GPU, cluster_queue, cohort, config, workload
from gpuq.core.model import ClusterConfig, QueueingStrategy
from gpuq.forecast.queue_model import Holding, Modelled, Waiting, continue_queue, demand_of


def waiting(name: str, cq: str, gpus: int, runtime: float, created: float, **kw: float) -> Waiting:
    w = workload(name).queue(cq).created(created).request(1, gpu=gpus).build()
    return Waiting(w, cq, runtime, **kw)


def starts(results: dict[str, Modelled]) -> dict[str, float]:
    return {key.split("/")[1]: times.started_at for key, times in results.items()}


def one_queue(strategy: QueueingStrategy) -> ClusterConfig:
    return config(cluster_queue("a").flavor("gpu", gpu=8).strategy(strategy).build())


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        # r frees 4 at 100: p1 takes them. At 150 p1 and s end together: p2 (8, ahead of p3 in
        # queue order) runs 150..160, then p3.
        (QueueingStrategy.BEST_EFFORT_FIFO, {"p1": 100.0, "p2": 150.0, "p3": 160.0}),
        # StrictFIFO gives the same: nothing lets p3 pass p2 here.
        (QueueingStrategy.STRICT_FIFO, {"p1": 100.0, "p2": 150.0, "p3": 160.0}),
    ],
)
def test_heads_in_queue_order_as_capacity_frees(
    strategy: QueueingStrategy, expected: dict[str, float]
) -> None:
    results = continue_queue(
        one_queue(strategy),
        {GPU: 8},
        100.0,
        [
            Holding("default/r", "a", {("gpu", GPU): 4}, 100.0),
            Holding("default/s", "a", {("gpu", GPU): 4}, 150.0),
        ],
        [waiting("p1", "a", 4, 50, 1), waiting("p2", "a", 8, 10, 2), waiting("p3", "a", 4, 30, 3)],
    )
    assert starts(results) == expected


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        # At 0, 4 free: p1 (4) starts; p2 (8) does not fit; p3 (4) is behind p1 in its shape and
        # starts when p1 ends at 50 (BestEffortFIFO lets it pass p2); p2 once both are done.
        (QueueingStrategy.BEST_EFFORT_FIFO, {"p1": 0.0, "p3": 50.0, "p2": 100.0}),
        # StrictFIFO: p2 blocks p3 until it has run (100..110).
        (QueueingStrategy.STRICT_FIFO, {"p1": 0.0, "p2": 100.0, "p3": 110.0}),
    ],
)
def test_best_effort_fifo_backfills_and_strict_fifo_blocks(
    strategy: QueueingStrategy, expected: dict[str, float]
) -> None:
    results = continue_queue(
        one_queue(strategy),
        {GPU: 8},
        0.0,
        [Holding("default/r", "a", {("gpu", GPU): 4}, 100.0)],
        [waiting("p1", "a", 4, 50, 1), waiting("p2", "a", 8, 10, 2), waiting("p3", "a", 4, 30, 3)],
    )
    assert starts(results) == expected
    assert results["default/p2"] == Modelled(expected["p2"], expected["p2"], expected["p2"] + 10)


@pytest.mark.parametrize(
    ("borrowing_limit", "expected"),
    [
        (None, {"big": 0.0}),  # a's 8-GPU job borrows b's idle 4 at once
        (0, {}),  # it may not borrow: it never fits in a's 4 (not within the horizon)
    ],
)
def test_borrowing_in_a_cohort_follows_the_quota_tree(
    borrowing_limit: int | None, expected: dict[str, float]
) -> None:
    cfg = config(
        cluster_queue("a").cohort("all").flavor("gpu", gpu=(4, borrowing_limit, None)).build(),
        cluster_queue("b").cohort("all").flavor("gpu", gpu=4).build(),
        cohorts=(cohort("all").build(),),
    )
    results = continue_queue(cfg, {GPU: 8}, 0.0, [], [waiting("big", "a", 8, 100, 1)], horizon_s=1000)
    assert starts(results) == expected


def test_the_first_flavor_with_quota_is_taken() -> None:
    cfg = config(cluster_queue("a").flavor("h100", gpu=4).flavor("a100", gpu=8).build())
    results = continue_queue(
        cfg,
        {GPU: 16},
        0.0,
        [],
        [waiting("x", "a", 4, 100, 1), waiting("y", "a", 8, 100, 2), waiting("z", "a", 4, 100, 3)],
    )
    # x takes h100's 4; y needs 8: a100; z: neither has 4 left until x ends at 100 (h100 again).
    assert starts(results) == {"x": 0.0, "y": 0.0, "z": 100.0}


def test_the_cluster_capacity_bounds_admissions_beyond_quota() -> None:
    cfg = config(cluster_queue("a").flavor("gpu", gpu=100).build())
    results = continue_queue(cfg, {GPU: 8}, 0.0, [], [waiting(f"w{i}", "a", 8, 60, i) for i in range(3)])
    assert starts(results) == {"w0": 0.0, "w1": 60.0, "w2": 120.0}


def test_arrivals_queue_when_they_arrive_and_startup_delays_the_start() -> None:
    results = continue_queue(
        one_queue(QueueingStrategy.BEST_EFFORT_FIFO),
        {GPU: 8},
        0.0,
        [],
        [waiting("now", "a", 8, 100, 1), waiting("later", "a", 8, 10, 2, arrives_at=500.0)],
        startup_s=5.0,
    )
    assert results["default/now"] == Modelled(0.0, 5.0, 105.0)
    assert results["default/later"] == Modelled(500.0, 505.0, 515.0)


def test_a_holding_past_its_end_frees_at_the_start() -> None:
    results = continue_queue(
        one_queue(QueueingStrategy.BEST_EFFORT_FIFO),
        {GPU: 8},
        50.0,
        [Holding("default/r", "a", {("gpu", GPU): 8}, 10.0)],
        [waiting("p", "a", 8, 1, 1)],
    )
    assert starts(results) == {"p": 50.0}


def test_a_queue_the_configuration_does_not_have_is_left_out() -> None:
    results = continue_queue(
        one_queue(QueueingStrategy.BEST_EFFORT_FIFO), {GPU: 8}, 0.0, [], [waiting("p", "gone", 1, 1, 1)]
    )
    assert results == {}


def test_demand_sums_every_pod_of_every_pod_set() -> None:
    w = workload("w").pod_set("driver", 1, cpu=2).pod_set("workers", 4, gpu=2, cpu=8).build()
    assert dict(demand_of(w)) == {"cpu": 34_000, GPU: 8}


def test_priority_goes_first_across_queues() -> None:
    cfg = config(
        cluster_queue("a").cohort("all").flavor("gpu", gpu=8).build(),
        cluster_queue("b").cohort("all").flavor("gpu", gpu=8).build(),
        cohorts=(cohort("all").build(),),
    )
    urgent = workload("urgent").queue("b").created(9).priority(100).request(1, gpu=8).build()
    results = continue_queue(
        cfg,
        {GPU: 8},
        0.0,
        [Holding("default/r", "a", {("gpu", GPU): 8}, 10.0)],
        [waiting("early", "a", 8, 10, 1), Waiting(urgent, "b", 10)],
    )
    assert starts(results) == {"urgent": 10.0, "early": 20.0}
    assert math.isinf(Waiting(urgent, "b", 1).arrives_at)
