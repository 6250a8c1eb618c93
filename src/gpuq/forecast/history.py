"""Runtime history from a trace: the finished runs a forecast's estimator learns from
(``gpuq admit --eta --history TRACE``)."""

from __future__ import annotations

from collections.abc import Iterable

from gpuq.sim.traces.model import TraceJob
from gpuq.snapshot.runtimes import Finished, Profile


def history_of(jobs: Iterable[TraceJob]) -> list[Finished]:
    """Finished runs from a trace (the generic CSV/JSONL or a public trace) to learn runtimes from:
    each row's namespace, LocalQueue, size and duration (traces name no user beyond the namespace)."""
    return [
        Finished(Profile(job.namespace, job.queue, "", job.pods * job.gpu_milli / 1000), job.duration_s)
        for job in jobs
        if not job.failed
    ]
