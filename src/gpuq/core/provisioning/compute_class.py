"""Custom Compute Class decisions: which machine option a pending pod group gets, and migration.

Modelled on GKE's ``cloud.google.com/v1`` ComputeClass (docs/provisioning.md):

:func:`choose` answers "what should be provisioned for this pod group":

1. order the rules into tiers: with ``priorityScore``, by score, highest first (rules sharing a
   score form one tier); without, each rule is its own tier, top to bottom;
2. in each tier, list the candidates: options that match a rule of the tier, hold one pod on an
   empty node, and are in stock for the nodes the group needs (a gang needs all its nodes from
   one option; other groups take what is in stock);
3. the first tier with a candidate wins; among its candidates the best by the class's
   :data:`SortKey` (by default best fit, then price, then rule order, machine type and zone);
4. when no tier has one: ``ScaleUpAnyway`` provisions the best option outside the rules (GKE then
   falls back to a default machine series; gpuq takes any known option that holds a pod, by the
   same sort key, stock aside); ``DoNotScaleUp`` (GKE's default since 1.33) leaves the pods
   pending. Either way the decision lists which rule failed and why.

:func:`should_migrate` answers "should running nodes move back to a better rule" (GKE's
``activeMigration.optimizeRulePriority``): only when enabled, and only to a strictly better tier.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpuq.core.provisioning.options import GPU, MachineOption, PodGroup, Stock, option_allocatable
from gpuq.core.provisioning.prices import PriceCatalogue

WhenUnsatisfiable = Literal["ScaleUpAnyway", "DoNotScaleUp"]
Strategy = Literal["obtainability", "cost", "performance"]
ReservationAffinity = Literal["Specific", "AnyBestEffort", "None"]


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``priorities[]`` entry in core form; None fields do not constrain."""

    machine_family: str | None = None
    machine_type: str | None = None
    min_cores: int | None = None
    min_memory_gb: int | None = None
    spot: bool | None = None
    gpu_type: str | None = None
    gpu_count: int | None = None
    reservation_affinity: ReservationAffinity | None = None
    reservations: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    flex_start: bool = False
    nodepools: tuple[str, ...] = ()
    priority_score: int | None = None

    def describe(self) -> str:
        parts = [
            f"{name}={value}"
            for name, value in (
                ("machineFamily", self.machine_family),
                ("machineType", self.machine_type),
                ("minCores", self.min_cores),
                ("minMemoryGb", self.min_memory_gb),
                ("gpu", f"{self.gpu_count}x{self.gpu_type}" if self.gpu_type else None),
                ("spot", self.spot),
                ("reservations", self.reservation_affinity),
                ("zones", ",".join(self.zones) or None),
                ("flexStart", self.flex_start or None),
                ("priorityScore", self.priority_score),
            )
            if value is not None
        ]
        return " ".join(parts) or "any machine"


@dataclass(frozen=True, slots=True)
class ComputeClassPolicy:
    """A ComputeClass in core form."""

    name: str
    rules: tuple[Rule, ...]
    when_unsatisfiable: WhenUnsatisfiable = "DoNotScaleUp"
    optimize_rule_priority: bool = False
    strategy: Strategy | None = None


def rule_mismatch(rule: Rule, option: MachineOption) -> str | None:
    """Why ``option`` does not satisfy ``rule``, or None when it does."""
    checks: tuple[tuple[bool, str], ...] = (
        (rule.machine_family is not None and option.machine_family != rule.machine_family, "machine family"),
        (rule.machine_type is not None and option.machine_type != rule.machine_type, "machine type"),
        (rule.min_cores is not None and option.cores < rule.min_cores, "cores"),
        (rule.min_memory_gb is not None and option.memory_gb < rule.min_memory_gb, "memory"),
        (rule.gpu_type is not None and option.gpu_type != rule.gpu_type, "GPU type"),
        (rule.gpu_count is not None and option.gpu_count != rule.gpu_count, "GPU count"),
        (bool(rule.zones) and option.zone not in rule.zones, "zone"),
        (bool(rule.nodepools) and option.pool not in rule.nodepools, "node pool"),
        (_capacity_mismatch(rule, option), "capacity type"),
    )
    return next((what for failed, what in checks if failed), None)


