"""A Scenario's initial state: a cluster's workloads at one instant become the simulation's time 0.

``spec.initialState`` names manifests (Kueue Workloads with ``status``, as ``kubectl get
workloads -o yaml`` prints them, or Jobs...). Steps, for one variant's configuration:

1. the state's manifests are loaded together with the configuration (one
   :func:`~gpuq.api.loader.load`: LocalQueues, priority classes and sizes are checked there);
2. every state workload is checked against the configuration (:func:`check`): its admission's
   ClusterQueue exists, each flavor the admission names exists and is one of that
   ClusterQueue's for the resource, a pending workload names a LocalQueue, and none was
   created after ``at``. Errors name the file, line, object and field; nothing runs;
3. ``at`` is the given instant, else the latest timestamp of the state (creations and
   condition transitions); every time becomes relative to it, so ``at`` is time 0;
4. each workload's run time: ``gpuq.dev/expected-duration``, else
   ``spec.maximumExecutionTimeSeconds``, else ``assumeDuration``, else
   :data:`DEFAULT_DURATION_S` (warned);
5. a workload holding quota (``status.admission``) is a
   :class:`~gpuq.sim.simulator.Resident`: it runs since its ``PodsReady`` condition, else since
   its quota reservation (as :func:`gpuq.snapshot.manifests.snapshot_of` reads it), with the
   run time left from 0; one already past its run time finishes at 0 (warned);
6. the others were created before 0: they queue at 0, in their creation order (a finished
   workload, ``Finished`` condition True, is the past and is left out);
7. the trace (:func:`later_arrivals`): with ``traceOrigin``, rows submitted at or before ``at``
   are the past (in the state, or finished) and are not replayed; later rows arrive at
   ``traceOrigin + submit - at``. Without it the trace begins at ``at``: every row arrives at
   its own time. A row naming a state workload is left out: the state holds it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

from gpuq.api import kueue
from gpuq.api.diagnostics import Diagnostic, Manifest
from gpuq.api.loader import LoadResult
from gpuq.core.model import ClusterConfig, Workload
from gpuq.sim.jobs import SimJob
from gpuq.sim.simulator import Resident
from gpuq.sim.traces.model import TraceJob
from gpuq.snapshot.manifests import snapshot_of
from gpuq.snapshot.runtimes import EXPECTED_DURATION, Profile

DEFAULT_DURATION_S = 3600.0
"""Run time of a state workload that declares none, when the Scenario assumes none either."""


@dataclass(frozen=True)
class StateSource:
    """``spec.initialState`` with its paths resolved: ``files`` are manifest files (directories
    expanded); times are seconds since the epoch; ``assume_s`` the run time of undeclared ones."""

    files: tuple[str, ...]
    at_s: float | None = None
    trace_origin_s: float | None = None
    assume_s: float | None = None

    @cached_property
    def resolved(self) -> frozenset[Path]:
        return frozenset(Path(f).resolve() for f in self.files)

    def holds(self, path: str) -> bool:
        """Whether ``path`` is one of the state's files."""
        return Path(path).resolve() in self.resolved


@dataclass(frozen=True)
class InitialState:
    """Time 0 of a simulation: ``residents`` hold quota, ``pending`` queue at 0 (created before 0).

    ``at_s``: the instant time 0 stands for; ``diagnostics``: what was found (errors: nothing
    may run)."""

    at_s: float
    residents: tuple[Resident, ...] = ()
    pending: tuple[SimJob, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "warning")

    @property
    def keys(self) -> frozenset[str]:
        """``namespace/name`` of every state workload."""
        return frozenset([r.job.key for r in self.residents] + [j.key for j in self.pending])


def initial_state(result: LoadResult, source: StateSource) -> InitialState:
    """The state's workloads in ``result`` (the configuration and the state, loaded together) as
    residents and pending jobs at time 0 (steps 2 to 6 of the module's docstring)."""
    assert result.config is not None, "load errors are reported before"
    dumped = state_manifests(result, source)
    at = source.at_s if source.at_s is not None else latest_time(dumped)
    manifests = [m for m in dumped if not _finished(m.model)]  # a finished one is the past
    diagnostics = [d for m in manifests for d in check(m, result.config, at)]
    if any(d.severity == "error" for d in diagnostics):
        return InitialState(at, diagnostics=tuple(diagnostics))
    by_key = {_key(m): m for m in manifests}
    state = dataclasses.replace(result, workloads=tuple(w for w in result.workloads if w.key in by_key))
    snapshot, problems = snapshot_of(state, at)
    for key, problem in sorted(problems.items()):
        diagnostics.append(by_key[key].diagnostic(_ANNOTATION, problem, "warning"))
    residents = []
    for running in snapshot.running:
        manifest = by_key[running.workload.key]
        total_s = _run_time(manifest, running.profile, source.assume_s, diagnostics)
        started = running.started_at if running.started_at is not None else at
        elapsed_s = max(at - started, 0.0)
        if elapsed_s > total_s:
            message = (
                f"has run {elapsed_s:.0f}s, past its {total_s:.0f}s run time: it finishes at time 0 "
                f"(set {EXPECTED_DURATION} to the whole run time)"
            )
            diagnostics.append(manifest.diagnostic(("status", "conditions"), message, "warning"))
        job = SimJob(_relative(running.workload, at), total_s, running.profile.gpus)
        residents.append(Resident(job, max(total_s - elapsed_s, 0.0)))
    pending = [
        SimJob(
            _relative(p.workload, at),
            _run_time(by_key[p.workload.key], p.profile, source.assume_s, diagnostics),
            p.profile.gpus,
        )
        for p in sorted(snapshot.pending, key=lambda p: (p.workload.creation_time, p.workload.key))
    ]
    return InitialState(at, tuple(residents), tuple(pending), tuple(diagnostics))


