"""MIG profiles, named layouts and whether a layout fits on one GPU.

A MIG-capable GPU (A100, H100, H200, B200) has 8 memory slices and 7 compute
slices. A profile ``<g>g.<m>gb`` takes ``g`` compute slices and a fixed number
of consecutive memory slices, and may only start at the memory slices NVIDIA's
MIG user guide lists for it (``nvidia-smi mig -lgipp``); e.g. on an A100-80GB
``3g.40gb`` takes slices 0-3 or 4-7, never 2-5. Those start rules, not just
the totals, decide whether a mix fits: ``4g.40gb + 3g.40gb`` fits,
``4g.40gb + 4g.40gb`` does not although 8 memory slices exist.

Every table here has the same geometry (NVIDIA's 7-compute/8-memory-slice
layout); only the profile names and sizes differ per model. ``+me`` (media
extension) profiles are not modelled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

MEMORY_SLICES = 8
"""Memory slices of every GPU in ``MIG_TABLES``."""
COMPUTE_SLICES = 7
"""Compute slices of every GPU in ``MIG_TABLES``."""


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile: ``compute_slices`` of 7, ``memory_slices`` of 8.

    ``starts`` are the memory slices an instance may begin at; it then occupies
    ``memory_slices`` consecutive slices. ``memory_gb`` is the nominal size in the
    profile's name. ``max_instances`` is how many fit on one GPU on their own.
    """

    name: str
    compute_slices: int
    memory_slices: int
    memory_gb: int
    starts: tuple[int, ...]
    max_instances: int

    @property
    def memory_mib(self) -> int:
        """Nominal memory in MiB (the name's GB × 1024); NVML reports slightly less."""
        return self.memory_gb * 1024

    def span(self, start: int) -> range:
        """Memory slices occupied when the instance starts at ``start``."""
        return range(start, start + self.memory_slices)


