"""The FGD paper's static packing experiment: one policy places a tuned, shuffled trace; nothing departs.

``run_pack`` follows the authors' simulator (``pkg/simulator/core.go``,
``simulator.go``, ``analysis.go``) and analysis scripts:

1. typical task types come from the original pod list, before tuning;
2. pods are sorted by name and shuffled with ``random.Random(seed)``;
3. workload tuning: with total GPU request below ``tune`` × cluster GPU milli,
   copies drawn uniformly (with replacement) from the name-sorted original list
   are appended until a draw would pass the target (upstream compares the
   total plus the copy's *per-GPU* milli, so one multi-GPU copy may overshoot;
   kept); above it, uniformly drawn pods are removed until it is met;
   ``tune <= 0`` keeps the list;
4. pods are placed one at a time with the policy; a pod that fits nowhere
   fails and is skipped;
5. after each pod a record holds the arrived GPU milli (failed pods included),
   allocated milli, fragmented milli and failures so far;
6. the point at x % averages the records whose arrived share rounds to x
   (then x ± 1 if none, else the state before x; ``merge_*_discrete.py``).

The Go simulator's ``math/rand`` stream cannot be reproduced, so pod orders
and random tie-breaks differ from upstream's seed for seed; distributions
over seeds are what compare.

Scoring every node for every pod (12.8 M calls at 130 % of openb) is too slow
in Python. Instead each distinct pod shape keeps a table of every node's score
key, bucketed by key; a table is refreshed lazily, re-scoring only the nodes
that changed since that shape last arrived (a change log). Cluster fragmentation
is kept up to date incrementally, one node per placement.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from gpuq.core.nodes import NO_GPU, GPUDemand
from gpuq.core.placement.fragmentation import FragmentationMeter, typical_tasks
from gpuq.core.placement.policies import (
    FULL_GPU_MILLI,
    NodeView,
    PlacementPolicy,
    PodView,
    PolicyInputs,
    TieBreak,
    after_placement,
    fits,
    make_policy,
    shuffled_order,
)
from gpuq.pack.openb import OpenbNode, OpenbPod

MIB = 1 << 20
ScoreKey = tuple[float, float]  # (-score, -tie_score): smaller is better


@dataclass(frozen=True, slots=True)
class PackPoint:
    """The cluster at ``arrived_pct`` % of its GPU capacity requested (all percentages of GPU milli)."""

    arrived_pct: int
    alloc_pct: float  # allocated / capacity
    frag_pct: float  # fragmented / capacity
    frag_ratio_pct: float  # fragmented / idle (0 when nothing is idle)
    failed_pods: int  # pods that fitted nowhere so far


@dataclass(frozen=True, slots=True)
class PackResult:
    policy: str
    seed: int
    tune: float
    total_gpus: int
    nodes: int
    pods: int  # arrived, tuned copies included
    failed: int
    points: tuple[PackPoint, ...]

    def as_dict(self) -> dict[str, Any]:
        """The ``gpuq pack -o json`` document; byte-identical for the same inputs and seed."""
        fields = ("policy", "seed", "tune", "total_gpus", "nodes", "pods", "failed")
        document: dict[str, Any] = {name: getattr(self, name) for name in fields}
        document["points"] = [asdict(point) for point in self.points]
        return document


@dataclass(frozen=True, slots=True)
class _Record:
    arrived_milli: int
    used_milli: int
    frag_milli: float
    idle_milli: int
    failed: int


def node_view(node: OpenbNode) -> NodeView:
    """An idle node."""
    memory = node.memory_mib * MIB
    return NodeView(
        (FULL_GPU_MILLI,) * node.gpu_count, node.cpu_milli, node.cpu_milli, memory, memory, node.gpu_model
    )


def pod_view(pod: OpenbPod) -> PodView:
    gpu = GPUDemand(count=pod.gpu_count, milli=pod.gpu_milli) if pod.gpu_count else NO_GPU
    return PodView(pod.cpu_milli, pod.memory_mib * MIB, gpu, pod.gpu_models)


def arrival_order(
    pods: Sequence[OpenbPod], tune: float, cluster_gpu_milli: int, rng: random.Random
) -> list[OpenbPod]:
    """Steps 2 and 3 of the module doc: the pods in the order they arrive."""
    original = sorted(pods, key=lambda pod: pod.name)
    order = list(original)
    rng.shuffle(order)
    total = sum(pod.gpu_total_milli for pod in order)
    target = tune * float(cluster_gpu_milli)
    if tune <= 0 or float(total) == target:
        return order
    if total == 0:
        raise ValueError("the pod list requests no GPU: nothing to tune")
    if float(total) > target:
        while float(total) > target and order:
            total -= order.pop(rng.randrange(len(order))).gpu_total_milli
        return order
    copies = 0
    while float(total) < target:
        pick = original[rng.randrange(len(original))]
        if float(total + pick.gpu_milli) > target:
            break
        order.append(replace(pick, name=f"{pick.name}-tuned-{copies}"))
        total += pick.gpu_total_milli
        copies += 1
    return order


def run_pack(
    nodes: Sequence[OpenbNode], pods: Sequence[OpenbPod], policy: str, tune: float = 1.3, seed: int = 42
) -> PackResult:
    """Run the experiment (module doc) with the policy named ``policy``."""
    total_gpus = sum(node.gpu_count for node in nodes)
    if total_gpus == 0:
        raise ValueError("the node list has no GPU")
    rng = random.Random(seed)
    tasks = typical_tasks(pod_view(pod).task for pod in pods)
    chosen = make_policy(policy, PolicyInputs(typical_tasks=tasks, rng=rng))
    order = arrival_order(pods, tune, total_gpus * FULL_GPU_MILLI, rng)
    views = [node_view(node) for node in nodes]
    cluster = PackingState(views, chosen, FragmentationMeter(tasks), rng, _node_ranks(nodes, chosen, rng))
    initial = cluster.record(0, 0)
    records: list[_Record] = []
    arrived = failed = 0
    for pod in order:
        arrived += pod.gpu_total_milli
        if not cluster.place(pod_view(pod)):
            failed += 1
        records.append(cluster.record(arrived, failed))
    limit = round(tune * 100) if tune > 0 else round(arrived / total_gpus / 10)
    points = _points(records, initial, total_gpus, limit)
    return PackResult(policy, seed, tune, total_gpus, len(nodes), len(records), failed, points)


def _node_ranks(nodes: Sequence[OpenbNode], policy: PlacementPolicy, rng: random.Random) -> list[int] | None:
    """``SHUFFLED`` tie-break ranks: upstream's random permutation over the nodes sorted by name,
    drawn after tuning; None for other policies."""
    if policy.tie_break is not TieBreak.SHUFFLED:
        return None
    by_name = sorted(range(len(nodes)), key=lambda index: nodes[index].name)
    ranks = [0] * len(nodes)
    for index, rank in zip(by_name, shuffled_order(len(nodes), rng), strict=True):
        ranks[index] = rank
    return ranks


class _ShapeTable:
    """Every node's score key for one pod shape, nodes bucketed by key (None: does not fit)."""

    __slots__ = ("buckets", "heap", "keys", "pod", "seen", "slot")

    def __init__(self, pod: PodView, size: int) -> None:
        self.pod = pod
        self.keys: list[ScoreKey | None] = [None] * size
        self.slot = [0] * size  # position of each node in its bucket's list
        self.buckets: dict[ScoreKey, list[int]] = {}
        self.heap: list[ScoreKey] = []  # bucket keys; stale entries are skipped when read
        self.seen = 0  # change-log entries already applied

    def move(self, node: int, key: ScoreKey | None) -> None:
        old = self.keys[node]
        if old == key:
            return
        if old is not None:
            leaving = self.buckets[old]
            last = leaving.pop()
            if last != node:
                leaving[self.slot[node]] = last
                self.slot[last] = self.slot[node]
            if not leaving:
                del self.buckets[old]
        if key is not None:
            joining = self.buckets.get(key)
            if joining is None:
                joining = self.buckets[key] = []
                heapq.heappush(self.heap, key)
            self.slot[node] = len(joining)
            joining.append(node)
        self.keys[node] = key

    def best(self) -> list[int] | None:
        """The nodes of the best key, None when no node fits."""
        heap, buckets = self.heap, self.buckets
        while heap and heap[0] not in buckets:
            heapq.heappop(heap)
        return buckets[heap[0]] if heap else None


