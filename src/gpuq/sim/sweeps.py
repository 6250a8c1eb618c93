"""A Scenario's variants as independent runs: in this process, in local worker processes, on Ray.

Each variant is a pure function of its inputs (the plan, the workloads, the seed), so it can run
anywhere and come back as a :class:`VariantOutcome` holding exactly what the command writes for it
(its metrics block and its CSV rows) plus what it prints (notes, warnings, figures). The caller
writes the outputs from the outcomes in variant order, so the files are the same bytes however
the variants ran.

Where a variant is prepared:

1. in this process (``--jobs 1``): with the caller's workloads, as the command always did;
2. in a local worker (``--jobs N``, forked from a fork server that imported the engine once):
   the worker reads the workloads again from the plan (the configuration texts travel in
   ``plan.sources``; the trace is a local file) and prepares the variant itself, so that the
   parent's serial part stays small;
3. on a Ray cluster (:mod:`gpuq.sim.sweep_ray`): the caller prepares it, since the cluster's
   nodes need not see the user's files; the prepared variant travels whole.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from gpuq.sim.provisioning.provisioner import Provisioner
from gpuq.sim.scenario import PreparedVariant, ScenarioError, ScenarioPlan, load_workloads, prepare
from gpuq.sim.simulator import SimResult, Simulation
from gpuq.sim.traces.model import BadRow, TraceRead

PROGRESS_STEPS = 200  # progress reports per variant: a bar's resolution, not a cost
WORKER_MODULES = ("gpuq.sim.metrics", "gpuq.sim.serving.report", "gpuq.sim.provisioning.report")
SMALL_SWEEP = 5_000  # workloads over all variants below which the default runs them here


class SweepError(Exception):
    """The variants could not all be run (a worker died, a cluster failed); one line for the user."""


@dataclass(frozen=True)
class VariantJob:
    """One variant to run: the ``index``-th of ``plan.variants``.

    ``prepared`` is set where the caller prepared it (Ray); ``workloads`` where the caller's can be
    used as they are (this process); neither: the run reads and prepares them itself."""

    plan: ScenarioPlan
    index: int
    strict: bool = False
    prepared: PreparedVariant | None = None
    workloads: TraceRead | None = None


@dataclass(frozen=True)
class VariantOutcome:
    """What one variant's run gives the command: its outputs and what to print about it.

    ``failure`` (a message and its diagnostics, as text) replaces the outputs when the variant
    could not be prepared; ``refused`` is set when ``--strict`` refuses its first bad row."""

    index: int
    name: str
    metrics: dict[str, Any]
    csv: str
    bad_rows: tuple[BadRow, ...]
    state_lines: tuple[str, ...]  # what the initial state assumed or Kueue never admits (warnings)
    notes: tuple[str, ...]  # trace rows the initial state replaces
    workloads: int = 0
    events: int = 0
    cycles: int = 0
    wall_s: float = 0.0
    decision_s: float | None = None  # provisioning decisions' wall time, when provisioning is on
    failure: tuple[str, tuple[str, ...]] | None = None
    refused: str | None = None
    warnings: tuple[str, ...] = ()  # about the run itself (it stopped early)


Progress = Callable[[int, str, float], None]  # (variant index, "total" or "at", seconds)


def run_variant(job: VariantJob, progress: Progress | None = None) -> VariantOutcome:
    """Prepare (unless prepared), simulate and measure one variant; never raises ScenarioError."""
    plan, variant = job.plan, job.plan.variants[job.index]
    prepared = job.prepared
    if prepared is None:
        try:
            prepared = prepare(
                plan, variant, job.workloads if job.workloads is not None else load_workloads(plan)
            )
        except ScenarioError as error:
            failure = (error.message, tuple(str(d) for d in error.diagnostics))
            return VariantOutcome(job.index, variant.name, {}, "", (), (), (), failure=failure)
    lines, notes = state_lines(plan, prepared), prepared.notes
    if job.strict and prepared.bad_rows:
        refused = str(prepared.bad_rows[0])
        return VariantOutcome(
            job.index, variant.name, {}, "", tuple(prepared.bad_rows), lines, notes, refused=refused
        )
    started = time.perf_counter()
    result, provisioner, warnings = _simulate(job.index, prepared, progress)
    wall_s = time.perf_counter() - started
    metrics, csv = _measure(plan, prepared, result, provisioner)
    return VariantOutcome(
        job.index,
        variant.name,
        metrics,
        csv,
        tuple(prepared.bad_rows),
        lines,
        notes,
        len(result.runs),
        result.events,
        result.cycles,
        wall_s,
        provisioner.decision_s if provisioner is not None else None,
        warnings=warnings,
    )


def state_lines(plan: ScenarioPlan, prepared: PreparedVariant) -> tuple[str, ...]:
    """The initial state's workloads Kueue would never admit (simulated, they stay pending), then
    what the state assumed: the warnings the command prints once for all variants."""
    state = plan.state
    never = [d for d in prepared.warnings if d.stays_pending and state is not None and state.holds(d.path)]
    return tuple(str(d) for d in [*never, *prepared.state_warnings])


def _simulate(
    index: int, prepared: PreparedVariant, progress: Progress | None
) -> tuple[SimResult, Provisioner | None, tuple[str, ...]]:
    """The run, reporting how far it is ``PROGRESS_STEPS`` times (``"share"``: arrivals and ends, so
    the drain counts: :meth:`Simulation.progress`; ``"at"``: its clock), and what to warn of it."""
    on_progress: Callable[[float], None] | None = None
    simulation: Simulation | None = None
    if progress is not None:
        progress(index, "total", PROGRESS_STEPS)
        marks = {"next": 0}

        def on_progress(now: float) -> None:
            assert simulation is not None
            done = int(simulation.progress() * PROGRESS_STEPS)
            if done >= marks["next"]:
                marks["next"] = done + 1
                progress(index, "at", now)
                progress(index, "share", done)

    simulation = prepared.simulation(on_progress)
    result = simulation.run()
    warnings: tuple[str, ...] = ()
    if simulation.futile_stop:
        stuck = sorted(k for k, r in result.runs.items() if r.ended is None and r.ready_timeouts)
        warnings = (
            f"warning: stopped at t={simulation.stopped_at:.0f}s: {len(stuck)} workload(s) "
            f"(first {stuck[0] if stuck else '-'}) kept timing out of waitForPodsReady and nothing "
            "else was left to happen; raise waitForPodsReady.timeout above the start-up time",
        )
    provisioner = simulation.provisioning
    return result, provisioner if isinstance(provisioner, Provisioner) else None, warnings


def _measure(
    plan: ScenarioPlan, prepared: PreparedVariant, result: SimResult, provisioner: Provisioner | None
) -> tuple[dict[str, Any], str]:
    """The variant's metrics block and CSV rows, as the command writes them."""
    from gpuq.sim.metrics import variant_metrics, workloads_csv
    from gpuq.sim.provisioning import report as provisioning_report
    from gpuq.sim.serving.report import batch_only, serving_metrics

    variant = prepared.plan
    bins = plan.spec.settings.bins if plan.spec else 240
    services = serving_metrics(result, bins) if prepared.serving is not None else None
    result = batch_only(result)  # serving replicas are reported per service, not as jobs
    shares = plan.spec.fairness.shares if plan.spec else {}
    total = sum(shares.values())
    metrics = variant_metrics(
        variant.name,
        result,
        prepared.config,
        description=variant.description,
        bins=bins,
        entitlements={t: s / total for t, s in shares.items()} if shares else None,
        queueing=variant.queueing,
    )
    metrics["workloads"]["bad_rows"] = len(prepared.bad_rows)  # the caller adds the trace's own
    if services is not None:
        metrics["serving"] = services
    if provisioner is not None:  # only when the scenario turns provisioning on
        metrics["provisioning"] = provisioning_report.provisioning_metrics(provisioner, result, bins)
        metrics["cost_attribution"] = provisioning_report.cost_metrics(provisioner, result)
    label = variant.name if len(plan.variants) > 1 else None
    return metrics, workloads_csv(result.runs.values(), label, result.span_s)


