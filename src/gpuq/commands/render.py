"""What the snapshot verbs of :mod:`gpuq.cli` print: the consoles, ``-o`` formats, diagnostics."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Any

import yaml
from rich.console import Console

from gpuq.api.diagnostics import Diagnostic

out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


class OutputFormat(StrEnum):
    """``-o`` in every verb, as kubectl's: tables for people (``wide`` with more columns where a
    verb has them, else the same table), JSON and YAML documents for scripts."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"

    @property
    def is_table(self) -> bool:
        return self in (OutputFormat.TABLE, OutputFormat.WIDE)


OUTPUT_HELP = "Output format: table, wide, json or yaml."


LEGACY_DIRECTORY_HELP = f"{OUTPUT_HELP} A directory here is the deprecated spelling of --out-dir."


def format_or_directory(
    output: str | None, out_dir: str | None, default: OutputFormat
) -> tuple[OutputFormat, str | None]:
    """``-o`` of a verb that wrote a directory with ``-o DIR`` before ``-o`` meant a format: a known
    format is one; anything else is that directory, with a deprecation warning (for one release)."""
    if output is None:
        return default, out_dir
    try:
        return OutputFormat(output), out_dir
    except ValueError:
        warning(f"-o {output} as a directory is deprecated; use --out-dir {output} (-o is the output format)")
        return default, out_dir or output


def write_document(document: Any, output: OutputFormat) -> None:
    """``document`` on stdout as JSON (indented) or YAML (in the document's own key order); the
    table formats of a verb that has only a document print it as YAML."""
    if output == OutputFormat.JSON:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(document, sort_keys=False))


def print_diagnostics(diagnostics: tuple[Diagnostic, ...]) -> None:
    """Every diagnostic on stderr, one line each, as ``path:line: Kind/name: field: message``."""
    for diagnostic in diagnostics:
        err.print(str(diagnostic), markup=False, highlight=False, soft_wrap=True)


def error(message: str) -> None:
    """``error: message`` on stderr, in red."""
    err.print(f"error: {message}", style="red", highlight=False)


def note(message: str) -> None:
    """``note: message`` on stderr, plain: what the input held that changes nothing."""
    err.print(f"note: {message}", highlight=False, markup=False, soft_wrap=True)


def warning(message: str) -> None:
    """``warning: message`` on stderr, in yellow."""
    err.print(f"warning: {message}", style="yellow", highlight=False)
