"""Which namespace and LocalQueue a trace's user, group or virtual cluster submits to.

A mapping file names the trace column that holds the group, an optional
default, and one entry per group; keys written ``re:<pattern>`` are regular
expressions that must match the whole group, tried in file order after the
exact keys::

    field: cluster
    default: {namespace: research, queue: research}
    groups:
      "6214e9": {namespace: team-vision, queue: vision}
      "re:^vc[0-9a-f]+$": {namespace: team-other, queue: other}

Without a mapping, :class:`Grouper` derives a DNS-label name from the group
itself and says so in the import's notes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuq.api.names import dns_label_problem
from gpuq.sim.traces.model import TraceError
from gpuq.sim.traces.reading import RowError

_TOP_KEYS = ("field", "default", "groups")
_TARGET_KEYS = ("namespace", "queue")
_INVALID = re.compile(r"[^a-z0-9-]+")
_NOTE_EXAMPLES = 12


@dataclass(frozen=True, slots=True)
class QueueRef:
    """A LocalQueue: its namespace and name."""

    namespace: str
    queue: str


@dataclass(frozen=True, slots=True)
class GroupMapping:
    """A parsed mapping file. ``field`` None: the importer's default column."""

    path: str
    field: str | None
    default: QueueRef | None
    exact: Mapping[str, QueueRef]
    patterns: tuple[tuple[re.Pattern[str], QueueRef], ...]

    def lookup(self, group: str) -> QueueRef | None:
        """The exact key's queue, else the first matching pattern's, else the default (may be None)."""
        if group in self.exact:
            return self.exact[group]
        for pattern, target in self.patterns:
            if pattern.fullmatch(group):
                return target
        return self.default


def load_mapping(path: str | Path) -> GroupMapping:
    """Read and check a mapping file; every problem is a TraceError naming the file and the key."""
    source = Path(path)
    try:
        document = yaml.safe_load(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TraceError(f"{source}: no such mapping file") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise TraceError(f"{source}: unreadable mapping file: {err}") from err
    if not isinstance(document, dict):
        raise TraceError(f"{source}: a mapping file is a YAML object with keys {', '.join(_TOP_KEYS)}")
    unknown = [str(key) for key in document if key not in _TOP_KEYS]
    if unknown:
        raise TraceError(f"{source}: unknown key(s) {', '.join(unknown)} (known: {', '.join(_TOP_KEYS)})")
    field = document.get("field")
    if field is not None and (not isinstance(field, str) or not field.strip()):
        raise TraceError(f"{source}: field: must be a column name (got {field!r})")
    default = _target(source, "default", document["default"]) if "default" in document else None
    groups = document.get("groups") or {}
    if not isinstance(groups, dict):
        raise TraceError(f"{source}: groups: must be a map of group -> {{namespace, queue}}")
    exact: dict[str, QueueRef] = {}
    patterns: list[tuple[re.Pattern[str], QueueRef]] = []
    for key, value in groups.items():
        text = _group_key(source, key)
        target = _target(source, f"groups.{text}", value)
        if text.startswith("re:"):
            patterns.append((_pattern(source, text), target))
        else:
            exact[text] = target
    return GroupMapping(str(source), field.strip() if field else None, default, exact, tuple(patterns))


def _group_key(source: Path, key: object) -> str:
    """Group keys are text. YAML reads some unquoted ids as numbers (``0123`` as 83, ``1.50`` as
    1.5), and the text cannot be recovered, so any other key asks to be quoted."""
    if isinstance(key, str):
        return key
    raise TraceError(f'{source}: groups: key {key!r} is not text: quote it (e.g. "6214e9")')


def _target(source: Path, at: str, value: Any) -> QueueRef:
    if not isinstance(value, dict):
        raise TraceError(f"{source}: {at}: must be {{namespace: ..., queue: ...}} (got {value!r})")
    unknown = [str(key) for key in value if key not in _TARGET_KEYS]
    if unknown:
        raise TraceError(f"{source}: {at}: unknown key(s) {', '.join(unknown)} (known: namespace, queue)")
    names: list[str] = []
    for key in _TARGET_KEYS:
        name = value.get(key)
        if name is None or name == "":
            raise TraceError(f"{source}: {at}: missing {key}")
        if not isinstance(name, str) or (problem := dns_label_problem(name)):
            why = problem if isinstance(name, str) else "must be text"
            raise TraceError(f"{source}: {at}.{key}: invalid name {name!r}: {why}")
        names.append(name)
    return QueueRef(names[0], names[1])


def _pattern(source: Path, key: str) -> re.Pattern[str]:
    try:
        return re.compile(key[3:])
    except re.error as err:
        raise TraceError(f"{source}: groups: key {key!r}: invalid regular expression: {err}") from err


def derived_name(group: str, prefix: str, *, always: bool = False) -> str | None:
    """``group`` as a DNS label: lowercased, other characters -> '-', ``prefix`` in front when
    ``always`` or when it would not start with a letter, at most 63 characters; None when nothing
    is left. (A leading letter also keeps YAML from reading ``6214e9`` as a number.)"""
    text = _INVALID.sub("-", group.lower()).strip("-")
    if not text:
        return None
    if always or not text[0].isalpha():
        text = prefix + text
    return text[:63].rstrip("-")


class Grouper:
    """Resolves a row's group to a queue with a mapping, or by :func:`derived_name` without one.

    Results are cached per distinct group (traces repeat a few groups many
    times). ``notes`` says how names were derived and which groups merged.
    """

    __slots__ = ("_cache", "_derived", "always_prefix", "column", "mapping", "prefix")

    def __init__(
        self, mapping: GroupMapping | None, column: str, prefix: str, *, always_prefix: bool = False
    ) -> None:
        self.mapping = mapping
        self.column = column
        self.prefix = prefix
        self.always_prefix = always_prefix
        self._cache: dict[str, QueueRef] = {}
        self._derived: dict[str, list[str]] = {}  # derived name -> groups, in first-seen order

    def resolve(self, group: str) -> QueueRef:
        """The group's queue; RowError when it is unmapped (no default) or yields no name."""
        found = self._cache.get(group)
        if found is not None:
            return found
        if self.mapping is not None:
            found = self.mapping.lookup(group)
            if found is None:
                raise RowError(f"{self.column} {group!r}: not in {self.mapping.path} and no default there")
        else:
            name = derived_name(group, self.prefix, always=self.always_prefix)
            if name is None:
                raise RowError(f"{self.column} {group!r}: no namespace can be derived from it")
            self._derived.setdefault(name, []).append(group)
            found = QueueRef(name, name)
        self._cache[group] = found
        return found

    def notes(self) -> list[str]:
        """What a reader of the import should know about the groups."""
        if self.mapping is not None:
            return [f"namespaces and queues from {self.mapping.path} by column {self.column}"]
        pairs = sorted((group, name) for name, groups in self._derived.items() for group in groups)
        shown = ", ".join(f"{group} -> {name}" for group, name in pairs[:_NOTE_EXAMPLES])
        more = f", … ({len(pairs)} in all)" if len(pairs) > _NOTE_EXAMPLES else ""
        out = [f"no mapping: namespace = queue = a name derived from column {self.column}: {shown}{more}"]
        for name, groups in sorted(self._derived.items()):
            if len(groups) > 1:
                out.append(f"groups {', '.join(map(repr, groups))} all became namespace {name!r}")
        return out
