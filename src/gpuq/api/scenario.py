"""``gpuq.dev/v1alpha1`` Scenario: a configuration, a workload source and simulation settings.

One file says what ``gpuq simulate`` runs: which manifests make the cluster
(``spec.config``, relative to the Scenario's file), where the workloads come
from (a trace file, or a generator of arrivals per team), how long and with
which seed, and the variants to compare side by side (each replaces or adds
to the configuration, or switches a policy). Importing this module registers
the kind with :data:`gpuq.api.kueue.KINDS`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from gpuq.api import kueue
from gpuq.api.kueue import Duration, NonNegativeQuantity, Object, Strict, Timestamp
from gpuq.api.serving_scenario import ServingSection

GPUQ_GROUP = "gpuq.dev"
Seconds = Annotated[Duration, Field(ge=0)]
PositiveSeconds = Annotated[Duration, Field(gt=0)]


class Distribution(Strict):
    """A number drawn per workload: exactly one of the fields. Durations accept ``30m`` or seconds."""

    constant: float | None = None
    choice: list[float] | None = None
    weights: list[Annotated[float, Field(ge=0)]] | None = None
    uniform: tuple[float, float] | None = None
    exponential: Annotated[float, Field(gt=0)] | None = None  # mean
    lognormal: tuple[Annotated[float, Field(gt=0)], Annotated[float, Field(ge=0)]] | None = (
        None  # median, sigma
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Distribution:
        given = [
            k
            for k in ("constant", "choice", "uniform", "exponential", "lognormal")
            if getattr(self, k) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of constant, choice, uniform, exponential, lognormal"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.choice is not None and not self.choice:
            raise ValueError("choice needs at least one value")
        if self.weights is not None and (self.choice is None or len(self.weights) != len(self.choice)):
            raise ValueError("weights need a choice of the same length")
        if self.weights is not None and not any(self.weights):
            raise ValueError("weights must not all be 0")
        if self.uniform is not None and self.uniform[0] > self.uniform[1]:
            raise ValueError("uniform: the lower bound is above the upper bound")
        return self


def _as_distribution(value: object) -> object:
    """A bare number or duration text is a constant."""
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        return {"constant": kueue.parse_duration(value) if isinstance(value, str) else value}
    if isinstance(value, dict):
        return {k: _durations(v) for k, v in value.items()}
    return value


def _durations(value: object) -> object:
    if isinstance(value, str):
        return kueue.parse_duration(value)
    if isinstance(value, list):
        return [_durations(v) for v in value]
    return value


DistributionField = Annotated[Distribution, BeforeValidator(_as_distribution)]


class TeamArrivals(Strict):
    """Workloads one team submits: a Poisson process of ``arrivalsPerHour``, or one ``every`` interval
    from ``start`` (the first at ``start``), until the horizon or ``count`` workloads."""

    namespace: str
    queue: str
    arrivals_per_hour: Annotated[float, Field(gt=0, le=1_000_000)] | None = None
    every: PositiveSeconds | None = None
    count: Annotated[int, Field(gt=0, le=10_000_000)] | None = None
    start: Seconds = 0.0
    priority: str | None = None
    pods: DistributionField = Distribution(constant=1)
    gpus_per_pod: DistributionField = Distribution(constant=1)
    cpu_per_pod: NonNegativeQuantity | None = None
    memory_per_pod: NonNegativeQuantity | None = None
    duration: DistributionField
    checkpoint_interval: PositiveSeconds | None = None
    gpu_model: str | None = None
    name_prefix: str | None = None
    tolerations: list[kueue.Toleration] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_rate(self) -> TeamArrivals:
        if (self.arrivals_per_hour is None) == (self.every is None):
            raise ValueError("give exactly one of arrivalsPerHour or every")
        return self


class Generator(Strict):
    horizon: PositiveSeconds  # arrivals in [start, horizon)
    teams: list[TeamArrivals] = Field(min_length=1)


class TraceSource(Strict):
    path: str
    format: str | None = None
    mapping: str | None = None
    strict: bool = False
    limit: Annotated[int, Field(gt=0)] | None = None


class WorkloadSource(Strict):
    trace: TraceSource | None = None
    generate: Generator | None = None

    @model_validator(mode="after")
    def _one_source(self) -> WorkloadSource:
        if (self.trace is None) == (self.generate is None):
            raise ValueError("give exactly one of trace or generate")
        return self


class InitialState(Strict):
    """The cluster at one instant as the simulation's time 0 (``gpuq.sim.initial_state``).

    ``paths``: manifests (Kueue Workloads with ``status``, or Jobs...) relative to the Scenario's
    file; ``at``: the instant (RFC 3339; default the latest timestamp in them); ``traceOrigin``:
    the instant the trace's time 0 stands for (default ``at``: every trace row is a later
    arrival); ``assumeDuration``: run time of workloads that declare none.
    """

    paths: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    at: Timestamp | None = None
    trace_origin: Timestamp | None = None
    assume_duration: PositiveSeconds | None = None


class NodeChangeSpec(Strict):
    at: Seconds
    action: Literal["add", "remove"]
    pool: str | None = None
    count: Annotated[int, Field(gt=0)] = 1
    nodes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _target(self) -> NodeChangeSpec:
        if (self.pool is None) == (not self.nodes):
            raise ValueError("give either pool (with count) or nodes")
        return self


class Settings(Strict):
    horizon: PositiveSeconds | None = None
    seed: int = 0
    placement_policy: str | None = None
    startup_delay: Seconds = 0.0
    checkpoint_interval: PositiveSeconds | None = None
    bins: Annotated[int, Field(gt=0, le=10_000)] = 240
    node_changes: list[NodeChangeSpec] = Field(default_factory=list)


class SettingsOverride(Strict):
    horizon: PositiveSeconds | None = None
    placement_policy: str | None = None
    startup_delay: Seconds | None = None
    checkpoint_interval: PositiveSeconds | None = None


class Variant(Strict):
    name: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    description: str = ""
    config: list[str] | None = None  # replaces the scenario's configuration
    extra_config: list[str] = Field(default_factory=list)  # added to it
    queueing: Literal["kueue", "fcfs"] = "kueue"  # fcfs: no quotas, no priorities, no preemption
    fair_sharing: bool | None = None
    ignore_priorities: bool = False
    settings: SettingsOverride = SettingsOverride()


class Fairness(Strict):
    shares: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)


class ScenarioSpec(Strict):
    description: str = ""
    config: list[str] = Field(default_factory=list)
    workloads: WorkloadSource | None = None  # may be left out when initialState is given
    initial_state: InitialState | None = None
    settings: Settings = Settings()
    fairness: Fairness = Fairness()
    variants: list[Variant] = Field(default_factory=list)
    serving: ServingSection | None = None  # services' traffic and replicas (gpuq.api.serving_scenario)

    @model_validator(mode="after")
    def _unique_variants(self) -> ScenarioSpec:
        if self.workloads is None and self.initial_state is None:
            raise ValueError("give workloads (a trace or a generator), an initialState, or both")
        seen: set[str] = set()
        for variant in self.variants:
            if variant.name in seen:
                raise ValueError(f"variant {variant.name!r} is declared twice")
            seen.add(variant.name)
        return self


class Scenario(Object):
    spec: ScenarioSpec


kueue.KINDS[(GPUQ_GROUP, "Scenario")] = Scenario
