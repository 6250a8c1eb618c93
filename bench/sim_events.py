"""Simulator cost per event against the pending-queue length: does an event get dearer as queues deepen?

Runs one simulation (the synthetic cluster of ``bench/simulate.py``, or a Scenario's
variant with ``--scenario``) and times every instant the simulator handles (the events
due, then the scheduling pass they trigger). Each instant is put in a bucket by the
number of workloads pending in the ClusterQueues when it starts; the table shows, per
bucket, the instants, the events, the seconds spent, the microseconds per event, and per
event the scheduling cycles, the heads those cycles tried and the nominations worked out
anew (the others were reused). An engine at event speed has a flat µs/event column; the
three counts say whether work grows with the queue (heads retried) or only its price. Usage:

    .venv/bin/python bench/sim_events.py [--workloads 20000] [--load 1.1] [--nodes 1000]
    .venv/bin/python bench/sim_events.py --load 1.5             # deeper queues: thousands pending
    .venv/bin/python bench/sim_events.py --strict               # StrictFIFO queues
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
    cycles: int = 0
    heads: int = 0
    evaluated: int = 0


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
        self.counts = (0, 0, 0, 0)
        self.mark = time.process_time()

    def _counts(self) -> tuple[int, int, int, int]:
        """(events, cycles, heads tried, nominations worked out) so far; 0 where the engine
        does not count them."""
        assert self.simulation is not None
        scheduler = self.simulation.scheduler
        return (
            self.simulation.events,
            self.simulation.cycles,
            getattr(scheduler, "heads_tried", 0),
            getattr(scheduler.state, "evaluations", 0),
        )

    def __call__(self, _now: float) -> None:
        tick = time.process_time()
        assert self.simulation is not None
        bucket = self.buckets[bucket_index(self.pending)]
        counts = self._counts()
        events, cycles, heads, evaluated = (now - then for now, then in zip(counts, self.counts, strict=True))
        bucket.instants += 1
        bucket.events += events
        bucket.cycles += cycles
        bucket.heads += heads
        bucket.evaluated += evaluated
        bucket.seconds += tick - self.mark
        self.counts = counts
        self.pending = self.simulation.scheduler.pending_count()
        self.mark = time.process_time()  # the count itself is not charged to the next instant


def scenario_simulation(
    path: str, variant: str | None, on_progress: Callable[[float], None]
) -> tuple[str, Simulation]:
    from gpuq.sim.scenario import load_workloads, plan_scenario, prepare

    plan = plan_scenario([path], variant=variant)
    chosen = plan.variants[0]
    prepared = prepare(plan, chosen, load_workloads(plan))
    return f"{path} ({chosen.name}): {len(prepared.jobs):,} workloads", prepared.simulation(on_progress)


def print_table(label: str, timer: InstantTimer, wall_s: float, cpu_s: float) -> None:
    assert timer.simulation is not None
    events = timer.simulation.events
    print(
        f"{label}\n  wall {wall_s:.1f}s · CPU {cpu_s:.1f}s · {events:,} events"
        f" · {events / cpu_s:,.0f} events per CPU-second"
    )
    print(
        f"  {'pending':>15} {'instants':>9} {'events':>9} {'CPU s':>8} {'µs/event':>9}"
        f" {'cycles/ev':>9} {'heads/ev':>9} {'worked/ev':>9}"
    )
    for bucket in timer.buckets:
        if not bucket.instants:
            continue
        span = f"{bucket.low:,}–{bucket.high:,}" if bucket.high is not None else f"≥ {bucket.low:,}"
        events = bucket.events or 1
        print(
            f"  {span:>15} {bucket.instants:>9,} {bucket.events:>9,} {bucket.seconds:>8.2f}"
            f" {bucket.seconds / events * 1e6:>9.0f} {bucket.cycles / events:>9.2f}"
            f" {bucket.heads / events:>9.2f} {bucket.evaluated / events:>9.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", type=int, default=20_000)
    parser.add_argument("--load", type=float, default=1.1, help="offered GPU load ÷ capacity")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--strict", action="store_true", help="StrictFIFO queues (default BestEffortFIFO)")
    parser.add_argument("--scenario", help="a Scenario file instead of the synthetic cluster")
    parser.add_argument("--variant", help="the Scenario's variant (default: its first)")
    args = parser.parse_args()
    timer = InstantTimer()
    if args.scenario:
        label, simulation = scenario_simulation(args.scenario, args.variant, timer)
    else:
        label, simulation = synthetic_simulation(
            args.workloads,
            nodes=args.nodes,
            load_factor=args.load,
            on_progress=timer,
            strategy="StrictFIFO" if args.strict else "BestEffortFIFO",
        )
    timer.simulation = simulation
    started, cpu = time.perf_counter(), time.process_time()
    timer.mark = cpu
    simulation.run()
    print_table(label, timer, time.perf_counter() - started, time.process_time() - cpu)


if __name__ == "__main__":
    main()
