"""Objects are checked before anything is written: core kinds against Kubernetes' schemas, custom
kinds against their real CRDs (:mod:`gpuq.k8s.crd_schemas`), GKE's ComputeClass against
:mod:`gpuq.k8s.schemas`; the loader skips the foreign kinds."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest

from gpuq.api.loader import load
from gpuq.k8s.export import Export, check_export
from gpuq.k8s.export_common import ExportOptions
from gpuq.k8s.export_validate import ExportInvalid, ExportProblem, check_objects, schema_version

GOOD_CQ: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "ClusterQueue",
    "metadata": {"name": "team-a"},
    "spec": {
        "cohort": "lab",
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}]}],
            }
        ],
    },
}


def _with(obj: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A deep copy of ``obj`` with ``path`` set to ``value`` (or removed when value is ...)."""
    import copy

    out = copy.deepcopy(obj)
    here: Any = out
    for part in path[:-1]:
        here = here[part]
    if value is ...:
        del here[path[-1]]
    else:
        here[path[-1]] = value
    return out


QUOTA = ("spec", "resourceGroups", 0, "flavors", 0, "resources", 0)
NUMBER = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
Q = rf"^(\+|-)?{NUMBER}(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?{NUMBER}))?$"  # Kueue's quantity pattern


@pytest.mark.parametrize(
    ("name", "obj", "expected"),
    [
        ("a valid cluster queue passes", GOOD_CQ, []),
        (
            "a missing nominal quota is named",
            _with(GOOD_CQ, (*QUOTA, "nominalQuota"), ...),
            [("spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "is required")],
        ),
        (
            "a malformed quantity fails the CRD's quantity pattern",
            _with(GOOD_CQ, (*QUOTA, "nominalQuota"), "eight"),
            [
                (
                    "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
                    f"'eight' does not match {Q!r}",
                )
            ],
        ),
        (
            "v1beta2's cohortName is unknown in v1beta1",
            _with(GOOD_CQ, ("spec", "cohortName"), "lab"),
            [("spec.cohortName", "unknown field")],
        ),
        (
            "a fungibility preference needs TryNextFlavor on both sides (Kueue's CEL rule)",
            _with(GOOD_CQ, ("spec", "flavorFungibility"), {"preference": "BorrowingOverPreemption"}),
            [
                (
                    "spec.flavorFungibility",
                    "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
                )
            ],
        ),
        (
            "a borrowing limit without a cohort is refused (Kueue's CEL rule)",
            _with(_with(GOOD_CQ, ("spec", "cohort"), ...), (*QUOTA, "borrowingLimit"), "2"),
            [("spec", "borrowingLimit must be nil when cohort is empty")],
        ),
        (
            "every flavor covers every resource of its group (Kueue's CEL rule)",
            _with(GOOD_CQ, ("spec", "resourceGroups", 0, "coveredResources"), ["nvidia.com/gpu", "cpu"]),
            [
                (
                    "spec.resourceGroups[0]",
                    "flavors must have the same number of resources as the coveredResources",
                )
            ],
        ),
        (
            "an enum value outside Kueue's is named",
            _with(GOOD_CQ, ("spec", "stopPolicy"), "Pause"),
            [("spec.stopPolicy", "'Pause' is not one of ['None', 'Hold', 'HoldAndDrain']")],
        ),
        (
            "a list where an object belongs is named",
            _with(GOOD_CQ, ("spec", "preemption"), []),
            [("spec.preemption", "[] is not of type 'object'")],
        ),
        (
            "unknown metadata fields are refused by Kubernetes' ObjectMeta",
            _with(GOOD_CQ, ("metadata", "label"), {"a": "b"}),
            [("metadata.label", "unknown field")],
        ),
        (
            "a flavor named twice is refused (x-kubernetes-list-type: map)",
            _with(
                GOOD_CQ,
                ("spec", "resourceGroups", 0, "flavors"),
                [GOOD_CQ["spec"]["resourceGroups"][0]["flavors"][0]] * 2,
            ),
            [("spec.resourceGroups[0].flavors[1]", "duplicate entry for key {'name': 'a100'}")],
        ),
    ],
)
def test_kueue_field_checks(name: str, obj: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    found = check_objects({"20-kueue.yaml": [obj]}, "1.33")
    assert [(p.field, p.message) for p in found] == expected, name


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "labels": {"x": 1}}},
            "metadata.labels.x",
        ),
        ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}, "colour": "red"}, "colour"),
        (
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": "p", "namespace": "a"},
                "spec": {"podSelector": {}, "policyTypes": "Ingress"},
            },
            "spec.policyTypes",
        ),
        (
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "b", "namespace": "a"},
                "subjects": [{"kind": "Group", "name": "g"}],
            },
            "roleRef",
        ),
    ],
)
def test_core_kinds_are_checked_against_the_kubernetes_schema(obj: dict[str, Any], field: str) -> None:
    problems = check_objects({"00-x.yaml": [obj]}, "1.33")
    assert problems and problems[0].field == field
    assert problems[0].kind == obj["kind"] and problems[0].name == obj["metadata"]["name"]


