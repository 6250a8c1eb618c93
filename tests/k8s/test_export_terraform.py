"""``gpuq export terraform``: the resources written for every bundled example, their key arguments,
their order, determinism, and the providers' schemas (tests/k8s/data/terraform/PROVENANCE.md)."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuq.api.loader import load
from gpuq.cli import app
from gpuq.commands.export import alert_rules
from gpuq.k8s.export import Export
from gpuq.k8s.export_common import ExportOptions
from gpuq.k8s.terraform import (
    TerraformExport,
    TerraformInvalid,
    build_terraform,
    export_for,
    literal,
    render,
)

from .test_export_clusters import example_configurations

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = Path(__file__).parent / "data" / "terraform"
NO_CLOUD = {"philly", "philly-week", "backfill", "usage-fair-share"}
"""Examples whose pools are a trace's machines (``philly-12gb-2gpu-8cpu``), of no cloud."""
META_ARGUMENTS = {"depends_on", "count", "for_each", "provider", "lifecycle"}
runner = CliRunner()


@pytest.fixture(autouse=True)
def in_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    """Examples are named as a user in the repository names them (``examples/philly``)."""
    monkeypatch.chdir(ROOT)


@functools.cache
def schema(resource: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((SCHEMAS / f"{resource}.json").read_text())
    return document["arguments"]


def schema_problems(body: dict[str, Any], arguments: dict[str, Any], path: str = "") -> list[str]:
    """Unknown, output-only and missing required arguments of one block, and blocks given too often."""
    if "opaque" in arguments:
        return []
    problems = []
    for key, value in body.items():
        where = f"{path}{key}"
        argument = arguments.get(key)
        if argument is None:
            if not (path == "" and key in META_ARGUMENTS):
                problems.append(f"{where}: unknown argument")
            continue
        if argument.get("opaque"):
            continue
        if not (argument.get("required") or argument.get("optional")):
            problems.append(f"{where}: an output, not an argument")
        if "block" in argument:
            items = value if isinstance(value, list) else [value]
            if len(items) > argument.get("max_items", len(items)):
                problems.append(f"{where}: {len(items)} blocks, at most {argument['max_items']}")
            for index, item in enumerate(items):
                if not isinstance(item, dict):
                    problems.append(f"{where}[{index}]: a block, not {type(item).__name__}")
                    continue
                problems += schema_problems(item, argument["block"], f"{where}[{index}].")
    problems += [
        f"{path}{k}: required, missing" for k, a in arguments.items() if a.get("required") and k not in body
    ]
    return problems


def build(files: tuple[str, ...]) -> tuple[Export, TerraformExport]:
    result = load(list(files))
    assert result.config is not None, [str(d) for d in result.errors]
    options = ExportOptions()
    exported = export_for(result, options, alert_rules())
    return exported, build_terraform(result, exported, options)


def resources(written: TerraformExport, resource: str) -> dict[str, Any]:
    documents = [doc for doc in written.documents.values() if resource in doc.get("resource", {})]
    return {name: body for doc in documents for name, body in doc["resource"][resource].items()}


EXAMPLES = [(name, files) for name, files in example_configurations() if name.split("/")[0] not in NO_CLOUD]


@functools.cache
def built(name: str) -> tuple[Export, TerraformExport]:
    return build(dict(EXAMPLES)[name])


@pytest.mark.parametrize(("name", "files"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_every_resource_of_every_example_takes_only_the_providers_arguments(
    name: str, files: tuple[str, ...]
) -> None:
    _, written = built(name)
    assert written.resources
    problems = [
        f"{resource}.{address}: {problem}"
        for resource in ("google_container_node_pool", "kubernetes_manifest")
        for address, body in resources(written, resource).items()
        for problem in schema_problems(body, schema(resource))
    ]
    assert problems == []


@pytest.mark.parametrize(
    ("case", "body", "expected"),
    [
        ("an unknown argument", {"cluster": "c", "nodes": 2}, ["nodes: unknown argument"]),
        (
            "an unknown argument in a nested block",
            {"cluster": "c", "node_config": {"machine": "a3-highgpu-8g"}},
            ["node_config[0].machine: unknown argument"],
        ),
        ("a missing required argument", {"name": "p"}, ["cluster: required, missing"]),
        (
            "a missing required argument in a repeated block",
            {"cluster": "c", "node_config": {"guest_accelerator": [{"type": "nvidia-l4"}]}},
            ["node_config[0].guest_accelerator[0].count: required, missing"],
        ),
        (
            "an output",
            {"cluster": "c", "instance_group_urls": []},
            ["instance_group_urls: an output, not an argument"],
        ),
        (
            "a block given twice where one is allowed",
            {"cluster": "c", "autoscaling": [{}, {}]},
            ["autoscaling: 2 blocks, at most 1"],
        ),
        ("meta-arguments", {"cluster": "c", "depends_on": ["x.y"]}, []),
    ],
)
def test_the_schema_check_refuses(case: str, body: dict[str, Any], expected: list[str]) -> None:
    assert schema_problems(body, schema("google_container_node_pool")) == expected


def test_the_schema_check_knows_kubernetes_manifest_needs_a_manifest() -> None:
    assert schema_problems({"object": {}}, schema("kubernetes_manifest")) == ["manifest: required, missing"]


def at(value: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


@pytest.mark.parametrize(
    ("example", "pool", "path", "expected"),
    [
        ("gpu-estate", "h100", ("node_config", "machine_type"), "a3-highgpu-8g"),
        ("gpu-estate", "h100", ("node_config", "guest_accelerator", 0, "type"), "nvidia-h100-80gb"),
        ("gpu-estate", "h100", ("node_config", "guest_accelerator", 0, "count"), 8),
        (
            "gpu-estate",
            "h100",
            ("node_config", "guest_accelerator", 0, "gpu_driver_installation_config"),
            {"gpu_driver_version": "DEFAULT"},
        ),
        ("gpu-estate", "h100", ("node_count",), 6),
        ("gpu-estate", "h100", ("placement_policy",), {"type": "COMPACT"}),
        (
            "gpu-estate",
            "h100",
            ("node_config", "reservation_affinity"),
            {"consume_reservation_type": "ANY_RESERVATION"},
        ),
        ("gpu-estate", "l4-shared", ("node_config", "spot"), True),
        ("gpu-estate", "l4-shared", ("node_config", "guest_accelerator", 0, "type"), "nvidia-l4"),
        ("symbol-retail", "a100-reserved", ("node_locations",), ["us-central1-a"]),
        (
            "symbol-retail",
            "a100-reserved",
            ("node_config", "reservation_affinity"),
            {
                "consume_reservation_type": "SPECIFIC_RESERVATION",
                "key": "compute.googleapis.com/reservation-name",
                "values": ["retail-a100"],
            },
        ),
        (
            "symbol-retail",
            "h100-spot",
            ("autoscaling",),
            {"total_min_node_count": 0, "total_max_node_count": 4, "location_policy": "ANY"},
        ),
        ("symbol-retail", "h100-spot", ("initial_node_count",), 2),
        (
            "symbol-retail",
            "h100-spot",
            ("node_config", "taint"),
            [{"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NO_SCHEDULE"}],
        ),
        ("symbol-retail", "h100-ondemand", ("node_count",), 2),
        ("symbol-retail", "h100-ondemand", ("cluster",), "${var.cluster_name}"),
        ("symbol-retail", "h100-ondemand", ("project",), "${var.project}"),
        ("symbol-retail", "h100-ondemand", ("location",), "${var.location}"),
        ("serving", "h100", ("node_config", "guest_accelerator", 0, "count"), 4),
    ],
)
def test_gke_node_pool_arguments(example: str, pool: str, path: tuple[str | int, ...], expected: Any) -> None:
    assert at(resources(built(example)[1], "google_container_node_pool")[pool], path) == expected


def test_labels_gke_sets_itself_are_left_out_with_a_warning() -> None:
    _, written = built("symbol-retail")
    labels = resources(written, "google_container_node_pool")["h100-ondemand"]["node_config"]["labels"]
    assert "cloud.google.com/gke-provisioning" not in labels
    assert "cloud.google.com/gce-topology-block" not in labels
    assert labels["gpuq.dev/node-pool"] == "h100-ondemand"
    assert any("h100-ondemand: spec.labels.cloud.google.com/gke-provisioning" in w for w in written.warnings)


def test_a_mixed_mig_layout_is_written_as_whole_gpus_with_a_warning() -> None:
    _, written = built("gpu-estate")
    accelerator = resources(written, "google_container_node_pool")["a100-mig"]["node_config"][
        "guest_accelerator"
    ]
    assert "gpu_partition_size" not in accelerator[0]
    assert any("a100-mig: spec.gpu.sharing.migLayout" in w for w in written.warnings)


@pytest.mark.parametrize(
    ("sharing", "expected"),
    [
        ("{strategy: mig-single, migLayout: all-1g.10gb}", {"gpu_partition_size": "1g.10gb"}),
        (
            "{strategy: time-slicing, replicas: 4}",
            {"gpu_sharing_config": {"gpu_sharing_strategy": "TIME_SHARING", "max_shared_clients_per_gpu": 4}},
        ),
        ("{strategy: none}", {}),
    ],
)
def test_gpu_sharing_becomes_the_accelerators_settings(
    sharing: str, expected: dict[str, Any], tmp_path: Path
) -> None:
    config = tmp_path / "pool.yaml"
    config.write_text(
        "apiVersion: gpuq.dev/v1alpha1\nkind: NodePool\nmetadata: {name: a100}\n"
        "spec: {machineType: a2-highgpu-8g, count: 1, cpu: '96', memory: 680Gi, zone: us-central1-c,\n"
        f"  gpu: {{model: A100-80GB, count: 8, sharing: {sharing}}}}}\n"
    )
    _, written = build((str(config),))
    accelerator = resources(written, "google_container_node_pool")["a100"]["node_config"][
        "guest_accelerator"
    ][0]
    assert {
        k: v for k, v in accelerator.items() if k not in ("type", "count", "gpu_driver_installation_config")
    } == (expected)


def test_karpenter_pools_are_manifests_after_their_ec2_node_class() -> None:
    exported, written = built("eks-karpenter")
    manifests = resources(written, "kubernetes_manifest")
    assert "node-pools.tf.json" not in written.documents
    assert manifests["nodepool_p5-ondemand"]["manifest"] == exported.files["50-nodes.yaml"][0]
    assert manifests["nodepool_g6e-spot"]["depends_on"] == ["kubernetes_manifest.ec2nodeclass_default"]
    node_class = manifests["ec2nodeclass_default"]["manifest"]
    assert node_class["spec"]["role"] == "${var.node_role}"
    assert set(written.documents["variables.tf.json"]["variable"]) == {
        "kubeconfig",
        "kube_context",
        "cluster_name",
        "node_role",
    }


@pytest.mark.parametrize(("name", "files"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_manifests_are_the_k8s_exports_objects_in_depends_on_groups(
    name: str, files: tuple[str, ...]
) -> None:
    exported, written = built(name)
    manifests = resources(written, "kubernetes_manifest")
    by_kind: dict[str, set[str]] = {}
    for address, body in manifests.items():
        by_kind.setdefault(body["manifest"]["kind"], set()).add(f"kubernetes_manifest.{address}")
    for address, body in manifests.items():
        after = set(body.get("depends_on", []))
        assert after <= {f"kubernetes_manifest.{a}" for a in manifests}, address
        kind = body["manifest"]["kind"]
        if kind == "Namespace":
            assert not after
        if kind == "LocalQueue":
            assert after == by_kind["ClusterQueue"]
        if kind == "ClusterQueue":
            assert by_kind.get("ResourceFlavor", set()) <= after
    shared = (
        "00-namespaces.yaml",
        "10-priorities.yaml",
        "20-kueue.yaml",
        "30-tenancy.yaml",
        "60-monitoring.yaml",
    )
    expected = [literal(obj) for file in shared for obj in exported.files.get(file, [])]
    assert [m for m in expected if m not in [b["manifest"] for b in manifests.values()]] == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", "plain"),
        ("${not.a.reference}", "$${not.a.reference}"),
        ({"%{if}": ["a ${b}"]}, {"%%{if}": ["a $${b}"]}),
        (3, 3),
    ],
)
def test_strings_from_manifests_are_not_terraform_templates(value: Any, expected: Any) -> None:
    assert literal(value) == expected


def test_the_same_input_writes_the_same_bytes(tmp_path: Path) -> None:
    outputs = []
    for run in ("a", "b"):
        out = tmp_path / run
        result = runner.invoke(
            app,
            ["export", "terraform", "-f", str(ROOT / "examples" / "symbol-retail"), "--out-dir", str(out)],
        )
        assert result.exit_code == 0, result.output
        outputs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert outputs[0] == outputs[1]
    assert sorted(outputs[0]) == [
        "README.md",
        "kubernetes.tf.json",
        "node-pools.tf.json",
        "providers.tf.json",
        "variables.tf.json",
    ]


def test_providers_are_pinned_and_the_cluster_is_variables() -> None:
    _, written = built("gpu-estate")
    providers = written.documents["providers.tf.json"]
    assert providers["terraform"]["required_providers"] == {
        "google": {"source": "hashicorp/google", "version": "~> 7.45"},
        "kubernetes": {"source": "hashicorp/kubernetes", "version": "~> 3.2"},
    }
    assert set(written.documents["variables.tf.json"]["variable"]) == {"project", "location", "cluster_name"}
    assert "terraform apply -var project=PROJECT" in written.readme


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        (
            "philly",
            [
                "examples/philly/nodes.yaml:32: NodePool/philly-12gb-2gpu-8cpu: spec.machineType: ",
                "examples/philly/nodes.yaml:48: NodePool/philly-24gb-8gpu-32cpu: spec.machineType: ",
            ],
        ),
    ],
)
def test_pools_of_no_cloud_are_refused_by_file_pool_and_field(
    example: str, expected: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["export", "terraform", "-f", f"examples/{example}", "--out-dir", str(out)])
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert [e.removeprefix("error: ")[: len(x)] for e, x in zip(errors, expected, strict=True)] == expected
    assert "nothing written" in result.stderr
    assert not out.exists()


def test_pools_of_two_clouds_are_refused(tmp_path: Path) -> None:
    pool = (
        "apiVersion: gpuq.dev/v1alpha1\nkind: NodePool\nmetadata: {{name: {0}}}\n"
        "spec: {{machineType: {1}, count: 1, cpu: '8', memory: 32Gi}}\n"
    )
    config = tmp_path / "pools.yaml"
    config.write_text(pool.format("gce", "n2-standard-8") + "---\n" + pool.format("ec2", "m6i.2xlarge"))
    with pytest.raises(
        TerraformInvalid, match="NodePool/gce is a GCE machine and NodePool/ec2 an EC2 instance"
    ):
        build((str(config),))


@pytest.mark.parametrize(("output", "parse"), [("json", json.loads), ("yaml", yaml.safe_load)])
def test_output_lists_what_was_written(output: str, parse: Any, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["export", "terraform", "-f", "examples/eks-karpenter", "--out-dir", str(tmp_path), "-o", output]
    )
    assert result.exit_code == 0, result.output
    listing = parse(result.stdout)
    assert sorted(Path(p).name for p in listing["files"]) == sorted(p.name for p in tmp_path.iterdir())
    written = json.loads((tmp_path / "kubernetes.tf.json").read_text())["resource"]["kubernetes_manifest"]
    assert [r["name"] for r in listing["resources"]] == list(written)


def test_a_second_export_removes_the_files_it_no_longer_writes(tmp_path: Path) -> None:
    for example in ("gpu-estate", "eks-karpenter"):
        result = runner.invoke(
            app, ["export", "terraform", "-f", f"examples/{example}", "--out-dir", str(tmp_path)]
        )
        assert result.exit_code == 0, result.output
    assert not (tmp_path / "node-pools.tf.json").exists()
    assert (
        render(json.loads((tmp_path / "providers.tf.json").read_text()))
        == (tmp_path / "providers.tf.json").read_text()
    )


@pytest.mark.skipif(shutil.which("terraform") is None, reason="no terraform binary on PATH")
@pytest.mark.parametrize("example", ["gpu-estate", "eks-karpenter"])
def test_terraform_reads_the_configuration(example: str, tmp_path: Path) -> None:
    """``terraform providers`` parses every file and the provider requirements without plugins;
    ``terraform validate`` needs ``terraform init``, which needs the provider registry."""
    result = runner.invoke(
        app, ["export", "terraform", "-f", f"examples/{example}", "--out-dir", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    done = subprocess.run(
        ["terraform", "providers", "-no-color"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "hashicorp/kubernetes" in done.stdout


POOL = (
    "apiVersion: gpuq.dev/v1alpha1\nkind: NodePool\nmetadata: {{name: p}}\n"
    "spec: {{cpu: '8', memory: 32Gi, {0}}}\n"
)


@pytest.mark.parametrize(
    ("case", "spec", "expected"),
    [
        (
            "a machine type of no cloud",
            "machineType: dgx-h100, count: 1",
            "NodePool/p: spec.machineType: 'dgx-h100' is neither a GCE machine type",
        ),
        (
            "a GPU GCE does not offer",
            "machineType: g2-standard-8, count: 1, gpu: {model: A10G, count: 1}",
            "NodePool/p: spec.gpu.model: 'A10G' has no GCE accelerator type",
        ),
        (
            "a fixed count that does not split over the zones",
            "machineType: n2-standard-8, count: 3, zones: [us-central1-a, us-central1-b]",
            "NodePool/p: spec.count: 3 nodes do not split evenly over 2 zones",
        ),
    ],
)
def test_a_pool_terraform_cannot_create_is_refused_by_field(
    case: str, spec: str, expected: str, tmp_path: Path
) -> None:
    config = tmp_path / "pool.yaml"
    config.write_text(POOL.format(spec))
    out = tmp_path / "out"
    result = runner.invoke(app, ["export", "terraform", "-f", str(config), "--out-dir", str(out)])
    assert result.exit_code == 1, result.output
    assert f"error: {config}:4: {expected}" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("args", [["-o", "hcl"], ["--kueue-release", "v0.1"], []])
def test_bad_options_exit_2_and_write_nothing(args: list[str], tmp_path: Path) -> None:
    out = ["--out-dir", str(tmp_path / "out")] if args else []
    result = runner.invoke(app, ["export", "terraform", "-f", "examples/gpu-estate", *out, *args])
    assert result.exit_code == 2
    assert not (tmp_path / "out").exists()
