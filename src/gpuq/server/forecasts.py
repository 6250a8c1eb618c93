"""ETAs for the API: a forecast recomputed in the background, only when it could have changed.

A forecast simulates the whole cluster forward, so requests never wait for one: they read the
latest. A background thread looks every ``check_s`` (a copy of the loop taken between steps,
under the step lock; the simulation runs outside it) and recomputes when

* the state changed materially: the set of (workload key, state) pairs, the configuration
  or the nodes differ from the last forecast's; or
* the last forecast is older than ``max_age_s`` (runtimes elapse, estimates drift);

and never more often than every ``min_interval_s``; and only while someone reads ETAs: the
thread computes nothing when no forecast was read in the last ``wanted_s`` (a busy control plane that
nobody asks for ETAs spends no CPU on them; the first read after a quiet spell answers with the last
forecast, or none, and wakes the thread). A dry run (one more pending workload) is forecast on demand
from a fresh copy.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpuq.core.model import ClusterConfig, Workload
from gpuq.core.nodes import Node
from gpuq.forecast.forecast import Eta, Forecast, ForecastSettings, forecast
from gpuq.run.loop import ControlLoop
from gpuq.run.snapshot import History, LoopView, ProfileBook, ProfiledManifest, build_snapshot, capture
from gpuq.run.store import Store
from gpuq.snapshot.cluster import PendingWorkload, Snapshot
from gpuq.snapshot.runtimes import EstimatorSettings, RuntimeEstimator

_log = logging.getLogger("gpuq.serve")
T = TypeVar("T")
Reader = Callable[[Callable[[ControlLoop | None], T]], T]
"""``LoopRunner.read``: calls its argument with the loop between steps (None on a follower)."""
Forecaster = Callable[[Snapshot, RuntimeEstimator, ForecastSettings], Forecast]
DRY_RUN_SUFFIX = "-dry-run"
NO_LOOP = "this replica does not run the control loop (a follower, or not configured yet)"


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """``min_interval_s``: the least time between two forecasts; ``max_age_s``: recompute a forecast
    this old even when nothing changed; ``check_s``: how often the background thread looks;
    ``wanted_s``: how long after the last read of a forecast the thread keeps it fresh."""

    min_interval_s: float = 5.0
    max_age_s: float = 300.0
    check_s: float = 1.0
    wanted_s: float = 600.0
    estimator: EstimatorSettings = field(default_factory=EstimatorSettings)
    forecast: ForecastSettings = field(default_factory=ForecastSettings)


@dataclass(frozen=True)
class Signature:
    """What a forecast depends on besides time: compared by value, the configuration by identity
    (the loop builds a new one on every reload)."""

    states: frozenset[tuple[str, str]]
    config: ClusterConfig
    nodes: tuple[Node, ...]

    @classmethod
    def of(cls, view: LoopView) -> Signature:
        return cls(view.states(), view.config, view.nodes)

    def same(self, other: Signature | None) -> bool:
        return (
            other is not None
            and self.config is other.config
            and self.states == other.states
            and self.nodes == other.nodes
        )


@dataclass(frozen=True)
class Computed:
    """A forecast with its ``notes`` (workload key -> what of its manifest was ignored)."""

    forecast: Forecast
    notes: Mapping[str, str]
    signature: Signature

    @property
    def at(self) -> float:
        return self.forecast.at


class ForecastCache:
    """The latest forecast of the leader's loop; :meth:`refresh` decides whether to recompute."""

    def __init__(
        self,
        read: Reader[Any],
        store: Store,
        settings: CacheSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
        forecaster: Forecaster = forecast,
    ) -> None:
        self.settings = settings or CacheSettings()
        self._read, self._store, self._clock, self._forecaster = read, store, clock, forecaster
        self._estimator = RuntimeEstimator(self.settings.estimator)
        self._history = History(store)
        self._book = ProfileBook()
        self._work = threading.Lock()  # one forecast at a time: the estimator and the book are not shared
        self._latest: Computed | None = None
        self._computed_at: float | None = None  # clock time of the last computation
        self._wanted_at: float | None = None  # clock time of the last read
        self._wanted = threading.Event()  # a read after a quiet spell wakes the thread at once
        self.reason = NO_LOOP
        self.computations = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- reading ----------------------------------------------------------------------------------------

    def latest(self) -> Computed | None:
        """The latest forecast; reading it keeps the background thread computing (``wanted_s``)."""
        now = self._clock()
        quiet = self._wanted_at is None or now - self._wanted_at > self.settings.wanted_s
        self._wanted_at = now
        if quiet:
            self._wanted.set()
        return self._latest

    def wanted(self) -> bool:
        """Someone read a forecast in the last ``wanted_s``."""
        return self._wanted_at is not None and self._clock() - self._wanted_at <= self.settings.wanted_s

    def age(self) -> float | None:
        latest = self._latest
        return None if latest is None else max(self._clock() - latest.at, 0.0)

    # -- computing --------------------------------------------------------------------------------------

    def refresh(self, *, force: bool = False) -> bool:
        """Recompute when the state changed materially or the forecast is too old, at most every
        ``min_interval_s`` (``force``: now, whatever changed); whether a forecast was computed."""
        with self._work:
            now = self._clock()
            last = self._computed_at
            if not force and last is not None and now - last < self.settings.min_interval_s:
                return False
            view: LoopView | None = self._read(lambda loop: capture(loop, now))
            if view is None:
                self.reason = NO_LOOP
                return False
            signature = Signature.of(view)
            latest = self._latest
            fresh = latest is not None and now - latest.at < self.settings.max_age_s
            if not force and fresh and signature.same(latest.signature if latest else None):
                return False
            self._latest = self._compute(view, signature)
            self._computed_at = now
            self.reason = ""
            return True

    def dry_run(self, workload: Workload, profiled: ProfiledManifest) -> tuple[Computed, str] | None:
        """A forecast of the current state with ``workload`` submitted now, and the key it was forecast
        under (its own, or a variant when a workload of that name is already known); None without a loop."""
        with self._work:
            now = self._clock()
            view: LoopView | None = self._read(lambda loop: capture(loop, now))
            if view is None:
                return None
            taken = {w.workload.key for w in view.workloads}
            name = workload.name
            while f"{workload.namespace}/{name}" in taken:
                name += DRY_RUN_SUFFIX
            extra = dataclasses.replace(workload, name=name, creation_time=now, uid="dry-run", admission=None)
            key = extra.key
            computed = self._compute(
                view, Signature.of(view), (PendingWorkload(extra, profiled.profile),), {key: profiled.note}
            )
            return computed, key

    def _compute(
        self,
        view: LoopView,
        signature: Signature,
        extra: Iterable[PendingWorkload] = (),
        extra_notes: Mapping[str, str] | None = None,
    ) -> Computed:
        for finished in self._history.read_new():
            self._estimator.add(finished)
        profiles = self._book.profiles(self._store, view)
        snapshot = build_snapshot(view, profiles, extra=extra)
        notes = {
            w.workload.key: profiles[w.record_id].note for w in view.workloads if w.record_id in profiles
        }
        notes |= extra_notes or {}
        self.computations += 1
        result = self._forecaster(snapshot, self._estimator, self.settings.forecast)
        return Computed(result, {k: v for k, v in notes.items() if v}, signature)

    # -- background -------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpuq-forecast", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wanted.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.wanted():  # nobody reads ETAs: sleep until someone does
                self._wanted.wait()
                self._wanted.clear()
                continue
            if self._stop.wait(self.settings.check_s):
                return
            try:
                self.refresh()
            except Exception:  # a bad forecast must not stop the next one; the API keeps the last
                _log.exception("forecast failed")


