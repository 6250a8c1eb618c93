"""Synthetic workloads: Poisson arrivals per team with drawn sizes and durations.

Each team draws from its own random stream, seeded from the scenario seed and
the team's position, so adding a team never changes another team's workloads
and the same seed always gives the same trace.
"""

from __future__ import annotations

import math
import random

from gpuq.api.scenario import Distribution, Generator, TeamArrivals
from gpuq.core.model import Toleration
from gpuq.core.quantity import to_amount
from gpuq.sim.traces.model import TraceJob


def draw(distribution: Distribution, rng: random.Random) -> float:
    """One value of ``distribution``."""
    if distribution.constant is not None:
        return distribution.constant
    if distribution.choice is not None:
        if distribution.weights is None:
            return rng.choice(distribution.choice)
        return rng.choices(distribution.choice, weights=distribution.weights)[0]
    if distribution.uniform is not None:
        low, high = distribution.uniform
        return rng.uniform(low, high)
    if distribution.exponential is not None:
        return rng.expovariate(1 / distribution.exponential)
    assert distribution.lognormal is not None
    median, sigma = distribution.lognormal
    return rng.lognormvariate(math.log(median), sigma)


def generate(generator: Generator, seed: int) -> list[TraceJob]:
    """Every team's arrivals in [start, horizon), sorted by submission time."""
    jobs: list[TraceJob] = []
    line = 0
    for index, team in enumerate(generator.teams):
        rng = random.Random(f"{seed}:{index}:{team.namespace}/{team.queue}")
        for job in _team_jobs(team, generator.horizon, rng):
            line += 1
            jobs.append(_numbered(job, line))
    jobs.sort(key=lambda j: (j.submit_s, j.source_line))
    return jobs


def _team_jobs(team: TeamArrivals, horizon: float, rng: random.Random) -> list[TraceJob]:
    prefix = team.name_prefix or team.queue
    cpu = to_amount("cpu", team.cpu_per_pod) if team.cpu_per_pod is not None else None
    memory = to_amount("memory", team.memory_per_pod) if team.memory_per_pod is not None else None
    tolerations = tuple(Toleration(t.key, t.operator, t.value, t.effect) for t in team.tolerations)
    rate = team.arrivals_per_hour / 3600 if team.arrivals_per_hour else 0.0
    jobs: list[TraceJob] = []
    time = team.start
    while True:
        if team.every is not None:
            time = team.start + team.every * len(jobs)
        else:
            time += rng.expovariate(rate)
        if time >= horizon or (team.count is not None and len(jobs) >= team.count):
            return jobs
        gpus = draw(team.gpus_per_pod, rng)
        milli = 0 if gpus <= 0 else round(gpus * 1000) if gpus < 1 else 1000 * round(gpus)
        jobs.append(
            TraceJob(
                name=f"{prefix}-{len(jobs):05d}",
                namespace=team.namespace,
                queue=team.queue,
                submit_s=round(time, 3),
                duration_s=max(0.001, round(draw(team.duration, rng), 3)),
                pods=max(1, round(draw(team.pods, rng))),
                gpu_milli=milli,
                cpu_milli=cpu,
                memory_bytes=memory,
                priority=team.priority,
                gpu_model=team.gpu_model,
                checkpoint_s=team.checkpoint_interval,
                checkpoint_cost_s=team.checkpoint_cost,
                tolerations=tolerations,
                deadline_s=round(time, 3) + team.deadline_after if team.deadline_after else None,
            )
        )


def _numbered(job: TraceJob, line: int) -> TraceJob:
    from dataclasses import replace

    return replace(job, source_line=line)
