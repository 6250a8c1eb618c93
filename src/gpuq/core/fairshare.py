"""Fair sharing: dominant resource shares, the admission tournament, fair preemption (kueue-semantics §7).

Admission order (§7.3, Kueue's ``fairSharingIterator``), one pick at a time:

1. A cluster queue without a cohort yields its entry as it comes.
2. In a cohort tree, the first entry of every queue has its usage added and
   the DRS of the queue and of each ancestor is recorded per (parent, entry).
3. A tournament runs bottom-up: at each cohort the best child wins by
   [gate FairSharingPrioritizeNonBorrowing] not borrowing on the entry's
   (flavor, resource)s, then lower DRS, higher priority, earlier creation,
   then key (for determinism only).
4. The root winner is yielded. The caller processes it, so its usage is in
   the tree, before the next pick recomputes every share.

Preemption (§7.4-7.6, Kueue's ``FairPreemptionPlan`` and ``fairPreemptions``):

1. Candidates: the own queue per ``withinClusterQueue``; every queue of the
   tree borrowing in a needed (flavor, resource), per ``reclaimWithinCohort``;
   sorted as §6.5. ``borrowWithinCohort`` plays no part.
2. The incoming usage is added; target queues are visited highest DRS first
   (§7.5). The own queue yields its next candidate (InClusterQueue); a
   preemptor within nominal [gate FairSharingPreemptWithinNominal] takes the
   target's next candidate (InCohortReclamation); otherwise the first
   strategy compares shares at the almost-LCA (InCohortFairSharing) and
   failures go to a retry list.
3. With a second strategy, S2-b runs over the retry list, at most one
   workload per target queue.
4. Without a fit there are no targets; with one, the §6.8 fill-back runs with
   borrowing allowed. The state is restored in every case.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

from gpuq.core.model import FairSharing, FairSharingStrategy, PreemptionPolicy
from gpuq.core.preemption import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    IN_COHORT_RECLAMATION,
    Preemptor,
    Target,
    candidate_order_key,
    classical_targets,
    satisfies_policy,
    uses_resources,
    workload_fits,
)
from gpuq.core.quota import FlavorResource, QuotaNode, potential_available
from gpuq.core.state import AdmittedWorkload, ClusterState

if TYPE_CHECKING:
    from gpuq.core.admission import Entry

GATE_DEFAULTS: Mapping[str, bool] = {
    "FairSharingPrioritizeNonBorrowing": True,  # beta
    "FairSharingPreemptWithinNominal": True,  # beta
    "FairSharingReevaluatePreemptionCandidates": False,  # alpha
    "PrioritySortingWithinCohort": True,  # beta
}

DEFAULT_STRATEGIES = (
    FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
    FairSharingStrategy.LESS_THAN_INITIAL_SHARE,
)


@dataclass(frozen=True, slots=True)
class DominantShare:
    """A node's dominant resource share (§7.2); compare with :func:`share_key`."""

    weight: Fraction
    ratio: Fraction  # borrowed × 1000 / lendable, unweighted
    resource: str
    borrowing: bool
    borrowed_frs: tuple[FlavorResource, ...] = ()

    @property
    def zero_weight_borrows(self) -> bool:
        return self.weight == 0 and self.borrowing

    @property
    def weighted(self) -> float:
        """The precise weighted share; +inf for a borrowing node of weight 0."""
        if self.zero_weight_borrows:
            return math.inf
        if self.ratio == 0:
            return 0.0
        return float(self.ratio / self.weight)

    def borrowing_on(self, requested: Mapping[FlavorResource, int]) -> bool:
        return any(requested.get(fr, 0) > 0 for fr in self.borrowed_frs)


def share_key(share: DominantShare) -> tuple[int, Fraction]:
    """Sort key: lower is preferred for admission, higher for preemption (Kueue's CompareDRS)."""
    if share.zero_weight_borrows:
        return (1, share.ratio)
    if share.ratio == 0:
        return (0, Fraction(0))
    return (0, share.ratio / share.weight)


