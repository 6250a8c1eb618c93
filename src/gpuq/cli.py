"""The ``gpuq`` command: one thin function per verb."""

from __future__ import annotations

import json
import sys
import time
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from gpuq import __version__
from gpuq.api.diagnostics import Diagnostic
from gpuq.api.loader import LoadResult, load
from gpuq.api.quantity import format_amount
from gpuq.core.admission import Scheduler
from gpuq.core.cycles import AdmitRun, run_cycles
from gpuq.core.state import ClusterState

app = typer.Typer(
    help="gpuq: GPU workload orchestration with Kueue-exact queues, quotas, fair sharing and preemption.",
    no_args_is_help=True,
    add_completion=False,
)
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

FilesOption = Annotated[
    list[str],
    typer.Option("--filename", "-f", help="Manifest file, directory (recursive) or - for stdin; repeatable."),
]


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


def _version(value: bool) -> None:
    if value:
        out.print(f"gpuq {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """GPU workload orchestrator for AI teams."""


def _load(files: list[str]) -> LoadResult:
    return load(files, stdin=sys.stdin)


def _print_diagnostics(diagnostics: tuple[Diagnostic, ...]) -> None:
    for diagnostic in diagnostics:
        err.print(str(diagnostic), markup=False, highlight=False, soft_wrap=True)


@app.command()
def validate(files: FilesOption) -> None:
    """Check manifests; print every error of every file as path:line: Kind/name: field: message."""
    result = _load(files)
    _print_diagnostics(result.diagnostics)
    if result.errors:
        err.print(f"{len(result.errors)} error(s), {len(result.warnings)} warning(s)", style="red")
        raise typer.Exit(1)
    assert result.config is not None
    config = result.config
    out.print(
        f"valid: {len(config.cluster_queues)} ClusterQueue(s), {len(config.local_queues)} LocalQueue(s), "
        f"{len(config.flavors)} ResourceFlavor(s), {len(config.cohorts)} Cohort(s), "
        f"{len(result.workloads)} workload(s)"
        + (f", {len(result.warnings)} warning(s)" if result.warnings else ""),
        highlight=False,
    )


@app.command()
def admit(
    files: FilesOption,
    cycles: Annotated[
        int | None,
        typer.Option("--cycles", min=1, help="Run exactly N cycles (default: until nothing changes)."),
    ] = None,
    output: Annotated[
        OutputFormat, typer.Option("--output", "-o", help="table, json or yaml.")
    ] = OutputFormat.TABLE,
    now: Annotated[
        float | None,
        typer.Option(
            "--now",
            help="Scheduling time, seconds since the epoch (default: now, or later than every timestamp).",
        ),
    ] = None,
) -> None:
    """Run Kueue scheduling cycles on the snapshot the manifests describe and print the decisions."""
    result = _load(files)
    if result.errors:
        _print_diagnostics(result.diagnostics)
        raise typer.Exit(1)
    assert result.config is not None
    scheduler = Scheduler(result.config)
    for workload in result.workloads:
        scheduler.submit(workload)
    run = run_cycles(scheduler, max_cycles=cycles, now=_snapshot_time(result) if now is None else now)
    if run.flapping_period is not None:
        err.print(
            f"warning: stopped after {run.cycles} cycles: the same preemptions repeat every "
            f"{run.flapping_period} cycles (preemptor flapping, see docs/kueue-parity.md); "
            "the decisions shown are the latest of each workload",
            style="yellow",
            highlight=False,
        )
    document = admit_document(run)
    if output == OutputFormat.JSON:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    elif output == OutputFormat.YAML:
        sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
    else:
        _print_admit_tables(run, scheduler.state)


def _snapshot_time(result: LoadResult) -> float:
    """Now, or just after the latest timestamp in the manifests if the clock is behind them,
    so that new admissions are always the most recent quota reservations."""
    latest = max(
        (t for w in result.workloads for t in (w.creation_time, w.quota_reserved_time or 0.0)), default=0.0
    )
    return max(time.time(), latest + 1.0)


def admit_document(run: AdmitRun) -> dict[str, Any]:
    """The JSON/YAML shape of ``gpuq admit``'s decisions."""
    admitted: dict[str, Any] = {}
    pending: dict[str, str] = {key: p.message for key, p in sorted(run.pending.items())}
    for key, decision in sorted(run.admitted.items()):
        if decision.checks_pending:
            pending[key] = decision.message
            continue
        admitted[key] = {
            "clusterQueue": decision.cluster_queue,
            "podSets": {
                ps.name: {"count": ps.count, "flavors": dict(sorted(ps.flavors.items()))}
                for ps in decision.pod_sets
            },
        }
    preempted = {key: {"by": p.by, "reason": p.reason} for key, p in sorted(run.preempted.items())}
    return {
        "cycles": run.cycles,
        "admitted": admitted,
        "preempted": preempted,
        "pending": dict(sorted(pending.items())),
    }


def _print_admit_tables(run: AdmitRun, state: ClusterState) -> None:
    table = Table(title=f"Admitted ({run.cycles} scheduling cycle(s))", title_justify="left")
    for column in ("workload", "cluster queue", "pod sets", "flavors", "note"):
        table.add_column(column)
    for key, decision in sorted(run.admitted.items()):
        pod_sets = ", ".join(f"{ps.name}×{ps.count}" for ps in decision.pod_sets)
        flavors = ", ".join(sorted({f for ps in decision.pod_sets for f in ps.flavors.values()}))
        note = "borrowing" if decision.borrowing else ""
        if decision.checks_pending:
            note = f"quota reserved; waiting for {', '.join(decision.checks_pending)}"
        table.add_row(key, decision.cluster_queue, pod_sets, flavors, note)
    out.print(table)
    if run.preempted:
        preempted = Table(title="Preempted", title_justify="left")
        for column in ("workload", "cluster queue", "by", "reason"):
            preempted.add_column(column)
        for key, eviction in sorted(run.preempted.items()):
            preempted.add_row(key, eviction.cluster_queue, eviction.by, eviction.reason)
        out.print(preempted)
    if run.pending:
        waiting = Table(title="Pending", title_justify="left")
        waiting.add_column("workload")
        waiting.add_column("cluster queue")
        waiting.add_column("why it waits", overflow="fold")
        for key, why in sorted(run.pending.items()):
            waiting.add_row(key, why.cluster_queue or "-", why.message)
        out.print(waiting)
    out.print(_usage_table(state))


def _usage_table(state: ClusterState) -> Table:
    table = Table(title="Quota usage after admission (GPUs)", title_justify="left")
    for column in ("cluster queue", "flavor", "nominal", "used", "borrowed"):
        table.add_column(column, justify="right" if column in ("nominal", "used", "borrowed") else "left")
    for name, node in sorted(state.tree.cluster_queues.items()):
        for (flavor, resource), quota in sorted(node.quotas.items()):
            if "gpu" not in resource:
                continue
            used = node.usage.get((flavor, resource), 0)
            borrowed = max(0, used - quota.nominal)
            table.add_row(
                name,
                flavor,
                format_amount(resource, quota.nominal),
                format_amount(resource, used),
                format_amount(resource, borrowed) if borrowed else "",
            )
    return table


if __name__ == "__main__":  # pragma: no cover
    app()
