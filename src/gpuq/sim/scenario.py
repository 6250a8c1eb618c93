"""From ``gpuq simulate``'s inputs to runnable variants: configuration files, workloads, settings.

The inputs are any mix of manifest files and directories; at most one of them
holds a ``gpuq.dev/v1alpha1`` Scenario. The base configuration is every other
object in the inputs plus the Scenario's ``spec.config`` (relative to its
file, each file read once). A variant's configuration is its own ``config``
list when given, else the base plus its ``extraConfig``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuq.api import nodes_convert
from gpuq.api.diagnostics import Diagnostic
from gpuq.api.kueue import WorkloadPriorityClass
from gpuq.api.loader import LoadResult, expand_path, load
from gpuq.api.machines import NodePool
from gpuq.api.scenario import Scenario, ScenarioSpec, Settings, SettingsOverride, TraceSource
from gpuq.core.model import ClusterConfig
from gpuq.core.nodes import Node
from gpuq.sim.fcfs import fcfs_config
from gpuq.sim.generator import generate
from gpuq.sim.jobs import SimJob, to_sim_jobs, unplaceable
from gpuq.sim.simulator import NodeChange, SimSettings, Simulation
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


@dataclass(frozen=True)
class ScenarioPlan:
    name: str
    seed: int
    spec: ScenarioSpec | None
    trace: TraceSource | None
    variants: tuple[VariantPlan, ...]
    base_dir: Path
    workload_objects: int = 0  # Workload objects among the configuration files, not simulated
    notes: tuple[str, ...] = field(default=())


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
            probes=probes,
            on_probe=on_probe,
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
    result = load(files)
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
        return ScenarioPlan(DEFAULT_NAME, seed or 0, None, given, (base,), Path.cwd(), _workloads(result))
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
    return ScenarioPlan(
        manifest.name,
        spec.settings.seed if seed is None else seed,
        spec,
        source,
        tuple(variants),
        base_dir,
        _workloads(result),
    )


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
    assert plan.spec is not None and plan.spec.workloads.generate is not None
    jobs = generate(plan.spec.workloads.generate, plan.seed)
    return TraceRead(tuple(jobs), (), len(jobs), "generator")


def prepare(plan: ScenarioPlan, variant: VariantPlan, trace: TraceRead) -> PreparedVariant:
    """Load the variant's configuration and turn the workloads into simulated jobs."""
    result = load(list(variant.paths))
    if result.errors:
        raise ScenarioError(f"variant {variant.name}: the configuration has errors", result.diagnostics)
    assert result.config is not None
    config = result.config
    if variant.fair_sharing is not None:
        fair = dataclasses.replace(config.scheduler.fair_sharing, enable=variant.fair_sharing)
        config = dataclasses.replace(
            config, scheduler=dataclasses.replace(config.scheduler, fair_sharing=fair)
        )
    priorities = {
        m.name: m.model.value for m in result.manifests if isinstance(m.model, WorkloadPriorityClass)
    }
    jobs, bad = to_sim_jobs(trace.jobs, priorities, result.gpu_catalogue, trace.source)
    if variant.ignore_priorities:
        jobs = [dataclasses.replace(j, workload=dataclasses.replace(j.workload, priority=0)) for j in jobs]
    if variant.queueing == "fcfs":
        config = fcfs_config(config, {r for j in jobs for ps in j.workload.pod_sets for r in ps.requests})
    settings = _settings(plan.spec.settings if plan.spec else Settings(), variant.override)
    nodes, down = _nodes_with_spares(result, settings)
    jobs, too_large = unplaceable(jobs, nodes, trace.source)
    bad += too_large
    prices = _prices(result, nodes)
    return PreparedVariant(variant, config, nodes, down, prices, jobs, bad, settings, result.warnings)


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


def _prices(result: LoadResult, nodes: tuple[Node, ...]) -> dict[str, float]:
    per_pool = {p.name: p.hourly_price_usd or 0.0 for p in result.node_pools}
    return {n.name: per_pool.get(n.pool or "", 0.0) for n in nodes}


def _workloads(result: LoadResult) -> int:
    return len(result.workloads)


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
