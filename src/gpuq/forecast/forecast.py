"""When will each waiting workload start? The simulator, run forward from a snapshot of the cluster.

The snapshot (:class:`~gpuq.snapshot.cluster.Snapshot`) is what runs where and since when, what
waits in which order, the configuration and the nodes, with node arrivals still in flight. The forecast runs
the same engine twice with no new arrivals (optionally with a replay of the recent
past's arrivals): once with every runtime at its low estimate and once at its high
one. The low run gives each workload's expected admission and start; the two runs
together give the range. Running workloads get their expected end the same way.

The exact engine costs about one scheduling cycle per parked shape per finish, so
each run is exact until it has admitted ``exact_starts`` waiting workloads; the
rest of a deeper queue goes on by quota alone (:mod:`gpuq.forecast.queue_model`)
and its ETAs say so (``method``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from gpuq.core.lifecycle import WorkloadState
from gpuq.core.model import Workload
from gpuq.forecast.defaults import DEFAULT_EXACT_STARTS, DEFAULT_HORIZON_S, PARALLEL_MIN
from gpuq.forecast.fork import Forked, can_fork
from gpuq.forecast.queue_model import Holding, Waiting, continue_queue
from gpuq.sim.jobs import SimJob
from gpuq.sim.simulator import NodeChange, Resident, SimSettings, Simulation
from gpuq.snapshot.cluster import NodeArrival, Snapshot
from gpuq.snapshot.runtimes import Estimate, Profile, RuntimeEstimator

SIMULATED = "simulated"
QUEUE_MODEL = "queue model"
ARRIVAL_PREFIX = "expected-arrival-"


@dataclass(frozen=True, slots=True)
class ForecastSettings:
    """``horizon_s``: how far ahead to simulate; ``arrivals_window_s``: when set, the workloads
    submitted in that past window are expected again over the same span ahead; ``exact_starts``:
    waiting workloads the exact engine admits before the queue model takes over (None: all);
    ``parallel_min``: from this many workloads the high run goes to a forked process while the low
    one runs here, where fork exists and there are two CPUs (None: never)."""

    horizon_s: float = DEFAULT_HORIZON_S
    arrivals_window_s: float | None = None
    exact_starts: int | None = DEFAULT_EXACT_STARTS
    parallel_min: int | None = PARALLEL_MIN


@dataclass(frozen=True, slots=True)
class Eta:
    """One workload's forecast (absolute times; None: not within the horizon)."""

    key: str
    state: str  # Pending, Admitted (pods not running yet) or Running
    runtime: Estimate
    admit_at: float | None
    start_at: float | None  # expected start (low runtimes)
    start_range: tuple[float | None, float | None]
    end_at: float | None
    end_range: tuple[float | None, float | None]
    method: str = SIMULATED  # or QUEUE_MODEL: past the exact part of a deep queue


@dataclass(frozen=True, slots=True)
class Outcome:
    """One run's times for one workload, relative to the snapshot (None: not within the horizon)."""

    admitted: float | None
    started: float | None
    ended: float | None
    modelled: bool = False


@dataclass(frozen=True)
class Forecast:
    at: float
    etas: Mapping[str, Eta]
    took_s: float
    horizon_s: float
    settings: ForecastSettings = field(default_factory=ForecastSettings)
    runs_s: tuple[float, float] = (0.0, 0.0)  # the low and the high run, each where it ran
    parallel: bool = False  # the high run went to a forked process

    def get(self, key: str) -> Eta | None:
        return self.etas.get(key)


