"""The deep end of a long queue: admissions by quota alone, after the exact part of a forecast.

Why: the exact engine re-evaluates every parked shape of a cohort at each finish
(Kueue's requeue rule), so one forecast costs about a full scheduling cycle per
shape per event, and a queue of thousands takes minutes. Slurm bounds its
planner the same way (``bf_max_job_test``). After the exact run has admitted its
budget of waiting workloads, the forecast goes on here: queue heads are
admitted in Kueue's order whenever their ClusterQueue's quota (the same quota
tree: nominal quota, borrowing and lending limits, cohorts), the first flavor
that fits in each resource group, and the cluster's total capacity allow. Not
modelled here: preemption, node fragmentation, topology, admission checks.
Each admission is O(heads of the affected queues); a capacity check comes first
so that most heads are rejected by a comparison.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuq.core.model import ClusterConfig, QueueingStrategy, Workload
from gpuq.core.queues import shape_of
from gpuq.core.quota import FlavorResource, QuotaTree, available


@dataclass(frozen=True, slots=True)
class Holding:
    """A workload holding quota when the model takes over, and when it lets go (relative time)."""

    key: str
    cluster_queue: str
    usage: Mapping[FlavorResource, int]
    ends_at: float


@dataclass(frozen=True, slots=True)
class Waiting:
    """A workload queued in ``cluster_queue`` (from ``arrives_at`` on), with the runtime the
    forecast gives it."""

    workload: Workload
    cluster_queue: str
    runtime_s: float
    arrives_at: float = -math.inf


@dataclass(frozen=True, slots=True)
class Modelled:
    """When the model admits, starts and ends one waiting workload (relative times)."""

    admitted_at: float
    started_at: float
    ended_at: float


Demand = tuple[tuple[str, int], ...]
"""Total requests per resource name, sorted by name (hashable: many workloads share one)."""


def demand_of(workload: Workload) -> Demand:
    """Every pod of every pod set together; resources asked at zero left out."""
    total: dict[str, int] = {}
    for pod_set in workload.pod_sets:
        for resource, amount in pod_set.requests.items():
            total[resource] = total.get(resource, 0) + amount * pod_set.count
    return tuple(sorted((r, n) for r, n in total.items() if n))


Order = tuple[int, float, str, str]
"""Kueue's queue order: higher priority, earlier creation, then uid and key."""


Head = tuple[Order, Waiting]


class _Queue:
    """One ClusterQueue's waiting workloads, one FIFO per shape (all of a shape have the same demand)."""

    __slots__ = ("fifos", "shapes", "strict")

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.fifos: dict[tuple[object, ...], deque[Head]] = {}
        self.shapes: dict[str, tuple[object, ...]] = {}  # key -> shape, of the waiting

    def heads(self) -> list[Head]:
        """Candidates now: the head of each shape (BestEffortFIFO) or of the queue (StrictFIFO)."""
        firsts = [fifo[0] for fifo in self.fifos.values()]
        if self.strict and firsts:
            return [min(firsts, key=lambda item: item[0])]
        return firsts

    def push(self, item: Waiting) -> None:
        """Into its shape's FIFO: a shape shares the priority, so creation order is queue order."""
        shape = shape_of(item.workload)
        self.shapes[item.workload.key] = shape
        fifo = self.fifos.setdefault(shape, deque())
        entry = (_order(item.workload), item)
        fifo.append(entry)
        if len(fifo) > 1 and fifo[-2][0] > entry[0]:
            self.fifos[shape] = deque(sorted(fifo, key=lambda e: e[0]))

    def pop(self, key: str) -> None:
        shape = self.shapes.pop(key)
        fifo = self.fifos[shape]
        fifo.popleft()
        if not fifo:
            del self.fifos[shape]


