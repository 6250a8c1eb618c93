"""Simulator cost per event against the pending-queue length: does an event get dearer as queues deepen?

Runs one simulation (the synthetic cluster of ``bench/simulate.py``, or a Scenario's
variant with ``--scenario``) and times every instant the simulator handles (the events
due, then the scheduling pass they trigger). Each instant is put in a bucket by the
number of workloads pending in the ClusterQueues when it starts; the table shows, per
bucket, the instants, the events, the seconds spent and the microseconds per event. An
engine at event speed has a flat last column. Usage:

    .venv/bin/python bench/sim_events.py [--workloads 20000] [--load 1.1] [--nodes 1000]
    .venv/bin/python bench/sim_events.py --scenario examples/philly/scenario.yaml --variant kueue

It prints figures only and asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuq.sim.simulator import Simulation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simulate import synthetic_simulation  # a sibling benchmark, not a package

BUCKET_EDGES = (0, 10, 100, 1_000, 3_000, 10_000, 30_000, 100_000)


@dataclass
class Bucket:
    """What the instants that began with a pending length in [low, high) cost."""

    low: int
    high: int | None
    instants: int = 0
    events: int = 0
    seconds: float = 0.0


def bucket_index(pending: int) -> int:
    """The bucket of ``pending``: the last edge at or below it."""
    index = 0
    for i, edge in enumerate(BUCKET_EDGES):
        if pending >= edge:
            index = i
    return index


class InstantTimer:
    """The simulation's progress callback: it runs after each instant, so the time since the
    previous call is that instant's cost; the pending length is read for the next one."""

    def __init__(self) -> None:
        self.simulation: Simulation | None = None
        highs: list[int | None] = [*BUCKET_EDGES[1:], None]
        self.buckets = [Bucket(low, high) for low, high in zip(BUCKET_EDGES, highs, strict=True)]
        self.pending = 0
        self.events = 0
        self.mark = time.perf_counter()

    def __call__(self, _now: float) -> None:
        tick = time.perf_counter()
        assert self.simulation is not None
        bucket = self.buckets[bucket_index(self.pending)]
        bucket.instants += 1
        bucket.events += self.simulation.events - self.events
        bucket.seconds += tick - self.mark
        self.events = self.simulation.events
        self.pending = self.simulation.scheduler.pending_count()
        self.mark = time.perf_counter()  # the count itself is not charged to the next instant


def scenario_simulation(
    path: str, variant: str | None, on_progress: Callable[[float], None]
) -> tuple[str, Simulation]:
    from gpuq.sim.scenario import load_workloads, plan_scenario, prepare

    plan = plan_scenario([path], variant=variant)
    chosen = plan.variants[0]
    prepared = prepare(plan, chosen, load_workloads(plan))
    return f"{path} ({chosen.name}): {len(prepared.jobs):,} workloads", prepared.simulation(on_progress)


def print_table(label: str, timer: InstantTimer, wall_s: float) -> None:
    assert timer.simulation is not None
    events = timer.simulation.events
    print(f"{label}\n  wall {wall_s:.1f}s · {events:,} events · {events / wall_s:,.0f} events/s")
    print(f"  {'pending':>15} {'instants':>9} {'events':>9} {'seconds':>8} {'µs/event':>9}")
    for bucket in timer.buckets:
        if not bucket.instants:
            continue
        span = f"{bucket.low:,}–{bucket.high:,}" if bucket.high is not None else f"≥ {bucket.low:,}"
        per_event = bucket.seconds / bucket.events * 1e6 if bucket.events else 0.0
        print(
            f"  {span:>15} {bucket.instants:>9,} {bucket.events:>9,} {bucket.seconds:>8.2f} {per_event:>9.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", type=int, default=20_000)
    parser.add_argument("--load", type=float, default=1.1, help="offered GPU load ÷ capacity")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--scenario", help="a Scenario file instead of the synthetic cluster")
    parser.add_argument("--variant", help="the Scenario's variant (default: its first)")
    args = parser.parse_args()
    timer = InstantTimer()
    if args.scenario:
        label, simulation = scenario_simulation(args.scenario, args.variant, timer)
    else:
        label, simulation = synthetic_simulation(
            args.workloads, nodes=args.nodes, load_factor=args.load, on_progress=timer
        )
    timer.simulation = simulation
    started = time.perf_counter()
    timer.mark = started
    simulation.run()
    print_table(label, timer, time.perf_counter() - started)


if __name__ == "__main__":
    main()
