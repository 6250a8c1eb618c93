"""Which trace format a file holds, read from its first line: the columns decide, not the name.

:func:`detect_format` (what :func:`gpuq.sim.traces.read_trace` uses when no format is given):

1. a file that is missing, empty or unreadable gets the format its name implies
   (:func:`format_from_name`), so that the reader reports what is wrong with it;
2. a first non-blank line that opens a JSON object is ``jsonl``;
3. otherwise the line is a CSV header: the formats whose distinctive columns (:data:`SIGNATURES`)
   it has all of match; one match is the format; of several, the one the name implies, else the
   one with the most distinctive columns;
4. no match is a :class:`TraceError` that lists every format with the columns it needs and names
   the closest (the most of its columns present, a near spelling counting half), to pass as
   ``--trace-format``.

Distinctive columns leave out the group column, which a mapping file may rename.
"""

from __future__ import annotations

import csv
import difflib
import gzip
import lzma
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuq.sim.traces import dlrm, generic, openb, philly
from gpuq.sim.traces.model import TraceError
from gpuq.sim.traces.reading import COMPRESSED, open_text

_PREFIXES = (("philly_jobs", "philly"), ("openb_pod_list", "openb"), ("disaggregated_DLRM", "dlrm"))
NEAR_CUTOFF = 0.75
"""How alike (difflib's ratio) a header column must be to a missing one to count as its misspelling."""


@dataclass(frozen=True)
class Signature:
    """A CSV format's ``columns`` (all present: the file is this format), the ``grouping`` columns it
    also needs unless a mapping file names another, and a ``hint`` shown when it is the closest."""

    format: str
    columns: tuple[str, ...]
    grouping: tuple[str, ...]
    hint: str = ""


SIGNATURES: tuple[Signature, ...] = (
    Signature("csv", generic.DISTINCTIVE, generic.QUEUE_COLUMNS),
    Signature("philly", philly.COLUMNS, (philly.DEFAULT_FIELD,)),
    Signature("openb", openb.COLUMNS, (openb.DEFAULT_FIELD,), openb.NO_TIMES.strip()),
    Signature("dlrm", dlrm.COLUMNS, (dlrm.DEFAULT_FIELD,)),
)
"""The CSV formats in :data:`gpuq.sim.traces.FORMATS` order (``jsonl`` is told by its first line)."""


def format_from_name(path: str | Path) -> str:
    """The format a file name implies (``.xz``, ``.gz`` ignored): the public traces by name,
    ``.jsonl``, else csv."""
    name = Path(path).name
    for suffix in COMPRESSED:
        name = name.removesuffix(suffix)
    for prefix, format_name in _PREFIXES:
        if name.startswith(prefix):
            return format_name
    return "jsonl" if name.endswith(".jsonl") else "csv"


def detect_format(path: str | Path) -> str:
    """The format of the file at ``path`` (steps in the module docstring); TraceError when its
    columns match no format."""
    named = format_from_name(path)
    first = _first_line(Path(path))
    if first is None:
        return named
    if first.lstrip().startswith("{"):
        return "jsonl"
    header = [name.strip() for name in next(csv.reader([first]), [])]
    matches = [s for s in SIGNATURES if set(s.columns) <= set(header)]
    if not matches:
        raise TraceError(unmatched_message(path, header))
    if any(s.format == named for s in matches):
        return named
    return max(matches, key=lambda s: len(s.columns)).format


def _first_line(path: Path) -> str | None:
    """The first non-blank line, or None when the file is missing, empty or cannot be read as text."""
    if not path.is_file():
        return None
    try:
        with open_text(path) as handle:
            return next((line for line in handle if line.strip()), None)
    except (TraceError, OSError, UnicodeDecodeError, EOFError, lzma.LZMAError, zlib.error, gzip.BadGzipFile):
        return None


def closest(header: Sequence[str], named: str = "") -> tuple[Signature, list[str]]:
    """The signature ``header`` is nearest to and the missing columns, each with the header column
    that looks like it (``submit_s (not 'submit_time'?)``); ties go to the ``named`` format, then to
    the first in :data:`SIGNATURES`."""
    scored = []
    for order, signature in enumerate(SIGNATURES):
        missing, score = [], 0.0
        for column in signature.columns:
            if column in header:
                score += 1
                continue
            near = difflib.get_close_matches(column, header, n=1, cutoff=NEAR_CUTOFF)
            score += 0.5 if near else 0
            missing.append(f"{column} (not {near[0]!r}?)" if near else column)
        share = score / len(signature.columns)
        scored.append((-share, signature.format != named, order, signature, missing))
    best = min(scored, key=lambda item: item[:3])
    return best[3], best[4]


def unmatched_message(path: str | Path, header: Sequence[str]) -> str:
    """What :func:`detect_format` says of a header no format matches: the closest format and what it
    misses, every format's columns, and the ``--trace-format`` to read it as the closest."""
    nearest, missing = closest(header, format_from_name(path))
    hint = f" {nearest.hint}" if nearest.hint else ""
    needs = (
        "; ".join(f"{s.format}: {', '.join(s.columns)}, {_grouping(s)}" for s in SIGNATURES)
        + "; jsonl: one JSON object per line, with csv's keys"
    )
    shown = ", ".join(header) if header else "none"
    return (
        f"{path}: its columns ({shown}) match no known trace format; closest: {nearest.format}, "
        f"missing column(s) {', '.join(missing)}{hint}. The formats need: {needs}. "
        f"To read it as {nearest.format}, pass --trace-format {nearest.format}"
    )


def _grouping(signature: Signature) -> str:
    columns = " and ".join(signature.grouping)
    return f"{columns} (or the group column a mapping file names)"
