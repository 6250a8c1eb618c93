"""``gpuq admit --eta``: when would each workload of a snapshot file start? (what-if questions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpuq.api.loader import LoadResult
from gpuq.forecast.forecast import Eta, Forecast, ForecastSettings, forecast
from gpuq.forecast.history import history_of
from gpuq.sim.traces.read import read_trace
from gpuq.snapshot.manifests import snapshot_of
from gpuq.snapshot.runtimes import EstimatorSettings, RuntimeEstimator


class EtaError(Exception):
    """A history file that cannot be read; the message names it."""


def forecast_file(
    result: LoadResult,
    now: float,
    *,
    policy: str,
    history: str | None = None,
    history_format: str | None = None,
    estimator_settings: EstimatorSettings | None = None,
    settings: ForecastSettings | None = None,
) -> tuple[Forecast, dict[str, str]]:
    """Forecast the loaded snapshot; runtimes learned from ``history`` (a trace file) when given."""
    runs = []
    if history is not None:
        if not Path(history).exists():
            raise EtaError(f"--history {history}: no such file")
        read = read_trace(history, format=history_format)
        if read.bad_rows:
            first = read.bad_rows[0]
            raise EtaError(
                f"--history {history}: {len(read.bad_rows)} bad row(s); first at line {first.line}: "
                f"{first.message}"
            )
        runs = history_of(read.jobs)
    snapshot, problems = snapshot_of(result, now, policy=policy)
    estimator = RuntimeEstimator.from_history(runs, estimator_settings)
    return forecast(snapshot, estimator, settings or ForecastSettings()), problems


def relative(seconds: float) -> str:
    """``45s``, ``12m``, ``3h20m``, ``2d4h``: a delay the way people say it."""
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if hours else f"{days}d"


def when(at: float | None, now: float) -> str:
    if at is None:
        return "beyond the horizon"
    return "now" if at - now < 1 else f"in {relative(at - now)}"


def span(low: float | None, high: float | None, now: float) -> str:
    if low is None:
        return "-"
    if high is None:
        return f"{relative(low - now)} – beyond the horizon"
    if relative(low - now) == relative(high - now):
        return relative(low - now)
    return f"{relative(low - now)} – {relative(high - now)}"


def eta_document(result: Forecast, problems: dict[str, str]) -> dict[str, Any]:
    """The JSON/YAML shape: absolute times (seconds since the epoch) and the runtime source."""

    def entry(eta: Eta) -> dict[str, Any]:
        document: dict[str, Any] = {
            "state": eta.state,
            "admitAt": eta.admit_at,
            "startAt": eta.start_at,
            "startRange": list(eta.start_range),
            "endAt": eta.end_at,
            "endRange": list(eta.end_range),
            "method": eta.method,
            "runtime": {"lowS": eta.runtime.low_s, "highS": eta.runtime.high_s, "source": eta.runtime.text},
        }
        if eta.key in problems:
            document["warning"] = problems[eta.key]
        return document

    return {
        "at": result.at,
        "horizonS": result.horizon_s,
        "tookS": round(result.took_s, 3),
        "workloads": {key: entry(eta) for key, eta in sorted(result.etas.items())},
    }


def print_etas(out: Console, result: Forecast, problems: dict[str, str]) -> None:
    now = result.at
    table = Table(
        title=f"Forecast (runtimes: low–high estimates; computed in {result.took_s:.2f}s)",
        title_justify="left",
    )
    for column in ("workload", "state", "starts", "range", "ends", "runtime estimate", "forecast by"):
        table.add_column(column, overflow="fold")
    order = sorted(
        result.etas.values(), key=lambda e: (e.state != "Running", e.start_at or float("inf"), e.key)
    )
    for eta in order:
        low, high = relative(eta.runtime.low_s), relative(eta.runtime.high_s)
        runtime = f"{low if low == high else f'{low}–{high}'} from {eta.runtime.text}"
        if eta.key in problems:
            runtime += f"; {problems[eta.key]}"
        starts = "running" if eta.state == "Running" else when(eta.start_at, now)
        rng = "" if eta.state == "Running" else span(*eta.start_range, now)
        table.add_row(eta.key, eta.state, starts, rng, when(eta.end_at, now), runtime, eta.method)
    out.print(table)