class _Model:
    """Quota, capacity in use, and the queues' current heads indexed by demand, so that one
    capacity check answers for every head of a size."""

    def __init__(self, config: ClusterConfig, capacity: Mapping[str, int]) -> None:
        self.config = config
        self.capacity = capacity
        self.tree = QuotaTree(config)
        self.used: dict[str, int] = {}
        self.queues: dict[str, _Queue] = {}
        self.demands: dict[str, Demand] = {}
        self.exposed: dict[str, list[Head]] = {}  # per queue, its heads in the index
        self.by_demand: dict[Demand, dict[str, Head]] = {}

    def hold(self, cq_name: str, usage: Mapping[FlavorResource, int], sign: int) -> None:
        if sign > 0:
            self.tree.add(cq_name, usage)
        else:
            self.tree.remove(cq_name, usage)
        for fr, amount in usage.items():
            self.used[fr[1]] = self.used.get(fr[1], 0) + sign * amount

    def enqueue(self, item: Waiting) -> None:
        queue = self.queues.get(item.cluster_queue)
        if queue is None:
            strategy = self.config.cluster_queues[item.cluster_queue].queueing_strategy
            queue = self.queues[item.cluster_queue] = _Queue(strategy == QueueingStrategy.STRICT_FIFO)
        self.demands[item.workload.key] = demand_of(item.workload)
        queue.push(item)
        self._expose(item.cluster_queue)

    def waiting(self) -> bool:
        return any(queue.fifos for queue in self.queues.values())

    def _expose(self, cq_name: str) -> None:
        """Re-index ``cq_name``'s heads after its queue changed."""
        demands, by_demand = self.demands, self.by_demand
        for order, _ in self.exposed.get(cq_name, ()):
            del by_demand[demands[order[3]]][order[3]]
        heads_now = self.queues[cq_name].heads()
        self.exposed[cq_name] = heads_now
        for head in heads_now:
            key = head[0][3]
            by_demand.setdefault(demands[key], {})[key] = head

    def fits(self, demand: Demand) -> bool:
        used, capacity = self.used, self.capacity
        return all(r not in capacity or used.get(r, 0) + n <= capacity[r] for r, n in demand)

    def admit_all(self) -> list[tuple[Waiting, dict[FlavorResource, int]]]:
        """Admit heads in queue order until none fits.

        While only admissions happen, capacity and quota only shrink: a demand that found no
        room, or one a queue had no quota for, stays that way for the rest of the call."""
        admitted: list[tuple[Waiting, dict[FlavorResource, int]]] = []
        too_big: set[Demand] = set()
        no_quota: set[tuple[str, Demand]] = set()
        candidates: list[Head] = []
        for demand, heads in self.by_demand.items():
            if heads and self.fits(demand):
                candidates.extend(heads.values())
            else:
                too_big.add(demand)
        heapq.heapify(candidates)
        seen = {head[0][3] for head in candidates}
        while candidates:
            order, item = heapq.heappop(candidates)
            demand = self.demands[order[3]]
            if demand in too_big or (item.cluster_queue, demand) in no_quota:
                continue
            if not self.fits(demand):
                too_big.add(demand)
                continue
            usage = _assignment(self.config, self.tree, item.cluster_queue, dict(demand))
            if usage is None:
                no_quota.add((item.cluster_queue, demand))
                continue
            self.hold(item.cluster_queue, usage, 1)
            admitted.append((item, usage))
            self.queues[item.cluster_queue].pop(order[3])
            self._expose(item.cluster_queue)
            for head in self.exposed[item.cluster_queue]:
                key = head[0][3]
                if key not in seen:
                    seen.add(key)
                    heapq.heappush(candidates, head)
        return admitted


def continue_queue(
    config: ClusterConfig,
    capacity: Mapping[str, int],
    start: float,
    holding: Iterable[Holding],
    waiting: Iterable[Waiting],
    *,
    startup_s: float = 0.0,
    horizon_s: float | None = None,
) -> dict[str, Modelled]:
    """Admit ``waiting`` from ``start`` on as ``holding`` ends; ``capacity``: the cluster's
    allocatable per resource name (what nodes hold, all flavors together; a resource it does not
    name is bounded by quota alone)."""
    model = _Model(config, capacity)
    ends: list[tuple[float, int, str, Mapping[FlavorResource, int]]] = []
    for index, held in enumerate(holding):
        model.hold(held.cluster_queue, held.usage, 1)
        ends.append((max(held.ends_at, start), index, held.cluster_queue, held.usage))
    heapq.heapify(ends)
    sequence = len(ends)
    items = [item for item in waiting if item.cluster_queue in config.cluster_queues]
    items.sort(key=lambda item: (item.arrives_at, _order(item.workload)))
    results: dict[str, Modelled] = {}
    now, arrived = start, 0
    while True:
        while arrived < len(items) and items[arrived].arrives_at <= now:
            model.enqueue(items[arrived])
            arrived += 1
        for item, assigned in model.admit_all():
            started = now + startup_s
            results[item.workload.key] = Modelled(now, started, started + item.runtime_s)
            heapq.heappush(ends, (started + item.runtime_s, sequence, item.cluster_queue, assigned))
            sequence += 1
        upcoming = [ends[0][0]] if ends and model.waiting() else []
        if arrived < len(items):
            upcoming.append(items[arrived].arrives_at)
        if not upcoming:
            break
        now = min(upcoming)
        if horizon_s is not None and now > horizon_s:
            break
        while ends and ends[0][0] <= now:
            _, _, cq_name, usage = heapq.heappop(ends)
            model.hold(cq_name, usage, -1)
    return results


def _order(workload: Workload) -> Order:
    return (-workload.priority, workload.creation_time, workload.uid or workload.key, workload.key)


def _assignment(
    config: ClusterConfig, tree: QuotaTree, cq_name: str, demand: Mapping[str, int]
) -> dict[FlavorResource, int] | None:
    """Per resource group, the first flavor whose quota covers the demand (Kueue's order, no
    preemption); None when a group has no such flavor or a resource no group covers."""
    cq = config.cluster_queues[cq_name]
    node = tree.cluster_queues[cq_name]
    usage: dict[FlavorResource, int] = {}
    covered = 0
    for group in cq.resource_groups:
        wanted = [(r, demand[r]) for r in group.covered_resources if demand.get(r)]
        if not wanted:
            continue
        covered += len(wanted)
        for flavor in group.flavors:
            frs = [((flavor.name, r), amount) for r, amount in wanted]
            if all(r in flavor.resources for r, _ in wanted) and all(
                amount <= available(node, fr) for fr, amount in frs
            ):
                usage.update(frs)
                break
        else:
            return None
    if covered < sum(1 for amount in demand.values() if amount):
        return None
    return usage
