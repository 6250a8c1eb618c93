"""What the simulator's provisioning needs, read from a variant's configuration and Scenario.

:func:`provisioning_setup` turns the NodePools (:func:`gpuq.api.nodes_convert.pool_specs`), the
ComputeClasses, the price catalogue (bundled, with PriceCatalogue overrides), the
ProvisioningRequest admission checks and the Scenario's ``spec.provisioning`` into a
:class:`ProvisioningSetup` of plain data. Pools that can change size (``max`` above their count,
or ``autoscaling`` written) are expanded to ``max`` nodes; the nodes above the starting count
(the pool's ``count``, else its ``min``) start down and join when the autoscaler asks for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuq.api import kueue, nodes_convert
from gpuq.api.compute_class import ComputeClass, to_policy
from gpuq.api.diagnostics import Diagnostic
from gpuq.api.loader import LoadResult
from gpuq.api.machines import NodePool
from gpuq.api.provisioning_prices import catalogue_with
from gpuq.api.scenario import ProvisioningSettings
from gpuq.core.nodes import Node
from gpuq.core.provisioning.autoscaler import PoolSpec
from gpuq.core.provisioning.compute_class import ComputeClassPolicy
from gpuq.core.provisioning.disruption import PDB
from gpuq.core.provisioning.options import StockStep
from gpuq.core.provisioning.prices import PriceCatalogue
from gpuq.core.provisioning.queued import Mode, RetryStrategy

PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
FLEX_CLASS = "queued-provisioning.gke.io"
NOTICE_S = {"gcp": 30.0, "aws": 120.0}
"""Spot preemption notices: GCP gives 30 s, AWS two minutes."""


@dataclass(frozen=True, slots=True)
class CheckPlan:
    """How one ProvisioningRequest admission check provisions."""

    name: str
    mode: Mode = "queued"
    retry: RetryStrategy = field(default_factory=RetryStrategy)
    max_run_s: float | None = None
    window: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class Interruption:
    """A traced spot interruption notice at ``at_s`` for ``node`` or ``count`` nodes of ``pool``."""

    at_s: float
    node: str | None = None
    pool: str | None = None
    count: int = 1


@dataclass(frozen=True, slots=True)
class ProvisioningSetup:
    """Plain data for :class:`gpuq.sim.provisioning.provisioner.Provisioner`."""

    pools: tuple[PoolSpec, ...]
    start_counts: Mapping[str, int]
    stock: tuple[StockStep, ...] = ()
    classes: Mapping[str, ComputeClassPolicy] = field(default_factory=dict)
    prices: PriceCatalogue = field(default_factory=PriceCatalogue)
    checks: Mapping[str, CheckPlan] = field(default_factory=dict)
    consolidating: frozenset[str] = frozenset()  # pools that write spec.disruption
    autoscaling: bool = True
    consolidation: bool = True
    notice_s: float = 30.0
    interruption_rates: Mapping[str, float] = field(default_factory=dict)  # pool -> per node-hour
    interruptions: tuple[Interruption, ...] = ()
    attempt_timeout_s: float = 1800.0
    pdbs: tuple[PDB, ...] = ()
    do_not_disrupt_priority: int | None = None
    idle_alert_s: float = 1800.0
    seed: int = 0


def scalable(pool: NodePool) -> bool:
    """A pool whose size can change: ``max`` above its count, or ``autoscaling`` written."""
    count, _low, high = pool.spec.sizes()
    return high > count or pool.spec.autoscaling is not None


def pools_of(result: LoadResult) -> dict[str, NodePool]:
    return {str(m.model.metadata.name): m.model for m in result.manifests if isinstance(m.model, NodePool)}


def spare_nodes(result: LoadResult) -> list[Node]:
    """Nodes of scalable pools from their starting count up to ``max`` (they start down)."""
    spares: list[Node] = []
    for _name, pool in sorted(pools_of(result).items()):
        count, _low, high = pool.spec.sizes()
        if scalable(pool):
            spares += nodes_convert.expand_pool(pool, result.gpu_catalogue, high)[count:]
    return spares


def unserved_flavors(result: LoadResult, nodes: Sequence[Node]) -> list[Diagnostic]:
    """Flavors a ClusterQueue gives quota to that no node carries the labels of, counting every node
    the provisioning may ever bring up (pools expanded to ``max``): errors, because Kueue admits on
    quota alone, so their workloads would hold quota for the whole run and never start."""
    assert result.config is not None
    quota = {
        flavor.name
        for queue in result.config.cluster_queues.values()
        for group in queue.resource_groups
        for flavor in group.flavors
        if any(q.nominal > 0 or q.borrowing_limit != 0 for q in flavor.resources.values())
    }
    out: list[Diagnostic] = []
    for manifest in result.manifests:
        flavor = result.config.flavors.get(manifest.name)
        if not isinstance(manifest.model, kueue.ResourceFlavor) or flavor is None or flavor.name not in quota:
            continue
        if any(all(n.labels.get(k) == v for k, v in flavor.node_labels.items()) for n in nodes):
            continue
        wanted = ", ".join(f"{k}={v}" for k, v in sorted(flavor.node_labels.items()))
        message = (
            f"no node of any pool, even scaled to its max, carries {wanted}: workloads given this "
            "flavor would hold its quota and never start (label the pool that should serve it)"
        )
        out.append(manifest.diagnostic(("spec", "nodeLabels"), message))
    return out


def node_price(pool: NodePool, catalogue: PriceCatalogue) -> float:
    """The pool's written ``price``, else the catalogue's for its machine and capacity type, else 0."""
    if pool.spec.price is not None:
        return pool.spec.price
    return catalogue.price(pool.spec.machine_type, pool.spec.capacity_type) or 0.0


def provisioning_setup(result: LoadResult, settings: ProvisioningSettings, seed: int) -> ProvisioningSetup:
    """The setup of one variant (only valid configurations are converted)."""
    pools = pools_of(result)
    specs, steps = nodes_convert.pool_specs(result.manifests)
    catalogue = catalogue_with(result.manifests)
    specs = tuple(
        s if s.usd_per_node_hour is not None else _priced(s, node_price(pools[s.name], catalogue))
        for s in specs
    )
    extra = tuple(
        StockStep(s.machine_type, s.zone, s.capacity_type, s.available, s.from_) for s in settings.stock
    )
    spot = settings.spot
    return ProvisioningSetup(
        pools=specs,
        start_counts={name: pool.spec.sizes()[0] for name, pool in pools.items()},
        stock=(*steps, *extra),
        classes={
            str(m.model.metadata.name): to_policy(m.model)
            for m in result.manifests
            if isinstance(m.model, ComputeClass)
        },
        prices=catalogue,
        checks=_checks(result, settings),
        consolidating=frozenset(n for n, p in pools.items() if p.spec.disruption is not None),
        autoscaling=settings.autoscaling,
        consolidation=settings.consolidation,
        notice_s=spot.notice_period if spot.notice_period is not None else NOTICE_S[spot.provider],
        interruption_rates=dict(spot.interruptions_per_node_hour),
        interruptions=tuple(Interruption(i.at, i.node, i.pool, i.count) for i in spot.trace),
        attempt_timeout_s=settings.queued.attempt_timeout,
        pdbs=tuple(
            PDB(b.name, b.namespace, dict(b.selector), 0, b.min_available, b.max_unavailable)
            for b in settings.pod_disruption_budgets
        ),
        do_not_disrupt_priority=settings.do_not_disrupt_priority,
        idle_alert_s=settings.idle_alert_after,
        seed=seed,
    )


def _priced(spec: PoolSpec, price: float) -> PoolSpec:
    import dataclasses

    return dataclasses.replace(spec, usd_per_node_hour=price)


def _checks(result: LoadResult, settings: ProvisioningSettings) -> dict[str, CheckPlan]:
    """AdmissionChecks of the ProvisioningRequest controller, with their config's retry strategy;
    the flex-start class reads ``maxRunDurationSeconds``; ``spec.provisioning.queued.checks``
    sets the mode and window (calendar) per check."""
    configs = {
        str(m.model.metadata.name): m.model
        for m in result.manifests
        if isinstance(m.model, kueue.ProvisioningRequestConfig)
    }
    plans: dict[str, CheckPlan] = {}
    for manifest in result.manifests:
        check = manifest.model
        if (
            not isinstance(check, kueue.AdmissionCheck)
            or check.spec.controller_name != PROVISIONING_CONTROLLER
        ):
            continue
        name = str(check.metadata.name)
        params = check.spec.parameters
        config = configs.get(params.name) if params is not None else None
        retry = RetryStrategy()
        mode: Mode = "queued"
        max_run: float | None = None
        if config is not None:
            r = config.spec.retry_strategy
            retry = RetryStrategy(r.backoff_limit_count, r.backoff_base_seconds, r.backoff_max_seconds)
            if config.spec.provisioning_class_name == FLEX_CLASS:
                mode = "flex-start"
                written = config.spec.parameters.get("maxRunDurationSeconds")
                max_run = float(written) if written else None
        given = settings.queued.checks.get(name)
        window: tuple[float, float] | None = None
        if given is not None:
            mode = given.mode
            max_run = given.max_run_duration if given.max_run_duration is not None else max_run
            if given.window_start is not None and given.window_end is not None:
                window = (given.window_start, given.window_end)
        plans[name] = CheckPlan(
            name,
            mode,
            retry,
            max_run if mode == "flex-start" else None,
            window if mode == "calendar" else None,
        )
    return plans
