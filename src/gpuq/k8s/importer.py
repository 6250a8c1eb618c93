"""``gpuq import k8s``: a live cluster dump becomes a scenario directory ``gpuq simulate`` runs.

Steps (:func:`import_dump`):

1. read the dump (:mod:`gpuq.k8s.import_dump`): every object typed by gpuq's loader;
   kinds gpuq does not import are skipped with a warning;
2. nodes become NodePools, or stay ``v1`` Nodes where a pool would not be faithful
   (:mod:`gpuq.k8s.import_nodes`);
3. the Kueue objects are kept as written, less status (but for a LocalQueue's Admission Fair
   Sharing usage) and server metadata;
4. Workloads: the pending and admitted ones (with status) form the current state, every one
   with a usable duration a row of the trace (:mod:`gpuq.k8s.import_workloads`); workload sources
   no Workload of the dump stands for join the state, serving objects the configuration
   (:mod:`gpuq.k8s.import_sources`);
5. the Scenario starts from the state (``spec.initialState``: ``state/`` at the dump's time,
   the trace's time 0 at the first creation), so ``gpuq simulate`` begins with the cluster as
   dumped: admitted workloads hold their quota and nodes, pending ones wait;
6. the files are checked with gpuq's loader, as ``gpuq simulate`` and ``gpuq admit`` will read
   them, and the state against the configuration as ``gpuq simulate`` will start from it. Any
   error and nothing is written.

The directory (:data:`LAYOUT`)::

    scenario.yaml        Scenario: config cluster/, initial state state/ (the dump's time), trace.csv
    cluster/nodes.yaml   NodePools, GPUModels and v1 Nodes
    cluster/kueue.yaml   Topologies, ResourceFlavors, Cohorts, ClusterQueues, LocalQueues, priorities...
    cluster/serving.yaml Deployments, StatefulSets, InferenceServices, RayServices, HPAs... as written
    state/workloads.yaml the Workloads pending or admitted at the time of the dump, with status
    state/sources.yaml   Jobs, JobSets, RayJobs... that no Workload of the dump stands for (pending)
    trace.csv            every workload's submission and run time, from the first creation (time 0)
    history.csv          the finished ones only (runtimes for ``gpuq admit --eta --history``)
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from gpuq.api.diagnostics import Diagnostic, sort_diagnostics
from gpuq.api.loader import load_texts
from gpuq.k8s.import_dump import DumpObject, cleaned, read_dump
from gpuq.k8s.import_nodes import NodeImport, PoolSummary, import_nodes
from gpuq.k8s.import_sources import SourceImport, import_sources
from gpuq.k8s.import_workloads import COLUMNS, WorkloadImport, import_workloads, latest_time
from gpuq.sim.initial_state import StateSource, initial_state

SCENARIO = "scenario.yaml"
NODES = "cluster/nodes.yaml"
KUEUE = "cluster/kueue.yaml"
SERVING = "cluster/serving.yaml"
STATE = "state/workloads.yaml"
SOURCES = "state/sources.yaml"
TRACE = "trace.csv"
HISTORY = "history.csv"
LAYOUT = (SCENARIO, NODES, KUEUE, SERVING, STATE, SOURCES, TRACE, HISTORY)
KIND_ORDER = (
    "Namespace",
    "PriorityClass",
    "WorkloadPriorityClass",
    "Topology",
    "ResourceFlavor",
    "AdmissionCheck",
    "ProvisioningRequestConfig",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
)
"""Order of the Kueue file: what is referred to before what refers to it."""


@dataclass(frozen=True)
class ImportSettings:
    name: str = "imported"
    nodes: str = "pools"  # or "nodes": every node stays a v1 Node
    now_s: float | None = None  # default: the newest timestamp of the dump
    assume_s: float | None = None  # run time of workloads declaring none (also initialState.assumeDuration)


@dataclass
class ImportResult:
    """The files to write (relative path -> text) and the findings; ``files`` is empty on any error."""

    files: dict[str, str] = field(default_factory=dict)
    diagnostics: tuple[Diagnostic, ...] = ()
    pools: list[PoolSummary] = field(default_factory=list)
    kept_nodes: list[tuple[str, str]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    sources: int = 0  # workload sources in state/sources.yaml
    serving: int = 0  # serving objects in cluster/serving.yaml
    represented: int = 0  # sources and serving objects another object of the dump stands for
    trace_rows: int = 0
    history_rows: int = 0
    now_s: float = 0.0
    origin_s: float = 0.0

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")


def import_dump(
    texts: Iterable[tuple[str, str]], settings: ImportSettings = ImportSettings()
) -> ImportResult:
    """The scenario files a dump makes (see the module's steps); no files when any error was found."""
    objects, diagnostics = read_dump(texts)
    if any(d.severity == "error" for d in diagnostics):
        return ImportResult(diagnostics=sort_diagnostics(diagnostics))
    by_kind = _by_kind(objects)
    nodes = import_nodes(by_kind.get("Node", []), by_kind.get("Topology", []), settings.nodes)
    now = settings.now_s if settings.now_s is not None else latest_time(objects) or 0.0
    cluster_queues = {o.name for o in by_kind.get("ClusterQueue", [])}
    local_queues = {(o.namespace or "default", o.name) for o in by_kind.get("LocalQueue", [])}
    workloads = import_workloads(
        by_kind.get("Workload", []), cluster_queues, local_queues, now, settings.assume_s
    )
    passed = import_sources(objects, by_kind.get("Workload", []))
    diagnostics += nodes.diagnostics + workloads.diagnostics + passed.diagnostics
    files = _files(settings, now, objects, nodes, workloads, passed)
    if not any(d.severity == "error" for d in diagnostics):
        diagnostics += _validate(files, settings, now)
    result = ImportResult(
        files=files,
        diagnostics=sort_diagnostics(diagnostics),
        pools=nodes.pools,
        kept_nodes=nodes.kept,
        counts=workloads.counts,
        sources=len(passed.sources),
        serving=len(passed.serving),
        represented=passed.represented,
        trace_rows=len(workloads.rows),
        history_rows=len(workloads.history),
        now_s=now,
        origin_s=workloads.origin_s,
    )
    if result.errors:
        result.files = {}
    return result


def write_files(result: ImportResult, directory: Path) -> list[Path]:
    """Write the scenario under ``directory`` (created); returns the paths written."""
    written = []
    for relative, text in result.files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def scenario_name(directory: Path) -> str:
    """A Scenario name from the output directory's name (an RFC 1123 label), else ``imported``."""
    text = re.sub(r"[^a-z0-9-]+", "-", directory.resolve().name.lower()).strip("-")[:63].strip("-")
    return text if text and text[0].isalpha() else "imported"


def _by_kind(objects: Sequence[DumpObject]) -> dict[str, list[DumpObject]]:
    out: dict[str, list[DumpObject]] = {}
    for obj in objects:
        out.setdefault(obj.kind, []).append(obj)
    return out


def _files(
    settings: ImportSettings,
    now: float,
    objects: Sequence[DumpObject],
    nodes: NodeImport,
    wl: WorkloadImport,
    passed: SourceImport,
) -> dict[str, str]:
    rank = {kind: i for i, kind in enumerate(KIND_ORDER)}
    config = sorted((o for o in objects if o.kind in rank), key=lambda o: (rank[o.kind], o.namespace, o.name))
    return {
        SCENARIO: _yaml([_scenario(settings, _rfc3339(wl.origin_s), _rfc3339(now))]),
        NODES: _yaml(nodes.objects),
        KUEUE: _yaml([_config_object(o.data) for o in config]),
        SERVING: _yaml(passed.serving),
        STATE: _yaml(wl.state),
        SOURCES: _yaml(passed.sources),
        TRACE: _csv(wl.rows),
        HISTORY: _csv(wl.history),
    }


def _scenario(settings: ImportSettings, origin: str, now: str) -> dict[str, Any]:
    """The Scenario: the cluster as dumped at time 0 (``now``), then the trace's rows after it."""
    state: dict[str, Any] = {"paths": ["state/"], "at": now, "traceOrigin": origin}
    if settings.assume_s is not None:
        state["assumeDuration"] = f"{settings.assume_s:g}s"
    return {
        "apiVersion": "gpuq.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": settings.name},
        "spec": {
            "description": f"Imported by gpuq import k8s: the cluster at {now}; trace time 0 is {origin}",
            "config": ["cluster/"],
            "workloads": {"trace": {"path": TRACE, "format": "csv"}},
            "initialState": state,
        },
    }