def state_manifests(result: LoadResult, source: StateSource) -> list[Manifest]:
    """The workload manifests (Workloads, and Jobs... read as Workloads) of the state's files; a
    CronJob's next Job is not one: the CronJob creates its Jobs on its schedule
    (:mod:`gpuq.sim.cron_jobs`)."""
    return [
        m
        for m in result.manifests
        if isinstance(m.model, kueue.Workload) and source.holds(m.path) and m.kind != "CronJob"
    ]


def check(manifest: Manifest, config: ClusterConfig, at_s: float) -> Iterator[Diagnostic]:
    """What makes one state workload impossible to start from (errors), in field order; a pending
    workload no queue routes is a warning: it loads and stays pending, as Kueue leaves it."""
    model: kueue.Workload = manifest.model
    created = model.metadata.creation_timestamp
    if created is not None and created > at_s:
        message = f"created after the initial state's instant ({rfc3339(at_s)}, spec.initialState.at)"
        yield manifest.diagnostic(("metadata", "creationTimestamp"), message)
    admission = model.status.admission
    if admission is None:
        if not model.spec.queue_name:
            message = "pending without a LocalQueue (kueue.x-k8s.io/queue-name): it stays pending"
            yield dataclasses.replace(manifest.diagnostic(("spec", "queueName"), message), severity="warning")
        return
    queue = config.cluster_queues.get(admission.cluster_queue)
    if queue is None:
        known = ", ".join(sorted(config.cluster_queues)) or "none declared"
        message = f"ClusterQueue {admission.cluster_queue!r} not found (known: {known})"
        yield manifest.diagnostic(("status", "admission", "clusterQueue"), message)
        return
    offered = {(r, f.name) for g in queue.resource_groups for f in g.flavors for r in g.covered_resources}
    for index, assignment in enumerate(admission.pod_set_assignments):
        for resource, flavor in assignment.flavors.items():
            where = ("status", "admission", "podSetAssignments", index, "flavors", resource)
            if flavor not in config.flavors:
                known = ", ".join(sorted(config.flavors)) or "none declared"
                yield manifest.diagnostic(where, f"ResourceFlavor {flavor!r} not found (known: {known})")
            elif (resource, flavor) not in offered:
                message = f"ClusterQueue {queue.name!r} has no quota for {resource} in flavor {flavor!r}"
                yield manifest.diagnostic(where, message)


def latest_time(manifests: Sequence[Manifest]) -> float:
    """The newest creation or condition transition among ``manifests`` (0 when none is recorded)."""
    found: list[float] = []
    for manifest in manifests:
        model: kueue.Workload = manifest.model
        if model.metadata.creation_timestamp is not None:
            found.append(model.metadata.creation_timestamp)
        found += [c.last_transition_time for c in model.status.conditions if c.last_transition_time]
    return max(found, default=0.0)


def later_arrivals(
    jobs: Sequence[TraceJob], source: StateSource, at_s: float, state_keys: frozenset[str]
) -> tuple[list[TraceJob], list[str]]:
    """The trace rows that come after the state, on its clock (step 7); and notes on the others."""
    origin = source.trace_origin_s
    shift = origin - at_s if origin is not None else 0.0
    kept: list[TraceJob] = []
    past = held = 0
    for job in jobs:
        submit = job.submit_s + shift
        if origin is not None and submit <= 0:
            past += 1
        elif f"{job.namespace}/{job.name}" in state_keys:
            held += 1
        else:
            kept.append(dataclasses.replace(job, submit_s=submit) if shift else job)
    notes = []
    if past:
        notes.append(
            f"{past} trace row(s) submitted at or before the initial state ({rfc3339(at_s)}) are its "
            "past and are not replayed"
        )
    if held:
        notes.append(
            f"{held} trace row(s) name workloads of the initial state, which holds them: not replayed"
        )
    return kept, notes


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_ANNOTATION = ("metadata", "annotations", EXPECTED_DURATION)


def _run_time(manifest: Manifest, profile: Profile, assume_s: float | None, out: list[Diagnostic]) -> float:
    """Step 4: declared, else the limit, else assumed, else the default (warned)."""
    for seconds in (profile.expected_s, profile.deadline_s, assume_s):
        if seconds is not None and seconds > 0:
            return seconds
    message = (
        f"declares no run time ({EXPECTED_DURATION}, spec.maximumExecutionTimeSeconds): "
        f"{DEFAULT_DURATION_S:.0f}s assumed (or set spec.initialState.assumeDuration)"
    )
    out.append(manifest.diagnostic(("metadata", "annotations"), message, "warning"))
    return DEFAULT_DURATION_S


def _relative(workload: Workload, at_s: float) -> Workload:
    """Times relative to ``at_s``. A requeue backoff still running is not modelled: it queues at 0."""
    reserved = workload.quota_reserved_time
    return dataclasses.replace(
        workload,
        creation_time=workload.creation_time - at_s,
        quota_reserved_time=reserved - at_s if reserved is not None else None,
        requeue_at=None,
        deadline=workload.deadline - at_s if workload.deadline is not None else None,
    )


def _finished(model: kueue.Workload) -> bool:
    return any(c.type == "Finished" and c.status == "True" for c in model.status.conditions)


def _key(manifest: Manifest) -> str:
    meta = manifest.model.metadata
    return f"{meta.namespace or 'default'}/{meta.name}"
