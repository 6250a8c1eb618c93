"""MIG profile tables, named layouts and whether a layout fits on one GPU (NVIDIA MIG user guide)."""

from __future__ import annotations

from itertools import permutations

import pytest

from gpuq.core.mig import MIG_TABLES, MigLayoutError, MigProfile, expand_layout, layout_problems, placement

# The A100-80GB table as NVIDIA documents it (nvidia-smi mig -lgipp placements).
A100_80GB = [
    MigProfile("1g.10gb", 1, 1, 10, (0, 1, 2, 3, 4, 5, 6), 7),
    MigProfile("1g.20gb", 1, 2, 20, (0, 2, 4, 6), 4),
    MigProfile("2g.20gb", 2, 2, 20, (0, 2, 4), 3),
    MigProfile("3g.40gb", 3, 4, 40, (0, 4), 2),
    MigProfile("4g.40gb", 4, 4, 40, (0,), 1),
    MigProfile("7g.80gb", 7, 8, 80, (0,), 1),
]

PROFILE_NAMES = {
    "A100-40GB": ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
    "A100-80GB": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H100-80GB": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H200": ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
    "B200": ["1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"],
}


def test_a100_80gb_table_is_nvidias() -> None:
    assert list(MIG_TABLES["A100-80GB"].values()) == A100_80GB


@pytest.mark.parametrize("table", sorted(PROFILE_NAMES))
def test_table_profiles_and_geometry(table: str) -> None:
    profiles = list(MIG_TABLES[table].values())
    assert [p.name for p in profiles] == PROFILE_NAMES[table]
    geometry = [(p.compute_slices, p.memory_slices, p.starts, p.max_instances) for p in profiles]
    assert geometry == [(p.compute_slices, p.memory_slices, p.starts, p.max_instances) for p in A100_80GB]


EVERY_PROFILE = [(table, name) for table in sorted(MIG_TABLES) for name in MIG_TABLES[table]]


@pytest.mark.parametrize(("table", "name"), EVERY_PROFILE, ids=[f"{t} {n}" for t, n in EVERY_PROFILE])
def test_every_profile_alone_fits_max_instances_times_at_its_documented_starts(table: str, name: str) -> None:
    profile = MIG_TABLES[table][name]
    layout = [name] * profile.max_instances
    assert layout_problems(table, layout) == []
    assert placement(table, layout) == tuple((name, start) for start in profile.starts)


@pytest.mark.parametrize(("table", "name"), EVERY_PROFILE, ids=[f"{t} {n}" for t, n in EVERY_PROFILE])
def test_one_more_than_max_instances_does_not_fit(table: str, name: str) -> None:
    profile = MIG_TABLES[table][name]
    problems = layout_problems(table, [name] * (profile.max_instances + 1))
    at_most = f"at most {profile.max_instances} {'fits' if profile.max_instances == 1 else 'fit'}"
    assert problems[0] == f"{profile.max_instances + 1} × {name} requested, {at_most} on one {table}"
    assert problems[-1].startswith(f"{name} ({profile.memory_slices} memory slice")