def _rfc3339(seconds: float) -> str:
    """Whole seconds as ``...:SSZ``; a fraction is kept (``--now`` may carry one)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _yaml(documents: Sequence[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False, width=120)


def _csv(rows: Sequence[dict[str, str]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _validate(files: dict[str, str], settings: ImportSettings, now: float) -> list[Diagnostic]:
    """What gpuq's loader finds in the generated manifests, as ``gpuq simulate`` / ``admit`` read them,
    and what the state would fail on as the Scenario's initial state (a ``--now`` before a workload)."""
    texts = [(path, files[path]) for path in (NODES, KUEUE, SERVING, STATE, SOURCES, SCENARIO)]
    loaded = load_texts(texts)
    if loaded.errors:
        return list(loaded.diagnostics)
    state = initial_state(loaded, StateSource((STATE, SOURCES), now, assume_s=settings.assume_s))
    return [*loaded.diagnostics, *state.errors]


def _config_object(data: dict[str, Any]) -> dict[str, Any]:
    """A Kueue object as written, less status, except a LocalQueue's Admission Fair Sharing usage
    (``status.fairSharing.admissionFairSharingStatus``): the replay starts from Kueue's history,
    as a restarted Kueue does."""
    out = cleaned(data)
    status = data.get("status") if data.get("kind") == "LocalQueue" else None
    fair = status.get("fairSharing") if isinstance(status, dict) else None
    afs = fair.get("admissionFairSharingStatus") if isinstance(fair, dict) else None
    if isinstance(afs, dict):
        out["status"] = {"fairSharing": {"admissionFairSharingStatus": afs}}
    return out
