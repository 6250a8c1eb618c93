"""``kueue.x-k8s.io/admission-gated-by`` and ``kueue.x-k8s.io/priority-boost``: Kueue's webhook rules
for their values, the gate copied from a job to its Workload (which then is not queued and does not
block a StrictFIFO queue), and the boost added to the priority while the PriorityBoost gate is on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuq.api.loader import load_texts
from gpuq.api.workload_gates import admission_gate_problems, priority_boost
from gpuq.cli import app

runner = CliRunner()

SETUP = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  queueingStrategy: StrictFIFO
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: gpu, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: default}
spec: {clusterQueue: cq}
"""
CONFIGURATION = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
GATES_OFF = CONFIGURATION + "featureGates: {AdmissionGatedBy: false}\n"
BOOST_ON = (
    "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nfeatureGates: {PriorityBoost: true}\n"
)


def job(name: str, minute: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": 8}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "creationTimestamp": f"2025-01-01T00:{minute:02d}:00Z",
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
            "annotations": annotations or {},
        },
        "spec": {"template": {"spec": {"containers": [container]}}},
    }


def workload(name: str, minute: int, boost: str | None) -> dict[str, Any]:
    pod = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": 8}}}]}
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "creationTimestamp": f"2025-01-01T00:{minute:02d}:00Z",
    }
    if boost is not None:
        meta["annotations"] = {"kueue.x-k8s.io/priority-boost": boost}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": meta,
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": pod}}]},
    }


def admit(tmp_path: Path, *docs: dict[str, Any], config: str = "") -> dict[str, Any]:
    (tmp_path / "all.yaml").write_text(
        SETUP + "---\n" + yaml.safe_dump_all(docs) + ("---\n" + config if config else "")
    )
    result = runner.invoke(app, ["admit", "-f", str(tmp_path / "all.yaml"), "-o", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    return {
        "admitted": sorted(k.split("-")[1] for k in out["admitted"]),
        "pending": {k.split("-")[1]: v for k, v in out["pending"].items()},
    }


GATED = {"kueue.x-k8s.io/admission-gated-by": "example.com/approver,example.com/budget"}


@pytest.mark.parametrize(
    ("docs", "config", "admitted", "pending"),
    [
        pytest.param(
            [job("gated", 0, GATED), job("later", 1)],
            "",
            ["later"],
            {"gated": "Admission is gated by: example.com/approver,example.com/budget"},
            id="a gated job waits and does not block the StrictFIFO queue behind it",
        ),
        pytest.param(
            [job("gated", 0, GATED), job("later", 1)],
            GATES_OFF,
            ["gated"],
            {"later": None},
            id="with the AdmissionGatedBy gate off the annotation is ignored",
        ),
        pytest.param(
            [job("gated", 0, {"kueue.x-k8s.io/admission-gated-by": ""}), job("later", 1)],
            "",
            ["gated"],
            {"later": None},
            id="an empty gate gates nothing",
        ),
    ],
)
def test_an_admission_gate_keeps_the_workload_out_of_its_queue(
    tmp_path: Path, docs: list[dict[str, Any]], config: str, admitted: list[str], pending: dict[str, Any]
) -> None:
    got = admit(tmp_path, *docs, config=config)
    assert got["admitted"] == admitted
    assert list(got["pending"]) == list(pending)
    for name, message in pending.items():
        if message is not None:
            assert got["pending"][name] == message


@pytest.mark.parametrize(
    ("config", "admitted"),
    [
        pytest.param(BOOST_ON, ["boosted"], id="PriorityBoost on: the newer boosted workload goes first"),
        pytest.param("", ["plain"], id="PriorityBoost off (Kueue's default): the annotation is ignored"),
    ],
)
def test_a_priority_boost_is_added_to_the_priority_when_its_gate_is_on(
    tmp_path: Path, config: str, admitted: list[str]
) -> None:
    got = admit(tmp_path, workload("w-plain", 0, None), workload("w-boosted", 1, "100"), config=config)
    assert got["admitted"] == admitted


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        ("example.com/approver", []),
        ("example.com/a,example.com/b", []),
        ("example.com/a,,example.com/b", ["cannot contain empty gate names"]),
        ("example.com/a,example.com/a", ["duplicate gate name: example.com/a"]),
        ("approver", ["'approver' must be a domain-prefixed path (such as 'acme.io/foo')"]),
        (
            "Example.COM/a",
            [
                "'Example.COM/a': prefix must be a lowercase RFC 1123 subdomain "
                "(lowercase letters, digits, '-' and '.')"
            ],
        ),
        ("example.com/" + "a" * 60, [f"'example.com/{'a' * 60}' must have at most 63 characters"]),
    ],
)
def test_admission_gate_values_follow_kueues_webhook(value: str, problems: list[str]) -> None:
    assert list(admission_gate_problems(value)) == problems


@pytest.mark.parametrize(
    ("value", "boost"),
    [
        (None, 0),
        ("0", 0),
        ("100", 100),
        ("-5", -5),
        ("+7", 7),
        ("", None),
        (" 1", None),
        ("1_000", None),
        ("2147483648", None),
    ],
)
def test_priority_boost_values_are_signed_32_bit_integers(value: str | None, boost: int | None) -> None:
    assert priority_boost(value) == boost


def test_a_malformed_gate_on_a_job_is_an_error_naming_the_annotation() -> None:
    text = SETUP + "---\n" + yaml.safe_dump(job("bad", 0, {"kueue.x-k8s.io/admission-gated-by": "approver"}))
    result = load_texts([("jobs.yaml", text)])
    assert [(d.kind, d.field) for d in result.errors] == [
        ("Job", "metadata.annotations[kueue.x-k8s.io/admission-gated-by]")
    ]


def test_a_malformed_priority_boost_is_a_warning_and_adds_nothing() -> None:
    text = SETUP + "---\n" + yaml.safe_dump(workload("w-x", 0, "high")) + "---\n" + BOOST_ON
    result = load_texts([("w.yaml", text)])
    assert result.errors == ()
    assert [d.field for d in result.warnings if "priority-boost" in d.field] == [
        "metadata.annotations[kueue.x-k8s.io/priority-boost]"
    ]
    assert [w.priority for w in result.workloads] == [0]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("30m", 1800.0), ("1h30m", 5400.0), ("0", 0.0), ("soon", None), ("-5m", None)],
)
def test_a_minimum_runtime_is_a_duration(tmp_path: Path, value: str, seconds: float | None) -> None:
    text = SETUP + "---\n" + yaml.safe_dump(job("protected", 0, {"gpuq.dev/min-runtime": value}))
    result = load_texts([("jobs.yaml", text)])
    if seconds is None:
        assert [d.field for d in result.errors] == ["metadata.annotations[gpuq.dev/min-runtime]"]
    else:
        assert result.errors == ()
        assert [w.min_runtime_s for w in result.workloads] == [seconds]
