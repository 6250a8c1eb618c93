"""The live control plane as a forecast :class:`~gpuq.snapshot.cluster.Snapshot`.

A forecast must not hold the loop still while it simulates, so building one has two halves:

1. :func:`capture`, under the loop's step lock: a copy of what the loop holds in memory (the
   workloads holding quota with their pods' bindings and start times, the queued ones, the
   configuration, the nodes); no store read, no simulation;
2. :func:`build_snapshot`, anywhere: that copy plus each workload's :class:`Profile` (read from
   its manifest once and kept by :class:`ProfileBook`, since a stored manifest never changes).

:class:`History` feeds the runtime estimator with the workloads that succeeded since its last
read, so history is never read twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, tuple_

from gpuq.api import convert, kueue
from gpuq.api.sources_derived import live_workload
from gpuq.core.model import ClusterConfig, Workload
from gpuq.core.nodes import Node
from gpuq.core.placement.engine import PodBinding
from gpuq.run.loop import ControlLoop
from gpuq.run.pods import Tracked, pod_key
from gpuq.run.store import Store, WorkloadRecord
from gpuq.run.store.convert import workload_record
from gpuq.run.store.models import WorkloadRow
from gpuq.snapshot.cluster import PendingWorkload, RunningWorkload, Snapshot
from gpuq.snapshot.manifests import declared, total_gpus
from gpuq.snapshot.runtimes import Finished, Profile

DEADLINE_KINDS = frozenset({"Job", "RayJob"})  # the sources whose activeDeadlineSeconds the loop enforces
NO_PRIORITIES = convert.PriorityTable({}, {}, 0)  # sizes only: priorities do not matter to a profile


@dataclass(frozen=True, slots=True)
class LiveWorkload:
    """One workload as the loop holds it: ``state`` is Pending, Admitted (pods not running) or Running."""

    record_id: int
    workload: Workload
    state: str
    started_at: float | None = None
    bindings: tuple[PodBinding, ...] = ()


@dataclass(frozen=True)
class LoopView:
    """The loop between two steps, copied out so a forecast can be built without the step lock."""

    at: float
    config: ClusterConfig
    nodes: tuple[Node, ...]
    policy: str
    workloads: tuple[LiveWorkload, ...]

    def states(self) -> frozenset[tuple[str, str]]:
        """(workload key, state) pairs: what a forecast depends on besides the configuration and nodes."""
        return frozenset((w.workload.key, w.state) for w in self.workloads)


@dataclass(frozen=True, slots=True)
class ProfiledManifest:
    """A workload's profile and, when part of its manifest was ignored, why (shown with the ETA)."""

    profile: Profile
    note: str = ""


def capture(loop: ControlLoop | None, now: float) -> LoopView | None:
    """What ``loop`` holds (call between steps); None without a loop or a configuration."""
    if loop is None or loop.scheduler is None or loop.config is None:
        return None
    by_key = loop.tracked
    workloads: list[LiveWorkload] = []
    for tracked in by_key.values():
        if tracked.evicting:  # stopping: requeued as soon as its pods are gone
            requeued = dataclasses.replace(tracked.workload, admission=None, quota_reserved_time=None)
            workloads.append(LiveWorkload(tracked.record_id, requeued, "Pending"))
        elif tracked.state in ("Admitted", "Running") and tracked.workload.admission is not None:
            running = tracked.state == "Running"
            started = (tracked.started_at or now) if running else None
            workloads.append(
                LiveWorkload(tracked.record_id, tracked.workload, tracked.state, started, _bindings(tracked))
            )
    for queue in loop.scheduler.queues.values():
        for workload in queue.pending():
            queued = by_key.get(workload.key)
            if queued is not None and not queued.evicting:
                workloads.append(LiveWorkload(queued.record_id, workload, "Pending"))
    return LoopView(now, loop.config, tuple(loop.nodes), loop.policy, tuple(workloads))


def _bindings(tracked: Tracked) -> tuple[PodBinding, ...]:
    """Where the pods run, as the loop's ``_resubmit`` restores them."""
    return tuple(
        PodBinding(pod_key(tracked, pod), pod.node, tuple(int(d) for d in pod.devices if d.isdigit()))
        for pod in tracked.pods.values()
    )


def build_snapshot(
    view: LoopView, profiles: Mapping[int, ProfiledManifest], *, extra: Iterable[PendingWorkload] = ()
) -> Snapshot:
    """The forecast input: ``view`` with each workload's profile (by store id; a missing one gets a bare
    profile), and ``extra`` pending workloads (a dry run's)."""
    running: list[RunningWorkload] = []
    pending: list[PendingWorkload] = []
    for live in view.workloads:
        profile = _profile(live, profiles)
        if live.state == "Pending":
            pending.append(PendingWorkload(live.workload, profile))
        else:
            running.append(RunningWorkload(live.workload, profile, live.started_at, live.bindings))
    pending.extend(extra)
    return Snapshot(
        view.at, view.config, view.nodes, running=tuple(running), pending=tuple(pending), policy=view.policy
    )


