"""Plumbing every importer shares: opening (xz, gzip) files, CSV rows with line numbers, collecting jobs.

A :class:`Collector` is the one place that turns a refused row into a
:class:`BadRow` (or, under ``strict``, a :class:`TraceError`), refuses a
second job of the same (namespace, name), and sorts the jobs, so that every
importer reports problems the same way.
"""

from __future__ import annotations

import csv
import gzip
import lzma
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

from gpuq.sim.traces.model import BadRow, TraceError, TraceJob, TraceRead

MAX_SECONDS = 10 * 365 * 86400
"""Times and durations above ten years are taken for a unit mistake (milliseconds written as seconds)."""


class RowError(ValueError):
    """One row cannot become a job; the message names the column and the value."""


COMPRESSED = (".xz", ".gz")
"""File suffixes read through decompression (xz, gzip)."""


def open_text(path: Path) -> TextIO:
    """The file as text: ``.xz`` and ``.gz`` files decompressed, a byte-order mark dropped, newlines
    left to csv.

    Raises :class:`TraceError` naming the file when it cannot be opened.
    """
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    try:
        if path.suffix == ".xz":
            return lzma.open(path, "rt", encoding="utf-8-sig", newline="")
        if path.suffix == ".gz":
            return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
        return path.open(encoding="utf-8-sig", newline="")
    except OSError as err:
        raise TraceError(f"{path}: cannot open: {err}") from err


def read_csv(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header (names stripped) and every non-blank row with its first physical line (header = 1).

    A quoted field may span lines; the row then carries the line it starts on.
    """
    with open_text(path) as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
            rows: list[tuple[int, list[str]]] = []
            end = reader.line_num
            for row in reader:
                if row:
                    rows.append((end + 1, row))
                end = reader.line_num
        except StopIteration:
            raise TraceError(f"{path}: empty file (expected a header row)") from None
        except (csv.Error, UnicodeDecodeError, lzma.LZMAError, EOFError, gzip.BadGzipFile, zlib.error) as err:
            raise TraceError(f"{path}:{reader.line_num}: unreadable: {err}") from err
    return [name.strip() for name in header], rows


def column_index(
    header: Sequence[str], path: Path, required: Iterable[str], optional: Iterable[str] = (), hint: str = ""
) -> dict[str, int]:
    """Position of every required and present optional column; TraceError naming the missing ones."""
    positions = {name: i for i, name in reversed(list(enumerate(header)))}  # the first of repeated names
    required = list(required)
    missing = [name for name in required if name not in positions]
    if missing:
        raise TraceError(f"{path}: missing column(s) {', '.join(missing)}{hint}")
    wanted = [*required, *optional]
    return {name: positions[name] for name in wanted if name in positions}


def row_width(row: Sequence[str], header: Sequence[str]) -> None:
    """A row with more or fewer fields than the header is malformed, not silently padded."""
    if len(row) != len(header):
        raise RowError(f"{len(row)} fields where the header has {len(header)}")


def take(rows: list[tuple[int, list[str]]], limit: int | None) -> list[tuple[int, list[str]]]:
    """The first ``limit`` data rows (all when None); a negative limit is a TraceError."""
    if limit is None:
        return rows
    if limit < 0:
        raise TraceError(f"limit must be 0 or more (got {limit})")
    return rows[:limit]


class Collector:
    """Jobs and refused rows of one file.

    ``add`` refuses a job whose (namespace, name) an earlier job holds;
    ``refuse`` records a bad row or, when ``strict``, raises :class:`TraceError`
    with the same ``path:line: message`` text.
    """

    __slots__ = ("_first_line", "bad_rows", "jobs", "path", "strict")

    def __init__(self, path: Path, strict: bool) -> None:
        self.path = str(path)
        self.strict = strict
        self.jobs: list[TraceJob] = []
        self.bad_rows: list[BadRow] = []
        self._first_line: dict[tuple[str, str], int] = {}

    def refuse(self, line: int, message: str) -> None:
        bad = BadRow(self.path, line, message)
        if self.strict:
            raise TraceError(str(bad))
        self.bad_rows.append(bad)

    def add(self, job: TraceJob) -> None:
        key = (job.namespace, job.name)
        first = self._first_line.setdefault(key, job.source_line)
        if first != job.source_line:
            message = f"name {job.name!r}: duplicate in namespace {job.namespace!r} (first at line {first})"
            self.refuse(job.source_line, message)
            return
        self.jobs.append(job)

    def result(self, rows: int, notes: Iterable[str] = ()) -> TraceRead:
        """Jobs sorted by (submit_s, source_line): source order breaks ties."""
        jobs = sorted(self.jobs, key=lambda job: (job.submit_s, job.source_line))
        return TraceRead(tuple(jobs), tuple(self.bad_rows), rows, self.path, tuple(notes))
