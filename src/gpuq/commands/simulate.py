"""``gpuq simulate``: replay workloads against configurations and report waits, use, fairness, cost."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuq.commands.render import OUTPUT_HELP, OutputFormat, write_document

if TYPE_CHECKING:
    from gpuq.sim.scenario import PreparedVariant, ScenarioPlan
    from gpuq.sim.sweeps import VariantOutcome
    from gpuq.sim.traces.model import BadRow, TraceRead

out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
SHOWN_BAD_ROWS = 10


def simulate(
    files: Annotated[
        list[str],
        typer.Option(
            "--filename", "-f", help="Manifests, directories and a Scenario (gpuq.dev/v1alpha1); repeatable."
        ),
    ],
    trace: Annotated[
        str | None,
        typer.Option(
            "--trace", help="Workload trace (CSV, JSONL or a public trace); overrides the Scenario's."
        ),
    ] = None,
    trace_format: Annotated[
        str | None,
        typer.Option(
            "--trace-format", help="csv, jsonl, philly, openb or dlrm (default: from the file's columns)."
        ),
    ] = None,
    mapping: Annotated[
        str | None,
        typer.Option("--mapping", help="Mapping file: trace groups to namespaces and LocalQueues."),
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out-dir", help="Output directory (default ./gpuq-out/<scenario>).")
    ] = None,
    old_out: Annotated[
        Path | None, typer.Option("--out", hidden=True, help="Deprecated spelling of --out-dir.")
    ] = None,
    output: Annotated[
        OutputFormat,
        typer.Option("--output", "-o", help=f"{OUTPUT_HELP} json/yaml print the metrics document on stdout."),
    ] = OutputFormat.TABLE,
    seed: Annotated[int | None, typer.Option("--seed", help="Random seed (default: the Scenario's).")] = None,
    compare: Annotated[
        bool, typer.Option("--compare", help="Run every variant of the Scenario side by side.")
    ] = False,
    variant: Annotated[
        str | None, typer.Option("--variant", help="Run only this variant of the Scenario.")
    ] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Refused trace rows are fatal.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar, no tables.")] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            help="Variants run at once in worker processes (default: the CPUs, at most one per variant, "
            "and 1 for sweeps under 5,000 workloads in all; 1: one after another in this process). "
            "With --ray-address: Ray tasks at once (default: all).",
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            help="Run the variants as Ray tasks on the cluster at HOST:PORT (or ray://HOST:PORT, auto); "
            "its nodes need gpuq installed. Outputs are the same bytes as a local run.",
        ),
    ] = None,
) -> None:
    """Simulate the Scenario (or a trace against the configuration) with the same engine as gpuq serve.

    Writes metrics.json, workloads.csv and report.html (opens offline) to --out-dir.
    """
    if old_out is not None:
        err.print("warning: --out is deprecated; use --out-dir", style="yellow", highlight=False)
        out_dir = out_dir or old_out
    from gpuq.sim.metrics import SCHEMA
    from gpuq.sim.scenario import ScenarioError, load_workloads, plan_scenario
    from gpuq.sim.sweep_ray import RaySweepError, check_address
    from gpuq.sim.sweeps import SweepError
    from gpuq.sim.traces.model import TraceError

    if jobs is not None and jobs < 1:
        _fail(f"--jobs must be at least 1 (got {jobs})")
    if ray_address is not None:  # its form now; whether a cluster answers there, once the runs start
        try:
            check_address(ray_address)
        except RaySweepError as error:
            _fail(str(error))

    try:
        plan = plan_scenario(
            files,
            trace=trace,
            seed=seed,
            compare=compare,
            variant=variant,
            strict=strict,
            trace_format=trace_format,
            mapping=mapping,
        )
        workloads = load_workloads(plan)
    except ScenarioError as error:
        for diagnostic in error.diagnostics:
            err.print(str(diagnostic), highlight=False, markup=False)
        err.print(f"error: {error.message}", style="red", highlight=False, markup=False)
        raise typer.Exit(1) from error
    except TraceError as error:
        err.print(f"error: {error}", style="red", highlight=False, markup=False)
        raise typer.Exit(1) from error
    if plan.workload_objects:
        err.print(
            f"note: {plan.workload_objects} workload object(s) in the configuration are not simulated "
            "(the Scenario's generator or trace is the workload source)",
            highlight=False,
        )
    for note in (*plan.notes, *workloads.notes):
        err.print(f"note: {note}", highlight=False, markup=False)
    _report_bad_rows(list(workloads.bad_rows), workloads.rows)
    target = out_dir or Path("gpuq-out") / plan.name
    variants: list[dict[str, Any]] = []
    csv_parts: list[str] = []
    said: set[str] = set()  # initial-state findings, once for all variants
    with _progress(plan, quiet) as progress:
        try:
            for outcome in _outcomes(plan, workloads, strict, jobs, ray_address, progress):
                if progress is not None:
                    progress(outcome.index, "done", 0.0)
                variants.append(_take(outcome, workloads, said, quiet))
                csv_parts.append(outcome.csv)
        except SweepError as error:
            err.print(f"error: {error}", style="red", highlight=False, markup=False)
            raise typer.Exit(1) from error
    document = {"schema": SCHEMA, "scenario": plan.name, "seed": plan.seed, "variants": variants}
    paths = _write_outputs(target, document, csv_parts)
    wrote = f"wrote {', '.join(str(p) for p in paths)}"
    if not output.is_table:  # the document on stdout, for scripts; what was written on stderr
        write_document(document, output)
        err.print(wrote, highlight=False, markup=False)
        return
    if not quiet:
        _print_summary(plan, variants)
    out.print(wrote, highlight=False, markup=False)


def _write_outputs(target: Path, document: dict[str, Any], csv_parts: list[str]) -> list[Path]:
    target.mkdir(parents=True, exist_ok=True)
    metrics_path = target / "metrics.json"
    metrics_path.write_text(json.dumps(document, indent=1) + "\n")
    csv_path = target / "workloads.csv"
    header, *rest = csv_parts
    csv_path.write_text(header + "".join(part.split("\n", 1)[1] for part in rest))
    paths = [metrics_path, csv_path]
    try:
        from gpuq.sim.report import write_report
    except ImportError:  # pragma: no cover - the report module ships with the package
        return paths
    report_path = target / "report.html"
    write_report(document, report_path)
    return [*paths, report_path]


def _outcomes(
    plan: ScenarioPlan,
    workloads: TraceRead,
    strict: bool,
    jobs: int | None,
    ray_address: str | None,
    progress: Callable[[int, str, float], None] | None,
) -> Iterator[VariantOutcome]:
    """Every variant's outcome in variant order: on Ray, in worker processes or here (gpuq.sim.sweeps)."""
    from gpuq.sim import sweeps

    count = len(plan.variants)
    if ray_address is not None:
        from gpuq.sim.sweep_ray import run_on_ray

        prepared = [_prepared(plan, index, workloads) for index in range(count)]
        tasks = [sweeps.VariantJob(plan, i, strict, prepared=p) for i, p in enumerate(prepared)]
        return run_on_ray(tasks, ray_address, jobs, progress)
    workers = jobs if jobs is not None else sweeps.default_jobs(count, len(workloads.jobs))
    if workers == 1 or count == 1:
        here = [sweeps.VariantJob(plan, index, strict, workloads=workloads) for index in range(count)]
        return sweeps.run_in_process(here, progress)
    away = [sweeps.VariantJob(plan, index, strict) for index in range(count)]  # workers read the inputs
    return sweeps.run_in_workers(away, min(workers, count), progress)