def _profile(live: LiveWorkload, profiles: Mapping[int, ProfiledManifest]) -> Profile:
    known = profiles.get(live.record_id)
    if known is not None:
        return known.profile
    workload = live.workload
    return Profile(workload.namespace, workload.queue_name, gpus=total_gpus(workload))


# -- profiles --------------------------------------------------------------------------------------------


def manifest_profile(namespace: str, queue: str, manifest: Mapping[str, Any]) -> ProfiledManifest:
    """The profile a manifest declares (user, size, expected duration, deadline, as ``gpuq admit --eta``
    reads them); a value that cannot be read is left out and noted, never raised."""
    try:
        model = kueue.Workload.model_validate(live_workload(manifest))
        workload = convert.workload(model, NO_PRIORITIES)
    except Exception as error:  # the loop refuses such a workload; its profile is only a name
        return ProfiledManifest(Profile(namespace, queue), f"manifest unreadable: {error}")
    facts = declared(model, _deadline(manifest))
    profile = Profile(namespace, queue, facts.user, total_gpus(workload), facts.expected_s, facts.deadline_s)
    return ProfiledManifest(profile, facts.problem)


def _deadline(manifest: Mapping[str, Any]) -> float | None:
    spec = manifest.get("spec")
    if manifest.get("kind") not in DEADLINE_KINDS or not isinstance(spec, Mapping):
        return None
    deadline = spec.get("activeDeadlineSeconds")
    if isinstance(deadline, bool) or not isinstance(deadline, int | float) or deadline <= 0:
        return None
    return float(deadline)


class ProfileBook:
    """Profiles by store id, each read from its manifest once (a stored manifest never changes)."""

    def __init__(self) -> None:
        self._profiles: dict[int, ProfiledManifest] = {}

    def profiles(self, store: Store, view: LoopView) -> dict[int, ProfiledManifest]:
        """The profiles of ``view``'s workloads, reading the manifests of the new ones in one query;
        forgets the workloads no longer in the view."""
        wanted = {w.record_id for w in view.workloads}
        missing = sorted(wanted - self._profiles.keys())
        if missing:
            for record in _records(store, missing):
                self._profiles[record.id] = manifest_profile(
                    record.namespace, record.queue_name, record.manifest
                )
        self._profiles = {i: p for i, p in self._profiles.items() if i in wanted}
        return dict(self._profiles)


def _records(store: Store, ids: list[int]) -> list[WorkloadRecord]:
    with store.transaction() as session:
        rows = session.scalars(select(WorkloadRow).where(WorkloadRow.id.in_(ids)))
        return [workload_record(row) for row in rows]


# -- history ---------------------------------------------------------------------------------------------

HISTORY_PAGE = 2000
"""Finished workloads one read of the history holds at once."""


class History:
    """Succeeded workloads as :class:`Finished` runs, each read once: every read asks only for rows
    changed after the newest version seen (the store commits versions in order, and a finished
    workload's row is not changed again), a page of :data:`HISTORY_PAGE` rows at a time and only the
    columns a run needs, so that neither the first read of a long history nor what is kept grows
    with the number of finished workloads (the estimator keeps a bounded window per profile)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.version = 0
        self._last_id = 0  # with ``version``: the position read up to, (version, id) ordered

    def read_new(self) -> list[Finished]:
        runs: list[Finished] = []
        while True:
            query = (
                select(
                    WorkloadRow.id,
                    WorkloadRow.resource_version,
                    WorkloadRow.namespace,
                    WorkloadRow.queue_name,
                    WorkloadRow.manifest,
                    WorkloadRow.started_at,
                    WorkloadRow.finished_at,
                )
                .where(
                    WorkloadRow.state == "Succeeded",
                    tuple_(WorkloadRow.resource_version, WorkloadRow.id)
                    > tuple_(self.version, self._last_id),
                )
                .order_by(WorkloadRow.resource_version, WorkloadRow.id)
                .limit(HISTORY_PAGE)
            )
            with self.store.reading() as connection:
                rows = list(connection.execute(query))
            for row in rows:
                self.version, self._last_id = row.resource_version, row.id
                if row.started_at is None or row.finished_at is None:
                    continue
                profile = manifest_profile(row.namespace, row.queue_name, row.manifest).profile
                runs.append(Finished(profile, max(row.finished_at - row.started_at, 0.0)))
            if len(rows) < HISTORY_PAGE:
                return runs