def lendable(node: QuotaNode) -> dict[str, int]:
    """Per resource name, what ``node`` could lend across every flavor of its tree."""
    root = node.root()
    totals: dict[str, int] = {}
    for fr in root.subtree_quota:
        totals[fr[1]] = totals.get(fr[1], 0) + potential_available(node, fr)
    return totals


def dominant_share(
    node: QuotaNode, weight: Fraction, extra: Mapping[FlavorResource, int] | None = None
) -> DominantShare:
    """DRS of ``node`` with ``extra`` usage added: max over resources of borrowed × 1000 / lendable."""
    if node.parent is None:
        return DominantShare(weight, Fraction(0), "", False)
    extra = extra or {}
    borrowed: dict[str, int] = {}
    borrowed_frs: list[FlavorResource] = []
    for fr, quota in node.subtree_quota.items():
        amount = extra.get(fr, 0) + node.usage.get(fr, 0) - quota
        if amount > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + amount
            borrowed_frs.append(fr)
    if not borrowed:
        return DominantShare(weight, Fraction(0), "", False)
    can_lend = lendable(node.parent)
    ratio, dominant = Fraction(0), ""
    for resource in sorted(borrowed):
        lr = can_lend.get(resource, 0)
        if lr > 0:
            value = Fraction(borrowed[resource] * 1000, lr)
            if value > ratio:
                ratio, dominant = value, resource
    return DominantShare(weight, ratio, dominant, True, tuple(borrowed_frs))


def gate(state: ClusterState, name: str) -> bool:
    """A Kueue feature gate, as configured or at its default."""
    return state.config.scheduler.feature_gates.get(name, GATE_DEFAULTS[name])


def weight_of(state: ClusterState, node: QuotaNode) -> Fraction:
    """The fair-sharing weight of a queue or cohort; 1 for a cohort only named by its children."""
    if node.is_cluster_queue:
        cq = state.config.cluster_queues.get(node.name)
        return cq.fair_weight if cq else Fraction(1)
    cohort = state.config.cohorts.get(node.name)
    return cohort.fair_weight if cohort else Fraction(1)


def node_share(state: ClusterState, node: QuotaNode) -> DominantShare:
    """DRS of a node with the usage currently in the tree."""
    return dominant_share(node, weight_of(state, node))


def compare_shares(a: DominantShare, b: DominantShare) -> int:
    """Kueue's CompareDRS: -1, 0 or 1."""
    ka, kb = share_key(a), share_key(b)
    return (ka > kb) - (ka < kb)


def subtree_queues(node: QuotaNode) -> list[QuotaNode]:
    """Cluster queues under ``node`` (itself when it is one), children in tree order."""
    if node.is_cluster_queue:
        return [node]
    return [cq for child in node.children for cq in subtree_queues(child)]


# ---------------------------------------------------------------- admission order (§7.3)
def order_entries(state: ClusterState, entries: Sequence[Entry]) -> Iterator[Entry]:
    """§7.3: the entries in fair-sharing order, one pick at a time.

    Lazy on purpose: each pick reads the live ``state.tree``, so the caller
    must add a processed entry's usage before asking for the next one (as
    ``Scheduler.plan_cycle`` does). Trees are served one after the other,
    ordered by root name; queues without a cohort count as their own tree.
    """
    pending = _by_queue(entries)
    while pending:
        name = min(pending, key=lambda n: _tree_key(state.node(n)))
        node = state.node(name)
        if node.parent is not None:
            name = _Tournament.run_for(state, node.root(), pending).cluster_queue
        queued = pending[name]
        yield queued.pop(0)
        if not queued:
            del pending[name]


def _by_queue(entries: Sequence[Entry]) -> dict[str, list[Entry]]:
    """Entries per queue, each list in the classical order of §3.5 (Kueue's compareEntries)."""
    grouped: dict[str, list[Entry]] = {}
    for entry in entries:
        grouped.setdefault(entry.cluster_queue, []).append(entry)
    for queued in grouped.values():
        queued.sort(key=_entry_key)
    return grouped


def _entry_key(entry: Entry) -> tuple[int, int, float, str]:
    borrowing = entry.assignment.borrowing if entry.assignment else 0
    return (borrowing, -entry.workload.priority, entry.workload.creation_time, entry.key)