class PackingState:
    """The cluster during a run: node views, the policy's shape tables (module doc), the
    tie-break ranks and running totals; ``place`` chooses exactly as ``choose_node``."""

    def __init__(
        self,
        views: list[NodeView],
        policy: PlacementPolicy,
        meter: FragmentationMeter,
        rng: random.Random,
        ranks: Sequence[int] | None = None,
    ) -> None:
        self.views, self.policy, self.meter, self.rng = views, policy, meter, rng
        self.frag = [meter.fragmentation(view) for view in views]
        self.frag_total = math.fsum(self.frag)
        self.capacity = sum(v.gpu_total_milli for v in views)
        self.idle = sum(v.gpu_idle_milli for v in views)
        self.changes: list[int] = []
        self.tables: dict[PodView, _ShapeTable] = {}
        self.ranks = list(range(len(views)) if ranks is None else ranks)  # SHUFFLED ties: lowest first

    def record(self, arrived_milli: int, failed: int) -> _Record:
        return _Record(arrived_milli, self.capacity - self.idle, self.frag_total, self.idle, failed)

    def place(self, pod: PodView) -> bool:
        """Place ``pod`` on the best node; False when it fits nowhere."""
        candidates = self._table(pod).best()
        if candidates is None:
            return False
        if self.policy.tie_break is TieBreak.SHUFFLED:
            index = min(candidates, key=self.ranks.__getitem__)
        elif self.policy.tie_break is TieBreak.ORDER:
            index = min(candidates)
        else:
            index = candidates[self.rng.randrange(len(candidates))] if len(candidates) > 1 else candidates[0]
        node = self.views[index]
        gpus = self.policy.pick_gpus(node, pod)
        placed = self.views[index] = after_placement(node, pod, gpus)
        frag = self.meter.fragmentation(placed)
        self.frag_total += frag - self.frag[index]
        self.frag[index] = frag
        self.idle -= pod.gpu.milli * len(gpus)
        self.changes.append(index)
        return True

    def _table(self, pod: PodView) -> _ShapeTable:
        """The shape's table, re-scoring the nodes changed since it was last read."""
        table = self.tables.get(pod)
        if table is None:
            table = self.tables[pod] = _ShapeTable(pod, len(self.views))
            stale: Sequence[int] = range(len(self.views))
        else:
            stale = list(dict.fromkeys(self.changes[table.seen :]))
        table.seen = len(self.changes)
        policy, views, ordered = self.policy, self.views, self.policy.tie_break is TieBreak.ORDER
        for index in stale:
            node = views[index]
            if not fits(node, pod):
                table.move(index, None)
            else:
                tie = -policy.tie_score(node, pod) if ordered else 0.0
                table.move(index, (-policy.score(node, pod), tie))
        return table


