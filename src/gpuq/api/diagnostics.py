"""Diagnostics: one finding about one manifest, pointing at file, line, object and field.

A diagnostic renders as ``path:line: Kind/name: field.path: message`` so that
editors and terminals can jump to it. Field paths use Kubernetes notation
(``spec.resourceGroups[0].flavors[1].name``, map keys in brackets when they are
not plain identifiers: ``requests[nvidia.com/gpu]``).

A diagnostic that marks a workload Kueue would never admit (``stays_pending``: it can never fit
its ClusterQueue, its LocalQueue does not exist) is a class of its own: ``gpuq validate`` reports
it as an error, while the verbs that run workloads (admit, simulate, import, serve) load the
workload, report a warning and leave it pending with the engine's message, as Kueue would
(:func:`as_loaded`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

Severity = Literal["error", "warning"]
FieldPath = tuple[str | int, ...]
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def format_field_path(path: Sequence[str | int]) -> str:
    """Render ``("spec", "podSets", 0, "name")`` as ``spec.podSets[0].name``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part}]"
    return out


@dataclass(frozen=True)
class Diagnostic:
    """One error or warning about a manifest object (or a whole file when ``kind`` is empty)."""

    path: str
    line: int
    kind: str
    name: str
    field: str
    message: str
    severity: Severity = "error"
    stays_pending: bool = False
    """A workload Kueue would keep pending for ever: an error for ``gpuq validate``, a warning
    for the verbs that load the workload and run it (:func:`as_loaded`)."""

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}:"
        obj = f" {self.kind}/{self.name}:" if self.name else (f" {self.kind}:" if self.kind else "")
        fld = f" {self.field}:" if self.field else ""
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{where}{obj}{fld} {prefix}{self.message}"

    @property
    def sort_key(self) -> tuple[str, int, int, str, str]:
        """Order by file, line, errors before warnings, then field and message."""
        return (self.path, self.line, 0 if self.severity == "error" else 1, self.field, self.message)


STAYS_PENDING = "the workload stays pending (an error for gpuq validate)"
QUEUE_STAYS_PENDING = "the queue is inactive and its workloads stay pending (an error for gpuq validate)"


def as_loaded(diagnostic: Diagnostic, strict: bool) -> Diagnostic:
    """``diagnostic`` as a verb reports it: a ``stays_pending`` finding is an error when ``strict``
    (``gpuq validate``), otherwise a warning saying that the workload stays pending."""
    if not diagnostic.stays_pending or strict or diagnostic.severity == "warning":
        return diagnostic
    said = QUEUE_STAYS_PENDING if diagnostic.kind in ("LocalQueue", "ClusterQueue") else STAYS_PENDING
    return replace(diagnostic, severity="warning", message=f"{diagnostic.message}: {said}")


def sort_diagnostics(diagnostics: Iterable[Diagnostic]) -> tuple[Diagnostic, ...]:
    """Return the diagnostics ordered by :attr:`Diagnostic.sort_key`, duplicates removed."""
    return tuple(sorted(set(diagnostics), key=lambda d: d.sort_key))


class ManifestError(Exception):
    """Manifests that failed to load; ``diagnostics`` holds every finding (errors and warnings)."""

    def __init__(self, diagnostics: Iterable[Diagnostic]) -> None:
        self.diagnostics: tuple[Diagnostic, ...] = tuple(diagnostics)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(d) for d in self.diagnostics)


@dataclass(frozen=True)
class Manifest:
    """One parsed object and where it came from.

    ``kind`` and ``name`` are what diagnostics show (for a workload source,
    the source's Kind/name, while ``model`` is the Workload built from it).
    ``lines`` maps field paths of ``model`` to their 1-based line. ``aliases``
    maps a prefix of ``model``'s paths to where it was written (a Workload's
    ``spec.podSets[0].template`` is a Job's ``spec.template``), so that
    diagnostics name the field the user wrote.
    """

    path: str
    line: int
    kind: str
    name: str
    namespace: str
    model: Any
    lines: Mapping[FieldPath, int]
    aliases: Mapping[FieldPath, FieldPath] = field(default_factory=dict)

    def line_of(self, field: Sequence[str | int]) -> int:
        """Line of ``field`` or of its nearest written ancestor; the document's line otherwise."""
        parts = tuple(field)
        while parts:
            if parts in self.lines:
                return self.lines[parts]
            parts = parts[:-1]
        return self.line

    def written_path(self, field: Sequence[str | int]) -> FieldPath:
        """``field`` as the user wrote it: the longest matching prefix in ``aliases`` replaced."""
        parts = tuple(field)
        for size in range(len(parts), 0, -1):
            if parts[:size] in self.aliases:
                return (*self.aliases[parts[:size]], *parts[size:])
        return parts

    def diagnostic(
        self,
        field: Sequence[str | int],
        message: str,
        severity: Severity = "error",
        *,
        stays_pending: bool = False,
    ) -> Diagnostic:
        """A diagnostic about ``field`` of this object (``stays_pending``: see :class:`Diagnostic`)."""
        shown = format_field_path(self.written_path(field))
        line = self.line_of(field)
        return Diagnostic(self.path, line, self.kind, self.name, shown, message, severity, stays_pending)

    @property
    def ref(self) -> str:
        """``Kind/name`` or ``Kind/namespace/name`` for messages."""
        if self.namespace:
            return f"{self.kind}/{self.namespace}/{self.name}"
        return f"{self.kind}/{self.name}"
