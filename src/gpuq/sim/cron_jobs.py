"""CronJobs in the simulator: the Jobs a CronJob's controller creates, on its schedule.

The loader reads each CronJob into the Workload of the Job it creates next
(:attr:`gpuq.api.loader.LoadResult.cron_jobs`); that Workload is the template of every Job the
CronJob creates: the same pod sets, queue and priority, a new name and creation time each run.
The simulation's time 0 is :data:`origin_s` of the run (the initial state's ``at``, else the
epoch, 1970-01-01T00:00:00Z), so ``0 2 * * *`` fires at 02:00 UTC of each simulated day (02:00
on the wall clock of ``spec.timeZone`` when it names one).

As Kubernetes' CronJob controller (``pkg/controller/cronjob/cronjob_controllerv2.go``) does, at
each scheduled time:

1. ``concurrencyPolicy: Allow`` (the default) creates the Job whatever runs;
2. ``Forbid``, while the previous Job is active, creates none; when that Job ends, the most recent
   missed time is run late, unless ``startingDeadlineSeconds`` has passed since it (then it is
   counted as missed);
3. ``Replace`` deletes the active Job (its workload is withdrawn wherever it is) and creates the new.

Jobs are named ``<cronjob>-<scheduled minutes since the epoch>`` (``getJobName``) and their
Workloads as Kueue names a Job's. A suspended CronJob creates none (the loader warned). Schedules
run until the simulated span's horizon (``spec.settings.horizon``), else the last arrival of the
trace; a run time comes from the Job template's ``gpuq.dev/expected-duration`` annotation (the
Job's ``activeDeadlineSeconds`` ends it Failed when shorter). The timers are the simulation's
own (one event heap, kind ``CRON``), so a CronJob costs nothing between its runs.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuq.api.diagnostics import Diagnostic
from gpuq.api.loader import CronJobSource, LoadResult
from gpuq.api.sources import workload_name
from gpuq.api.sources_wrapped import parse_schedule, time_zone
from gpuq.api.workload_gates import expected_duration
from gpuq.core import cron
from gpuq.core.model import Workload
from gpuq.sim.events import Event, EventKind
from gpuq.sim.jobs import SimJob
from gpuq.snapshot.manifests import total_gpus
from gpuq.snapshot.runtimes import EXPECTED_DURATION

if TYPE_CHECKING:
    from gpuq.sim.simulator import Simulation

POLICIES = ("Allow", "Forbid", "Replace")
DURATION_FIELD = ("spec", "jobTemplate", "metadata", "annotations", EXPECTED_DURATION)


class CronPlanError(ValueError):
    """A CronJob the simulator cannot run; ``diagnostics`` name its file, object and field."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = tuple(diagnostics)
        super().__init__("; ".join(str(d) for d in diagnostics))


@dataclass(frozen=True)
class CronSpec:
    """One CronJob as the simulator runs it."""

    namespace: str
    name: str
    schedule: cron.Schedule
    zone: datetime.tzinfo | None  # spec.timeZone; None: UTC
    policy: str
    starting_deadline_s: float | None
    template: Workload
    duration_s: float
    failed: bool  # activeDeadlineSeconds ends each run before its expected duration


@dataclass(frozen=True)
class CronPlan:
    """The CronJobs of a run: absolute time of simulated 0, and when they stop creating Jobs."""

    crons: tuple[CronSpec, ...]
    origin_s: float
    until_s: float


def cron_plan(
    result: LoadResult, origin_s: float, until_s: float | None, *, ignore_priorities: bool = False
) -> CronPlan | None:
    """The plan of ``result``'s CronJobs, None without any; :class:`CronPlanError` naming the field
    of each CronJob that cannot run (no run time, an unknown policy, no end to the schedule)."""
    sources = [c for c in result.cron_jobs if not _suspended(c)]
    if not sources:
        return None
    by_key = {(w.namespace, w.name): w for w in result.workloads}
    crons, problems = [], []
    for source in sources:
        template = by_key.get(source.workload_key)
        if template is None:  # its Job did not load: the loader reported why
            continue
        spec, problem = _spec(source, template, ignore_priorities)
        if problem is not None:
            problems.append(problem)
        elif spec is not None:
            crons.append(spec)
    if problems:
        raise CronPlanError(problems)
    if until_s is None:
        where = _where(sources[0])
        message = (
            "a CronJob creates Jobs until the simulated span ends: set spec.settings.horizon in the "
            "Scenario (or simulate it with a trace, whose last arrival ends the schedules)"
        )
        raise CronPlanError([Diagnostic(where[0], where[1], "CronJob", where[2], "spec.schedule", message)])
    return CronPlan(tuple(crons), origin_s, until_s) if crons else None


def _suspended(source: CronJobSource) -> bool:
    spec = source.data.get("spec")
    return isinstance(spec, Mapping) and spec.get("suspend") is True


def _where(source: CronJobSource) -> tuple[str, int, str]:
    metadata = source.data.get("metadata") or {}
    return source.path, source.line, str(metadata.get("name") or "")


