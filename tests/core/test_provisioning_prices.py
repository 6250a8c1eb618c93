"""Price catalogue: bundled figures with sources, unknown figures said so, overrides."""

from __future__ import annotations

import pytest

from gpuq.api.provisioning_prices import default_catalogue
from gpuq.core.provisioning.prices import PriceDataError, PriceEntry, catalogue_from_data

LOOKUPS = [
    ("a3-highgpu-8g", "on-demand", "1y", 88.49),
    ("a3-highgpu-8g", "spot", "1y", 35.3957),
    ("a3-highgpu-8g", "reserved", "1y", 61.3837),
    ("a3-highgpu-8g", "reserved", "3y", 38.8644),
    ("a2-highgpu-1g", "on-demand", "1y", 3.6734),
    ("p5.48xlarge", "calendar", "1y", 39.33),
    ("a3-highgpu-8g", "flex-start", "1y", None),
    ("a2-ultragpu-8g", "reserved", "1y", None),
    ("Standard_ND96isr_H100_v5", "on-demand", "1y", None),
    ("no-such-machine", "on-demand", "1y", None),
]


@pytest.mark.parametrize(("machine", "capacity", "commitment", "expected"), LOOKUPS)
def test_bundled_lookups(machine: str, capacity: str, commitment: str, expected: float | None) -> None:
    quote = default_catalogue().lookup(machine, capacity, commitment)  # type: ignore[arg-type]
    assert quote.usd_per_hour == expected
    assert quote.reason
    if expected is not None:
        assert quote.source.startswith("https://")


def test_every_bundled_figure_has_a_source_and_date() -> None:
    for entry in default_catalogue().entries.values():
        figures = [
            entry.on_demand,
            entry.spot,
            entry.reserved_1y,
            entry.reserved_3y,
            entry.calendar,
            entry.flex_start,
        ]
        if any(f is not None for f in figures):
            assert entry.source and entry.retrieved, entry.machine_type


def test_overrides_replace_only_the_fields_they_give() -> None:
    base = default_catalogue()
    changed = base.with_overrides([PriceEntry("a3-highgpu-8g", spot=20.0)], [{"spot"}])
    assert changed.price("a3-highgpu-8g", "spot") == 20.0
    assert changed.price("a3-highgpu-8g", "on-demand") == 88.49
    assert base.price("a3-highgpu-8g", "spot") == 35.3957
    added = base.with_overrides([PriceEntry("my-box", on_demand=1.0)])
    assert added.price("my-box", "on-demand") == 1.0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([{"onDemand": 1.0}], "prices[0].machineType: is required"),
        ([{"machineType": "x", "spot": -1}], "prices[0].spot: must be a non-negative number"),
        (["x"], "prices[0]: must be a mapping"),
    ],
)
def test_bad_catalogue_data(data: list[object], message: str) -> None:
    with pytest.raises(PriceDataError, match=message.replace("[", r"\[").replace("]", r"\]")):
        catalogue_from_data(data)  # type: ignore[arg-type]
