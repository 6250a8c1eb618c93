"""From ``gpuq simulate``'s inputs to runnable variants: configuration files, workloads, settings.

The inputs are any mix of manifest files and directories; at most one of them
holds a ``gpuq.dev/v1alpha1`` Scenario. The base configuration is every other
object in the inputs plus the Scenario's ``spec.config`` (relative to its
file, each file read once). A variant's configuration is its own ``config``
list when given, else the base plus its ``extraConfig``. A Scenario's
``spec.initialState`` (:mod:`gpuq.sim.initial_state`) is loaded with each
variant's configuration and becomes its time 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuq.api import kueue, nodes_convert
from gpuq.api.diagnostics import Diagnostic, Manifest
from gpuq.api.kueue import WorkloadPriorityClass
from gpuq.api.loader import LoadResult, expand_path, load
from gpuq.api.machines import NodePool
from gpuq.api.scenario import (
    ProvisioningSettings,
    Scenario,
    ScenarioSpec,
    Settings,
    SettingsOverride,
    TraceSource,
)
from gpuq.core.model import Admission, ClusterConfig, Cohort, QueueingStrategy
from gpuq.core.nodes import Node
from gpuq.sim.cron_jobs import CronJobs, CronPlan, CronPlanError, cron_plan
from gpuq.sim.fcfs import ANY_FLAVOR, FCFS_QUEUE, fcfs_config
from gpuq.sim.generator import generate
from gpuq.sim.initial_state import InitialState, StateSource, initial_state, later_arrivals
from gpuq.sim.jobs import SimJob, to_sim_jobs, unplaceable
from gpuq.sim.provisioning.provisioner import Provisioner
from gpuq.sim.provisioning.setup import ProvisioningSetup, provisioning_setup, spare_nodes, unserved_flavors
from gpuq.sim.serving.fleet import ServingFleet, ServingPlan
from gpuq.sim.serving.plan import ServingPlanError, serving_plan
from gpuq.sim.simulator import NodeChange, Resident, SimSettings, Simulation
from gpuq.sim.traces.model import BadRow, TraceRead

DEFAULT_NAME = "simulation"


class ScenarioError(Exception):
    """The inputs cannot be simulated; ``diagnostics`` say where, ``message`` what."""

    def __init__(self, message: str, diagnostics: tuple[Diagnostic, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.diagnostics = diagnostics


@dataclass(frozen=True)
class VariantPlan:
    name: str
    description: str
    paths: tuple[str, ...]
    fair_sharing: bool | None = None
    ignore_priorities: bool = False
    override: SettingsOverride = field(default_factory=SettingsOverride)
    queueing: str = "kueue"
    provisioning: ProvisioningSettings | None = None  # the variant's own spec.provisioning


@dataclass(frozen=True)
class ScenarioPlan:
    name: str
    seed: int
    spec: ScenarioSpec | None
    trace: TraceSource | None
    variants: tuple[VariantPlan, ...]
    base_dir: Path
    workload_objects: int = 0  # Workload objects among the configuration files, not simulated
    notes: tuple[str, ...] = field(default=())  # objects not scheduled by gpuq (LoadResult.foreign_notes)
    state: StateSource | None = None  # spec.initialState, paths resolved
    sources: dict[str, str] = field(default_factory=dict, compare=False)  # each file read once


@dataclass(frozen=True)
class PreparedVariant:
    """One variant ready to run: its configuration, nodes and workloads."""

    plan: VariantPlan
    config: ClusterConfig
    nodes: tuple[Node, ...]
    initially_down: tuple[str, ...]
    prices: dict[str, float]
    jobs: list[SimJob]
    bad_rows: list[BadRow]
    settings: SimSettings
    warnings: tuple[Diagnostic, ...]
    residents: tuple[Resident, ...] = ()  # the initial state's workloads holding quota at 0
    state_warnings: tuple[Diagnostic, ...] = ()  # what the initial state assumed
    notes: tuple[str, ...] = ()  # trace rows the initial state replaces
    serving: ServingPlan | None = None  # autoscaled services (spec.serving), see gpuq.sim.serving.fleet
    provisioning: ProvisioningSetup | None = None  # spec.provisioning, see gpuq.sim.provisioning.provisioner
    cron: CronPlan | None = None  # the CronJobs' schedules, see gpuq.sim.cron_jobs

    def simulation(
        self,
        on_progress: Callable[[float], None] | None = None,
        *,
        probes: Sequence[float] = (),
        on_probe: Callable[[float, Simulation], None] | None = None,
    ) -> Simulation:
        """The simulation of this variant, ready to run (``probes``: see :class:`Simulation`)."""
        return Simulation(
            self.config,
            self.nodes,
            self.jobs,
            self.settings,
            prices=self.prices,
            initially_down=self.initially_down,
            on_progress=on_progress,
            residents=self.residents,
            probes=probes,
            on_probe=on_probe,
            services=ServingFleet(self.serving) if self.serving is not None else None,
            provisioning=Provisioner(self.provisioning) if self.provisioning is not None else None,
            cron=CronJobs(self.cron) if self.cron is not None else None,
        )


def plan_scenario(
    files: list[str],
    *,
    trace: str | None = None,
    seed: int | None = None,
    compare: bool = False,
    variant: str | None = None,
    strict: bool = False,
    trace_format: str | None = None,
    mapping: str | None = None,
) -> ScenarioPlan:
    """Find the Scenario among ``files`` and decide which configurations to run.

    ``trace``, ``trace_format`` and ``mapping`` (command-line paths) override the Scenario's source.
    """
    sources: dict[str, str] = {}
    result = load(files, cache=sources)
    scenarios = [m for m in result.manifests if isinstance(m.model, Scenario)]
    if result.errors:
        raise ScenarioError("the configuration has errors", result.diagnostics)
    if len(scenarios) > 1:
        where = ", ".join(f"{m.path}:{m.line}" for m in scenarios)
        raise ScenarioError(f"more than one Scenario in the inputs ({where}); give one")
    inputs = _own_files(files, exclude={m.path for m in scenarios})
    if not scenarios:
        if trace is None:
            raise ScenarioError("no Scenario in the inputs and no --trace: nothing to simulate")
        if compare or variant:
            raise ScenarioError("--compare and --variant need a Scenario with variants")
        base = VariantPlan("baseline", "", tuple(inputs))
        given = TraceSource(path=trace, strict=strict, format=trace_format, mapping=mapping)
        return ScenarioPlan(
            DEFAULT_NAME,
            seed or 0,
            None,
            given,
            (base,),
            Path.cwd(),
            _workloads(result),
            result.foreign_notes,
            sources=sources,
        )
    manifest = scenarios[0]
    scenario: Scenario = manifest.model
    spec = scenario.spec
    base_dir = Path(manifest.path).parent
    config = _dedupe([*inputs, *(_file(base_dir, p) for p in spec.config)])
    variants = [
        VariantPlan(
            v.name,
            v.description,
            tuple(_file(base_dir, p) for p in v.config)
            if v.config is not None
            else tuple(_dedupe([*config, *(_file(base_dir, p) for p in v.extra_config)])),
            v.fair_sharing,
            v.ignore_priorities or v.queueing == "fcfs",
            v.settings,
            v.queueing,
            v.provisioning,
        )
        for v in spec.variants
    ]
    if variant is not None:
        chosen = [v for v in variants if v.name == variant]
        if not chosen:
            known = ", ".join(v.name for v in variants) or "none declared"
            raise ScenarioError(
                f"variant {variant!r} not found in Scenario {manifest.name} (variants: {known})"
            )
        variants = chosen
    elif not compare or not variants:
        if compare:
            raise ScenarioError(f"--compare: Scenario {manifest.name} declares no variants")
        variants = [VariantPlan("baseline", spec.description, tuple(config))]
    source: TraceSource | None = (
        TraceSource(path=trace, format=trace_format, mapping=mapping)
        if trace is not None
        else spec.workloads.trace
        if spec.workloads is not None
        else None
    )
    if source is not None and trace is None:
        source = source.model_copy(update={"path": _file(base_dir, source.path)})
        if source.mapping:
            source = source.model_copy(update={"mapping": _file(base_dir, source.mapping)})
    if source is not None and strict:
        source = source.model_copy(update={"strict": True})
    if source is None and (trace_format or mapping):
        raise ScenarioError(
            "--trace-format and --mapping apply to a trace; the Scenario generates its workloads"
        )
    state = _state_source(manifest, base_dir)
    return ScenarioPlan(
        manifest.name,
        spec.settings.seed if seed is None else seed,
        spec,
        source,
        tuple(variants),
        base_dir,
        _workloads(result, state),
        result.foreign_notes,
        state=state,
        sources=sources,
    )


def _state_source(manifest: Manifest, base_dir: Path) -> StateSource | None:
    """``spec.initialState`` with its paths resolved against the Scenario's directory; a path that
    does not exist or holds no manifest is an error naming the Scenario's field."""
    spec = manifest.model.spec.initial_state
    if spec is None:
        return None
    files: list[str] = []
    problems = []
    for index, path in enumerate(spec.paths):
        resolved = _file(base_dir, path)
        found = [f for f in expand_path(resolved) if Path(f).is_file()]
        if not found:
            what = "no manifest (*.yaml, *.yml, *.json) under" if Path(resolved).is_dir() else "no such file"
            problems.append(
                manifest.diagnostic(("spec", "initialState", "paths", index), f"{what} {resolved}")
            )
        files += found
    if problems:
        raise ScenarioError(f"Scenario {manifest.name}: the initial state cannot be read", tuple(problems))
    return StateSource(tuple(_dedupe(files)), spec.at, spec.trace_origin, spec.assume_duration)


