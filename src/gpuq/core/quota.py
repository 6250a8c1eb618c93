"""The quota tree: cluster queues and cohorts, each with quotas and usage per (flavor, resource).

Semantics follow Kueue's resource nodes (pkg/cache/scheduler/resource_node.go):

1. ``local_quota(n, fr)`` is the part of a node's subtree quota hidden from its
   parent by a lending limit; it is never lent upward.
2. A cohort's subtree quota is its own nominal quota plus what each child
   exposes (child subtree quota minus child local quota).
3. A cohort's usage is what its children use beyond their local quota; adding
   usage to a cluster queue bubbles up only the part its local quota cannot hold.
4. ``available`` walks to the root, capping what may come from the parent by
   the borrowing limit; ``potential_available`` does the same ignoring usage.

Usage is updated in place on admit and finish (O(depth) per flavor-resource),
never recomputed from all workloads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from gpuq.core.model import ClusterConfig, ResourceGroup, ResourceQuota

FlavorResource = tuple[str, str]
"""(flavor name, resource name)."""

FlavorResourceAmounts = dict[FlavorResource, int]


class QuotaNode:
    """A cluster queue (leaf) or a cohort (inner node) of the quota tree."""

    __slots__ = (
        "borrowing_limits",
        "children",
        "guaranteed",
        "height",
        "is_cluster_queue",
        "local",
        "name",
        "parent",
        "potential",
        "quotas",
        "subtree_quota",
        "usage",
    )

    def __init__(self, name: str, *, is_cluster_queue: bool) -> None:
        self.name = name
        self.is_cluster_queue = is_cluster_queue
        self.parent: QuotaNode | None = None
        self.children: list[QuotaNode] = []
        self.quotas: dict[FlavorResource, ResourceQuota] = {}
        self.subtree_quota: FlavorResourceAmounts = {}
        self.usage: FlavorResourceAmounts = {}
        self.height = 0
        # Fixed once the tree is built (:meth:`freeze`); the hot paths read them instead of
        # recomputing them from the quotas at every call.
        self.local: FlavorResourceAmounts = {}  # local_quota, where it is not 0
        self.borrowing_limits: FlavorResourceAmounts = {}  # the FRs that have a borrowing limit
        self.guaranteed: FlavorResourceAmounts = {}  # nominal (queue) or subtree quota (cohort)
        self.potential: FlavorResourceAmounts = {}  # potential_available, as asked (quotas alone)

    def __repr__(self) -> str:
        kind = "ClusterQueue" if self.is_cluster_queue else "Cohort"
        return f"<{kind} {self.name}>"

    def _local_quota(self, fr: FlavorResource) -> int:
        quota = self.quotas.get(fr)
        if quota is None or quota.lending_limit is None:
            return 0
        return max(0, self.subtree_quota.get(fr, 0) - quota.lending_limit)

    def freeze(self) -> None:
        """Cache what depends on quotas alone, once the subtree quota is final."""
        self.local = {fr: local for fr in self.quotas if (local := self._local_quota(fr))}
        self.borrowing_limits = {
            fr: q.borrowing_limit for fr, q in self.quotas.items() if q.borrowing_limit is not None
        }
        if self.is_cluster_queue:
            self.guaranteed = {fr: q.nominal for fr, q in self.quotas.items()}
        else:
            self.guaranteed = dict(self.subtree_quota)

    def local_quota(self, fr: FlavorResource) -> int:
        return self.local.get(fr, 0)

    def local_available(self, fr: FlavorResource) -> int:
        local = self.local.get(fr, 0)
        if not local:
            return 0
        used = self.usage.get(fr, 0)
        return local - used if local > used else 0

    def nominal(self, fr: FlavorResource) -> int:
        quota = self.quotas.get(fr)
        return quota.nominal if quota else 0

    def borrowing_with(self, fr: FlavorResource, amount: int) -> bool:
        """Whether using ``amount`` more would exceed this node's guaranteed quota (Kueue's
        IsWithinNominalInResources)."""
        return self.usage.get(fr, 0) + amount > self.guaranteed.get(fr, 0)

    def within_nominal(self, frs: Iterable[FlavorResource]) -> bool:
        """Kueue's IsWithinNominalInResources: usage ≤ subtree quota in every FR."""
        return all(self.usage.get(fr, 0) <= self.subtree_quota.get(fr, 0) for fr in frs)

    def path_to_root(self) -> Iterator[QuotaNode]:
        """Ancestors from the parent up to the root."""
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def root(self) -> QuotaNode:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def child_cohorts(self) -> list[QuotaNode]:
        return [c for c in self.children if not c.is_cluster_queue]

    def child_queues(self) -> list[QuotaNode]:
        return [c for c in self.children if c.is_cluster_queue]


