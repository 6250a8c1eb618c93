"""``gpuq trace``: build simulation inputs from the staged traces, and check a trace before simulating.

Register with ``app.add_typer(trace_app, name="trace")``. ``nodes`` and
``queues`` print manifests on stdout (notes on stderr) so that their output
redirected to a file passes ``gpuq validate``; ``read`` summarises what
``gpuq simulate`` would replay. Exit codes: 0 done, 1 a TraceError.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Annotated, Any, TypeVar

import typer
import yaml
from rich.console import Console
from rich.table import Table

from gpuq.commands.render import OUTPUT_HELP, OutputFormat, write_document
from gpuq.sim.traces import FORMATS, TraceError, TraceRead, read_trace
from gpuq.sim.traces.helios import helios_queues
from gpuq.sim.traces.nodes import MACHINE_LISTS, node_pools

SHOWN_BAD_ROWS = 10
T = TypeVar("T")

trace_app = typer.Typer(
    help="Build simulation inputs from traces (NodePools, Helios queues) and check a trace.",
    no_args_is_help=True,
)


def _err() -> Console:
    return Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def _out() -> Console:
    return Console(width=None if sys.stdout.isatty() else 200)


def _or_exit(build: Callable[[], T]) -> T:
    """The result of ``build``, or ``error: <message>`` on stderr and exit 1 for a TraceError."""
    try:
        return build()
    except TraceError as error:
        _err().print(f"error: {error}", style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


def _print_manifests(manifests: Iterable[dict[str, Any]], notes: Iterable[str], output: OutputFormat) -> None:
    """YAML documents, or JSON as a ``kind: List`` (which ``gpuq validate`` also reads), or a table of
    what they are (kind, name, the figures that matter); notes to stderr."""
    err = _err()
    for note in notes:
        err.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    if output.is_table:
        _manifest_table(list(manifests))
    elif output is OutputFormat.JSON:
        document = {"apiVersion": "v1", "kind": "List", "items": list(manifests)}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump_all(list(manifests), sort_keys=False))


OutputOption = Annotated[
    OutputFormat, typer.Option("--output", "-o", help=f"{OUTPUT_HELP} JSON is a v1 List; default yaml.")
]


def _manifest_table(manifests: list[dict[str, Any]]) -> None:
    table = Table(title="Manifests", title_justify="left")
    for column in ("kind", "namespace", "name", "nodes / quota", "GPUs"):  # -o wide: the same
        table.add_column(column)
    for manifest in manifests:
        spec = manifest.get("spec") or {}
        metadata = manifest.get("metadata") or {}
        nodes, gpus = "", ""
        if manifest.get("kind") == "NodePool":
            gpu = spec.get("gpu") if isinstance(spec.get("gpu"), dict) else {}
            nodes = str(spec.get("count", ""))
            gpus = f"{gpu.get('count')} x {gpu.get('model')} per node" if gpu else ""
        elif manifest.get("kind") == "ClusterQueue":
            quotas = [
                f"{r.get('name')}={r.get('nominalQuota')}"
                for group in spec.get("resourceGroups") or []
                for flavor in group.get("flavors") or []
                for r in flavor.get("resources") or []
            ]
            nodes = ", ".join(quotas)
        table.add_row(
            str(manifest.get("kind", "")),
            str(metadata.get("namespace") or ""),
            str(metadata.get("name", "")),
            nodes,
            gpus,
        )
    _out().print(table)


@trace_app.command("nodes")
def nodes(
    file: Annotated[
        str, typer.Argument(help=f"Machine list; its name starts with {', '.join(MACHINE_LISTS)}.")
    ],
    output: OutputOption = OutputFormat.YAML,
) -> None:
    """Print the NodePool and GPUModel manifests of a public trace's machine list."""
    pools = _or_exit(lambda: node_pools(file))
    _print_manifests(pools.manifests, pools.notes, output)


@trace_app.command("queues")
def queues(
    file: Annotated[str, typer.Argument(help="Helios venus_ or earth_cluster_gpu_number.csv.")],
    date: Annotated[str | None, typer.Option("--date", help="YYYY-MM-DD (default: the latest).")] = None,
    cohort: Annotated[str, typer.Option("--cohort", help="Cohort of every ClusterQueue.")] = "helios",
    flavor: Annotated[str, typer.Option("--flavor", help="ResourceFlavor holding the GPUs.")] = "default",
    namespace_prefix: Annotated[
        str, typer.Option("--namespace-prefix", help="Put in front of every namespace name.")
    ] = "",
    output: OutputOption = OutputFormat.YAML,
) -> None:
    """Print one day's Helios VC quotas as Kueue queues: a ClusterQueue, Namespace and LocalQueue per VC."""
    built = _or_exit(
        lambda: helios_queues(file, date, cohort=cohort, flavor=flavor, namespace_prefix=namespace_prefix)
    )
    _print_manifests(built.manifests, built.notes, output)


