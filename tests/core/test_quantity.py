"""gpuq.core.quantity: exact parsing and core amounts."""

from decimal import Decimal

import pytest

from gpuq.core.quantity import QuantityError, format_amount, parse_quantity, to_amount


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Decimal("0.5")),
        ("10Gi", Decimal(10 * 2**30)),
        ("1e3", Decimal(1000)),
        ("1.5", Decimal("1.5")),
        (1.5, Decimal("1.5")),
        (8, Decimal(8)),
        ("2k", Decimal(2000)),
        ("-1", Decimal(-1)),
        ("0.1", Decimal("0.1")),
        (" 3 ", Decimal(3)),
    ],
    ids=[
        "milli cpu is half a unit",
        "binary gibibytes are exact",
        "decimal exponent",
        "decimal string",
        "yaml float keeps its short repr",
        "yaml int",
        "decimal kilo suffix",
        "negative numbers parse (validation rejects them)",
        "tenths stay exact",
        "surrounding spaces are ignored",
    ],
)
def test_parse_quantity(text: object, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "abc", "10GB", "1.2.3", "Gi", True, None, [1], float("inf")],
    ids=[
        "empty string",
        "letters",
        "unknown suffix",
        "two decimal points",
        "suffix without number",
        "booleans are not quantities",
        "null is not a quantity",
        "lists are not quantities",
        "infinity is not a quantity",
    ],
)
def test_parse_quantity_rejects(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("resource", "text", "amount"),
    [
        ("cpu", "500m", 500),
        ("cpu", "1.5", 1500),
        ("cpu", "1u", 1),
        ("memory", "1Gi", 2**30),
        ("nvidia.com/gpu", "0.5", 1),
        ("memory", "100m", 1),
    ],
    ids=[
        "cpu in milli units",
        "fractional cpu",
        "micro cpu rounds up to one milli",
        "memory in bytes",
        "fractional gpu rounds up",
        "milli bytes round up",
    ],
)
def test_to_amount(resource: str, text: str, amount: int) -> None:
    assert to_amount(resource, text) == amount


def test_format_amount_round_trips_common_values() -> None:
    assert [format_amount("cpu", 1500), format_amount("cpu", 2000), format_amount("memory", 16 * 2**30)] == [
        "1500m",
        "2",
        "16Gi",
    ]


@pytest.mark.parametrize(
    "text", ["1e30", 10**19, "9999999999999999999Ki"], ids=["exponent", "yaml int", "suffix"]
)
def test_absurdly_large_quantities_are_rejected(text: object) -> None:
    with pytest.raises(QuantityError, match="too large"):
        parse_quantity(text)
