"""Admission Fair Sharing in simulated time: the bundled example's compare, and the decay's clock."""

from __future__ import annotations

import statistics
from pathlib import Path

from gpuq.sim.scenario import load_workloads, plan_scenario, prepare
from gpuq.sim.simulator import SimResult

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "admission-fair-sharing"


def run(variant: str) -> SimResult:
    plan = plan_scenario([str(EXAMPLE)], compare=True)
    chosen = next(v for v in plan.variants if v.name == variant)
    return prepare(plan, chosen, load_workloads(plan)).simulation().run()


def median_wait(result: SimResult, namespace: str) -> float:
    waits = [
        r.first_admitted - r.job.workload.creation_time
        for r in result.runs.values()
        if r.job.team == namespace and r.first_admitted is not None
    ]
    return statistics.median(waits)


def test_the_light_user_waits_less_than_the_flooding_one_only_with_admission_fair_sharing() -> None:
    off, on = run("off"), run("on")
    assert all(r.ended is not None for r in (*off.runs.values(), *on.runs.values()))  # both runs end
    bob_off, bob_on = median_wait(off, "vision-bob"), median_wait(on, "vision-bob")
    alice_on = median_wait(on, "vision-alice")
    assert bob_on < bob_off / 4  # without AFS bob queues behind alice's backlog
    assert bob_on < alice_on


def test_usage_is_sampled_on_the_simulated_clock() -> None:
    """The sampling timer is an event of the simulation: more events with AFS, none without."""
    off, on = run("off"), run("on")
    assert on.events > off.events
    assert {r.job.key for r in on.runs.values()} == {r.job.key for r in off.runs.values()}
