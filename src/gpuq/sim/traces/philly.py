"""Microsoft Philly jobs (Sia's one-row-per-job table): ``timestamp,duration,num_gpus,gpu_time,cluster``.

Each row is one gang job. ``submit_s`` counts from the earliest timestamp in
the whole file (also under ``limit``, so a slice's jobs equal the first jobs
of a full read); the file has no time zone and no job id, so jobs are named
``philly-<data row>``. The group is the virtual cluster (``cluster``).

A job of more GPUs than a node holds becomes ``ceil(num_gpus / gpus_per_node)``
pods of the smallest equal size that covers it: 16 -> 2 x 8, 12 -> 2 x 6,
13 -> 2 x 7 (14 GPUs, one more than asked; the notes count such jobs).
``gpu_time`` (= duration x num_gpus) is not needed and not read.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

from gpuq.sim.traces import values
from gpuq.sim.traces.mapping import Grouper, GroupMapping
from gpuq.sim.traces.model import TraceError, TraceJob, TraceRead
from gpuq.sim.traces.reading import Collector, RowError, column_index, read_csv, row_width, take

DEFAULT_FIELD = "cluster"
COLUMNS = ("timestamp", "duration", "num_gpus")
GPUS_PER_NODE = 8
_EPOCH = datetime(1970, 1, 1)


def read_philly(
    path: Path,
    *,
    mapping: GroupMapping | None = None,
    strict: bool = False,
    limit: int | None = None,
    gpus_per_node: int = GPUS_PER_NODE,
) -> TraceRead:
    """Jobs of ``philly_jobs_sia.csv(.xz)``; rows with a bad time, duration or GPU count are bad rows."""
    if not 1 <= gpus_per_node <= values.MAX_GPUS_PER_POD:
        raise TraceError(
            f"gpus_per_node must be between 1 and {values.MAX_GPUS_PER_POD} (got {gpus_per_node})"
        )
    header, rows = read_csv(path)
    field = mapping.field if mapping is not None and mapping.field else DEFAULT_FIELD
    index = column_index(header, path, dict.fromkeys((*COLUMNS, field)))
    at_time, at_duration, at_gpus, at_group = (index[c] for c in (*COLUMNS, field))
    stamps = [_epoch_s(row[at_time]) if len(row) > at_time else None for _, row in rows]
    origin = min((s for s in stamps if s is not None), default=0.0)
    chosen = take(rows, limit)
    grouper = Grouper(mapping, field, prefix="vc-", always_prefix=True)
    collector = Collector(path, strict)
    shapes: Counter[tuple[int, int, int]] = Counter()  # (num_gpus, pods, GPUs per pod) of split gangs
    for (line, row), stamp in zip(chosen, stamps, strict=False):
        try:
            row_width(row, header)
            if stamp is None:
                raise RowError(f"timestamp {row[at_time]!r}: not a YYYY-MM-DD HH:MM:SS time")
            duration_s = values.seconds("duration", row[at_duration].strip(), positive=True)
            gpus = values.count("num_gpus", row[at_gpus].strip(), low=1, high=values.MAX_PODS)
            ref = grouper.resolve(row[at_group].strip())
        except RowError as err:
            collector.refuse(line, str(err))
            continue
        pods, per_pod = split_gang(gpus, gpus_per_node)
        if pods > 1:
            shapes[gpus, pods, per_pod] += 1
        collector.add(
            TraceJob(
                name=f"philly-{line - 1:05d}",
                namespace=ref.namespace,
                queue=ref.queue,
                submit_s=stamp - origin,
                duration_s=duration_s,
                pods=pods,
                gpu_milli=per_pod * 1000,
                source_line=line,
            )
        )
    notes = [_origin_note(origin), *grouper.notes(), *_gang_notes(shapes, gpus_per_node), *_repeats(chosen)]
    return collector.result(len(chosen), notes)


def split_gang(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """``(pods, GPUs per pod)``: one pod when it fits a node, else the fewest nodes with equal pods."""
    if gpus <= gpus_per_node:
        return 1, gpus
    pods = math.ceil(gpus / gpus_per_node)
    return pods, math.ceil(gpus / pods)


def _epoch_s(text: str) -> float | None:
    try:
        return (datetime.fromisoformat(text.strip()) - _EPOCH).total_seconds()
    except ValueError:
        return None


def _origin_note(origin: float) -> str:
    start = _EPOCH + timedelta(seconds=origin)
    return (
        f"submit_s counts from {start:%Y-%m-%d %H:%M:%S}, the earliest timestamp in the file (no time zone)"
    )


def _gang_notes(shapes: Counter[tuple[int, int, int]], gpus_per_node: int) -> list[str]:
    """How many gangs were split over nodes, which unevenly, and which asked for fewer GPUs than given."""
    if not shapes:
        return []
    split = sum(shapes.values())
    out = [f"{split} jobs need more than {gpus_per_node} GPUs: split into equal pods, one per node"]
    for (gpus, pods, per_pod), jobs in sorted(shapes.items()):
        if gpus % gpus_per_node == 0:
            continue
        extra = pods * per_pod - gpus
        rounded = f" = {pods * per_pod}, rounded up by {extra}" if extra else ""
        out.append(f"{jobs} jobs of {gpus} GPUs run as {pods} pods x {per_pod} GPUs{rounded}")
    return out


def _repeats(rows: list[tuple[int, list[str]]]) -> list[str]:
    """Exact repeats are kept: without a job id nothing tells a repeat from a second submission."""
    repeats = len(rows) - len({tuple(row) for _, row in rows})
    return [f"{repeats} rows repeat an earlier row exactly; kept as separate jobs"] if repeats else []
