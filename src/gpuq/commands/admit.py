"""``gpuq admit``: Kueue scheduling cycles on the snapshot that manifests describe, and the decisions.

Also the snapshot loading that ``gpuq get nodes`` and ``gpuq describe node`` share with it: the
manifests are loaded (every diagnostic printed on an error), a :class:`Scheduler` (with a
:class:`Placer` when there are nodes) gets every workload, and ``--admit`` runs the cycles first.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import typer
from rich.table import Table

from gpuq.api.kueue import parse_duration
from gpuq.api.loader import LoadResult, load
from gpuq.commands.eta import EtaError, eta_document, forecast_file, print_etas
from gpuq.commands.render import OutputFormat, error, note, out, print_diagnostics, warning, write_document
from gpuq.core.admission import Scheduler
from gpuq.core.cycles import AdmitRun, StopKind, StopReason, run_cycles
from gpuq.core.nodes import HOSTNAME_LABEL, is_device_resource
from gpuq.core.placement.engine import Placer, WorkloadPlacement
from gpuq.core.placement.scoring import inputs_for
from gpuq.core.quantity import format_amount
from gpuq.core.state import ClusterState
from gpuq.core.topology import TopologyAssignment
from gpuq.forecast.forecast import Forecast, ForecastSettings
from gpuq.sim.traces.model import TraceError


def admit_snapshot(
    files: list[str],
    *,
    cycles: int | None,
    output: OutputFormat,
    now: float | None,
    policy: str,
    eta: bool,
    history: str | None,
    expected_arrivals: str | None,
) -> None:
    """Run the cycles on the snapshot ``files`` describe and print the decisions (and, with
    ``eta``, the forecast) as tables or as one ``output`` document."""
    result = load_valid(files)
    scheduler = scheduler_for(result, policy)
    assert result.config is not None
    tas = sorted(name for name, flavor in result.config.flavors.items() if flavor.topology_name)
    if tas and not result.nodes:
        warning(
            f"flavor(s) {', '.join(tas)} are topology-aware but no nodes were given "
            "(NodePools or Nodes): topology is not checked, pod sets are admitted on quota alone"
        )
    at = snapshot_time(result) if now is None else now
    run = run_cycles(scheduler, max_cycles=cycles, now=at)
    forecast = _forecast(result, at, policy, history, expected_arrivals) if eta else None
    if not output.is_table:
        document = admit_document(run, scheduler)
        if forecast is not None:
            document["forecast"] = eta_document(*forecast)
        write_document(document, output)
    else:
        print_admit_tables(run, scheduler)
        if forecast is not None:
            print_etas(out, *forecast)
    if run.stop is not None and (message := stop_warning(run.stop)):
        warning(message)


CHURNING_SHOWN = 10
COHORTS_SHOWN = 3


def stop_warning(stop: StopReason) -> str:
    """The warning ``gpuq admit`` prints when the run stopped without settling (a period, or no
    progress): why, the workloads that keep changing hands and the policies that let them."""
    if stop.kind == StopKind.PERIODIC:
        head = (
            f"stopped after {stop.cycles} cycles: the same preemptions repeat every {stop.period} "
            "cycles (preemptor flapping)"
        )
    elif stop.kind == StopKind.NO_PROGRESS:
        head = (
            f"stopped after {stop.cycles} cycles: no progress in the last {stop.window} cycles "
            f"(no workload tried or admitted for the first time since cycle {stop.last_progress}), "
            "workloads only change hands"
        )
    else:
        return ""
    churning = stop.churning
    names = ", ".join(churning[:CHURNING_SHOWN])
    if len(churning) > CHURNING_SHOWN:
        names += f" and {len(churning) - CHURNING_SHOWN} more"
    why = "; ".join(stop.why[:COHORTS_SHOWN])
    if len(stop.why) > COHORTS_SHOWN:
        why += f"; and {len(stop.why) - COHORTS_SHOWN} more cohort(s) (-o json lists them all)"
    return (
        f"{head}; {len(churning)} workload(s) keep changing hands: {names}"
        + (f". {why}" if why else "")
        + ". See docs/kueue-parity.md; the decisions shown are the latest of each workload"
    )


def stopped_document(stop: StopReason) -> dict[str, Any] | None:
    """``gpuq admit -o json``'s ``stopped`` field: only for a run that ended on a period or on no
    progress (a quiet run, or one cut at ``--cycles``, has none)."""
    if stop.kind not in (StopKind.PERIODIC, StopKind.NO_PROGRESS):
        return None
    document: dict[str, Any] = {"reason": str(stop.kind), "cycles": stop.cycles}
    if stop.kind == StopKind.PERIODIC:
        document["period"] = stop.period
    else:
        document["window"] = stop.window
        document["lastProgress"] = stop.last_progress
    document["churning"] = list(stop.churning)
    document["why"] = "; ".join(stop.why)
    return document


def _forecast(
    result: LoadResult, now: float, policy: str, history: str | None, arrivals: str | None
) -> tuple[Forecast, dict[str, str]]:
    try:
        window = parse_duration(arrivals) if arrivals is not None else None
        if window is not None and window <= 0:
            raise ValueError(f"{arrivals!r} is not a positive duration")
    except ValueError as problem:
        error(f"--expected-arrivals: {problem}")
        raise typer.Exit(2) from problem
    try:
        settings = ForecastSettings(arrivals_window_s=window)
        return forecast_file(result, now, policy=policy, history=history, settings=settings)
    except (EtaError, TraceError) as problem:
        error(str(problem))
        raise typer.Exit(2) from problem


def load_files(files: list[str]) -> LoadResult:
    """The manifests of ``files`` (``-`` reads stdin)."""
    return load(files, stdin=sys.stdin)


def load_valid(files: list[str]) -> LoadResult:
    """Load, or print every diagnostic and exit 1 when any is an error."""
    result = load_files(files)
    if result.errors:
        print_diagnostics(result.diagnostics)
        raise typer.Exit(1)
    for line in result.foreign_notes:
        note(line)
    assert result.config is not None
    return result


def scheduler_for(result: LoadResult, policy: str) -> Scheduler:
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
        except ValueError as problem:
            error(str(problem))
            raise typer.Exit(2) from problem
    scheduler = Scheduler(config, placer)
    for workload in result.workloads:
        scheduler.submit(workload)
    return scheduler


def placer_after(files: list[str], admit_first: bool, policy: str) -> Placer:
    """The placer of the snapshot's nodes, after the scheduling cycles when ``admit_first``."""
    result = load_valid(files)
    if not result.nodes:
        error("no nodes: give NodePools or v1 Nodes with -f")
        raise typer.Exit(1)
    scheduler = scheduler_for(result, policy)
    if admit_first:
        run_cycles(scheduler, now=snapshot_time(result))
    assert scheduler.placer is not None
    return scheduler.placer


def snapshot_time(result: LoadResult) -> float:
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
    if run.stop is not None and (stopped := stopped_document(run.stop)) is not None:
        document["stopped"] = stopped
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


def print_admit_tables(run: AdmitRun, scheduler: Scheduler) -> None:
    """``gpuq admit``'s tables: admitted, preempted, pending, quota usage and, with nodes, bindings."""
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
