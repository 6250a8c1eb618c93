"""Trace jobs become Kueue workloads: pod sets (one, or its kind's), per-pod requests, a resolved priority.

The conversion is where a trace meets a configuration, so it is where a trace
can be wrong about it: a priority class that does not exist or a GPU model the
catalogue does not know is refused here with the row's line, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuq.core.gpus import GPUCatalogue
from gpuq.core.model import PodSet, Workload
from gpuq.core.nodes import GPU, GPU_MILLI, Node
from gpuq.core.placement.capacity import NodeCapacity, pod_shape
from gpuq.sim.trace_kinds import kind_pod_sets, with_placement
from gpuq.sim.traces.model import BadRow, TraceJob

PRODUCT_LABEL = "nvidia.com/gpu.product"
POD_SET = "main"


@dataclass(frozen=True, slots=True)
class SimJob:
    """A workload to simulate and what the trace says about its run."""

    workload: Workload
    duration_s: float
    gpus: float  # GPUs of the whole workload (pods × per-pod share)
    checkpoint_s: float | None = None
    failed: bool = False
    checkpoint_cost_s: float = 0.0  # wall seconds each checkpoint adds to the run (with an interval)

    @property
    def key(self) -> str:
        return self.workload.key

    @property
    def team(self) -> str:
        return self.workload.namespace


def pod_requests(job: TraceJob) -> dict[str, int]:
    """Per-pod requests in core units: whole GPUs as ``nvidia.com/gpu``, a share as ``gpu-milli``."""
    requests: dict[str, int] = {}
    if job.gpu_milli >= 1000:
        requests[GPU] = job.gpu_milli // 1000
    elif job.gpu_milli > 0:
        requests[GPU_MILLI] = job.gpu_milli
    if job.cpu_milli:
        requests["cpu"] = job.cpu_milli
    if job.memory_bytes:
        requests["memory"] = job.memory_bytes
    return requests


def to_sim_jobs(
    jobs: tuple[TraceJob, ...] | list[TraceJob],
    priorities: Mapping[str, int],
    catalogue: GPUCatalogue,
    source: str,
    default_priority: int = 0,
) -> tuple[list[SimJob], list[BadRow]]:
    """Convert trace jobs; rows naming an unknown priority class or GPU model come back as bad rows."""
    converted: list[SimJob] = []
    bad: list[BadRow] = []
    for job in jobs:
        priority, problem = resolve_priority(job.priority, priorities, default_priority)
        selector: dict[str, str] = {}
        if not problem and job.gpu_model:
            spec = catalogue.get(job.gpu_model)
            if spec is None:
                problem = (
                    f"gpu_model: unknown GPU model {job.gpu_model!r} (known: {', '.join(catalogue.names())})"
                )
            else:
                selector[PRODUCT_LABEL] = spec.product
        if problem:
            bad.append(BadRow(source, job.source_line, f"{job.namespace}/{job.name}: {problem}"))
            continue
        pod_sets, problem = _pod_sets(job, selector)
        if problem:
            bad.append(BadRow(source, job.source_line, f"{job.namespace}/{job.name}: {problem}"))
            continue
        workload = Workload(
            namespace=job.namespace,
            name=job.name,
            queue_name=job.queue,
            pod_sets=pod_sets,
            priority=priority,
            creation_time=job.submit_s,
            uid=f"{job.source_line:09d}",
            deadline=job.deadline_s,
        )
        gpus = sum(ps.count * _gpu_milli(ps) for ps in pod_sets) / 1000
        converted.append(
            SimJob(workload, job.duration_s, gpus, job.checkpoint_s, job.failed, job.checkpoint_cost_s)
        )
    return converted, bad


def _pod_sets(job: TraceJob, selector: dict[str, str]) -> tuple[tuple[PodSet, ...], str]:
    """One pod set ``main``, or the pod sets of the row's kind; ``(pod sets, problem)``."""
    if not job.kind:
        return (
            PodSet(POD_SET, job.pods, pod_requests(job), node_selector=selector, tolerations=job.tolerations),
        ), ""
    try:
        built = kind_pod_sets(job, job.kind, pod_requests(job))
    except ValueError as err:
        return (), str(err)
    return with_placement(built, job, selector), ""


def _gpu_milli(pod_set: PodSet) -> int:
    return pod_set.requests.get(GPU, 0) * 1000 + pod_set.requests.get(GPU_MILLI, 0)


def resolve_priority(written: str | None, priorities: Mapping[str, int], default: int) -> tuple[int, str]:
    """A WorkloadPriorityClass name or an integer; ``(value, problem)``."""
    if written is None or written == "":
        return default, ""
    text = written.strip()
    if text.lstrip("-").isdigit():
        return int(text), ""
    if text in priorities:
        return priorities[text], ""
    known = ", ".join(sorted(priorities)) or "none declared"
    return 0, f"priority: WorkloadPriorityClass {text!r} not found (known: {known})"


def unplaceable(
    jobs: list[SimJob], nodes: tuple[Node, ...], source: str
) -> tuple[list[SimJob], list[BadRow]]:
    """Refuse jobs whose pod no node could hold even empty (too large, or no node with its GPU model):
    Kueue would admit them on quota and they would wait for ever, skewing every wait."""
    if not nodes:
        return jobs, []
    shapes = {
        (tuple(sorted(n.allocatable.items())), n.sharing, n.gpu_count, n.gpu_memory_mib): n for n in nodes
    }
    empty = [NodeCapacity(node) for node in shapes.values()]
    verdicts: dict[tuple[object, ...], str] = {}
    kept: list[SimJob] = []
    bad: list[BadRow] = []
    for job in jobs:
        why = ""
        for pod_set in job.workload.pod_sets:  # every pod set must fit: a kind's launcher and its workers
            key = (tuple(sorted(pod_set.requests.items())), tuple(sorted(pod_set.node_selector.items())))
            if key not in verdicts:
                verdicts[key] = _why_unplaceable(pod_set, empty, nodes)
            why = why or verdicts[key]
        if why:
            line = int(job.workload.uid) if job.workload.uid.isdigit() else 0
            bad.append(BadRow(source, line, f"{job.key}: {why}"))
        else:
            kept.append(job)
    return kept, bad


def _why_unplaceable(pod_set: PodSet, empty: list[NodeCapacity], nodes: tuple[Node, ...]) -> str:
    selector = pod_set.node_selector
    if selector and not any(all(n.labels.get(k) == v for k, v in selector.items()) for n in nodes):
        wanted = ", ".join(f"{k}={v}" for k, v in sorted(selector.items()))
        return f"no node has {wanted}: it would never start"
    shape = pod_shape(pod_set.requests)
    reasons = [
        c.shortage(shape) for c in empty if all(c.node.labels.get(k) == v for k, v in selector.items())
    ]
    if reasons and all(reasons):
        why = "; ".join(sorted({r for r in reasons if r}))
        return (
            f"no node can hold one pod even when empty ({why}): it would be admitted on quota and never start"
        )
    return ""