@trace_app.command("read")
def read(
    file: Annotated[
        str, typer.Argument(help="Workload trace (CSV, JSONL or a public trace, .xz or .gz allowed).")
    ],
    trace_format: Annotated[
        str | None,
        typer.Option("--trace-format", help=f"{', '.join(FORMATS)} (default: from the file's columns)."),
    ] = None,
    old_format: Annotated[
        str | None, typer.Option("--format", hidden=True, help="Deprecated spelling of --trace-format.")
    ] = None,
    mapping: Annotated[
        str | None,
        typer.Option("--mapping", help="Mapping file: trace groups to namespaces and LocalQueues."),
    ] = None,
    strict: Annotated[bool, typer.Option("--strict", help="A refused row is an error (exit 1).")] = False,
    limit: Annotated[int | None, typer.Option("--limit", min=0, help="Read only the first N rows.")] = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help=OUTPUT_HELP)] = OutputFormat.TABLE,
) -> None:
    """Read a trace as gpuq simulate would and summarise it: jobs per queue, GPU-hours, refused rows."""
    if old_format is not None:
        _err().print("warning: --format is deprecated; use --trace-format", style="yellow", highlight=False)
        trace_format = trace_format or old_format
    trace = _or_exit(
        lambda: read_trace(file, format=trace_format, mapping=mapping, strict=strict, limit=limit)
    )
    summary = trace_summary(trace)
    if not output.is_table:
        write_document(summary, output)
    else:
        _print_summary(summary)


def trace_summary(trace: TraceRead) -> dict[str, Any]:
    """Counts, notes, the first refused rows, and jobs and requested GPU-hours per (namespace, queue).

    GPU-hours = pods × GPUs per pod × duration, as asked for (a replay adds
    nothing for waiting and may add reruns after preemption).
    """
    jobs: Counter[tuple[str, str]] = Counter()
    gpu_hours: dict[tuple[str, str], float] = {}
    for job in trace.jobs:
        key = (job.namespace, job.queue)
        jobs[key] += 1
        gpu_hours[key] = gpu_hours.get(key, 0.0) + job.pods * job.gpu_milli * job.duration_s / 1000 / 3600
    submits = [job.submit_s for job in trace.jobs]
    return {
        "source": trace.source,
        "rows": trace.rows,
        "jobs": len(trace.jobs),
        "refused": len(trace.bad_rows),
        "refused_first": [str(row) for row in trace.bad_rows[:SHOWN_BAD_ROWS]],
        "notes": list(trace.notes),
        "gpu_hours": round(sum(gpu_hours.values()), 3),
        "first_submit_s": min(submits, default=None),
        "last_submit_s": max(submits, default=None),
        "queues": [
            {"namespace": ns, "queue": q, "jobs": jobs[ns, q], "gpu_hours": round(gpu_hours[ns, q], 3)}
            for ns, q in sorted(jobs)
        ],
    }


def _print_summary(summary: dict[str, Any]) -> None:
    out = Console(width=None if sys.stdout.isatty() else 200)
    table = Table(title=f"Trace {summary['source']}", title_justify="left", show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    table.add_row("rows read", f"{summary['rows']:,}")
    table.add_row("jobs", f"{summary['jobs']:,}")
    table.add_row("refused rows", f"{summary['refused']:,}")
    table.add_row("GPU-hours requested", f"{summary['gpu_hours']:,.1f}")
    table.add_row(
        "first / last submit", f"{_time(summary['first_submit_s'])} / {_time(summary['last_submit_s'])}"
    )
    out.print(table)
    queues = Table(title="Jobs per namespace / queue", title_justify="left")
    for column in ("namespace", "queue", "jobs", "GPU-hours"):
        queues.add_column(column, justify="right" if column in ("jobs", "GPU-hours") else "left")
    for row in summary["queues"]:
        queues.add_row(row["namespace"], row["queue"], f"{row['jobs']:,}", f"{row['gpu_hours']:,.1f}")
    out.print(queues)
    if summary["refused"]:
        out.print(
            f"Refused rows ({summary['refused']:,}, first {len(summary['refused_first'])}):", markup=False
        )
        for row in summary["refused_first"]:
            out.print(f"  {row}", markup=False, highlight=False, soft_wrap=True)
    for note in summary["notes"]:
        out.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)


def _time(seconds: float | None) -> str:
    """Seconds from the trace start, with days for long traces."""
    if seconds is None:
        return "-"
    return f"{seconds:,.0f}s" + (f" ({seconds / 86400:.1f}d)" if seconds >= 86400 else "")
