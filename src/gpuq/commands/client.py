"""The client verbs of ``gpuq``: apply, get, describe, logs and delete against a running ``gpuq serve``.

Address and token come from ``--server`` / ``--token``, else ``GPUQ_SERVER`` /
``GPUQ_TOKEN``, else the context file ``gpuq serve`` wrote. Any refusal or connection
problem prints one clear line (and a refused apply every diagnostic) and exits 1.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpuq.commands.render import OUTPUT_HELP, OutputFormat, write_document

if TYPE_CHECKING:
    from types import ModuleType

    from gpuq.server import tables
    from gpuq.server.client import ApiClient

out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


ServerOption = Annotated[str | None, typer.Option("--server", help="Server URL (default: the context file).")]
TokenOption = Annotated[str | None, typer.Option("--token", help="Bearer token (default: the context file).")]
NamespaceOption = Annotated[str | None, typer.Option("--namespace", "-n", help="Namespace.")]
OutputOption = Annotated[OutputFormat, typer.Option("--output", "-o", help=OUTPUT_HELP)]
SnapshotOption = Annotated[
    list[str] | None,
    typer.Option("--filename", "-f", help="Read these manifests (a snapshot) instead of asking a server."),
]
AdmitOption = Annotated[
    bool, typer.Option("--admit", help="With -f: run the scheduling cycles first, as gpuq admit does.")
]
PolicyOption = Annotated[str, typer.Option("--policy", help="With -f --admit: placement scoring policy.")]
DEFAULT_CHUNK = 500
"""Items per page ``get`` reads a list in (kubectl's ``--chunk-size`` default)."""
FilesOption = Annotated[
    list[str], typer.Option("--filename", "-f", help="Manifest file, directory (recursive) or - for stdin.")
]


def _tables() -> ModuleType:
    """The table shapes, imported when a verb prints (they reach the engine's state names)."""
    from gpuq.server import tables

    return tables


@contextmanager
def connect(server: str | None, token: str | None, *, offline: bool = False) -> Iterator[ApiClient]:
    """A client for the resolved server; a :class:`ClientError` becomes its message and exit code 1.
    ``offline``: the verb also reads manifests with ``-f``, and an unreachable server says so."""
    from gpuq.server.client import ApiClient, ClientError
    from gpuq.server.context import resolve

    address, bearer = resolve(server, token)
    try:
        with ApiClient(address, bearer) as client:
            yield client
    except ClientError as error:
        for diagnostic in error.diagnostics:
            err.print(str(diagnostic.get("text", diagnostic)), highlight=False, markup=False, soft_wrap=True)
        hint = "; or give -f PATH to read manifests offline" if offline and error.status == 0 else ""
        err.print(f"error: {error}{hint}", style="red", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(1) from None


def _table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def _texts(files: list[str]) -> Iterator[tuple[str, str]]:
    from gpuq.api.loader import STDIN, expand_path

    for path in files:
        if path == "-":
            yield STDIN, sys.stdin.read()
            continue
        for file in expand_path(path):
            try:
                with open(file, encoding="utf-8") as handle:
                    yield file, handle.read()
            except (OSError, UnicodeDecodeError) as error:
                err.print(f"error: cannot read {file}: {error}", style="red", highlight=False, markup=False)
                raise typer.Exit(1) from error


# -- apply / delete --------------------------------------------------------------------------------------


def apply(
    files: FilesOption,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Validate on the server; change nothing.")
    ] = False,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Create or update objects and submit workloads; each file is applied all or nothing."""
    from gpuq.server.client import ClientError

    with connect(server, token) as client:
        for path, text in _texts(files):
            try:
                answer = client.apply(text, dry_run=dry_run)
            except ClientError as error:
                for diagnostic in error.diagnostics:
                    diagnostic["text"] = str(diagnostic.get("text", "")).replace("<request>", path, 1)
                error.message = f"{path}: {error.message}"
                raise
            for warning in answer.get("warnings", []):
                line = str(warning.get("text", "")).replace("<request>", path, 1)
                err.print(line, style="yellow", highlight=False, markup=False, soft_wrap=True)
            suffix = " (dry run)" if dry_run else ""
            for result in answer["results"]:
                out.print(
                    f"{result['kind'].lower()}/{result['name']} {result['action']}{suffix}", highlight=False
                )


def submit(
    files: FilesOption,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Submit nothing: say when the workload would start if submitted now."),
    ] = False,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Submit workloads (as apply does); with --dry-run, forecast when each would start instead."""
    if not dry_run:
        apply(files, server=server, token=token)
        return
    from gpuq.server.client import ClientError

    with connect(server, token) as client:
        for path, text in _texts(files):
            try:
                answer = client.dry_run_forecast(text)
            except ClientError as error:
                for diagnostic in error.diagnostics:
                    diagnostic["text"] = str(diagnostic.get("text", "")).replace("<request>", path, 1)
                error.message = f"{path}: {error.message}"
                raise
            for warning in answer.get("warnings", []):
                line = str(warning.get("text", "")).replace("<request>", path, 1)
                err.print(line, style="yellow", highlight=False, markup=False, soft_wrap=True)
            out.print(dry_run_text(answer), highlight=False, markup=False, soft_wrap=True)


def dry_run_text(answer: dict[str, Any]) -> str:
    """``team-a/train would start in 12m at 14:05:00 (8m–25m)``, then its admission, end and runtime."""
    name = f"{answer['namespace']}/{answer['name']}"
    eta = answer.get("eta")
    if not eta:
        return f"{name}: no forecast (dry run: nothing was submitted)"
    pairs = dict(_tables().forecast_summary({"state": "Pending", "eta": eta}))
    lines = [f"{name} would start {pairs['Start']} (UTC; dry run: nothing was submitted)"]
    lines += [f"  {label.lower() + ':':<11}{pairs[label]}" for label in ("Admission", "End", "Runtime")]
    return "\n".join(lines)


def delete(
    kind: Annotated[
        str | None, typer.Argument(help="workload, clusterqueue, localqueue, resourceflavor...")
    ] = None,
    name: Annotated[str | None, typer.Argument(help="Name.")] = None,
    namespace: NamespaceOption = None,
    files: Annotated[
        list[str] | None, typer.Option("--filename", "-f", help="Delete what these manifests describe.")
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Delete a workload (its running pods are stopped) or an object, by name or by manifest."""
    from gpuq.api.loader import parse_documents
    from gpuq.server.kinds import document_key, object_path, resolve_kind

    targets: list[tuple[str, str, str]] = []
    if files:
        for path, text in _texts(files):
            parsed, problems = parse_documents(path, text)  # aliases bounded as everywhere else
            if problems:
                err.print(f"error: {problems[0]}", style="red", highlight=False, markup=False)
                raise typer.Exit(1)
            for document in (d.data for d in parsed):
                key = document_key(document)
                if key is None or (resolved := resolve_kind(key[0])) is None:
                    err.print(f"error: {path}: cannot delete {document!r:.80}", style="red", highlight=False)
                    raise typer.Exit(1)
                targets.append((resolved, key[1], key[2]))
    elif kind and name:
        resolved = resolve_kind(kind)
        if resolved is None:
            err.print(f"error: unknown kind {kind!r}", style="red", highlight=False, markup=False)
            raise typer.Exit(1)
        targets.append((resolved, namespace or "default", name))
    else:
        err.print("error: give KIND NAME or -f FILE", style="red", highlight=False)
        raise typer.Exit(1)
    with connect(server, token) as client:
        for target_kind, target_namespace, target_name in targets:
            client.delete(object_path(target_kind, target_name, target_namespace))
            out.print(f"{target_kind.lower()}/{target_name} deleted", highlight=False)


# -- get, describe, logs --------------------------------------------------------------------------------


def get_workloads(
    namespace: NamespaceOption = None,
    state: Annotated[str | None, typer.Option("--state", help="Only workloads in this state.")] = None,
    output: OutputOption = OutputFormat.TABLE,
    chunk_size: Annotated[
        int, typer.Option("--chunk-size", min=0, help="Read the list in pages of this many (0: at once).")
    ] = DEFAULT_CHUNK,
    files: SnapshotOption = None,
    admit: AdmitOption = False,
    policy: PolicyOption = "binpack",
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Workloads: state, queues, priority, age, and why the pending ones wait (of a server, or of the
    manifests given with -f)."""
    if files:
        from gpuq.commands import offline

        items = offline.workload_items(offline.snapshot(files, admit=admit, policy=policy), namespace)
        items = [w for w in items if state is None or w["state"] == state]
    else:
        path = f"/namespaces/{namespace}/workloads" if namespace else "/workloads"
        with connect(server, token, offline=True) as client:
            items = client.get_all(path, chunk_size or None, state=state)
    tables = _tables()
    wide = (tables.WORKLOAD_WIDE_COLUMNS, tables.workload_wide_rows)
    _show(items, output, "Workloads", tables.WORKLOAD_COLUMNS, tables.workload_rows, wide)


def get_clusterqueues(
    output: OutputOption = OutputFormat.TABLE,
    files: SnapshotOption = None,
    admit: AdmitOption = False,
    policy: PolicyOption = "binpack",
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """ClusterQueues with their cohort, nominal quotas and workload counts (of a server, or of -f)."""
    if files:
        from gpuq.commands import offline

        items = offline.cluster_queue_items(offline.snapshot(files, admit=admit, policy=policy))
    else:
        with connect(server, token, offline=True) as client:
            items = client.get("/clusterqueues")["items"]
    _show(items, output, "ClusterQueues", _tables().CLUSTER_QUEUE_COLUMNS, _tables().cluster_queue_rows)


def get_localqueues(
    namespace: NamespaceOption = None,
    output: OutputOption = OutputFormat.TABLE,
    files: SnapshotOption = None,
    admit: AdmitOption = False,
    policy: PolicyOption = "binpack",
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """LocalQueues with their ClusterQueue and workload counts (of a server, or of -f)."""
    if files:
        from gpuq.commands import offline

        items = offline.local_queue_items(offline.snapshot(files, admit=admit, policy=policy), namespace)
    else:
        path = f"/namespaces/{namespace}/localqueues" if namespace else "/localqueues"
        with connect(server, token, offline=True) as client:
            items = client.get(path)["items"]
    _show(items, output, "LocalQueues", _tables().LOCAL_QUEUE_COLUMNS, _tables().local_queue_rows)


SERVICE_COLUMNS: tuple[str, ...] = ("NAMESPACE", "NAME", "TRAFFIC", "AUTOSCALER", "MIN", "MAX", "DESIRED")
SERVICE_COLUMNS += ("READY", "PENDING", "REQUESTS", "IN FLIGHT", "WAITING", "MEAN LATENCY")


def service_rows(items: list[dict[str, Any]]) -> list[tables.Row]:
    rows: list[tables.Row] = []
    for s in items:
        counts, requests = s["replicas"], s["requests"]
        latency = requests.get("meanLatencySeconds")
        rows.append(
            (
                s["namespace"],
                s["name"],
                f"{s['trafficPercent']}% of {s['service'].split('/', 1)[1]}",
                s.get("autoscaler") or "-",
                str(s["minReplicas"]),
                str(s["maxReplicas"]),
                str(s["desiredReplicas"]),
                str(counts["Ready"]),
                str(counts["Pending"] + counts["Admitted"] + counts["Starting"]),
                str(requests["total"]),
                str(requests["inFlight"]),
                str(requests["waiting"]),
                f"{latency * 1000:.0f} ms" if latency is not None else "-",
            )
        )
    return rows


def get_services(
    namespace: NamespaceOption = None,
    output: OutputOption = OutputFormat.TABLE,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Live services (a canary revision is its own row): replicas, traffic and the router's counters."""
    path = f"/namespaces/{namespace}/services" if namespace else "/services"
    with connect(server, token) as client:
        body = client.get(path)
    if not body.get("available", True):
        err.print(f"no services here: {body.get('reason')}", style="yellow", highlight=False)
    _show(body["items"], output, "Services", SERVICE_COLUMNS, service_rows)


def get_pending(
    cluster_queue: Annotated[
        str | None, typer.Option("--clusterqueue", help="A ClusterQueue's queue.")
    ] = None,
    local_queue: Annotated[
        str | None, typer.Option("--localqueue", help="A LocalQueue's queue (with -n).")
    ] = None,
    namespace: NamespaceOption = None,
    output: OutputOption = OutputFormat.TABLE,
    files: SnapshotOption = None,
    admit: AdmitOption = False,
    policy: PolicyOption = "binpack",
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Pending workloads of a queue in admission order, with their positions and why they wait (of a
    server, or of -f)."""
    if bool(cluster_queue) == bool(local_queue):
        err.print("error: give --clusterqueue NAME or --localqueue NAME -n NS", style="red", highlight=False)
        raise typer.Exit(1)
    if files:
        from gpuq.commands import offline

        taken = offline.snapshot(files, admit=admit, policy=policy)
        local = (namespace or "default", local_queue) if local_queue else None
        items = offline.pending_items(taken, cluster_queue=cluster_queue, local_queue=local)
        _show(items, output, "Pending workloads", _tables().PENDING_COLUMNS, _tables().pending_rows)
        return
    path = (
        f"/clusterqueues/{cluster_queue}/pendingworkloads"
        if cluster_queue
        else f"/namespaces/{namespace or 'default'}/localqueues/{local_queue}/pendingworkloads"
    )
    with connect(server, token, offline=True) as client:
        items = client.get(path)["items"]
    _show(items, output, "Pending workloads", _tables().PENDING_COLUMNS, _tables().pending_rows)


def get_nodes(output: str = "table", server: str | None = None, token: str | None = None) -> None:
    """``gpuq get nodes`` without ``-f``: the server's live nodes and the devices in use."""
    with connect(server, token, offline=True) as client:
        items = client.get("/nodes")["items"]
    _show(items, OutputFormat(output), "Nodes", _tables().NODE_COLUMNS, _tables().node_rows)


def describe_workload(
    name: Annotated[str, typer.Argument(help="Workload name (the source's metadata.name).")],
    namespace: NamespaceOption = None,
    output: OutputOption = OutputFormat.TABLE,
    files: SnapshotOption = None,
    admit: AdmitOption = False,
    policy: PolicyOption = "binpack",
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """One workload: state, queues, why it waits, its pods (node, GPUs, exit code), condition history and
    events (admitted, started, preempted, evicted, requeued, restarted, finished). With -f, the
    workload of the manifests (by its name or its source's), with no pods or history: nothing ran."""
    if files:
        from gpuq.commands import offline

        taken = offline.snapshot(files, admit=admit, policy=policy)
        found = offline.find_workload(taken, namespace or "default", name)
        if found is None:
            err.print(
                f"error: no workload {name!r} in namespace {namespace or 'default'!r} of the manifests",
                style="red",
                highlight=False,
                markup=False,
            )
            raise typer.Exit(1)
        workload, events = {**found, "pods": [], "conditions": []}, []
    else:
        with connect(server, token, offline=True) as client:
            workload = client.get(f"/namespaces/{namespace or 'default'}/workloads/{name}")
            query = {"namespace": namespace or "default", "kind": "Workload", "name": name}
            events = client.get("/events", **query)["items"]
    if not output.is_table:
        write_document({**workload, "events": events}, output)
        return
    tables = _tables()
    for label, value in tables.workload_summary(workload):
        out.print(f"{label + ':':<14}{value}", highlight=False, markup=False, soft_wrap=True)
    if files:
        out.print("(a snapshot: nothing ran, so no pods, conditions or events)", highlight=False)
        return
    forecast = tables.forecast_summary(workload)
    if forecast:
        out.print("Forecast:", highlight=False)
        for label, value in forecast:
            out.print(f"  {label + ':':<12}{value}", highlight=False, markup=False, soft_wrap=True)
    out.print(_table("Pods", tables.POD_COLUMNS, tables.pod_rows(workload["pods"])))
    out.print(_table("Conditions", tables.CONDITION_COLUMNS, tables.condition_rows(workload["conditions"])))
    out.print(_table("Events", tables.EVENT_COLUMNS, tables.event_rows(events)))


def logs(
    name: Annotated[str, typer.Argument(help="Workload name.")],
    namespace: NamespaceOption = None,
    pod: Annotated[str | None, typer.Option("--pod", help="Only this pod (main-0, worker-1...).")] = None,
    tail: Annotated[
        int | None, typer.Option("--tail", min=0, help="Only the last N lines of each pod.")
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """The stdout and stderr of a workload's pods."""
    with connect(server, token) as client:
        text = client.text(f"/namespaces/{namespace or 'default'}/workloads/{name}/logs", pod=pod, tail=tail)
    sys.stdout.write(text if not text or text.endswith("\n") else text + "\n")


def _show(
    items: list[dict[str, Any]],
    output: OutputFormat,
    title: str,
    columns: tuple[str, ...],
    rows: Callable[[list[dict[str, Any]]], list[tables.Row]],
    wide: tuple[tuple[str, ...], Callable[[list[dict[str, Any]]], list[tables.Row]]] | None = None,
) -> None:
    """The items as a table (``-o wide``: the verb's wider table where it has one) or a document."""
    if not output.is_table:
        write_document(items, output)
    elif output == OutputFormat.WIDE and wide is not None:
        out.print(_table(title, wide[0], wide[1](items)))
    else:
        out.print(_table(title, columns, rows(items)))
