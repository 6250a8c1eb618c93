"""Topology Aware Scheduling placement: hand-computed cases and properties.

Kueue: keps/2724-topology-aware-scheduling.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuq.core.model import TopologyMode, TopologyRequest
from gpuq.core.topology import TopologyAssignment, TopologyDomain, TopologyFailure, assign, fits

BLOCK, RACK, HOST = "block", "rack", "kubernetes.io/hostname"
L2 = (RACK, HOST)
L3 = (BLOCK, RACK, HOST)

Leaves = dict[tuple[str, ...], int]


def caps(spec: str) -> Leaves:
    """``"b1/r1/h1=2 b1/r1/h2=1"`` -> {("b1", "r1", "h1"): 2, ("b1", "r1", "h2"): 1}."""
    pairs = (item.split("=") for item in spec.split())
    return {tuple(path.split("/")): int(n) for path, n in pairs}


def placed(levels: tuple[str, ...], spec: str) -> TopologyAssignment:
    """The expected assignment, leaves written as in ``caps`` and listed in sorted order."""
    domains = tuple(TopologyDomain(values, n) for values, n in caps(spec).items())
    return TopologyAssignment(levels, domains)


def required(level: str, slice_level: str | None = None, slice_size: int | None = None) -> TopologyRequest:
    return TopologyRequest(TopologyMode.REQUIRED, level, slice_level, slice_size)


def preferred(level: str, slice_level: str | None = None, slice_size: int | None = None) -> TopologyRequest:
    return TopologyRequest(TopologyMode.PREFERRED, level, slice_level, slice_size)


def unconstrained(slice_level: str | None = None, slice_size: int | None = None) -> TopologyRequest:
    return TopologyRequest(TopologyMode.UNCONSTRAINED, None, slice_level, slice_size)


@dataclass(frozen=True)
class Case:
    name: str
    levels: tuple[str, ...]
    leaves: str
    count: int
    request: TopologyRequest | None
    want: TopologyAssignment | TopologyFailure
    least_free: bool = True


CASES = [
    Case(
        "required rack: the gang goes to the only rack that holds it",
        L2,
        "r1/h1=2 r1/h2=1 r2/h3=2 r2/h4=2",
        4,
        required(RACK),
        placed(L2, "r2/h3=2 r2/h4=2"),
    ),
    Case(
        "required rack fails when the gang fits in total free capacity but in no single rack",
        L2,
        "r1/h1=2 r1/h2=1 r2/h3=2 r2/h4=1",
        4,
        required(RACK),
        TopologyFailure('topology "default" allows to fit only 3 out of 4 pod(s)'),
    ),
    Case(
        "required fails naming no fit at all when every leaf is full",
        L2,
        "r1/h1=0 r2/h2=0",
        2,
        required(RACK),
        TopologyFailure('topology "default" doesn\'t allow to fit any of 2 pod(s)'),
    ),
    Case(
        "capacity exactly equal to the count fills the rack",
        L2,
        "r1/h1=2 r1/h2=2",
        4,
        required(RACK),
        placed(L2, "r1/h1=2 r1/h2=2"),
    ),
    Case(
        "best fit chooses the smallest rack that holds the gang, not the largest",
        L2,
        "r1/h1=3 r1/h2=2 r2/h3=3 r2/h4=1 r3/h5=9",
        4,
        required(RACK),
        placed(L2, "r2/h3=3 r2/h4=1"),
    ),
    Case(
        "ties between equally free racks are broken by label values",
        L2,
        "r2/h2=2 r1/h1=2",
        2,
        required(RACK),
        placed(L2, "r1/h1=2"),
    ),
    Case(
        "descending fills the fullest hosts greedily and the remainder on the best-fitting host",
        L2,
        "r1/h1=4 r1/h2=3 r1/h3=2 r1/h4=1",
        6,
        required(RACK),
        placed(L2, "r1/h1=4 r1/h3=2"),
    ),
    Case(
        "required at the host level puts every pod on the smallest host that holds them",
        L2,
        "r1/h1=5 r1/h2=3 r2/h3=4",
        3,
        required(HOST),
        placed(L2, "r1/h2=3"),
    ),
    Case(
        "preferred rack falls back to the block; racks of the block are filled as one pool",
        L3,
        "b1/r1/h1=2 b1/r1/h2=1 b1/r2/h3=2 b2/r3/h4=3",
        4,
        preferred(RACK),
        placed(L3, "b1/r1/h1=2 b1/r2/h3=2"),
    ),
    Case(
        "preferred rack stays in a rack when one holds the gang",
        L3,
        "b1/r1/h1=2 b1/r1/h2=2 b1/r2/h3=3 b2/r3/h4=9",
        4,
        preferred(RACK),
        placed(L3, "b1/r1/h1=2 b1/r1/h2=2"),
    ),
    Case(
        "preferred rack spreads over blocks when no block holds the gang",
        L3,
        "b1/r1/h1=2 b2/r2/h2=2 b2/r3/h3=1",
        5,
        preferred(RACK),
        placed(L3, "b1/r1/h1=2 b2/r2/h2=2 b2/r3/h3=1"),
    ),
    Case(
        "preferred fails only when the whole topology is too small",
        L3,
        "b1/r1/h1=2 b2/r2/h2=2 b2/r3/h3=1",
        6,
        preferred(RACK),
        TopologyFailure('topology "default" allows to fit only 5 out of 6 pod(s)'),
    ),
    Case(
        "unconstrained takes the least free hosts first",
        L2,
        "r1/h1=4 r1/h2=1 r2/h3=2",
        5,
        unconstrained(),
        placed(L2, "r1/h1=2 r1/h2=1 r2/h3=2"),
    ),
    Case(
        "an implied request is unconstrained",
        L2,
        "r1/h1=4 r1/h2=1 r2/h3=2",
        5,
        None,
        placed(L2, "r1/h1=2 r1/h2=1 r2/h3=2"),
    ),
    Case(
        "unconstrained with the least-free profile off fills the freest host first, best fit after",
        L2,
        "r1/h1=4 r1/h2=1 r2/h3=2",
        5,
        unconstrained(),
        placed(L2, "r1/h1=4 r1/h2=1"),
        least_free=False,
    ),
    Case(
        "unconstrained on one host picks the least free host that holds every pod",
        L2,
        "r1/h1=4 r1/h2=1 r2/h3=3",
        3,
        unconstrained(),
        placed(L2, "r2/h3=3"),
    ),
    Case(
        "slices of 4 within a rack: each rack gets whole slices, hosts are filled smallest first",
        L3,
        "b1/r1/h1=3 b1/r1/h2=3 b1/r2/h3=2 b1/r2/h4=2 b2/r3/h5=4 b2/r3/h6=3",
        8,
        required(BLOCK, RACK, 4),
        placed(L3, "b1/r1/h1=3 b1/r1/h2=1 b1/r2/h3=2 b1/r2/h4=2"),
    ),
    Case(
        "slices: the block holds the pods but not two whole rack slices",
        L3,
        "b1/r1/h1=3 b1/r1/h2=2 b1/r2/h3=3 b2/r3/h4=4",
        8,
        required(BLOCK, RACK, 4),
        TopologyFailure('topology "default" allows to fit only 1 out of 2 slice(s)'),
    ),
    Case(
        "a slice-only request starts at the widest level and packs least free racks first",
        L3,
        "b1/r1/h1=2 b1/r2/h2=4 b2/r3/h3=1 b2/r3/h4=1",
        4,
        unconstrained(RACK, 2),
        placed(L3, "b1/r1/h1=2 b1/r2/h2=2"),
    ),
    Case(
        "a slice-only request with the profile off packs the best-fitting rack",
        L3,
        "b1/r1/h1=2 b1/r2/h2=4 b2/r3/h3=1 b2/r3/h4=1",
        4,
        unconstrained(RACK, 2),
        placed(L3, "b1/r2/h2=4"),
        least_free=False,
    ),
    Case(
        "the count must be a whole number of slices",
        L3,
        "b1/r1/h1=8",
        6,
        required(BLOCK, RACK, 4),
        TopologyFailure("pod count 6 is not a multiple of slice size 4"),
    ),
    Case(
        "the slice level may not be wider than the requested level",
        L3,
        "b1/r1/h1=8",
        4,
        required(RACK, BLOCK, 4),
        TopologyFailure(f"podset slice topology {BLOCK} is above the podset topology {RACK}"),
    ),
    Case(
        "a slice level needs a slice size",
        L3,
        "b1/r1/h1=8",
        4,
        required(BLOCK, RACK),
        TopologyFailure("slice topology requested, but slice size not provided"),
    ),
    Case(
        "a slice size needs a slice level",
        L3,
        "b1/r1/h1=8",
        4,
        required(BLOCK, None, 2),
        TopologyFailure("slice size provided, but slice topology not requested"),
    ),
    Case(
        "a slice size below one is refused",
        L3,
        "b1/r1/h1=8",
        4,
        required(BLOCK, RACK, 0),
        TopologyFailure("slice size must be at least 1, got 0"),
    ),
    Case(
        "a level the topology lacks fails naming it",
        L3,
        "b1/r1/h1=8",
        4,
        required("zone"),
        TopologyFailure("no requested topology level: zone"),
    ),
    Case(
        "a slice level the topology lacks fails naming it",
        L3,
        "b1/r1/h1=8",
        4,
        required(BLOCK, "zone", 2),
        TopologyFailure("no requested topology level for slices: zone"),
    ),
    Case(
        "a required request without a level fails",
        L3,
        "b1/r1/h1=8",
        4,
        TopologyRequest(TopologyMode.REQUIRED),
        TopologyFailure("topology level not specified"),
    ),
    Case(
        "zero pods get an empty assignment, even on an empty topology",
        L3,
        "",
        0,
        required(RACK),
        TopologyAssignment(L3, ()),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_assign(case: Case) -> None:
    leaves, least_free = caps(case.leaves), case.least_free
    got = assign(
        case.levels, leaves, case.count, case.request, profile_least_free_for_unconstrained=least_free
    )
    assert got == case.want
    fit = fits(case.levels, leaves, case.count, case.request, profile_least_free_for_unconstrained=least_free)
    assert fit == isinstance(case.want, TopologyAssignment)


def test_failure_names_the_topology() -> None:
    got = assign(L2, caps("r1/h1=1"), 2, required(RACK), topology_name="tpu-v5")
    assert got == TopologyFailure('topology "tpu-v5" allows to fit only 1 out of 2 pod(s)')


def test_two_thousand_leaves_are_placed() -> None:
    """Its speed is measured by bench/placement.py, not here."""
    leaves: Leaves = {(f"b{i % 4}", f"r{i % 40}", f"h{i}"): 1 + i % 7 for i in range(2000)}
    got = assign(L3, leaves, 900, preferred(RACK))
    assert isinstance(got, TopologyAssignment)
    assert sum(d.count for d in got.domains) == 900


# --- properties -------------------------------------------------------------------------------

VALUES = st.sampled_from(["a", "b", "c"])
LEAVES = st.dictionaries(st.tuples(VALUES, VALUES, VALUES), st.integers(0, 6), max_size=14)
MODES = st.sampled_from([TopologyMode.REQUIRED, TopologyMode.PREFERRED, TopologyMode.UNCONSTRAINED])


@st.composite
def requests(draw: st.DrawFn) -> TopologyRequest | None:
    mode = draw(st.one_of(st.none(), MODES))
    if mode is None:
        return None
    level = None if mode is TopologyMode.UNCONSTRAINED else draw(st.sampled_from(L3))
    if not draw(st.booleans()):
        return TopologyRequest(mode, level)
    slice_level = draw(st.sampled_from(L3[L3.index(level) if level else 0 :]))
    return TopologyRequest(mode, level, slice_level, draw(st.integers(1, 3)))


def prefix_sums(assignment: TopologyAssignment, depth: int) -> dict[tuple[str, ...], int]:
    sums: dict[tuple[str, ...], int] = {}
    for d in assignment.domains:
        sums[d.values[:depth]] = sums.get(d.values[:depth], 0) + d.count
    return sums


@settings(max_examples=400, deadline=None)
@given(leaves=LEAVES, count=st.integers(0, 24), request=requests(), least_free=st.booleans())
def test_any_assignment_places_every_pod_within_capacity(
    leaves: Leaves, count: int, request: TopologyRequest | None, least_free: bool
) -> None:
    before = dict(leaves)
    got = assign(L3, leaves, count, request, profile_least_free_for_unconstrained=least_free)
    assert leaves == before
    assert fits(L3, leaves, count, request, profile_least_free_for_unconstrained=least_free) == isinstance(
        got, TopologyAssignment
    )
    if isinstance(got, TopologyFailure):
        return
    assert got.levels == L3
    assert sum(d.count for d in got.domains) == count
    assert all(0 < d.count <= leaves.get(d.values, 0) for d in got.domains)
    assert [d.values for d in got.domains] == sorted({d.values for d in got.domains})
    if request is not None and request.mode is TopologyMode.REQUIRED and request.level is not None:
        assert len(prefix_sums(got, L3.index(request.level) + 1)) <= 1
    if request is not None and request.slice_level is not None and request.slice_size:
        depth = L3.index(request.slice_level) + 1
        assert all(n % request.slice_size == 0 for n in prefix_sums(got, depth).values())


@settings(max_examples=300, deadline=None)
@given(leaves=LEAVES, count=st.integers(1, 24), mode=MODES, level=st.sampled_from(L3))
def test_placement_succeeds_exactly_when_capacity_allows(
    leaves: Leaves, count: int, mode: TopologyMode, level: str
) -> None:
    request = TopologyRequest(mode, None if mode is TopologyMode.UNCONSTRAINED else level)
    got = assign(L3, leaves, count, request)
    if mode is TopologyMode.REQUIRED:
        largest = max(
            prefix_sums(TopologyAssignment(L3, _as_domains(leaves)), L3.index(level) + 1).values(), default=0
        )
        assert isinstance(got, TopologyAssignment) == (largest >= count)
    else:
        assert isinstance(got, TopologyAssignment) == (sum(leaves.values()) >= count)


@settings(max_examples=200, deadline=None)
@given(leaves=LEAVES, count=st.integers(0, 24), request=requests(), least_free=st.booleans())
def test_zero_capacity_leaves_do_not_change_the_placement(
    leaves: Leaves, count: int, request: TopologyRequest | None, least_free: bool
) -> None:
    without_zeros = {values: n for values, n in leaves.items() if n > 0}
    with_zeros = assign(L3, leaves, count, request, profile_least_free_for_unconstrained=least_free)
    assert with_zeros == assign(
        L3, without_zeros, count, request, profile_least_free_for_unconstrained=least_free
    )


def _as_domains(leaves: Leaves) -> tuple[TopologyDomain, ...]:
    return tuple(TopologyDomain(values, n) for values, n in sorted(leaves.items()))
