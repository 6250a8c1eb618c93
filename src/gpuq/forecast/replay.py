"""How good are the forecasts? Replay a scenario, forecast at probe times, compare with what happened.

A simulation paused at ``t`` is turned into the :class:`Snapshot` a live control plane
would hold at ``t``: what holds quota and where its pods run, what waits in which
queue, which nodes are down, and the runs finished so far (the estimator learns them
as they finish, nothing from the future). Each probe's forecast of every waiting
workload that has not started yet is then checked against the complete run: the
absolute error of the predicted start and whether the actual start fell in the range,
grouped by how deep the workload's ClusterQueue was at the probe.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuq.core.lifecycle import WorkloadState
from gpuq.forecast.forecast import Forecast, ForecastSettings, forecast
from gpuq.sim.jobs import SimJob
from gpuq.sim.simulator import SimRun, Simulation
from gpuq.snapshot.cluster import PendingWorkload, RunningWorkload, Snapshot
from gpuq.snapshot.runtimes import EstimatorSettings, Finished, Profile, RuntimeEstimator, Source, quantile

ProbeCallback = Callable[[float, Simulation], None]
ProfileOf = Callable[[SimJob], Profile]
# Queue-depth bands: (lowest depth, name); a band runs up to the next one's lowest.
BANDS: tuple[tuple[int, str], ...] = ((1, "1-9"), (10, "10-99"), (100, "100-999"), (1000, "1000+"))
OVERALL = "all"
HELD = (WorkloadState.QUOTA_RESERVED, WorkloadState.ADMITTED, WorkloadState.RUNNING)
ENDED = (WorkloadState.SUCCEEDED, WorkloadState.FAILED)


def default_profile(job: SimJob) -> Profile:
    """Trace workloads name no user beyond their namespace: the namespace stands for it."""
    workload = job.workload
    return Profile(workload.namespace, workload.queue_name, user=workload.namespace, gpus=job.gpus)


@dataclass
class Replay:
    """Snapshots of one simulation as a live system would see it, learning runtimes as runs finish."""

    estimator: RuntimeEstimator = field(default_factory=RuntimeEstimator)
    profile_of: ProfileOf = default_profile
    recent_s: float | None = None  # keep the workloads submitted this long before (expected arrivals)
    _profiles: dict[str, Profile] = field(default_factory=dict, init=False, repr=False)
    _learned: set[str] = field(default_factory=set, init=False, repr=False)

    def profile(self, run: SimRun) -> Profile:
        profile = self._profiles.get(run.job.key)
        if profile is None:
            profile = self._profiles[run.job.key] = self.profile_of(run.job)
        return profile

    def snapshot(self, simulation: Simulation, at: float) -> Snapshot:
        """The cluster at ``at`` (the simulation paused before its next instant)."""
        scheduler = simulation.scheduler
        admitted = scheduler.state.admitted
        placer = simulation.placer
        placements = placer.placements if placer is not None else {}
        unplaced = scheduler.unplaced
        running: list[RunningWorkload] = []
        pending: list[PendingWorkload] = []
        recent: list[PendingWorkload] = []
        since = at - self.recent_s if self.recent_s else None
        for key, run in simulation.runs.items():
            if since is not None and run.job.workload.creation_time >= since:
                recent.append(PendingWorkload(run.job.workload, self.profile(run)))
            if run.status in HELD:
                held = admitted.get(key)
                if held is None:
                    continue
                placement = placements.get(key) if key not in unplaced else None
                started = run.started_at if run.status == WorkloadState.RUNNING else None
                bindings = placement.bindings if placement is not None else ()
                running.append(RunningWorkload(held.workload, self.profile(run), started, bindings))
            elif run.status == WorkloadState.PENDING and run.cluster_queue is not None:
                workload = scheduler.workloads.get(key, run.job.workload)
                pending.append(PendingWorkload(workload, self.profile(run)))
            elif run.status in ENDED and key not in self._learned:
                # The work the run needed: its whole run time when it was never evicted.
                self.estimator.add(Finished(self.profile(run), run.job.duration_s))
                self._learned.add(key)
        nodes = tuple(c.node for c in placer.nodes.values()) if placer is not None else ()
        return Snapshot(
            now=at,
            config=simulation.config,
            nodes=nodes,
            running=tuple(running),
            pending=tuple(pending),
            down=tuple(sorted(simulation.down)),
            recent=tuple(recent),
            policy=simulation.settings.policy,
            startup_s=simulation.settings.startup_s,
        )


@dataclass(frozen=True, slots=True)
class Prediction:
    """One probe's forecast for one waiting workload that had not started yet."""

    key: str
    at: float
    cluster_queue: str
    depth: int  # workloads pending in its ClusterQueue at the probe, itself included
    start_at: float | None
    start_range: tuple[float | None, float | None]
    source: Source


@dataclass(frozen=True, slots=True)
class ProbeStats:
    at: float
    running: int
    pending: int
    predictions: int
    took_s: float  # the forecast (both simulation runs)


@dataclass(frozen=True, slots=True)
class BandAccuracy:
    """Errors of predicted starts against actual first starts, for workloads that did start."""

    band: str
    predictions: int  # forecasts with an actual start and a predicted one
    median_abs_error_s: float | None
    p90_abs_error_s: float | None
    median_error_s: float | None  # predicted - actual: negative is too early
    in_range: float | None  # share of actual starts inside start_range
    never_started: int  # forecasts for workloads that did not start in the complete run
    beyond_horizon: int  # no predicted start within the horizon, yet it started

    def as_dict(self) -> dict[str, object]:
        return {
            "band": self.band,
            "predictions": self.predictions,
            "median_abs_error_s": self.median_abs_error_s,
            "p90_abs_error_s": self.p90_abs_error_s,
            "median_error_s": self.median_error_s,
            "in_range": self.in_range,
            "never_started": self.never_started,
            "beyond_horizon": self.beyond_horizon,
        }


