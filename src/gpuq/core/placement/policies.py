"""Node scoring policies: the six of the FGD paper's experiments, and gpuq's binpack and spread.

A policy scores a feasible node for a pod (higher is better) and picks the
GPUs the pod gets on the chosen node. The six paper policies follow the
authors' simulator (``hkust-adsl/kubernetes-scheduler-simulator``,
``pkg/simulator/plugin``) to the integer: each returns the plugin's int64
score, truncations included, because which nodes tie decides where pods go.
The simulator's kube-scheduler fork (``mental2008/kubernetes`` v1.20.5-minor,
``selectHost``) gives a tie to the lexicographically smallest node name, and
the simulator prefixes node names with a seeded random permutation: ties go
to the first node of a random node order fixed for the whole run
(``TieBreak.SHUFFLED``). Their GPU choice is the simulator's Reserve step
(``open_gpu_share.go``): the tightest GPU for a GPU-sharing pod (least free
milli that fits, lowest index on ties) and the lowest-index GPUs for
whole-GPU pods, except where a policy says otherwise.

gpuq's own policies (``TieBreak.ORDER``) rank by ``(score, tie_score)``, then
the lowest node index. ``choose_node`` is the reference selection.

Constants ``MAX_SPEC_*`` are upstream's normalisers (128 cores, 8 GPUs).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol

from gpuq.core.nodes import GPUDemand
from gpuq.core.placement.fragmentation import FULL_GPU_MILLI as FULL_GPU_MILLI
from gpuq.core.placement.fragmentation import FragmentationMeter, TypicalTask, model_allowed
from gpuq.core.placement.fragmentation import NodeView as NodeView  # re-exported: the views policies read
from gpuq.core.placement.fragmentation import PodView as PodView

MAX_SCORE = 100
MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8_000


def gpu_kind(demand: GPUDemand) -> str | None:
    """Upstream's GPU affinity tag: ``share-gpu``, ``N-gpu`` for whole GPUs, None for CPU-only."""
    if demand.count == 0:
        return None
    if demand.fractional:
        return "share-gpu"
    if demand.milli == FULL_GPU_MILLI:
        return f"{demand.count}-gpu"
    return f"{demand.count}x{demand.milli}m-gpu"


def fits(node: NodeView, pod: PodView) -> bool:
    """The simulator's filters: free CPU and memory, and for a GPU pod an allowed model and
    ``count`` distinct GPUs each with at least ``milli`` free."""
    if node.cpu_free_milli < pod.cpu_milli or node.memory_free_bytes < pod.memory_bytes:
        return False
    demand = pod.gpu
    if demand.count == 0:
        return True
    if not node.gpu_free_milli or not model_allowed(node.gpu_model, pod.gpu_models):
        return False
    return sum(1 for free in node.gpu_free_milli if free >= demand.milli) >= demand.count


def tightest_gpus(node: NodeView, demand: GPUDemand) -> tuple[int, ...]:
    """The ``count`` GPUs with the least free milli that fits, lower index first on ties.

    For a sharing pod this is upstream's best-fit GPU; for whole GPUs it is the
    lowest-index idle GPUs (``AllocateExclusiveGpuId``).
    """
    free = node.gpu_free_milli
    order = sorted((i for i in range(len(free)) if free[i] >= demand.milli), key=lambda i: (free[i], i))
    return tuple(sorted(order[: demand.count]))


def loosest_gpus(node: NodeView, demand: GPUDemand) -> tuple[int, ...]:
    """The ``count`` GPUs with the most free milli, lower index first on ties (spread's mirror)."""
    free = node.gpu_free_milli
    order = sorted((i for i in range(len(free)) if free[i] >= demand.milli), key=lambda i: (-free[i], i))
    return tuple(sorted(order[: demand.count]))


def after_placement(node: NodeView, pod: PodView, gpus: Sequence[int]) -> NodeView:
    """The node once ``pod`` runs on it with ``gpus``."""
    free = list(node.gpu_free_milli)
    for index in gpus:
        free[index] -= pod.gpu.milli
    kinds = dict(node.gpu_pod_kinds)
    kind = gpu_kind(pod.gpu)
    if kind is not None:
        kinds[kind] = kinds.get(kind, 0) + 1
    return replace(
        node,
        gpu_free_milli=tuple(free),
        cpu_free_milli=node.cpu_free_milli - pod.cpu_milli,
        memory_free_bytes=node.memory_free_bytes - pod.memory_bytes,
        gpu_pod_kinds=tuple(sorted(kinds.items())),
    )


