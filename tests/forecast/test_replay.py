"""Replayed forecasts: probes in the simulator, snapshots as a live system sees them, and their scores."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuq.api.loader import load
from gpuq.cli import app
from gpuq.core.lifecycle import WorkloadState
from gpuq.core.model import ClusterConfig, PodSet, Workload
from gpuq.core.nodes import GPU, Node
from gpuq.forecast.forecast import ForecastSettings
from gpuq.forecast.replay import (
    Prediction,
    ProbeCallback,
    Replay,
    accuracy,
    band_of,
    default_profile,
    in_range,
    probe_times,
    score,
)
from gpuq.sim.jobs import SimJob
from gpuq.sim.simulator import SimSettings, Simulation
from gpuq.snapshot.runtimes import EstimatorSettings, Profile, RuntimeEstimator, Source

runner = CliRunner()

CLUSTER = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: team-a}
---
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {name: box}
spec: {machineType: box, count: 1, cpu: "64", memory: 512Gi, gpu: {model: A100-80GB, count: 8}}
"""

SCENARIO = """\
apiVersion: gpuq.dev/v1alpha1
kind: Scenario
metadata: {name: tiny}
spec:
  workloads:
    trace: {path: trace.csv}
"""

TRACE = "name,namespace,queue,submit_s,duration_s,priority,pods,gpus,cpu,memory,gpu_model\n" + "".join(
    f"j{i},team-a,q,{i * 10},100,,1,{4 if i % 2 else 8},,,\n" for i in range(12)
)


@pytest.fixture
def cluster(tmp_path: Path) -> tuple[ClusterConfig, tuple[Node, ...]]:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    result = load([str(tmp_path / "cluster.yaml")])
    assert not result.errors and result.config is not None
    return result.config, result.nodes


def job(name: str, gpus: int, created: float, duration: float) -> SimJob:
    pod_set = PodSet("main", 1, {GPU: gpus})
    return SimJob(Workload("team-a", name, "q", (pod_set,), creation_time=created, uid=name), duration, gpus)


def declared(job: SimJob) -> Profile:
    """Every runtime known exactly: the forecast of a closed queue is then exact."""
    return Profile(job.workload.namespace, job.workload.queue_name, gpus=job.gpus, expected_s=job.duration_s)


Build = Callable[[Sequence[float], ProbeCallback], Simulation]


def builder(
    cluster: tuple[ClusterConfig, tuple[Node, ...]], jobs: Sequence[SimJob]
) -> tuple[list[Simulation], Build]:
    """A simulation factory for :func:`accuracy` that keeps what it built."""
    made: list[Simulation] = []

    def build(probes: Sequence[float], on_probe: ProbeCallback) -> Simulation:
        simulation = Simulation(cluster[0], cluster[1], jobs, SimSettings(), probes=probes, on_probe=on_probe)
        made.append(simulation)
        return simulation

    return made, build


# a 8 GPUs 0-100, b 8 GPUs 100-300, c 8 GPUs 300-600: one at a time on the one node.
CLOSED = [job("a", 8, 0, 100), job("b", 8, 1, 200), job("c", 8, 2, 300)]


def test_a_closed_queue_with_declared_runtimes_is_forecast_exactly(
    cluster: tuple[ClusterConfig, tuple[Node, ...]],
) -> None:
    made, build = builder(cluster, CLOSED)
    result = accuracy(build, [50.0, 150.0, 450.0], profile_of=declared)
    overall = result.overall
    # probe 50: b (at 100) and c (at 300); probe 150: c; probe 450: nothing waits.
    assert overall.predictions == 3
    assert (overall.median_abs_error_s, overall.p90_abs_error_s, overall.in_range) == (0.0, 0.0, 1.0)
    assert [(p.at, p.running, p.pending, p.predictions) for p in result.probes] == [
        (50.0, 1, 2, 2),
        (150.0, 1, 1, 1),
        (450.0, 1, 0, 0),
    ]
    assert [b.predictions for b in result.bands] == [3, 0, 0, 0]
    assert result.sources == {Source.ANNOTATION.value: 3}
    runs = made[0].runs
    assert [runs[f"team-a/{n}"].first_started for n in "abc"] == [0.0, 100.0, 300.0]


