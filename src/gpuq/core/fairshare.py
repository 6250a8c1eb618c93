"""Fair sharing: dominant resource shares, the admission tournament, fair preemption.

Kueue: pkg/cache/scheduler/fair_sharing.go, pkg/scheduler/fair_sharing_iterator.go, keps/1714-fair-sharing.

Admission order (Kueue's ``fairSharingIterator``), one pick at a time:

1. A cluster queue without a cohort yields its entry as it comes.
2. In a cohort tree, the first entry of every queue has its usage added and
   the DRS of the queue and of each ancestor is recorded per (parent, entry).
3. A tournament runs bottom-up: at each cohort the best child wins by
   [gate FairSharingPrioritizeNonBorrowing] not borrowing on the entry's
   (flavor, resource)s, then lower DRS, higher priority, earlier creation,
   then key (for determinism only).
4. The root winner is yielded. The caller processes it, so its usage is in
   the tree, before the next pick recomputes every share.

Fair preemption lives in :mod:`gpuq.core.fair_preemption`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from gpuq.core import usage_history
from gpuq.core.model import FairSharingStrategy
from gpuq.core.quota import FlavorResource, QuotaNode, potential_available
from gpuq.core.state import ClusterState

if TYPE_CHECKING:
    from gpuq.core.nomination import Entry

GATE_DEFAULTS: Mapping[str, bool] = {
    "FairSharingPrioritizeNonBorrowing": True,  # beta
    "FairSharingPreemptWithinNominal": True,  # beta
    "FairSharingReevaluatePreemptionCandidates": False,  # alpha
    "PrioritySortingWithinCohort": True,  # beta
    "PrioritizePreemptorWorkloads": False,  # alpha since v0.19
}

DEFAULT_STRATEGIES = (
    FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
    FairSharingStrategy.LESS_THAN_INITIAL_SHARE,
)


@dataclass(frozen=True, slots=True)
class DominantShare:
    """A node's dominant resource share (fair_sharing.go); compare with :func:`share_key`."""

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


# ---------------------------------------------------------------- admission order
def order_entries(state: ClusterState, entries: Sequence[Entry]) -> Iterator[Entry]:
    """The entries in fair-sharing order, one pick at a time.

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
    """Entries per queue, each list in the classical order (Kueue's compareEntries)."""
    grouped: dict[str, list[Entry]] = {}
    for entry in entries:
        grouped.setdefault(entry.cluster_queue, []).append(entry)
    for queued in grouped.values():
        queued.sort(key=_entry_key)
    return grouped


def _entry_key(entry: Entry) -> tuple[int, int, float, str]:
    borrowing = entry.assignment.borrowing if entry.assignment else 0
    return (borrowing, -entry.workload.priority, entry.workload.order_time, entry.key)


def _tree_key(node: QuotaNode) -> tuple[str, bool]:
    root = node.root()
    return (root.name, root.is_cluster_queue)


def _usage(entry: Entry) -> Mapping[FlavorResource, int]:
    return entry.assignment.usage if entry.assignment else {}


def _history_shares(
    state: ClusterState, root: QuotaNode, pending: Mapping[str, list[Entry]], half_life: float
) -> dict[tuple[str, str], float]:
    """Each pending head's usage-history share at every level of its path, at ``state.now``."""
    used: dict[str, dict[str, float]] = {}

    def of(node: QuotaNode) -> dict[str, float]:
        value = used.get(node.name)
        if value is None:
            if node.is_cluster_queue:
                history = state.history.get(node.name)
                value = history.value(state.now) if history is not None else {}
            else:
                value = usage_history.summed([of(child) for child in node.children])
            used[node.name] = value
        return value

    out: dict[tuple[str, str], float] = {}
    for cq in subtree_queues(root):
        queued = pending.get(cq.name)
        if not queued:
            continue
        key = queued[0].key
        child = cq
        while child.parent is not None:
            nominal: dict[str, int] = {}
            for (_, resource), amount in child.subtree_quota.items():
                nominal[resource] = nominal.get(resource, 0) + amount
            out[(child.parent.name, key)] = usage_history.share(
                of(child), nominal, half_life, weight_of(state, child)
            )
            child = child.parent
    return out


@dataclass(frozen=True, slots=True)
class _Tournament:
    """One pick of Kueue's runTournament over a cohort tree."""

    shares: Mapping[tuple[str, str], DominantShare]  # (parent cohort, entry key) -> child's DRS
    prefer_non_borrowing: bool
    by_priority: bool
    preemptors_first: bool = False
    history: Mapping[tuple[str, str], float] | None = None
    """(parent cohort, entry key) -> the child's usage-history share, where the root cohort has a
    ``gpuq.dev/usage-half-life`` (:mod:`gpuq.core.usage_history`)."""

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
        half_life = state.half_life(root)
        tournament = cls(
            shares,
            gate(state, "FairSharingPrioritizeNonBorrowing"),
            gate(state, "PrioritySortingWithinCohort"),
            gate(state, "PrioritizePreemptorWorkloads"),
            None if half_life is None else _history_shares(state, root, pending, half_life),
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
        """Kueue's entryComparer.less at the level of ``parent``: preemptors first (gate
        PrioritizePreemptorWorkloads), non-borrowing, lower share, priority, queue-order time, key."""
        if self.preemptors_first and a.is_preemptor != b.is_preemptor:
            return a.is_preemptor
        share_a, share_b = self.shares[(parent, a.key)], self.shares[(parent, b.key)]
        if self.prefer_non_borrowing:
            borrows_a, borrows_b = share_a.borrowing_on(_usage(a)), share_b.borrowing_on(_usage(b))
            if borrows_a != borrows_b:
                return not borrows_a
        if self.history is not None:
            used_a, used_b = self.history[(parent, a.key)], self.history[(parent, b.key)]
            if used_a != used_b:
                return used_a < used_b
        order = compare_shares(share_a, share_b)
        if order:
            return order < 0
        if self.by_priority and a.workload.priority != b.workload.priority:
            return a.workload.priority > b.workload.priority
        if a.workload.order_time != b.workload.order_time:
            return a.workload.order_time < b.workload.order_time
        return a.key < b.key
