"""Karpenter-style disruption: consolidation candidates within disruption budgets and PDBs.

Input is plain data: nodes with their pods (:class:`NodeState`), PodDisruptionBudgets
(:class:`PDB`) and each pool's :class:`DisruptionPolicy` (Karpenter's ``spec.disruption``).

:func:`allowed_disruptions` is Karpenter's budget rule: each budget allows ``nodes`` (an integer,
or a percentage of the pool's nodes rounded up) minus the nodes already being deleted; a budget
applies when its ``reasons`` list the reason (or is empty); the most restrictive budget wins; a
pool with no budget gets Karpenter's default of ``10%``. Budgets with a ``schedule`` are treated as
always active (gpuq keeps no cron), which can only block more, never less.

:func:`plan_consolidation`:

1. candidates: nodes of pools whose policy allows the reason - empty nodes (``Empty``) under both
   policies, non-empty ones (``Underutilized``) only under ``WhenEmptyOrUnderutilized`` - that
   have been in that state for ``consolidateAfter`` (``since``);
2. skip nodes running a pod that may not be disrupted (``do_not_disrupt``, Karpenter's
   ``karpenter.sh/do-not-disrupt``: gpuq sets it for non-preemptible workloads);
3. in order ``(empty first, fewest pods, least requested, name)``, take a candidate when its pool's
   budget has room, every PDB covering its pods still allows the evictions, and its pods fit on
   the free room of nodes that stay (first fit, nodes by name);
4. return the chosen nodes with a reason each, and the skipped ones with why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

ConsolidationPolicy = Literal["WhenEmpty", "WhenEmptyOrUnderutilized"]
DisruptionReason = Literal["Empty", "Underutilized", "Drifted"]
DEFAULT_BUDGET = "10%"


@dataclass(frozen=True, slots=True)
class Budget:
    """Karpenter's ``disruption.budgets[]``: ``nodes`` as ``"3"`` or ``"20%"``."""

    nodes: str = DEFAULT_BUDGET
    reasons: tuple[str, ...] = ()
    schedule: str | None = None
    duration_s: float | None = None


@dataclass(frozen=True, slots=True)
class DisruptionPolicy:
    """Karpenter's NodePool ``spec.disruption`` (defaults as Karpenter v1: WhenEmptyOrUnderutilized, 0s)."""

    consolidation_policy: ConsolidationPolicy = "WhenEmptyOrUnderutilized"
    consolidate_after_s: float = 0.0
    budgets: tuple[Budget, ...] = ()
    expire_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A running pod: its requests (core units), labels (for PDB selectors) and whether it may move."""

    name: str
    namespace: str = "default"
    requests: Mapping[str, int] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    do_not_disrupt: bool = False


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node of a pool: its pods, allocatable, since when it is idle / in its current use, and
    whether it is already being deleted."""

    name: str
    pool: str
    allocatable: Mapping[str, int] = field(default_factory=dict)
    pods: tuple[PodInfo, ...] = ()
    idle_since: float | None = None
    since: float = 0.0
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class PDB:
    """A PodDisruptionBudget: pods matching ``selector`` in ``namespace``; ``healthy`` of them run now.

    Exactly one of ``min_available`` / ``max_unavailable`` is set (integers; resolve percentages first).
    """

    name: str
    namespace: str
    selector: Mapping[str, str]
    healthy: int
    min_available: int | None = None
    max_unavailable: int | None = None
    unavailable: int = 0

    def covers(self, pod: PodInfo) -> bool:
        return pod.namespace == self.namespace and all(
            pod.labels.get(k) == v for k, v in self.selector.items()
        )

    def allowed(self) -> int:
        """Evictions allowed now (Kubernetes' ``disruptionsAllowed``)."""
        if self.min_available is not None:
            return max(self.healthy - self.min_available, 0)
        return max((self.max_unavailable or 0) - self.unavailable, 0)


def budget_nodes(budget: Budget, total: int) -> int:
    """Nodes a budget allows for a pool of ``total`` nodes; percentages round up (as Karpenter)."""
    text = budget.nodes.strip()
    if text.endswith("%"):
        return math.ceil(total * int(text[:-1]) / 100)
    return int(text)


def allowed_disruptions(policy: DisruptionPolicy, total: int, deleting: int, reason: str, now: float) -> int:
    """How many more nodes of a pool may be disrupted for ``reason`` now (the tightest budget)."""
    budgets = policy.budgets or (Budget(),)
    applicable = [b for b in budgets if not b.reasons or reason in b.reasons]
    if not applicable:
        return max(total, 0)
    return max(min(budget_nodes(b, total) for b in applicable) - deleting, 0)


@dataclass(frozen=True, slots=True)
class Consolidation:
    """A node to remove (its pods rescheduled) with the Karpenter reason and a readable one."""

    node: str
    pool: str
    disruption_reason: DisruptionReason
    reason: str


@dataclass(frozen=True, slots=True)
class Skipped:
    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class ConsolidationPlan:
    remove: tuple[Consolidation, ...]
    skipped: tuple[Skipped, ...]


def _requested(node: NodeState) -> int:
    return sum(sum(p.requests.values()) for p in node.pods)


