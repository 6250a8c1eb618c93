"""What every trace importer produces: one :class:`TraceJob` per job, and the rows it refused.

A trace job is a single pod set of ``pods`` identical pods that runs for
``duration_s`` once started, unless its ``kind`` names a source kind whose
pod sets it gets instead (:mod:`gpuq.sim.trace_kinds`). GPUs per pod are kept in thousandths
(``gpu_milli``: 500 is half a GPU, 8000 is eight whole GPUs) so that
fractions never drift; CPU in milli-CPU and memory in bytes, as the core
counts them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuq.core.model import Toleration

TRACE_KINDS = (
    "Job", "JobSet", "PyTorchJob", "XGBoostJob", "PaddleJob", "TFJob", "JAXJob", "MPIJob", "TrainJob",
    "RayJob", "RayCluster", "SparkApplication", "LeaderWorkerSet", "AppWrapper", "StatefulSet", "Pod",
)  # fmt: skip
"""The kinds a trace's ``kind`` column may name (built by :mod:`gpuq.sim.trace_kinds`); empty: one pod set."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    name: str
    namespace: str
    queue: str  # LocalQueue name in ``namespace``
    submit_s: float  # seconds from the start of the trace
    duration_s: float  # run time once started
    pods: int = 1
    gpu_milli: int = 0  # per pod, thousandths of a GPU; under 1000 only for a share of one GPU
    cpu_milli: int | None = None  # per pod
    memory_bytes: int | None = None  # per pod
    priority: str | None = None  # a WorkloadPriorityClass name or an integer, as written
    gpu_model: str | None = None  # a catalogue name or GFD product, as written
    checkpoint_s: float | None = None  # checkpoint interval; None: an eviction loses all work done
    failed: bool = False  # the job ends in failure after ``duration_s``
    tolerations: tuple[Toleration, ...] = ()  # e.g. to run on tainted spot nodes
    source_line: int = 0  # line in the trace file (1 = header), for messages
    deadline_s: float | None = None  # when it must be finished, seconds from the start of the trace
    checkpoint_cost_s: float = 0.0  # the run pauses this long for each checkpoint it writes
    kind: str = ""  # a source kind whose pod sets the job gets (gpuq.sim.trace_kinds); "" one pod set


@dataclass(frozen=True, slots=True)
class BadRow:
    """A row the importer refused, with the reason; never dropped silently."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True, slots=True)
class TraceRead:
    """Jobs sorted by (submit_s, source order), the refused rows, and how many rows were read."""

    jobs: tuple[TraceJob, ...]
    bad_rows: tuple[BadRow, ...] = ()
    rows: int = 0
    source: str = ""
    notes: tuple[str, ...] = field(default=())  # facts about the import a user should know


class TraceError(ValueError):
    """A trace cannot be read (missing file, unknown format, bad mapping), or a bad row under --strict."""
