"""When will each waiting workload start? The simulator, run forward from a snapshot of the cluster.

The snapshot is what runs where and since when, what waits in which order, the
configuration and the nodes, with node arrivals still in flight. The forecast runs
the same engine twice with no new arrivals (optionally with a replay of the recent
past's arrivals): once with every runtime at its low estimate and once at its high
one. The low run gives each workload's expected admission and start; the two runs
together give the range. Running workloads get their expected end the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from gpuq.core.model import ClusterConfig, Workload
from gpuq.core.nodes import Node
from gpuq.core.placement.engine import PodBinding
from gpuq.forecast.runtimes import Estimate, Profile, RuntimeEstimator
from gpuq.sim.jobs import SimJob
from gpuq.sim.simulator import JobRun, NodeChange, Resident, SimResult, SimSettings, Simulation

DEFAULT_HORIZON_S = 30 * 86400.0
ARRIVAL_PREFIX = "expected-arrival-"


@dataclass(frozen=True, slots=True)
class RunningWorkload:
    """A workload holding quota: ``workload.admission`` set; ``started_at`` None while its pods are
    not running yet; ``bindings`` where its pods are (empty: not bound, or the nodes are unknown)."""

    workload: Workload
    profile: Profile
    started_at: float | None
    bindings: tuple[PodBinding, ...] = ()


@dataclass(frozen=True, slots=True)
class PendingWorkload:
    workload: Workload
    profile: Profile


@dataclass(frozen=True, slots=True)
class NodeArrival:
    """Nodes being provisioned (listed in the snapshot's nodes) and when they are expected ready."""

    nodes: tuple[str, ...]
    ready_at: float


@dataclass(frozen=True)
class Snapshot:
    """The cluster at ``now`` (seconds since the epoch, or any clock the workloads' times share)."""

    now: float
    config: ClusterConfig
    nodes: tuple[Node, ...] = ()
    running: tuple[RunningWorkload, ...] = ()
    pending: tuple[PendingWorkload, ...] = ()
    down: tuple[str, ...] = ()  # nodes out of service, not coming back on their own
    provisioning: tuple[NodeArrival, ...] = ()
    recent: tuple[PendingWorkload, ...] = ()  # workloads submitted lately (expected arrivals)
    policy: str = "binpack"
    startup_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ForecastSettings:
    """``horizon_s``: how far ahead to simulate; ``arrivals_window_s``: when set, the workloads
    submitted in that past window are expected again over the same span ahead."""

    horizon_s: float = DEFAULT_HORIZON_S
    arrivals_window_s: float | None = None


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


@dataclass(frozen=True)
class Forecast:
    at: float
    etas: Mapping[str, Eta]
    took_s: float
    horizon_s: float
    settings: ForecastSettings = field(default_factory=ForecastSettings)

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
    for pending in snapshot.pending:
        runtimes[pending.workload.key] = estimator.estimate(pending.profile)
    arrivals = _expected_arrivals(snapshot, estimator, settings)
    low = _simulate(snapshot, runtimes, arrivals, settings, lambda e: e.low_s)
    high = _simulate(snapshot, runtimes, arrivals, settings, lambda e: e.high_s)
    etas: dict[str, Eta] = {}
    states = {r.workload.key: "Running" if r.started_at is not None else "Admitted" for r in snapshot.running}
    for key, runtime in runtimes.items():
        expected, late = low.runs.get(key), high.runs.get(key)
        etas[key] = Eta(
            key=key,
            state=states.get(key, "Pending"),
            runtime=runtime,
            admit_at=_at(now, expected.first_admitted if expected else None),
            start_at=_at(now, _start(expected)),
            start_range=_range(now, _start(expected), _start(late)),
            end_at=_at(now, expected.ended if expected else None),
            end_range=_range(now, expected.ended if expected else None, late.ended if late else None),
        )
    return Forecast(now, etas, time.perf_counter() - started, settings.horizon_s, settings)


def _simulate(
    snapshot: Snapshot,
    runtimes: Mapping[str, Estimate],
    arrivals: list[tuple[Workload, Estimate, float]],
    settings: ForecastSettings,
    pick: Callable[[Estimate], float],
) -> SimResult:
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
    )
    return simulation.run()


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
    """Times relative to ``now``. A backoff still running is not modelled: the workload queues at 0."""
    reserved = workload.quota_reserved_time
    return replace(
        workload,
        creation_time=workload.creation_time - now,
        quota_reserved_time=reserved - now if reserved is not None else None,
        requeue_at=None,
    )


def _ready(arrival: NodeArrival) -> float:
    return arrival.ready_at


def _start(run: JobRun | None) -> float | None:
    return run.first_started if run is not None else None


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
