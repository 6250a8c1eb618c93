"""What the simulator measures while it runs: GPU state per node and per team, quota borrowing.

Everything is updated from the one thing that changed (a node's bindings, a
queue's usage), never by scanning the cluster: totals move by the difference
between a node's old and new state, and borrowing is integrated per cohort.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gpuq.core.model import ClusterConfig, ResourceFlavor, ResourceGroup
from gpuq.core.nodes import GPU, GPU_MILLI, Node, is_device_resource
from gpuq.core.placement.capacity import NodeCapacity
from gpuq.core.quota import FlavorResource
from gpuq.sim.series import StepSeries


def gpus_of_usage(usage: Mapping[FlavorResource, int]) -> dict[str, float]:
    """GPUs per flavor in a quota usage: whole GPUs plus thousandths of a GPU."""
    per_flavor: dict[str, float] = {}
    for (flavor, resource), amount in usage.items():
        if resource == GPU:
            per_flavor[flavor] = per_flavor.get(flavor, 0.0) + amount
        elif resource == GPU_MILLI:
            per_flavor[flavor] = per_flavor.get(flavor, 0.0) + amount / 1000
    return per_flavor


def node_gpu_state(capacity: NodeCapacity) -> tuple[float, int]:
    """(GPUs in use as a share, devices with at least one pod) on one node."""
    node = capacity.node
    if not node.gpu_count:
        return 0.0, 0
    if capacity.per_device:
        milli = capacity.gpu_milli
        return (1000 * len(milli) - sum(milli)) / 1000, sum(1 for m in milli if m < 1000)
    total = free = 0
    for name, amount in node.allocatable.items():
        if is_device_resource(name):
            total += amount
            free += capacity.free.get(name, 0)
    share = node.gpu_count * (total - free) / total if total else 0.0
    return share, min(node.gpu_count, -int(-share // 1))


@dataclass(frozen=True, slots=True, order=True)
class CostGroup:
    """Nodes priced and reported together: the ResourceFlavor they match, their pool, capacity type
    (reserved, on-demand, spot) and GPU model; "" where a node has none."""

    flavor: str = ""
    pool: str = ""
    capacity_type: str = ""
    gpu_model: str = ""


def flavor_of(node: Node, flavors: Mapping[str, ResourceFlavor]) -> str:
    """The ResourceFlavor whose node labels ``node`` carries; the most specific (most labels) when
    several do, then the first by name; "" when none does."""
    matching = [
        (-len(f.node_labels), name)
        for name, f in flavors.items()
        if all(node.labels.get(k) == v for k, v in f.node_labels.items())
    ]
    return min(matching)[1] if matching else ""


@dataclass(slots=True)
class CostSeries:
    """One cost group's nodes over time: price per hour of those in service (paid), price per hour
    of the GPU share pods hold (used), GPUs in service and GPU share held."""

    paid_rate: StepSeries = field(default_factory=StepSeries)
    used_rate: StepSeries = field(default_factory=StepSeries)
    gpus: StepSeries = field(default_factory=StepSeries)
    allocated: StepSeries = field(default_factory=StepSeries)


@dataclass(slots=True)
class CohortLedger:
    """Borrowed and lent GPU-time of the ClusterQueues of one cohort.

    A queue borrows what it uses above its nominal quota; what is borrowed is
    lent by the members' idle nominal quota, shared among them in proportion to
    it (the rest comes from the cohort's own quota). ``lent_rate_integral`` is
    ∫ lent / idle dt, so a queue's lent time is its idle quota times the growth
    of that integral while the idle quota was constant: O(1) per change.
    """

    borrowed: float = 0.0  # GPUs borrowed now, all members
    idle: float = 0.0  # idle nominal GPUs now, all members
    since: float = 0.0
    borrowed_s: float = 0.0
    lent_s: float = 0.0
    lent_rate_integral: float = 0.0

    def advance(self, now: float) -> None:
        dt = now - self.since
        if dt > 0:
            lent = min(self.borrowed, self.idle)
            self.borrowed_s += self.borrowed * dt
            self.lent_s += lent * dt
            if self.idle > 0:
                self.lent_rate_integral += lent / self.idle * dt
        self.since = now


@dataclass(slots=True)
class QueueLedger:
    cohort: str | None
    nominal: dict[str, float]  # GPUs per flavor
    used: dict[str, float] = field(default_factory=dict)
    borrowed: float = 0.0
    idle: float = 0.0
    since: float = 0.0
    borrowed_s: float = 0.0
    lent_s: float = 0.0
    rate_mark: float = 0.0  # the cohort's lent_rate_integral when ``idle`` last changed

    def recompute(self) -> tuple[float, float]:
        borrowed = idle = 0.0
        for flavor in self.nominal.keys() | self.used.keys():
            nominal, used = self.nominal.get(flavor, 0.0), self.used.get(flavor, 0.0)
            borrowed += max(0.0, used - nominal)
            idle += max(0.0, nominal - used)
        return borrowed, idle


class Recorder:
    """Series and integrals of one simulation run."""

    def __init__(self, config: ClusterConfig) -> None:
        self.capacity = StepSeries()  # GPUs on nodes in service
        self.allocated = StepSeries()  # GPU share held by pods
        self.occupied = StepSeries()  # devices with a pod
        self.fragmented = StepSeries()  # free GPU share on nodes partly in use
        self.node_cost_rate = StepSeries()  # price per hour of the nodes in service
        self.running: dict[str, StepSeries] = {}  # team -> GPUs held
        self.pending: dict[str, StepSeries] = {}  # team -> workloads submitted, pods not all bound yet
        self._nodes: dict[str, tuple[float, int]] = {}
        self._gpus: dict[str, int] = {}
        self._prices: dict[str, float] = {}
        self._flavors = config.flavors
        self._group_of: dict[str, CostGroup] = {}
        self.cost_groups: dict[CostGroup, CostSeries] = {}
        """Per group of nodes, what they cost and what of it pods used (the cost table's rows)."""
        self.team_used_rate: dict[str, StepSeries] = {}  # team -> price per hour of the GPUs it holds
        self.priced = False  # some node came with a price: without, every cost is "no prices set"
        self.watch: Callable[[float, str, NodeCapacity | None], None] | None = None
        """Told of every node that comes up, changes (``capacity``) or goes down (None): the
        provisioning hooks' idle tracking (gpuq.sim.provisioning.provisioner); None costs nothing."""
        self.queues = {
            name: QueueLedger(cq.cohort, nominal_gpus(cq.resource_groups))
            for name, cq in config.cluster_queues.items()
        }
        self.quota_used: dict[str, StepSeries] = {}  # resource -> usage summed over queues and flavors
        self.quota_nominal: dict[str, int] = {}  # resource -> nominal quota summed over queues and flavors
        for cq in config.cluster_queues.values():
            for group in cq.resource_groups:
                for flavor in group.flavors:
                    for resource, quota in flavor.resources.items():
                        self.quota_nominal[resource] = self.quota_nominal.get(resource, 0) + quota.nominal
        self.cohorts = {cohort: CohortLedger() for q in self.queues.values() if (cohort := q.cohort)}
        for queue in self.queues.values():
            queue.borrowed, queue.idle = queue.recompute()
            if queue.cohort:
                self.cohorts[queue.cohort].idle += queue.idle

    # ------------------------------------------------------------------ nodes
    def node_up(self, now: float, capacity: NodeCapacity, price_per_hour: float) -> None:
        name = capacity.node.name
        self._gpus[name] = capacity.node.gpu_count
        self._prices[name] = price_per_hour
        self.priced = self.priced or price_per_hour > 0
        self._nodes[name] = (0.0, 0)
        self.capacity.add(now, capacity.node.gpu_count)
        self.node_cost_rate.add(now, price_per_hour)
        group = self._cost_series(capacity.node)
        group.paid_rate.add(now, price_per_hour)
        group.gpus.add(now, capacity.node.gpu_count)
        self.node_changed(now, capacity)

    def node_down(self, now: float, name: str) -> None:
        used, busy = self._nodes.pop(name)
        if self.watch is not None:
            self.watch(now, name, None)
        gpus = self._gpus[name]
        self._shift(now, name, gpus, used, busy, -1)
        self.capacity.add(now, -gpus)
        self.node_cost_rate.add(now, -self._prices[name])
        group = self.cost_groups[self._group_of[name]]
        group.paid_rate.add(now, -self._prices[name])
        group.gpus.add(now, -gpus)

    def node_changed(self, now: float, capacity: NodeCapacity) -> None:
        name = capacity.node.name
        old = self._nodes.get(name)
        if old is None:
            return  # not in service
        if self.watch is not None:
            self.watch(now, name, capacity)
        new = node_gpu_state(capacity)
        if new == old:
            return
        gpus = self._gpus[name]
        self._shift(now, name, gpus, *old, -1)
        self._shift(now, name, gpus, *new, 1)
        self._nodes[name] = new

    def _shift(self, now: float, name: str, gpus: int, used: float, busy: int, sign: int) -> None:
        self.allocated.add(now, sign * used)
        self.cost_groups[self._group_of[name]].allocated.add(now, sign * used)
        self.occupied.add(now, sign * busy)
        if used > 0:
            self.fragmented.add(now, sign * (gpus - used))

    def _cost_series(self, node: Node) -> CostSeries:
        group = self._group_of.get(node.name)
        if group is None:
            flavor = flavor_of(node, self._flavors)
            group = CostGroup(flavor, node.pool or "", node.capacity_type or "", node.gpu_model or "")
            self._group_of[node.name] = group
        return self.cost_groups.setdefault(group, CostSeries())

    def pods_priced(self, now: float, team: str, per_node: Mapping[str, float], sign: int) -> None:
        """Pods of ``team`` started (+1) or stopped (-1) holding GPUs priced ``per_node`` per hour."""
        total = 0.0
        for node, rate in per_node.items():  # in binding order: deterministic
            self.cost_groups[self._group_of[node]].used_rate.add(now, sign * rate)
            total += rate
        series = self.team_used_rate.get(team)
        if series is None:
            series = self.team_used_rate[team] = StepSeries()
        series.add(now, sign * total)

    def price_per_gpu_hour(self, node: str) -> float:
        gpus = self._gpus.get(node, 0)
        return self._prices.get(node, 0.0) / gpus if gpus else 0.0

    # ------------------------------------------------------------------ teams
    def team_running(self, now: float, team: str, gpus: float) -> None:
        self.running.setdefault(team, StepSeries()).add(now, gpus)

    def team_pending(self, now: float, team: str, delta: int) -> None:
        self.pending.setdefault(team, StepSeries()).add(now, delta)

    # ------------------------------------------------------------------ quota
    def queue_usage(self, now: float, cq_name: str, usage: Mapping[FlavorResource, int], sign: int) -> None:
        """A workload started (+1) or stopped (-1) holding ``usage`` in ``cq_name``."""
        for (_flavor, resource), amount in usage.items():
            self.quota_used.setdefault(resource, StepSeries()).add(now, sign * amount)
        queue = self.queues[cq_name]
        cohort = self.cohorts.get(queue.cohort) if queue.cohort else None
        if cohort is not None:
            cohort.advance(now)
        _advance_queue(queue, cohort, now)
        for flavor, gpus in gpus_of_usage(usage).items():
            queue.used[flavor] = queue.used.get(flavor, 0.0) + sign * gpus
        borrowed, idle = queue.recompute()
        if cohort is not None:
            cohort.borrowed += borrowed - queue.borrowed
            cohort.idle += idle - queue.idle
        queue.borrowed, queue.idle = borrowed, idle

    def close(self, now: float) -> None:
        """Bring every integral up to ``now``."""
        for cohort in self.cohorts.values():
            cohort.advance(now)
        for queue in self.queues.values():
            _advance_queue(queue, self.cohorts.get(queue.cohort) if queue.cohort else None, now)

    @property
    def teams(self) -> Iterable[str]:
        return sorted(self.running.keys() | self.pending.keys())


def _advance_queue(queue: QueueLedger, cohort: CohortLedger | None, now: float) -> None:
    dt = now - queue.since
    if dt > 0:
        queue.borrowed_s += queue.borrowed * dt
    if cohort is not None:
        queue.lent_s += queue.idle * (cohort.lent_rate_integral - queue.rate_mark)
        queue.rate_mark = cohort.lent_rate_integral
    queue.since = now


def nominal_gpus(groups: Iterable[ResourceGroup]) -> dict[str, float]:
    nominal: dict[str, float] = {}
    for group in groups:
        for flavor in group.flavors:
            usage = {(flavor.name, r): q.nominal for r, q in flavor.resources.items()}
            for name, gpus in gpus_of_usage(usage).items():
                nominal[name] = nominal.get(name, 0.0) + gpus
    return nominal
