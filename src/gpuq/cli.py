"""The ``gpuq`` command: one thin function per verb.

Start-up is a feature (``gpuq --help`` answers in a fraction of a second): this module and the
``gpuq.commands`` modules import at their top only what the verbs' signatures need; a verb imports
the loader, the engine, the simulator, the store or the server in its body, when it runs.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpuq import __version__
from gpuq.commands import client
from gpuq.commands.diff import diff
from gpuq.commands.export import export_app
from gpuq.commands.forecast import forecast_accuracy
from gpuq.commands.k8s_import import import_app
from gpuq.commands.pack import pack
from gpuq.commands.render import OUTPUT_HELP, OutputFormat, err, error, out, print_diagnostics, write_document
from gpuq.commands.serve import serve, users_app
from gpuq.commands.simulate import simulate
from gpuq.commands.trace import trace_app
from gpuq.core.placement.scoring import CHOOSERS

app = typer.Typer(
    help="gpuq: GPU workload orchestration with Kueue-exact queues, quotas, fair sharing and preemption.",
    no_args_is_help=True,
    add_completion=False,
)
get_app = typer.Typer(help="List objects of a snapshot (nodes).", no_args_is_help=True)
describe_app = typer.Typer(help="Show one object of a snapshot in detail (node).", no_args_is_help=True)
app.command("pack")(pack)
app.command("simulate")(simulate)
app.command("forecast-accuracy")(forecast_accuracy)
app.add_typer(export_app, name="export")
app.add_typer(import_app, name="import")
app.command("diff")(diff)
app.add_typer(trace_app, name="trace")
app.add_typer(get_app, name="get")
app.add_typer(describe_app, name="describe")
app.command("serve")(serve)
app.add_typer(users_app, name="users")
app.command("apply")(client.apply)
app.command("submit")(client.submit)
app.command("delete")(client.delete)
app.command("logs")(client.logs)
get_app.command("workloads")(client.get_workloads)
get_app.command("clusterqueues")(client.get_clusterqueues)
get_app.command("localqueues")(client.get_localqueues)
get_app.command("pendingworkloads")(client.get_pending)
get_app.command("services")(client.get_services)
describe_app.command("workload")(client.describe_workload)

FilesOption = Annotated[
    list[str],
    typer.Option("--filename", "-f", help="Manifest file, directory (recursive) or - for stdin; repeatable."),
]


NodesOption = Annotated[
    list[str] | None,
    typer.Option("--nodes", help="Files with NodePools or v1 Nodes (they may also sit among -f files)."),
]
PolicyOption = Annotated[
    str, typer.Option("--policy", help=f"Placement scoring policy: {', '.join(sorted(CHOOSERS))}.")
]


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


@app.command()
def validate(files: FilesOption) -> None:
    """Check manifests; print every error of every file as path:line: Kind/name: field: message.

    A workload Kueue would keep pending for ever (it can never fit its ClusterQueue, its LocalQueue
    does not exist) is an error here; the other verbs load it and leave it pending."""
    from gpuq.api.loader import load

    result = load(files, stdin=sys.stdin, strict=True)
    print_diagnostics(result.diagnostics)
    if result.ignored_summary:
        err.print(f"note: {result.ignored_summary}", highlight=False, markup=False, soft_wrap=True)
    if result.errors:
        err.print(f"{len(result.errors)} error(s), {len(result.warnings)} warning(s)", style="red")
        raise typer.Exit(1)
    assert result.config is not None
    config = result.config
    out.print(
        f"valid: {len(config.cluster_queues)} ClusterQueue(s), {len(config.local_queues)} LocalQueue(s), "
        f"{len(config.flavors)} ResourceFlavor(s), {len(config.cohorts)} Cohort(s), "
        f"{len(result.workloads)} workload(s)"
        + (f", {len(result.nodes)} node(s) in {len(result.node_pools)} NodePool(s)" if result.nodes else "")
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
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help=OUTPUT_HELP)] = OutputFormat.TABLE,
    now: Annotated[
        float | None,
        typer.Option(
            "--now",
            help="Scheduling time, seconds since the epoch (default: now, or later than every timestamp).",
        ),
    ] = None,
    nodes: NodesOption = None,
    policy: PolicyOption = "binpack",
    eta: Annotated[
        bool,
        typer.Option(
            "--eta",
            help="Also forecast when each workload starts and ends: workloads with status.admission run "
            "since their PodsReady (or QuotaReserved) time, the others wait; the engine runs forward.",
        ),
    ] = False,
    history: Annotated[
        str | None,
        typer.Option(
            "--history",
            help="With --eta: a trace of finished runs (CSV/JSONL or a public trace) to learn runtimes from.",
        ),
    ] = None,
    expected_arrivals: Annotated[
        str | None,
        typer.Option(
            "--expected-arrivals",
            help="With --eta: expect the workloads created in this past window (e.g. 1h) to be submitted "
            "again over the same span ahead.",
        ),
    ] = None,
) -> None:
    """Run Kueue scheduling cycles on the snapshot the manifests describe and print the decisions.

    With nodes (NodePools or Nodes, in the files or with --nodes), admitted pods are bound to
    nodes too, and topology-aware pod sets are admitted only where a topology domain holds them.
    Add a job's manifest to a snapshot and --eta to ask when it would start.
    """
    from gpuq.commands.admit import admit_snapshot

    admit_snapshot(
        files + (nodes or []),
        cycles=cycles,
        output=output,
        now=now,
        policy=policy,
        eta=eta,
        history=history,
        expected_arrivals=expected_arrivals,
    )


AdmitFirstOption = Annotated[
    bool, typer.Option("--admit", help="Run the scheduling cycles first, then show the nodes.")
]


@get_app.command("nodes")
def get_nodes(
    files: Annotated[
        list[str] | None,
        typer.Option("--filename", "-f", help="Snapshot manifests; without -f, the server's live nodes."),
    ] = None,
    admit_first: AdmitFirstOption = False,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help=OUTPUT_HELP)] = OutputFormat.TABLE,
    policy: PolicyOption = "binpack",
    server: client.ServerOption = None,
    token: client.TokenOption = None,
) -> None:
    """Nodes with their GPUs: allocatable, allocated and free devices, CPU and memory."""
    if not files:
        client.get_nodes(output.value, server, token)
        return
    from gpuq.commands.admit import placer_after
    from gpuq.commands.nodes import nodes_document, nodes_table

    document = nodes_document(placer_after(files, admit_first, policy))
    if not output.is_table:
        write_document(document, output)
        return
    out.print(nodes_table(document))


@describe_app.command("node")
def describe_node(
    name: Annotated[str, typer.Argument(help="Node name.")],
    files: FilesOption,
    admit_first: AdmitFirstOption = False,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help=OUTPUT_HELP)] = OutputFormat.YAML,
    policy: PolicyOption = "binpack",
) -> None:
    """One node: labels (GPU Feature Discovery's included), taints, resources, GPUs, MIG slices, pods."""
    from gpuq.commands.admit import placer_after
    from gpuq.commands.nodes import node_detail

    placer = placer_after(files, admit_first, policy)
    capacity = placer.nodes.get(name)
    if capacity is None:
        known = ", ".join(sorted(placer.nodes)[:10])
        error(f"node {name!r} not found; nodes: {known}")
        raise typer.Exit(1)
    write_document(
        node_detail(capacity), OutputFormat.JSON if output == OutputFormat.JSON else OutputFormat.YAML
    )


if __name__ == "__main__":  # pragma: no cover
    app()
