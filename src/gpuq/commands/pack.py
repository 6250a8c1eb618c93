"""``gpuq pack``: the FGD paper's static packing experiment on openb node and pod lists.

Register with ``app.command("pack")(pack)``. Exit codes: 0 done, 2 unreadable
input (the message names file, line and column) or bad options.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpuq.commands.render import OUTPUT_HELP, OutputFormat, write_document
from gpuq.core.placement.policies import PolicyName

if TYPE_CHECKING:
    from gpuq.pack.experiment import PackResult

TABLE_STEP_PCT = 10


def pack(
    nodes: Annotated[
        str, typer.Option("--nodes", help="Node list CSV: sn,cpu_milli,memory_mib,gpu,model (openb format).")
    ],
    pods: Annotated[
        str,
        typer.Option(
            "--pods",
            help="Pod list CSV: name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec] (openb format).",
        ),
    ],
    policy: Annotated[PolicyName, typer.Option("--policy", help="Placement policy.")] = PolicyName.FGD,
    tune: Annotated[
        float,
        typer.Option(
            "--tune", min=0.0, help="Arrived GPU demand as a multiple of cluster GPUs (0: the list as is)."
        ),
    ] = 1.3,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the arrival order and tie-breaks.")] = 42,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help=OUTPUT_HELP)] = OutputFormat.TABLE,
) -> None:
    """Place a shuffled, tuned pod list on the nodes with one policy (the FGD paper's experiment) and
    print GPU allocation, fragmentation and failed pods per percent of arrived GPU demand."""
    from gpuq.pack.experiment import run_pack
    from gpuq.pack.openb import OpenbError, read_nodes, read_pods

    err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
    started = time.perf_counter()
    try:
        result = run_pack(read_nodes(nodes), read_pods(pods), policy.value, tune, seed)
    except (OpenbError, ValueError) as error:
        err.print(f"error: {error}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    wall_s = time.perf_counter() - started
    if not output.is_table:
        write_document(result.as_dict(), output)
    else:
        _print_table(result, wall_s)


def _print_table(result: PackResult, wall_s: float) -> None:
    out = Console(width=None if sys.stdout.isatty() else 200)
    table = Table(
        title=f"gpuq pack: {result.policy}, seed {result.seed}, tune {result.tune:g} "
        f"({result.nodes} nodes, {result.total_gpus} GPUs, {result.pods} pods)",
        title_justify="left",
    )
    for column in ("arrived %", "GPU alloc %", "frag % of GPUs", "frag % of idle", "failed pods"):
        table.add_column(column, justify="right")
    last = result.points[-1] if result.points else None
    for point in result.points:
        if point.arrived_pct % TABLE_STEP_PCT == 0 or point is last:
            table.add_row(
                str(point.arrived_pct),
                f"{point.alloc_pct:.2f}",
                f"{point.frag_pct:.2f}",
                f"{point.frag_ratio_pct:.2f}",
                str(point.failed_pods),
            )
    out.print(table)
    placed = result.pods - result.failed
    summary = f"{result.policy}: {placed} of {result.pods} pods placed, {result.failed} failed"
    if last is not None:
        summary += f"; GPU allocation {last.alloc_pct:.2f}% at {last.arrived_pct}% arrived"
    out.print(f"{summary}; wall time {wall_s:.2f} s", markup=False, highlight=False)
