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
from gpuq.api.kueue import parse_duration
from gpuq.api.loader import LoadResult, load
from gpuq.api.quantity import format_amount
from gpuq.commands import client
from gpuq.commands.diff import diff
from gpuq.commands.eta import EtaError, eta_document, forecast_file, print_etas
from gpuq.commands.export import export_app
from gpuq.commands.forecast import forecast_accuracy
from gpuq.commands.k8s_import import import_app
from gpuq.commands.nodes import node_detail, nodes_document
from gpuq.commands.pack import pack
from gpuq.commands.serve import serve, users_app
from gpuq.commands.simulate import simulate
from gpuq.commands.trace import trace_app
from gpuq.core.admission import Scheduler
from gpuq.core.cycles import AdmitRun, run_cycles
from gpuq.core.nodes import HOSTNAME_LABEL, is_device_resource
from gpuq.core.placement.engine import Placer, WorkloadPlacement
from gpuq.core.placement.scoring import CHOOSERS, inputs_for
from gpuq.core.state import ClusterState
from gpuq.core.topology import TopologyAssignment
from gpuq.forecast.forecast import Forecast, ForecastSettings
from gpuq.sim.traces.model import TraceError

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
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

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
    result = _load_valid(files + (nodes or []))
    scheduler = _scheduler(result, policy)
    assert result.config is not None
    tas = sorted(name for name, flavor in result.config.flavors.items() if flavor.topology_name)
    if tas and not result.nodes:
        err.print(
            f"warning: flavor(s) {', '.join(tas)} are topology-aware but no nodes were given "
            "(NodePools or Nodes): topology is not checked, pod sets are admitted on quota alone",
            style="yellow",
            highlight=False,
        )
    at = _snapshot_time(result) if now is None else now
    run = run_cycles(scheduler, max_cycles=cycles, now=at)
    if run.flapping_period is not None:
        err.print(
            f"warning: stopped after {run.cycles} cycles: the same preemptions repeat every "
            f"{run.flapping_period} cycles (preemptor flapping, see docs/kueue-parity.md); "
            "the decisions shown are the latest of each workload",
            style="yellow",
            highlight=False,
        )
    document = admit_document(run, scheduler)
    forecast = _forecast(result, at, policy, history, expected_arrivals) if eta else None
    if output != OutputFormat.TABLE:
        if forecast is not None:
            document["forecast"] = eta_document(*forecast)
        _write(document, output)
    else:
        _print_admit_tables(run, scheduler)
        if forecast is not None:
            print_etas(out, *forecast)


def _forecast(
    result: LoadResult, now: float, policy: str, history: str | None, arrivals: str | None
) -> tuple[Forecast, dict[str, str]]:
    try:
        window = parse_duration(arrivals) if arrivals is not None else None
        if window is not None and window <= 0:
            raise ValueError(f"{arrivals!r} is not a positive duration")
    except ValueError as error:
        err.print(f"error: --expected-arrivals: {error}", style="red", highlight=False)
        raise typer.Exit(2) from error
    try:
        settings = ForecastSettings(arrivals_window_s=window)
        return forecast_file(result, now, policy=policy, history=history, settings=settings)
    except (EtaError, TraceError) as error:
        err.print(f"error: {error}", style="red", highlight=False)
        raise typer.Exit(2) from error


def _load_valid(files: list[str]) -> LoadResult:
    """Load, or print every diagnostic and exit 1 when any is an error."""
    result = _load(files)
    if result.errors:
        _print_diagnostics(result.diagnostics)
        raise typer.Exit(1)
    assert result.config is not None
    return result


def _scheduler(result: LoadResult, policy: str) -> Scheduler:
    """A scheduler over the snapshot, with a placer when the snapshot has nodes."""
    assert result.config is not None
    config = result.config
    placer = None
    if result.nodes:
        try:
            placer = Placer(
                result.nodes,
                policy=policy,
                policy_inputs=inputs_for(result.workloads),
                flavors=config.flavors,
                topologies=config.topologies,
            )
        except ValueError as error:
            err.print(f"error: {error}", style="red", highlight=False)
            raise typer.Exit(2) from error
    scheduler = Scheduler(config, placer)
    for workload in result.workloads:
        scheduler.submit(workload)
    return scheduler


def _write(document: Any, output: OutputFormat) -> None:
    if output == OutputFormat.JSON:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(document, sort_keys=False))


def _placer_after(files: list[str], admit_first: bool, policy: str) -> Placer:
    result = _load_valid(files)
    if not result.nodes:
        err.print("error: no nodes: give NodePools or v1 Nodes with -f", style="red", highlight=False)
        raise typer.Exit(1)
    scheduler = _scheduler(result, policy)
    if admit_first:
        run_cycles(scheduler, now=_snapshot_time(result))
    assert scheduler.placer is not None
    return scheduler.placer


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
    output: Annotated[OutputFormat, typer.Option("--output", "-o")] = OutputFormat.TABLE,
    policy: PolicyOption = "binpack",
    server: client.ServerOption = None,
    token: client.TokenOption = None,
) -> None:
    """Nodes with their GPUs: allocatable, allocated and free devices, CPU and memory."""
    if not files:
        client.get_nodes(output.value, server, token)
        return
    document = nodes_document(_placer_after(files, admit_first, policy))
    if output != OutputFormat.TABLE:
        _write(document, output)
        return
    table = Table(title="Nodes", title_justify="left")
    for column in (
        "name",
        "pool",
        "gpu model",
        "sharing",
        "devices free/allocatable",
        "cpu free",
        "pods",
    ):
        table.add_column(column)
    for row in document:
        devices = ", ".join(
            f"{name.removeprefix('nvidia.com/')} {d['free']}/{d['allocatable']}"
            for name, d in row["devices"].items()
        )
        pool = row["pool"] + (f" ({row['capacityType']})" if row["capacityType"] else "")
        table.add_row(
            row["name"], pool, row["gpuModel"], row["sharing"], devices, row["cpu"]["free"], str(row["pods"])
        )
    out.print(table)