class TieBreak(StrEnum):
    """How a policy chooses among the nodes with the best score."""

    UNIFORM = "uniform"  # uniformly at random (the random policy)
    SHUFFLED = "shuffled"  # first in a seeded random node order fixed for the run (upstream)
    ORDER = "order"  # best tie_score, then lowest node index (gpuq)


class PlacementPolicy(Protocol):
    """What a placement engine needs of a policy; ``score`` is called only for feasible nodes."""

    name: str
    tie_break: TieBreak

    def score(self, node: NodeView, pod: PodView) -> float: ...

    def tie_score(self, node: NodeView, pod: PodView) -> float: ...

    def pick_gpus(self, node: NodeView, pod: PodView) -> tuple[int, ...]: ...


class _Policy:
    """Defaults: upstream's shuffled tie-break, no tie score, upstream's best-fit GPU choice."""

    name: str = ""
    tie_break: TieBreak = TieBreak.SHUFFLED

    def score(self, node: NodeView, pod: PodView) -> float:
        raise NotImplementedError

    def tie_score(self, node: NodeView, pod: PodView) -> float:
        return 0.0

    def pick_gpus(self, node: NodeView, pod: PodView) -> tuple[int, ...]:
        return tightest_gpus(node, pod.gpu) if pod.gpu.count else ()


def _trunc_div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b > 0) else -quotient


class RandomPolicy(_Policy):
    """``01-Random``: a uniformly random feasible node (all score 0, ``TieBreak.UNIFORM``;
    upstream's PreScore draws one feasible node); a sharing pod gets a uniformly random GPU
    among those it fits on (``SelRandomGpu``)."""

    name = "random"
    tie_break = TieBreak.UNIFORM

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def score(self, node: NodeView, pod: PodView) -> float:
        return 0.0

    def pick_gpus(self, node: NodeView, pod: PodView) -> tuple[int, ...]:
        if not pod.gpu.fractional:
            return super().pick_gpus(node, pod)
        candidates = [i for i, free in enumerate(node.gpu_free_milli) if free >= pod.gpu.milli]
        return (candidates[self.rng.randrange(len(candidates))],)


class DotProductPolicy(_Policy):
    """``02-DotProd`` (Tetris; merged GPU dimension, normalised by the max spec):
    ``int(100 × (1 − (cpu_free·cpu_req/128k² + gpu_free·gpu_req/8k²) / 2))``."""

    name = "dotprod"

    def score(self, node: NodeView, pod: PodView) -> float:
        inner = 0.0
        inner += (node.cpu_free_milli / MAX_SPEC_CPU_MILLI) * (pod.cpu_milli / MAX_SPEC_CPU_MILLI)
        inner += (node.gpu_idle_milli / MAX_SPEC_GPU_MILLI) * (pod.gpu.total_milli / MAX_SPEC_GPU_MILLI)
        return float(int(float(MAX_SCORE) * (1 - inner / 2)))


