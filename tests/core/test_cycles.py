"""run_cycles: evictions complete between cycles, and the run ends when nothing more can change."""

from __future__ import annotations

import pytest

from builders import cluster_queue, config, scheduler_with, workload
from gpuq.core.cycles import run_cycles
from gpuq.core.model import PreemptionPolicy, StopPolicy

ANY = PreemptionPolicy.ANY

# Each queue reclaims its nominal quota in one flavor, then, once the victim is
# gone, stops its flavor search at an earlier flavor where it can borrow
# (whenCanBorrow=MayStopSearch); the reclaimed quota goes to the next borrower
# and the four workloads preempt each other in a loop of four cycles.
FLAPPING = config(
    cluster_queue("q0").cohort("c").flavor("f2", gpu=0).flavor("f1", gpu=2).preemption(reclaim=ANY).build(),
    cluster_queue("q1").cohort("c").flavor("f1", gpu=2).flavor("f2", gpu=1).preemption(reclaim=ANY).build(),
    cluster_queue("q2").cohort("c").flavor("f1", gpu=0).flavor("f2", gpu=2).preemption(reclaim=ANY).build(),
)
FLAPPING_WORKLOADS = [
    workload(name).queue(queue).priority(priority).created(i).request(gpu=2).build()
    for i, (name, queue, priority) in enumerate(
        [("w0", "q1", 0), ("w1", "q0", 1), ("w2", "q2", 1), ("w3", "q0", 1), ("w4", "q2", 0)]
    )
]


def test_preemption_flapping_stops_the_run_with_its_period() -> None:
    run = run_cycles(scheduler_with(FLAPPING, FLAPPING_WORKLOADS))
    assert not run.quiescent
    assert run.flapping_period == 4
    assert run.cycles == 17  # one cycle of admissions, then four full periods observed
    assert set(run.preempted) == {"default/w1", "default/w2", "default/w3", "default/w4"}


def test_a_run_without_flapping_ends_quiescent() -> None:
    cfg = config(cluster_queue("a").flavor("f", gpu=4).build())
    run = run_cycles(
        scheduler_with(
            cfg, [workload(f"w{i}").queue("a").created(i).request(gpu=2).build() for i in range(3)]
        )
    )
    assert run.quiescent
    assert run.flapping_period is None
    assert sorted(run.admitted) == ["default/w0", "default/w1"]
    assert "insufficient unused quota" in run.pending["default/w2"].message


def test_max_cycles_bounds_the_run() -> None:
    run = run_cycles(scheduler_with(FLAPPING, FLAPPING_WORKLOADS), max_cycles=3)
    assert run.cycles == 3
    assert not run.quiescent
    assert run.flapping_period is None


@pytest.mark.parametrize(
    ("policy", "holds_quota", "why"),
    [
        (StopPolicy.HOLD, True, "waiting in ClusterQueue"),
        (StopPolicy.HOLD_AND_DRAIN, False, "evicted: ClusterQueue a is stopped (HoldAndDrain)"),
    ],
    ids=[
        "stopPolicy Hold keeps admitted workloads and admits nothing new",
        "stopPolicy HoldAndDrain also evicts the workloads it admitted",
    ],
)
def test_stopped_cluster_queue(policy: StopPolicy, holds_quota: bool, why: str) -> None:
    cfg = config(cluster_queue("a").flavor("f", gpu=4).stop(policy).build())
    running = workload("running").queue("a").request(gpu=2).admitted("a", {"gpu": "f"}).build()
    waiting = workload("waiting").queue("a").created(5).request(gpu=1).build()
    scheduler = scheduler_with(cfg, [running, waiting])
    run = run_cycles(scheduler)
    assert ("default/running" in scheduler.state.admitted) is holds_quota
    assert run.admitted == {}
    assert "is stopped" in run.pending["default/waiting"].message
    if not holds_quota:
        assert why in run.pending["default/running"].message
