"""Node and pod views, and GPU fragmentation as the FGD paper measures it ("Beware of Fragmentation").

A node's idle GPU milli is *fragmented for a task* when that task cannot use
it. The workload is summarised as typical task types with weights (their
share of the pods); a node's fragmentation is the weighted sum over task
types of the milli fragmented for each, and the cluster's is the sum over
nodes. Per task type (``NodeGpuShareFragAmount`` of the authors' simulator,
``pkg/utils/frag.go``):

1. a CPU-only task, a task whose allowed GPU models exclude the node's model,
   or a task that does not fit (too few GPUs with at least its per-GPU milli
   free, or too little free CPU): **all** idle GPU milli is fragmented;
2. a task that fits: only the GPUs with less free milli than the task's
   per-GPU milli count, with all of their free milli.

Memory is not part of the measure, as upstream. Weights are floats (shares of
pods); the sum order differs from the Go code's per-quadrant bins, so totals
can differ from upstream in the last bit.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuq.core.nodes import NO_GPU, GPUDemand

FULL_GPU_MILLI = 1000
POPULARITY_PCT = 95
"""Typical task types cover this share of the pods (the artifact's ``--pod-popularity-threshold``)."""


@dataclass(frozen=True, slots=True)
class TaskType:
    """What a pod asks for, as far as fragmentation is concerned.

    ``gpu_models`` lists the allowed GPU models in the order the pod names them
    (repeats kept, so two spellings stay two task types, as upstream); None
    allows any model.
    """

    cpu_milli: int
    gpu: GPUDemand = NO_GPU
    gpu_models: tuple[str, ...] | None = None

    @property
    def spec(self) -> str:
        """The ``gpu_spec`` string; upstream orders task types by it."""
        return "|".join(self.gpu_models or ())


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node's free capacity as policies see it.

    ``gpu_free_milli[i]`` is GPU ``i``'s free thousandths (1000 = idle);
    ``gpu_pod_kinds`` counts the GPU pods on the node per ``gpu_kind``, sorted
    by kind (only GPU clustering reads it).
    """

    gpu_free_milli: tuple[int, ...]
    cpu_free_milli: int
    cpu_total_milli: int
    memory_free_bytes: int
    memory_total_bytes: int
    gpu_model: str | None = None
    gpu_pod_kinds: tuple[tuple[str, int], ...] = ()

    @property
    def gpu_total_milli(self) -> int:
        return FULL_GPU_MILLI * len(self.gpu_free_milli)

    @property
    def gpu_idle_milli(self) -> int:
        return sum(self.gpu_free_milli)


@dataclass(frozen=True, slots=True)
class PodView:
    """A pod's requests: CPU milli, memory bytes, GPUs, allowed GPU models (None: any)."""

    cpu_milli: int
    memory_bytes: int
    gpu: GPUDemand = NO_GPU
    gpu_models: tuple[str, ...] | None = None

    @property
    def task(self) -> TaskType:
        return TaskType(self.cpu_milli, self.gpu, self.gpu_models)


@dataclass(frozen=True, slots=True)
class TypicalTask:
    """A task type and its weight, the share of the workload's pods it stands for."""

    task: TaskType
    weight: float


def typical_tasks(tasks: Iterable[TaskType], popularity_pct: int = POPULARITY_PCT) -> tuple[TypicalTask, ...]:
    """The most frequent task types covering ``popularity_pct`` % of the pods, weights summing to 1.

    Upstream ``GetTypicalPods`` (CPU-only pods included, increase step 1):

    1. count pods per task type;
    2. order by count, descending; equal counts by (CPU, per-GPU milli, GPU
       count, spec), descending;
    3. take types until their pods reach ``popularity_pct`` % of all pods;
    4. weight = count / pods taken.
    """
    counts = Counter(tasks)
    total = float(sum(counts.values()))
    ranked = sorted(
        counts.items(),
        key=lambda item: (item[1], item[0].cpu_milli, item[0].gpu.milli, item[0].gpu.count, item[0].spec),
        reverse=True,
    )
    expected = float(popularity_pct) * total / 100.0
    taken: list[tuple[TaskType, int]] = []
    covered = 0.0
    for task, count in ranked:
        if covered >= expected:
            break
        taken.append((task, count))
        covered += count
    if len(taken) == len(ranked):
        return tuple(TypicalTask(task, count / total) for task, count in taken)
    return tuple(TypicalTask(task, count / total / (covered / total)) for task, count in taken)


def model_allowed(gpu_model: str | None, allowed: tuple[str, ...] | None) -> bool:
    """Whether a pod restricted to ``allowed`` GPU models may use a node with ``gpu_model``.

    Upstream ``IsNodeAccessibleToPodByType``: no restriction allows every node;
    a restriction never allows a node without a GPU model.
    """
    if not allowed:
        return True
    return gpu_model is not None and gpu_model in allowed


def task_fragment_milli(node: NodeView, task: TaskType) -> int:
    """The idle GPU milli of ``node`` that ``task`` cannot use (steps 1 and 2 of the module doc)."""
    free = node.gpu_free_milli
    idle = sum(free)
    demand = task.gpu
    if demand.count == 0 or not model_allowed(node.gpu_model, task.gpu_models):
        return idle
    if node.cpu_free_milli < task.cpu_milli or sum(1 for f in free if f >= demand.milli) < demand.count:
        return idle
    return sum(f for f in free if f < demand.milli)


def node_fragmentation(node: NodeView, tasks: Sequence[TypicalTask]) -> float:
    """Expected fragmented GPU milli of one node: Σ weight × task_fragment_milli."""
    total = 0.0
    for typical in tasks:
        total += typical.weight * task_fragment_milli(node, typical.task)
    return total


def cluster_fragmentation(nodes: Iterable[NodeView], tasks: Sequence[TypicalTask]) -> float:
    """Expected fragmented GPU milli of a cluster: the sum over its nodes."""
    return math.fsum(node_fragmentation(node, tasks) for node in nodes)


class FragmentationMeter:
    """``node_fragmentation`` memoised per node state, for replays that ask millions of times.

    Free CPU matters only through which task types it can hold, so the memo
    key replaces it with its *level*: how many distinct task CPU requests it
    reaches. GPU order does not matter either; the key holds them sorted.
    """

    def __init__(self, tasks: Sequence[TypicalTask]) -> None:
        self.tasks = tuple(tasks)
        self._cpu_steps = sorted({t.task.cpu_milli for t in self.tasks if t.task.gpu.count})
        self._memo: dict[tuple[str | None, int, tuple[int, ...]], float] = {}

    def cpu_level(self, cpu_free_milli: int) -> int:
        """Free CPU values with the same level leave every task type's CPU check unchanged."""
        return bisect.bisect_right(self._cpu_steps, cpu_free_milli)

    def fragmentation(self, node: NodeView) -> float:
        """Same value as ``node_fragmentation`` with this meter's task types."""
        return self.leveled(
            tuple(sorted(node.gpu_free_milli)), self.cpu_level(node.cpu_free_milli), node.gpu_model
        )

    def leveled(self, gpu_free_sorted: tuple[int, ...], cpu_level: int, gpu_model: str | None) -> float:
        """Fragmentation of a state given by its sorted free GPU milli and CPU level."""
        key = (gpu_model, cpu_level, gpu_free_sorted)
        value = self._memo.get(key)
        if value is None:
            # Any CPU value of this level answers every task's CPU check alike.
            cpu = self._cpu_steps[cpu_level - 1] if cpu_level else -1
            state = NodeView(gpu_free_sorted, cpu, cpu, 0, 0, gpu_model)
            value = self._memo[key] = node_fragmentation(state, self.tasks)
        return value