class GpuClusteringPolicy(_Policy):
    """``03-GpuClustering``: prefer nodes already running only pods of the pod's GPU kind
    (75–100), then mixed nodes with that kind (50–75), then empty ones (25–50), then others
    (0–25); within a band, fewer free GPU milli is better (integer steps). CPU-only pods
    score 0 everywhere."""

    name = "gpu-clustering"

    def score(self, node: NodeView, pod: PodView) -> float:
        kind = gpu_kind(pod.gpu)
        if kind is None:
            return 0.0
        step = _trunc_div(MAX_SCORE // 4 * (MAX_SPEC_GPU_MILLI - node.gpu_idle_milli), MAX_SPEC_GPU_MILLI)
        kinds = dict(node.gpu_pod_kinds)
        if kinds.get(kind, 0) > 0:
            band = MAX_SCORE * 3 // 4 if len(kinds) == 1 else MAX_SCORE * 2 // 4
        else:
            band = MAX_SCORE // 4 if not kinds else 0
        return float(step + band)


class GpuPackingPolicy(_Policy):
    """``04-GpuPacking``: 1. a pod that fits on partly used GPUs scores 50–100 (less free milli
    left on them is better); 2. one that needs idle GPUs on a used node 33–50 (fewer idle GPUs
    taken is better); 3. an idle node ``max(33 − GPUs, GPUs)``. CPU-only pods score 0."""

    name = "gpu-packing"

    def score(self, node: NodeView, pod: PodView) -> float:
        if pod.gpu.count == 0:
            return 0.0
        free = node.gpu_free_milli
        idle_gpus = sum(1 for milli in free if milli == FULL_GPU_MILLI)
        if idle_gpus == len(free):
            return float(max(MAX_SCORE // 3 - idle_gpus, idle_gpus))
        used = tightest_gpus(node, pod.gpu)
        idle_used = sum(1 for i in used if free[i] == FULL_GPU_MILLI)
        if idle_used:
            return float(max(MAX_SCORE // 2 - idle_used, MAX_SCORE // 3))
        free_pct = sum(free[i] * 100 // FULL_GPU_MILLI for i in used)
        return float(max(MAX_SCORE - free_pct // 10, MAX_SCORE // 2))


class BestFitPolicy(_Policy):
    """``05-BestFit``: ``int(100 × (1 − ½·cpu_left/128k − ½·gpu_left/8k))`` with what would be
    left after placement (upstream's min-max normalisation keeps the best set)."""

    name = "bestfit"

    def score(self, node: NodeView, pod: PodView) -> float:
        left = 0.0
        left += (node.cpu_free_milli - pod.cpu_milli) / MAX_SPEC_CPU_MILLI * 0.5
        left += (node.gpu_idle_milli - pod.gpu.total_milli) / MAX_SPEC_GPU_MILLI * 0.5
        return float(int((1.0 - left) * float(MAX_SCORE)))


def _sigmoid(x: float) -> float:
    return 0.0 if x < -700.0 else 1.0 / (1.0 + math.exp(-x))


class FGDPolicy(_Policy):
    """``06-FGD``, fragmentation gradient descent: ``int(100 × sigmoid(−Δfrag / 1000))`` where
    Δfrag is the growth of the node's expected fragmentation (``fragmentation.py``) if the pod
    were placed. A sharing pod is tried on each GPU it fits; the node's score is the best, and
    the pod gets the first GPU (lowest index) reaching it. Other pods take the tightest GPUs
    (lowest-index idle GPUs for whole-GPU pods)."""

    name = "fgd"

    def __init__(self, tasks: Sequence[TypicalTask]) -> None:
        self.meter = FragmentationMeter(tasks)
        self._memo: dict[tuple[object, ...], int] = {}

    def score(self, node: NodeView, pod: PodView) -> float:
        meter = self.meter
        before = tuple(sorted(node.gpu_free_milli))
        level = meter.cpu_level(node.cpu_free_milli)
        level_after = meter.cpu_level(node.cpu_free_milli - pod.cpu_milli)
        key = (node.gpu_model, level, level_after, before, pod.gpu.count, pod.gpu.milli)
        score = self._memo.get(key)
        if score is None:
            frag = meter.leveled(before, level, node.gpu_model)
            if pod.gpu.fractional:
                options = sorted({free for free in before if free >= pod.gpu.milli})
                score = max(self._gradient(frag, before, (free,), level_after, node, pod) for free in options)
            else:
                taken = tuple(free for free in before if free >= pod.gpu.milli)[: pod.gpu.count]
                score = self._gradient(frag, before, taken, level_after, node, pod)
            self._memo[key] = score
        return float(score)

    def _gradient(
        self,
        frag: float,
        before: tuple[int, ...],
        taken: tuple[int, ...],
        level_after: int,
        node: NodeView,
        pod: PodView,
    ) -> int:
        """The score of taking ``pod.gpu.milli`` from GPUs whose free milli are ``taken``."""
        after = list(before)
        for free in taken:
            after[after.index(free)] = free - pod.gpu.milli
        frag_after = self.meter.leveled(tuple(sorted(after)), level_after, node.gpu_model)
        return int(_sigmoid((frag - frag_after) / 1000) * float(MAX_SCORE))

    def pick_gpus(self, node: NodeView, pod: PodView) -> tuple[int, ...]:
        if not pod.gpu.fractional:
            return super().pick_gpus(node, pod)
        before = tuple(sorted(node.gpu_free_milli))
        frag = self.meter.fragmentation(node)
        level_after = self.meter.cpu_level(node.cpu_free_milli - pod.cpu_milli)
        best_index, best_score = -1, -1
        for index, free in enumerate(node.gpu_free_milli):
            if free >= pod.gpu.milli:
                score = self._gradient(frag, before, (free,), level_after, node, pod)
                if score > best_score:
                    best_index, best_score = index, score
        return (best_index,)


def _allocated_after(total: int, free_after: int) -> float:
    return (total - free_after) / total if total else 0.0


class BinpackPolicy(_Policy):
    """gpuq's most-allocated: the highest share of the node's GPU milli allocated after
    placement; ties by the highest CPU share allocated after placement, then lowest node
    index. Tightest GPUs."""

    name = "binpack"
    tie_break = TieBreak.ORDER

    def score(self, node: NodeView, pod: PodView) -> float:
        return _allocated_after(node.gpu_total_milli, node.gpu_idle_milli - pod.gpu.total_milli)

    def tie_score(self, node: NodeView, pod: PodView) -> float:
        return _allocated_after(node.cpu_total_milli, node.cpu_free_milli - pod.cpu_milli)


class SpreadPolicy(BinpackPolicy):
    """gpuq's least-allocated, binpack's mirror: the lowest GPU share allocated after
    placement, then the lowest CPU share, then lowest node index; GPUs with the most free
    milli (lower index on ties)."""

    name = "spread"

    def score(self, node: NodeView, pod: PodView) -> float:
        return -super().score(node, pod)

    def tie_score(self, node: NodeView, pod: PodView) -> float:
        return -super().tie_score(node, pod)

    def pick_gpus(self, node: NodeView, pod: PodView) -> tuple[int, ...]:
        return loosest_gpus(node, pod.gpu)


class PolicyName(StrEnum):
    RANDOM = "random"
    DOTPROD = "dotprod"
    GPU_CLUSTERING = "gpu-clustering"
    GPU_PACKING = "gpu-packing"
    BESTFIT = "bestfit"
    FGD = "fgd"
    BINPACK = "binpack"
    SPREAD = "spread"


@dataclass(frozen=True, slots=True)
class PolicyInputs:
    """What constructing a policy may need: FGD the workload's typical task types, random
    a seeded ``random.Random`` (the core has no ambient randomness)."""

    typical_tasks: tuple[TypicalTask, ...] = ()
    rng: random.Random | None = None


def _random(inputs: PolicyInputs) -> PlacementPolicy:
    if inputs.rng is None:
        raise ValueError("the random policy needs a seeded random.Random")
    return RandomPolicy(inputs.rng)


POLICIES: Mapping[str, Callable[[PolicyInputs], PlacementPolicy]] = MappingProxyType(
    {
        PolicyName.RANDOM: _random,
        PolicyName.DOTPROD: lambda _: DotProductPolicy(),
        PolicyName.GPU_CLUSTERING: lambda _: GpuClusteringPolicy(),
        PolicyName.GPU_PACKING: lambda _: GpuPackingPolicy(),
        PolicyName.BESTFIT: lambda _: BestFitPolicy(),
        PolicyName.FGD: lambda inputs: FGDPolicy(inputs.typical_tasks),
        PolicyName.BINPACK: lambda _: BinpackPolicy(),
        PolicyName.SPREAD: lambda _: SpreadPolicy(),
    }
)
"""Policy constructors by name, in the paper's order then gpuq's."""


def make_policy(name: str, inputs: PolicyInputs = PolicyInputs()) -> PlacementPolicy:
    """The policy called ``name``; ValueError names the known ones."""
    factory = POLICIES.get(name)
    if factory is None:
        raise ValueError(f"unknown placement policy {name!r}; known: {', '.join(POLICIES)}")
    return factory(inputs)


def shuffled_order(size: int, rng: random.Random) -> list[int]:
    """A rank per node, a random permutation of ``range(size)``: ``TieBreak.SHUFFLED``'s order."""
    ranks = list(range(size))
    rng.shuffle(ranks)
    return ranks


def choose_node(
    policy: PlacementPolicy,
    nodes: Sequence[NodeView],
    pod: PodView,
    rng: random.Random,
    ranks: Sequence[int] | None = None,
) -> int | None:
    """Reference selection: the index of the node ``pod`` goes to, None when none fits.

    The best ``(score, tie_score)`` among feasible nodes; among equals, ``UNIFORM``
    draws with ``rng`` (no draw when one node is best), ``SHUFFLED`` takes the
    lowest of ``ranks`` (default: index order) and ``ORDER`` the lowest index.
    """
    best: list[int] = []
    best_key: tuple[float, float] | None = None
    for index, node in enumerate(nodes):
        if not fits(node, pod):
            continue
        key = (policy.score(node, pod), policy.tie_score(node, pod))
        if best_key is None or key > best_key:
            best_key, best = key, [index]
        elif key == best_key:
            best.append(index)
    if not best:
        return None
    if policy.tie_break is TieBreak.UNIFORM:
        return best[rng.randrange(len(best))] if len(best) > 1 else best[0]
    if policy.tie_break is TieBreak.SHUFFLED and ranks is not None:
        return min(best, key=ranks.__getitem__)
    return best[0]
