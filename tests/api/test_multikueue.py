"""MultiKueueConfig and MultiKueueCluster load as Kueue's CRDs define them (v1beta2, and v1beta1
converted), with their references checked; dispatch itself is not modelled (one warning)."""

from __future__ import annotations

import pytest

from gpuq.api.loader import load_texts

CHECK = """apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: mk}
spec:
  controllerName: kueue.x-k8s.io/multikueue
  parameters: {apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig, name: config}
"""
CONFIG = """---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueConfig
metadata: {name: config}
spec:
  clusters: [worker1]
"""
CLUSTER_V1BETA2 = """---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata: {name: worker1}
spec:
  clusterSource:
    kubeConfig: {location: worker1-secret}
"""
CLUSTER_V1BETA1 = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: MultiKueueCluster
metadata: {name: worker1}
spec:
  kubeConfig: {locationType: Secret, location: worker1-secret}
"""


def findings(text: str) -> list[tuple[str, int, str, str]]:
    result = load_texts([("mk.yaml", text)])
    return [(d.severity, d.line, d.field, d.message.split(":")[0]) for d in result.diagnostics]


WARNING = ("warning", 5, "spec.controllerName", "MultiKueue dispatch to worker clusters is not modelled yet")


@pytest.mark.parametrize(
    ("case", "text", "expected"),
    [
        ("v1beta2 objects load, with one warning", CHECK + CONFIG + CLUSTER_V1BETA2, [WARNING]),
        (
            "a v1beta1 cluster converts (kubeConfig under clusterSource)",
            CHECK + CONFIG + CLUSTER_V1BETA1,
            [WARNING],
        ),
        (
            "a config naming a missing cluster is an error",
            CHECK + CONFIG,
            [WARNING, ("error", 12, "spec.clusters[0]", "MultiKueueCluster 'worker1' not found")],
        ),
        (
            "a check naming a missing config is an error",
            CHECK,
            [WARNING, ("error", 6, "spec.parameters.name", "MultiKueueConfig 'config' not found")],
        ),
        (
            "a cluster needs exactly one source",
            CHECK + CONFIG + CLUSTER_V1BETA2.replace("kubeConfig: {location: worker1-secret}", "{}"),
            [
                WARNING,
                (
                    "error",
                    18,
                    "spec.clusterSource",
                    "exactly one of kubeConfig and clusterProfileRef must be set",
                ),
            ],
        ),
        (
            "duplicate clusters are refused",
            CHECK + CONFIG.replace("[worker1]", "[worker1, worker1]") + CLUSTER_V1BETA2,
            [WARNING, ("error", 11, "spec", "clusters must be unique")],
        ),
    ],
)
def test_multikueue_objects(case: str, text: str, expected: list[tuple[str, int, str, str]]) -> None:
    assert sorted(findings(text)) == sorted(expected)