def available(node: QuotaNode, fr: FlavorResource) -> int:
    """Capacity still usable by ``node`` in ``fr``; may be negative after over-admission."""
    parent = node.parent
    used = node.usage.get(fr, 0)
    if parent is None:
        return node.subtree_quota.get(fr, 0) - used
    if parent.parent is None:  # the common flat cohort, without a second call
        parent_available = parent.subtree_quota.get(fr, 0) - parent.usage.get(fr, 0)
    else:
        parent_available = available(parent, fr)
    local = node.local.get(fr, 0)
    limit = node.borrowing_limits.get(fr)
    if limit is not None:
        stored_in_parent = node.subtree_quota.get(fr, 0) - local
        used_in_parent = used - local if used > local else 0
        parent_available = min(stored_in_parent - used_in_parent + limit, parent_available)
    return (local - used if local > used else 0) + parent_available


def potential_available(node: QuotaNode, fr: FlavorResource) -> int:
    """The most ``node`` could ever use in ``fr`` if nothing else were running (quotas alone,
    so each answer is kept on the node once the tree is built)."""
    known = node.potential.get(fr)
    if known is not None:
        return known
    if node.parent is None:
        result = node.subtree_quota.get(fr, 0)
    else:
        result = node.local.get(fr, 0) + potential_available(node.parent, fr)
        limit = node.borrowing_limits.get(fr)
        if limit is not None:
            result = min(node.subtree_quota.get(fr, 0) + limit, result)
    node.potential[fr] = result
    return result


def add_usage(node: QuotaNode, fr: FlavorResource, amount: int) -> None:
    """Add usage, bubbling up what the node's local quota cannot hold."""
    current: QuotaNode | None = node
    while current is not None:
        usage = current.usage
        used = usage.get(fr, 0)
        local = current.local.get(fr, 0)
        local_available = local - used if local > used else 0
        usage[fr] = used + amount
        if amount <= local_available:
            return
        amount -= local_available
        current = current.parent


def remove_usage(node: QuotaNode, fr: FlavorResource, amount: int) -> None:
    """Remove usage, first from what the node stored in its parent."""
    current: QuotaNode | None = node
    while current is not None:
        usage = current.usage
        used = usage.get(fr, 0)
        stored_in_parent = used - current.local.get(fr, 0)
        usage[fr] = used - amount
        if stored_in_parent <= 0:
            return
        if stored_in_parent < amount:
            amount = stored_in_parent
        current = current.parent


def quantities_fit_in_quota(
    node: QuotaNode, requests: Mapping[FlavorResource, int]
) -> tuple[bool, FlavorResourceAmounts]:
    """Whether ``requests`` fit in the node's subtree quota, and what exceeds its local quota."""
    fits = True
    remaining: FlavorResourceAmounts = {}
    for fr, value in requests.items():
        if node.usage.get(fr, 0) + value > node.subtree_quota.get(fr, 0):
            fits = False
        remaining[fr] = max(0, value - node.local_available(fr))
    return fits, remaining


def node_height(node: QuotaNode) -> int:
    """Distance to the furthest leaf; a cohort with only queue children has height 1."""
    if node.is_cluster_queue:
        return 0
    height = min(len(node.children), 1)
    for child in node.child_cohorts():
        height = max(height, node_height(child) + 1)
    return height


def lowest_fitting_subtree(cq: QuotaNode, fr: FlavorResource, amount: int) -> tuple[int, bool]:
    """Borrowing distance (Kueue's FindHeightOfLowestSubtreeThatFits): height of the lowest
    subtree that holds ``amount`` more of ``fr``.

    Returns (height, whether that subtree is below the root). Height 0 means
    no borrowing at all.
    """
    parent = cq.parent
    used = cq.usage.get(fr, 0)
    if parent is None or used + amount <= cq.guaranteed.get(fr, 0):  # not borrowing_with
        return 0, parent is not None
    local = cq.local.get(fr, 0)
    remaining = amount - (local - used if local > used else 0)
    tracking = cq
    for ancestor in cq.path_to_root():
        tracking = ancestor
        if not ancestor.borrowing_with(fr, remaining):
            return ancestor.height, ancestor.parent is not None
        remaining -= ancestor.local_available(fr)
    return tracking.height, tracking.parent is not None


