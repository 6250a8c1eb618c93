"""Every example exported, validated and loaded back gives the configuration it came from."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from gpuq.api.loader import LoadResult, load
from gpuq.api.serving import ServiceSpec, build_services
from gpuq.commands.export import alert_rules
from gpuq.core.model import ClusterConfig
from gpuq.k8s.export import build_export, check_export, write_export
from gpuq.k8s.export_common import MANAGED_BY, ExportOptions
from gpuq.k8s.manifests_originals import QUEUE_LABEL
from gpuq.k8s.manifests_tenancy import NAME_LABEL, pss_labels, team_namespaces

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(
    [str(p) for p in (ROOT / "examples").iterdir() if p.is_dir() and p.name != "configs"]
    + [str(p) for p in (ROOT / "examples" / "configs").glob("*.yaml")]
)


def configuration_of(source: str) -> list[str]:
    """An example's configuration: the files its Scenario names (a serving example keeps alternative
    autoscalers for its variants beside them), else the whole directory or file."""
    scenario = Path(source) / "scenario.yaml"
    if scenario.is_file():
        config = yaml.safe_load(scenario.read_text()).get("spec", {}).get("config")
        if config:
            return [str(Path(source) / name) for name in config]
    return [source]


def serving_variants(source: str) -> list[list[str]]:
    """The extra files of each Scenario variant that adds configuration (a serving example's autoscalers)."""
    scenario = Path(source) / "scenario.yaml"
    if not scenario.is_file():
        return []
    variants = yaml.safe_load(scenario.read_text()).get("spec", {}).get("variants") or []
    return [[str(Path(source) / f) for f in v["extraConfig"]] for v in variants if v.get("extraConfig")]


SERVING_VARIANTS = [
    (example, extra)
    for example in EXAMPLES
    if serving_variants(example)
    for extra in [[], *serving_variants(example)]
]


def export_and_reload(
    source: str, directory: Path, options: ExportOptions, extra: list[str] | None = None
) -> tuple[LoadResult, LoadResult]:
    original = load([*configuration_of(source), *(extra or [])])
    assert original.config is not None, [str(d) for d in original.errors]
    exported = build_export(original, options, alert_rules())
    check_export(exported, options)
    write_export(exported, str(directory))
    return original, load([str(directory)])


def expected_namespace_labels(
    original: ClusterConfig, teams: list[str], level: str
) -> dict[str, dict[str, str]]:
    """What the export promises: declared labels kept; team namespaces gain managed-by and PSS labels."""
    out = {name: dict(labels) for name, labels in original.namespace_labels.items()}
    for name in teams:
        out[name] = {**out.get(name, {NAME_LABEL: name}), **MANAGED_BY, **pss_labels(level)}
    return out


def services(result: LoadResult) -> dict[str, ServiceSpec]:
    """The services of a configuration, comparable across an export: ``source`` (path:line) differs by
    construction, and the export adds the queue label to the pod template where Kueue's webhooks put
    it on the cluster anyway, so the pod labels are compared without it."""
    found, problems = build_services(result.manifests)
    assert [p for p in problems if p.severity == "error"] == []
    return {
        s.key: dataclasses.replace(
            s, source="", labels={k: v for k, v in s.labels.items() if k != QUEUE_LABEL}
        )
        for s in found
    }


@pytest.mark.parametrize("provisioner", ["gke", "karpenter"])
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: Path(p).name)
def test_example_round_trips_through_an_export(example: str, provisioner: str, tmp_path: Path) -> None:
    options = ExportOptions(provisioner=provisioner)  # type: ignore[arg-type]
    original, reloaded = export_and_reload(example, tmp_path, options)
    assert reloaded.config is not None, [str(d) for d in reloaded.errors]
    assert reloaded.errors == ()
    before, after = original.config, reloaded.config
    assert before is not None
    for field in dataclasses.fields(ClusterConfig):
        if field.name != "namespace_labels":
            assert getattr(after, field.name) == getattr(before, field.name), field.name
    teams = team_namespaces(before, original.workloads)
    assert after.namespace_labels == expected_namespace_labels(before, teams, "restricted")
    assert {w.key: w for w in reloaded.workloads} == {w.key: w for w in original.workloads}
    assert reloaded.nodes == original.nodes
    assert reloaded.node_pools == original.node_pools
    assert services(reloaded) == services(original)


