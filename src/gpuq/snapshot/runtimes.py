"""How long will a workload run? Estimates from its declaration or its peers' history.

A forecast is only as good as its runtimes. The order of trust:

1. the job's own expected duration (the ``gpuq.dev/expected-duration`` annotation);
2. the history of finished workloads alike: same LocalQueue, user and size, then the
   same LocalQueue and size, then the same LocalQueue, then the whole cluster; the
   first level with enough runs gives a low and a high *quantile* (a mean is pulled
   by the few runs that go on for days), capped by ``activeDeadlineSeconds``, a hard
   upper bound the control plane enforces;
3. ``activeDeadlineSeconds`` alone, as both ends;
4. a default.

Every estimate says which of these it came from.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from gpuq.api.workload_gates import EXPECTED_DURATION as EXPECTED_DURATION

USER_LABEL = "gpuq.dev/user"
OVERDUE_FLOOR_S = 60.0  # a workload past every estimate is given at least this long again


class Source(StrEnum):
    ANNOTATION = "annotation"
    HISTORY = "history"
    DEADLINE = "activeDeadlineSeconds"
    DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class Profile:
    """What the estimate depends on: where the workload queues, who submitted it, how big it is."""

    namespace: str
    queue: str  # the LocalQueue
    user: str = ""
    gpus: float = 0.0  # GPUs of the whole workload
    expected_s: float | None = None  # gpuq.dev/expected-duration
    deadline_s: float | None = None  # activeDeadlineSeconds

    def levels(self) -> tuple[tuple[str, ...], ...]:
        """History keys from the closest peers to the whole cluster."""
        size = f"{self.gpus:g}"
        coarser = (
            ("queue+size", self.namespace, self.queue, size),
            ("queue", self.namespace, self.queue),
            ("cluster",),
        )
        if not self.user:  # an unknown user is nobody's peer
            return coarser
        return (("queue+user+size", self.namespace, self.queue, self.user, size), *coarser)


@dataclass(frozen=True, slots=True)
class Finished:
    """A finished run: who it was and how long it ran (from start to finish, once)."""

    profile: Profile
    ran_s: float


@dataclass(frozen=True, slots=True)
class Estimate:
    """A runtime range: ``low_s`` and ``high_s`` (the configured quantiles), and where they came from."""

    low_s: float
    high_s: float
    source: Source
    detail: str = ""  # e.g. "queue+user+size, 12 runs"

    @property
    def text(self) -> str:
        return f"{self.source.value} ({self.detail})" if self.detail else self.source.value


@dataclass(frozen=True, slots=True)
class EstimatorSettings:
    """``low``/``high``: the quantiles of past runtimes giving a range; ``min_runs``: runs a history
    level needs before it is trusted; ``window``: the most recent runs kept per level key."""

    # Chosen with `gpuq forecast-accuracy` (docs/forecast.md): p60/p95 beat p50/p90 on both the
    # retail scenario and a contended Philly week, in median and p90 error and in coverage.
    low: float = 0.6
    high: float = 0.95
    default_s: float = 3600.0
    min_runs: int = 3
    window: int = 200

    def __post_init__(self) -> None:
        if not 0.0 <= self.low <= self.high <= 1.0:
            raise ValueError(f"quantiles must satisfy 0 <= low <= high <= 1, got {self.low}, {self.high}")
        if self.default_s <= 0 or self.min_runs < 1 or self.window < 1:
            raise ValueError("default_s must be positive; min_runs and window at least 1")


@dataclass
class RuntimeEstimator:
    """Runtime estimates learned from finished runs; :meth:`add` one as it finishes."""

    settings: EstimatorSettings = field(default_factory=EstimatorSettings)
    _runs: dict[tuple[str, ...], deque[float]] = field(default_factory=dict, init=False, repr=False)
    _sorted: dict[tuple[str, ...], list[float]] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def from_history(
        cls, history: Iterable[Finished], settings: EstimatorSettings | None = None
    ) -> RuntimeEstimator:
        estimator = cls(settings or EstimatorSettings())
        for finished in history:
            estimator.add(finished)
        return estimator

    def add(self, finished: Finished) -> None:
        if not math.isfinite(finished.ran_s) or finished.ran_s < 0:
            return
        for key in finished.profile.levels():
            runs = self._runs.get(key)
            if runs is None:
                runs = self._runs[key] = deque(maxlen=self.settings.window)
            runs.append(finished.ran_s)
            self._sorted.pop(key, None)

    def runs(self, profile: Profile) -> tuple[str, list[float]]:
        """The closest history level with enough runs: its name and its runtimes, sorted."""
        for key in profile.levels():
            runs = self._runs.get(key)
            if runs is not None and len(runs) >= self.settings.min_runs:
                ordered = self._sorted.get(key)
                if ordered is None:
                    ordered = self._sorted[key] = sorted(runs)
                return key[0], ordered
        return "", []

    def estimate(self, profile: Profile) -> Estimate:
        """The whole run's estimate."""
        return self.remaining(profile, 0.0)

    def remaining(self, profile: Profile, elapsed_s: float) -> Estimate:
        """What is left of a run that has gone on for ``elapsed_s``: past runs that lasted longer,
        less what has elapsed (a run already past most of its peers is likely a long one)."""
        elapsed_s = max(elapsed_s, 0.0)
        settings = self.settings
        deadline = profile.deadline_s
        if profile.expected_s is not None:
            left = _left(profile.expected_s, elapsed_s, deadline)
            return Estimate(left, left, Source.ANNOTATION, f"{profile.expected_s:g}s declared")
        level, runs = self.runs(profile)
        if runs:
            longer = [r - elapsed_s for r in runs[bisect.bisect_right(runs, elapsed_s) :]]
            if longer:
                low = quantile(longer, settings.low)
                high = quantile(longer, settings.high)
                detail = f"{level}, {len(runs)} runs, p{settings.low * 100:g}-p{settings.high * 100:g}"
            else:
                low = OVERDUE_FLOOR_S
                high = max(OVERDUE_FLOOR_S, elapsed_s / 2)
                detail = f"{level}, {len(runs)} runs, running longer than all of them"
            if deadline is not None:
                cap = max(deadline - elapsed_s, 0.0)
                low, high = min(low, cap), min(high, cap)
                detail += f", capped at {deadline:g}s"
            return Estimate(low, high, Source.HISTORY, detail)
        if deadline is not None:
            left = max(deadline - elapsed_s, 0.0)
            return Estimate(left, left, Source.DEADLINE, f"{deadline:g}s, no history")
        left = _left(settings.default_s, elapsed_s, None)
        return Estimate(left, left, Source.DEFAULT, f"{settings.default_s:g}s, no history")


def _left(total_s: float, elapsed_s: float, deadline_s: float | None) -> float:
    left = total_s - elapsed_s if total_s > elapsed_s else max(OVERDUE_FLOOR_S, 0.0)
    if deadline_s is not None:
        left = min(left, max(deadline_s - elapsed_s, 0.0))
    return left


def quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values, interpolating linearly between ranks (numpy's default)."""
    if not ordered:
        raise ValueError("quantile of no values")
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)