def _points(
    records: Sequence[_Record], initial: _Record, total_gpus: int, limit: int
) -> tuple[PackPoint, ...]:
    """Step 6 of the module doc, for 0..limit %."""
    bins: dict[int, list[_Record]] = {}
    for record in records:
        bins.setdefault(round(record.arrived_milli / total_gpus / 10), []).append(record)
    points: list[PackPoint] = []
    carried = initial
    for pct in range(limit + 1):
        group = bins.get(pct) or [r for near in (pct - 1, pct + 1) for r in bins.get(near, [])]
        points.append(_point(pct, group or [carried], total_gpus))
        carried = bins[pct][-1] if pct in bins else carried
    return tuple(points)


def _point(pct: int, group: Sequence[_Record], total_gpus: int) -> PackPoint:
    """Means over ``group``; allocation and fragmentation ratio are rounded per record first,
    as the simulator's log lines and the analysis script do."""
    alloc = math.fsum(round(r.used_milli / total_gpus / 10, 2) for r in group) / len(group)
    frag = math.fsum(r.frag_milli for r in group) / len(group) / (total_gpus * FULL_GPU_MILLI) * 100
    ratio = math.fsum(round(100 * r.frag_milli / r.idle_milli, 2) if r.idle_milli else 0.0 for r in group)
    return PackPoint(
        pct, round(alloc, 2), round(frag, 2), round(ratio / len(group), 2), max(r.failed for r in group)
    )
