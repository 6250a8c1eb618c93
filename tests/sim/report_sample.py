"""A realistic ``SimulationMetrics`` dictionary for report tests and for looking at a report by hand.

``python tests/sim/report_sample.py /tmp/report.html`` writes a two-variant report.
The numbers are made up but consistent in shape with what the simulator emits: three teams in
three ClusterQueues, two of them in one cohort, 48 hours in 15-minute bins. Each variant draws from
its own seeded ``random.Random`` (by position), so the same arguments give the same dictionary.
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path
from typing import Any

TEAMS = (
    ("ml-research", "research", "shared", 32.0),
    ("nlp", "nlp", "shared", 16.0),
    ("vision", "vision", None, 16.0),
)
SPAN_S = 48 * 3600.0
BIN_S = 900.0


def quantiles(rng: random.Random, scale_s: float, count: int) -> dict[str, Any]:
    """A ``Q`` of an exponential-ish distribution with mean near ``scale_s``; nulls when ``count`` is 0."""
    if count == 0:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    jitter = rng.uniform(0.9, 1.1)
    return {
        "count": count,
        "mean": scale_s * jitter,
        "p50": scale_s * 0.69 * jitter,
        "p90": scale_s * 2.3 * jitter,
        "p99": scale_s * 4.6 * jitter,
        "max": scale_s * 6.1 * jitter,
    }


def stats(rng: random.Random, wait_scale_s: float, submitted: int, gpu_hours: float) -> dict[str, Any]:
    finished = int(submitted * 0.9)
    wait = quantiles(rng, wait_scale_s, submitted)
    return {
        "wait_s": wait,
        "jct_s": quantiles(rng, wait_scale_s + 5400.0, finished),
        # a workload of about 1.5 h: slowdown is (wait + run) / run, never under 1
        "slowdown": {k: v if k == "count" or v is None else 1 + v / 5400.0 for k, v in wait.items()},
        "gpu_hours": gpu_hours,
        "lost_gpu_hours": gpu_hours * 0.02,
        "submitted": submitted,
        "admitted": submitted - 3,
        "finished": finished,
        "failed": 2,
        "preempted": submitted // 20,
        "pending_at_end": 3,
    }


def series(rng: random.Random, load: float) -> dict[str, Any]:
    """Daily waves of load; pending queues build where allocation is near the top."""
    t_s = [i * BIN_S for i in range(int(SPAN_S / BIN_S))]
    wave = [0.5 + 0.5 * math.sin(2 * math.pi * t / 86400.0) for t in t_s]
    allocation = [min(1.0, load * (0.55 + 0.45 * w) + rng.uniform(-0.03, 0.03)) for w in wave]
    return {
        "bin_s": BIN_S,
        "t_s": t_s,
        "gpu_allocation": allocation,
        "gpu_occupancy": [min(1.0, a + 0.06) for a in allocation],
        "fragmentation": [max(0.0, 0.25 - 0.2 * a + rng.uniform(0, 0.03)) for a in allocation],
        "pending": {
            team: [max(0.0, 3 * w * (1.2 - load) * nominal / 16 + rng.uniform(0, 1)) for w in wave]
            for team, _, _, nominal in TEAMS
        },
        "running_gpus": {team: [a * nominal for a in allocation] for team, _, _, nominal in TEAMS},
    }


def wait_cdf(rng: random.Random, scale_s: float) -> dict[str, Any]:
    fractions = [i / 100 for i in range(101)]
    curve = lambda s: [-s * math.log(max(1e-3, 1 - f)) for f in fractions]  # noqa: E731
    cdf = {
        team: {"wait_s": curve(scale_s * rng.uniform(0.5, 1.5)), "fraction": fractions} for team, *_ in TEAMS
    }
    return {"all": {"wait_s": curve(scale_s), "fraction": fractions}, **cdf}


def variant(name: str, index: int) -> dict[str, Any]:
    rng = random.Random(1000 + index)
    wait_scale_s, load = 2400.0 / (1 + index), 0.7 + 0.1 * index
    gpus_total = sum(nominal for *_, nominal in TEAMS)
    used = load * gpus_total * SPAN_S / 3600
    # research and nlp lend each other idle quota in their cohort: what one borrows the other lends.
    research_borrows, nlp_borrows = rng.uniform(40, 200), rng.uniform(10, 120)
    borrowed = {"research": research_borrows, "nlp": nlp_borrows, "vision": 0.0}
    lent = {"research": nlp_borrows, "nlp": research_borrows, "vision": 0.0}
    gpu_hours = {cq: used * nominal / gpus_total + borrowed[cq] - lent[cq] for _, cq, _, nominal in TEAMS}
    teams = [
        {
            "name": team,
            "cluster_queues": [cq],
            "gpu_hours_share": gpu_hours[cq] / used,
            "quota_share": nominal / gpus_total,
            "cost": gpu_hours[cq] * 2.5,
            **stats(rng, wait_scale_s * rng.uniform(0.5, 1.5), 120, gpu_hours[cq]),
        }
        for team, cq, _, nominal in TEAMS
    ]
    queues = [
        {
            "name": cq,
            "cohort": cohort,
            "nominal_gpus": nominal,
            "borrowed_gpu_hours": borrowed[cq],
            "lent_gpu_hours": lent[cq],
            **stats(rng, wait_scale_s, 120, gpu_hours[cq]),
        }
        for _, cq, cohort, nominal in TEAMS
    ]
    in_cohort = research_borrows + nlp_borrows
    return {
        "name": name,
        "description": f"{name} admission over the sample cluster",
        "span_s": SPAN_S,
        "events": 9000 + index,
        "scheduling_passes": 3000 + index,
        "gpus_total": gpus_total,
        "workloads": {
            "submitted": 360,
            "admitted": 351,
            "started": 351,
            "finished": 324,
            "failed": 6,
            "running_at_end": 21,
            "pending_at_end": 9,
            "preemptions": 18 - 6 * index,
            "evictions": 18 - 6 * index,
        },
        "overall": stats(rng, wait_scale_s, 360, used),
        "teams": teams,
        "cluster_queues": queues,
        "cohorts": [
            {
                "name": "shared",
                "borrowed_gpu_hours": in_cohort,
                "lent_gpu_hours": in_cohort,
            }
        ],
        "cost": {
            "currency": "USD",
            "used": used * 2.5,
            "idle": (gpus_total * SPAN_S / 3600 - used) * 2.5,
            "total": gpus_total * SPAN_S / 3600 * 2.5,
        },
        "fairness": {"jain": 0.82 + 0.05 * index},
        "series": series(rng, load),
        "wait_cdf": wait_cdf(rng, wait_scale_s),
    }


def sample_metrics(variants: tuple[str, ...] = ("fcfs", "kueue")) -> dict[str, Any]:
    """The metrics of one run of the sample scenario, one variant per name in order."""
    return {
        "schema": "gpuq.dev/v1alpha1/SimulationMetrics",
        "scenario": "sample-three-teams",
        "seed": 7,
        "variants": [variant(name, i) for i, name in enumerate(variants)],
    }


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from gpuq.sim.report import write_report

    write_report(sample_metrics(), Path(sys.argv[1] if len(sys.argv) > 1 else "report.html"))