def _eligible(node: NodeState, policy: DisruptionPolicy, now: float) -> str | None:
    """Steps 1-2: why ``node`` is not a candidate, or None."""
    if node.deleting:
        return "already being deleted"
    if node.pods and policy.consolidation_policy == "WhenEmpty":
        return "not empty and consolidationPolicy is WhenEmpty"
    if now - node.since < policy.consolidate_after_s:
        return f"consolidateAfter {policy.consolidate_after_s:.0f}s not reached"
    blocked = [p.name for p in node.pods if p.do_not_disrupt]
    if blocked:
        return f"pod(s) {', '.join(blocked)} may not be disrupted"
    return None


def plan_consolidation(
    nodes: Sequence[NodeState],
    policies: Mapping[str, DisruptionPolicy],
    pdbs: Sequence[PDB],
    now: float,
) -> ConsolidationPlan:
    """Nodes to consolidate away (steps 1-4 of the module docstring); the inputs are not changed."""
    remove: list[Consolidation] = []
    skipped: list[Skipped] = []
    pdb_left = {(b.namespace, b.name): b.allowed() for b in pdbs}
    free = {n.name: _free(n) for n in nodes}
    taken: dict[str, int] = {}
    marks: set[str] = set()
    order = sorted(nodes, key=lambda n: (bool(n.pods), len(n.pods), _requested(n), n.name))
    for node in order:
        policy = policies.get(node.pool, DisruptionPolicy())
        why = _eligible(node, policy, now)
        if why is not None:
            skipped.append(Skipped(node.name, why))
            continue
        reason: DisruptionReason = "Underutilized" if node.pods else "Empty"
        why = _blocked(
            node, nodes, policy, reason, taken, pdbs, pdb_left, free, {r.node for r in remove}, now
        )
        if why is not None:
            skipped.append(Skipped(node.name, why))
            continue
        taken[node.pool] = taken.get(node.pool, 0) + 1
        marks.add(node.name)
        what = "empty" if reason == "Empty" else f"its {len(node.pods)} pod(s) fit on the other nodes"
        remove.append(Consolidation(node.name, node.pool, reason, f"{node.name}: {what} ({reason})"))
    return ConsolidationPlan(tuple(remove), tuple(skipped))


def _blocked(
    node: NodeState,
    nodes: Sequence[NodeState],
    policy: DisruptionPolicy,
    reason: str,
    taken: Mapping[str, int],
    pdbs: Sequence[PDB],
    pdb_left: dict[tuple[str, str], int],
    free: dict[str, dict[str, int]],
    removed: set[str],
    now: float,
) -> str | None:
    """Step 3 for one candidate; on success the PDB allowances and free room are consumed, and the
    nodes that receive its pods are marked (``removed`` holds them with a ``+`` prefix) so they are
    not consolidated in the same plan."""
    if f"+{node.name}" in removed:
        return "receives pods of a node consolidated in this plan"
    pool_nodes = [n for n in nodes if n.pool == node.pool]
    deleting = sum(n.deleting for n in pool_nodes) + taken.get(node.pool, 0)
    if allowed_disruptions(policy, len(pool_nodes), deleting, reason, now) <= 0:
        return f"disruption budget of pool {node.pool} is used up"
    needs: dict[tuple[str, str], int] = {}
    for pod in node.pods:
        for pdb in pdbs:
            if pdb.covers(pod):
                key = (pdb.namespace, pdb.name)
                needs[key] = needs.get(key, 0) + 1
    for key, count in sorted(needs.items()):
        if pdb_left[key] < count:
            return f"PodDisruptionBudget {key[0]}/{key[1]} allows {pdb_left[key]} eviction(s), {count} needed"
    placement = _fit(node, nodes, free, removed)
    if placement is None:
        return "its pods do not fit on the remaining nodes"
    for key, count in needs.items():
        pdb_left[key] -= count
    for target, requests in placement:
        removed.add(f"+{target}")
        for name, amount in requests.items():
            free[target][name] -= amount
    return None


def _free(node: NodeState) -> dict[str, int]:
    room = dict(node.allocatable)
    for pod in node.pods:
        for name, amount in pod.requests.items():
            room[name] = room.get(name, 0) - amount
    return room


def _fit(
    node: NodeState, nodes: Sequence[NodeState], free: Mapping[str, dict[str, int]], removed: set[str]
) -> list[tuple[str, Mapping[str, int]]] | None:
    """First fit of ``node``'s pods (largest first) on staying nodes of its pool, by name."""
    room = {n.name: dict(free[n.name]) for n in nodes if n.pool == node.pool and n.name != node.name}
    room = {k: v for k, v in room.items() if k not in removed}
    out: list[tuple[str, Mapping[str, int]]] = []
    for pod in sorted(node.pods, key=lambda p: (-sum(p.requests.values()), p.name)):
        target = next(
            (
                name
                for name in sorted(room)
                if all(room[name].get(r, 0) >= a for r, a in pod.requests.items())
            ),
            None,
        )
        if target is None:
            return None
        for r, a in pod.requests.items():
            room[target][r] = room[target].get(r, 0) - a
        out.append((target, pod.requests))
    return out
