"""The replica model: how long a request takes at a given load, and what the servers' metrics read.

A replica is ``c`` request slots (``concurrency``) that together complete at most ``μ`` requests
per second (``maxRps``); one request on an idle replica takes ``S`` (``latency``). Requests are
spread evenly over the ``R`` ready replicas (round robin), so each sees ``λ_r = λ / R``.

1. **Steady state (ρ = λ_r / μ < 1, no backlog)**: M/M/c waiting in front of a fixed service
   latency. With offered load ``a = c·ρ``, Erlang C gives the chance a request waits,
   ``C = (a^c / c!) / (1 - ρ) / (Σ_{k<c} a^k / k! + (a^c / c!) / (1 - ρ))``, and the wait is
   exponential: ``P(W > t) = C·exp(-(μ - λ_r)·t)``. A request's latency is ``S + W``, so
   ``P(latency ≤ x) = 1 - C·exp(-(μ - λ_r)(x - S))`` for ``x ≥ S``.
2. **Overload or backlog (ρ ≥ 1, no ready replica, or requests still queued)**: a fluid FIFO
   queue served at ``R·μ``: arrivals join as one chunk per time segment, chunks leave in order,
   a request's latency is its time in the queue plus ``S``; a chunk waiting longer than
   ``queueTimeout`` is dropped. With ``R = 0`` requests wait for the first replica (a gateway or
   activator holds them), which is what a cold start costs.

Latency quantiles and SLO attainment are computed exactly over the mixture of these
distributions, each weighted by its number of requests (:class:`LatencyBook`).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field


def erlang_c(servers: int, offered: float) -> float:
    """Erlang C: the chance an arrival waits in an M/M/c queue with ``offered = λ / μ_slot`` < c."""
    if offered <= 0:
        return 0.0
    rho = offered / servers
    if rho >= 1:
        return 1.0
    term = 1.0  # a^k / k!, built up to avoid overflowing factorials
    total = 0.0
    for k in range(servers):
        total += term
        term *= offered / (k + 1)
    top = term / (1 - rho)
    return top / (total + top)


@dataclass(frozen=True, slots=True)
class Steady:
    """Per-replica steady state at ``rate_per_replica`` (requests/s)."""

    utilisation: float  # ρ
    wait_chance: float  # C
    decay: float  # μ - λ_r: the wait's exponential rate
    running: float  # busy slots, c·ρ
    waiting: float  # mean queue length, C·ρ / (1 - ρ)
    mean_wait_s: float  # C / (μ - λ_r)


def steady(rate_per_replica: float, max_rps: float, concurrency: int) -> Steady:
    """Step 1 of the module docstring for one replica; requires ``rate_per_replica < max_rps``."""
    rho = rate_per_replica / max_rps
    chance = erlang_c(concurrency, concurrency * rho)
    decay = max_rps - rate_per_replica
    waiting = chance * rho / (1 - rho) if rho < 1 else math.inf
    return Steady(rho, chance, decay, concurrency * rho, waiting, chance / decay if decay > 0 else math.inf)


@dataclass
class LatencyBook:
    """Every request's latency distribution, as a weighted mixture (served requests only).

    ``steady`` holds ``(requests, S, C, decay)`` per segment; ``points`` fluid-queue requests
    ``(latency, requests)``.
    """

    steady_parts: list[tuple[float, float, float, float]] = field(default_factory=list)
    points: list[tuple[float, float]] = field(default_factory=list)

    @property
    def served(self) -> float:
        return math.fsum(p[0] for p in self.steady_parts) + math.fsum(n for _, n in self.points)

    def add_steady(self, requests: float, latency_s: float, state: Steady) -> None:
        if requests > 0:
            self.steady_parts.append((requests, latency_s, state.wait_chance, state.decay))

    def add_point(self, latency_s: float, requests: float) -> None:
        if requests > 0:
            self.points.append((latency_s, requests))

    def within(self, x: float) -> float:
        """Requests with latency ≤ ``x``."""
        total = 0.0
        for n, s, c, decay in self.steady_parts:
            if x >= s:
                total += n * (1.0 - c * math.exp(-decay * (x - s)))
        return total + math.fsum(n for latency, n in self.points if latency <= x)

    def quantile(self, q: float) -> float | None:
        """The smallest latency x with at least a share ``q`` of served requests at or below it."""
        served = self.served
        if served <= 0:
            return None
        want = q * served * (1 - 1e-12)
        points = sorted(self.points)
        lows = [s for _, s, _, _ in self.steady_parts] + [p for p, _ in points]
        highs = [
            s + math.log(max(c, 1e-300) / 1e-12) / decay for _, s, c, decay in self.steady_parts if c > 0
        ]
        lo, hi = min(lows), max([*lows, *highs])
        if self._within_sorted(lo, points) >= want:
            return lo
        for _ in range(60):
            mid = (lo + hi) / 2
            if self._within_sorted(mid, points) >= want:
                hi = mid
            else:
                lo = mid
            if hi - lo <= 1e-6 * max(hi, 1e-3):
                break
        # land exactly on a fluid point when one is the answer
        at = bisect.bisect_left(points, (hi, math.inf))
        if at and abs(points[at - 1][0] - hi) < 1e-6 * max(hi, 1e-3):
            return points[at - 1][0]
        return hi

    def _within_sorted(self, x: float, points: list[tuple[float, float]]) -> float:
        total = 0.0
        for n, s, c, decay in self.steady_parts:
            if x >= s:
                total += n * (1.0 - c * math.exp(-decay * (x - s)))
        return total + math.fsum(n for latency, n in points if latency <= x)
