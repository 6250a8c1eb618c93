"""gpuq.api.convert: manifests to the core model, compared as whole objects."""

from __future__ import annotations

import textwrap
from fractions import Fraction
from pathlib import Path

import pytest

from gpuq.api.loader import LoadResult, load
from gpuq.core import model as core

CONFIG = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
spec:
  nodeLabels: {gpu: a100}
  nodeTaints: [{key: gpu, value: "true", effect: NoSchedule}]
  tolerations: [{key: spot, operator: Exists}]
  topologyName: dc
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: dc}
spec:
  levels: [{nodeLabel: cloud.com/block}, {nodeLabel: kubernetes.io/hostname}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  cohortName: team
  queueingStrategy: StrictFIFO
  stopPolicy: Hold
  namespaceSelector:
    matchLabels: {tier: ml}
    matchExpressions: [{key: env, operator: In, values: [prod]}]
  preemption:
    withinClusterQueue: LowerPriority
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
  flavorFungibility:
    whenCanBorrow: TryNextFlavor
    whenCanPreempt: TryNextFlavor
    preference: PreemptionOverBorrowing
  fairSharing: {weight: "0.1"}
  admissionChecksStrategy:
    admissionChecks: [{name: prov, onFlavors: [a100]}]
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: 1500m}
      - {name: memory, nominalQuota: 64Gi, lendingLimit: 32Gi}
      - {name: nvidia.com/gpu, nominalQuota: 8, borrowingLimit: 4}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: team}
spec:
  parentName: org
  fairSharing: {weight: 2}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: 2}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: org}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: ml}
spec: {clusterQueue: cq, stopPolicy: HoldAndDrain}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: prov}
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters: {apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: prc}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ProvisioningRequestConfig
metadata: {name: prc}
spec:
  provisioningClassName: queued-provisioning.gke.io
  managedResources: [nvidia.com/gpu]
---
apiVersion: v1
kind: Namespace
metadata:
  name: ml
  labels: {tier: ml, env: prod}