def load_workloads(plan: ScenarioPlan) -> TraceRead:
    """The scenario's trace, read (bad rows kept), or its generated workloads."""
    if plan.trace is not None:
        from gpuq.sim.traces import read_trace

        source = plan.trace
        return read_trace(
            source.path,
            format=source.format,
            mapping=source.mapping,
            strict=source.strict,
            limit=source.limit,
        )
    assert plan.spec is not None
    if plan.spec.workloads is None:  # the initial state alone
        return TraceRead((), (), 0, "initial state")
    assert plan.spec.workloads.generate is not None
    jobs = generate(plan.spec.workloads.generate, plan.seed)
    return TraceRead(tuple(jobs), (), len(jobs), "generator")


def prepare(plan: ScenarioPlan, variant: VariantPlan, trace: TraceRead) -> PreparedVariant:
    """Load the variant's configuration (with the initial state, if any) and turn the workloads
    into simulated jobs: the state's pending ones first (created before 0), then the trace's."""
    state_files = plan.state.files if plan.state is not None else ()
    paths = _dedupe([*variant.paths, *state_files]) if state_files else list(variant.paths)
    result = load(paths, cache=plan.sources, name_seed=plan.seed)  # generateName: the run's seed
    if result.errors:
        what = "the configuration or the initial state has" if state_files else "the configuration has"
        raise ScenarioError(f"variant {variant.name}: {what} errors", result.diagnostics)
    assert result.config is not None
    config = result.config
    if variant.fair_sharing is not None:
        fair = dataclasses.replace(config.scheduler.fair_sharing, enable=variant.fair_sharing)
        config = dataclasses.replace(
            config, scheduler=dataclasses.replace(config.scheduler, fair_sharing=fair)
        )
    state = _initial_state(plan, variant, result)
    rows, notes = list(trace.jobs), list[str]()
    if state is not None and plan.state is not None:
        rows, notes = later_arrivals(trace.jobs, plan.state, state.at_s, state.keys)
    priorities = {
        m.name: m.model.value for m in result.manifests if isinstance(m.model, WorkloadPriorityClass)
    }
    jobs, bad = to_sim_jobs(rows, priorities, result.gpu_catalogue, trace.source)
    pending = list(state.pending) if state is not None else []
    residents = list(state.residents) if state is not None else []
    if variant.ignore_priorities:
        jobs, pending = [_unprioritised(j) for j in jobs], [_unprioritised(j) for j in pending]
        residents = [dataclasses.replace(r, job=_unprioritised(r.job)) for r in residents]
    settings = _settings(plan.spec.settings if plan.spec else Settings(), variant.override)
    base_settings = plan.spec.settings if plan.spec else Settings()
    order = variant.override.victim_order or base_settings.victim_order
    if order is not None:
        least = order == "lost-work"
        queues = {n: dataclasses.replace(q, least_lost_work=least) for n, q in config.cluster_queues.items()}
        config = dataclasses.replace(config, cluster_queues=queues)
    backfill = variant.override.backfill if variant.override.backfill is not None else base_settings.backfill
    if backfill is not None:
        queues = {
            n: dataclasses.replace(
                q, backfill=backfill and q.queueing_strategy == QueueingStrategy.STRICT_FIFO
            )
            for n, q in config.cluster_queues.items()
        }
        config = dataclasses.replace(config, cluster_queues=queues)
    half_life = variant.override.usage_half_life or base_settings.usage_half_life
    if half_life is not None:
        config = with_usage_half_life(config, half_life)
    factor = variant.override.declared_runtime_factor or base_settings.declared_runtime_factor
    if factor is not None:
        jobs = [_declared(j, factor, settings.startup_s) for j in jobs]
        pending = [_declared(j, factor, settings.startup_s) for j in pending]
    jobs, pending = _checkpointed(jobs, settings.checkpoint_s), _checkpointed(pending, settings.checkpoint_s)
    residents = [
        dataclasses.replace(r, job=_checkpointed([r.job], settings.checkpoint_s)[0]) for r in residents
    ]
    protection = _min_runtime(base_settings, variant.override)
    if protection:
        jobs = [_protected(j, protection) for j in jobs]
        pending = [_protected(j, protection) for j in pending]
        residents = [dataclasses.replace(r, job=_protected(r.job, protection)) for r in residents]
    cron = _cron(variant, result, state, [*pending, *jobs], settings)
    if variant.queueing == "fcfs":
        everything = [*jobs, *pending, *(r.job for r in residents)]
        everything += [SimJob(c.template, c.duration_s, 0.0) for c in (cron.crons if cron else ())]
        config = fcfs_config(
            config, {r for j in everything for ps in j.workload.pod_sets for r in ps.requests}
        )
        residents = [_fcfs_resident(r) for r in residents]
    nodes, down = _nodes_with_spares(result, settings)
    chosen = variant.provisioning or (plan.spec.provisioning if plan.spec else None)
    setup = provisioning_setup(result, chosen, plan.seed) if chosen is not None else None
    if setup is not None:
        nodes, down = _with_pool_spares(nodes, down, spare_nodes(result))
        if unserved := unserved_flavors(result, nodes):
            raise ScenarioError(f"variant {variant.name}: flavors no node can serve", tuple(unserved))
    jobs, too_large = unplaceable(jobs, nodes, trace.source)
    bad += too_large
    prices = _prices(result, nodes, setup)
    serving = _serving(plan, variant, result, settings)
    return PreparedVariant(
        variant,
        config,
        nodes,
        down,
        prices,
        [*pending, *jobs],
        bad,
        settings,
        result.warnings,
        tuple(residents),
        state.warnings if state is not None else (),
        tuple(notes),
        serving,
        setup,
        cron,
    )


