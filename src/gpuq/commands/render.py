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
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


def write_document(document: Any, output: OutputFormat) -> None:
    """``document`` on stdout as JSON (indented) or YAML (in the document's own key order)."""
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