def test_a_snapshot_holds_what_runs_where_what_waits_and_learns_finished_runs(
    cluster: tuple[ClusterConfig, tuple[Node, ...]],
) -> None:
    replay = Replay(profile_of=default_profile)
    seen: list[tuple[float, list[str], list[str], int, float | None]] = []

    def probe(at: float, simulation: Simulation) -> None:
        snapshot = replay.snapshot(simulation, at)
        running = [r.workload.key for r in snapshot.running]
        assert all(r.workload.admission is not None and r.bindings for r in snapshot.running)
        pending = [p.workload.key for p in snapshot.pending]
        learned = len(replay.estimator.runs(default_profile(CLOSED[0]))[1])
        started = snapshot.running[0].started_at if snapshot.running else None
        seen.append((at, running, pending, learned, started))

    Simulation(*cluster, CLOSED, probes=[100.0, 150.0, 350.0], on_probe=probe).run()
    # At 100 the events of 100 are not applied yet: a still runs; b's start is seen at 150.
    # The default estimator trusts a history level from 3 runs: 2 finished runs are not used yet.
    assert seen == [
        (100.0, ["team-a/a"], ["team-a/b", "team-a/c"], 0, 0.0),
        (150.0, ["team-a/b"], ["team-a/c"], 0, 100.0),
        (350.0, ["team-a/c"], [], 0, 300.0),
    ]
    one = Replay(RuntimeEstimator(EstimatorSettings(min_runs=1)), default_profile)
    snapshots = []
    Simulation(
        *cluster, CLOSED, probes=[350.0], on_probe=lambda t, s: snapshots.append(one.snapshot(s, t))
    ).run()
    _, runs = one.estimator.runs(default_profile(CLOSED[0]))
    assert runs == [100.0, 200.0]  # a and b finished by 350, by their run times


def test_probes_do_not_change_the_simulation(cluster: tuple[ClusterConfig, tuple[Node, ...]]) -> None:
    jobs = [
        job(f"j{i}", 8 if i % 3 == 0 else 2 + 2 * (i % 3), i * 7.0, 30.0 + 17 * (i % 5)) for i in range(40)
    ]
    plain = Simulation(*cluster, jobs).run()
    made, build = builder(cluster, jobs)
    result = accuracy(build, probe_times(10.0, 25.0, 400.0))
    probed = made[0]
    assert len(result.probes) == 16
    fields = ("status", "first_admitted", "first_started", "ended", "evictions")
    assert {k: [getattr(r, f) for f in fields] for k, r in probed.runs.items()} == {
        k: [getattr(r, f) for f in fields] for k, r in plain.runs.items()
    }
    assert (probed.events, probed.passes, probed.cycles) == (plain.events, plain.passes, plain.cycles)


def test_probes_must_be_sorted_and_late_ones_are_not_called(
    cluster: tuple[ClusterConfig, tuple[Node, ...]],
) -> None:
    with pytest.raises(ValueError, match="sorted"):
        Simulation(*cluster, CLOSED, probes=[2.0, 1.0], on_probe=lambda t, s: None)
    called: list[tuple[float, float]] = []
    Simulation(
        *cluster, CLOSED, probes=[0.0, 600.0, 601.0], on_probe=lambda t, s: called.append((t, s.now))
    ).run()
    assert called == [(0.0, 0.0), (600.0, 300.0)]  # 600 is the last instant; 601 is past the end
    called.clear()
    settings = SimSettings(horizon_s=1000.0)
    Simulation(
        *cluster, CLOSED, settings, probes=[900.0], on_probe=lambda t, s: called.append((t, s.now))
    ).run()
    assert called == [(900.0, 600.0)]


@pytest.mark.parametrize(
    ("depth", "band"),
    [
        (1, "1-9"),
        (9, "1-9"),
        (10, "10-99"),
        (99, "10-99"),
        (100, "100-999"),
        (999, "100-999"),
        (1000, "1000+"),
        (25_000, "1000+"),
    ],
)
def test_depth_bands(depth: int, band: str) -> None:
    assert band_of(depth) == band


@pytest.mark.parametrize(
    ("bounds", "actual", "inside"),
    [
        ((10.0, 20.0), 10.0, True),
        ((10.0, 20.0), 20.0, True),
        ((10.0, 20.0), 21.0, False),
        ((10.0, 20.0), 9.0, False),
        ((10.0, None), 1e9, True),  # the late run found no start within the horizon: open-ended
        ((10.0, None), 5.0, False),
        ((None, None), 5.0, False),
    ],
)
def test_in_range(bounds: tuple[float | None, float | None], actual: float, inside: bool) -> None:
    assert in_range(bounds, actual) is inside