def default_jobs(variants: int, workloads: int, cpus: int | None = None) -> int:
    """``--jobs`` when not given: the CPUs this process may use, at most one per variant; one (this
    process) when the sweep simulates fewer than :data:`SMALL_SWEEP` workloads in all, where starting
    a worker (importing the engine takes about a second) costs more than running there saves."""
    if variants * workloads < SMALL_SWEEP:
        return 1
    if cpus is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not on Linux
            cpus = os.cpu_count() or 1
    return max(1, min(cpus, variants))


def run_in_process(jobs: Sequence[VariantJob], progress: Progress | None) -> Iterator[VariantOutcome]:
    """The variants one after another in this process, in order."""
    for job in jobs:
        yield run_variant(job, progress)


def run_in_workers(
    jobs: Sequence[VariantJob], workers: int, progress: Progress | None
) -> Iterator[VariantOutcome]:
    """The variants in ``workers`` worker processes; outcomes in variant order, each as soon as it
    and those before it are done. Progress (when wanted) comes back over a queue read by a thread."""
    context = _context()
    queue: Any = context.Queue() if progress is not None else None
    reader = threading.Thread(target=_relay, args=(queue, progress), daemon=True)
    if queue is not None:
        reader.start()
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_init, initargs=(queue,))
    try:
        yield from in_order([pool.submit(_worker_run, job) for job in jobs])
    except BrokenProcessPool as error:  # killed (out of memory, a signal): no outcome to report
        raise SweepError(f"--jobs {workers}: a worker process died before its variant finished") from error
    finally:  # a caller that stops early (a failed variant) cancels the variants not started
        pool.shutdown(wait=True, cancel_futures=True)
        if queue is not None:
            queue.put(None)
            reader.join()
            queue.close()


def _context() -> multiprocessing.context.BaseContext:
    """Workers forked from a fork server that imported the engine once (one import for all the
    workers, never a fork of this process and its threads), or spawned where there is none."""
    if "forkserver" not in multiprocessing.get_all_start_methods():  # pragma: no cover - Windows
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, *WORKER_MODULES])
    return context


def in_order(futures: Sequence[Future[VariantOutcome]]) -> Iterator[VariantOutcome]:
    """Each future's result in the futures' order, waiting for completions, not polling."""
    done: dict[int, VariantOutcome] = {}
    pending = set(futures)
    for index, future in enumerate(futures):
        while future in pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            pending -= finished
            for item in finished:
                done[futures.index(item)] = item.result()
        yield done.pop(index)


_QUEUE: Any = None  # the worker process's progress queue (set by _worker_init)


def _worker_init(queue: Any) -> None:
    global _QUEUE
    _QUEUE = queue


def _worker_run(job: VariantJob) -> VariantOutcome:
    return run_variant(job, _send if _QUEUE is not None else None)


def _send(index: int, kind: str, value: float) -> None:
    _QUEUE.put((index, kind, value))


def _relay(queue: Any, progress: Progress) -> None:
    """Hand each worker's report to ``progress`` until the None that ends the run."""
    while (item := queue.get()) is not None:
        progress(*item)
