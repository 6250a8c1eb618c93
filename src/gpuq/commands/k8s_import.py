"""``gpuq import k8s``: turn ``kubectl get ... -A -o yaml`` into a scenario directory."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from gpuq.commands.render import LEGACY_DIRECTORY_HELP, OutputFormat, format_or_directory, write_document

if TYPE_CHECKING:
    from gpuq.k8s.importer import ImportResult, ImportSettings

import_app = typer.Typer(help="Import live clusters as gpuq scenarios (k8s).", no_args_is_help=True)
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


class NodesMode(StrEnum):
    POOLS = "pools"
    NODES = "nodes"


@import_app.command("k8s")
def import_k8s(
    out_dir: Annotated[str | None, typer.Option("--out-dir", help="Scenario directory to write.")] = None,
    output: Annotated[str | None, typer.Option("--output", "-o", help=LEGACY_DIRECTORY_HELP)] = None,
    files: Annotated[
        list[str] | None,
        typer.Option("--filename", "-f", help="The dump (kubectl get ... -A -o yaml), or - for stdin."),
    ] = None,
    nodes: Annotated[
        NodesMode,
        typer.Option("--nodes", help="pools: group identical nodes into NodePools; nodes: keep v1."),
    ] = NodesMode.POOLS,
    name: Annotated[
        str | None, typer.Option("--name", help="Scenario name (default: the directory's).")
    ] = None,
    now: Annotated[
        str | None,
        typer.Option("--now", help="When the dump was taken (RFC 3339); default: its newest timestamp."),
    ] = None,
    assume: Annotated[
        str | None,
        typer.Option(
            "--assume-duration",
            help="Run time for workloads that declare none (e.g. 1h): pending ones in the trace, and "
            "the scenario's initialState.assumeDuration.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Write into a directory that is not empty.")] = False,
) -> None:
    """Import a cluster dump: nodes as NodePools, Kueue objects as written, current Workloads as state,
    their history as a trace. Errors write nothing (exit 1); warnings are printed."""
    from gpuq.k8s.importer import import_dump, write_files

    fmt, directory = format_or_directory(output, out_dir, OutputFormat.TABLE)
    if directory is None:
        _fail("give the scenario directory to write: --out-dir DIR", 2)
    output_dir = Path(directory)
    settings = _settings(output_dir, name, nodes, now, assume)
    if output_dir.exists() and any(output_dir.iterdir()) and not force:
        _fail(f"{output_dir} is not empty (give --force to overwrite the files of an import there)", 2)
    result = import_dump(_texts(files or ["-"]), settings)
    for diagnostic in result.diagnostics:
        err.print(str(diagnostic), markup=False, highlight=False, soft_wrap=True)
    if result.errors:
        _fail(f"{len(result.errors)} error(s): nothing written", 1)
    write_files(result, output_dir)
    if fmt.is_table:
        _summary(result, output_dir)
    else:
        write_document(_summary_document(result, output_dir), fmt)


def _settings(
    output: Path, name: str | None, nodes: NodesMode, now: str | None, assume: str | None
) -> ImportSettings:
    from gpuq.api.kueue import parse_duration, parse_timestamp
    from gpuq.k8s.importer import ImportSettings, scenario_name

    try:
        now_s = parse_timestamp(now) if now is not None else None
        assume_s = parse_duration(assume) if assume is not None else None
    except ValueError as error:
        _fail(str(error), 2)
    if assume_s is not None and assume_s <= 0:
        _fail("--assume-duration must be positive", 2)
    return ImportSettings(name or scenario_name(output), nodes.value, now_s, assume_s)


def _texts(files: list[str]) -> list[tuple[str, str]]:
    texts = []
    for path in files:
        if path == "-":
            texts.append(("<stdin>", sys.stdin.read()))
            continue
        try:
            texts.append((path, Path(path).read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as error:
            _fail(f"{path}: cannot read: {error}", 2)
    return texts


def _fail(message: str, code: int) -> NoReturn:
    err.print(f"error: {message}", style="red", markup=False, highlight=False)
    raise typer.Exit(code)


def _summary_document(result: ImportResult, output: Path) -> dict[str, object]:
    """``-o json|yaml``: what the import wrote, for scripts."""
    from gpuq.k8s.importer import LAYOUT

    return {
        "scenario": str(output / "scenario.yaml"),
        "files": [str(output / f) for f in LAYOUT],
        "pools": [
            {"name": p.name, "nodes": len(p.nodes), "machineType": p.machine_type, "gpuModel": p.gpu_model}
            for p in result.pools
        ],
        "keptNodes": [{"name": node, "why": why} for node, why in result.kept_nodes],
        "workloads": dict(result.counts),
        "dumpTime": datetime.fromtimestamp(result.now_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "traceRows": result.trace_rows,
        "historyRows": result.history_rows,
    }


def _summary(result: ImportResult, output: Path) -> None:
    from gpuq.k8s.importer import LAYOUT

    table = Table(title=f"Node pools ({sum(len(p.nodes) for p in result.pools)} nodes)", title_justify="left")
    for column in (
        "pool",
        "nodes",
        "machine",
        "GPUs per node",
        "sharing",
        "capacity",
        "zone",
        "block / racks",
    ):
        table.add_column(column)
    for pool in result.pools:
        gpus = f"{pool.gpus_per_node}× {pool.gpu_model}" if pool.gpu_model else "-"
        where = " / ".join(x for x in (pool.block or "", ", ".join(pool.racks)) if x) or "-"
        row = (pool.name, str(len(pool.nodes)), pool.machine_type, gpus, pool.sharing, pool.capacity_type)
        table.add_row(*row, pool.zone or "-", where)
    out.print(table)
    for node, why in result.kept_nodes:
        out.print(f"v1 Node {node}: {why}", markup=False, highlight=False)
    counts = result.counts
    at = datetime.fromtimestamp(result.now_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out.print(
        f"workloads at {at}: {counts.get('pending', 0)} pending, {counts.get('admitted', 0)} admitted, "
        f"{counts.get('finished', 0)} finished; trace rows {result.trace_rows} "
        f"(history {result.history_rows})",
        highlight=False,
    )
    out.print(f"wrote {', '.join(str(output / f) for f in LAYOUT)}", markup=False, highlight=False)
    out.print(f"run: gpuq simulate -f {output / 'scenario.yaml'}", markup=False, highlight=False)
