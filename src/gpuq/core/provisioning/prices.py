"""A price catalogue: USD per node-hour for each machine type and capacity type, with sources.

Every figure carries where it came from and when (``source``, ``retrieved``); a figure nobody
could source is None, and a lookup says so (:class:`PriceQuote` ``reason``) instead of guessing.
The bundled catalogue (``data/prices.yaml``) is read by :mod:`gpuq.api.provisioning_prices`;
this module only turns plain data into a catalogue and answers lookups, so it stays pure.

Commitments: ``reserved`` means a committed-use price; ``commitment`` picks ``1y`` or ``3y``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Commitment = Literal["1y", "3y"]
PRICE_FIELDS = ("on_demand", "spot", "reserved_1y", "reserved_3y", "calendar", "flex_start")
_DATA_KEYS = {
    "onDemand": "on_demand",
    "spot": "spot",
    "reserved1y": "reserved_1y",
    "reserved3y": "reserved_3y",
    "calendar": "calendar",
    "flexStart": "flex_start",
}


class PriceDataError(ValueError):
    """Catalogue data that is not a list of price entries (the message names the entry and field)."""


@dataclass(frozen=True, slots=True)
class PriceEntry:
    """Prices of one machine type in one region (USD per node-hour); None where not sourced."""

    machine_type: str
    provider: str = ""
    region: str = ""
    gpus: int = 0
    on_demand: float | None = None
    spot: float | None = None
    reserved_1y: float | None = None
    reserved_3y: float | None = None
    calendar: float | None = None
    flex_start: float | None = None
    source: str = ""
    retrieved: str = ""
    notes: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)
    """Per-field source where it differs from ``source`` (``{"calendar": "https://..."}``)."""

    def source_of(self, field_name: str) -> str:
        return self.sources.get(field_name, self.source)


@dataclass(frozen=True, slots=True)
class PriceQuote:
    """A looked-up price: ``usd_per_hour`` None when unknown, and why (``reason``) with its source."""

    machine_type: str
    capacity_type: str
    usd_per_hour: float | None
    source: str
    reason: str


def _field_for(capacity_type: str, commitment: Commitment) -> str | None:
    return {
        "on-demand": "on_demand",
        "spot": "spot",
        "reserved": f"reserved_{commitment}",
        "calendar": "calendar",
        "flex-start": "flex_start",
    }.get(capacity_type)


@dataclass(frozen=True, slots=True)
class PriceCatalogue:
    """Entries by machine type (one region each); later overrides replace single fields."""

    entries: Mapping[str, PriceEntry] = field(default_factory=dict)

    def lookup(self, machine_type: str, capacity_type: str, commitment: Commitment = "1y") -> PriceQuote:
        """The price of one node-hour of ``machine_type`` under ``capacity_type``."""
        entry = self.entries.get(machine_type)
        name = _field_for(capacity_type, commitment)
        if name is None:
            return PriceQuote(
                machine_type, capacity_type, None, "", f"unknown capacity type {capacity_type!r}"
            )
        if entry is None:
            return PriceQuote(
                machine_type, capacity_type, None, "", f"{machine_type} is not in the catalogue"
            )
        value = getattr(entry, name)
        where = f" in {entry.region}" if entry.region else ""
        if value is None:
            reason = (
                f"no sourced {capacity_type} price for {machine_type}{where}: set one with a PriceCatalogue"
            )
            return PriceQuote(machine_type, capacity_type, None, entry.source_of(name), reason)
        reason = f"{capacity_type} {machine_type}{where}: ${value:.4f}/h"
        return PriceQuote(machine_type, capacity_type, value, entry.source_of(name), reason)

    def price(self, machine_type: str, capacity_type: str, commitment: Commitment = "1y") -> float | None:
        return self.lookup(machine_type, capacity_type, commitment).usd_per_hour

    def with_overrides(
        self, overrides: Iterable[PriceEntry], given: Iterable[set[str]] = ()
    ) -> PriceCatalogue:
        """A new catalogue where each override replaces the fields it gives (all fields when
        ``given`` has no set for it); machine types not yet listed are added whole."""
        entries = dict(self.entries)
        given_sets = list(given)
        for index, override in enumerate(overrides):
            base = entries.get(override.machine_type)
            fields = given_sets[index] if index < len(given_sets) else None
            if base is None or fields is None:
                entries[override.machine_type] = override
                continue
            changes = {name: getattr(override, name) for name in fields}
            entries[override.machine_type] = dataclasses.replace(base, **changes)
        return PriceCatalogue(dict(sorted(entries.items())))


def entry_from_data(data: Mapping[str, Any], where: str) -> tuple[PriceEntry, set[str]]:
    """One entry from its YAML form (camelCase keys); returns the entry and the fields it gave."""
    machine_type = data.get("machineType")
    if not isinstance(machine_type, str) or not machine_type:
        raise PriceDataError(f"{where}.machineType: is required")
    values: dict[str, Any] = {"machine_type": machine_type}
    given: set[str] = set()
    for key, name in _DATA_KEYS.items():
        if data.get(key) is None:
            continue
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise PriceDataError(
                f"{where}.{key}: must be a non-negative number of USD per hour (got {value!r})"
            )
        values[name] = float(value)
        given.add(name)
    for key, name in (
        ("provider", "provider"),
        ("region", "region"),
        ("source", "source"),
        ("retrieved", "retrieved"),
        ("notes", "notes"),
    ):
        if data.get(key) is not None:
            values[name] = str(data[key])
            given.add(name)
    if data.get("gpus") is not None:
        values["gpus"] = int(data["gpus"])
        given.add("gpus")
    if isinstance(data.get("sources"), Mapping):
        values["sources"] = {_DATA_KEYS.get(str(k), str(k)): str(v) for k, v in data["sources"].items()}
        given.add("sources")
    return PriceEntry(**values), given


def catalogue_from_data(items: Iterable[Mapping[str, Any]], where: str = "prices") -> PriceCatalogue:
    """A catalogue from a list of entries in YAML form; the first entry of a machine type wins."""
    entries: dict[str, PriceEntry] = {}
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise PriceDataError(f"{where}[{index}]: must be a mapping")
        entry, _ = entry_from_data(item, f"{where}[{index}]")
        entries.setdefault(entry.machine_type, entry)
    return PriceCatalogue(dict(sorted(entries.items())))
