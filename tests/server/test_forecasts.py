"""The forecast cache recomputes only when the state changed materially or the forecast aged.

A fake loop (what :func:`gpuq.run.snapshot.capture` reads), an injected clock and a counting
forecaster: the test steps time and state and checks which refreshes computed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpuq.core.model import Admission, ClusterConfig, Workload
from gpuq.forecast.forecast import Forecast, ForecastSettings
from gpuq.run.jobs import JobRun
from gpuq.run.pods import Tracked
from gpuq.run.store import Store
from gpuq.server.forecasts import CacheSettings, ForecastCache
from gpuq.snapshot.cluster import Snapshot
from gpuq.snapshot.runtimes import RuntimeEstimator


@dataclass
class FakeLoop:
    """The attributes a snapshot reads from a ControlLoop."""

    config: Any = field(default_factory=lambda: ClusterConfig())
    nodes: tuple[Any, ...] = ()
    policy: str = "binpack"
    tracked: dict[str, Tracked] = field(default_factory=dict)
    scheduler: Any = field(default_factory=lambda: SimpleNamespace(queues={}))

    def run(self, name: str, state: str = "Running") -> None:
        workload = Workload("team-a", name, "q", (), admission=Admission("shared", ()))
        self.tracked[workload.key] = Tracked(
            len(self.tracked) + 1, workload.key, workload, JobRun(()), state=state
        )


@dataclass
class Harness:
    loop: FakeLoop | None
    now: float
    counted: list[float]
    cache: ForecastCache


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    store = Store(f"sqlite:///{tmp_path / 'gpuq.db'}")
    store.migrate()
    counted: list[float] = []

    def forecaster(snapshot: Snapshot, _estimator: RuntimeEstimator, settings: ForecastSettings) -> Forecast:
        counted.append(snapshot.now)
        return Forecast(snapshot.now, {}, 0.0, settings.horizon_s)

    made = Harness(FakeLoop(), 1000.0, counted, None)  # type: ignore[arg-type]

    def read(reader: Callable[[Any], Any]) -> Any:
        return reader(made.loop)

    settings = CacheSettings(min_interval_s=5.0, max_age_s=300.0)
    made.cache = ForecastCache(read, store, settings, clock=lambda: made.now, forecaster=forecaster)
    yield made
    store.close()


def change_nothing(h: Harness) -> None:
    pass


def start_a_job(h: Harness) -> None:
    assert h.loop is not None
    h.loop.run(f"job-{len(h.loop.tracked)}")


def finish_a_job(h: Harness) -> None:
    assert h.loop is not None
    h.loop.tracked.popitem()


def admit_to_running(h: Harness) -> None:
    assert h.loop is not None
    for tracked in h.loop.tracked.values():
        tracked.state = "Admitted" if tracked.state == "Running" else "Running"


def reload_config(h: Harness) -> None:
    assert h.loop is not None
    h.loop.config = replace(h.loop.config)  # equal, but a new object: the loop reloaded


def add_node(h: Harness) -> None:
    assert h.loop is not None
    h.loop.nodes = (*h.loop.nodes, SimpleNamespace(name=f"n{len(h.loop.nodes)}"))


def lose_the_loop(h: Harness) -> None:
    h.loop = None


# (seconds after the previous refresh, what happens, whether the refresh computes)
STEPS: list[tuple[float, Callable[[Harness], None], bool]] = [
    (0.0, start_a_job, True),  # the first forecast
    (1.0, change_nothing, False),
    (10.0, change_nothing, False),  # still the same state, not old yet
    (0.0, start_a_job, True),  # 11 s after the last forecast: a material change
    (1.0, start_a_job, False),  # changed, but only 1 s after the last forecast
    (4.0, change_nothing, True),  # 5 s after it: the pending change is taken
    (10.0, admit_to_running, True),
    (10.0, finish_a_job, True),
    (10.0, reload_config, True),
    (10.0, add_node, True),
    (100.0, change_nothing, False),
    (200.0, change_nothing, True),  # 300 s old: recomputed though nothing changed
    (10.0, lose_the_loop, False),  # a follower: nothing to forecast, the last one stays
]


def test_the_cache_recomputes_only_on_a_material_change_or_when_old(harness: Harness) -> None:
    computed = []
    for elapsed, happen, expected in STEPS:
        harness.now += elapsed
        happen(harness)
        did = harness.cache.refresh()
        computed.append(did)
        assert did == expected, f"{happen.__name__} after {elapsed:g}s"
    assert len(harness.counted) == sum(expected for _, _, expected in STEPS)
    latest = harness.cache.latest()
    assert latest is not None and latest.at == harness.counted[-1]
    assert harness.cache.reason != "" and harness.cache.age() == pytest.approx(harness.now - latest.at)


def test_force_recomputes_at_once(harness: Harness) -> None:
    assert harness.cache.refresh()
    assert not harness.cache.refresh()
    assert harness.cache.refresh(force=True)
    assert len(harness.counted) == 2


def test_without_a_loop_nothing_is_computed(harness: Harness) -> None:
    harness.loop = None
    assert not harness.cache.refresh()
    assert harness.cache.latest() is None and harness.cache.age() is None
    assert "control loop" in harness.cache.reason


def test_forecasts_are_wanted_only_while_someone_reads_them(harness: Harness) -> None:
    """The background thread computes only while ETAs are read (``wanted_s`` after the last read)."""
    cache = harness.cache
    assert not cache.wanted()  # nobody asked yet: a busy control plane spends nothing on ETAs
    assert cache.latest() is None
    assert cache.wanted()
    harness.now += cache.settings.wanted_s - 1
    assert cache.wanted()
    harness.now += 2
    assert not cache.wanted()  # a quiet spell: the thread sleeps until the next read


def test_the_first_read_wakes_the_background_thread(harness: Harness) -> None:
    harness.cache.settings = CacheSettings(min_interval_s=0.0, check_s=0.01)
    harness.loop.run("a")  # type: ignore[union-attr]
    harness.cache.start()
    try:
        time.sleep(0.2)
        assert harness.counted == []  # unread: nothing computed
        harness.cache.latest()
        deadline = time.time() + 10
        while not harness.counted and time.time() < deadline:
            time.sleep(0.01)
        assert harness.counted, "a read must wake the thread"
    finally:
        harness.cache.stop()