def test_score_separates_never_started_and_beyond_horizon() -> None:
    def prediction(key: str, start: float | None, high: float | None) -> Prediction:
        return Prediction(key, 0.0, "cq", 3, start, (start, high), Source.HISTORY)

    predictions = [
        prediction("a", 100.0, 200.0),  # actual 150: error -50, inside
        prediction("b", 100.0, 120.0),  # actual 300: error -200, outside
        prediction("c", 400.0, None),  # actual 100: error +300, outside
        prediction("d", 100.0, 200.0),  # never started
        prediction("e", None, None),  # started, none predicted within the horizon
    ]
    actual = {"a": 150.0, "b": 300.0, "c": 100.0, "d": None, "e": 50.0}
    band = score("1-9", predictions, actual)
    assert (band.predictions, band.never_started, band.beyond_horizon) == (3, 1, 1)
    assert band.median_abs_error_s == 200.0
    assert band.p90_abs_error_s == pytest.approx(280.0)
    assert band.median_error_s == -50.0
    assert band.in_range == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("first", "every", "until", "most", "expected"),
    [
        (3600.0, 3600.0, 3 * 3600.0, None, [3600.0, 7200.0, 10800.0]),
        (3600.0, 3600.0, 3599.0, None, []),
        (0.0, 10.0, 90.0, 5, [0.0, 20.0, 40.0, 60.0, 80.0]),
        (0.0, 10.0, 20.0, 5, [0.0, 10.0, 20.0]),
    ],
)
def test_probe_times(
    first: float, every: float, until: float, most: int | None, expected: list[float]
) -> None:
    assert probe_times(first, every, until, most) == expected


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    (tmp_path / "trace.csv").write_text(TRACE)
    return tmp_path


def test_command_reports_per_band_as_json_and_table(scenario: Path) -> None:
    result = runner.invoke(
        app,
        ["forecast-accuracy", "-f", str(scenario), "--every", "25s", "--min-runs", "1", "-o", "json"],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["scenario"], document["variant"]) == ("tiny", "baseline")
    assert document["probes"] == 4  # 25, 50, 75, 100 (the last arrival is at 110)
    assert document["estimator"] == {"low": 0.6, "high": 0.95, "min_runs": 1}
    assert [b["band"] for b in document["bands"]] == ["1-9", "10-99", "100-999", "1000+"]
    assert document["overall"]["predictions"] > 0
    table = runner.invoke(
        app,
        [
            "forecast-accuracy",
            "-f",
            str(scenario),
            "--every",
            "25s",
            "--probes",
            "2",
            "--arrivals-window",
            "1m",
        ],
    )
    assert table.exit_code == 0, table.output
    assert "Forecast accuracy: tiny (baseline), 2 probes" in table.stdout
    assert "runtime sources:" in table.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--every", "soon"], "not a duration"),
        (["--low-quantile", "0.9", "--high-quantile", "0.5"], "quantiles must satisfy"),
        (["--variant", "nosuch"], "variant 'nosuch' not found"),
        (["--start", "1h"], "no probe time"),
    ],
)
def test_command_refuses_bad_options(scenario: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["forecast-accuracy", "-f", str(scenario), *args])
    assert result.exit_code == 1
    assert message in result.stderr


def test_command_names_the_file_and_field_of_a_bad_manifest(scenario: Path) -> None:
    (scenario / "cluster.yaml").write_text(CLUSTER.replace("nominalQuota: 8", "nominalQuota: lots"))
    result = runner.invoke(app, ["forecast-accuracy", "-f", str(scenario)])
    assert result.exit_code == 1
    assert "cluster.yaml" in result.stderr and "nominalQuota" in result.stderr
    assert "error: the configuration has errors" in result.stderr


def test_forecast_settings_reach_the_forecast(cluster: tuple[ClusterConfig, tuple[Node, ...]]) -> None:
    """A horizon shorter than the wait leaves the start unpredicted: counted beyond the horizon."""
    made, build = builder(cluster, CLOSED)
    result = accuracy(
        build,
        [50.0],
        forecast_settings=ForecastSettings(horizon_s=100.0),
        profile_of=declared,
    )
    # b starts 50 after the probe (within 100), c 250 after (beyond).
    assert (result.overall.predictions, result.overall.beyond_horizon) == (1, 1)
    assert made[0].runs["team-a/c"].status == WorkloadState.SUCCEEDED
