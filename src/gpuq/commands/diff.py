"""``gpuq diff OLD NEW``: what differs between two configurations; exit 0 equal, 1 different, 2 bad input."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpuq.commands.render import OUTPUT_HELP, OutputFormat, write_document

if TYPE_CHECKING:
    from gpuq.k8s.diff import DiffResult


out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
MARKS = {"added": "+", "removed": "-", "changed": "~"}


def diff(
    old: Annotated[str, typer.Argument(help="The first configuration: file, directory or - (stdin).")],
    new: Annotated[str, typer.Argument(help="The second configuration: file or directory.")],
    output: Annotated[
        OutputFormat, typer.Option("--output", "-o", help=f"{OUTPUT_HELP} Tables are plain lines when piped.")
    ] = OutputFormat.TABLE,
) -> None:
    """Compare two configurations object by object (kind/namespace/name) and field by field, ignoring
    server-managed metadata and status, with quantities and Kueue defaults normalised. Exit status:
    0 equal, 1 different, 2 bad input."""
    from gpuq.k8s.diff import DiffInputError, as_document, diff_paths, side_texts

    stdin = sys.stdin.read() if "-" in (old, new) else None
    try:
        result = diff_paths(side_texts([old], stdin), side_texts([new], stdin))
    except DiffInputError as error:
        for diagnostic in error.diagnostics:
            err.print(str(diagnostic), markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from error
    if not output.is_table:
        write_document(as_document(result), output)
    elif out.is_terminal:
        _table(result)
    else:
        sys.stdout.write(text(result))
    raise typer.Exit(0 if result.equal else 1)


def text(result: DiffResult) -> str:
    """Plain lines: ``~ Kind/name`` then ``    field: old → new`` per change; a count at the end."""
    from gpuq.k8s.diff import show

    lines = []
    for obj in result.objects:
        lines.append(f"{MARKS[obj.change]} {obj.ref}")
        lines += [f"    {f.path}: {show(f.old)} → {show(f.new)}" for f in obj.fields]
    counts = {c: sum(1 for o in result.objects if o.change == c) for c in MARKS}
    if result.equal:
        lines.append("no differences")
    else:
        lines.append(
            f"{len(result.objects)} object(s) differ: {counts['added']} added, {counts['removed']} removed, "
            f"{counts['changed']} changed"
        )
    return "\n".join(lines) + "\n"


def _table(result: DiffResult) -> None:
    if result.equal:
        out.print("no differences")
        return
    from gpuq.k8s.diff import show

    table = Table(title="Differences", title_justify="left")
    for column in ("", "object", "field", "old", "new"):
        table.add_column(column, overflow="fold")
    for obj in result.objects:
        if not obj.fields:
            table.add_row(MARKS[obj.change], obj.ref, "", "", "", end_section=True)
        for index, change in enumerate(obj.fields):
            last = index == len(obj.fields) - 1
            table.add_row(
                MARKS[obj.change] if index == 0 else "",
                obj.ref if index == 0 else "",
                change.path,
                show(change.old),
                show(change.new),
                end_section=last,
            )
    out.print(table)