def _tree_key(node: QuotaNode) -> tuple[str, bool]:
    root = node.root()
    return (root.name, root.is_cluster_queue)


def _usage(entry: Entry) -> Mapping[FlavorResource, int]:
    return entry.assignment.usage if entry.assignment else {}


@dataclass(frozen=True, slots=True)
class _Tournament:
    """One pick of Kueue's runTournament over a cohort tree."""

    shares: Mapping[tuple[str, str], DominantShare]  # (parent cohort, entry key) -> child's DRS
    prefer_non_borrowing: bool
    by_priority: bool

    @classmethod
    def run_for(cls, state: ClusterState, root: QuotaNode, pending: Mapping[str, list[Entry]]) -> Entry:
        """Steps 2 and 3: record the shares with each entry added, then play from the root."""
        shares: dict[tuple[str, str], DominantShare] = {}
        for cq in subtree_queues(root):
            queued = pending.get(cq.name)
            if not queued:
                continue
            entry = queued[0]
            with state.simulate_usage(cq.name, _usage(entry)):
                share = node_share(state, cq)
                for ancestor in cq.path_to_root():
                    shares[(ancestor.name, entry.key)] = share
                    share = node_share(state, ancestor)
        tournament = cls(
            shares,
            gate(state, "FairSharingPrioritizeNonBorrowing"),
            gate(state, "PrioritySortingWithinCohort"),
        )
        winner = tournament.play(root, pending)
        assert winner is not None, "a tree with a pending entry always has a winner"
        return winner

    def play(self, cohort: QuotaNode, pending: Mapping[str, list[Entry]]) -> Entry | None:
        """The winner among child cohorts' winners and child queues' first entries."""
        candidates = [w for c in cohort.child_cohorts() if (w := self.play(c, pending)) is not None]
        candidates += [pending[q.name][0] for q in cohort.child_queues() if q.name in pending]
        if not candidates:
            return None
        best = candidates[0]
        for current in candidates[1:]:
            if self.less(current, best, cohort.name):
                best = current
        return best

    def less(self, a: Entry, b: Entry, parent: str) -> bool:
        """Kueue's entryComparer.less at the level of ``parent``."""
        share_a, share_b = self.shares[(parent, a.key)], self.shares[(parent, b.key)]
        if self.prefer_non_borrowing:
            borrows_a, borrows_b = share_a.borrowing_on(_usage(a)), share_b.borrowing_on(_usage(b))
            if borrows_a != borrows_b:
                return not borrows_a
        order = compare_shares(share_a, share_b)
        if order:
            return order < 0
        if self.by_priority and a.workload.priority != b.workload.priority:
            return a.workload.priority > b.workload.priority
        if a.workload.creation_time != b.workload.creation_time:
            return a.workload.creation_time < b.workload.creation_time
        return a.key < b.key


# ---------------------------------------------------------------- preemption (§7.4-7.6)
def preemption_targets(state: ClusterState, preemptor: Preemptor) -> list[Target]:
    """Kueue's getPreemptionPlan dispatch: fair when fair sharing is on, classical otherwise.

    The flavor assigner's preemption oracle should call this (Kueue's
    ``SimulatePreemption`` runs the same plan as the real preemption).
    """
    fair_sharing = state.config.scheduler.fair_sharing
    if fair_sharing.enable:
        return fair_targets(state, preemptor, fair_sharing)
    return classical_targets(state, preemptor)


def fair_targets(state: ClusterState, preemptor: Preemptor, config: FairSharing) -> list[Target]:
    """§7.6: victims chosen by fair-sharing preemption; empty when it cannot make room.

    1. Candidates (:func:`find_candidates`); none means no targets.
    2. With the incoming usage added, the first strategy pass (twice with gate
       FairSharingReevaluatePreemptionCandidates when it took own-queue
       workloads), stopping as soon as the preemptor fits without its own usage.
    3. With a second strategy, S2-b over the retry list.
    4. No fit: no targets. Fit: the §6.8 fill-back with borrowing allowed.

    The tree holds exactly the same usage when this returns or raises.
    """
    candidates = find_candidates(state, preemptor)
    if not candidates:
        return []
    search = _Search(state, preemptor)
    try:
        with state.simulate_usage(preemptor.cluster_queue, preemptor.usage):
            fits = _run_strategies(search, candidates, config.preemption_strategies or DEFAULT_STRATEGIES)
        if not fits:
            return []
        return _fill_back(state, preemptor, search.removed)
    finally:
        for target in search.removed:
            state.tree.add(target.victim.cluster_queue, target.victim.usage)


