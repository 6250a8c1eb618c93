"""``gpuq simulate``: replay workloads against configurations and report waits, use, fairness, cost."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuq.commands.render import OUTPUT_HELP, OutputFormat, write_document

if TYPE_CHECKING:
    from gpuq.sim.provisioning.provisioner import Provisioner
    from gpuq.sim.scenario import PreparedVariant, ScenarioPlan
    from gpuq.sim.simulator import SimResult
    from gpuq.sim.traces.model import BadRow

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
) -> None:
    """Simulate the Scenario (or a trace against the configuration) with the same engine as gpuq serve.

    Writes metrics.json, workloads.csv and report.html (opens offline) to --out-dir.
    """
    if old_out is not None:
        err.print("warning: --out is deprecated; use --out-dir", style="yellow", highlight=False)
        out_dir = out_dir or old_out
    from gpuq.sim.metrics import SCHEMA, variant_metrics, workloads_csv
    from gpuq.sim.provisioning import report as provisioning_report
    from gpuq.sim.scenario import ScenarioError, load_workloads, plan_scenario, prepare
    from gpuq.sim.serving.report import batch_only, serving_metrics
    from gpuq.sim.traces.model import TraceError

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
    for variant_plan in plan.variants:
        try:
            prepared = prepare(plan, variant_plan, workloads)
        except ScenarioError as error:
            for diagnostic in error.diagnostics:
                err.print(str(diagnostic), highlight=False, markup=False)
            err.print(f"error: {error.message}", style="red", highlight=False, markup=False)
            raise typer.Exit(1) from error
        if strict and prepared.bad_rows:
            err.print(f"error: {prepared.bad_rows[0]}", style="red", highlight=False, markup=False)
            raise typer.Exit(1)
        _report_bad_rows(prepared.bad_rows, workloads.rows, f"variant {variant_plan.name}: ")
        _report_state(plan, prepared, said)
        started = time.perf_counter()
        result, provisioner = _run(prepared, quiet)
        wall = time.perf_counter() - started
        bins = plan.spec.settings.bins if plan.spec else 240
        services = serving_metrics(result, bins) if prepared.serving is not None else None
        result = batch_only(result)  # serving replicas are reported per service, not as jobs
        shares = plan.spec.fairness.shares if plan.spec else {}
        total = sum(shares.values())
        metrics = variant_metrics(
            variant_plan.name,
            result,
            prepared.config,
            description=variant_plan.description,
            bins=plan.spec.settings.bins if plan.spec else 240,
            entitlements={t: s / total for t, s in shares.items()} if shares else None,
            queueing=variant_plan.queueing,
        )
        metrics["workloads"]["bad_rows"] = len(workloads.bad_rows) + len(prepared.bad_rows)
        if services is not None:
            metrics["serving"] = services
        if provisioner is not None:  # only when the scenario turns provisioning on
            metrics["provisioning"] = provisioning_report.provisioning_metrics(provisioner, result, bins)
            metrics["cost_attribution"] = provisioning_report.cost_metrics(provisioner, result)
        variants.append(metrics)
        csv_parts.append(
            workloads_csv(
                result.runs.values(), variant_plan.name if len(plan.variants) > 1 else None, result.span_s
            )
        )
        if not quiet:  # wall-clock figures: here, never in metrics.json (byte-identical from run to run)
            decisions = (
                f", {provisioner.decision_s:.2f}s of it in provisioning decisions" if provisioner else ""
            )
            err.print(
                f"variant {variant_plan.name}: {len(result.runs)} workloads, {result.events} events, "
                f"{result.cycles} scheduling cycles in {wall:.1f}s wall{decisions}",
                highlight=False,
            )
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


def _run(prepared: PreparedVariant, quiet: bool) -> tuple[SimResult, Provisioner | None]:
    from gpuq.sim.provisioning.provisioner import Provisioner

    steps = 1000
    with Progress(
        TextColumn(f"[bold]{prepared.plan.name}"),
        BarColumn(),
        TextColumn("{task.fields[clock]}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=quiet,
    ) as progress:
        task = progress.add_task("simulating", total=steps, clock="")
        marks = {"next": 0}

        def on_progress(now: float) -> None:
            done = int(simulation.progress() * steps)  # arrivals and ends: 100 % when the drain is over
            if done >= marks["next"]:
                marks["next"] = done + steps // 200
                progress.update(task, completed=done, clock=f"t={_human(now)}")

        simulation = prepared.simulation(None if quiet else on_progress)
        result = simulation.run()
        progress.update(task, completed=steps)
        provisioner = simulation.provisioning
        return result, provisioner if isinstance(provisioner, Provisioner) else None


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


def _report_state(plan: ScenarioPlan, prepared: PreparedVariant, said: set[str]) -> None:
    """What the initial state assumed (warnings), which of its workloads Kueue would never admit
    (they are simulated and stay pending), and which trace rows it replaced (notes)."""
    state = plan.state
    never = [d for d in prepared.warnings if d.stays_pending and state is not None and state.holds(d.path)]
    for diagnostic in [*never, *prepared.state_warnings]:
        if str(diagnostic) not in said:
            said.add(str(diagnostic))
            err.print(str(diagnostic), style="yellow", highlight=False, markup=False)
    for note in prepared.notes:
        if note not in said:
            said.add(note)
            err.print(f"note: {note}", highlight=False, markup=False)


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
