"""Request rates per service: a ``time_s,rps`` trace or a generator, as one rate per step.

The rate of step ``k`` (``[k·step, (k+1)·step)``) is the mean of the source over that step, so the
number of requests in a step is exactly what the source says:

- **trace**: the rate of a row holds from its ``time_s`` until the next row's (the last row's
  until the horizon); before the first row the rate is 0;
- **generator**: ``base + (peak - base)·(1 + cos(2π(t - peakAt)/period))/2`` (``peak`` at
  ``peakAt``, ``base`` half a period away), plus each burst's ``rps`` (or times its
  ``multiplier``) during its window, sampled at the middle of each step, then times
  ``1 + noise·u`` with ``u`` uniform in [-1, 1) from a generator seeded per service.

Every rate is then multiplied by ``traffic.scale`` and by the revision's traffic share.
"""

from __future__ import annotations

import csv
import math
import random
import zlib
from pathlib import Path

from gpuq.api.serving_scenario import Traffic, TrafficGenerator


class TrafficError(ValueError):
    """A trace that cannot be read: the message names the file and line."""


def read_rate_trace(path: str) -> list[tuple[float, float]]:
    """``time_s,rps`` rows in time order (a header row is required)."""
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            rows = list(csv.reader(handle))
    except OSError as err:
        raise TrafficError(f"{path}: cannot read: {err}") from None
    if not rows or [c.strip() for c in rows[0][:2]] != ["time_s", "rps"]:
        raise TrafficError(f"{path}:1: expected the header time_s,rps")
    out: list[tuple[float, float]] = []
    for line, row in enumerate(rows[1:], start=2):
        if not row or not "".join(row).strip():
            continue
        try:
            at, rate = float(row[0]), float(row[1])
        except (ValueError, IndexError):
            raise TrafficError(f"{path}:{line}: expected two numbers time_s,rps, got {row!r}") from None
        if not (math.isfinite(at) and math.isfinite(rate)) or at < 0 or rate < 0:
            raise TrafficError(f"{path}:{line}: time_s and rps must be finite and non-negative")
        if out and at <= out[-1][0]:
            raise TrafficError(f"{path}:{line}: time_s must increase ({at} after {out[-1][0]})")
        out.append((at, rate))
    if not out:
        raise TrafficError(f"{path}: no rows")
    return out


def trace_steps(rows: list[tuple[float, float]], step_s: float, steps: int) -> list[float]:
    """The mean rate of each step under the step function of ``rows`` (the last row holds on)."""
    totals = [0.0] * steps
    horizon = steps * step_s
    for i, (at, rate) in enumerate(rows):
        until = min(rows[i + 1][0] if i + 1 < len(rows) else horizon, horizon)
        t = at
        while t < until:
            k = int(t // step_s)
            upto = min(until, (k + 1) * step_s)
            totals[k] += rate * (upto - t)
            t = upto
    return [total / step_s for total in totals]


def generated_steps(gen: TrafficGenerator, step_s: float, steps: int, seed: int, name: str) -> list[float]:
    """The generator's rate at the middle of each step (see the module docstring)."""
    rng = random.Random(seed * 1_000_003 + zlib.crc32(name.encode()))
    peak = gen.base_rps if gen.peak_rps is None else gen.peak_rps
    out = []
    for k in range(steps):
        t = (k + 0.5) * step_s
        cycle = (1 + math.cos(2 * math.pi * (t - gen.peak_at) / gen.period)) / 2
        rate = gen.base_rps + (peak - gen.base_rps) * cycle
        for burst in gen.bursts:
            if burst.at <= t < burst.at + burst.duration:
                rate = rate * burst.multiplier if burst.multiplier is not None else rate + (burst.rps or 0.0)
        if gen.noise:
            rate *= 1 + gen.noise * (2 * rng.random() - 1)
        out.append(max(0.0, rate))
    return out


def rate_steps(
    traffic: Traffic, step_s: float, horizon_s: float, seed: int, name: str, base_dir: Path
) -> list[float]:
    """One rate per step over ``[0, horizon)`` for the service ``name`` (requests per second)."""
    steps = max(1, math.ceil(horizon_s / step_s))
    if traffic.trace is not None:
        path = traffic.trace if Path(traffic.trace).is_absolute() else str(base_dir / traffic.trace)
        rates = trace_steps(read_rate_trace(path), step_s, steps)
    else:
        assert traffic.generate is not None
        rates = generated_steps(traffic.generate, step_s, steps, seed, name)
    return [r * traffic.scale for r in rates]