def find_candidates(state: ClusterState, preemptor: Preemptor) -> list[AdmittedWorkload]:
    """§7.4 (Kueue's findCandidates), sorted by §6.5."""
    cq = state.cluster_queue(preemptor.cluster_queue)
    node = state.node(preemptor.cluster_queue)
    found: list[AdmittedWorkload] = []
    if cq.preemption.within_cluster_queue != PreemptionPolicy.NEVER:
        found += _matching(state, preemptor, node, cq.preemption.within_cluster_queue)
    if node.parent is not None and cq.preemption.reclaim_within_cohort != PreemptionPolicy.NEVER:
        for other in subtree_queues(node.root()):
            if other is not node and _borrowing_in(other, preemptor.frs_need_preemption):
                found += _matching(state, preemptor, other, cq.preemption.reclaim_within_cohort)
    found.sort(key=lambda victim: candidate_order_key(victim, preemptor.cluster_queue))
    return found


def _matching(
    state: ClusterState, preemptor: Preemptor, queue: QuotaNode, policy: PreemptionPolicy
) -> list[AdmittedWorkload]:
    return [
        victim
        for victim in state.by_queue.get(queue.name, {}).values()
        if satisfies_policy(policy, preemptor.workload, victim.workload)
        and uses_resources(victim, preemptor.frs_need_preemption)
    ]


def _borrowing_in(node: QuotaNode, frs: frozenset[FlavorResource]) -> bool:
    """Kueue's cqIsBorrowing: a queue of a cohort using more than nominal in one of ``frs``."""
    return node.parent is not None and any(node.borrowing_with(fr, 0) for fr in frs)


@dataclass(slots=True)
class _Search:
    """The victims removed so far from the tree while searching."""

    state: ClusterState
    preemptor: Preemptor
    removed: list[Target] = field(default_factory=list)

    def take(self, victim: AdmittedWorkload, reason: str) -> bool:
        """Remove ``victim``; whether the preemptor now fits (its own simulated usage left out)."""
        tree, preemptor = self.state.tree, self.preemptor
        tree.remove(victim.cluster_queue, victim.usage)
        self.removed.append(Target(victim, reason))
        tree.remove(preemptor.cluster_queue, preemptor.usage)
        try:
            return workload_fits(self.state, preemptor, True)
        finally:
            tree.add(preemptor.cluster_queue, preemptor.usage)


def _run_strategies(
    search: _Search, candidates: list[AdmittedWorkload], strategies: Sequence[FairSharingStrategy]
) -> bool:
    """Steps 2 and 3: the first strategy (twice with the reevaluation gate), then S2-b on the rest."""
    retry, fits = _first_pass(search, candidates, strategies[0])
    if fits:
        return True
    own = search.preemptor.cluster_queue
    took_own = any(t.victim.cluster_queue == own for t in search.removed)
    if took_own and gate(search.state, "FairSharingReevaluatePreemptionCandidates"):
        retry, fits = _first_pass(search, retry, strategies[0])
        if fits:
            return True
    return len(strategies) > 1 and _second_pass(search, retry)


def _first_pass(
    search: _Search, candidates: list[AdmittedWorkload], strategy: FairSharingStrategy
) -> tuple[list[AdmittedWorkload], bool]:
    """Kueue's iterateWithFirstFsStrategy: (candidates to retry, whether the preemptor fits)."""
    ordering = _TargetOrdering(search.state, search.preemptor, candidates)
    within_nominal = gate(search.state, "FairSharingPreemptWithinNominal") and _within_nominal(
        ordering.preemptor_cq, search.preemptor.frs_need_preemption
    )
    retry: list[AdmittedWorkload] = []
    for target in ordering.targets():
        if target is ordering.preemptor_cq:
            fits = search.take(ordering.pop(target), IN_CLUSTER_QUEUE)
        elif within_nominal:
            fits = search.take(ordering.pop(target), IN_COHORT_RECLAMATION)
        else:
            fits = _share_step(search, ordering, target, strategy, retry)
        if fits:
            return retry, True
    return retry, False