def _cron(
    variant: VariantPlan,
    result: LoadResult,
    state: InitialState | None,
    jobs: Sequence[SimJob],
    settings: SimSettings,
) -> CronPlan | None:
    """The CronJobs' schedules from the initial state's instant (else the epoch) to the horizon (else
    the last arrival)."""
    origin = state.at_s if state is not None else 0.0
    until = settings.horizon_s
    if until is None and jobs:
        until = max(j.workload.creation_time for j in jobs)
    try:
        return cron_plan(result, origin, until, ignore_priorities=variant.ignore_priorities)
    except CronPlanError as err:
        message = f"variant {variant.name}: a CronJob cannot be simulated"
        raise ScenarioError(message, err.diagnostics) from err


def _serving(
    plan: ScenarioPlan, variant: VariantPlan, result: LoadResult, settings: SimSettings
) -> ServingPlan | None:
    """The Scenario's services (``spec.serving``) against this variant's configuration."""
    if plan.spec is None or plan.spec.serving is None:
        return None
    try:
        return serving_plan(result, plan.spec.serving, settings.horizon_s, plan.seed, plan.base_dir)
    except ServingPlanError as err:
        raise ScenarioError(f"variant {variant.name}: {err}") from err


def _initial_state(plan: ScenarioPlan, variant: VariantPlan, result: LoadResult) -> InitialState | None:
    """The Scenario's initial state against this variant's configuration; errors stop everything."""
    if plan.state is None:
        return None
    state = initial_state(result, plan.state)
    if state.errors:
        raise ScenarioError(
            f"variant {variant.name}: the initial state does not fit the configuration", state.errors
        )
    return state


