"""Classical preemption: which admitted workloads to evict so that a workload fits.

Kueue: pkg/scheduler/preemption/preemption.go, classical/ and common/ beside it.

The algorithm, as Kueue runs it:

1. Candidates: the preemptor's own queue (per ``withinClusterQueue``) and, when
   ``reclaimWithinCohort`` allows it, queues of the cohort tree that borrow in a
   needed (flavor, resource), walking from the parent up to the root and
   noting where the preemptor gains a hierarchical advantage
   (classical/hierarchical_preemption.go, classifyPreemptionVariant).
2. Ordering: hierarchical, then priority (other queues), then own-queue
   candidates, each by lower priority, then most recent quota reservation
   (CandidatesOrdering, common/ordering.go).
3. Attempts with borrowing allowed and/or not allowed (classicalPreemptions).
4. Greedy removal until the workload fits, skipping candidates that became
   invalid, then the minimal-set fill-back that never re-adds the last
   target (fillBackWorkloads). All removals are what-ifs: the state is restored.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass
from enum import IntEnum

from gpuq.core.model import ClusterQueue, PreemptionPolicy, Workload
from gpuq.core.quota import (
    FlavorResource,
    QuotaNode,
    available,
    quantities_fit_in_quota,
)
from gpuq.core.state import AdmittedWorkload, ClusterState, OrderEntry

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"


class Variant(IntEnum):
    """How a candidate may be preempted (Kueue's preemptionVariant)."""

    NEVER = 0
    WITHIN_CQ = 1
    HIERARCHICAL_RECLAIM = 2
    RECLAIM_WITHOUT_BORROWING = 3
    RECLAIM_WHILE_BORROWING = 4

    @property
    def reason(self) -> str:
        if self is Variant.WITHIN_CQ:
            return IN_CLUSTER_QUEUE
        if self is Variant.RECLAIM_WHILE_BORROWING:
            return IN_COHORT_RECLAIM_WHILE_BORROWING
        return IN_COHORT_RECLAMATION


@dataclass(frozen=True, slots=True)
class Target:
    """A workload to evict, and Kueue's name for why."""

    victim: AdmittedWorkload
    reason: str


@dataclass(frozen=True, slots=True)
class Candidate:
    victim: AdmittedWorkload
    variant: Variant
    lca: QuotaNode | None  # the subtree root at which the candidate was found


@dataclass(frozen=True, slots=True)
class Preemptor:
    """What preemption needs to know about the incoming workload.

    ``placement_fits`` is set for a workload whose topology-aware pod sets fit the quota but
    not the nodes (Kueue's tas_flavorassigner.go): given the keys of the workloads removed so
    far, whether its pods would then be placed. Targets must make both the quota and the placement fit.
    """

    workload: Workload
    cluster_queue: str
    usage: Mapping[FlavorResource, int]  # full request per (flavor, resource)
    frs_need_preemption: frozenset[FlavorResource]
    placement_fits: Callable[[frozenset[str]], bool] | None = None


def placement_fits(preemptor: Preemptor, removed: Iterable[Target]) -> bool:
    """Whether the preemptor's pods are placed once ``removed`` are gone (always, without TAS)."""
    check = preemptor.placement_fits
    return check is None or check(frozenset(t.victim.key for t in removed))


def satisfies_policy(policy: PreemptionPolicy, preemptor: Workload, candidate: Workload) -> bool:
    """Kueue's policy test on effective priorities and queue-order timestamps
    (common/preemption_policy.go)."""
    if policy == PreemptionPolicy.ANY:
        return True
    if policy == PreemptionPolicy.LOWER_PRIORITY:
        return candidate.priority < preemptor.priority
    if policy == PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
        if candidate.priority < preemptor.priority:
            return True
        return candidate.priority == preemptor.priority and preemptor.order_time < candidate.order_time
    return False


def uses_resources(victim: AdmittedWorkload, frs: Set[FlavorResource]) -> bool:
    return not victim.frs.isdisjoint(frs)


def candidate_order_key(candidate: AdmittedWorkload, preemptor_cq: str) -> tuple[int, int, float, str]:
    """CandidatesOrdering: other queues first, lower priority, most recent quota reservation, then uid/key."""
    own = 1 if candidate.cluster_queue == preemptor_cq else 0
    return (own, candidate.priority, -candidate.quota_reserved_time, candidate.workload.uid or candidate.key)


def _classify(
    preemptor: Preemptor, cq: ClusterQueue, candidate: AdmittedWorkload, advantage: bool
) -> Variant:
    if not uses_resources(candidate, preemptor.frs_need_preemption):
        return Variant.NEVER
    same_cq = candidate.cluster_queue == preemptor.cluster_queue
    policy = cq.preemption.within_cluster_queue if same_cq else cq.preemption.reclaim_within_cohort
    if not satisfies_policy(policy, preemptor.workload, candidate.workload):
        return Variant.NEVER
    if same_cq:
        return Variant.WITHIN_CQ
    if advantage:
        return Variant.HIERARCHICAL_RECLAIM
    bwc = cq.preemption.borrow_within_cohort
    if bwc is None or bwc.policy == PreemptionPolicy.NEVER:
        return Variant.RECLAIM_WITHOUT_BORROWING
    incoming, other = preemptor.workload.priority, candidate.priority
    if other >= incoming or (bwc.max_priority_threshold is not None and other > bwc.max_priority_threshold):
        return Variant.RECLAIM_WITHOUT_BORROWING
    return Variant.RECLAIM_WHILE_BORROWING


def _from_queue(
    state: ClusterState,
    preemptor: Preemptor,
    queue: str,
    lca: QuotaNode | None,
    advantage: bool,
    dead: Set[str] = frozenset(),
) -> Iterator[Candidate]:
    """A queue's candidates in CandidatesOrdering's order, lazily: the queue's workloads are kept sorted by
    (priority, newest reservation, uid), so a priority-bounded policy stops early.

    Each one is classified as :func:`_classify` does, with what is the same for the whole queue
    worked out once (every listed workload uses a needed FR: the lists are per FR). The stream
    ends as soon as ``queue`` is in ``dead`` (the greedy pass found it within nominal quota).
    """
    cq = state.cluster_queue(preemptor.cluster_queue)
    same = queue == preemptor.cluster_queue
    policy = cq.preemption.within_cluster_queue if same else cq.preemption.reclaim_within_cohort
    if policy not in _POLICIES_THAT_PREEMPT:
        return
    limit = preemptor.workload.priority
    admitted = state.admitted
    frs = preemptor.frs_need_preemption
    if len(frs) == 1:
        entries: Iterable[OrderEntry] = state.ordered(queue, next(iter(frs)))
    else:  # workloads using several needed FRs appear once per FR: drop the repeats
        merged = heapq.merge(*(state.ordered(queue, fr) for fr in sorted(frs)))
        entries = (e for e, _ in itertools.groupby(merged))
    fixed: Variant | None = None
    threshold: int | None = None
    if same:
        fixed = Variant.WITHIN_CQ
    elif advantage:
        fixed = Variant.HIERARCHICAL_RECLAIM
    else:
        bwc = cq.preemption.borrow_within_cohort
        if bwc is None or bwc.policy == PreemptionPolicy.NEVER:
            fixed = Variant.RECLAIM_WITHOUT_BORROWING
        else:
            threshold = bwc.max_priority_threshold
    lower = policy == PreemptionPolicy.LOWER_PRIORITY
    lower_or_newer = policy == PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
    created = preemptor.workload.order_time
    if state.rank_by_loss:
        entries = _least_lost_first(state, entries, frs)
    usage = state.fair_usage(queue) if same else None
    if usage is not None:  # CandidatesOrdering step 2: the LocalQueue with more usage first
        entries = sorted(entries, key=lambda e: -usage(admitted[e[3]].workload))
    for priority, _, _, key in entries:
        if (lower and priority >= limit) or (lower_or_newer and priority > limit):
            if usage is None:
                return  # sorted by priority: none of the rest qualifies either
            continue
        if queue in dead:
            return
        victim = admitted[key]
        if lower_or_newer and priority == limit and not created < victim.workload.order_time:
            continue
        if victim.workload.min_runtime_s and victim.protected_at(state.now):
            continue
        if fixed is not None:
            yield Candidate(victim, fixed, lca)
        elif priority >= limit or (threshold is not None and priority > threshold):
            yield Candidate(victim, Variant.RECLAIM_WITHOUT_BORROWING, lca)
        else:
            yield Candidate(victim, Variant.RECLAIM_WHILE_BORROWING, lca)


def _least_lost_first(
    state: ClusterState, entries: Iterable[OrderEntry], frs: Set[FlavorResource]
) -> Iterator[OrderEntry]:
    """``entries`` (by priority, then Kueue's order) with each run of one priority reordered by the
    work each loses per unit freed (:meth:`AdmittedWorkload.loss_rate`), Kueue's order on ties."""
    admitted, now = state.admitted, state.now
    for _, group in itertools.groupby(entries, key=lambda e: e[0]):
        yield from sorted(group, key=lambda e: admitted[e[3]].loss_rate(now, frs))


_POLICIES_THAT_PREEMPT = frozenset(
    {PreemptionPolicy.ANY, PreemptionPolicy.LOWER_PRIORITY, PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY}
)


def _sources_in_subtree(
    preemptor: Preemptor,
    own: QuotaNode,
    cohort: QuotaNode,
    skip: QuotaNode | None,
    out: list[QuotaNode],
) -> None:
    """The queues below ``cohort`` that borrow in a needed FR, skipping ``skip`` and cohorts within quota."""
    for child in cohort.child_cohorts():
        if child is skip or child.within_nominal(preemptor.frs_need_preemption):
            continue
        _sources_in_subtree(preemptor, own, child, skip, out)
    for child in cohort.child_queues():
        if child is not own and not child.within_nominal(preemptor.frs_need_preemption):
            out.append(child)


@dataclass(frozen=True, slots=True)
class CandidateSources:
    """Where candidates come from (hierarchical_preemption.go): iterate them in order with :meth:`ordered`."""

    state: ClusterState
    preemptor: Preemptor
    same: bool
    hierarchy: tuple[tuple[str, QuotaNode], ...]  # (queue, subtree root) with the hierarchical advantage
    by_priority: tuple[tuple[str, QuotaNode], ...]

    def _merged(
        self, sources: tuple[tuple[str, QuotaNode], ...], advantage: bool, dead: Set[str]
    ) -> Iterator[Candidate]:
        streams = [_from_queue(self.state, self.preemptor, q, lca, advantage, dead) for q, lca in sources]
        return heapq.merge(*streams, key=lambda c: _order(c.victim))

    def ordered(self, dead: Set[str] = frozenset()) -> Iterator[Candidate]:
        """Hierarchical reclaim, then priority (other queues), then own-queue candidates; the
        queues named in ``dead`` (which may grow meanwhile) give no more candidates."""
        yield from self._merged(self.hierarchy, True, dead)
        yield from self._merged(self.by_priority, False, dead)
        if self.same:
            yield from _from_queue(self.state, self.preemptor, self.preemptor.cluster_queue, None, False)

    def any_from(self, sources: tuple[tuple[str, QuotaNode], ...], advantage: bool) -> bool:
        """Whether any source queue has a candidate (stops at the first one found)."""
        return any(
            next(_from_queue(self.state, self.preemptor, q, lca, advantage), None) is not None
            for q, lca in sources
        )


def _order(victim: AdmittedWorkload) -> tuple[int, float, str]:
    order = victim.order
    return (order[0], order[1], order[2])


def candidate_sources(state: ClusterState, preemptor: Preemptor) -> CandidateSources:
    """The own queue per withinClusterQueue, and borrowing queues from the parent up to the root."""
    cq = state.cluster_queue(preemptor.cluster_queue)
    node = state.node(preemptor.cluster_queue)
    hierarchy: list[tuple[str, QuotaNode]] = []
    by_priority: list[tuple[str, QuotaNode]] = []
    if node.parent is not None and cq.preemption.reclaim_within_cohort != PreemptionPolicy.NEVER:
        advantage, remaining = quantities_fit_in_quota(node, preemptor.usage)
        previous: QuotaNode | None = None
        for ancestor in node.path_to_root():
            found: list[QuotaNode] = []
            _sources_in_subtree(preemptor, node, ancestor, previous, found)
            (hierarchy if advantage else by_priority).extend((q.name, ancestor) for q in found)
            fits, remaining = quantities_fit_in_quota(ancestor, remaining)
            advantage = advantage or fits
            previous = ancestor
    same = cq.preemption.within_cluster_queue != PreemptionPolicy.NEVER
    return CandidateSources(state, preemptor, same, tuple(hierarchy), tuple(by_priority))


def _valid(state: ClusterState, preemptor: Preemptor, candidate: Candidate, allow_borrowing: bool) -> bool:
    """The greedy pass's test: a candidate of another queue stays valid only while that queue
    (and its path) borrows."""
    if candidate.victim.cluster_queue == preemptor.cluster_queue:
        return True
    if allow_borrowing and candidate.variant is Variant.RECLAIM_WITHOUT_BORROWING:
        return False
    return _still_borrowing(state, preemptor, candidate)


def _still_borrowing(state: ClusterState, preemptor: Preemptor, candidate: Candidate) -> bool:
    """Whether the candidate's queue, and its path up to where it was found, still borrow in a
    needed FR. Once False it stays False while the greedy pass only removes usage."""
    node = state.node(candidate.victim.cluster_queue)
    if node.within_nominal(preemptor.frs_need_preemption):
        return False
    for ancestor in node.path_to_root():
        if ancestor is candidate.lca:
            break
        if ancestor.within_nominal(preemptor.frs_need_preemption):
            return False
    return True


def workload_fits(state: ClusterState, preemptor: Preemptor, allow_borrowing: bool) -> bool:
    """Whether the preemptor's usage fits now; without borrowing it must also stay within nominal."""
    node = state.node(preemptor.cluster_queue)
    for fr, amount in preemptor.usage.items():
        if not allow_borrowing and node.borrowing_with(fr, amount):
            return False
        if amount > available(node, fr):
            return False
    return True


def _greedy(
    state: ClusterState,
    preemptor: Preemptor,
    candidates: Iterable[Candidate],
    allow_borrowing: bool,
    dead: set[str] | None = None,
) -> list[Target]:
    """The greedy pass and fillBackWorkloads: remove candidates until the preemptor fits, then
    put back what is not needed.

    The fill-back walks the targets in reverse, never re-adding the last one;
    a target whose return still lets the preemptor fit stays admitted. The
    state is restored before returning. Queues found no longer borrowing go into ``dead``
    (which ``candidates`` may read to skip the rest of them: none of them would be valid).
    """
    if dead is None:
        dead = set()
    removed: list[Target] = []
    own = preemptor.cluster_queue
    try:
        for candidate in candidates:
            victim = candidate.victim
            if victim.cluster_queue != own:  # _valid, remembering the queues that stopped borrowing
                if allow_borrowing and candidate.variant is Variant.RECLAIM_WITHOUT_BORROWING:
                    continue
                if not _still_borrowing(state, preemptor, candidate):
                    dead.add(victim.cluster_queue)
                    continue
            state.tree.remove(victim.cluster_queue, victim.usage)
            removed.append(Target(victim, candidate.variant.reason))
            if workload_fits(state, preemptor, allow_borrowing) and placement_fits(preemptor, removed):
                break
        else:
            return []
        for i in range(len(removed) - 2, -1, -1):
            victim = removed[i].victim
            state.tree.add(victim.cluster_queue, victim.usage)
            rest = removed[:i] + removed[i + 1 :]
            if workload_fits(state, preemptor, allow_borrowing) and placement_fits(preemptor, rest):
                removed.pop(i)  # not needed: it stays admitted (its usage stays added)
            else:
                state.tree.remove(victim.cluster_queue, victim.usage)
        return list(removed)
    finally:
        for target in removed:
            state.tree.add(target.victim.cluster_queue, target.victim.usage)


def _under_nominal(state: ClusterState, preemptor: Preemptor) -> bool:
    """Strictly under nominal in every (flavor, resource) needing preemption."""
    node = state.node(preemptor.cluster_queue)
    return all(node.usage.get(fr, 0) < node.nominal(fr) for fr in preemptor.frs_need_preemption)


def attempts(
    state: ClusterState, preemptor: Preemptor, from_others: bool, hierarchical: bool
) -> Iterator[bool]:
    """classicalPreemptions: the borrowing options to try, in order."""
    cq = state.cluster_queue(preemptor.cluster_queue)
    bwc = cq.preemption.borrow_within_cohort
    forbidden = bwc is None or bwc.policy == PreemptionPolicy.NEVER
    if not from_others or (forbidden and not _under_nominal(state, preemptor)):
        yield True
    elif forbidden and not hierarchical:
        yield False
        yield True
    else:
        yield True
        yield False


def classical_targets(state: ClusterState, preemptor: Preemptor) -> list[Target]:
    """The minimal set of workloads to evict so that the preemptor fits; empty if impossible.

    Candidates are produced lazily in CandidatesOrdering's order, so a greedy pass that fits
    early touches only the workloads it examines.
    """
    sources = candidate_sources(state, preemptor)
    hierarchical = sources.any_from(sources.hierarchy, True)
    from_others = hierarchical or sources.any_from(sources.by_priority, False)
    if not from_others and not (sources.same and next(sources.ordered(), None) is not None):
        return []
    for allow_borrowing in attempts(state, preemptor, from_others, hierarchical):
        dead: set[str] = set()
        targets = _greedy(state, preemptor, sources.ordered(dead), allow_borrowing, dead)
        if targets:
            return targets
    return []


def _qualifying(buckets: Mapping[int, int], policy: PreemptionPolicy, priority: int) -> int:
    """Usage of workloads a policy could ever let ``priority`` preempt (LowerOrNewerEqual: ≤)."""
    if policy == PreemptionPolicy.ANY:
        return sum(buckets.values())
    if policy == PreemptionPolicy.LOWER_PRIORITY:
        return sum(v for p, v in buckets.items() if p < priority)
    if policy == PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
        return sum(v for p, v in buckets.items() if p <= priority)
    return 0


def cannot_free_enough(state: ClusterState, preemptor: Preemptor) -> bool:
    """An exact early "no": even evicting every workload the policies allow leaves some FR short.

    Removing usage ``u`` anywhere in the tree raises the preemptor's ``available``
    by at most ``u``, so ``available + freeable < need`` in any (flavor,
    resource) needing preemption means no victim set exists, for classical
    and fair preemption alike. Another queue gives up workloads only while it
    is above nominal (Kueue's greedy pass and fair sharing's findCandidates),
    so when one (flavor, resource) needs preemption it frees at most its excess plus one workload. Costs
    O(queues in the cohort tree × priorities), not O(admitted workloads).
    """
    cq = state.cluster_queue(preemptor.cluster_queue)
    node = state.node(preemptor.cluster_queue)
    priority = preemptor.workload.priority
    needed = preemptor.frs_need_preemption
    if _reclaim_needs_borrowing(state, preemptor, cq, node):
        return True
    others: list[QuotaNode] = []
    if node.parent is not None and cq.preemption.reclaim_within_cohort != PreemptionPolicy.NEVER:
        others = [
            q for q in state.tree.queues_in_tree(node) if q is not node and not q.within_nominal(needed)
        ]
    for fr in needed:
        need = preemptor.usage.get(fr, 0)
        if not need:
            continue
        own = state.usage_by_priority.get(node.name, {}).get(fr, {})
        freeable = _qualifying(own, cq.preemption.within_cluster_queue, priority)
        for other in others:
            buckets = state.usage_by_priority.get(other.name, {}).get(fr, {})
            allowed = _qualifying(buckets, cq.preemption.reclaim_within_cohort, priority)
            if len(needed) == 1:
                excess = other.usage.get(fr, 0) - other.subtree_quota.get(fr, 0)
                allowed = min(allowed, excess + state.largest(other.name, fr))
            freeable += allowed
        if available(node, fr) + freeable < need:
            return True
    return False


def _reclaim_needs_borrowing(
    state: ClusterState, preemptor: Preemptor, cq: ClusterQueue, node: QuotaNode
) -> bool:
    """A preemptor that would borrow cannot reclaim without ``borrowWithinCohort``
    (classifyPreemptionVariant).

    In a flat cohort, without own-queue candidates and without the hierarchical
    advantage (the request does not fit the queue's own nominal quota), every
    candidate is ReclaimWithoutBorrowing: invalid when borrowing is allowed,
    and useless when it is not, because the preemptor borrows regardless of
    what other queues give up.
    """
    bwc = cq.preemption.borrow_within_cohort
    if bwc is not None and bwc.policy != PreemptionPolicy.NEVER:
        return False
    if state.config.scheduler.fair_sharing.enable:
        return False
    own = state.usage_by_priority.get(node.name, {})
    policy, priority = cq.preemption.within_cluster_queue, preemptor.workload.priority
    if any(_qualifying(own.get(fr, {}), policy, priority) for fr in preemptor.frs_need_preemption):
        return False
    if node.parent is None or node.parent.parent is not None:
        return False
    if quantities_fit_in_quota(node, preemptor.usage)[0]:
        return False
    return any(node.borrowing_with(fr, amount) for fr, amount in preemptor.usage.items())