def _within_nominal(node: QuotaNode, frs: frozenset[FlavorResource]) -> bool:
    """Kueue's queueWithinNominalInResourcesNeedingPreemption (usage ≤ nominal)."""
    return not any(node.borrowing_with(fr, 0) for fr in frs)


def _share_step(
    search: _Search,
    ordering: _TargetOrdering,
    target: QuotaNode,
    strategy: FairSharingStrategy,
    retry: list[AdmittedWorkload],
) -> bool:
    """Take the first candidate of ``target`` passing ``strategy``; failures go to ``retry``.

    A +inf preemptor share never beats a finite target share, so the target's
    candidates go to the retry list without simulation (fsStrategyUnsatisfiable).
    """
    preemptor_new, target_old = ordering.shares(target)
    if preemptor_new.zero_weight_borrows and not target_old.zero_weight_borrows:
        while ordering.has_workload(target):
            retry.append(ordering.pop(target))
        return False
    while ordering.has_workload(target):
        victim = ordering.pop(target)
        target_new = ordering.share_after_removal(target, victim)
        if _passes(strategy, preemptor_new, target_old, target_new):
            return search.take(victim, IN_COHORT_FAIR_SHARING)
        retry.append(victim)
    return False


def _passes(
    strategy: FairSharingStrategy,
    preemptor_new: DominantShare,
    target_old: DominantShare,
    target_new: DominantShare,
) -> bool:
    """S2-a LessThanOrEqualToFinalShare, S2-b LessThanInitialShare."""
    if strategy == FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return compare_shares(preemptor_new, target_new) <= 0
    return compare_shares(preemptor_new, target_old) < 0


def _second_pass(search: _Search, retry: list[AdmittedWorkload]) -> bool:
    """Kueue's iterateWithSecondFsStrategy: S2-b, at most one workload per target queue."""
    ordering = _TargetOrdering(search.state, search.preemptor, retry)
    for target in ordering.targets():
        preemptor_new, target_old = ordering.shares(target)
        victim = ordering.pop(target)
        if compare_shares(preemptor_new, target_old) < 0 and search.take(victim, IN_COHORT_FAIR_SHARING):
            return True
        ordering.drop(target)
    return False


def _fill_back(state: ClusterState, preemptor: Preemptor, removed: list[Target]) -> list[Target]:
    """§6.8 with borrowing allowed: re-add targets in reverse, never the last; keep those not needed.

    ``removed`` is updated in place (Kueue's swap-with-last deletion) so that
    it always lists exactly what is still out of the tree.
    """
    for i in range(len(removed) - 2, -1, -1):
        victim = removed[i].victim
        state.tree.add(victim.cluster_queue, victim.usage)
        if workload_fits(state, preemptor, True):
            removed[i] = removed[-1]
            removed.pop()
        else:
            state.tree.remove(victim.cluster_queue, victim.usage)
    return list(removed)


