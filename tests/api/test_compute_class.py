"""ComputeClass and provisioning manifests: GKE specs load unchanged, bad manifests name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuq.api.compute_class import ComputeClass, read_compute_class, to_policy
from gpuq.api.loader import LoadResult, load
from gpuq.api.nodes_convert import pool_specs
from gpuq.api.provisioning_prices import catalogue_with

GKE_SPEC = """
spec:
  priorities:
  - machineFamily: a3
    gpu: {type: nvidia-h100-80gb, count: 8}
    spot: true
    location: {zones: [us-central1-a]}
  - reservations:
      affinity: Specific
      specific: [{name: h100-res, project: my-project}]
  - flexStart: {enabled: true}
    machineType: a3-highgpu-8g
  whenUnsatisfiable: ScaleUpAnyway
  activeMigration: {optimizeRulePriority: true}
  nodePoolAutoCreation: {enabled: true}
"""
POOL = """
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {name: h100}
spec:
  machineType: a3-highgpu-8g
  cpu: 208
  memory: 1872Gi
  gpu: {model: H100-80GB, count: 8}
  zone: us-central1-a
  capacityType: spot
"""


def write(tmp_path: Path, text: str) -> LoadResult:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return load([str(path)])


def compute_class(spec: str, name: str = "training") -> str:
    return f"apiVersion: gpuq.dev/v1alpha1\nkind: ComputeClass\nmetadata: {{name: {name}}}\n{spec}"


@pytest.mark.parametrize("api_version", ["gpuq.dev/v1alpha1", "cloud.google.com/v1"])
def test_a_gke_spec_reads_unchanged_under_either_api_version(api_version: str) -> None:
    import yaml

    data = {
        "apiVersion": api_version,
        "kind": "ComputeClass",
        "metadata": {"name": "c"},
        **yaml.safe_load(GKE_SPEC),
    }
    policy = to_policy(read_compute_class(data))
    assert [r.describe() for r in policy.rules] == [
        "machineFamily=a3 gpu=8xnvidia-h100-80gb spot=True zones=us-central1-a",
        "reservations=Specific",
        "machineType=a3-highgpu-8g flexStart=True",
    ]
    assert (policy.when_unsatisfiable, policy.optimize_rule_priority) == ("ScaleUpAnyway", True)


def test_the_loader_reads_a_gpuq_compute_class_without_findings(tmp_path: Path) -> None:
    result = write(tmp_path, compute_class(GKE_SPEC) + "\n---\n" + POOL + "  max: 2\n")
    assert result.diagnostics == ()
    assert [type(m.model) for m in result.manifests].count(ComputeClass) == 1


def rules(*scores: object) -> str:
    lines = ["spec:", "  priorities:"]
    for score in scores:
        lines.append("  - machineFamily: a3")
        if score is not None:
            lines.append(f"    priorityScore: {score}")
    return "\n".join(lines) + "\n"


BAD = [
    (
        "priorityScore on some rules only",
        rules(10, None),
        "spec.priorities[1].priorityScore",
        "set it on every rule or none",
    ),
    ("priorityScore of 0", rules(0), "spec.priorities[0].priorityScore", "from 1 to 1000"),
    ("priorityScore above 1000", rules(1001), "spec.priorities[0].priorityScore", "from 1 to 1000"),
    ("four rules sharing a score", rules(5, 5, 5, 5), "spec.priorities[3].priorityScore", "at most 3 may"),
    ("no rules and no strategy", "spec:\n  priorities: []\n", "spec.priorities", "at least one rule"),
    (
        "a bad whenUnsatisfiable",
        "spec:\n  priorities: [{machineFamily: a3}]\n  whenUnsatisfiable: Maybe\n",
        "spec.whenUnsatisfiable",
        "ScaleUpAnyway",
    ),
    (
        "Specific reservations without names",
        "spec:\n  priorities: [{reservations: {affinity: Specific}}]\n",
        "spec.priorities[0].reservations.specific",
        "reservation name",
    ),
    (
        "a GPU count of 0",
        "spec:\n  priorities: [{gpu: {type: nvidia-l4, count: 0}}]\n",
        "spec.priorities[0].gpu.count",
        "at least 1",
    ),
]


@pytest.mark.parametrize(("name", "spec", "field", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_compute_classes(tmp_path: Path, name: str, spec: str, field: str, message: str) -> None:
    result = write(tmp_path, compute_class(spec))
    assert result.config is None
    found = [
        d for d in result.errors if d.kind == "ComputeClass" and d.field == field and message in d.message
    ]
    assert found, "\n".join(map(str, result.diagnostics))
    assert found[0].path.endswith("c.yaml") and found[0].name == "training"


def test_unknown_fields_are_reported(tmp_path: Path) -> None:
    result = write(tmp_path, compute_class("spec:\n  priorities: [{machineFamily: a3, sopt: true}]\n"))
    assert [(d.field, d.message) for d in result.warnings] == [("spec.priorities[0].sopt", "unknown field")]


def test_a_strategy_alone_is_a_valid_class(tmp_path: Path) -> None:
    assert write(tmp_path, compute_class("spec:\n  strategy: obtainability\n")).errors == ()


FLAVOR = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: h100}
spec:
  nodeLabels: {cloud.google.com/compute-class: nosuch}
"""