"""


def load_text(tmp_path: Path, text: str, name: str = "m.yaml") -> LoadResult:
    file = tmp_path / name
    file.write_text(textwrap.dedent(text))
    return load([str(file)])


def loaded_config(tmp_path: Path, text: str) -> core.ClusterConfig:
    result = load_text(tmp_path, text)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    assert result.config is not None
    return result.config


def test_configuration_objects_convert_exactly(tmp_path: Path) -> None:
    config = loaded_config(tmp_path, CONFIG)
    assert config.flavors == {
        "a100": core.ResourceFlavor(
            name="a100",
            node_labels={"gpu": "a100"},
            node_taints=(core.Taint("gpu", "true", "NoSchedule"),),
            tolerations=(core.Toleration(key="spot", operator="Exists"),),
            topology_name="dc",
        )
    }
    assert config.cluster_queues == {
        "cq": core.ClusterQueue(
            name="cq",
            resource_groups=(
                core.ResourceGroup(
                    covered_resources=("cpu", "memory", "nvidia.com/gpu"),
                    flavors=(
                        core.FlavorQuotas(
                            "a100",
                            {
                                "cpu": core.ResourceQuota(1500),
                                "memory": core.ResourceQuota(64 * 2**30, lending_limit=32 * 2**30),
                                "nvidia.com/gpu": core.ResourceQuota(8, borrowing_limit=4),
                            },
                        ),
                    ),
                ),
            ),
            cohort="team",
            queueing_strategy=core.QueueingStrategy.STRICT_FIFO,
            namespace_selector=core.LabelSelector(
                {"tier": "ml"}, (core.Requirement("env", "In", ("prod",)),)
            ),
            preemption=core.Preemption(
                within_cluster_queue=core.PreemptionPolicy.LOWER_PRIORITY,
                reclaim_within_cohort=core.PreemptionPolicy.ANY,
                borrow_within_cohort=core.BorrowWithinCohort(core.PreemptionPolicy.LOWER_PRIORITY, 100),
            ),
            flavor_fungibility=core.FlavorFungibility(
                core.FungibilityPolicy.TRY_NEXT_FLAVOR,
                core.FungibilityPolicy.TRY_NEXT_FLAVOR,
                core.FungibilityPreference.PREEMPTION_OVER_BORROWING,
            ),
            fair_weight=Fraction(1, 10),
            admission_checks=(core.AdmissionCheckRule("prov", ("a100",)),),
            stop_policy=core.StopPolicy.HOLD,
        )
    }
    assert config.cohorts == {
        "org": core.Cohort("org"),
        "team": core.Cohort(
            "team",
            parent="org",
            resource_groups=(
                core.ResourceGroup(
                    ("nvidia.com/gpu",),
                    (core.FlavorQuotas("a100", {"nvidia.com/gpu": core.ResourceQuota(2)}),),
                ),
            ),
            fair_weight=Fraction(2),
        ),
    }
    assert config.local_queues == {
        ("ml", "lq"): core.LocalQueue("ml", "lq", "cq", core.StopPolicy.HOLD_AND_DRAIN)
    }
    assert config.admission_checks == {
        "prov": core.AdmissionCheck("prov", "kueue.x-k8s.io/provisioning-request")
    }
    assert config.namespace_labels == {
        "ml": {"tier": "ml", "env": "prod", "kubernetes.io/metadata.name": "ml"}
    }
    assert config.scheduler == core.SchedulerConfig(wait_for_pods_ready=KUEUE_WAIT_FOR_PODS_READY)


def test_defaults_match_kueue(tmp_path: Path) -> None:
    text = """\
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: ClusterQueue
    metadata: {name: cq}
    """
    assert loaded_config(tmp_path, text).cluster_queues["cq"] == core.ClusterQueue(name="cq")


KUEUE_WAIT_FOR_PODS_READY = core.WaitForPodsReady(
    enable=True,
    timeout_s=1800.0,
    recovery_timeout_s=1800.0,
    requeuing_timestamp=core.RequeuingTimestamp.EVICTION,
)
"""Kueue v0.19's defaultWaitForPodsReady (pkg/config/config_test.go): what an empty or absent
Configuration runs with."""

CONFIGURATIONS = [
    (
        "empty config",  # pkg/config/config_test.go: every default, waitForPodsReady on
        """\
        apiVersion: config.kueue.x-k8s.io/v1beta2
        kind: Configuration
        """,
        core.SchedulerConfig(wait_for_pods_ready=KUEUE_WAIT_FOR_PODS_READY),
    ),
    (
        "v1beta2 presence enables fair sharing and waitForPodsReady",
        """\
        apiVersion: config.kueue.x-k8s.io/v1beta2
        kind: Configuration
        fairSharing: {preemptionStrategies: [LessThanInitialShare]}
        waitForPodsReady:
          timeout: 1h30m
          blockAdmission: true
          requeuingStrategy: {backoffBaseSeconds: 10, backoffMaxSeconds: 100, backoffLimitCount: 5}
        featureGates: {PartialAdmission: false, TopologyAwareScheduling: true}
        queueVisibility: {updateIntervalSeconds: 5}
        """,
        core.SchedulerConfig(
            fair_sharing=core.FairSharing(True, (core.FairSharingStrategy.LESS_THAN_INITIAL_SHARE,)),
            partial_admission=False,
            wait_for_pods_ready=core.WaitForPodsReady(True, 5400.0, True, 10.0, 100.0, 5, 5400.0),
            feature_gates={"PartialAdmission": False, "TopologyAwareScheduling": True},
        ),
    ),
    (
        "waitForPodsReady enabled config",  # pkg/config/config_test.go's waitForPodsReady-enabled.yaml
        """\
        apiVersion: config.kueue.x-k8s.io/v1beta2
        kind: Configuration
        waitForPodsReady:
          timeout: 50s
          blockAdmission: true
          recoveryTimeout: 3m
          requeuingStrategy:
            timestamp: Creation
            backoffLimitCount: 10
            backoffBaseSeconds: 30
            backoffMaxSeconds: 1800
        """,
        core.SchedulerConfig(
            wait_for_pods_ready=core.WaitForPodsReady(
                True, 50.0, True, 30.0, 1800.0, 10, 180.0, core.RequeuingTimestamp.CREATION
            )
        ),
    ),
    (
        "v1beta2 timeout 0s is defaulted to 30 minutes and recoveryTimeout 0s turns recovery off",
        """\
        apiVersion: config.kueue.x-k8s.io/v1beta2
        kind: Configuration
        waitForPodsReady: {timeout: 0s, recoveryTimeout: 0s, requeuingStrategy: {backoffBaseSeconds: 0}}
        """,
        core.SchedulerConfig(
            wait_for_pods_ready=core.WaitForPodsReady(True, 1800.0, requeuing_backoff_base_s=0.0)
        ),
    ),
    (
        "waitforpodsready.Enabled() is false when DisableWaitForPodsReady feature gate is enabled",
        """\
        apiVersion: config.kueue.x-k8s.io/v1beta2
        kind: Configuration
        waitForPodsReady: {timeout: 5m}
        featureGates: {DisableWaitForPodsReady: true}
        """,
        core.SchedulerConfig(feature_gates={"DisableWaitForPodsReady": True}),
    ),
    (
        "with WaitForPodsReady disabled",  # apis/config/v1beta1/configuration_conversion_test.go
        """\
        apiVersion: config.kueue.x-k8s.io/v1beta1
        kind: Configuration
        fairSharing: {enable: true}
        waitForPodsReady: {timeout: 30s}
        """,
        core.SchedulerConfig(fair_sharing=core.FairSharing(True)),
    ),
    (
        "v1beta1 without waitForPodsReady leaves it off",
        """\
        apiVersion: config.kueue.x-k8s.io/v1beta1
        kind: Configuration
        """,
        core.SchedulerConfig(),
    ),
    (
        "with WaitForPodsReady",  # v1beta1 conversion: five minutes, blockAdmission true
        """\
        apiVersion: config.kueue.x-k8s.io/v1beta1
        kind: Configuration
        waitForPodsReady: {enable: true}
        """,
        core.SchedulerConfig(
            wait_for_pods_ready=core.WaitForPodsReady(
                enable=True, timeout_s=300.0, block_admission=True, recovery_timeout_s=300.0
            )
        ),
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in CONFIGURATIONS], ids=[c[0] for c in CONFIGURATIONS]
)
def test_configuration(tmp_path: Path, text: str, expected: core.SchedulerConfig) -> None:
    assert loaded_config(tmp_path, text).scheduler == expected


WAIT_PROBLEMS = [
    (
        "enable is not a v1beta2 field",
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nwaitForPodsReady: {enable: false}\n",
        ["waitForPodsReady.enable"],
    ),
    (
        "negative timeout, recoveryTimeout and requeuing counts",  # pkg/config/validation_test.go
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nwaitForPodsReady:\n"
        "  timeout: -1\n  recoveryTimeout: -1\n"
        "  requeuingStrategy: {backoffLimitCount: -1, backoffBaseSeconds: -1, backoffMaxSeconds: -1}\n",
        [
            "waitForPodsReady.timeout",
            "waitForPodsReady.recoveryTimeout",
            "waitForPodsReady.requeuingStrategy.backoffBaseSeconds",
            "waitForPodsReady.requeuingStrategy.backoffLimitCount",
            "waitForPodsReady.requeuingStrategy.backoffMaxSeconds",
        ],
    ),
    (
        "v1beta1 enabled with a zero timeout must be specified",
        "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
        "waitForPodsReady: {enable: true, timeout: 0s}\n",
        ["waitForPodsReady.timeout"],
    ),
    (
        "v1beta1 disabled is not validated",
        "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nwaitForPodsReady: {timeout: -1}\n",
        [],
    ),
]


@pytest.mark.parametrize(
    ("text", "fields"), [c[1:] for c in WAIT_PROBLEMS], ids=[c[0] for c in WAIT_PROBLEMS]
)
def test_wait_for_pods_ready_validation(tmp_path: Path, text: str, fields: list[str]) -> None:
    result = load_text(tmp_path, text)
    assert [(e.kind, e.field) for e in result.errors] == [("Configuration", f) for f in fields]
    assert all(str(tmp_path / "m.yaml") in str(e) for e in result.errors)


def test_bad_duration_is_a_type_error(tmp_path: Path) -> None:
    text = (
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nwaitForPodsReady: {timeout: soon}\n"
    )
    result = load_text(tmp_path, text)
    assert [(e.field, "is not a duration" in e.message) for e in result.errors] == [
        ("waitForPodsReady.timeout", True)
    ]


QUEUE = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu, pods]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: 100}
      - {name: memory, nominalQuota: 1Ti}
      - {name: nvidia.com/gpu, nominalQuota: 64}
      - {name: pods, nominalQuota: 100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: ml}
spec: {clusterQueue: cq}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: pod-high}
value: 500
"""