class _TargetOrdering:
    """§7.5, Kueue's TargetClusterQueueOrdering: target queues by highest DRS from the root down.

    Between two yields the consumer pops a workload of the yielded queue or
    drops it, which guarantees progress.
    """

    def __init__(self, state: ClusterState, preemptor: Preemptor, candidates: list[AdmittedWorkload]):
        self.state = state
        self.preemptor = preemptor
        self.preemptor_cq = state.node(preemptor.cluster_queue)
        self.ancestors = {id(a) for a in self.preemptor_cq.path_to_root()}
        self.queued: dict[str, list[AdmittedWorkload]] = {}
        for victim in candidates:
            self.queued.setdefault(victim.cluster_queue, []).append(victim)
        self.pruned: set[int] = set()

    def targets(self) -> Iterator[QuotaNode]:
        """Target queues until the root is pruned (only the own queue when it has no cohort)."""
        own = self.preemptor_cq
        if own.parent is None:
            while self.has_workload(own):
                yield own
            return
        root = own.root()
        while id(root) not in self.pruned:
            target = self._next(root)
            if target is not None:
                yield target

    def has_workload(self, cq: QuotaNode) -> bool:
        return bool(self.queued.get(cq.name))

    def pop(self, cq: QuotaNode) -> AdmittedWorkload:
        return self.queued[cq.name].pop(0)

    def drop(self, cq: QuotaNode) -> None:
        self.pruned.add(id(cq))

    def shares(self, target: QuotaNode) -> tuple[DominantShare, DominantShare]:
        """(preemptor's new share, target's old share), both at the almost-LCA."""
        lca = self._lca(target)
        preemptor_side = _almost_lca(self.preemptor_cq, lca)
        return node_share(self.state, preemptor_side), node_share(self.state, _almost_lca(target, lca))

    def share_after_removal(self, target: QuotaNode, victim: AdmittedWorkload) -> DominantShare:
        """The target's almost-LCA share without ``victim`` (removed from its queue, so the
        change reaches every ancestor through the lending limits)."""
        with self.state.simulate_removal([victim]):
            return node_share(self.state, _almost_lca(target, self._lca(target)))

    def _lca(self, target: QuotaNode) -> QuotaNode:
        for ancestor in target.path_to_root():
            if id(ancestor) in self.ancestors:
                return ancestor
        raise ValueError(f"{target.name} is not in the cohort tree of {self.preemptor_cq.name}")

    def _next(self, cohort: QuotaNode) -> QuotaNode | None:
        """The child with the highest DRS (cohorts win ties), descending; None after pruning."""
        queue, queue_share = self._best_queue(cohort)
        child, child_share = self._best_cohort(cohort)
        if child is None or child_share is None:
            if queue is None:
                self.pruned.add(id(cohort))
            return queue
        if queue_share is None or compare_shares(child_share, queue_share) >= 0:
            return self._next(child)
        return queue

    def _best_queue(self, cohort: QuotaNode) -> tuple[QuotaNode | None, DominantShare | None]:
        """Highest-DRS child queue with candidates; ties go to the better first candidate (§6.5).

        Queues with a zero share (other than the preemptor's) or no candidates are pruned.
        """
        best: QuotaNode | None = None
        best_share: DominantShare | None = None
        for cq in cohort.child_queues():
            if id(cq) in self.pruned:
                continue
            share = node_share(self.state, cq)
            if (share.ratio == 0 and cq is not self.preemptor_cq) or not self.has_workload(cq):
                self.pruned.add(id(cq))
                continue
            order = 1 if best is None or best_share is None else compare_shares(share, best_share)
            if order > 0 or (order == 0 and best is not None and self._first_key(cq) < self._first_key(best)):
                best, best_share = cq, share
        return best, best_share

    def _best_cohort(self, cohort: QuotaNode) -> tuple[QuotaNode | None, DominantShare | None]:
        """Highest-DRS child cohort (the last among equals); non-borrowing ones off the
        preemptor's path are pruned."""
        best: QuotaNode | None = None
        best_share: DominantShare | None = None
        for child in cohort.child_cohorts():
            if id(child) in self.pruned:
                continue
            share = node_share(self.state, child)
            if share.ratio == 0 and id(child) not in self.ancestors:
                self.pruned.add(id(child))
            elif best_share is None or compare_shares(share, best_share) >= 0:
                best, best_share = child, share
        return best, best_share

    def _first_key(self, cq: QuotaNode) -> tuple[int, int, float, str]:
        return candidate_order_key(self.queued[cq.name][0], self.preemptor.cluster_queue)


def _almost_lca(cq: QuotaNode, lca: QuotaNode) -> QuotaNode:
    """The node on the path from ``cq`` whose parent is ``lca``."""
    node = cq
    for ancestor in cq.path_to_root():
        if ancestor is lca:
            return node
        node = ancestor
    raise ValueError(f"{lca.name} is not an ancestor of {cq.name}")