@pytest.mark.parametrize(
    ("example", "extra"),
    SERVING_VARIANTS,
    ids=[f"{Path(e).name}+{'+'.join(Path(f).stem for f in x) or 'base'}" for e, x in SERVING_VARIANTS],
)
def test_serving_services_and_their_autoscalers_round_trip_through_an_export(
    example: str, extra: list[str], tmp_path: Path
) -> None:
    original, reloaded = export_and_reload(example, tmp_path, ExportOptions(), extra)
    assert reloaded.errors == (), [str(d) for d in reloaded.errors]
    assert services(reloaded) == services(original)
    for service in build_services(reloaded.manifests)[0]:
        if service.queue_name and service.kind in ("Deployment", "StatefulSet"):
            assert service.labels[QUEUE_LABEL] == service.queue_name, service.key


def test_the_serving_example_offers_an_hpa_and_a_keda_variant_to_round_trip() -> None:
    serving = str(ROOT / "examples" / "serving")
    assert sorted(Path(f).name for extra in serving_variants(serving) for f in extra) == [
        "hpa.yaml.variant",
        "keda.yaml.variant",
    ]
    original = load(configuration_of(serving))
    assert {s.key for s in services(original).values()} == {"serving/chat", "serving/embed"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: Path(p).name)
def test_namespace_selectors_admit_the_same_namespaces_after_the_export(example: str, tmp_path: Path) -> None:
    original, reloaded = export_and_reload(example, tmp_path, ExportOptions())
    assert original.config is not None and reloaded.config is not None
    namespaces = {ns for ns, _ in original.config.local_queues}
    for name, cq in original.config.cluster_queues.items():
        for ns in namespaces:
            selector, again = cq.namespace_selector, reloaded.config.cluster_queues[name].namespace_selector
            before = selector is not None and selector.matches(original.config.labels_of_namespace(ns))
            after = again is not None and again.matches(reloaded.config.labels_of_namespace(ns))
            assert before == after, (name, ns)


def test_kueue_v1beta2_export_round_trips_too(tmp_path: Path) -> None:
    example = str(ROOT / "examples" / "symbol-retail")
    original, reloaded = export_and_reload(example, tmp_path, ExportOptions(kueue_version="v1beta2"))
    assert original.config is not None and reloaded.config is not None
    assert reloaded.config.cluster_queues == original.config.cluster_queues
    assert reloaded.config.cohorts == original.config.cohorts
    assert "kueue.x-k8s.io/v1beta2" in (tmp_path / "20-kueue.yaml").read_text()


def test_a_second_export_into_the_same_directory_removes_files_it_no_longer_writes(tmp_path: Path) -> None:
    example = str(ROOT / "examples" / "gpu-estate")
    export_and_reload(example, tmp_path, ExportOptions(provisioner="karpenter"))
    assert (tmp_path / "50-nodes.yaml").exists()
    (tmp_path / "notes.txt").write_text("mine")
    _, reloaded = export_and_reload(example, tmp_path, ExportOptions(provisioner="gke"))
    assert not (tmp_path / "50-nodes.yaml").exists()
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert reloaded.config is not None


CONFIGURATION = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
waitForPodsReady:
  timeout: 10m
  requeuingStrategy: {timestamp: Creation, backoffLimitCount: 3}
featureGates: {PrioritizePreemptorWorkloads: true}
"""


def test_wait_for_pods_ready_and_the_preemptor_gate_are_exported_as_written(tmp_path: Path) -> None:
    """Kueue's Configuration is the controller's config file: written to ``gpuq/`` as given, so the
    cluster's Kueue defaults it as gpuq did, and loading the export gives the same scheduler."""
    config = tmp_path / "kueue-config.yaml"
    config.write_text(CONFIGURATION)
    out = tmp_path / "out"
    example = str(ROOT / "examples" / "symbol-retail")
    original, reloaded = export_and_reload(example, out, ExportOptions(), extra=[str(config)])
    assert original.config is not None and reloaded.config is not None
    wait = original.config.scheduler.wait_for_pods_ready
    assert (wait.enable, wait.timeout_s, wait.requeuing_backoff_limit_count) == (True, 600.0, 3)
    assert reloaded.config.scheduler == original.config.scheduler
    written = yaml.safe_load((out / "gpuq" / "kueue-configuration.yaml").read_text())
    assert written["waitForPodsReady"] == {
        "timeout": "10m",
        "requeuingStrategy": {"timestamp": "Creation", "backoffLimitCount": 3},
    }
    assert written["featureGates"] == {"PrioritizePreemptorWorkloads": True}