WORKLOAD = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  name: train
  namespace: ml
  uid: u-1
  creationTimestamp: 2024-05-01T12:00:00Z
spec:
  queueName: lq
  active: false
  podSets:
  - name: launcher
    template:
      spec:
        containers: [{name: c, resources: {requests: {cpu: 250m}}}]
  - name: workers
    count: 4
    minCount: 2
    template:
      spec:
        nodeSelector: {gpu: a100}
        tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
              - matchExpressions:
                - {key: zone, operator: In, values: [a, b]}
                - {key: spot, operator: DoesNotExist}
              - matchExpressions: [{key: zone, operator: NotIn, values: [c]}]
        initContainers: [{name: init, resources: {requests: {cpu: "8"}}}]
        overhead: {memory: 1Gi}
        containers:
        - name: c
          resources:
            requests: {cpu: "2", memory: 10Gi}
            limits: {nvidia.com/gpu: 8}
status:
  admission:
    clusterQueue: cq
    podSetAssignments:
    - name: launcher
      flavors: {cpu: a100}
      resourceUsage: {cpu: 250m}
    - name: workers
      count: 2
      flavors: {cpu: a100, memory: a100, nvidia.com/gpu: a100}
      resourceUsage: {cpu: "16", memory: 22Gi, nvidia.com/gpu: "16"}
  conditions:
  - {type: QuotaReserved, status: "True", lastTransitionTime: "2024-05-01T12:01:00Z"}
  admissionChecks: [{name: prov, state: Ready}]
  requeueState: {count: 1, requeueAt: "2024-05-01T13:00:00Z"}
