"""gpuq.api.validation: every webhook and whole-configuration rule, one or more cases each."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.api.diagnostics import Diagnostic
from gpuq.api.loader import LoadResult, load
from gpuq.core import model as core
from gpuq.core.admission import Scheduler
from gpuq.core.cycles import pending_reasons, run_cycles
from gpuq.core.quota import potential_available_for

KUEUE = "kueue.x-k8s.io/v1beta2"
Docs = dict[str, dict[str, Any]]


def base_docs() -> Docs:
    """A valid configuration: flavor a100, ClusterQueue cq (cohort team), LocalQueue ml/lq, Workload train."""
    return {
        "rf": {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "a100"}, "spec": {}},
        "cq": {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "cohortName": "team",
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "a100",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 64},
                                    {"name": "nvidia.com/gpu", "nominalQuota": 8},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        "lq": {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "ml"},
            "spec": {"clusterQueue": "cq"},
        },
        "wl": {
            "apiVersion": KUEUE,
            "kind": "Workload",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {
                "queueName": "lq",
                "podSets": [
                    {
                        "name": "main",
                        "count": 2,
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "c",
                                        "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": 2}},
                                    }
                                ]
                            }
                        },
                    }
                ],
            },
        },
    }


_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def put(doc: dict[str, Any], path: str, value: Any) -> None:
    """Set ``doc`` at a dotted path like ``spec.resourceGroups[0].flavors[0].name`` (creating maps)."""
    steps: list[str | int] = [int(i) if i else k for k, i in _STEP.findall(path)]
    node: Any = doc
    for step in steps[:-1]:
        node = node[step] if isinstance(step, int) else node.setdefault(step, {})
    node[steps[-1]] = value


def load_docs(tmp_path: Path, docs: Docs, *, strict: bool = False) -> LoadResult:
    file = tmp_path / "config.yaml"
    file.write_text(yaml.safe_dump_all(list(docs.values()), sort_keys=False))
    return load([str(file)], strict=strict)


def quota(name: str, nominal: Any, **limits: Any) -> dict[str, Any]:
    return {"name": name, "nominalQuota": nominal, **limits}


def gpu_quota(**limits: Any) -> Callable[[Docs], None]:
    def mutate(d: Docs) -> None:
        put(d["cq"], "spec.resourceGroups[0].flavors[0].resources[1]", quota("nvidia.com/gpu", 8, **limits))

    return mutate


def add(key: str, doc: dict[str, Any]) -> Callable[[Docs], None]:
    def mutate(d: Docs) -> None:
        d[key] = doc

    return mutate


def setting(key: str, path: str, value: Any) -> Callable[[Docs], None]:
    def mutate(d: Docs) -> None:
        put(d[key], path, value)

    return mutate


def both(*mutations: Callable[[Docs], None]) -> Callable[[Docs], None]:
    def mutate(d: Docs) -> None:
        for m in mutations:
            m(d)

    return mutate


def drop_cohort(d: Docs) -> None:
    del d["cq"]["spec"]["cohortName"]


def second_group(covered: list[str], flavor: str, resources: list[dict[str, Any]]) -> Callable[[Docs], None]:
    def mutate(d: Docs) -> None:
        d["cq"]["spec"]["resourceGroups"].append(
            {"coveredResources": covered, "flavors": [{"name": flavor, "resources": resources}]}
        )

    return mutate


def cohort(name: str, parent: str | None = None, **spec: Any) -> dict[str, Any]:
    body = {**spec, **({"parentName": parent} if parent else {})}
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": name}, "spec": body}


def many_groups(d: Docs) -> None:
    d["cq"]["spec"]["resourceGroups"] = [
        {
            "coveredResources": [f"example.com/r{i}"],
            "flavors": [{"name": f"f{i}", "resources": [quota(f"example.com/r{i}", 1)]}],
        }
        for i in range(17)
    ]


def two_min_counts(d: Docs) -> None:
    ps = d["wl"]["spec"]["podSets"]
    ps[0]["minCount"] = 1
    ps.append({**copy.deepcopy(ps[0]), "name": "worker"})


def duplicate_pod_set(d: Docs) -> None:
    ps = d["wl"]["spec"]["podSets"]
    ps.append(copy.deepcopy(ps[0]))


CONTAINER = "spec.podSets[0].template.spec.containers[0]"

# id, mutation, (kind, name, field, message substring)
AFS_CONFIG = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"}


CASES: list[tuple[str, Callable[[Docs], None], tuple[str, str, str, str]]] = [
    (
        "a backfill annotation that is not true or false is rejected",
        setting("cq", "metadata.annotations", {"gpuq.dev/backfill": "yes"}),
        ("ClusterQueue", "cq", "metadata.annotations[gpuq.dev/backfill]", 'must be "true" or "false"'),
    ),
    (
        "an unknown victim order is rejected",
        setting("cq", "metadata.annotations", {"gpuq.dev/victim-order": "newest"}),
        (
            "ClusterQueue",
            "cq",
            "metadata.annotations[gpuq.dev/victim-order]",
            'must be "kueue" or "lost-work"',
        ),
    ),
    (
        "an invalid flavor name is rejected",
        setting("rf", "metadata.name", "A100_GPU"),
        ("ResourceFlavor", "A100_GPU", "metadata.name", "RFC 1123 subdomain"),
    ),
    (
        "a missing object name is required",
        setting("rf", "metadata", {}),
        ("ResourceFlavor", "", "metadata.name", "is required"),
    ),
    (
        "an invalid namespace is rejected",
        setting("lq", "metadata.namespace", "ML.team"),
        ("LocalQueue", "lq", "metadata.namespace", "RFC 1123 label"),
    ),
    (
        "an invalid cohort name is rejected",
        setting("cq", "spec.cohortName", "Team!"),
        ("ClusterQueue", "cq", "spec.cohortName", "invalid cohort name"),
    ),
    (
        "a resource covered by two groups is rejected",
        second_group(["cpu"], "b200", [quota("cpu", 1)]),
        (
            "ClusterQueue",
            "cq",
            "spec.resourceGroups[1].coveredResources[0]",
            "already covered by resource group 0",
        ),
    ),
    (
        "a flavor in two groups is rejected",
        second_group(["memory"], "a100", [quota("memory", "1Gi")]),
        (
            "ClusterQueue",
            "cq",
            "spec.resourceGroups[1].flavors[0].name",
            "already appears in resource group 0",
        ),
    ),
    (
        "a flavor missing a covered resource is rejected",
        setting("cq", "spec.resourceGroups[0].flavors[0].resources", [quota("cpu", 1)]),
        ("ClusterQueue", "cq", "spec.resourceGroups[0].flavors[0].resources", "same number of resources"),
    ),
    (
        "flavor resources in another order are rejected",
        setting(
            "cq",
            "spec.resourceGroups[0].flavors[0].resources",
            [quota("nvidia.com/gpu", 8), quota("cpu", 64)],
        ),
        ("ClusterQueue", "cq", "spec.resourceGroups[0].flavors[0].resources[0].name", "expected 'cpu'"),
    ),
    (
        "an empty covered resources list is rejected",
        second_group([], "b200", []),
        ("ClusterQueue", "cq", "spec.resourceGroups[1].coveredResources", "at least 1 item"),
    ),
    (
        "more than sixteen resource groups are rejected",
        many_groups,
        ("ClusterQueue", "cq", "spec.resourceGroups", "at most 16 items"),
    ),
    (
        "an invalid resource name is rejected",
        second_group(["bad name"], "b200", [quota("bad name", 1)]),
        ("ClusterQueue", "cq", "spec.resourceGroups[1].coveredResources[0]", "invalid resource name"),
    ),
    (
        "a negative nominal quota is rejected",
        setting("cq", "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "-1"),
        (
            "ClusterQueue",
            "cq",
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "greater than or equal to 0",
        ),
    ),
    (
        "a negative borrowing limit is rejected",
        gpu_quota(borrowingLimit=-2),
        (
            "ClusterQueue",
            "cq",
            "spec.resourceGroups[0].flavors[0].resources[1].borrowingLimit",
            "greater than or equal to 0",
        ),
    ),
    (
        "a negative lending limit is rejected",
        gpu_quota(lendingLimit="-500m"),
        (
            "ClusterQueue",
            "cq",
            "spec.resourceGroups[0].flavors[0].resources[1].lendingLimit",
            "greater than or equal to 0",
        ),
    ),
    (
        "a borrowing limit without a cohort is rejected",
        both(drop_cohort, gpu_quota(borrowingLimit=2)),
        (
            "ClusterQueue",
            "cq",
            "spec.resourceGroups[0].flavors[0].resources[1].borrowingLimit",
            "must be nil when cohort is empty",
        ),
    ),
    (
        "a lending limit without a cohort is rejected",
        both(drop_cohort, gpu_quota(lendingLimit=2)),
        (
            "ClusterQueue",
            "cq",
            "spec.resourceGroups[0].flavors[0].resources[1].lendingLimit",
            "must be nil when cohort is empty",
        ),
    ),
    (
        "a lending limit above the nominal quota is rejected",
        gpu_quota(lendingLimit=9),
        (
            "ClusterQueue",
            "cq",
            "spec.resourceGroups[0].flavors[0].resources[1].lendingLimit",
            "less than or equal to the nominalQuota",
        ),
    ),
    (
        "borrowing preemption without reclaim is rejected",
        setting(
            "cq",
            "spec.preemption",
            {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}},
        ),
        (
            "ClusterQueue",
            "cq",
            "spec.preemption",
            "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
        ),
    ),
    (
        "a negative fair sharing weight is rejected",
        setting("cq", "spec.fairSharing", {"weight": "-1"}),
        ("ClusterQueue", "cq", "spec.fairSharing.weight", "greater than or equal to 0"),
    ),
    (
        "a vanishing fair sharing weight is rejected",
        setting("cq", "spec.fairSharing", {"weight": "1n"}),
        ("ClusterQueue", "cq", "spec.fairSharing.weight", "weight must be > 1e-9"),
    ),
    (
        "a preference needs both fungibility policies to try the next flavor",
        setting(
            "cq",
            "spec.flavorFungibility",
            {"whenCanPreempt": "MayStopSearch", "preference": "PreemptionOverBorrowing"},
        ),
        (
            "ClusterQueue",
            "cq",
            "spec.flavorFungibility.preference",
            "requires both whenCanBorrow and whenCanPreempt",
        ),
    ),
    (
        "an unknown queueing strategy is rejected",
        setting("cq", "spec.queueingStrategy", "LIFO"),
        ("ClusterQueue", "cq", "spec.queueingStrategy", "'StrictFIFO' or 'BestEffortFIFO'"),
    ),
    (
        "an unknown reclaim policy is rejected",
        setting("cq", "spec.preemption", {"reclaimWithinCohort": "LowerOrNewerEqualPriority"}),
        ("ClusterQueue", "cq", "spec.preemption.reclaimWithinCohort", "'Never', 'LowerPriority' or 'Any'"),
    ),
    (
        "an unknown fungibility policy is rejected",
        setting("cq", "spec.flavorFungibility", {"whenCanBorrow": "Sometimes"}),
        ("ClusterQueue", "cq", "spec.flavorFungibility.whenCanBorrow", "MayStopSearch"),
    ),
    (
        "an unknown stop policy is rejected",
        setting("lq", "spec.stopPolicy", "Pause"),
        ("LocalQueue", "lq", "spec.stopPolicy", "'None', 'Hold' or 'HoldAndDrain'"),
    ),
    (
        "a namespace selector expression without values is rejected",
        setting("cq", "spec.namespaceSelector", {"matchExpressions": [{"key": "team", "operator": "In"}]}),
        ("ClusterQueue", "cq", "spec.namespaceSelector.matchExpressions[0].values", "must be specified"),
    ),
    (
        "a malformed quantity is a type error at its field",
        setting("cq", "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "lots"),
        (
            "ClusterQueue",
            "cq",
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "is not a quantity",
        ),
    ),
    (
        "a missing nominal quota is required",
        setting("cq", "spec.resourceGroups[0].flavors[0].resources[0]", {"name": "cpu"}),
        ("ClusterQueue", "cq", "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "is required"),
    ),
    (
        "duplicate taints are rejected",
        setting(
            "rf",
            "spec.nodeTaints",
            [{"key": "gpu", "effect": "NoSchedule"}, {"key": "gpu", "value": "x", "effect": "NoSchedule"}],
        ),
        ("ResourceFlavor", "a100", "spec.nodeTaints[1]", "unique by key and effect"),
    ),
    (
        "an invalid taint effect is rejected",
        setting("rf", "spec.nodeTaints", [{"key": "gpu", "effect": "Sometimes"}]),
        ("ResourceFlavor", "a100", "spec.nodeTaints[0].effect", "NoSchedule"),
    ),
    (
        "an invalid node label key is rejected",
        setting("rf", "spec.nodeLabels", {"bad key!": "x"}),
        ("ResourceFlavor", "a100", "spec.nodeLabels[bad key!]", "invalid label key"),
    ),
    (
        "a toleration with Exists and a value is rejected",
        setting("rf", "spec.tolerations", [{"key": "gpu", "operator": "Exists", "value": "x"}]),
        ("ResourceFlavor", "a100", "spec.tolerations[0].value", "must be empty when operator is Exists"),
    ),
    (
        "a workload without pod sets is rejected",
        setting("wl", "spec.podSets", []),
        ("Workload", "train", "spec.podSets", "at least 1 item"),
    ),
    (
        "duplicate pod set names are rejected",
        duplicate_pod_set,
        ("Workload", "train", "spec.podSets[1].name", "duplicate pod set name 'main'"),
    ),
    (
        "an invalid pod set name is rejected",
        setting("wl", "spec.podSets[0].name", "Main"),
        ("Workload", "train", "spec.podSets[0].name", "RFC 1123 label"),
    ),
    (
        "a negative count is rejected",
        setting("wl", "spec.podSets[0].count", -1),
        ("Workload", "train", "spec.podSets[0].count", "greater than or equal to 0"),
    ),
    (
        "a min count above count is rejected",
        setting("wl", "spec.podSets[0].minCount", 3),
        ("Workload", "train", "spec.podSets[0].minCount", "less or equal to count"),
    ),
    (
        "a zero min count is rejected",
        setting("wl", "spec.podSets[0].minCount", 0),
        ("Workload", "train", "spec.podSets[0].minCount", "should be positive"),
    ),
    (
        "two pod sets with min count are rejected",
        two_min_counts,
        ("Workload", "train", "spec.podSets", "at most one podSet can use minCount"),
    ),
    (
        "a negative request is rejected",
        setting("wl", f"{CONTAINER}.resources.requests.cpu", "-1"),
        ("Workload", "train", f"{CONTAINER}.resources.requests.cpu", "greater than or equal to 0"),
    ),
    (
        "a malformed request is rejected",
        setting("wl", f"{CONTAINER}.resources.limits", {"memory": "1GB"}),
        ("Workload", "train", f"{CONTAINER}.resources.limits.memory", "is not a quantity"),
    ),
    (
        "requesting the reserved pods resource is rejected",
        setting("wl", f"{CONTAINER}.resources.requests.pods", 1),
        ("Workload", "train", f"{CONTAINER}.resources.requests.pods", "reserved for internal kueue use"),
    ),
    (
        "a count that is not an integer is a type error",
        setting("wl", "spec.podSets[0].count", "two"),
        ("Workload", "train", "spec.podSets[0].count", "valid integer"),
    ),
    (
        "a duplicate object is reported",
        add("rf2", {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "a100"}}),
        ("ResourceFlavor", "a100", "", "duplicate ResourceFlavor: also defined at"),
    ),
    (
        "a local queue naming a missing cluster queue is rejected",
        setting("lq", "spec.clusterQueue", "nope"),
        ("LocalQueue", "lq", "spec.clusterQueue", "ClusterQueue 'nope' not found"),
    ),
    (
        "a cluster queue naming a missing flavor is rejected",
        setting("cq", "spec.resourceGroups[0].flavors[0].name", "h100"),
        ("ClusterQueue", "cq", "spec.resourceGroups[0].flavors[0].name", "ResourceFlavor 'h100' not found"),
    ),
    (
        "a cluster queue naming a missing admission check is rejected",
        setting("cq", "spec.admissionChecksStrategy", {"admissionChecks": [{"name": "prov"}]}),
        (
            "ClusterQueue",
            "cq",
            "spec.admissionChecksStrategy.admissionChecks[0].name",
            "AdmissionCheck 'prov' not found",
        ),
    ),
    (
        "a cohort cycle names its members",
        both(add("c1", cohort("team", "org")), add("c2", cohort("org", "team"))),
        ("Cohort", "org", "spec.parentName", "cohort cycle: org -> team -> org"),
    ),
    (
        "a usage half-life that is not a positive duration is rejected",
        add(
            "c1",
            {
                **cohort("team"),
                "metadata": {"name": "team", "annotations": {"gpuq.dev/usage-half-life": "0s"}},
            },
        ),
        ("Cohort", "team", "metadata.annotations[gpuq.dev/usage-half-life]", "not a positive duration"),
    ),
    (
        "a cohort that is its own parent is a cycle",
        add("c1", cohort("team", "team")),
        ("Cohort", "team", "spec.parentName", "cohort cycle: team -> team"),
    ),
    (
        "a cohort lending limit without a parent is rejected",
        add(
            "c1",
            cohort(
                "team",
                resourceGroups=[
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "a100", "resources": [quota("cpu", 1, lendingLimit=1)]}],
                    }
                ],
            ),
        ),
        (
            "Cohort",
            "team",
            "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit",
            "must be nil when parent is empty",
        ),
    ),
    (
        "a workload naming a missing workload priority class is rejected",
        setting(
            "wl",
            "spec.priorityClassRef",
            {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"},
        ),
        ("Workload", "train", "spec.priorityClassRef.name", "WorkloadPriorityClass 'high' not found"),
    ),
    (
        "a workload naming a missing pod priority class is rejected",
        setting(
            "wl",
            "spec.priorityClassRef",
            {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"},
        ),
        ("Workload", "train", "spec.priorityClassRef.name", "PriorityClass 'high' not found"),
    ),
    (
        "a flavor naming a missing topology is rejected",
        setting("rf", "spec.topologyName", "dc"),
        ("ResourceFlavor", "a100", "spec.topologyName", "Topology 'dc' not found"),
    ),
    (
        "a configuration with unsupported preemption strategies is rejected",
        add(
            "cfg",
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "kind": "Configuration",
                "fairSharing": {
                    "preemptionStrategies": ["LessThanInitialShare", "LessThanOrEqualToFinalShare"]
                },
            },
        ),
        ("Configuration", "", "fairSharing.preemptionStrategies", "unsupported combination"),
    ),
    (
        "an admission fair sharing half-life that is not a duration is rejected",
        add("cfg", {**AFS_CONFIG, "admissionFairSharing": {"usageHalfLifeTime": "a week"}}),
        ("Configuration", "", "admissionFairSharing.usageHalfLifeTime", "is not a duration"),
    ),
    (
        "a negative admission fair sharing half-life is rejected (Kueue's validateAdmissionFairSharing)",
        add("cfg", {**AFS_CONFIG, "admissionFairSharing": {"usageHalfLifeTime": -60}}),
        ("Configuration", "", "admissionFairSharing.usageHalfLifeTime", "must be greater than or equal to 0"),
    ),
    (
        "a negative admission fair sharing sampling interval is rejected",
        add(
            "cfg",
            {**AFS_CONFIG, "admissionFairSharing": {"usageHalfLifeTime": "1h", "usageSamplingInterval": -5}},
        ),
        ("Configuration", "", "admissionFairSharing.usageSamplingInterval", "must be greater than 0"),
    ),
    (
        "a negative admission fair sharing resource weight is rejected",
        add(
            "cfg",
            {
                **AFS_CONFIG,
                "admissionFairSharing": {
                    "usageHalfLifeTime": "1h",
                    "resourceWeights": {"nvidia.com/gpu": -1},
                },
            },
        ),
        (
            "Configuration",
            "",
            "admissionFairSharing.resourceWeights[nvidia.com/gpu]",
            "must be greater than or equal to 0",
        ),
    ),
    (
        "an unknown admission mode is rejected",
        setting("cq", "spec.admissionScope", {"admissionMode": "UsageBased"}),
        ("ClusterQueue", "cq", "spec.admissionScope.admissionMode", "UsageBasedAdmissionFairSharing"),
    ),
    (
        "a negative LocalQueue fair sharing weight is rejected",
        setting("lq", "spec.fairSharing", {"weight": "-1"}),
        ("LocalQueue", "lq", "spec.fairSharing.weight", "must be greater than or equal to 0"),
    ),
    (
        "a topology without levels is rejected",
        add(
            "topo",
            {"apiVersion": KUEUE, "kind": "Topology", "metadata": {"name": "dc"}, "spec": {"levels": []}},
        ),
        ("Topology", "dc", "spec.levels", "between 1 and 16 items"),
    ),
    (
        "two global default priority classes are rejected",
        both(
            add(
                "pc1",
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": "a"},
                    "value": 1,
                    "globalDefault": True,
                },
            ),
            add(
                "pc2",
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": "b"},
                    "value": 2,
                    "globalDefault": True,
                },
            ),
        ),
        ("PriorityClass", "b", "globalDefault", "only one PriorityClass may be globalDefault"),
    ),
]


def _match(diagnostic: Diagnostic, kind: str, name: str, field: str, message: str) -> bool:
    return (diagnostic.kind, diagnostic.name, diagnostic.field) == (
        kind,
        name,
        field,
    ) and message in diagnostic.message


def test_base_configuration_is_valid(tmp_path: Path) -> None:
    result = load_docs(tmp_path, base_docs())
    assert result.errors == () and result.warnings == ()
    assert result.config is not None and len(result.workloads) == 1


@pytest.mark.parametrize(("mutate", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule(tmp_path: Path, mutate: Callable[[Docs], None], expected: tuple[str, str, str, str]) -> None:
    docs = base_docs()
    mutate(docs)
    result = load_docs(tmp_path, docs, strict=True)  # as gpuq validate: the stays-pending findings too
    assert any(_match(d, *expected) for d in result.errors), "\n".join(map(str, result.diagnostics))
    assert result.config is None and result.workloads == ()
    assert all(d.path.endswith("config.yaml") and d.line >= 1 for d in result.errors)


def gpus_per_pod(count: int) -> Callable[[Docs], None]:
    def mutate(d: Docs) -> None:
        d["wl"]["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"][
            "nvidia.com/gpu"
        ] = count

    return mutate


def pods_quota(nominal: int) -> Callable[[Docs], None]:
    def mutate(d: Docs) -> None:
        group = d["cq"]["spec"]["resourceGroups"][0]
        group["coveredResources"].append("pods")
        group["flavors"][0]["resources"].append(quota("pods", nominal))

    return mutate


# id, mutation, (kind, name, field, message substring), the engine's pending message
NEVER_ADMITTED: list[tuple[str, Callable[[Docs], None], tuple[str, str, str, str], str]] = [
    (
        "a workload naming a missing local queue",
        setting("wl", "spec.queueName", "other"),
        ("Workload", "train", "spec.queueName", "LocalQueue 'other' not found in namespace 'ml'"),
        "LocalQueue other doesn't exist in namespace ml",
    ),
    (
        "a workload larger than any flavor can hold",
        setting("wl", "spec.podSets[0].count", 5),
        (
            "Workload",
            "train",
            "spec.podSets[0]",
            "needs 10 nvidia.com/gpu (5 pods) but cluster queue cq can never hold more than 8",
        ),
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor a100, "
        "request > maximum capacity (10 > 8)",
    ),
    (
        "a workload asking for 100,000 GPUs",
        gpus_per_pod(50_000),
        ("Workload", "train", "spec.podSets[0]", "needs 100000 nvidia.com/gpu (2 pods)"),
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor a100, "
        "request > maximum capacity (100000 > 8)",
    ),
    (
        "a workload whose min count can never fit",
        both(setting("wl", "spec.podSets[0].count", 6), setting("wl", "spec.podSets[0].minCount", 5)),
        ("Workload", "train", "spec.podSets[0]", "needs 10 nvidia.com/gpu (5 pods)"),
        "request > maximum capacity (12 > 8)",
    ),
    (
        "a request for a resource the cluster queue does not cover",
        setting("wl", f"{CONTAINER}.resources.requests.memory", "1Gi"),
        ("Workload", "train", "spec.podSets[0]", "cluster queue cq does not cover resource memory"),
        "couldn't assign flavors to pod set main: resource memory unavailable in ClusterQueue cq",
    ),
    (
        "more pods than the pods quota allows",
        pods_quota(1),
        (
            "Workload",
            "train",
            "spec.podSets[0]",
            "needs 2 pods (2 pods) but cluster queue cq can never hold more",
        ),
        "couldn't assign flavors to pod set main: insufficient quota for pods in flavor a100, "
        "request > maximum capacity (2 > 1)",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "expected"), [c[1:3] for c in NEVER_ADMITTED], ids=[c[0] for c in NEVER_ADMITTED]
)
def test_validate_reports_a_workload_kueue_never_admits_as_an_error(
    tmp_path: Path, mutate: Callable[[Docs], None], expected: tuple[str, str, str, str]
) -> None:
    docs = base_docs()
    mutate(docs)
    result = load_docs(tmp_path, docs, strict=True)
    (error,) = result.errors
    assert _match(error, *expected) and error.stays_pending, "\n".join(map(str, result.diagnostics))
    assert error.path.endswith("config.yaml") and error.line >= 1
    assert result.config is None and result.workloads == ()


@pytest.mark.parametrize(
    ("mutate", "expected", "pending"), [c[1:] for c in NEVER_ADMITTED], ids=[c[0] for c in NEVER_ADMITTED]
)
def test_the_other_verbs_load_a_workload_kueue_never_admits_and_leave_it_pending(
    tmp_path: Path, mutate: Callable[[Docs], None], expected: tuple[str, str, str, str], pending: str
) -> None:
    docs = base_docs()
    mutate(docs)
    result = load_docs(tmp_path, docs)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    (warning,) = [d for d in result.warnings if _match(d, *expected)]
    assert warning.message.endswith(": the workload stays pending (an error for gpuq validate)")
    assert result.config is not None
    scheduler = Scheduler(result.config)
    for workload in result.workloads:
        scheduler.submit(workload)
    run = run_cycles(scheduler)
    assert run.admitted == {}
    assert pending in run.pending["ml/train"].message


WARNINGS: list[tuple[str, Callable[[Docs], None], tuple[str, str, str, str]]] = [
    (
        "backfill on a BestEffortFIFO queue has no effect",
        setting("cq", "metadata.annotations", {"gpuq.dev/backfill": "true"}),
        (
            "ClusterQueue",
            "cq",
            "metadata.annotations[gpuq.dev/backfill]",
            "has no effect on a BestEffortFIFO queue",
        ),
    ),
    (
        "a usage half-life on a cohort with a parent has no effect",
        both(
            add("c0", cohort("org")),
            add(
                "c1",
                {
                    **cohort("team", "org"),
                    "metadata": {"name": "team", "annotations": {"gpuq.dev/usage-half-life": "6h"}},
                },
            ),
        ),
        ("Cohort", "team", "metadata.annotations[gpuq.dev/usage-half-life]", "root cohort's half-life"),
    ),
    (
        "an expected duration that is not a duration is ignored with a warning",
        setting("wl", "metadata.annotations", {"gpuq.dev/expected-duration": "soon"}),
        ("Workload", "train", "metadata.annotations[gpuq.dev/expected-duration]", "not a duration"),
    ),
    (
        "a workload without a queue name will never be admitted",
        setting("wl", "spec.queueName", ""),
        ("Workload", "train", "spec.queueName", "will never be admitted"),
    ),
    (
        "an unknown field is a warning naming its path",
        setting("cq", "spec.resourceGroups[0].flavors[0].colour", "blue"),
        ("ClusterQueue", "cq", "spec.resourceGroups[0].flavors[0].colour", "unknown field"),
    ),
    (
        "a namespace outside the cluster queue's selector is a warning",
        setting("cq", "spec.namespaceSelector", {"matchLabels": {"team": "ml"}}),
        ("Workload", "train", "spec.queueName", "is not selected by cluster queue 'cq'"),
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), [c[1:] for c in WARNINGS], ids=[c[0] for c in WARNINGS])
def test_warning(tmp_path: Path, mutate: Callable[[Docs], None], expected: tuple[str, str, str, str]) -> None:
    docs = base_docs()
    mutate(docs)
    result = load_docs(tmp_path, docs)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    assert any(_match(d, *expected) for d in result.warnings), "\n".join(map(str, result.diagnostics))
    assert result.config is not None


def test_duplicate_reports_both_locations(tmp_path: Path) -> None:
    docs = base_docs()
    docs["rf2"] = copy.deepcopy(docs["rf"])
    result = load_docs(tmp_path, docs)
    duplicates = [d for d in result.errors if "duplicate ResourceFlavor" in d.message]
    assert [d.line for d in duplicates] == sorted({d.line for d in duplicates}) and len(duplicates) == 2


def test_cohort_within_its_parent_capacity_fits(tmp_path: Path) -> None:
    docs = base_docs()
    put(docs["wl"], "spec.podSets[0].count", 5)  # needs 10 GPUs; cq has 8, its cohort peer lends 4
    peer = copy.deepcopy(docs["cq"])
    peer["metadata"]["name"] = "peer"
    put(peer, "spec.resourceGroups[0].flavors[0].resources[1]", quota("nvidia.com/gpu", 4))
    docs["peer"] = peer
    result = load_docs(tmp_path, docs)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))


def _cq(name: str, nominal: int, cohort: str | None = "c", **limits: int) -> core.ClusterQueue:
    quota = core.ResourceQuota(nominal, limits.get("borrowing"), limits.get("lending"))
    group = core.ResourceGroup(("gpu",), (core.FlavorQuotas("f", {"gpu": quota}),))
    return core.ClusterQueue(name, (group,), cohort=cohort)


POTENTIAL = [
    ("a queue without a cohort holds its nominal quota", [_cq("a", 9, None)], [], "a", 9),
    ("kueue docs example: A borrows what B lends", [_cq("a", 9), _cq("b", 12, lending=1)], [], "a", 10),
    ("kueue docs example: B borrows all of A", [_cq("a", 9), _cq("b", 12, lending=1)], [], "b", 21),
    ("a borrowing limit caps the potential", [_cq("a", 9, borrowing=2), _cq("b", 12)], [], "a", 11),
    (
        "a parent cohort's pool is reachable",
        [_cq("a", 1), _cq("b", 2, cohort="d")],
        [core.Cohort("c", parent="root"), core.Cohort("d", parent="root")],
        "a",
        3,
    ),
]


@pytest.mark.parametrize(
    ("queues", "cohorts", "queue", "expected"), [p[1:] for p in POTENTIAL], ids=[p[0] for p in POTENTIAL]
)
def test_potential_available(
    queues: list[core.ClusterQueue], cohorts: list[core.Cohort], queue: str, expected: int
) -> None:
    config = core.ClusterConfig(
        cluster_queues={q.name: q for q in queues}, cohorts={c.name: c for c in cohorts}
    )
    assert potential_available_for(config, queue, "f", "gpu") == expected


MISSING_REFERENCES = [
    pytest.param(setting("lq", "spec.clusterQueue", "nope"), "ClusterQueue nope doesn't exist", id="lq"),
    pytest.param(
        setting("cq", "spec.admissionChecksStrategy", {"admissionChecks": [{"name": "prov"}]}),
        "ClusterQueue cq is inactive: Can't admit new workloads: references missing AdmissionCheck(s): prov.",
        id="cq missing check",
    ),
]


@pytest.mark.parametrize(("mutate", "pending"), MISSING_REFERENCES)
def test_a_missing_queue_reference_leaves_the_workload_pending_outside_validate(
    tmp_path: Path, mutate: Callable[[Docs], None], pending: str
) -> None:
    """Kueue leaves a LocalQueue without its ClusterQueue, and a ClusterQueue without its
    AdmissionCheck, inactive: their workloads stay pending; only gpuq validate refuses them."""
    docs = base_docs()
    mutate(docs)
    result = load_docs(tmp_path, docs)
    assert not result.errors and result.config is not None
    assert any("its workloads stay pending" in d.message for d in result.warnings), result.warnings
    scheduler = Scheduler(result.config)
    for workload in result.workloads:
        scheduler.submit(workload)
    run_cycles(scheduler, now=0.0)
    assert [p.message for p in pending_reasons(scheduler).values()] == [pending]
