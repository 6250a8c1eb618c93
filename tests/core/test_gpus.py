"""The GPU model catalogue: built-in facts, user extension and lookup by name, alias or product."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuq.core.gpus import BUILTIN_MODELS, DEFAULT_CATALOGUE, GPUCatalogue, GPUModelSpec
from gpuq.core.mig import MIG_TABLES

# name -> (GFD product, memory MiB, compute capability, family, MIG table)
EXPECTED_BUILTINS = {
    "T4": ("Tesla-T4", 15360, (7, 5), "turing", None),
    "L4": ("NVIDIA-L4", 23034, (8, 9), "ada-lovelace", None),
    "A10G": ("NVIDIA-A10G", 23028, (8, 6), "ampere", None),
    "A10": ("NVIDIA-A10", 23028, (8, 6), "ampere", None),
    "L40S": ("NVIDIA-L40S", 46068, (8, 9), "ada-lovelace", None),
    "A100-40GB": ("NVIDIA-A100-SXM4-40GB", 40960, (8, 0), "ampere", "A100-40GB"),
    "A100-80GB": ("NVIDIA-A100-SXM4-80GB", 81920, (8, 0), "ampere", "A100-80GB"),
    "H100-80GB": ("NVIDIA-H100-80GB-HBM3", 81559, (9, 0), "hopper", "H100-80GB"),
    "H200": ("NVIDIA-H200", 143771, (9, 0), "hopper", "H200"),
    "B200": ("NVIDIA-B200", 183359, (10, 0), "blackwell", "B200"),
    "V100-16GB": ("Tesla-V100-SXM2-16GB", 16384, (7, 0), "volta", None),
    "V100-32GB": ("Tesla-V100-SXM2-32GB", 32768, (7, 0), "volta", None),
    "P100": ("Tesla-P100-PCIE-16GB", 16384, (6, 0), "pascal", None),
}


@pytest.mark.parametrize("name", sorted(EXPECTED_BUILTINS), ids=lambda name: f"built-in {name}")
def test_builtin_model_facts(name: str) -> None:
    spec = BUILTIN_MODELS[name]
    product, memory_mib, (major, minor), family, mig_table = EXPECTED_BUILTINS[name]
    assert spec == GPUModelSpec(
        name, product, memory_mib, major, minor, family, mig_table, spec.hourly_price_usd, spec.aliases
    )


def test_builtin_models_are_exactly_the_expected_ones() -> None:
    assert sorted(BUILTIN_MODELS) == sorted(EXPECTED_BUILTINS)


@pytest.mark.parametrize("name", sorted(BUILTIN_MODELS), ids=lambda name: f"{name} names a real MIG table")
def test_every_mig_table_reference_exists(name: str) -> None:
    table = BUILTIN_MODELS[name].mig_table
    assert table is None or table in MIG_TABLES


L40S_CHEAP = replace(BUILTIN_MODELS["L40S"], hourly_price_usd=1.25)
RTX6000 = GPUModelSpec(
    "RTX-PRO-6000",
    "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
    97887,
    12,
    0,
    "blackwell",
    None,
    aliases=("RTX6000",),
)
H100_BARE = GPUModelSpec("H100-80GB", "NVIDIA-H100-80GB-HBM3", 81559, 9, 0, "hopper", "H100-80GB")
# A user model whose product is a built-in alias, and whose alias is a built-in product.
A100_PCIE = GPUModelSpec(
    "A100-80GB-PCIE", "NVIDIA-A100-80GB-PCIe", 81920, 8, 0, "ampere", "A100-80GB", aliases=("NVIDIA-L4",)
)


@pytest.mark.parametrize(
    ("extra", "key", "expected"),
    [
        pytest.param((), "H100-80GB", BUILTIN_MODELS["H100-80GB"], id="by catalogue name"),
        pytest.param((), "h100-80gb", BUILTIN_MODELS["H100-80GB"], id="name lookup ignores case"),
        pytest.param((), "NVIDIA-H100-80GB-HBM3", BUILTIN_MODELS["H100-80GB"], id="by GFD product"),
        pytest.param(
            (), "nvidia-h100-80gb-hbm3", BUILTIN_MODELS["H100-80GB"], id="product lookup ignores case"
        ),
        pytest.param((), "v100m32", BUILTIN_MODELS["V100-32GB"], id="by openb trace alias"),
        pytest.param((), "NVIDIA-A100-PCIE-40GB", BUILTIN_MODELS["A100-40GB"], id="by PCIe variant alias"),
        pytest.param((), "MI300X", None, id="unknown model is None"),
        pytest.param((RTX6000,), "rtx6000", RTX6000, id="user model found by alias"),
        pytest.param((RTX6000,), RTX6000.product, RTX6000, id="user model found by product"),
        pytest.param((L40S_CHEAP,), "L40S", L40S_CHEAP, id="user model replaces the built-in of that name"),
        pytest.param((H100_BARE,), "H100", None, id="a replaced model's built-in aliases are gone"),
        pytest.param((A100_PCIE,), "NVIDIA-A100-80GB-PCIe", A100_PCIE, id="a product beats an alias"),
        pytest.param((A100_PCIE,), "NVIDIA-L4", BUILTIN_MODELS["L4"], id="an alias never shadows a product"),
        pytest.param((A100_PCIE,), "A100-80GB", BUILTIN_MODELS["A100-80GB"], id="a name beats everything"),
    ],
)
def test_lookup(extra: tuple[GPUModelSpec, ...], key: str, expected: GPUModelSpec | None) -> None:
    catalogue = GPUCatalogue(extra)
    assert catalogue.get(key) == expected
    assert (key in catalogue) == (expected is not None)


def test_alias_collisions_do_not_depend_on_the_order_models_were_given() -> None:
    first = GPUModelSpec("X-1", "X-ONE", 1024, 8, 0, "ampere", None, aliases=("X",))
    second = GPUModelSpec("X-2", "X-TWO", 2048, 8, 0, "ampere", None, aliases=("X",))
    assert GPUCatalogue([first, second]).get("x") == GPUCatalogue([second, first]).get("x") == second


def test_names_are_sorted_and_include_user_models() -> None:
    catalogue = GPUCatalogue([RTX6000, L40S_CHEAP])
    assert catalogue.names() == tuple(sorted({*BUILTIN_MODELS, RTX6000.name}))
    assert len(catalogue) == len(BUILTIN_MODELS) + 1


def test_default_catalogue_holds_the_builtins() -> None:
    assert DEFAULT_CATALOGUE.names() == tuple(sorted(BUILTIN_MODELS))
    assert 42 not in DEFAULT_CATALOGUE
