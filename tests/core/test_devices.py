"""How the device plugin and GPU Feature Discovery present a node's GPUs under each sharing mode."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuq.core.devices import device_resources, gfd_labels, per_gpu_layouts, sharing_problems
from gpuq.core.gpus import BUILTIN_MODELS, GPUModelSpec
from gpuq.core.nodes import GPU, GPU_MEMORY, GPU_MILLI, GPU_SHARED, GPUSharing, SharingMode

T4 = BUILTIN_MODELS["T4"]
L4 = BUILTIN_MODELS["L4"]
A10G = BUILTIN_MODELS["A10G"]
A100 = BUILTIN_MODELS["A100-80GB"]
H100 = BUILTIN_MODELS["H100-80GB"]
NO_MEMORY = replace(T4, name="mystery", memory_mib=0)

EXCLUSIVE = GPUSharing()
BALANCED = GPUSharing(SharingMode.MIG_MIXED, (("all-balanced",),))


def mixed(*layouts: tuple[str, ...]) -> GPUSharing:
    return GPUSharing(SharingMode.MIG_MIXED, layouts)


def single(*layouts: tuple[str, ...]) -> GPUSharing:
    return GPUSharing(SharingMode.MIG_SINGLE, layouts)


def sliced(replicas: int, rename: bool = False) -> GPUSharing:
    return GPUSharing(SharingMode.TIME_SLICING, replicas=replicas, rename_by_default=rename)


FRACTIONAL = GPUSharing(SharingMode.FRACTIONAL)


@pytest.mark.parametrize(
    ("spec", "gpu_count", "sharing", "expected"),
    [
        pytest.param(H100, 8, EXCLUSIVE, {GPU: 8}, id="exclusive GPUs are whole nvidia.com/gpu"),
        pytest.param(None, 2, EXCLUSIVE, {GPU: 2}, id="an unknown model still has whole GPUs"),
        pytest.param(H100, 0, EXCLUSIVE, {}, id="no GPUs, no device resources"),
        pytest.param(H100, 0, BALANCED, {}, id="no GPUs under MIG either"),
        pytest.param(
            A100,
            8,
            BALANCED,
            {"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-3g.40gb": 8},
            id="mixed MIG sums each profile over GPUs",
        ),
        pytest.param(
            A100,
            3,
            mixed(("3g.40gb", "3g.40gb"), (), ("4g.40gb", "2g.20gb", "1g.10gb")),
            {
                GPU: 1,
                "nvidia.com/mig-1g.10gb": 1,
                "nvidia.com/mig-2g.20gb": 1,
                "nvidia.com/mig-3g.40gb": 2,
                "nvidia.com/mig-4g.40gb": 1,
            },
            id="mixed MIG leaves a GPU with an empty layout whole",
        ),
        pytest.param(A100, 8, single(("all-1g.10gb",)), {GPU: 56}, id="single MIG counts instances as GPUs"),
        pytest.param(H100, 4, single(("3g.40gb", "3g.40gb")), {GPU: 8}, id="one layout applies to every GPU"),
        pytest.param(T4, 2, BALANCED, {GPU: 2}, id="MIG on a model without MIG leaves GPUs whole"),
        pytest.param(T4, 4, sliced(4), {GPU: 16}, id="time-slicing multiplies nvidia.com/gpu"),
        pytest.param(T4, 4, sliced(4, rename=True), {GPU_SHARED: 16}, id="renamed replicas are gpu.shared"),
        pytest.param(T4, 4, sliced(0), {GPU: 4}, id="replicas below 1 count as 1"),
        pytest.param(
            L4,
            4,
            FRACTIONAL,
            {GPU: 4, GPU_MILLI: 4000, GPU_MEMORY: 4 * 23034},
            id="fractional adds milli-GPUs and memory",
        ),
        pytest.param(None, 2, FRACTIONAL, {GPU: 2, GPU_MILLI: 2000}, id="fractional without a known memory"),
    ],
)
def test_device_resources(
    spec: GPUModelSpec | None, gpu_count: int, sharing: GPUSharing, expected: dict[str, int]
) -> None:
    assert device_resources(spec, gpu_count, sharing) == expected


@pytest.mark.parametrize(
    ("spec", "gpu_count", "sharing", "expected"),
    [
        pytest.param(A100, 2, EXCLUSIVE, ((), ()), id="outside MIG every GPU is whole"),
        pytest.param(
            A100,
            2,
            mixed(("all-3g.40gb",)),
            (("3g.40gb", "3g.40gb"),) * 2,
            id="one named layout for every GPU",
        ),
        pytest.param(
            A100,
            3,
            mixed(("7g.80gb",), ("1g.10gb", "1g.10gb")),
            (("7g.80gb",), ("1g.10gb", "1g.10gb"), ()),
            id="a short list leaves the remaining GPUs whole",
        ),
        pytest.param(A100, 1, mixed(("7g.80gb",), ("4g.40gb",)), (("7g.80gb",),), id="a long list is cut"),
        pytest.param(A100, 1, mixed(("all-9g",)), (("all-9g",),), id="an unresolvable layout stays as given"),
    ],
)
def test_per_gpu_layouts(
    spec: GPUModelSpec, gpu_count: int, sharing: GPUSharing, expected: tuple[tuple[str, ...], ...]
) -> None:
    assert per_gpu_layouts(spec, gpu_count, sharing) == expected


@pytest.mark.parametrize(
    ("spec", "gpu_count", "sharing", "expected"),
    [
        pytest.param(H100, 8, EXCLUSIVE, [], id="exclusive is fine"),
        pytest.param(A100, 8, BALANCED, [], id="balanced MIG on every GPU is fine"),
        pytest.param(T4, 4, sliced(4, rename=True), [], id="renamed time-slicing is fine"),
        pytest.param(L4, 2, FRACTIONAL, [], id="fractional on a known model is fine"),
        pytest.param(
            T4,
            1,
            BALANCED,
            ["T4 cannot be MIG-partitioned (no MIG table), but the mode is mig-mixed"],
            id="MIG on a model without a MIG table",
        ),
        pytest.param(
            None,
            1,
            single(("1g.10gb",)),
            ["an unknown GPU model cannot be MIG-partitioned (no MIG table), but the mode is mig-single"],
            id="MIG on an unknown model",
        ),
        pytest.param(
            A100,
            8,
            mixed(("7g.80gb",), ("7g.80gb",), ("7g.80gb",)),
            ["mig_layout has 3 layouts for 8 GPUs; give one per GPU or one for every GPU"],
            id="layout count differs from GPU count",
        ),
        pytest.param(
            A100,
            8,
            GPUSharing(SharingMode.MIG_MIXED),
            ["mig_layout has 0 layouts for 8 GPUs; give one per GPU or one for every GPU"],
            id="MIG mode without any layout",
        ),
        pytest.param(
            A100,
            2,
            mixed(("3g.40gb", "3g.40gb"), ("4g.40gb", "3g.40gb", "2g.20gb")),
            [
                "GPU 1: uses 9 compute slices, the GPU has 7",
                "GPU 1: uses 10 memory slices, the GPU has 8",
                "GPU 1: 2g.20gb (2 memory slices, can only start at slice 0, 2 or 4) collides with "
                "4g.40gb (memory slices 0-3) and 3g.40gb (memory slices 4-7)",
            ],
            id="one GPU's layout does not fit",
        ),
        pytest.param(
            A100,
            8,
            mixed(("4g.40gb", "4g.40gb")),
            [
                "GPU 0-7: 2 × 4g.40gb requested, at most 1 fits on one A100-80GB",
                "GPU 0-7: uses 8 compute slices, the GPU has 7",
                "GPU 0-7: 4g.40gb (4 memory slices, can only start at slice 0) collides with "
                "4g.40gb (memory slices 0-3); memory slices 4-7 free but no 4g.40gb fits there",
            ],
            id="a shared layout is reported once for all GPUs",
        ),
        pytest.param(
            H100,
            1,
            mixed(("3g.40gb", "2g.35gb")),
            [
                "GPU 0: unknown MIG profile '2g.35gb' for H100-80GB; "
                "valid: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"
            ],
            id="a profile the model does not have",
        ),
        pytest.param(
            A100,
            2,
            single(("1g.10gb", "1g.10gb"), ("2g.20gb", "1g.10gb")),
            ["MIG single needs the same single profile on every GPU, the layout mixes 1g.10gb, 2g.20gb"],
            id="MIG single with two profiles",
        ),
        pytest.param(
            A100,
            2,
            single(("all-3g.40gb",), ()),
            ["GPU 1: MIG single needs every GPU partitioned, this layout is empty"],
            id="MIG single with an unpartitioned GPU",
        ),
        pytest.param(H100, 8, sliced(0), ["replicas is 0, it must be at least 1"], id="replicas below 1"),
        pytest.param(
            H100,
            8,
            GPUSharing(replicas=4),
            ["replicas=4 needs time-slicing, the mode is exclusive"],
            id="replicas without time-slicing",
        ),
        pytest.param(
            T4,
            1,
            sliced(1),
            ["time-slicing needs replicas of at least 2 (the device plugin rejects fewer)"],
            id="time-slicing with one replica",
        ),
        pytest.param(
            T4,
            1,
            GPUSharing(SharingMode.FRACTIONAL, rename_by_default=True),
            ["rename_by_default only applies to time-slicing, the mode is fractional"],
            id="rename without time-slicing",
        ),
        pytest.param(
            None,
            1,
            FRACTIONAL,
            ["fractional sharing needs the GPU model's memory, and the model gives none"],
            id="fractional on an unknown model",
        ),
        pytest.param(
            NO_MEMORY,
            1,
            FRACTIONAL,
            ["fractional sharing needs the GPU model's memory, and the model gives none"],
            id="fractional on a model without memory",
        ),
        pytest.param(
            A100,
            1,
            GPUSharing(mig_layout=(("7g.80gb",),)),
            ["mig_layout is set but the mode is exclusive; MIG layouts need mig-single or mig-mixed"],
            id="a MIG layout outside the MIG modes",
        ),
        pytest.param(
            H100, -1, EXCLUSIVE, ["gpu_count is -1, it cannot be negative"], id="negative GPU count"
        ),
    ],
)
def test_sharing_problems(
    spec: GPUModelSpec | None, gpu_count: int, sharing: GPUSharing, expected: list[str]
) -> None:
    assert sharing_problems(spec, gpu_count, sharing) == expected


def gfd(spec: GPUModelSpec, count: int, **overrides: str) -> dict[str, str]:
    """GFD's labels for ``count`` whole, unshared GPUs, with ``overrides`` (``_`` for ``.``/``-``)."""
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": spec.product,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.memory": str(spec.memory_mib),
        "nvidia.com/gpu.family": spec.family,
        "nvidia.com/gpu.compute.major": str(spec.compute_major),
        "nvidia.com/gpu.compute.minor": str(spec.compute_minor),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true" if spec.mig_table else "false",
        "nvidia.com/mps.capable": "false",
    }
    return labels | overrides


