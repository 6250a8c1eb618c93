"""GKE GPU nodes without GPU Feature Discovery (GKE installs the drivers, its default) read by their
``cloud.google.com/gke-*`` labels, as GKE's documentation shows them: "About GPUs in GKE" (the
``gke-accelerator`` GPU types), "Time-sharing GPUs on GKE" (``gke-gpu-sharing-strategy`` and
``gke-max-shared-clients-per-gpu``, e.g. ``"3"``), "Running multi-instance GPUs"
(``gke-gpu-partition-size``, e.g. ``1g.5gb``: each partition one ``nvidia.com/gpu``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.api.loader import load
from gpuq.core.nodes import GPUSharing, SharingMode

GKE = {
    "cloud.google.com/gke-gpu": "true",
    "cloud.google.com/gke-gpu-driver-version": "default",
    "cloud.google.com/gke-os-distribution": "cos",
}


def node(machine: str, labels: dict[str, str], gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"gke-c-pool-{machine}-3f1a2b4c-x7k2",
            "labels": {**GKE, "node.kubernetes.io/instance-type": machine, **labels},
        },
        "status": {
            "allocatable": {"cpu": "11", "memory": "80Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}
        },
    }


CASES = [
    (
        "an H100 node with GKE-managed drivers",
        node("a3-highgpu-8g", {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}, 8),
        ("H100-80GB", 8, GPUSharing()),
    ),
    (
        "an A3 Mega node",
        node("a3-megagpu-8g", {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}, 8),
        ("H100-80GB", 8, GPUSharing()),
    ),
    (
        "an A100 40GB node (GKE calls it nvidia-tesla-a100)",
        node("a2-highgpu-2g", {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}, 2),
        ("A100-40GB", 2, GPUSharing()),
    ),
    (
        "an A100 80GB node",
        node("a2-ultragpu-8g", {"cloud.google.com/gke-accelerator": "nvidia-a100-80gb"}, 8),
        ("A100-80GB", 8, GPUSharing()),
    ),
    (
        "an A100 split into seven 1g.5gb partitions",
        node(
            "a2-highgpu-1g",
            {
                "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
                "cloud.google.com/gke-gpu-partition-size": "1g.5gb",
            },
            7,
        ),
        ("A100-40GB", 1, GPUSharing(SharingMode.MIG_SINGLE, (("all-1g.5gb",),))),
    ),
    (
        "an L4 time-shared by three clients",
        node(
            "g2-standard-8",
            {
                "cloud.google.com/gke-accelerator": "nvidia-l4",
                "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
                "cloud.google.com/gke-max-shared-clients-per-gpu": "3",
            },
            3,
        ),
        ("L4", 1, GPUSharing(SharingMode.TIME_SLICING, replicas=3)),
    ),
    (
        "two T4s shared by MPS, four clients each",
        node(
            "n1-standard-8",
            {
                "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                "cloud.google.com/gke-gpu-sharing-strategy": "mps",
                "cloud.google.com/gke-max-shared-clients-per-gpu": "4",
            },
            8,
        ),
        ("T4", 2, GPUSharing(SharingMode.TIME_SLICING, replicas=4)),
    ),
    (
        "GPU Feature Discovery's labels win over GKE's",
        node(
            "a2-ultragpu-1g",
            {
                "cloud.google.com/gke-accelerator": "nvidia-a100-80gb",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                "nvidia.com/gpu.count": "1",
            },
            1,
        ),
        ("A100-40GB", 1, GPUSharing()),
    ),
    (
        "a GKE accelerator the catalogue lacks leaves the model unknown",
        node("n1-standard-4", {"cloud.google.com/gke-accelerator": "nvidia-tesla-p4"}, 1),
        (None, 1, GPUSharing()),
    ),
]


@pytest.mark.parametrize(("case", "manifest", "expected"), CASES, ids=[c[0] for c in CASES])
def test_gke_labels_give_the_gpus(
    tmp_path: Path, case: str, manifest: dict[str, Any], expected: tuple[str | None, int, GPUSharing]
) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = load([str(path)])
    assert result.errors == ()
    (loaded,) = result.nodes
    assert (loaded.gpu_model, loaded.gpu_count, loaded.sharing) == expected
    unknown = [d for d in result.warnings if "unknown GKE accelerator 'nvidia-tesla-p4'" in d.message]
    assert bool(unknown) == (expected[0] is None)