@describe_app.command("node")
def describe_node(
    name: Annotated[str, typer.Argument(help="Node name.")],
    files: FilesOption,
    admit_first: AdmitFirstOption = False,
    output: Annotated[OutputFormat, typer.Option("--output", "-o")] = OutputFormat.YAML,
    policy: PolicyOption = "binpack",
) -> None:
    """One node: labels (GPU Feature Discovery's included), taints, resources, GPUs, MIG slices, pods."""
    placer = _placer_after(files, admit_first, policy)
    capacity = placer.nodes.get(name)
    if capacity is None:
        known = ", ".join(sorted(placer.nodes)[:10])
        err.print(f"error: node {name!r} not found; nodes: {known}", style="red", highlight=False)
        raise typer.Exit(1)
    _write(node_detail(capacity), OutputFormat.JSON if output == OutputFormat.JSON else OutputFormat.YAML)


def _snapshot_time(result: LoadResult) -> float:
    """Now, or just after the latest timestamp in the manifests if the clock is behind them,
    so that new admissions are always the most recent quota reservations."""
    latest = max(
        (t for w in result.workloads for t in (w.creation_time, w.quota_reserved_time or 0.0)), default=0.0
    )
    return max(time.time(), latest + 1.0)


def admit_document(run: AdmitRun, scheduler: Scheduler | None = None) -> dict[str, Any]:
    """The JSON/YAML shape of ``gpuq admit``'s decisions; with nodes, each admitted pod's binding."""
    placer = scheduler.placer if scheduler is not None else None
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
        if placer is not None and (placement := placer.placements.get(key)) is not None:
            admitted[key]["pods"] = _bindings_document(placement)
            for pod_set in placement.pod_sets:
                if pod_set.topology is not None and pod_set.name in admitted[key]["podSets"]:
                    admitted[key]["podSets"][pod_set.name]["topologyAssignment"] = _topology_document(
                        pod_set.topology
                    )
    preempted = {key: {"by": p.by, "reason": p.reason} for key, p in sorted(run.preempted.items())}
    document: dict[str, Any] = {
        "cycles": run.cycles,
        "admitted": admitted,
        "preempted": preempted,
        "pending": dict(sorted(pending.items())),
    }
    if scheduler is not None and placer is not None:
        document["unplaced"] = {key: f.message for key, f in sorted(scheduler.unplaced.items())}
    return document


def _topology_document(assignment: TopologyAssignment) -> dict[str, Any]:
    """Kueue's ``podSetAssignments[].topologyAssignment``: only the hostname level when it is the lowest."""
    levels, keep = list(assignment.levels), 0
    if levels and levels[-1] == HOSTNAME_LABEL:
        levels, keep = [HOSTNAME_LABEL], len(assignment.levels) - 1
    domains = [{"values": list(d.values[keep:]), "count": d.count} for d in assignment.domains]
    return {"levels": levels, "domains": domains}


def _bindings_document(placement: WorkloadPlacement) -> dict[str, Any]:
    pods: dict[str, Any] = {}
    for pod_set in placement.pod_sets:
        for binding in pod_set.bindings:
            entry: dict[str, Any] = {"node": binding.node}
            if binding.gpus:
                entry["gpus"] = list(binding.gpus)
            pods[binding.pod.rsplit("/", 1)[-1]] = entry
    return pods


def _print_admit_tables(run: AdmitRun, scheduler: Scheduler) -> None:
    state = scheduler.state
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
    if scheduler.placer is not None:
        _print_bindings(run, scheduler)


def _print_bindings(run: AdmitRun, scheduler: Scheduler) -> None:
    assert scheduler.placer is not None
    table = Table(title="Pods bound to nodes", title_justify="left")
    for column in ("workload", "pods", "nodes (pods, GPUs)"):
        table.add_column(column, overflow="fold")
    for key in sorted(set(run.admitted) | set(scheduler.placer.placements)):
        placement = scheduler.placer.placements.get(key)
        if placement is None:
            why = scheduler.unplaced.get(key)
            table.add_row(key, "-", f"not bound: {why.message}" if why else "not bound")
            continue
        per_node: dict[str, list[int]] = {}
        for binding in placement.bindings:
            per_node.setdefault(binding.node, []).extend(binding.gpus)
        counts = {n: sum(1 for b in placement.bindings if b.node == n) for n in per_node}
        text = ", ".join(
            f"{n} ({counts[n]}" + (f", GPU {','.join(map(str, sorted(g)))})" if g else ")")
            for n, g in sorted(per_node.items())
        )
        table.add_row(key, str(len(placement.bindings)), text)
    out.print(table)


def _usage_table(state: ClusterState) -> Table:
    table = Table(title="Quota usage after admission (GPUs and GPU slices)", title_justify="left")
    for column in ("cluster queue", "flavor", "resource", "nominal", "used", "borrowed"):
        table.add_column(column, justify="right" if column in ("nominal", "used", "borrowed") else "left")
    for name, node in sorted(state.tree.cluster_queues.items()):
        for (flavor, resource), quota in sorted(node.quotas.items()):
            if not is_device_resource(resource):
                continue
            used = node.usage.get((flavor, resource), 0)
            borrowed = max(0, used - quota.nominal)
            table.add_row(
                name,
                flavor,
                resource,
                format_amount(resource, quota.nominal),
                format_amount(resource, used),
                format_amount(resource, borrowed) if borrowed else "",
            )
    return table


if __name__ == "__main__":  # pragma: no cover
    app()
