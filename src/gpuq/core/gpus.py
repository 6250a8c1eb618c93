"""The GPU model catalogue: what each accelerator model is, as the cluster sees it.

A node names its GPU model once (``Node.gpu_model``); everything else the core
needs about that model (the ``nvidia.com/gpu.product`` string GPU Feature
Discovery writes, memory, compute capability, whether it can be MIG-partitioned)
is looked up here, so node descriptions, trace converters and label generation
agree on one set of facts.

Product strings are NVML device names with spaces turned into dashes, which is
what GFD puts in ``nvidia.com/gpu.product`` (the SXM variant where a model has
several; PCIe variants are aliases). Memory is NVML's total in MiB, as GFD
writes it in ``nvidia.com/gpu.memory``. Families follow GFD's mapping from
compute capability (7.0 volta, 7.5 turing, 8.0-8.6 ampere, 8.9 ada-lovelace,
9.0 hopper, 10.x blackwell).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class GPUModelSpec:
    """One GPU model.

    ``name`` is the catalogue key; ``product`` the GFD ``nvidia.com/gpu.product``
    value; ``memory_mib`` memory per GPU in MiB; ``mig_table`` a key into
    ``gpuq.core.mig.MIG_TABLES`` (None: the model cannot be MIG-partitioned);
    ``hourly_price_usd`` an indicative on-demand price per GPU-hour, None where
    we do not claim one.
    """

    name: str
    product: str
    memory_mib: int
    compute_major: int
    compute_minor: int
    family: str
    mig_table: str | None
    hourly_price_usd: float | None = None
    aliases: tuple[str, ...] = ()


_Row = tuple[str, str, int, tuple[int, int], str, str | None]

# Prices stay None on purpose: list prices move often and differ per cloud; users who
# want cost figures supply their own models via ``GPUCatalogue(extra=...)``.
_BUILTIN_ROWS: tuple[_Row, ...] = (
    # name, GFD product, memory MiB, compute capability, family, MIG table
    ("P100", "Tesla-P100-PCIE-16GB", 16384, (6, 0), "pascal", None),
    ("V100-16GB", "Tesla-V100-SXM2-16GB", 16384, (7, 0), "volta", None),
    ("V100-32GB", "Tesla-V100-SXM2-32GB", 32768, (7, 0), "volta", None),
    ("T4", "Tesla-T4", 15360, (7, 5), "turing", None),
    ("A10", "NVIDIA-A10", 23028, (8, 6), "ampere", None),
    ("A10G", "NVIDIA-A10G", 23028, (8, 6), "ampere", None),
    ("L4", "NVIDIA-L4", 23034, (8, 9), "ada-lovelace", None),
    ("L40S", "NVIDIA-L40S", 46068, (8, 9), "ada-lovelace", None),
    ("A100-40GB", "NVIDIA-A100-SXM4-40GB", 40960, (8, 0), "ampere", "A100-40GB"),
    ("A100-80GB", "NVIDIA-A100-SXM4-80GB", 81920, (8, 0), "ampere", "A100-80GB"),
    ("H100-80GB", "NVIDIA-H100-80GB-HBM3", 81559, (9, 0), "hopper", "H100-80GB"),
    ("H200", "NVIDIA-H200", 143771, (9, 0), "hopper", "H200"),
    ("B200", "NVIDIA-B200", 183359, (10, 0), "blackwell", "B200"),
)

# Other names the same silicon goes by: PCIe / NVL variants' GFD products (same memory
# and MIG table) and the short names traces use (openb's "V100M16", "V100M32").
_ALIASES: Mapping[str, tuple[str, ...]] = {
    "P100": ("Tesla-P100-SXM2-16GB",),
    "V100-16GB": ("V100", "V100M16", "Tesla-V100-PCIE-16GB"),
    "V100-32GB": ("V100M32", "Tesla-V100-PCIE-32GB"),
    "A100-40GB": ("A100", "NVIDIA-A100-PCIE-40GB"),
    "A100-80GB": ("NVIDIA-A100-80GB-PCIe",),
    "H100-80GB": ("H100", "NVIDIA-H100-PCIe"),
    "H200": ("H200-141GB", "NVIDIA-H200-NVL"),
    "B200": ("B200-180GB",),
}


def _from_row(row: _Row) -> GPUModelSpec:
    name, product, memory_mib, (major, minor), family, mig_table = row
    aliases = _ALIASES.get(name, ())
    return GPUModelSpec(name, product, memory_mib, major, minor, family, mig_table, aliases=aliases)


BUILTIN_MODELS: Mapping[str, GPUModelSpec] = MappingProxyType(
    {spec.name: spec for spec in map(_from_row, _BUILTIN_ROWS)}
)
"""Catalogue name -> model, for the models gpuq knows without configuration."""


class GPUCatalogue:
    """Built-in models plus user-supplied ones, looked up by name, alias or GFD product.

    A user model whose ``name`` equals a built-in one replaces it entirely (its
    aliases and product included). Lookups are case-insensitive. When two models
    claim the same key the winner is fixed, never the order ``extra`` came in:
    a name beats a product, a product beats an alias, a user model's key beats a
    built-in one's, and remaining ties go to the later name in sorted order.
    """

    __slots__ = ("_by_key", "_models")

    def __init__(self, extra: Iterable[GPUModelSpec] = ()) -> None:
        models = dict(BUILTIN_MODELS)
        user_names: set[str] = set()
        for spec in extra:
            models[spec.name] = spec
            user_names.add(spec.name)
        self._models: Mapping[str, GPUModelSpec] = MappingProxyType(dict(sorted(models.items())))
        ranked: list[tuple[tuple[int, int, str], str, GPUModelSpec]] = []
        for spec in self._models.values():
            user = int(spec.name in user_names)
            ranked.append(((2, user, spec.name), spec.name, spec))
            ranked.append(((1, user, spec.name), spec.product, spec))
            ranked.extend(((0, user, spec.name), alias, spec) for alias in spec.aliases)
        # Ascending rank: the highest-ranked claim on a key is written last and wins.
        self._by_key = {key.lower(): spec for _, key, spec in sorted(ranked, key=lambda item: item[0])}

    def get(self, name_or_alias_or_product: str) -> GPUModelSpec | None:
        """The model known by this name, alias or product string (any case), or None."""
        return self._by_key.get(name_or_alias_or_product.lower())

    def names(self) -> tuple[str, ...]:
        """Catalogue names, sorted."""
        return tuple(self._models)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._by_key

    def __len__(self) -> int:
        return len(self._models)

    def __repr__(self) -> str:
        return f"GPUCatalogue({', '.join(self._models)})"


DEFAULT_CATALOGUE = GPUCatalogue()
"""The built-in catalogue, for callers that take no user models."""