def forecast(
    snapshot: Snapshot, estimator: RuntimeEstimator, settings: ForecastSettings = ForecastSettings()
) -> Forecast:
    started = time.perf_counter()
    now = snapshot.now
    runtimes: dict[str, Estimate] = {}
    for running in snapshot.running:
        elapsed = now - running.started_at if running.started_at is not None else 0.0
        runtimes[running.workload.key] = estimator.remaining(running.profile, elapsed)
    estimates: dict[Profile, Estimate] = {}  # many waiting workloads share a profile
    for pending in snapshot.pending:
        estimate = estimates.get(pending.profile)
        if estimate is None:
            estimate = estimates[pending.profile] = estimator.estimate(pending.profile)
        runtimes[pending.workload.key] = estimate
    arrivals = _expected_arrivals(snapshot, estimator, settings)

    def run(pick: Callable[[Estimate], float]) -> tuple[dict[str, Outcome], float]:
        began = time.perf_counter()
        return _simulate(snapshot, runtimes, arrivals, settings, pick), time.perf_counter() - began

    size = len(snapshot.running) + len(snapshot.pending) + len(arrivals)
    parallel = settings.parallel_min is not None and size >= settings.parallel_min and can_fork()
    child = Forked(lambda: run(_high)) if parallel else None
    low, low_s = run(_low)
    joined = child.join() if child is not None else None
    high, high_s = joined if joined is not None else run(_high)
    etas: dict[str, Eta] = {}
    states = {r.workload.key: "Running" if r.started_at is not None else "Admitted" for r in snapshot.running}
    for key, runtime in runtimes.items():
        expected, late = low.get(key, NEVER), high.get(key, NEVER)
        etas[key] = Eta(
            key=key,
            state=states.get(key, "Pending"),
            runtime=runtime,
            admit_at=_at(now, expected.admitted),
            start_at=_at(now, expected.started),
            start_range=_range(now, expected.started, late.started),
            end_at=_at(now, expected.ended),
            end_range=_range(now, expected.ended, late.ended),
            method=QUEUE_MODEL if expected.modelled or late.modelled else SIMULATED,
        )
    took = time.perf_counter() - started
    return Forecast(now, etas, took, settings.horizon_s, settings, (low_s, high_s), joined is not None)


def _low(estimate: Estimate) -> float:
    return estimate.low_s


def _high(estimate: Estimate) -> float:
    return estimate.high_s


def _simulate(
    snapshot: Snapshot,
    runtimes: Mapping[str, Estimate],
    arrivals: list[tuple[Workload, Estimate, float]],
    settings: ForecastSettings,
    pick: Callable[[Estimate], float],
) -> dict[str, Outcome]:
    now = snapshot.now
    residents = [
        Resident(
            SimJob(_relative(r.workload, now), 0.0, r.profile.gpus),
            pick(runtimes[r.workload.key]),
            r.bindings,
            started=r.started_at is not None,
        )
        for r in snapshot.running
    ]
    jobs = [
        SimJob(_relative(p.workload, now), pick(runtimes[p.workload.key]), p.profile.gpus)
        for p in snapshot.pending
    ]
    jobs += [SimJob(workload, pick(runtime), gpus) for workload, runtime, gpus in arrivals]
    provisioning = [
        NodeChange(max(a.ready_at - now, 0.0), "add", a.nodes)
        for a in sorted(snapshot.provisioning, key=_ready)
    ]
    simulation = Simulation(
        snapshot.config,
        snapshot.nodes,
        jobs,
        SimSettings(
            horizon_s=settings.horizon_s,
            startup_s=snapshot.startup_s,
            policy=snapshot.policy,
            node_changes=tuple(provisioning),
        ),
        initially_down=tuple(snapshot.down) + tuple(n for a in snapshot.provisioning for n in a.nodes),
        residents=residents,
        stop_when=_after_starts(settings.exact_starts, len(jobs)),
    )
    result = simulation.run()
    outcomes = {
        key: Outcome(run.first_admitted, run.first_started, run.ended) for key, run in result.runs.items()
    }
    if simulation.stopped_at is not None:
        outcomes.update(_continue(simulation, settings))
    return outcomes


def _after_starts(budget: int | None, waiting: int) -> Callable[[Simulation], bool] | None:
    if budget is None or waiting <= budget:
        return None
    return lambda simulation: simulation.first_admissions >= budget