def mig_type(spec: GPUModelSpec, profile: str, count: int, memory_mib: int, slices: int) -> dict[str, str]:
    prefix = f"nvidia.com/mig-{profile}."
    return {
        prefix + "product": f"{spec.product}-MIG-{profile}",
        prefix + "count": str(count),
        prefix + "replicas": "1",
        prefix + "sharing-strategy": "none",
        prefix + "memory": str(memory_mib),
        prefix + "slices.gi": str(slices),
        prefix + "slices.ci": str(slices),
    }


@pytest.mark.parametrize(
    ("spec", "gpu_count", "sharing", "expected"),
    [
        pytest.param(
            T4,
            1,
            EXCLUSIVE,
            {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": "Tesla-T4",
                "nvidia.com/gpu.count": "1",
                "nvidia.com/gpu.memory": "15360",
                "nvidia.com/gpu.family": "turing",
                "nvidia.com/gpu.compute.major": "7",
                "nvidia.com/gpu.compute.minor": "5",
                "nvidia.com/gpu.replicas": "1",
                "nvidia.com/gpu.sharing-strategy": "none",
                "nvidia.com/mig.capable": "false",
                "nvidia.com/mps.capable": "false",
            },
            id="exclusive T4, spelled out",
        ),
        pytest.param(H100, 8, EXCLUSIVE, gfd(H100, 8), id="exclusive H100 is MIG-capable"),
        pytest.param(
            H100,
            8,
            single(("all-1g.10gb",)),
            gfd(H100, 56)
            | {
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
                "nvidia.com/gpu.memory": "10240",
                "nvidia.com/gpu.slices.gi": "1",
                "nvidia.com/gpu.slices.ci": "1",
                "nvidia.com/mig.strategy": "single",
            },
            id="MIG single overloads gpu.product, count and memory",
        ),
        pytest.param(
            A100,
            2,
            single(("1g.10gb",), ("2g.20gb",)),
            gfd(A100, 2)
            | {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-INVALID",
                "nvidia.com/gpu.count": "0",
                "nvidia.com/gpu.memory": "0",
                "nvidia.com/gpu.replicas": "0",
                "nvidia.com/mig.strategy": "single",
            },
            id="MIG single with mixed profiles is labelled invalid",
        ),
        pytest.param(
            A100,
            2,
            single((), ()),
            gfd(A100, 2) | {"nvidia.com/mig.strategy": "single"},
            id="MIG single without partitioned GPUs labels whole GPUs",
        ),
        pytest.param(
            A100,
            2,
            mixed(("3g.40gb", "3g.40gb"), ("4g.40gb", "2g.20gb", "1g.10gb")),
            gfd(A100, 2)
            | {"nvidia.com/gpu.replicas": "0", "nvidia.com/mig.strategy": "mixed"}
            | mig_type(A100, "1g.10gb", 1, 10240, 1)
            | mig_type(A100, "2g.20gb", 1, 20480, 2)
            | mig_type(A100, "3g.40gb", 2, 40960, 3)
            | mig_type(A100, "4g.40gb", 1, 40960, 4),
            id="MIG mixed labels each device type; fully partitioned GPUs report 0 replicas",
        ),
        pytest.param(
            A100,
            2,
            mixed(("7g.80gb",), ()),
            gfd(A100, 2) | {"nvidia.com/mig.strategy": "mixed"} | mig_type(A100, "7g.80gb", 1, 81920, 7),
            id="MIG mixed with a whole GPU keeps gpu.replicas 1",
        ),
        pytest.param(
            T4,
            1,
            BALANCED,
            gfd(T4, 1) | {"nvidia.com/mig.strategy": "mixed"},
            id="a MIG strategy on a model without MIG only adds mig.strategy",
        ),
        pytest.param(
            A10G,
            1,
            sliced(2),
            gfd(A10G, 1)
            | {
                "nvidia.com/gpu.product": "NVIDIA-A10G-SHARED",
                "nvidia.com/gpu.replicas": "2",
                "nvidia.com/gpu.sharing-strategy": "time-slicing",
            },
            id="time-slicing without renaming marks the product SHARED",
        ),
        pytest.param(
            A10G,
            1,
            sliced(2, rename=True),
            gfd(A10G, 1)
            | {"nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.sharing-strategy": "time-slicing"},
            id="renamed time-slicing keeps the product, the resource name tells",
        ),
        pytest.param(L4, 4, FRACTIONAL, gfd(L4, 4), id="fractional sharing is invisible to GFD"),
        pytest.param(
            NO_MEMORY,
            1,
            EXCLUSIVE,
            {k: v for k, v in gfd(NO_MEMORY, 1).items() if k != "nvidia.com/gpu.memory"},
            id="no memory label when the memory is unknown",
        ),
        pytest.param(H100, 0, EXCLUSIVE, {}, id="no GPUs, no labels"),
        pytest.param(None, 4, EXCLUSIVE, {}, id="unknown model, no labels"),
    ],
)
def test_gfd_labels(
    spec: GPUModelSpec | None, gpu_count: int, sharing: GPUSharing, expected: dict[str, str]
) -> None:
    labels = gfd_labels(spec, gpu_count, sharing)
    assert labels == expected
    assert list(labels) == sorted(labels)