# The shared geometry, smallest profile first: (compute slices, memory slices, starts, max instances).
# Source: NVIDIA MIG user guide, "Supported MIG Profiles" (A100-80GB placements
# {0..6}:1, {0,2,4,6}:2, {0,2,4}:2, {0,4}:4, {0}:4, {0}:8); H100, H200 and B200 repeat them.
_GEOMETRY: tuple[tuple[int, int, tuple[int, ...], int], ...] = (
    (1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
    (1, 2, (0, 2, 4, 6), 4),
    (2, 2, (0, 2, 4), 3),
    (3, 4, (0, 4), 2),
    (4, 4, (0,), 1),
    (7, 8, (0,), 1),
)

# Per GPU: the six memory sizes (GB) of its profiles, in _GEOMETRY order.
_PROFILE_MEMORY_GB: Mapping[str, tuple[int, ...]] = {
    "A100-40GB": (5, 10, 10, 20, 20, 40),
    "A100-80GB": (10, 20, 20, 40, 40, 80),
    "H100-80GB": (10, 20, 20, 40, 40, 80),
    "H200": (18, 35, 35, 71, 71, 141),
    "B200": (23, 45, 45, 90, 90, 180),
}


def _table(memory_gb: tuple[int, ...]) -> Mapping[str, MigProfile]:
    profiles = (
        MigProfile(f"{g}g.{gb}gb", g, mem, gb, starts, count)
        for (g, mem, starts, count), gb in zip(_GEOMETRY, memory_gb, strict=True)
    )
    return MappingProxyType({p.name: p for p in profiles})


MIG_TABLES: Mapping[str, Mapping[str, MigProfile]] = MappingProxyType(
    {gpu: _table(sizes) for gpu, sizes in _PROFILE_MEMORY_GB.items()}
)
"""MIG table name (a ``GPUModelSpec.mig_table``) -> profile name -> profile, smallest first."""

# nvidia mig-parted's ``all-balanced``: 2 × the smallest 1g, 1 × 2g, 1 × 3g.
_BALANCED = (0, 0, 2, 3)


class MigLayoutError(ValueError):
    """A MIG table or layout that cannot be used, with the reason in the message."""


def profiles_of(table: str) -> Mapping[str, MigProfile]:
    """The profiles of ``table``; raises ``MigLayoutError`` naming the known tables."""
    profiles = MIG_TABLES.get(table)
    if profiles is None:
        raise MigLayoutError(f"no MIG table {table!r}; known: {', '.join(MIG_TABLES)}")
    return profiles


def expand_layout(table: str, layout: str | Sequence[str]) -> tuple[str, ...]:
    """Profile names, one per instance, of a named or explicit layout for one GPU.

    Named layouts are nvidia mig-parted's: ``all-disabled`` (no instances),
    ``all-balanced`` (2 × smallest 1g, 1 × 2g, 1 × 3g) and ``all-<profile>``
    (``max_instances`` of that profile). Anything else is an explicit list of
    profile names, repeats allowed, given as a sequence or as one
    comma-separated string. Names are case-insensitive. The layout is not
    checked for fit here: see ``layout_problems``.
    """
    profiles = profiles_of(table)
    if isinstance(layout, str):
        named = layout.strip().lower()
        if named == "all-disabled":
            return ()
        if named == "all-balanced":
            ordered = tuple(profiles)
            return tuple(ordered[i] for i in _BALANCED)
        if named.startswith("all-"):
            profile = _lookup(table, profiles, named.removeprefix("all-"))
            return (profile.name,) * profile.max_instances
        layout = [part for part in named.split(",") if part.strip()]
    return tuple(_lookup(table, profiles, name).name for name in layout)


def _lookup(table: str, profiles: Mapping[str, MigProfile], name: str) -> MigProfile:
    profile = profiles.get(name.strip().lower())
    if profile is None:
        raise MigLayoutError(
            f"unknown MIG profile {name.strip()!r} for {table}; valid: {', '.join(profiles)}"
        )
    return profile


def layout_problems(table: str, profiles: Sequence[str]) -> list[str]:
    """Why ``profiles`` cannot all be placed on one GPU at once; empty when they can.

    Steps: 1. unknown table or profile names are reported and end the check;
    2. per-profile counts above ``max_instances``; 3. compute and memory slice
    totals above the GPU's; 4. when no placement exists, one message naming
    the instance that found no free start and the instances holding the memory
    slices it could have used (from the deepest partial placement the
    deterministic search reached).
    """
    try:
        resolved = _resolve(table, profiles)
    except MigLayoutError as error:
        return [str(error)]
    problems = [
        f"{count} × {profile.name} requested, at most {profile.max_instances} "
        f"fit{'s' if profile.max_instances == 1 else ''} on one {table}"
        for profile, count in _counts(resolved)
        if count > profile.max_instances
    ]
    compute = sum(p.compute_slices for p in resolved)
    if compute > COMPUTE_SLICES:
        problems.append(f"uses {compute} compute slices, the GPU has {COMPUTE_SLICES}")
    memory = sum(p.memory_slices for p in resolved)
    if memory > MEMORY_SLICES:
        problems.append(f"uses {memory} memory slices, the GPU has {MEMORY_SLICES}")
    search = _search(resolved)
    if isinstance(search, _Stuck):
        problems.append(_collision_message(search))
    return problems


def placement(table: str, profiles: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """``(profile, start memory slice)`` per instance of a layout that fits, ordered by start.

    Deterministic: the same layout (in any order) always gets the same placement.
    Raises ``MigLayoutError`` with the ``layout_problems`` when it does not fit.
    """
    problems = layout_problems(table, profiles)
    if problems:
        raise MigLayoutError("; ".join(problems))
    found = _search(_resolve(table, profiles))
    assert not isinstance(found, _Stuck)  # layout_problems found none
    return tuple(sorted(((p.name, start) for p, start in found), key=lambda item: item[1]))


def _resolve(table: str, profiles: Sequence[str]) -> tuple[MigProfile, ...]:
    known = profiles_of(table)
    return tuple(_lookup(table, known, name) for name in profiles)


def _counts(resolved: Sequence[MigProfile]) -> list[tuple[MigProfile, int]]:
    """Instances per profile, in first-seen order."""
    counts = Counter(resolved)
    return [(profile, counts[profile]) for profile in dict.fromkeys(resolved)]


_Placed = tuple[tuple[MigProfile, int], ...]


@dataclass(frozen=True, slots=True)
class _Stuck:
    """The deepest partial placement the search reached, and the instance it could not place."""

    placed: _Placed
    unplaced: MigProfile


def _search(resolved: Sequence[MigProfile]) -> _Placed | _Stuck:
    """Depth-first search over start slices; the first full placement, else where it got stuck.

    Instances are tried largest first (key: memory slices, compute slices, name, all
    descending), starts in ascending order; a repeat of the same profile only tries
    starts after its predecessor's, which prunes mirror-image placements. At most
    8 instances ever fit, so the search stays small.
    """
    order = sorted(resolved, key=lambda p: (p.memory_slices, p.compute_slices, p.name), reverse=True)
    deepest: list[_Stuck] = []

    def place(index: int, placed: _Placed, used: frozenset[int]) -> _Placed | None:
        if index == len(order):
            return placed
        profile = order[index]
        after = placed[-1][1] if placed and placed[-1][0] == profile else -1
        for start in profile.starts:
            span = profile.span(start)
            if start > after and used.isdisjoint(span):
                done = place(index + 1, (*placed, (profile, start)), used.union(span))
                if done is not None:
                    return done
        if not deepest or len(placed) > len(deepest[0].placed):
            deepest[:] = [_Stuck(placed, profile)]
        return None

    found = place(0, (), frozenset())
    return found if found is not None else deepest[0]


def _collision_message(stuck: _Stuck) -> str:
    """Name the instance with no free start, its start rule, and what holds those slices."""
    profile = stuck.unplaced
    rule = f"{profile.memory_slices} memory slice{'s' if profile.memory_slices > 1 else ''}"
    rule += f", can only start at slice {_or_list([str(s) for s in profile.starts])}"
    wanted = {s for start in profile.starts for s in profile.span(start)}
    holders = [
        f"{placed.name} (memory {_slices(placed.span(start))})"
        for placed, start in sorted(stuck.placed, key=lambda item: item[1])
        if not wanted.isdisjoint(placed.span(start))
    ]
    message = f"{profile.name} ({rule}) collides with {_and_list(holders) if holders else 'nothing'}"
    used = {s for placed, start in stuck.placed for s in placed.span(start)}
    free = [s for s in range(MEMORY_SLICES) if s not in used]
    if free:
        message += f"; memory {_slices(free)} free but no {profile.name} fits there"
    return message


def _slices(slices: Sequence[int] | range) -> str:
    """``slice 3``, ``slices 0-3`` or ``slices 5, 7``."""
    items = list(slices)
    if len(items) == 1:
        return f"slice {items[0]}"
    if items == list(range(items[0], items[-1] + 1)):
        return f"slices {items[0]}-{items[-1]}"
    return "slices " + ", ".join(str(s) for s in items)


def _or_list(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _and_list(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
