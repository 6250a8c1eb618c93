"""The run's progress (what ``gpuq simulate``'s bar shows) counts the drain after the last arrival:
it reaches 1 only when every workload is done, or at the horizon."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuq.api.loader import load
from gpuq.sim.jobs import to_sim_jobs
from gpuq.sim.simulator import SimSettings, Simulation
from gpuq.sim.traces.model import TraceJob

try:
    from sim_cluster import cluster, job
except ImportError:  # tests/sim became a package
    from sim.sim_cluster import cluster, job


def progress_by_instant(
    path: Path, jobs: list[TraceJob], settings: SimSettings
) -> tuple[list[tuple[float, float]], Simulation]:
    """``(now, progress)`` after every instant the simulation handles."""
    loaded = load([str(path)])
    assert loaded.config is not None, loaded.errors
    sim_jobs, bad = to_sim_jobs(jobs, {}, loaded.gpu_catalogue, "test")
    assert not bad
    seen: list[tuple[float, float]] = []
    simulation: Simulation | None = None

    def record(now: float) -> None:
        assert simulation is not None
        seen.append((now, simulation.progress()))

    simulation = Simulation(loaded.config, loaded.nodes, sim_jobs, settings, on_progress=record)
    simulation.run()
    return seen, simulation


# Two 8-GPU jobs on one 8-GPU node: a1 runs 0–100, a2 (arrives at 10) waits and runs 100–200.
QUEUED = [job("a1", "team-a", 0, 100, 8), job("a2", "team-a", 10, 100, 8)]

CASES = [
    (
        "the last arrival is half way: the drain that follows is the other half",
        QUEUED,
        SimSettings(),
        [(0.0, 0.25), (10.0, 0.5), (100.0, 0.75), (200.0, 1.0)],
    ),
    (
        "a workload refused a queue is done when it arrives",
        [job("a1", "team-a", 0, 100, 8), TraceJob("x", "team-c", "q", 5, 10, gpu_milli=1000)],
        SimSettings(),
        [(0.0, 0.25), (5.0, 0.75), (100.0, 1.0)],
    ),
    (
        "with a horizon, progress is the share of it elapsed",
        QUEUED,
        SimSettings(horizon_s=50),
        [(0.0, 0.0), (10.0, 0.2)],
    ),
]


@pytest.mark.parametrize(("name", "jobs", "settings", "expected"), CASES, ids=[c[0] for c in CASES])
def test_progress_counts_arrivals_and_ends(
    tmp_path: Path,
    name: str,
    jobs: list[TraceJob],
    settings: SimSettings,
    expected: list[tuple[float, float]],
) -> None:
    seen, _ = progress_by_instant(cluster(tmp_path), jobs, settings)
    assert seen == expected


def test_progress_reaches_one_only_at_the_last_instant(tmp_path: Path) -> None:
    """Many workloads queued behind one node: the bar is never full before the run's end."""
    jobs = [job(f"a{i}", "team-a", i, 50, 8) for i in range(12)]
    seen, simulation = progress_by_instant(cluster(tmp_path), jobs, SimSettings())
    values = [p for _, p in seen]
    assert values == sorted(values)
    assert values[-1] == 1.0 and all(p < 1.0 for p in values[:-1])
    last_arrival = max(t for t, _ in seen if t <= 11)
    assert dict(seen)[last_arrival] < 0.6  # eleven workloads are still to run after it
    assert simulation.settled == len(jobs)
