"""Alibaba DLRM inference instances (cluster-trace-gpu-v2025): long-running serving pods.

One pod per row. ``CN`` instances are CPU-only, ``HN`` ones hold one GPU
(``gpu_request``); CPU is in vCPUs, memory in GiB. Times are seconds from
the trace start and are kept as they are (no shift):

1. submit = ``creation_time``; empty means the instance existed before the
   trace, so it is there at 0;
2. it runs from ``scheduled_time`` (empty: before the trace, 0) to
   ``deletion_time``; empty means alive at the trace end, taken as the
   largest time in the whole file (also under ``limit``);
3. a run time of 0 or less is a bad row (16 instances are deleted the second
   they are scheduled).

Instance ids ``instance_N`` become names ``instance-N`` (``_`` is not allowed
in a Kubernetes name). The group is ``app_name``. RDMA, disk and the per-node
anti-affinity limit have no TraceJob field and are not imported.
"""

from __future__ import annotations

from pathlib import Path

from gpuq.sim.traces import values
from gpuq.sim.traces.mapping import Grouper, GroupMapping
from gpuq.sim.traces.model import TraceJob, TraceRead
from gpuq.sim.traces.reading import Collector, RowError, column_index, read_csv, row_width, take

DEFAULT_FIELD = "app_name"
COLUMNS = (
    "instance_sn", "role", "cpu_request", "gpu_request", "memory_request",
    "creation_time", "scheduled_time", "deletion_time",
)  # fmt: skip
TIMES = ("creation_time", "scheduled_time", "deletion_time")
_ROLE_GPUS = {"CN": False, "HN": True}  # does the role hold a GPU


def read_dlrm(
    path: Path, *, mapping: GroupMapping | None = None, strict: bool = False, limit: int | None = None
) -> TraceRead:
    """Jobs of ``disaggregated_DLRM_trace.csv(.xz)``; see the module doc for the time rules."""
    header, rows = read_csv(path)
    field = mapping.field if mapping is not None and mapping.field else DEFAULT_FIELD
    index = column_index(header, path, dict.fromkeys((*COLUMNS, field)))
    end_s = _trace_end([index[c] for c in TIMES], rows)
    chosen = take(rows, limit)
    grouper = Grouper(mapping, field, prefix="app-")
    collector = Collector(path, strict)
    before = alive = 0
    for line, row in chosen:
        try:
            row_width(row, header)
            record = {name: row[i].strip() for name, i in index.items()}
            job = _job(record, line, end_s, grouper)
        except RowError as err:
            collector.refuse(line, str(err))
            continue
        before += not record["creation_time"]
        alive += not record["deletion_time"]
        collector.add(job)
    notes = [
        f"{before} instances existed before the trace: submitted at 0",
        f"{alive} instances were alive at the trace end: they run until {end_s:.15g} s (the last time seen)",
        "instance_N ids are named instance-N; rdma, disk and max_instance_per_node are not imported",
        *grouper.notes(),
    ]
    return collector.result(len(chosen), notes)


def _job(record: dict[str, str], line: int, end_s: float, grouper: Grouper) -> TraceJob:
    name = values.object_name("instance_sn", record["instance_sn"].lower().replace("_", "-"))
    role = record["role"]
    if role not in _ROLE_GPUS:
        raise RowError(f"role {role!r}: must be CN or HN")
    gpus = values.count("gpu_request", record["gpu_request"], low=0, high=values.MAX_GPUS_PER_POD)
    if _ROLE_GPUS[role] != (gpus > 0):
        raise RowError(f"gpu_request {record['gpu_request']!r}: does not fit role {role}")
    submit_s = _time(record, "creation_time", 0.0)
    start_s = _time(record, "scheduled_time", submit_s if record["creation_time"] else 0.0)
    stop_s = _time(record, "deletion_time", end_s)
    if stop_s <= start_s:
        raise RowError(f"deletion_time {record['deletion_time']!r}: not after the start at {start_s:.15g} s")
    memory = record["memory_request"]
    ref = grouper.resolve(record[grouper.column])
    return TraceJob(
        name=name,
        namespace=ref.namespace,
        queue=ref.queue,
        submit_s=submit_s,
        duration_s=stop_s - start_s,
        gpu_milli=gpus * 1000,
        cpu_milli=values.quantity("cpu_request", "cpu", record["cpu_request"]),
        memory_bytes=values.quantity("memory_request", "memory", memory + "Gi" if memory else ""),
        source_line=line,
    )


def _time(record: dict[str, str], column: str, empty: float) -> float:
    text = record[column]
    return values.seconds(column, text, positive=False) if text else empty


def _trace_end(positions: list[int], rows: list[tuple[int, list[str]]]) -> float:
    """The largest time in any time column of any row (unparsable ones are the rows' own problem)."""
    end = 0.0
    for _, row in rows:
        for at in positions:
            if at < len(row) and row[at]:
                try:
                    end = max(end, float(row[at]))
                except ValueError:
                    continue
    return end