def test_a_broken_object_fails_the_export_naming_file_object_and_field() -> None:
    broken = _with(GOOD_CQ, (*QUOTA, "nominalQuota"), ...)
    fine = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}
    with pytest.raises(ExportInvalid) as caught:
        check_export(Export({"00-namespaces.yaml": [fine], "20-kueue.yaml": [broken]}), ExportOptions())
    assert caught.value.problems == (
        ExportProblem(
            "20-kueue.yaml",
            "ClusterQueue",
            "team-a",
            "",
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "is required",
        ),
    )
    assert str(caught.value) == (
        "20-kueue.yaml: ClusterQueue/team-a: "
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: is required"
    )


def test_a_kind_without_checks_is_refused() -> None:
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    (problem,) = check_objects({"x.yaml": [obj]}, "1.33")
    assert problem.field == "kind" and "no field checks" in problem.message


def test_gpuq_folder_objects_are_not_checked_against_the_cluster_schemas() -> None:
    node_pool = {"apiVersion": "gpuq.dev/v1alpha1", "kind": "NodePool", "metadata": {"name": "p"}, "spec": {}}
    check_export(Export({"gpuq/machines.yaml": [node_pool]}), ExportOptions())


@pytest.mark.parametrize(("asked", "used"), [("1.33", "1.33.0"), ("v1.31", "1.31.0"), ("1.37.4", "1.37.0")])
def test_schema_version_is_the_newest_bundled_one_not_newer_than_asked(asked: str, used: str) -> None:
    assert schema_version(asked) == used


@pytest.mark.parametrize("asked", ["1.12", "1.99"])
def test_unbundled_kubernetes_versions_are_refused(asked: str) -> None:
    with pytest.raises(ValueError, match="no bundled schema"):
        schema_version(asked)


FOREIGN = """
apiVersion: v1
kind: ConfigMap
metadata: {name: c, namespace: n}
data: {a: b}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: r}
rules: []
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: p}
spec: {}
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: r, namespace: monitoring}
spec: {groups: []}
"""


def test_loader_skips_the_foreign_kinds_the_export_writes_silently() -> None:
    result = load(["-"], stdin=StringIO(FOREIGN))
    assert result.config is not None
    assert result.diagnostics == ()
    assert result.manifests == ()
    assert (
        result.ignored_summary
        == "not scheduled by gpuq, ignored: 1 ClusterRole, 1 ConfigMap, 1 NodePool, 1 PrometheusRule"
    )


def test_loader_warns_of_other_unknown_kinds_and_refuses_unknown_kueue_kinds() -> None:
    result = load(["-"], stdin=StringIO("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n"))
    assert result.config is not None and not result.errors
    assert "unknown kind 'Widget'" in str(result.warnings[0])
    result = load(
        ["-"], stdin=StringIO("apiVersion: kueue.x-k8s.io/v1beta2\nkind: Widget\nmetadata: {name: w}\n")
    )
    assert result.config is None
    assert "unknown kind 'Widget'" in str(result.errors[0])


FLAVOR: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ResourceFlavor",
    "metadata": {"name": "f"},
}
TOPOLOGY: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Topology",
    "metadata": {"name": "t"},
}


@pytest.mark.parametrize(
    ("name", "obj", "expected"),
    [
        (
            "a flavor with a topology needs node labels",
            {**FLAVOR, "spec": {"topologyName": "t"}},
            [("spec", "at least one nodeLabel is required when topology is set")],
        ),
        (
            "a toleration without a key must be Exists",
            {
                **FLAVOR,
                "spec": {"tolerations": [{"operator": "Equal", "value": "x", "effect": "NoSchedule"}]},
            },
            [
                (
                    "spec.tolerations",
                    "operator must be Exists when 'key' is empty, "
                    "which means 'match all values and all keys'",
                )
            ],
        ),
        (
            "tolerationSeconds needs NoExecute",
            {
                **FLAVOR,
                "spec": {"tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]},
            },
            [("spec.tolerations", "effect must be 'NoExecute' when 'tolerationSeconds' is set")],
        ),
        (
            "the hostname level is the lowest",
            {
                **TOPOLOGY,
                "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "rack"}]},
            },
            [
                (
                    "spec.levels",
                    "the kubernetes.io/hostname label can only be used at the lowest level of topology",
                )
            ],
        ),
        (
            "topology levels are unique",
            {**TOPOLOGY, "spec": {"levels": [{"nodeLabel": "rack"}, {"nodeLabel": "rack"}]}},
            [("spec.levels", "must be unique")],
        ),
    ],
)
def test_kueue_cel_rules_are_evaluated(
    name: str, obj: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    found = check_objects({"20-kueue.yaml": [obj]}, "1.33")
    assert [(p.field, p.message) for p in found] == expected, name