def _prepared(plan: ScenarioPlan, index: int, workloads: TraceRead) -> PreparedVariant:
    """The variant prepared here (for Ray), or the command's error for it."""
    from gpuq.sim.scenario import ScenarioError, prepare

    try:
        return prepare(plan, plan.variants[index], workloads)
    except ScenarioError as error:
        _fail(error.message, tuple(str(d) for d in error.diagnostics))


def _fail(message: str, diagnostics: tuple[str, ...] = ()) -> NoReturn:
    for diagnostic in diagnostics:
        err.print(diagnostic, highlight=False, markup=False)
    err.print(f"error: {message}", style="red", highlight=False, markup=False)
    raise typer.Exit(1)


def _take(outcome: VariantOutcome, workloads: TraceRead, said: set[str], quiet: bool) -> dict[str, Any]:
    """Print what a variant's run says (once per finding for all variants) and return its metrics."""
    if outcome.failure is not None:
        _fail(*outcome.failure)
    if outcome.refused is not None:
        _fail(outcome.refused)
    _report_bad_rows(list(outcome.bad_rows), workloads.rows, f"variant {outcome.name}: ")
    for line in outcome.state_lines:
        if line not in said:
            said.add(line)
            err.print(line, style="yellow", highlight=False, markup=False)
    for warning in outcome.warnings:
        err.print(f"variant {outcome.name}: {warning}", style="yellow", highlight=False, markup=False)
    for note in outcome.notes:
        if note not in said:
            said.add(note)
            err.print(f"note: {note}", highlight=False, markup=False)
    metrics = outcome.metrics
    metrics["workloads"]["bad_rows"] += len(workloads.bad_rows)
    if not quiet:  # wall-clock figures: here, never in metrics.json (byte-identical from run to run)
        decisions = (
            f", {outcome.decision_s:.2f}s of it in provisioning decisions"
            if outcome.decision_s is not None
            else ""
        )
        err.print(
            f"variant {outcome.name}: {outcome.workloads} workloads, {outcome.events} events, "
            f"{outcome.cycles} scheduling cycles in {outcome.wall_s:.1f}s wall{decisions}",
            highlight=False,
        )
    return metrics