"""

T0 = 1714564800.0  # 2024-05-01T12:00:00Z


def test_workload_converts_exactly(tmp_path: Path) -> None:
    result = load_text(tmp_path, QUEUE + "---\n" + WORKLOAD)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    (workload,) = result.workloads
    assert workload == core.Workload(
        namespace="ml",
        name="train",
        queue_name="lq",
        pod_sets=(
            core.PodSet("launcher", 1, {"cpu": 250}),
            core.PodSet(
                "workers",
                4,
                {"cpu": 8000, "memory": 11 * 2**30, "nvidia.com/gpu": 8},
                min_count=2,
                node_selector={"gpu": "a100"},
                node_affinity=(
                    (core.Requirement("zone", "In", ("a", "b")), core.Requirement("spot", "DoesNotExist")),
                    (core.Requirement("zone", "NotIn", ("c",)),),
                ),
                tolerations=(core.Toleration("gpu", "Exists", "", "NoSchedule"),),
            ),
        ),
        priority=0,
        creation_time=T0,
        uid="u-1",
        active=False,
        admission=core.Admission(
            "cq",
            (
                core.PodSetAssignment("launcher", {"cpu": "a100"}, {"cpu": 250}, 1),
                core.PodSetAssignment(
                    "workers",
                    {"cpu": "a100", "memory": "a100", "nvidia.com/gpu": "a100"},
                    {"cpu": 16000, "memory": 22 * 2**30, "nvidia.com/gpu": 16},
                    2,
                ),
            ),
        ),
        quota_reserved_time=T0 + 60,
        admission_checks={"prov": core.CheckState.READY},
        requeue_at=T0 + 3600,
    )


def _priority_workload(spec_lines: str) -> str:
    """A Workload of v1beta1 when it names its class as v1beta1 does (``priorityClassName``): v1beta2
    has only ``priorityClassRef``, and drops the other (a warning)."""
    version = "v1beta1" if "priorityClassName" in spec_lines else "v1beta2"
    return (
        textwrap.dedent(
            f"""\
        apiVersion: kueue.x-k8s.io/{version}
        kind: Workload
        metadata: {{name: w, namespace: ml}}
        spec:
          queueName: lq
        """
        )
        + textwrap.indent(textwrap.dedent(spec_lines), "  ")
        + "  podSets: [{name: main, template: {spec: {}}}]\n"
    )


GLOBAL_DEFAULT = """\
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: default}
value: 7
globalDefault: true
"""

PRIORITIES = [
    ("no class means priority zero", "", "", 0),
    ("no class takes the global default", "", GLOBAL_DEFAULT, 7),
    ("a workload priority class by name", "priorityClassName: high\n", "", 1000),
    (
        "a pod priority class by source",
        "priorityClassName: pod-high\npriorityClassSource: scheduling.k8s.io/priorityclass\n",
        "",
        500,
    ),
    (
        "a v1beta2 priority class reference",
        "priorityClassRef: {group: kueue.x-k8s.io, kind: WorkloadPriorityClass, name: high}\n",
        "",
        1000,
    ),
    ("an explicit priority wins over the class", "priorityClassName: high\npriority: 3\n", GLOBAL_DEFAULT, 3),
]


@pytest.mark.parametrize(
    ("spec", "extra", "priority"), [p[1:] for p in PRIORITIES], ids=[p[0] for p in PRIORITIES]
)
def test_priority_resolution(tmp_path: Path, spec: str, extra: str, priority: int) -> None:
    result = load_text(tmp_path, QUEUE + "---\n" + _priority_workload(spec) + extra)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    assert [w.priority for w in result.workloads] == [priority]


def test_unquoted_and_quoted_timestamps_agree(tmp_path: Path) -> None:
    quoted = WORKLOAD.replace(
        "creationTimestamp: 2024-05-01T12:00:00Z", 'creationTimestamp: "2024-05-01T12:00:00Z"'
    )
    result = load_text(tmp_path, QUEUE + "---\n" + quoted)
    assert [w.creation_time for w in result.workloads] == [T0]


def test_bad_timestamp_is_a_type_error(tmp_path: Path) -> None:
    text = WORKLOAD.replace("creationTimestamp: 2024-05-01T12:00:00Z", "creationTimestamp: yesterday")
    result = load_text(tmp_path, QUEUE + "---\n" + text)
    assert [e.field for e in result.errors] == ["metadata.creationTimestamp"]


def test_an_admission_without_resource_usage_is_counted_from_the_pod_sets(tmp_path: Path) -> None:
    """A hand-written ``status.admission`` may leave out ``resourceUsage``: per-pod requests × count."""
    text = WORKLOAD.replace("      resourceUsage: {cpu: 250m}\n", "").replace(
        '      resourceUsage: {cpu: "16", memory: 22Gi, nvidia.com/gpu: "16"}\n', ""
    )
    result = load_text(tmp_path, QUEUE + "---\n" + text)
    assert result.errors == (), "\n".join(map(str, result.diagnostics))
    (workload,) = result.workloads
    assert workload.admission is not None
    launcher, workers = workload.admission.pod_set_assignments
    assert launcher.resource_usage == {"cpu": 250}
    assert workers.resource_usage == {"cpu": 16000, "memory": 22 * 2**30, "nvidia.com/gpu": 16}
