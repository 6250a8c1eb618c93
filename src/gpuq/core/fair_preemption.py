"""Fair-sharing preemption (Kueue: pkg/scheduler/preemption/fairsharing/, keps/1714-fair-sharing).

Preemption (Kueue's ``FairPreemptionPlan`` and ``fairPreemptions``):

1. Candidates: the own queue per ``withinClusterQueue``; every queue of the
   tree borrowing in a needed (flavor, resource), per ``reclaimWithinCohort``;
   sorted as classical preemption sorts them. ``borrowWithinCohort`` plays no part.
2. The incoming usage is added; target queues are visited highest DRS first
   (TargetClusterQueueOrdering). The own queue yields its next candidate (InClusterQueue); a
   preemptor within nominal [gate FairSharingPreemptWithinNominal] takes the
   target's next candidate (InCohortReclamation); otherwise the first
   strategy compares shares at the almost-LCA (InCohortFairSharing) and
   failures go to a retry list.
3. With a second strategy, S2-b runs over the retry list, at most one
   workload per target queue.
4. Without a fit there are no targets; with one, the classical fill-back runs with
   borrowing allowed. The state is restored in every case.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from gpuq.core.fairshare import (
    DEFAULT_STRATEGIES,
    DominantShare,
    compare_shares,
    gate,
    node_share,
    subtree_queues,
)
from gpuq.core.model import FairSharing, FairSharingStrategy, PreemptionPolicy
from gpuq.core.preemption import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    IN_COHORT_RECLAMATION,
    Preemptor,
    Target,
    candidate_order_key,
    cannot_free_enough,
    classical_targets,
    placement_fits,
    satisfies_policy,
    uses_resources,
    workload_fits,
)
from gpuq.core.quota import FlavorResource, QuotaNode
from gpuq.core.state import AdmittedWorkload, ClusterState


def preemption_targets(state: ClusterState, preemptor: Preemptor) -> list[Target]:
    """Kueue's getPreemptionPlan dispatch: fair when fair sharing is on, classical otherwise.

    The flavor assigner's preemption oracle should call this (Kueue's
    ``SimulatePreemption`` runs the same plan as the real preemption).
    """
    if cannot_free_enough(state, preemptor):
        return []
    targets = _targets(state, preemptor)
    if not targets or not state.cluster_queue(preemptor.cluster_queue).least_lost_work:
        return targets
    # gpuq.dev/victim-order: lost-work: the same search with candidates of one priority ranked by the
    # work they lose per unit freed; of the two valid sets, the one losing less (Kueue's on a tie).
    state.rank_by_loss = True
    try:
        ranked = _targets(state, preemptor)
    finally:
        state.rank_by_loss = False
    if ranked and _lost(state, ranked, preemptor) < _lost(state, targets, preemptor):
        return ranked
    return targets


def _targets(state: ClusterState, preemptor: Preemptor) -> list[Target]:
    fair_sharing = state.config.scheduler.fair_sharing
    if fair_sharing.enable:
        return fair_targets(state, preemptor, fair_sharing)
    return classical_targets(state, preemptor)


def _lost(state: ClusterState, targets: Sequence[Target], preemptor: Preemptor) -> float:
    """The work the victims lose: seconds since their checkpoints times what they hold of the
    resources the preemptor needs (GPU-seconds for a GPU preemptor)."""
    frs = preemptor.frs_need_preemption
    return sum(t.victim.lost_work(state.now, frs) for t in targets)


def fair_targets(state: ClusterState, preemptor: Preemptor, config: FairSharing) -> list[Target]:
    """Victims chosen by fair-sharing preemption (fairPreemptions); empty when it cannot make room.

    1. Candidates (:func:`find_candidates`); none means no targets.
    2. With the incoming usage added, the first strategy pass (twice with gate
       FairSharingReevaluatePreemptionCandidates when it took own-queue
       workloads), stopping as soon as the preemptor fits without its own usage.
    3. With a second strategy, S2-b over the retry list.
    4. No fit: no targets. Fit: the classical fill-back with borrowing allowed.

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
    """Kueue's findCandidates, sorted as classical preemption sorts them."""
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
    if state.rank_by_loss:  # stable: Kueue's order among equal losses
        frs = preemptor.frs_need_preemption
        own = preemptor.cluster_queue
        found.sort(key=lambda v: (v.cluster_queue == own, v.priority, v.loss_rate(state.now, frs)))
    return found


def _matching(
    state: ClusterState, preemptor: Preemptor, queue: QuotaNode, policy: PreemptionPolicy
) -> list[AdmittedWorkload]:
    return [
        victim
        for victim in state.by_queue.get(queue.name, {}).values()
        if satisfies_policy(policy, preemptor.workload, victim.workload)
        and uses_resources(victim, preemptor.frs_need_preemption)
        and not (victim.workload.min_runtime_s and victim.protected_at(state.now))
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
            return workload_fits(self.state, preemptor, True) and placement_fits(preemptor, self.removed)
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
    """fillBackWorkloads with borrowing allowed: re-add targets in reverse, never the last; keep
    those not needed.

    ``removed`` is updated in place (Kueue's swap-with-last deletion) so that
    it always lists exactly what is still out of the tree.
    """
    for i in range(len(removed) - 2, -1, -1):
        victim = removed[i].victim
        state.tree.add(victim.cluster_queue, victim.usage)
        rest = removed[:i] + removed[i + 1 :]
        if workload_fits(state, preemptor, True) and placement_fits(preemptor, rest):
            removed[i] = removed[-1]
            removed.pop()
        else:
            state.tree.remove(victim.cluster_queue, victim.usage)
    return list(removed)


class _TargetOrdering:
    """Kueue's TargetClusterQueueOrdering: target queues by highest DRS from the root down.

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
        with self.state.without_usage([victim]):
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
        """Highest-DRS child queue with candidates; ties go to the better first candidate.

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
