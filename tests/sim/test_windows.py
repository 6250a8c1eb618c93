"""The arrival window apart from the drain, and cost per team and per node group (gpuq.sim.windows).

One 8-GPU node costs 32 USD an hour: 4 USD per GPU-hour, so each figure can be computed by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuq.sim.windows import window_metrics

try:
    from sim_cluster import cluster, job, simulate
except ImportError:  # tests/sim became a package
    from sim.sim_cluster import cluster, job, simulate

HOUR = 3600.0


def group(
    capacity: str, paid: float, used: float, gpu_hours: float, held: float, pool: str
) -> dict[str, Any]:
    return {
        "flavor": "gpu",
        "pool": pool,
        "capacity_type": capacity,
        "gpu_model": "A100-80GB",
        "paid": paid,
        "used": used,
        "idle": paid - used,
        "gpu_hours": gpu_hours,
        "allocated_gpu_hours": held,
    }


CASES = [
    (
        "half the node for the hour of arrivals, three quarters in the drain",
        {"quota": (4, 4)},
        [job("a1", "team-a", 0, 2 * HOUR, 4), job("b1", "team-b", HOUR, HOUR / 2, 4)],
        {
            "arrival": {
                "start_s": 0.0,
                "end_s": HOUR,
                "duration_s": HOUR,
                "gpu_hours_capacity": 8.0,
                "gpu_hours_allocated": 4.0,
                "gpu_allocation": 0.5,
                "gpu_occupancy": 0.5,
                "fragmentation": 1.0,
                "cost": {
                    "total": 32.0,
                    "used": 16.0,
                    "idle": 16.0,
                    "by_team": {"team-a": 16.0},
                    "by_group": [group("on-demand", 32.0, 16.0, 8.0, 4.0, "box")],
                },
            },
            "drain": {
                "start_s": HOUR,
                "end_s": 2 * HOUR,
                "duration_s": HOUR,
                "gpu_hours_capacity": 8.0,
                "gpu_hours_allocated": 6.0,
                "gpu_allocation": 0.75,
                "gpu_occupancy": 0.75,
                "fragmentation": 1.0,  # the free GPUs all sat on the partly used node
                "cost": {
                    "total": 32.0,
                    "used": 24.0,
                    "idle": 8.0,
                    "by_team": {"team-a": 16.0, "team-b": 8.0},
                    "by_group": [group("on-demand", 32.0, 24.0, 8.0, 6.0, "box")],
                },
            },
        },
    ),
]


@pytest.mark.parametrize(("options", "jobs", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_arrival_window_and_the_drain_are_measured_apart(
    tmp_path: Path, options: dict[str, Any], jobs: list[Any], expected: dict[str, Any]
) -> None:
    result = simulate(cluster(tmp_path, **options), jobs)
    windows = window_metrics(list(result.runs.values()), result.recorder, result.span_s)
    arrival = windows["arrival"]
    arrival["cost"]["by_team"] = {k: v for k, v in arrival["cost"]["by_team"].items() if v}
    assert {part: windows[part] for part in expected} == expected
    assert windows["before"]["duration_s"] == 0.0


def test_cost_is_split_by_capacity_type_used_beside_idle(tmp_path: Path) -> None:
    """Two pools, one node each: for the first half hour one node is full and one idle, then both are
    full; which node the first workload takes is the placer's, so the groups are compared as a set."""
    pools = (("reserved-pool", 1, "reserved"), ("ondemand-pool", 1, "on-demand"))
    jobs = [job("a1", "team-a", 0, HOUR, 8), job("a2", "team-a", HOUR / 2, HOUR / 2, 8)]
    result = simulate(cluster(tmp_path, (16, 0), pools=pools), jobs)
    windows = window_metrics(list(result.runs.values()), result.recorder, result.span_s)
    arrival, drain = windows["arrival"]["cost"], windows["drain"]["cost"]
    assert (arrival["total"], arrival["used"], arrival["idle"]) == (32.0, 16.0, 16.0)
    assert {(g["capacity_type"], g["paid"]) for g in arrival["by_group"]} == {
        ("reserved", 16.0),
        ("on-demand", 16.0),
    }
    assert sorted(g["used"] for g in arrival["by_group"]) == [0.0, 16.0]
    assert (drain["total"], drain["used"], drain["idle"]) == (32.0, 32.0, 0.0)
    assert sorted((g["capacity_type"], g["idle"]) for g in drain["by_group"]) == [
        ("on-demand", 0.0),
        ("reserved", 0.0),
    ]
