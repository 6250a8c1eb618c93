"""Admission Fair Sharing through ``gpuq export k8s`` and ``gpuq import k8s``: the fields Kueue reads.

The export is checked against the bundled CRD schemas of the Kueue release it targets
(``check_export``); the import keeps a LocalQueue's persisted usage, as a restarted Kueue seeds from it.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from gpuq.api.loader import load, load_texts
from gpuq.commands.export import alert_rules
from gpuq.core.model import AdmissionFairSharing, AdmissionMode
from gpuq.k8s.export import build_export, check_export, write_export
from gpuq.k8s.export_common import ExportOptions
from gpuq.k8s.importer import ImportSettings, import_dump

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "admission-fair-sharing"
FILES = [str(EXAMPLE / "00-cluster.yaml"), str(EXAMPLE / "admission-fair-sharing.yaml.variant")]
DUMP = Path(__file__).parent / "data" / "cluster-dump.yaml"


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("kueue_version", ["v1beta1", "v1beta2"])
def test_the_export_writes_admission_scope_local_queue_weights_and_the_configuration(
    kueue_version: str, tmp_path: Path
) -> None:
    original = load(FILES)
    options = ExportOptions(kueue_version=kueue_version)  # type: ignore[arg-type]
    exported = build_export(original, options, alert_rules())
    check_export(exported, options)  # the CRDs' openAPIV3Schema of the targeted release
    write_export(exported, str(tmp_path))
    kueue_docs = documents(tmp_path / "20-kueue.yaml")
    cq = next(d for d in kueue_docs if d["kind"] == "ClusterQueue")
    weights = {
        d["metadata"]["name"]: d["spec"]["fairSharing"] for d in kueue_docs if d["kind"] == "LocalQueue"
    }
    configuration = documents(tmp_path / "gpuq" / "kueue-configuration.yaml")[0]
    assert cq["spec"]["admissionScope"] == {"admissionMode": "UsageBasedAdmissionFairSharing"}
    assert weights == {"alice": {"weight": "1"}, "bob": {"weight": "1"}}
    assert configuration["admissionFairSharing"]["usageHalfLifeTime"] == "1h"
    reloaded = load([str(tmp_path)]).config
    assert reloaded is not None and original.config is not None  # namespaces gain the export's labels
    assert replace(reloaded, namespace_labels={}) == replace(original.config, namespace_labels={})


def test_the_example_loads_with_kueues_field_values_and_defaults() -> None:
    config = load(FILES).config
    assert config is not None
    assert config.scheduler.admission_fair_sharing == AdmissionFairSharing(
        3600.0, 60.0, {"cpu": 0.0, "memory": 0.0, "nvidia.com/gpu": 1.0}
    )
    assert config.cluster_queues["vision"].admission_mode == AdmissionMode.USAGE_BASED
    assert config.local_queues[("vision-bob", "bob")].fair_weight == Fraction(1)


def test_the_sampling_interval_defaults_to_five_minutes() -> None:
    text = (
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
        "admissionFairSharing: {usageHalfLifeTime: 2h}\n"
    )
    config = load_texts([("config.yaml", text)]).config
    assert config is not None
    assert config.scheduler.admission_fair_sharing == AdmissionFairSharing(7200.0, 300.0, {})


def test_the_import_keeps_admission_scope_weights_and_a_local_queues_persisted_usage() -> None:
    dump = list(yaml.safe_load_all(DUMP.read_text()))
    items = dump[0]["items"] if len(dump) == 1 and "items" in dump[0] else dump
    cq = next(o for o in items if o and o.get("kind") == "ClusterQueue")
    lq = next(
        o
        for o in items
        if o and o.get("kind") == "LocalQueue" and o["spec"]["clusterQueue"] == cq["metadata"]["name"]
    )
    cq["spec"]["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    lq["spec"]["fairSharing"] = {"weight": "2"}
    lq.setdefault("status", {})["fairSharing"] = {
        "weightedShare": 0,
        "admissionFairSharingStatus": {
            "consumedResources": {"nvidia.com/gpu": "1500m"},
            "lastUpdate": "2025-06-03T09:00:00Z",
        },
    }
    text = yaml.safe_dump_all(dump)
    result = import_dump([("dump.yaml", text)], ImportSettings())
    assert result.files, [str(d) for d in result.diagnostics]
    config = load_texts([("kueue.yaml", result.files["cluster/kueue.yaml"])]).config
    assert config is not None
    local = config.local_queues[(lq["metadata"]["namespace"], lq["metadata"]["name"])]
    assert config.cluster_queues[cq["metadata"]["name"]].admission_mode == AdmissionMode.USAGE_BASED
    assert (local.fair_weight, dict(local.consumed)) == (Fraction(2), {"nvidia.com/gpu": 1.5})
