"""Prices: gpuq's bundled catalogue and the ``gpuq.dev/v1alpha1`` PriceCatalogue kind that overrides it.

A PriceCatalogue lists entries in the bundled file's form (``machineType``, ``onDemand``,
``spot``, ``reserved1y``, ``reserved3y``, ``calendar``, ``flexStart``, ``region``, ``source``,
``retrieved``, ``notes``); each entry replaces only the fields it gives. Several PriceCatalogues
apply in the order they were read. Reading the bundled file is the only I/O; the catalogue
itself is :class:`gpuq.core.provisioning.prices.PriceCatalogue`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import Field

from gpuq.api import kueue
from gpuq.api.diagnostics import Diagnostic, Manifest
from gpuq.api.kueue import Object, Strict
from gpuq.core.provisioning.prices import PriceCatalogue, PriceDataError, catalogue_from_data, entry_from_data

DATA_PACKAGE = "gpuq.core.provisioning.data"
DATA_FILE = "prices.yaml"


class PriceItem(Strict):
    machine_type: str
    provider: str | None = None
    region: str | None = None
    gpus: int | None = None
    on_demand: float | None = None
    spot: float | None = None
    reserved1y: float | None = None
    reserved3y: float | None = None
    calendar: float | None = None
    flex_start: float | None = None
    source: str | None = None
    retrieved: str | None = None
    notes: str | None = None
    sources: dict[str, str] | None = None


class PriceCatalogueSpec(Strict):
    prices: list[PriceItem] = Field(default_factory=list)


class PriceCatalogueObject(Object):
    spec: PriceCatalogueSpec


@cache
def default_catalogue() -> PriceCatalogue:
    """The bundled catalogue (``src/gpuq/core/provisioning/data/prices.yaml``)."""
    text = resources.files(DATA_PACKAGE).joinpath(DATA_FILE).read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    return catalogue_from_data(data.get("prices") or [], DATA_FILE)


def _item_data(item: PriceItem) -> dict[str, Any]:
    dumped: dict[str, Any] = item.model_dump(by_alias=True, exclude_none=True)
    for ours, theirs in (("reserved1Y", "reserved1y"), ("reserved3Y", "reserved3y")):
        if ours in dumped:
            dumped[theirs] = dumped.pop(ours)
    return dumped


def catalogue_with(manifests: Sequence[Manifest], base: PriceCatalogue | None = None) -> PriceCatalogue:
    """``base`` (the bundled catalogue by default) with every PriceCatalogue's entries applied in order."""
    catalogue = base if base is not None else default_catalogue()
    for manifest in manifests:
        if isinstance(manifest.model, PriceCatalogueObject):
            pairs = [entry_from_data(_item_data(item), "prices") for item in manifest.model.spec.prices]
            catalogue = catalogue.with_overrides([e for e, _ in pairs], [g for _, g in pairs])
    return catalogue


def validate_price_catalogues(manifests: Sequence[Manifest]) -> Iterator[Diagnostic]:
    """Negative prices, entries without a price, and a machine type listed twice in one catalogue."""
    for manifest in manifests:
        if not isinstance(manifest.model, PriceCatalogueObject):
            continue
        seen: dict[str, int] = {}
        for index, item in enumerate(manifest.model.spec.prices):
            at = ("spec", "prices", index)
            try:
                entry_from_data(_item_data(item), "prices")
            except PriceDataError as err:
                yield manifest.diagnostic(at, str(err).partition(": ")[2] or str(err))
            if item.machine_type in seen:
                yield manifest.diagnostic(
                    (*at, "machineType"), f"{item.machine_type!r} is also entry {seen[item.machine_type]}"
                )
            seen.setdefault(item.machine_type, index)
            if not item.source:
                yield manifest.diagnostic(
                    (*at, "source"), "say where the figures come from (a URL or 'quote')", "warning"
                )


kueue.KINDS[("gpuq.dev", "PriceCatalogue")] = PriceCatalogueObject