def _unprioritised(job: SimJob) -> SimJob:
    return dataclasses.replace(job, workload=dataclasses.replace(job.workload, priority=0))


def _fcfs_resident(resident: Resident) -> Resident:
    """A resident of a ``queueing: fcfs`` variant holds the one queue's quota, on its one flavor."""
    admission = resident.job.workload.admission
    assert admission is not None
    moved = Admission(
        FCFS_QUEUE,
        tuple(
            dataclasses.replace(a, flavors=dict.fromkeys(a.flavors, ANY_FLAVOR), topology=None)
            for a in admission.pod_set_assignments
        ),
    )
    workload = dataclasses.replace(resident.job.workload, admission=moved)
    return dataclasses.replace(resident, job=dataclasses.replace(resident.job, workload=workload))


def with_usage_half_life(config: ClusterConfig, seconds: float) -> ClusterConfig:
    """Every root cohort, named by a Cohort or only by its ClusterQueues, with ``seconds`` as its
    ``gpuq.dev/usage-half-life`` (the scenario's ``usageHalfLife``)."""
    cohorts = dict(config.cohorts)
    roots = {q.cohort for q in config.cluster_queues.values() if q.cohort} | set(cohorts)
    for name in sorted(roots):
        cohort = cohorts.get(name) or Cohort(name)
        if cohort.parent is None:
            cohorts[name] = dataclasses.replace(cohort, usage_half_life_s=seconds)
    return dataclasses.replace(config, cohorts=cohorts)