# -- views -----------------------------------------------------------------------------------------------


def eta_view(eta: Eta, computed: Computed) -> dict[str, Any]:
    """One workload's ETA as the API shows it (absolute epoch seconds; None: beyond the horizon)."""
    namespace, _, name = eta.key.partition("/")
    runtime = eta.runtime
    source = runtime.text
    note = computed.notes.get(eta.key)
    if note:
        source = f"{source}; {note}"
    return {
        "namespace": namespace,
        "name": name,
        "state": eta.state,
        "admitAt": eta.admit_at,
        "startAt": eta.start_at,
        "startRange": {"earliest": eta.start_range[0], "latest": eta.start_range[1]},
        "endAt": eta.end_at,
        "endRange": {"earliest": eta.end_range[0], "latest": eta.end_range[1]},
        "method": eta.method,
        "runtime": {
            "lowSeconds": runtime.low_s,
            "highSeconds": runtime.high_s,
            "source": runtime.source.value,
            "text": source,
        },
        "computedAt": computed.at,
        "horizonSeconds": computed.forecast.horizon_s,
    }


def workload_eta(cache: ForecastCache | None, namespace: str, name: str) -> dict[str, Any] | None:
    """The latest forecast's ETA of one workload, or None (no forecast, or not in it)."""
    computed = cache.latest() if cache is not None else None
    if computed is None:
        return None
    eta = computed.forecast.get(f"{namespace}/{name}")
    return eta_view(eta, computed) if eta is not None else None