class QuotaTree:
    """All quota nodes of a configuration, built once and updated incrementally."""

    def __init__(self, config: ClusterConfig) -> None:
        self.cluster_queues: dict[str, QuotaNode] = {}
        self.cohorts: dict[str, QuotaNode] = {}
        self.cyclic_cohorts: frozenset[str] = frozenset()
        self._tree_queues: dict[str, list[QuotaNode]] = {}
        self._build(config)

    def _cohort(self, name: str) -> QuotaNode:
        node = self.cohorts.get(name)
        if node is None:
            node = self.cohorts[name] = QuotaNode(name, is_cluster_queue=False)
        return node

    def _build(self, config: ClusterConfig) -> None:
        for name in sorted(config.cohorts):
            cohort = config.cohorts[name]
            node = self._cohort(name)
            node.quotas = _quotas(cohort.resource_groups)
        for name in sorted(config.cohorts):
            parent = config.cohorts[name].parent
            if parent:
                _link(self._cohort(parent), self.cohorts[name])
        self.cyclic_cohorts = frozenset(_cyclic(self.cohorts))
        for name in sorted(config.cluster_queues):
            cq = config.cluster_queues[name]
            node = QuotaNode(name, is_cluster_queue=True)
            node.quotas = _quotas(cq.resource_groups)
            self.cluster_queues[name] = node
            if cq.cohort:
                _link(self._cohort(cq.cohort), node)
        for node in self.cluster_queues.values():
            node.subtree_quota = {fr: q.nominal for fr, q in node.quotas.items()}
            node.freeze()
        for root in self.roots():
            _accumulate(root)
        for node in self.cohorts.values():
            node.freeze()

    def roots(self) -> list[QuotaNode]:
        return [c for name, c in sorted(self.cohorts.items()) if c.parent is None]

    def queues_in_tree(self, node: QuotaNode) -> list[QuotaNode]:
        """Every cluster queue of ``node``'s cohort tree (cached per root; the tree shape is fixed)."""
        root = node.root()
        queues = self._tree_queues.get(root.name)
        if queues is None:
            queues = self._tree_queues[root.name] = _leaves(root)
        return queues

    def in_cycle(self, cq_name: str) -> bool:
        node = self.cluster_queues[cq_name]
        return any(a.name in self.cyclic_cohorts for a in _bounded_path(node))

    def add(self, cq_name: str, usage: Mapping[FlavorResource, int]) -> None:
        node = self.cluster_queues[cq_name]
        for fr, amount in usage.items():
            if amount:
                add_usage(node, fr, amount)

    def remove(self, cq_name: str, usage: Mapping[FlavorResource, int]) -> None:
        node = self.cluster_queues[cq_name]
        for fr, amount in usage.items():
            if amount:
                remove_usage(node, fr, amount)


def _quotas(groups: Iterable[ResourceGroup]) -> dict[FlavorResource, ResourceQuota]:
    return {
        (flavor.name, resource): quota
        for group in groups
        for flavor in group.flavors
        for resource, quota in flavor.resources.items()
    }


def _leaves(node: QuotaNode) -> list[QuotaNode]:
    if node.is_cluster_queue:
        return [node]
    return [leaf for child in node.children for leaf in _leaves(child)]


def _link(parent: QuotaNode, child: QuotaNode) -> None:
    child.parent = parent
    parent.children.append(child)


def _bounded_path(node: QuotaNode) -> Iterator[QuotaNode]:
    seen: set[int] = set()
    current = node.parent
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.parent


def _cyclic(cohorts: Mapping[str, QuotaNode]) -> set[str]:
    cyclic: set[str] = set()
    for node in cohorts.values():
        path: list[QuotaNode] = [node]
        current = node.parent
        while current is not None and current not in path:
            path.append(current)
            current = current.parent
        if current is not None:
            cyclic.update(n.name for n in path[path.index(current) :])
    if cyclic:  # break the cycles so that walks terminate; the queues below are inactive
        for name in cyclic:
            cohorts[name].parent = None
            cohorts[name].children = [c for c in cohorts[name].children if c.name not in cyclic]
    return cyclic


def _accumulate(cohort: QuotaNode) -> None:
    """Compute subtree quota, usage and height bottom-up (resource_node.go)."""
    cohort.subtree_quota = {fr: q.nominal for fr, q in cohort.quotas.items()}
    cohort.usage = {}
    for child in cohort.children:
        if not child.is_cluster_queue:
            _accumulate(child)
            child.freeze()
        for fr, quota in child.subtree_quota.items():
            cohort.subtree_quota[fr] = cohort.subtree_quota.get(fr, 0) + quota - child.local_quota(fr)
        for fr, used in child.usage.items():
            cohort.usage[fr] = cohort.usage.get(fr, 0) + max(0, used - child.local_quota(fr))
    cohort.height = node_height(cohort)


def potential_available_for(config: ClusterConfig, cluster_queue: str, flavor: str, resource: str) -> int:
    """Largest amount of ``resource`` in ``flavor`` the queue could ever be admitted with."""
    tree = QuotaTree(config)
    node = tree.cluster_queues.get(cluster_queue)
    if node is None:
        return 0
    return potential_available(node, (flavor, resource))
