"""The generic trace format, as CSV (header row) or JSONL (one object per line), with the same keys.

Columns (docs/traces.md has units and examples): ``name``, ``namespace``,
``queue``, ``submit_s``, ``duration_s``, ``gpus`` are required (``namespace``
and ``queue`` not when a mapping supplies them); ``priority``, ``pods``,
``cpu``, ``memory``, ``gpu_model``, ``checkpoint_s``, ``checkpoint_cost_s``,
``status`` and ``kind`` may be absent or empty. Other columns are ignored. A row that cannot become a job is
a :class:`BadRow` naming its physical line and the column at fault.
"""

from __future__ import annotations

import json
import lzma
import zlib
from collections.abc import Iterator
from pathlib import Path

from gpuq.sim.traces import values
from gpuq.sim.traces.mapping import Grouper, GroupMapping
from gpuq.sim.traces.model import TRACE_KINDS, TraceError, TraceJob, TraceRead
from gpuq.sim.traces.reading import Collector, RowError, column_index, open_text, read_csv, row_width, take

REQUIRED = ("name", "namespace", "queue", "submit_s", "duration_s", "gpus")
QUEUE_COLUMNS = ("namespace", "queue")
"""The required columns a mapping file replaces with its group column."""
DISTINCTIVE = tuple(c for c in REQUIRED if c not in QUEUE_COLUMNS)
"""The columns that tell a generic CSV trace (:mod:`gpuq.sim.traces.detect`)."""
OPTIONAL = (
    "priority",
    "pods",
    "cpu",
    "memory",
    "gpu_model",
    "checkpoint_s",
    "checkpoint_cost_s",
    "status",
    "kind",
)
DEFAULT_GROUP_FIELD = "group"
"""The column a mapping file reads when it names no ``field``."""

Record = dict[str, str]


def read_generic_csv(
    path: Path, *, mapping: GroupMapping | None = None, strict: bool = False, limit: int | None = None
) -> TraceRead:
    """Jobs of a generic CSV trace; with ``mapping``, namespace and queue come from the group column."""
    header, rows = read_csv(path)
    grouper = _grouper(mapping)
    if grouper is None:
        index = column_index(header, path, REQUIRED, OPTIONAL)
    else:
        required = [*DISTINCTIVE, grouper.column]
        index = column_index(header, path, required, OPTIONAL)
    chosen = take(rows, limit)
    collector = Collector(path, strict)
    for line, row in chosen:
        try:
            row_width(row, header)
            job = job_from_record({name: row[i].strip() for name, i in index.items()}, line, grouper)
        except RowError as err:
            collector.refuse(line, str(err))
            continue
        collector.add(job)
    return collector.result(len(chosen), grouper.notes() if grouper else ())


def read_generic_jsonl(
    path: Path, *, mapping: GroupMapping | None = None, strict: bool = False, limit: int | None = None
) -> TraceRead:
    """Jobs of a JSONL trace: one object per line, numbers or strings as values, blank lines skipped."""
    if limit is not None and limit < 0:
        raise TraceError(f"limit must be 0 or more (got {limit})")
    grouper = _grouper(mapping)
    keys = frozenset((*REQUIRED, *OPTIONAL, grouper.column if grouper else "name"))
    collector = Collector(path, strict)
    rows = 0
    for line, text in _lines(path):
        if limit is not None and rows >= limit:
            break
        rows += 1
        try:
            job = job_from_record(_record(text, keys), line, grouper)
        except RowError as err:
            collector.refuse(line, str(err))
            continue
        collector.add(job)
    return collector.result(rows, grouper.notes() if grouper else ())


def job_from_record(record: Record, line: int, grouper: Grouper | None) -> TraceJob:
    """One job from stripped field texts (absent keys read as empty); RowError names the first bad one."""
    get = record.get
    name = values.object_name("name", get("name", ""))
    if grouper is None:
        namespace = values.label("namespace", get("namespace", ""))
        queue = values.label("queue", get("queue", ""))
    else:
        ref = grouper.resolve(get(grouper.column, ""))
        namespace, queue = ref.namespace, ref.queue
    submit_s = values.seconds("submit_s", get("submit_s", ""), positive=False)
    duration_s = values.seconds("duration_s", get("duration_s", ""), positive=True)
    pods_text = get("pods", "")
    pods = values.count("pods", pods_text, low=1, high=values.MAX_PODS) if pods_text else 1
    gpus_text = get("gpus", "")
    if not gpus_text:
        raise RowError("missing gpus")
    checkpoint_text = get("checkpoint_s", "")
    cost_text = get("checkpoint_cost_s", "")
    return TraceJob(
        name=name,
        namespace=namespace,
        queue=queue,
        submit_s=submit_s,
        duration_s=duration_s,
        pods=pods,
        gpu_milli=values.gpu_milli("gpus", gpus_text),
        cpu_milli=values.quantity("cpu", "cpu", get("cpu", "")),
        memory_bytes=values.quantity("memory", "memory", get("memory", "")),
        priority=values.priority("priority", get("priority", "")),
        gpu_model=get("gpu_model") or None,
        checkpoint_s=values.seconds("checkpoint_s", checkpoint_text, positive=True)
        if checkpoint_text
        else None,
        failed=values.failed("status", get("status", "")),
        source_line=line,
        checkpoint_cost_s=(
            values.seconds("checkpoint_cost_s", cost_text, positive=False) if cost_text else 0.0
        ),
        kind=_kind(get("kind", "")),
    )


def _kind(text: str) -> str:
    """The ``kind`` cell: empty, or one of :data:`gpuq.sim.traces.model.TRACE_KINDS` as written."""
    if text and text not in TRACE_KINDS:
        raise RowError(f"kind {text!r}: expected one of {', '.join(TRACE_KINDS)} (or empty)")
    return text


def _grouper(mapping: GroupMapping | None) -> Grouper | None:
    if mapping is None:
        return None
    return Grouper(mapping, mapping.field or DEFAULT_GROUP_FIELD, prefix="")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Non-blank lines with their 1-based numbers (only ``\\n``, ``\\r\\n`` and ``\\r`` end a line)."""
    with open_text(path) as handle:
        try:
            for number, text in enumerate(handle, start=1):
                if text.strip():
                    yield number, text
        except (UnicodeDecodeError, EOFError, OSError, lzma.LZMAError, zlib.error) as err:
            raise TraceError(f"{path}: unreadable: {err}") from err


def _record(text: str, keys: frozenset[str]) -> Record:
    """The recognised keys of one line's object; other keys are ignored whatever their values."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise RowError(f"not JSON: {err.msg} (column {err.colno})") from None
    if not isinstance(document, dict):
        raise RowError(f"not a JSON object (got {type(document).__name__})")
    return {key: _text(key, value) for key, value in document.items() if key in keys}


def _text(key: str, value: object) -> str:
    """A JSON value as the CSV text it stands for: null -> empty, numbers as written."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RowError(f"{key} {value!r}: must be a number or a string")
    return repr(value)
