"""``gpuq forecast-accuracy``: how close were the start-time forecasts on a replayed scenario?"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuq.commands.render import OUTPUT_HELP, OutputFormat, write_document
from gpuq.forecast.defaults import DEFAULT_EXACT_STARTS, DEFAULT_HORIZON_S
from gpuq.snapshot.runtimes import EstimatorSettings

if TYPE_CHECKING:
    from gpuq.forecast.forecast import ForecastSettings
    from gpuq.forecast.replay import Accuracy, BandAccuracy, ProbeStats
    from gpuq.sim.scenario import PreparedVariant

out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
DEFAULTS = EstimatorSettings()


def forecast_accuracy(
    files: Annotated[
        list[str],
        typer.Option("--filename", "-f", help="Manifests, directories and a Scenario (gpuq.dev/v1alpha1)."),
    ],
    variant: Annotated[
        str | None, typer.Option("--variant", help="The Scenario variant to replay (default: its base).")
    ] = None,
    every: Annotated[str, typer.Option("--every", help="Forecast every this much simulated time.")] = "1h",
    start: Annotated[
        str | None, typer.Option("--start", help="First probe time (default: one --every in).")
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="Last probe time (default: the horizon, else the last arrival)."),
    ] = None,
    probes: Annotated[
        int | None, typer.Option("--probes", min=1, help="At most this many probes, spread evenly.")
    ] = None,
    low: Annotated[float, typer.Option("--low-quantile", help="Runtime quantile of the expected start.")] = (
        DEFAULTS.low
    ),
    high: Annotated[float, typer.Option("--high-quantile", help="Runtime quantile of the range's end.")] = (
        DEFAULTS.high
    ),
    min_runs: Annotated[
        int, typer.Option("--min-runs", help="Finished runs a history level needs to be used.")
    ] = DEFAULTS.min_runs,
    horizon: Annotated[
        str | None, typer.Option("--horizon", help="How far each forecast looks ahead (default 720h).")
    ] = None,
    arrivals: Annotated[
        str | None,
        typer.Option(
            "--arrivals-window",
            help="Expect the submissions of this past window again over the same span ahead.",
        ),
    ] = None,
    exact_starts: Annotated[
        int,
        typer.Option(
            "--exact-starts",
            min=0,
            help="Admissions each forecast simulates exactly before a deep queue goes on by quota "
            "alone (0: no limit).",
        ),
    ] = DEFAULT_EXACT_STARTS,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help=OUTPUT_HELP)] = (OutputFormat.TABLE),
) -> None:
    """Replay the Scenario, forecast every waiting workload's start at each probe time as a live
    cluster would (runtimes learned only from runs finished by then), and compare with the actual
    starts: error quantiles and the share inside the forecast range, per queue-depth band."""
    from gpuq.api.kueue import parse_duration
    from gpuq.forecast.forecast import ForecastSettings
    from gpuq.forecast.replay import probe_times

    try:
        settings = EstimatorSettings(low=low, high=high, min_runs=min_runs)
        interval = parse_duration(every)
        first = parse_duration(start) if start is not None else interval
        last = parse_duration(until) if until is not None else None
        ahead = ForecastSettings(
            horizon_s=parse_duration(horizon) if horizon else DEFAULT_HORIZON_S,
            arrivals_window_s=parse_duration(arrivals) if arrivals else None,
            exact_starts=exact_starts or None,
        )
        if interval <= 0:
            raise ValueError("--every must be positive")
    except ValueError as error:
        _fail(str(error))
    scenario, prepared = _prepare(files, variant)
    if last is None:
        submitted = max((j.workload.creation_time for j in prepared.jobs), default=0.0)
        last = prepared.settings.horizon_s or submitted
    times = probe_times(first, interval, last, probes)
    if not times:
        _fail(f"no probe time between {first:g}s and {last:g}s")
    result = _run(prepared, times, settings, ahead, quiet=not output.is_table)
    if not output.is_table:
        write_document({"scenario": scenario, "variant": prepared.plan.name, **result.as_dict()}, output)
        return
    _print_table(scenario, prepared, result)


def _prepare(files: list[str], variant: str | None) -> tuple[str, PreparedVariant]:
    """The scenario's name and the one variant to replay, or the loader's diagnostics and exit 1."""
    from gpuq.sim.scenario import ScenarioError, load_workloads, plan_scenario, prepare
    from gpuq.sim.traces.model import TraceError

    try:
        plan = plan_scenario(files, variant=variant)
        workloads = load_workloads(plan)
        return plan.name, prepare(plan, plan.variants[0], workloads)
    except ScenarioError as error:
        for diagnostic in error.diagnostics:
            err.print(str(diagnostic), highlight=False, markup=False)
        _fail(error.message)
    except TraceError as error:
        _fail(str(error))


def _fail(message: str) -> NoReturn:
    err.print(f"error: {message}", style="red", highlight=False, markup=False)
    raise typer.Exit(1)


def _run(
    prepared: PreparedVariant,
    times: list[float],
    settings: EstimatorSettings,
    ahead: ForecastSettings,
    quiet: bool,
) -> Accuracy:
    from gpuq.forecast.replay import accuracy

    with Progress(
        TextColumn("[bold]forecasts"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[clock]}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=quiet,
    ) as progress:
        task = progress.add_task("probes", total=len(times), clock="")

        def seen(stat: ProbeStats) -> None:
            progress.update(task, advance=1, clock=f"t={_human(stat.at)}, {stat.pending} pending")

        return accuracy(
            lambda probes, callback: prepared.simulation(probes=probes, on_probe=callback),
            times,
            settings,
            ahead,
            on_probe=seen,
        )


def _print_table(scenario: str, prepared: PreparedVariant, result: Accuracy) -> None:
    settings = result.estimator
    table = Table(
        title=(
            f"Forecast accuracy: {scenario} ({prepared.plan.name}), {len(result.probes)} probes, "
            f"runtimes p{settings.low * 100:g}-p{settings.high * 100:g}, min {settings.min_runs} runs"
        )
    )
    for name in ("queue depth", "forecasts", "|error| p50", "|error| p90", "bias p50", "in range"):
        table.add_column(name, justify="right")
    table.add_column("never started", justify="right")
    table.add_column("beyond horizon", justify="right")
    for band in (*result.bands, result.overall):
        table.add_row(*_cells(band), end_section=band is result.bands[-1])
    out.print(table)
    forecasts = [p.took_s for p in result.probes]
    sources = ", ".join(f"{name} {count}" for name, count in result.sources.items()) or "none"
    out.print(
        f"runtime sources: {sources}; forecast took {sum(forecasts) / len(forecasts):.2f}s on average "
        f"(max {max(forecasts):.2f}s); {result.took_s:.1f}s in all",
        highlight=False,
    )


def _cells(band: BandAccuracy) -> list[str]:
    coverage = "-" if band.in_range is None else f"{100 * band.in_range:.0f}%"
    return [
        band.band,
        str(band.predictions),
        _human(band.median_abs_error_s),
        _human(band.p90_abs_error_s),
        _signed(band.median_error_s),
        coverage,
        str(band.never_started),
        str(band.beyond_horizon),
    ]


def _signed(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return ("-" if seconds < 0 else "+") + _human(abs(seconds))


def _human(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"
