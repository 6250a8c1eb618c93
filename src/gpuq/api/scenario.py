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
    checkpoint_cost: Seconds = 0.0  # the run pauses this long for each checkpoint it writes
    deadline_after: PositiveSeconds | None = None  # each must be finished this long after submission
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
    min_runtime: Seconds | None = None  # gpuq.dev/min-runtime of every workload that sets none
    victim_order: Literal["kueue", "lost-work"] | None = None  # every ClusterQueue's gpuq.dev/victim-order
    backfill: bool | None = None  # every StrictFIFO ClusterQueue's gpuq.dev/backfill
    usage_half_life: PositiveSeconds | None = None  # every root cohort's gpuq.dev/usage-half-life
    declared_runtime_factor: Annotated[float, Field(gt=0, le=1000)] | None = None
    """Each workload without a gpuq.dev/expected-duration declares startupDelay + factor × its runtime."""
    bins: Annotated[int, Field(gt=0, le=10_000)] = 240
    node_changes: list[NodeChangeSpec] = Field(default_factory=list)


class SettingsOverride(Strict):
    horizon: PositiveSeconds | None = None
    placement_policy: str | None = None
    startup_delay: Seconds | None = None
    checkpoint_interval: PositiveSeconds | None = None
    min_runtime: Seconds | None = None
    victim_order: Literal["kueue", "lost-work"] | None = None
    backfill: bool | None = None
    usage_half_life: PositiveSeconds | None = None
    declared_runtime_factor: Annotated[float, Field(gt=0, le=1000)] | None = None


class SpotInterruption(Strict):
    """One interruption of a trace: the notice for ``node`` (or ``count`` nodes of ``pool``) at ``at``."""

    at: Seconds
    node: str | None = None
    pool: str | None = None
    count: Annotated[int, Field(gt=0)] = 1

    @model_validator(mode="after")
    def _target(self) -> SpotInterruption:
        if (self.node is None) == (self.pool is None):
            raise ValueError("give either node or pool (with count)")
        return self


class SpotSettings(Strict):
    """Spot interruptions: a rate per pool (drawn with the scenario's seed) and/or a trace; the node
    goes ``noticePeriod`` after the notice (GCP 30s, AWS 2m)."""

    provider: Literal["gcp", "aws"] = "gcp"
    notice_period: Seconds | None = None
    interruptions_per_node_hour: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    trace: list[SpotInterruption] = Field(default_factory=list)


class QueuedCheck(Strict):
    """How one ProvisioningRequest admission check provisions: ``queued`` (all or nothing),
    ``flex-start`` (runs capped at ``maxRunDuration``) or ``calendar`` (a fixed window)."""

    mode: Literal["queued", "flex-start", "calendar"] = "queued"
    max_run_duration: PositiveSeconds | None = None
    window_start: Seconds | None = None
    window_end: PositiveSeconds | None = None

    @model_validator(mode="after")
    def _window(self) -> QueuedCheck:
        if (self.mode == "calendar") != (self.window_start is not None and self.window_end is not None):
            raise ValueError("calendar mode needs windowStart and windowEnd, and only it takes them")
        return self


class QueuedSettings(Strict):
    """Queued provisioning: an attempt that gets no capacity for ``attemptTimeout`` fails and is
    retried with the ProvisioningRequestConfig's backoff; ``checks`` per AdmissionCheck name."""

    attempt_timeout: PositiveSeconds = 1800.0
    checks: dict[str, QueuedCheck] = Field(default_factory=dict)


class StockSpec(Strict):
    """From ``from`` on, ``available`` nodes of (machineType, zone, capacityType) at once."""

    machine_type: str
    zone: str = ""
    capacity_type: Literal["reserved", "on-demand", "spot", "flex-start", "calendar"] = "on-demand"
    available: Annotated[int, Field(ge=0)]
    from_: Seconds = Field(default=0.0, alias="from")


class DisruptionBudgetSpec(Strict):
    """A PodDisruptionBudget over simulated pods (labels ``app``: the workload's class, ``queue``)."""

    name: str
    namespace: str
    selector: dict[str, str] = Field(default_factory=dict)
    min_available: Annotated[int, Field(ge=0)] | None = None
    max_unavailable: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _one(self) -> DisruptionBudgetSpec:
        if (self.min_available is None) == (self.max_unavailable is None):
            raise ValueError("give exactly one of minAvailable or maxUnavailable")
        return self


class ProvisioningSettings(Strict):
    """The simulator carries out provisioning decisions (gpuq.sim.provisioning.provisioner): autoscaled pools,
    compute classes, queued provisioning, spot interruptions, cost attribution."""

    autoscaling: bool = True
    consolidation: bool = True
    spot: SpotSettings = SpotSettings()
    queued: QueuedSettings = QueuedSettings()
    stock: list[StockSpec] = Field(default_factory=list)
    pod_disruption_budgets: list[DisruptionBudgetSpec] = Field(default_factory=list)
    do_not_disrupt_priority: int | None = None  # workloads at or above it are never consolidated
    idle_alert_after: PositiveSeconds = 1800.0


class Variant(Strict):
    name: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    description: str = ""
    config: list[str] | None = None  # replaces the scenario's configuration
    extra_config: list[str] = Field(default_factory=list)  # added to it
    queueing: Literal["kueue", "fcfs"] = "kueue"  # fcfs: no quotas, no priorities, no preemption
    fair_sharing: bool | None = None
    ignore_priorities: bool = False
    settings: SettingsOverride = SettingsOverride()
    provisioning: ProvisioningSettings | None = None  # replaces the scenario's spec.provisioning


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
    provisioning: ProvisioningSettings | None = (
        None  # autoscaling, DWS, spot, cost: gpuq.sim.provisioning.provisioner
    )

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
