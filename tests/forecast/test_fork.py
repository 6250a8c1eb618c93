"""The forecast's second run in a forked process: same answers, and a failed child is recomputed here."""

from __future__ import annotations

from pathlib import Path

import pytest

from forecast.test_forecast import NOW, pending, running, snapshot_base
from gpuq.forecast.forecast import ForecastSettings, forecast
from gpuq.forecast.fork import Forked, can_fork
from gpuq.snapshot.cluster import Snapshot
from gpuq.snapshot.runtimes import RuntimeEstimator

pytestmark = pytest.mark.skipif(not can_fork(), reason="needs fork and two CPUs")


def test_a_forked_computation_returns_its_result() -> None:
    assert Forked(lambda: {"answer": [6 * 7]}).join() == {"answer": [42]}


def test_a_failing_child_gives_none() -> None:
    def fail() -> int:
        raise RuntimeError("boom")

    assert Forked(fail).join() is None


def test_the_forked_high_run_gives_the_same_forecast(tmp_path: Path) -> None:
    base = snapshot_base(tmp_path, quotas={"team-a": 8})
    snapshot = Snapshot(
        NOW,
        base.config,
        base.nodes,
        running=(running("r1", "team-a", 4, NOW - 600, 1000),),
        pending=tuple(pending(f"p{i}", "team-a", 4, NOW - 50 + i, None) for i in range(6)),
    )
    here = forecast(snapshot, RuntimeEstimator(), ForecastSettings(parallel_min=None))
    forked = forecast(snapshot, RuntimeEstimator(), ForecastSettings(parallel_min=0))
    assert not here.parallel and forked.parallel
    assert forked.etas == here.etas