@contextmanager
def _progress(plan: ScenarioPlan, quiet: bool) -> Iterator[Callable[[int, str, float], None] | None]:
    """One bar per variant, added when its run starts and filled when its outcome is taken (a
    worker's reports come from another thread: rich's updates take a lock)."""
    if quiet:
        yield None
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[clock]}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bars:
        tasks: dict[int, TaskID] = {}
        totals: dict[int, float] = {}
        several = len(plan.variants) > 1

        finished: set[int] = set()  # a worker's last reports may come after its outcome

        def report(index: int, kind: str, value: float) -> None:
            if kind == "done":
                finished.add(index)
                if index in tasks:
                    bars.update(tasks[index], completed=totals[index])
            elif index in finished:
                return
            elif kind == "total":
                name = f"{plan.name} {plan.variants[index].name}" if several else plan.name
                tasks[index], totals[index] = bars.add_task(name, total=value, clock=""), value
            elif index in tasks and kind == "share":
                bars.update(tasks[index], completed=value)
            elif index in tasks:
                bars.update(tasks[index], clock=f"t={_human(value)}")

        yield report


def _report_bad_rows(bad: list[BadRow], rows: int, prefix: str = "") -> None:
    if not bad:
        return
    err.print(
        f"warning: {prefix}{len(bad)} of {rows} trace row(s) were refused:", style="yellow", highlight=False
    )
    for row in bad[:SHOWN_BAD_ROWS]:
        err.print(f"  {row}", highlight=False, markup=False)
    if len(bad) > SHOWN_BAD_ROWS:
        err.print(f"  ... and {len(bad) - SHOWN_BAD_ROWS} more (--strict makes them fatal)", highlight=False)