@pytest.mark.parametrize(
    ("table", "layout", "expected"),
    [
        pytest.param(
            "A100-80GB",
            ["4g.40gb", "2g.20gb", "1g.10gb"],
            (("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)),
            id="4g + 2g + 1g fill a GPU",
        ),
        pytest.param(
            "A100-80GB", ["3g.40gb", "3g.40gb"], (("3g.40gb", 0), ("3g.40gb", 4)), id="two 3g halves"
        ),
        pytest.param(
            "A100-80GB", ["4g.40gb", "3g.40gb"], (("4g.40gb", 0), ("3g.40gb", 4)), id="4g beside 3g"
        ),
        pytest.param(
            "A100-80GB",
            ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"],
            (("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)),
            id="balanced needs 3g in the upper half",
        ),
        pytest.param(
            "A100-80GB",
            ["3g.40gb", "2g.20gb", "2g.20gb"],
            (("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)),
            id="3g + 2g + 2g fits only with 3g starting at slice 4",
        ),
        pytest.param(
            "A100-80GB",
            ["1g.10gb", "2g.20gb", "2g.20gb", "2g.20gb"],
            (("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6)),
            id="three 2g and a 1g",
        ),
        pytest.param(
            "A100-80GB",
            ["1g.20gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"],
            (("1g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.10gb", 6)),
            id="a double-memory 1g and five 1g",
        ),
        pytest.param(
            "H200",
            ["4g.71gb", "2g.35gb", "1g.18gb"],
            (("4g.71gb", 0), ("2g.35gb", 4), ("1g.18gb", 6)),
            id="H200 4g + 2g + 1g",
        ),
        pytest.param("B200", [], (), id="an empty layout fits trivially"),
    ],
)
def test_valid_layouts_and_their_placement(
    table: str, layout: list[str], expected: tuple[tuple[str, int], ...]
) -> None:
    assert layout_problems(table, layout) == []
    assert placement(table, layout) == expected


def test_placement_does_not_depend_on_the_order_profiles_are_listed() -> None:
    layout = ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert {placement("A100-80GB", list(order)) for order in permutations(layout)} == {
        placement("A100-80GB", layout)
    }


ONE_TO_SIX = "0, 1, 2, 3, 4, 5 or 6"


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        pytest.param(
            ["4g.40gb", "4g.40gb"],
            [
                "2 × 4g.40gb requested, at most 1 fits on one A100-80GB",
                "uses 8 compute slices, the GPU has 7",
                "4g.40gb (4 memory slices, can only start at slice 0) collides with "
                "4g.40gb (memory slices 0-3); memory slices 4-7 free but no 4g.40gb fits there",
            ],
            id="two 4g both need slices 0-3",
        ),
        pytest.param(
            ["7g.80gb", "1g.10gb"],
            [
                "uses 8 compute slices, the GPU has 7",
                "uses 9 memory slices, the GPU has 8",
                f"1g.10gb (1 memory slice, can only start at slice {ONE_TO_SIX}) collides with "
                "7g.80gb (memory slices 0-7)",
            ],
            id="7g leaves no slice for anything",
        ),
        pytest.param(
            ["3g.40gb"] * 3,
            [
                "3 × 3g.40gb requested, at most 2 fit on one A100-80GB",
                "uses 9 compute slices, the GPU has 7",
                "uses 12 memory slices, the GPU has 8",
                "3g.40gb (4 memory slices, can only start at slice 0 or 4) collides with "
                "3g.40gb (memory slices 0-3) and 3g.40gb (memory slices 4-7)",
            ],
            id="three 3g",
        ),
        pytest.param(
            ["1g.10gb"] * 8,
            [
                "8 × 1g.10gb requested, at most 7 fit on one A100-80GB",
                "uses 8 compute slices, the GPU has 7",
                f"1g.10gb (1 memory slice, can only start at slice {ONE_TO_SIX}) collides with "
                + ", ".join(f"1g.10gb (memory slice {s})" for s in range(6))
                + " and 1g.10gb (memory slice 6); memory slice 7 free but no 1g.10gb fits there",
            ],
            id="eight 1g: slice 7 is free but no 1g may start there",
        ),
        pytest.param(
            ["2g.20gb"] * 4,
            [
                "4 × 2g.20gb requested, at most 3 fit on one A100-80GB",
                "uses 8 compute slices, the GPU has 7",
                "2g.20gb (2 memory slices, can only start at slice 0, 2 or 4) collides with "
                "2g.20gb (memory slices 0-1), 2g.20gb (memory slices 2-3) and 2g.20gb (memory slices 4-5)"
                "; memory slices 6-7 free but no 2g.20gb fits there",
            ],
            id="four 2g",
        ),
        pytest.param(
            ["4g.40gb", "3g.40gb", "2g.20gb"],
            [
                "uses 9 compute slices, the GPU has 7",
                "uses 10 memory slices, the GPU has 8",
                "2g.20gb (2 memory slices, can only start at slice 0, 2 or 4) collides with "
                "4g.40gb (memory slices 0-3) and 3g.40gb (memory slices 4-7)",
            ],
            id="4g and 3g leave no start for 2g",
        ),
        pytest.param(
            ["1g.20gb"] * 4 + ["1g.10gb"],
            [
                "uses 9 memory slices, the GPU has 8",
                f"1g.10gb (1 memory slice, can only start at slice {ONE_TO_SIX}) collides with "
                "1g.20gb (memory slices 0-1), 1g.20gb (memory slices 2-3), 1g.20gb (memory slices 4-5) "
                "and 1g.20gb (memory slices 6-7)",
            ],
            id="compute is free but memory is not",
        ),
        pytest.param(
            ["3g.40gb", "9g.90gb"],
            [
                "unknown MIG profile '9g.90gb' for A100-80GB; "
                "valid: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"
            ],
            id="unknown profile",
        ),
        pytest.param(
            ["1g.5gb"],
            [
                "unknown MIG profile '1g.5gb' for A100-80GB; "
                "valid: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"
            ],
            id="a profile of another GPU",
        ),
    ],
)
def test_invalid_layouts_say_what_collides(layout: list[str], expected: list[str]) -> None:
    assert layout_problems("A100-80GB", layout) == expected
    with pytest.raises(MigLayoutError):
        placement("A100-80GB", layout)


def test_unknown_table_is_a_problem_naming_the_known_ones() -> None:
    assert layout_problems("T4", ["1g.5gb"]) == [
        "no MIG table 'T4'; known: A100-40GB, A100-80GB, H100-80GB, H200, B200"
    ]


@pytest.mark.parametrize(
    ("table", "layout", "expected"),
    [
        pytest.param("A100-80GB", "all-disabled", (), id="all-disabled has no instances"),
        pytest.param("A100-80GB", "all-1g.10gb", ("1g.10gb",) * 7, id="all-1g.10gb is seven 1g"),
        pytest.param("A100-80GB", "all-3g.40gb", ("3g.40gb",) * 2, id="all-3g.40gb is two 3g"),
        pytest.param("A100-80GB", "ALL-7G.80GB", ("7g.80gb",), id="named layouts ignore case"),
        pytest.param("A100-40GB", "all-1g.10gb", ("1g.10gb",) * 4, id="A100-40GB 1g.10gb is double memory"),
        pytest.param(
            "A100-40GB", "all-balanced", ("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"), id="A100-40GB balanced"
        ),
        pytest.param(
            "A100-80GB", "all-balanced", ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"), id="A100-80GB balanced"
        ),
        pytest.param(
            "H100-80GB", "all-balanced", ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"), id="H100 balanced"
        ),
        pytest.param(
            "H200", "all-balanced", ("1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"), id="H200 balanced"
        ),
        pytest.param(
            "B200", "all-balanced", ("1g.23gb", "1g.23gb", "2g.45gb", "3g.90gb"), id="B200 balanced"
        ),
        pytest.param(
            "A100-80GB",
            ["3g.40gb", "1g.10gb", "1g.10gb"],
            ("3g.40gb", "1g.10gb", "1g.10gb"),
            id="explicit list",
        ),
        pytest.param("A100-80GB", "3g.40gb, 2G.20GB", ("3g.40gb", "2g.20gb"), id="comma-separated string"),
        pytest.param("A100-80GB", "4g.40gb", ("4g.40gb",), id="one profile name"),
        pytest.param("A100-80GB", [], (), id="empty list"),
    ],
)
def test_expand_layout(table: str, layout: str | list[str], expected: tuple[str, ...]) -> None:
    assert expand_layout(table, layout) == expected


@pytest.mark.parametrize(
    ("table", "layout", "message"),
    [
        pytest.param(
            "A100-80GB",
            "all-1g.5gb",
            r"unknown MIG profile '1g\.5gb' for A100-80GB; valid: 1g\.10gb, ",
            id="all-<profile> with a profile of another GPU",
        ),
        pytest.param(
            "H200",
            ["1g.18gb", "2g.20gb"],
            r"unknown MIG profile '2g\.20gb' for H200; valid: 1g\.18gb",
            id="explicit list with an unknown profile",
        ),
        pytest.param("L4", "all-balanced", r"no MIG table 'L4'; known: A100-40GB", id="unknown table"),
    ],
)
def test_expand_layout_rejects_unknown_names(table: str, layout: str | list[str], message: str) -> None:
    with pytest.raises(MigLayoutError, match=message):
        expand_layout(table, layout)


def test_profile_span_and_nominal_memory() -> None:
    profile = MIG_TABLES["H100-80GB"]["3g.40gb"]
    assert (list(profile.span(4)), profile.memory_mib) == ([4, 5, 6, 7], 40960)