def _continue(simulation: Simulation, settings: ForecastSettings) -> dict[str, Outcome]:
    """The paused exact run handed to the queue model: what holds quota until when, what waits."""
    at = simulation.now
    startup = simulation.settings.startup_s
    scheduler = simulation.scheduler
    holding: list[Holding] = []
    waiting: list[Waiting] = []
    outcomes: dict[str, Outcome] = {}
    for key, run in simulation.runs.items():
        if run.status.holds_quota and run.cluster_queue is not None:
            if run.started_at is not None:
                started = run.started_at
            else:
                started = (run.bound_at if run.bound_at is not None else at) + startup
            ends = started + run.remaining_s
            holding.append(Holding(key, run.cluster_queue, run.usage, ends))
            outcomes[key] = Outcome(
                run.first_admitted, run.first_started if run.first_started is not None else started, ends
            )
        elif run.status == WorkloadState.PENDING and run.cluster_queue is not None:
            workload = scheduler.workloads.get(key, run.job.workload)
            backoff = workload.requeue_at if workload.requeue_at is not None else -math.inf
            waiting.append(Waiting(workload, run.cluster_queue, run.remaining_s, backoff))
    for job in simulation.jobs[simulation.arrived :]:
        target, _ = scheduler.route(job.workload)
        if target is not None:
            arrives = max(job.workload.creation_time, job.workload.requeue_at or -math.inf, at)
            waiting.append(Waiting(job.workload, target, job.duration_s, arrives))
    capacity: dict[str, int] = {}
    placer = simulation.placer
    if placer is not None:
        for name, node in placer.nodes.items():
            if not simulation.is_down(name):
                for resource, amount in node.node.allocatable.items():
                    capacity[resource] = capacity.get(resource, 0) + amount
    modelled = continue_queue(
        simulation.config,
        capacity,
        at,
        holding,
        waiting,
        startup_s=startup,
        horizon_s=settings.horizon_s,
    )
    for key, times in modelled.items():
        previous = simulation.runs.get(key)  # none for a workload the simulation never admitted
        first_admitted = previous.first_admitted if previous is not None else None
        first_started = previous.first_started if previous is not None else None
        admitted = first_admitted if first_admitted is not None else times.admitted_at
        started = first_started if first_started is not None else times.started_at
        outcomes[key] = Outcome(admitted, started, times.ended_at, modelled=True)
    return outcomes


def _expected_arrivals(
    snapshot: Snapshot, estimator: RuntimeEstimator, settings: ForecastSettings
) -> list[tuple[Workload, Estimate, float]]:
    """The past window's submissions again, shifted one window ahead, under names of their own."""
    window = settings.arrivals_window_s
    if not window:
        return []
    expected = []
    for index, past in enumerate(sorted(snapshot.recent, key=lambda p: p.workload.creation_time)):
        created = past.workload.creation_time
        if not snapshot.now - window <= created < snapshot.now:
            continue
        workload = replace(
            past.workload,
            name=f"{ARRIVAL_PREFIX}{index}-{past.workload.name}",
            creation_time=created + window - snapshot.now,
            admission=None,
            quota_reserved_time=None,
            admission_checks={},
            requeue_at=None,
        )
        expected.append((workload, estimator.estimate(past.profile), past.profile.gpus))
    return expected


def _relative(workload: Workload, now: float) -> Workload:
    """Times relative to ``now``; a requeue backoff still running keeps the workload waiting."""
    reserved = workload.quota_reserved_time
    backoff = workload.requeue_at
    return replace(
        workload,
        creation_time=workload.creation_time - now,
        quota_reserved_time=reserved - now if reserved is not None else None,
        requeue_at=backoff - now if backoff is not None and backoff > now else None,
    )


NEVER = Outcome(None, None, None)


def _ready(arrival: NodeArrival) -> float:
    return arrival.ready_at


def _at(now: float, relative: float | None) -> float | None:
    return now + relative if relative is not None else None


def _range(now: float, a: float | None, b: float | None) -> tuple[float | None, float | None]:
    """Earliest and latest of two predictions; a missing one (beyond the horizon) makes the end open."""
    if a is None and b is None:
        return None, None
    if a is None or b is None:
        known = a if a is not None else b
        assert known is not None
        return now + known, None
    return now + min(a, b), now + max(a, b)
