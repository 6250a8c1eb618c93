"""Alibaba openb pod lists (cluster-trace-gpu-v2023): one pod a row, milli-GPU shares, GPU-model constraints.

Columns ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
creation_time,deletion_time,scheduled_time``; times are seconds from the
trace start. Per row:

1. submit = ``creation_time`` minus the file's earliest one; run time =
   ``deletion_time - scheduled_time`` (must be above 0, else a bad row);
2. ``Pending`` pods were never scheduled (no ``scheduled_time``): their run
   time is unknown, so they are skipped and counted in the notes, not made up;
   ``Failed`` pods become jobs with ``failed=True``;
3. GPUs: ``gpu_milli`` is per GPU, so ``num_gpu == 1`` keeps it (a share below
   1000), ``num_gpu > 1`` needs ``gpu_milli == 1000`` and becomes
   ``1000 * num_gpu``; a share of several GPUs has no TraceJob form and is a
   bad row (no staged file has one);
4. ``gpu_spec`` (``V100M16|V100M32``) -> ``gpu_model`` = the first model listed;
   the notes count the constraints that listed alternatives.

The group is ``qos`` (LS, BE, Burstable, Guaranteed) unless a mapping says otherwise.
The ``multigpu*`` lists carry no times and are refused with a TraceError.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from gpuq.sim.traces import values
from gpuq.sim.traces.mapping import Grouper, GroupMapping
from gpuq.sim.traces.model import TraceJob, TraceRead
from gpuq.sim.traces.reading import Collector, RowError, column_index, read_csv, row_width, take

DEFAULT_FIELD = "qos"
COLUMNS = (
    "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli",
    "pod_phase", "creation_time", "deletion_time", "scheduled_time",
)  # fmt: skip
NO_TIMES = " (the multigpu* lists have no times: they are static packing lists, not replayable traces)"
_PHASES = ("Running", "Succeeded", "Failed", "Pending")
_MIB = 2**20


def read_openb(
    path: Path, *, mapping: GroupMapping | None = None, strict: bool = False, limit: int | None = None
) -> TraceRead:
    """Jobs of an ``openb_pod_list_*.csv``; Pending pods are skipped and counted (see the module doc)."""
    header, rows = read_csv(path)
    field = mapping.field if mapping is not None and mapping.field else DEFAULT_FIELD
    index = column_index(header, path, dict.fromkeys((*COLUMNS, field)), ("gpu_spec",), NO_TIMES)
    at_created = index["creation_time"]
    created = [_number(row[at_created]) if len(row) > at_created else None for _, row in rows]
    origin = min((c for c in created if c is not None), default=0.0)
    chosen = take(rows, limit)
    grouper = Grouper(mapping, field, prefix="qos-")
    collector = Collector(path, strict)
    phases: Counter[str] = Counter()
    specs = Counter[str]()
    for line, row in chosen:
        try:
            row_width(row, header)
            record = {name: row[i].strip() for name, i in index.items()}
            phase = record["pod_phase"]
            if phase not in _PHASES:
                raise RowError(f"pod_phase {phase!r}: must be one of {', '.join(_PHASES)}")
            if phase == "Pending":
                phases[phase] += 1
                continue
            job = _job(record, line, origin, grouper)
        except RowError as err:
            collector.refuse(line, str(err))
            continue
        phases[phase] += 1
        spec = record.get("gpu_spec", "")
        if spec:
            specs["with alternatives" if "|" in spec.strip("|") else "one model"] += 1
        collector.add(job)
    notes = [*_phase_notes(phases), *_spec_notes(specs), *grouper.notes()]
    return collector.result(len(chosen), notes)


def _job(record: dict[str, str], line: int, origin: float, grouper: Grouper) -> TraceJob:
    name = values.object_name("name", record["name"])
    created = values.seconds("creation_time", record["creation_time"], positive=False)
    scheduled = values.seconds("scheduled_time", record["scheduled_time"], positive=False)
    deleted = values.seconds("deletion_time", record["deletion_time"], positive=False)
    if deleted <= scheduled:
        text = record["deletion_time"]
        raise RowError(f"deletion_time {text!r}: not after scheduled_time {scheduled:.15g}")
    ref = grouper.resolve(record[grouper.column])
    spec = record.get("gpu_spec", "")
    memory_mib = values.count("memory_mib", record["memory_mib"], low=0, high=values.MAX_MEMORY_BYTES // _MIB)
    return TraceJob(
        name=name,
        namespace=ref.namespace,
        queue=ref.queue,
        submit_s=created - origin,
        duration_s=deleted - scheduled,
        gpu_milli=_gpu_milli(record["num_gpu"], record["gpu_milli"]),
        cpu_milli=values.count("cpu_milli", record["cpu_milli"], low=0, high=values.MAX_CPU_MILLI),
        memory_bytes=memory_mib * _MIB,
        gpu_model=spec.strip("|").split("|")[0] or None,
        failed=record["pod_phase"] == "Failed",
        source_line=line,
    )


def _gpu_milli(num_text: str, milli_text: str) -> int:
    """Thousandths of a GPU for the whole pod: a share of one GPU, or whole GPUs."""
    num_gpu = values.count("num_gpu", num_text, low=0, high=values.MAX_GPUS_PER_POD)
    milli = values.count("gpu_milli", milli_text, low=0, high=1000)
    if num_gpu == 0:
        if milli:
            raise RowError(f"gpu_milli {milli_text!r}: a pod with num_gpu 0 asks for no GPU share")
        return 0
    if milli == 0:
        raise RowError(f"gpu_milli {milli_text!r}: a pod with num_gpu {num_gpu} needs a share above 0")
    if num_gpu > 1 and milli < 1000:
        raise RowError(
            f"gpu_milli {milli_text!r}: a share of each of {num_gpu} GPUs cannot be expressed "
            "(a pod holds either part of one GPU or whole GPUs)"
        )
    return milli * num_gpu


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _phase_notes(phases: Counter[str]) -> list[str]:
    counts = ", ".join(f"{phase} {phases[phase]}" for phase in _PHASES if phases[phase])
    out = [f"pod phases: {counts}" if counts else "no pods read"]
    if phases["Failed"]:
        out.append(f"{phases['Failed']} Failed pods end in failure after their run time (failed=True)")
    if phases["Pending"]:
        out.append(
            f"{phases['Pending']} Pending pods were never scheduled, so their run time is unknown: skipped"
        )
    return out


def _spec_notes(specs: Counter[str]) -> list[str]:
    total = sum(specs.values())
    if not total:
        return []
    return [
        f"{total} imported pods carry a gpu_spec constraint; gpu_model is its first model "
        f"({specs['with alternatives']} listed alternatives that are dropped)"
    ]