def _spec(
    source: CronJobSource, template: Workload, ignore_priorities: bool
) -> tuple[CronSpec | None, Diagnostic | None]:
    path, line, name = _where(source)
    data: Mapping[str, Any] = source.data
    spec: Mapping[str, Any] = data.get("spec") or {}

    def problem(field_name: str, message: str) -> tuple[None, Diagnostic]:
        return None, Diagnostic(path, line, "CronJob", name, field_name, message)

    policy = str(spec.get("concurrencyPolicy") or "Allow")
    if policy not in POLICIES:
        return problem("spec.concurrencyPolicy", f"expected one of {', '.join(POLICIES)}, got {policy!r}")
    deadline = spec.get("startingDeadlineSeconds")
    if deadline is not None and (not isinstance(deadline, int) or isinstance(deadline, bool) or deadline < 0):
        return problem("spec.startingDeadlineSeconds", f"expected a non-negative integer, got {deadline!r}")
    job_template: Mapping[str, Any] = spec.get("jobTemplate") or {}
    annotations = (job_template.get("metadata") or {}).get("annotations") or {}
    expected, why = expected_duration(annotations.get(EXPECTED_DURATION))
    field_name = "spec.jobTemplate.metadata.annotations[gpuq.dev/expected-duration]"
    if expected is None or expected <= 0:
        message = why or "is required: the simulator needs each run's duration (for instance 30m, 2h)"
        return problem(field_name, message)
    written = (job_template.get("spec") or {}).get("activeDeadlineSeconds")
    limit = float(written) if isinstance(written, int | float) and not isinstance(written, bool) else None
    failed = limit is not None and 0 < limit < expected
    if ignore_priorities:
        template = dataclasses.replace(template, priority=0)
    metadata = data.get("metadata") or {}
    crons = CronSpec(
        namespace=str(metadata.get("namespace") or "default"),
        name=name,
        schedule=parse_schedule(spec),  # the loader parsed both already: they cannot fail here
        zone=time_zone(spec),
        policy=policy,
        starting_deadline_s=float(deadline) if deadline is not None else None,
        template=template,
        duration_s=limit if limit is not None and failed else expected,
        failed=failed,
    )
    return crons, None


@dataclass
class _Cron:
    spec: CronSpec
    active: str | None = None  # the key of the Job it created last while that Job has not ended
    missed_at: float | None = None  # Forbid: the latest scheduled time skipped while a Job was active
    created: int = 0
    skipped: int = 0


@dataclass
class CronJobs:
    """The simulation's CronJob controller (the ``cron`` hooks of :class:`Simulation`)."""

    plan: CronPlan
    crons: list[_Cron] = field(init=False)
    _active: dict[str, int] = field(init=False, default_factory=dict)  # a Job's key -> its CronJob

    def __post_init__(self) -> None:
        self.crons = [_Cron(spec) for spec in self.plan.crons]

    def template_workloads(self) -> list[Workload]:
        return [c.spec.template for c in self.crons]

    def start(self, sim: Simulation) -> None:
        for index, item in enumerate(self.crons):
            self._schedule_next(index, item, self.plan.origin_s - 1.0, sim)

    def _schedule_next(self, index: int, item: _Cron, after_abs_s: float, sim: Simulation) -> None:
        at_abs = item.spec.schedule.next_after(after_abs_s, item.spec.zone)
        if at_abs is None:
            return
        at = at_abs - self.plan.origin_s
        if at < self.plan.until_s:
            sim.schedule(at, EventKind.CRON, str(index), tag="schedule")

    def on_event(self, event: Event, now: float, sim: Simulation) -> None:
        index = int(event.key)
        item = self.crons[index]
        if event.tag == "late":  # Forbid: the active Job ended, run the missed time now
            if item.missed_at is not None and item.active is None:
                scheduled, item.missed_at = item.missed_at, None
                deadline = item.spec.starting_deadline_s
                if deadline is not None and now - scheduled > deadline:
                    item.skipped += 1
                else:
                    self._create(index, scheduled, now, sim)
            return
        self._schedule_next(index, item, now + self.plan.origin_s, sim)
        if item.active is not None and item.spec.policy == "Forbid":
            if item.missed_at is not None:
                item.skipped += 1  # an older missed time: only the most recent one is run late
            item.missed_at = now
            return
        if item.active is not None and item.spec.policy == "Replace":
            replaced, item.active = item.active, None
            self._active.pop(replaced, None)
            sim.withdraw(replaced, now, f"replaced by CronJob {item.spec.name}'s next Job")
        self._create(index, now, now, sim)

    def _create(self, index: int, scheduled: float, now: float, sim: Simulation) -> None:
        item = self.crons[index]
        spec = item.spec
        job_name = f"{spec.name}-{int((scheduled + self.plan.origin_s) // 60)}"
        name = workload_name(job_name, "", "Job", "batch")
        workload = dataclasses.replace(spec.template, name=name, creation_time=now, uid=f"cron-{job_name}")
        job = SimJob(workload, spec.duration_s, total_gpus(workload), failed=spec.failed)
        if job.key in sim.runs:  # the same minute twice (a Replace'd run's name): not created again
            return
        item.created += 1
        item.active = job.key
        self._active[job.key] = index
        sim.submit(job, now)

    def on_ended(self, key: str, now: float, sim: Simulation) -> None:
        """A workload ended: if it is a CronJob's active Job, a Forbid'den missed time may run now."""
        index = self._active.pop(key, None)
        if index is None:
            return
        item = self.crons[index]
        item.active = None
        if item.missed_at is not None:
            sim.schedule(now, EventKind.CRON, str(index), tag="late")

    def counts(self) -> dict[str, tuple[int, int]]:
        """``namespace/name`` -> (Jobs created, scheduled times skipped)."""
        return {f"{c.spec.namespace}/{c.spec.name}": (c.created, c.skipped) for c in self.crons}