def _capacity_mismatch(rule: Rule, option: MachineOption) -> bool:
    """Spot, flex-start and reservation rules each want their capacity type; plain rules want on-demand."""
    capacity = option.capacity_type
    if rule.flex_start:
        return capacity != "flex-start"
    if rule.spot:
        return capacity != "spot"
    if rule.reservation_affinity == "Specific":
        named = not rule.reservations or option.reservation in rule.reservations
        return capacity not in ("reserved", "calendar") or not named
    if rule.reservation_affinity == "AnyBestEffort":
        return capacity not in ("reserved", "calendar", "on-demand")
    return capacity != "on-demand"


@dataclass(frozen=True, slots=True)
class Candidate:
    """An option a rule allows, the nodes it gives the group and its price per node-hour."""

    rule_index: int
    option: MachineOption
    nodes: int
    pods_placed: int
    waste_milli: int
    usd_per_node_hour: float | None

    @property
    def usd_per_hour(self) -> float | None:
        return None if self.usd_per_node_hour is None else self.usd_per_node_hour * self.nodes


SortKey = Callable[[Candidate], tuple[object, ...]]


def best_fit_key(candidate: Candidate) -> tuple[object, ...]:
    """Best fit (least unused capacity), then price (unknown last), rule order, machine type, zone."""
    price = candidate.usd_per_hour
    return (
        -candidate.pods_placed,
        candidate.waste_milli,
        price is None,
        price or 0.0,
        candidate.rule_index,
        candidate.option.machine_type,
        candidate.option.zone,
        candidate.option.capacity_type,
    )


@dataclass(frozen=True, slots=True)
class RuleOutcome:
    """What one rule offered: ``status`` chosen / candidate / stock-out / no-match, and why."""

    rule_index: int
    status: str
    message: str


@dataclass(frozen=True, slots=True)
class ClassDecision:
    """The answer for one pod group: ``choice`` None when nothing is provisioned; ``reason`` says why."""

    compute_class: str
    group: str
    choice: Candidate | None
    reason: str
    outcomes: tuple[RuleOutcome, ...] = ()
    scale_up_anyway: bool = False
    tier: int | None = None


def tiers(rules: Sequence[Rule]) -> list[list[int]]:
    """Rule indexes grouped into tiers, best first (step 1)."""
    if rules and all(r.priority_score is not None for r in rules):
        scores = sorted({int(r.priority_score or 0) for r in rules}, reverse=True)
        return [[i for i, r in enumerate(rules) if r.priority_score == s] for s in scores]
    return [[i] for i in range(len(rules))]


def _waste_milli(group: PodGroup, option: MachineOption, nodes: int, pods: int) -> int:
    """Unused GPU (in thousandths) over the nodes, the measure of fit; CPU when there are no GPUs."""
    allocatable = option_allocatable(option)
    resource = GPU if group.shape.requests.get(GPU, 0) > 0 else "cpu"
    per_pod = group.shape.requests.get(resource, 0)
    total = allocatable.get(resource, 0) * nodes
    scale = 1000 if resource == GPU else 1
    return max(total - per_pod * pods, 0) * scale