def _print_summary(plan: ScenarioPlan, variants: list[dict[str, Any]]) -> None:
    from gpuq.sim.metrics import headline_cost, headline_mean
    from gpuq.sim.report import PRICES_HINT, priced
    from gpuq.sim.tradeoffs import trade_offs

    table = Table(title=f"Scenario {plan.name} (seed {plan.seed})")
    table.add_column("")
    for v in variants:
        table.add_column(v["name"], justify="right")
    rows: list[tuple[str, Any]] = [
        (
            "workloads submitted / finished",
            lambda v: f"{v['workloads']['submitted']} / {v['workloads']['finished']}",
        ),
        (
            "pending / running at end",
            lambda v: f"{v['workloads']['pending_at_end']} / {v['workloads']['running_at_end']}",
        ),
        (
            "wait p50 / p90",
            lambda v: f"{_human(v['overall']['wait_s']['p50'])} / {_human(v['overall']['wait_s']['p90'])}",
        ),
        (
            "wait p99 / max",
            lambda v: f"{_human(v['overall']['wait_s']['p99'])} / {_human(v['overall']['wait_s']['max'])}",
        ),
        ("completion time p50", lambda v: _human(v["overall"]["jct_s"]["p50"])),
        (
            "preemptions / lost GPU-hours",
            lambda v: f"{v['workloads']['preemptions']} / {v['overall']['lost_gpu_hours']:.1f}",
        ),
        ("arrival window", lambda v: _window(v, "arrival")),
        ("GPU allocation (mean)", lambda v: _pct(headline_mean(v, "gpu_allocation"))),
        (
            "fairness (Jain)",
            lambda v: "-" if v["fairness"]["jain"] is None else f"{v['fairness']['jain']:.3f}",
        ),
        (
            "cost used / total",
            lambda v: (
                f"{headline_cost(v, 'used') or 0:,.0f} / {headline_cost(v, 'total') or 0:,.0f} "
                f"{v['cost']['currency']}"
                if priced(v)
                else "no prices set"
            ),
        ),
        ("drain after the last arrival", lambda v: _window(v, "drain")),
        ("drain: GPU allocation / cost", lambda v: _drain(v, priced(v))),
    ]
    for label, get in rows:
        table.add_row(label, *(get(v) for v in variants))
    out.print(table)
    teams = Table(title="Per team: wait p50 / p90, GPU-hours (share of quota share)")
    teams.add_column("team")
    for v in variants:
        teams.add_column(v["name"], justify="right")
    names = sorted({t["name"] for v in variants for t in v["teams"]})
    for name in names:
        cells = []
        for v in variants:
            team = next((t for t in v["teams"] if t["name"] == name), None)
            if team is None:
                cells.append("-")
                continue
            share = team["gpu_hours_share"]
            quota = team["quota_share"]
            ratio = f" ({share / quota:.2f}×)" if share is not None and quota else ""
            cells.append(
                f"{_human(team['wait_s']['p50'])} / {_human(team['wait_s']['p90'])}, "
                f"{team['gpu_hours']:.0f} h{ratio}"
            )
        teams.add_row(name, *cells)
    out.print(teams)
    if not any(priced(v) for v in variants):
        out.print(PRICES_HINT, style="dim", highlight=False, markup=False, soft_wrap=True)
    out.print(
        "Means and cost are over the arrival window (first to last arrival); the drain is apart.",
        style="dim",
        highlight=False,
    )
    allocation = [headline_mean(v, "gpu_allocation") for v in variants]
    for sentence in trade_offs(variants, allocation):
        out.print(sentence, highlight=False, markup=False, soft_wrap=True)
    if any(v.get("serving") for v in variants):
        _print_serving(variants)
    if any(v.get("provisioning") for v in variants):
        _print_provisioning(variants)


def _print_provisioning(variants: list[dict[str, Any]]) -> None:
    """Provisioning and cost side by side (gpuq.sim.provisioning.report)."""
    from gpuq.sim.provisioning import report as provisioning_report

    table = Table(title="Provisioning and cost")
    table.add_column("")
    for v in variants:
        table.add_column(v["name"], justify="right")
    columns = [provisioning_report.cells(v) for v in variants]
    for index, (label, _get) in enumerate(provisioning_report.ROWS):
        table.add_row(label, *(c[index] for c in columns))
    out.print(table)


def _print_serving(variants: list[dict[str, Any]]) -> None:
    """Per service, the variants side by side (gpuq.sim.serving.report)."""
    from gpuq.sim.serving.report import ROWS as SERVING_ROWS
    from gpuq.sim.serving.report import cell as serving_cell

    table = Table(title="Serving: per service (latency, SLO attainment, replicas, GPU-hours, cost)")
    table.add_column("")
    for v in variants:
        table.add_column(v["name"], justify="right")
    for name in sorted({s["name"] for v in variants for s in v.get("serving") or []}):
        entries = [next((s for s in v.get("serving") or [] if s["name"] == name), None) for v in variants]
        table.add_row(f"[bold]{name}[/bold]", *("" for _ in variants))
        for label, kind, path in SERVING_ROWS:
            table.add_row(f"  {label}", *(serving_cell(e, kind, path) for e in entries))
    out.print(table)


def _window(variant: dict[str, Any], part: str) -> str:
    """``9.2m → 11.8h``: a part of the run (:mod:`gpuq.sim.windows`), in time since its start."""
    block = (variant.get("windows") or {}).get(part) or {}
    if block.get("start_s") is None:
        return "-"
    return f"{_human(block['start_s'])} → {_human(block['end_s'])}"


def _drain(variant: dict[str, Any], priced: bool) -> str:
    from gpuq.sim.metrics import headline_cost, headline_mean

    allocation = _pct(headline_mean(variant, "gpu_allocation", "drain"))
    cost = headline_cost(variant, "total", "drain")
    money = "-" if cost is None else f"{cost:,.0f} {variant['cost']['currency']}"
    money = money if priced else "no prices set"
    return f"{allocation} / {money}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _human(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 1 or seconds == 0 else f"{seconds * 1000:.0f}ms"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"
