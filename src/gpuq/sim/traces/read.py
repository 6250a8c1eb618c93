"""One entry point for every trace format: :func:`read_trace`, with the format detected from the file's
columns (:mod:`gpuq.sim.traces.detect`) when none is given."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpuq.sim.traces.detect import detect_format
from gpuq.sim.traces.dlrm import read_dlrm
from gpuq.sim.traces.generic import read_generic_csv, read_generic_jsonl
from gpuq.sim.traces.mapping import GroupMapping, load_mapping
from gpuq.sim.traces.model import TraceError, TraceRead
from gpuq.sim.traces.openb import read_openb
from gpuq.sim.traces.philly import read_philly

Reader = Callable[..., TraceRead]
_READERS: dict[str, Reader] = {
    "csv": read_generic_csv,
    "jsonl": read_generic_jsonl,
    "philly": read_philly,
    "openb": read_openb,
    "dlrm": read_dlrm,
}
FORMATS: tuple[str, ...] = tuple(_READERS)
"""Format names ``read_trace`` and the CLI accept, in a fixed order."""


def read_trace(
    path: str | Path,
    *,
    format: str | None = None,
    mapping: str | Path | None = None,
    strict: bool = False,
    limit: int | None = None,
) -> TraceRead:
    """Read a trace into jobs, refused rows and notes.

    ``format`` is one of :data:`FORMATS` (detected from the file's columns when None:
    :func:`gpuq.sim.traces.detect.detect_format`);
    ``mapping`` a mapping file (docs/traces.md); ``strict`` turns the first bad
    row into a TraceError; ``limit`` reads only the first N data rows. Raises
    TraceError for an unknown format, a missing or unreadable file, missing
    columns (without ``format``: columns no format matches, the message listing every format's) or a
    bad mapping file.
    """
    chosen = format or detect_format(path)
    reader = _READERS.get(chosen)
    if reader is None:
        raise TraceError(f"unknown trace format {chosen!r}; known: {', '.join(FORMATS)}")
    source = Path(path)
    if not source.is_file():
        raise TraceError(f"{source}: no such file")
    groups: GroupMapping | None = load_mapping(mapping) if mapping is not None else None
    return reader(source, mapping=groups, strict=strict, limit=limit)