def candidates_of(
    policy: ComputeClassPolicy,
    rule_index: int,
    group: PodGroup,
    options: Sequence[MachineOption],
    stock: Stock,
    prices: PriceCatalogue,
) -> tuple[list[Candidate], RuleOutcome]:
    """Step 2 for one rule: its in-stock candidates and a readable outcome."""
    rule = policy.rules[rule_index]
    matching = [o for o in options if rule_mismatch(rule, o) is None]
    fitting = [(o, group.nodes_on(o)) for o in matching]
    fitting = [(o, n) for o, n in fitting if n > 0]
    if not matching:
        return [], RuleOutcome(
            rule_index, "no-match", f"rule {rule_index} ({rule.describe()}): no machine option"
        )
    if not fitting:
        message = (
            f"rule {rule_index} ({rule.describe()}): one pod of {group.name} fits on none of its machines"
        )
        return [], RuleOutcome(rule_index, "no-match", message)
    found: list[Candidate] = []
    short: list[str] = []
    for option, needed in fitting:
        have = stock.of(option)
        nodes = needed if have is None else min(needed, have)
        if nodes < needed and (group.all_or_nothing or nodes == 0):
            short.append(f"{option.label()}: {have} of {needed} nodes in stock")
            continue
        per_node = group.shape.per_node(option_allocatable(option))
        pods = min(group.pods, nodes * per_node)
        price = prices.price(option.machine_type, option.capacity_type)
        found.append(
            Candidate(rule_index, option, nodes, pods, _waste_milli(group, option, nodes, pods), price)
        )
    if found:
        return found, RuleOutcome(
            rule_index, "candidate", f"rule {rule_index}: {len(found)} option(s) in stock"
        )
    message = f"rule {rule_index} ({rule.describe()}): stock-out ({'; '.join(short)})"
    return [], RuleOutcome(rule_index, "stock-out", message)


def choose(
    policy: ComputeClassPolicy,
    group: PodGroup,
    options: Sequence[MachineOption],
    stock: Stock,
    prices: PriceCatalogue,
    key: SortKey | None = None,
) -> ClassDecision:
    """What to provision for ``group`` under ``policy`` (steps 1-4 of the module docstring)."""
    sort_key = key or strategy_key(policy.strategy)
    outcomes: list[RuleOutcome] = []
    for tier_index, tier in enumerate(tiers(policy.rules)):
        found: list[Candidate] = []
        for rule_index in tier:
            candidates, outcome = candidates_of(policy, rule_index, group, options, stock, prices)
            found += candidates
            outcomes.append(outcome)
        if found:
            best = min(found, key=sort_key)
            outcomes = [_mark(o, best) for o in outcomes]
            reason = _chosen_reason(policy, group, best, tier_index, len(found))
            return ClassDecision(policy.name, group.name, best, reason, tuple(outcomes), tier=tier_index)
    return _unsatisfied(policy, group, options, prices, sort_key, tuple(outcomes))


def _mark(outcome: RuleOutcome, best: Candidate) -> RuleOutcome:
    if outcome.rule_index != best.rule_index:
        return outcome
    return RuleOutcome(outcome.rule_index, "chosen", f"rule {outcome.rule_index}: {best.option.label()}")


def _chosen_reason(
    policy: ComputeClassPolicy, group: PodGroup, best: Candidate, tier: int, count: int
) -> str:
    price = f", ${best.usd_per_hour:.2f}/h" if best.usd_per_hour is not None else ", price unknown"
    partial = (
        f" ({best.pods_placed} of {group.pods} pods: stock is short)" if best.pods_placed < group.pods else ""
    )
    rule = policy.rules[best.rule_index]
    why = "first satisfiable rule" if rule.priority_score is None else "highest satisfiable priorityScore"
    ties = f", best of {count} by {_key_name(policy.strategy)}" if count > 1 else ""
    return (
        f"ComputeClass {policy.name}: {best.nodes} x {best.option.label()} for {group.name}{partial} "
        f"({why} {best.rule_index}{ties}{price})"
    )