def _min_runtime(base: Settings, override: SettingsOverride) -> float:
    """``settings.minRuntime`` (the variant's first): preemption protection for every workload."""
    value = override.min_runtime if override.min_runtime is not None else base.min_runtime
    return value or 0.0


def _checkpointed(jobs: list[SimJob], default_s: float | None) -> list[SimJob]:
    """The jobs with their checkpoint interval (their own, else ``settings.checkpointInterval``) on
    their workloads, which the engine reads to rank preemption victims by lost work."""
    out = []
    for job in jobs:
        interval = job.checkpoint_s or default_s or 0.0
        if interval and job.workload.checkpoint_interval_s != interval:
            job = dataclasses.replace(
                job, workload=dataclasses.replace(job.workload, checkpoint_interval_s=interval)
            )
        out.append(job)
    return out


def _declared(job: SimJob, factor: float, startup_s: float) -> SimJob:
    """``job`` declaring its start-up plus ``factor`` times its run as its runtime (what backfill
    reads), unless its own ``gpuq.dev/expected-duration`` says otherwise."""
    if job.workload.expected_runtime_s is not None:
        return job
    declared = startup_s + factor * job.duration_s
    return dataclasses.replace(job, workload=dataclasses.replace(job.workload, expected_runtime_s=declared))


def _protected(job: SimJob, seconds: float) -> SimJob:
    """``job`` protected for ``seconds`` unless its own ``gpuq.dev/min-runtime`` says otherwise."""
    if job.workload.min_runtime_s:
        return job
    return dataclasses.replace(job, workload=dataclasses.replace(job.workload, min_runtime_s=seconds))


