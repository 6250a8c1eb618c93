"""Fair sharing: dominant resource shares, the admission tournament, fair preemption (§7)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from gpuq.core.model import FairSharing
from gpuq.core.quota import FlavorResource, QuotaNode, potential_available

if TYPE_CHECKING:
    from gpuq.core.admission import Entry
    from gpuq.core.preemption import Preemptor, Target
    from gpuq.core.state import ClusterState


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


def order_entries(state: ClusterState, entries: list[Entry]) -> list[Entry]:
    """§7.3: the fair-sharing tournament order of this cycle's entries."""
    raise NotImplementedError


def fair_targets(state: ClusterState, preemptor: Preemptor, config: FairSharing) -> list[Target]:
    """§7.6: victims chosen by fair-sharing preemption; empty when it cannot make room."""
    raise NotImplementedError