def _unsatisfied(
    policy: ComputeClassPolicy,
    group: PodGroup,
    options: Sequence[MachineOption],
    prices: PriceCatalogue,
    sort_key: SortKey,
    outcomes: tuple[RuleOutcome, ...],
) -> ClassDecision:
    """Step 4: no rule can be satisfied now."""
    failed = "; ".join(o.message for o in outcomes) or "the class has no rules"
    if policy.when_unsatisfiable == "DoNotScaleUp":
        reason = (
            f"ComputeClass {policy.name}: no rule can be satisfied for {group.name}, DoNotScaleUp: {failed}"
        )
        return ClassDecision(policy.name, group.name, None, reason, outcomes)
    anyway = [
        Candidate(
            -1,
            o,
            n,
            group.pods,
            _waste_milli(group, o, n, group.pods),
            prices.price(o.machine_type, o.capacity_type),
        )
        for o in options
        if (n := group.nodes_on(o)) > 0
    ]
    if not anyway:
        reason = (
            f"ComputeClass {policy.name}: ScaleUpAnyway, but no machine option holds a pod of {group.name}"
        )
        return ClassDecision(policy.name, group.name, None, reason, outcomes, scale_up_anyway=True)
    best = min(anyway, key=sort_key)
    reason = (
        f"ComputeClass {policy.name}: no rule can be satisfied ({failed}); ScaleUpAnyway: "
        f"{best.nodes} x {best.option.label()} outside the rules"
    )
    return ClassDecision(policy.name, group.name, best, reason, outcomes, scale_up_anyway=True)


# --- strategies ---------------------------------------------------------------------------------

GPU_SPEED_RANK: Mapping[str, int] = {
    "nvidia-gb200": 100,
    "nvidia-b200": 90,
    "nvidia-h200-141gb": 80,
    "nvidia-h100-mega-80gb": 72,
    "nvidia-h100-80gb": 70,
    "nvidia-a100-80gb": 50,
    "nvidia-tesla-a100": 45,
    "nvidia-l4": 30,
    "nvidia-tesla-t4": 10,
}
"""Rough training-speed order of GKE accelerator names for the performance preset (higher first)."""


def strategy_key(strategy: Strategy | None) -> SortKey:
    """How ties inside a tier are broken: best fit then price by default; cost puts price first;
    performance the fastest GPU; obtainability the option with the most stock (unlimited first)."""
    if strategy == "cost":
        return lambda c: (-c.pods_placed, c.usd_per_hour is None, c.usd_per_hour or 0.0, *best_fit_key(c)[1:])
    if strategy == "performance":
        return lambda c: (-GPU_SPEED_RANK.get(c.option.gpu_type or "", 0), *best_fit_key(c))
    return best_fit_key


def _key_name(strategy: Strategy | None) -> str:
    return {"cost": "price", "performance": "GPU speed"}.get(strategy or "", "fit then price")


# --- active migration ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MigrationDecision:
    """Whether nodes on ``current_rule`` should move to ``target`` (a better tier), and why."""

    migrate: bool
    reason: str
    target: Candidate | None = None
    outcomes: tuple[RuleOutcome, ...] = field(default_factory=tuple)


def should_migrate(
    policy: ComputeClassPolicy,
    current_rule: int,
    group: PodGroup,
    options: Sequence[MachineOption],
    stock: Stock,
    prices: PriceCatalogue,
) -> MigrationDecision:
    """Move ``group`` (now on rule ``current_rule``) back to a strictly better tier when one has stock.

    Never migrates when ``optimize_rule_priority`` is off, and never sideways within a tier.
    """
    if not policy.optimize_rule_priority:
        return MigrationDecision(False, f"ComputeClass {policy.name}: activeMigration is off")
    order = tiers(policy.rules)
    current_tier = next((t for t, tier in enumerate(order) if current_rule in tier), len(order))
    better = ComputeClassPolicy(policy.name, policy.rules, "DoNotScaleUp", True, policy.strategy)
    decision = choose(better, group, options, stock, prices)
    if decision.choice is None or decision.tier is None or decision.tier >= current_tier:
        return MigrationDecision(
            False,
            f"ComputeClass {policy.name}: no better rule than {current_rule} is available",
            None,
            decision.outcomes,
        )
    target = decision.choice
    if group.all_or_nothing and target.pods_placed < group.pods:
        return MigrationDecision(
            False, f"ComputeClass {policy.name}: rule {target.rule_index} cannot hold all pods"
        )
    reason = (
        f"ComputeClass {policy.name}: rule {target.rule_index} is available again "
        f"({target.nodes} x {target.option.label()}): migrate {group.name} from rule {current_rule}"
    )
    return MigrationDecision(True, reason, target, decision.outcomes)