def _settings(base: Settings, override: SettingsOverride) -> SimSettings:
    def pick(name: str) -> object:
        value = getattr(override, name)
        return getattr(base, name) if value is None else value

    return SimSettings(
        horizon_s=pick("horizon"),  # type: ignore[arg-type]
        startup_s=pick("startup_delay"),  # type: ignore[arg-type]
        policy=pick("placement_policy") or "binpack",  # type: ignore[arg-type]
        checkpoint_s=pick("checkpoint_interval"),  # type: ignore[arg-type]
        node_changes=tuple(
            NodeChange(c.at, c.action, tuple(c.nodes), c.pool, c.count) for c in base.node_changes
        ),
    )


def _nodes_with_spares(result: LoadResult, settings: SimSettings) -> tuple[tuple[Node, ...], tuple[str, ...]]:
    """The configuration's nodes plus, for pools that node changes add to, the spare nodes up to
    each pool's ``max`` (down until added)."""
    grown = {c.pool for c in settings.node_changes if c.action == "add" and c.pool}
    pools = {m.name: m.model for m in result.manifests if isinstance(m.model, NodePool)}
    missing = sorted(
        p for c in settings.node_changes if (p := c.pool) is not None and p not in pools
    ) + sorted(n for c in settings.node_changes for n in c.nodes if n not in {x.name for x in result.nodes})
    if missing:
        raise ScenarioError(f"spec.settings.nodeChanges: no NodePool or node named {', '.join(missing)}")
    spares: list[Node] = []
    for name in sorted(grown):
        pool = pools[name]
        count, _low, high = pool.spec.sizes()
        spares += nodes_convert.expand_pool(pool, result.gpu_catalogue, high)[count:]
    nodes = tuple(sorted([*result.nodes, *spares], key=lambda n: n.name))
    return nodes, tuple(n.name for n in spares)


def _prices(
    result: LoadResult, nodes: tuple[Node, ...], setup: ProvisioningSetup | None = None
) -> dict[str, float]:
    """Per node: its pool's ``price``; with provisioning on, the price catalogue's where none is written."""
    per_pool = {p.name: p.hourly_price_usd or 0.0 for p in result.node_pools}
    if setup is not None:
        per_pool |= {p.name: p.usd_per_node_hour or 0.0 for p in setup.pools}
    return {n.name: per_pool.get(n.pool or "", 0.0) for n in nodes}


def _with_pool_spares(
    nodes: tuple[Node, ...], down: tuple[str, ...], spares: list[Node]
) -> tuple[tuple[Node, ...], tuple[str, ...]]:
    """Add the scalable pools' spare nodes (down at 0) that are not there yet."""
    have = {n.name for n in nodes}
    extra = [n for n in spares if n.name not in have]
    merged = tuple(sorted([*nodes, *extra], key=lambda n: n.name))
    return merged, (*down, *(n.name for n in extra))


def _workloads(result: LoadResult, state: StateSource | None = None) -> int:
    """Workload objects among the inputs that are not the initial state's."""
    if state is None:
        return len(result.workloads)
    return sum(1 for m in result.manifests if isinstance(m.model, kueue.Workload) and not state.holds(m.path))


def _own_files(files: list[str], exclude: set[str]) -> list[str]:
    """Every manifest file under ``files`` except the Scenario's own."""
    expanded: list[str] = []
    for path in files:
        expanded += [p for p in expand_path(path) if p not in exclude]
    return expanded


def _file(base_dir: Path, path: str) -> str:
    return str(base_dir / path) if not Path(path).is_absolute() else path


def _dedupe(paths: list[str]) -> list[str]:
    seen: set[Path] = set()
    kept = []
    for path in paths:
        for item in expand_path(path) if Path(path).is_dir() else [path]:
            resolved = Path(item).resolve()
            if resolved not in seen:
                seen.add(resolved)
                kept.append(item)
    return kept