def test_a_flavor_selecting_an_unknown_class_is_an_error(tmp_path: Path) -> None:
    result = write(tmp_path, compute_class("spec:\n  strategy: cost\n") + "\n---\n" + FLAVOR)
    errors = [str(d) for d in result.errors]
    assert any("ResourceFlavor/h100" in e and "unknown ComputeClass 'nosuch'" in e for e in errors), errors


def test_a_built_in_gke_class_is_not_unknown(tmp_path: Path) -> None:
    assert write(tmp_path, FLAVOR.replace("nosuch", "Performance")).errors == ()


POOL_FIELDS = """
  autoscaling: {min: 0, max: 4}
  zones: [us-central1-b]
  limits: {nvidia.com/gpu: 16}
  provisioning: {boot: 90s, driverInstall: 2m, imagePull: 3m, modelWarmup: 60s}
  scaleDown: {enabled: true, idleAfter: 15m}
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 10m
    budgets: [{nodes: "20%"}]
  stock:
  - {available: 2}
  - {zone: us-central1-b, available: 0, from: 2h}
"""


def test_node_pool_autoscaling_fields_load_and_convert(tmp_path: Path) -> None:
    result = write(tmp_path, POOL + POOL_FIELDS)
    assert result.errors == (), result.diagnostics
    (spec,), steps = pool_specs(result.manifests)
    assert (spec.min_nodes, spec.max_nodes, spec.limits, spec.provisioning_delay_s, spec.idle_after_s) == (
        0, 4, {"nvidia.com/gpu": 16}, 450.0, 900.0,
    )  # fmt: skip
    assert spec.disruption.consolidation_policy == "WhenEmpty"
    assert [(s.zone, s.capacity_type, s.available, s.from_s) for s in steps] == [
        ("us-central1-a", "spot", 2, 0.0),
        ("us-central1-b", "spot", 0, 7200.0),
    ]
    assert [n.name for n in result.nodes] == []  # scale to zero: no nodes at the start


BAD_POOLS = [
    ("min above max", "  autoscaling: {min: 5, max: 2}\n", "spec.autoscaling.min", "greater than max"),
    (
        "min written twice",
        "  min: 1\n  max: 3\n  autoscaling: {min: 1}\n",
        "spec.autoscaling.min",
        "not both",
    ),
    (
        "a negative delay",
        "  max: 2\n  provisioning: {boot: -5}\n",
        "spec.provisioning.boot",
        "greater than or equal to 0",
    ),
    (
        "a bad limit quantity",
        "  max: 2\n  limits: {nvidia.com/gpu: lots}\n",
        "spec.limits[nvidia.com/gpu]",
        "not a quantity",
    ),
    (
        "a stock zone the pool does not have",
        "  max: 2\n  stock: [{zone: eu-west4-a, available: 1}]\n",
        "spec.stock[0].zone",
        "unknown zone",
    ),
    (
        "negative stock",
        "  max: 2\n  stock: [{available: -1}]\n",
        "spec.stock[0].available",
        "greater than or equal to 0",
    ),
    (
        "a bad budget",
        "  max: 2\n  disruption: {budgets: [{nodes: lots}]}\n",
        "spec.disruption.budgets[0].nodes",
        "percentage",
    ),
]


@pytest.mark.parametrize(("name", "extra", "field", "message"), BAD_POOLS, ids=[b[0] for b in BAD_POOLS])
def test_bad_node_pools(tmp_path: Path, name: str, extra: str, field: str, message: str) -> None:
    result = write(tmp_path, POOL + extra)
    found = [d for d in result.errors if d.field == field and message in d.message]
    assert found, "\n".join(map(str, result.diagnostics))


def test_a_price_catalogue_overrides_the_bundled_figures(tmp_path: Path) -> None:
    text = (
        "apiVersion: gpuq.dev/v1alpha1\nkind: PriceCatalogue\nmetadata: {name: negotiated}\nspec:\n"
        "  prices:\n  - {machineType: a3-highgpu-8g, spot: 20.5, source: contract 2025}\n"
    )
    result = write(tmp_path, text)
    assert result.errors == ()
    catalogue = catalogue_with(result.manifests)
    assert (catalogue.price("a3-highgpu-8g", "spot"), catalogue.price("a3-highgpu-8g", "on-demand")) == (
        20.5,
        88.49,
    )