@dataclass(frozen=True)
class Accuracy:
    overall: BandAccuracy
    bands: tuple[BandAccuracy, ...]
    probes: tuple[ProbeStats, ...]
    estimator: EstimatorSettings
    sources: dict[str, int]  # predictions per runtime source
    took_s: float

    def as_dict(self) -> dict[str, object]:
        settings = self.estimator
        forecasts = [p.took_s for p in self.probes]
        return {
            "estimator": {"low": settings.low, "high": settings.high, "min_runs": settings.min_runs},
            "probes": len(self.probes),
            "forecast_s": {
                "mean": sum(forecasts) / len(forecasts) if forecasts else None,
                "max": max(forecasts, default=None),
            },
            "sources": self.sources,
            "overall": self.overall.as_dict(),
            "bands": [b.as_dict() for b in self.bands],
            "took_s": self.took_s,
        }


def band_of(depth: int) -> str:
    """The band of a queue depth (1-9, 10-99, ...)."""
    name = BANDS[0][1]
    for lowest, band in BANDS:
        if depth >= lowest:
            name = band
    return name


def predictions_at(snapshot: Snapshot, result: Forecast, runs: dict[str, SimRun]) -> list[Prediction]:
    """The forecast's predicted starts for pending workloads that never started before the probe."""
    depths = Counter(runs[p.workload.key].cluster_queue for p in snapshot.pending)
    predictions = []
    for pending in snapshot.pending:
        key = pending.workload.key
        run = runs[key]
        eta = result.get(key)
        if run.first_started is not None or eta is None or run.cluster_queue is None:
            continue
        predictions.append(
            Prediction(
                key,
                snapshot.now,
                run.cluster_queue,
                depths[run.cluster_queue],
                eta.start_at,
                eta.start_range,
                eta.runtime.source,
            )
        )
    return predictions


def accuracy(
    build: Callable[[Sequence[float], ProbeCallback], Simulation],
    probes: Sequence[float],
    settings: EstimatorSettings | None = None,
    forecast_settings: ForecastSettings | None = None,
    profile_of: ProfileOf = default_profile,
    on_probe: Callable[[ProbeStats], None] | None = None,
) -> Accuracy:
    """Run the simulation ``build(probes, callback)`` makes, forecasting at each probe; score them."""
    started = time.perf_counter()
    estimator_settings = settings or EstimatorSettings()
    ahead = forecast_settings or ForecastSettings()
    replay = Replay(RuntimeEstimator(estimator_settings), profile_of, ahead.arrivals_window_s)
    predictions: list[Prediction] = []
    stats: list[ProbeStats] = []

    def probe(at: float, simulation: Simulation) -> None:
        snapshot = replay.snapshot(simulation, at)
        result = forecast(snapshot, replay.estimator, ahead)
        found = predictions_at(snapshot, result, simulation.runs)
        predictions.extend(found)
        stat = ProbeStats(at, len(snapshot.running), len(snapshot.pending), len(found), result.took_s)
        stats.append(stat)
        if on_probe is not None:
            on_probe(stat)

    simulation = build(sorted(probes), probe)
    runs = simulation.run().runs
    actual = {p.key: runs[p.key].first_started for p in predictions}
    by_band: dict[str, list[Prediction]] = {name: [] for _, name in BANDS}
    for prediction in predictions:
        by_band[band_of(prediction.depth)].append(prediction)
    sources = Counter(p.source.value for p in predictions)
    return Accuracy(
        overall=score(OVERALL, predictions, actual),
        bands=tuple(score(name, items, actual) for name, items in by_band.items()),
        probes=tuple(stats),
        estimator=estimator_settings,
        sources=dict(sorted(sources.items())),
        took_s=time.perf_counter() - started,
    )


def score(band: str, predictions: Sequence[Prediction], actual: dict[str, float | None]) -> BandAccuracy:
    """Error quantiles and range coverage of ``predictions`` against the actual first starts."""
    errors: list[float] = []
    inside = never = beyond = 0
    for prediction in predictions:
        started = actual[prediction.key]
        if started is None:
            never += 1
            continue
        if prediction.start_at is None:
            beyond += 1
            continue
        errors.append(prediction.start_at - started)
        inside += in_range(prediction.start_range, started)
    absolute = sorted(abs(e) for e in errors)
    signed = sorted(errors)
    return BandAccuracy(
        band=band,
        predictions=len(errors),
        median_abs_error_s=quantile(absolute, 0.5) if absolute else None,
        p90_abs_error_s=quantile(absolute, 0.9) if absolute else None,
        median_error_s=quantile(signed, 0.5) if signed else None,
        in_range=inside / len(errors) if errors else None,
        never_started=never,
        beyond_horizon=beyond,
    )


def in_range(bounds: tuple[float | None, float | None], actual: float) -> bool:
    """Inside ``[low, high]``; an open high end (beyond the horizon) holds anything from ``low`` on."""
    low, high = bounds
    if low is None:
        return False
    return low <= actual and (high is None or actual <= high)


def probe_times(first: float, every: float, until: float, most: int | None = None) -> list[float]:
    """``first``, ``first + every``, ... up to ``until``; at most ``most`` of them, spread evenly."""
    if every <= 0:
        raise ValueError("the probe interval must be positive")
    count = int((until - first) // every) + 1 if until >= first else 0
    times = [first + i * every for i in range(count)]
    if most is not None and len(times) > most:
        step = len(times) / most
        times = [times[int(i * step)] for i in range(most)]
    return times
