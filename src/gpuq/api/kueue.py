"""Typed models of the Kubernetes kinds gpuq reads: Kueue's API, its Configuration, PriorityClass, Namespace.

Field names, defaults and enum values follow Kueue's ``apis/kueue/v1beta2``
Go types; ``v1beta1`` (and ``v1alpha1`` Cohort / Topology) manifests are
converted to the v1beta2 shape before validation by :func:`upgrade` (the
renames of ``apis/kueue/v1beta1/*_conversion.go``). Quantities are exact
``Decimal`` values; durations are seconds; timestamps are seconds since the epoch.

Models of the user-facing spec derive from :class:`Strict`, whose unknown
fields are kept and later reported as warnings; status sections and pod
templates derive from :class:`Loose`, whose unknown fields are silently kept.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from gpuq.core.quantity import QuantityError, parse_quantity

KUEUE_GROUP = "kueue.x-k8s.io"
CONFIG_GROUP = "config.kueue.x-k8s.io"
WPC_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
POD_PC_SOURCE = "scheduling.k8s.io/priorityclass"


def _quantity(value: object) -> Decimal:
    try:
        return parse_quantity(value)
    except QuantityError as err:
        raise ValueError(str(err)) from None


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: object) -> float:
    """Parse a Go duration (``5m``, ``30s``, ``1h30m``, ``0``) into seconds; numbers are seconds."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a duration")
    text = value.strip()
    if text == "0":
        return 0.0
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{value!r} is not a duration (expected e.g. 30s, 5m, 1h30m)")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def parse_timestamp(value: object) -> float:
    """Parse an RFC 3339 timestamp (string or YAML datetime) into seconds since the epoch."""
    if isinstance(value, datetime):
        return value.timestamp() if value.tzinfo else value.replace(tzinfo=UTC).timestamp()
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not an RFC 3339 timestamp")
    if isinstance(value, int | float):
        return float(value)
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{value!r} is not an RFC 3339 timestamp (e.g. 2024-05-01T12:00:00Z)") from None
    return parse_timestamp(parsed)


Quantity = Annotated[Decimal, BeforeValidator(_quantity)]


def _non_negative(value: Decimal) -> Decimal:
    if value < 0:
        raise ValueError("must be greater than or equal to 0")
    return value


NonNegativeQuantity = Annotated[Decimal, BeforeValidator(_quantity), AfterValidator(_non_negative)]
"""A quota amount: checked with the object's other type errors, so every problem shows at once."""
Duration = Annotated[float, BeforeValidator(parse_duration)]
Timestamp = Annotated[float, BeforeValidator(parse_timestamp)]
StopPolicy = Literal["None", "Hold", "HoldAndDrain"]


class Strict(BaseModel):
    """A spec model: camelCase aliases; unknown fields kept (reported as warnings by the loader)."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)


class Loose(Strict):
    """A status or pass-through model: unknown fields are kept and never reported."""


# --- shared Kubernetes types -------------------------------------------------------------


class ObjectMeta(Strict):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str = ""
    creation_timestamp: Timestamp | None = None
    resource_version: Any = None
    generation: Any = None
    finalizers: Any = None
    owner_references: Any = None
    managed_fields: Any = None
    deletion_timestamp: Any = None
    deletion_grace_period_seconds: Any = None
    self_link: Any = None


class LabelSelectorRequirement(Strict):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class LabelSelector(Strict):
    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class Taint(Strict):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    time_added: Any = None


class Toleration(Strict):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""
    toleration_seconds: int | None = None


class NodeSelectorRequirement(Loose):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = Field(default_factory=list)


class NodeSelectorTerm(Loose):
    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list)
    match_fields: list[Any] = Field(default_factory=list)


class ContainerResources(Loose):
    requests: dict[str, Any] = Field(default_factory=dict)
    limits: dict[str, Any] = Field(default_factory=dict)


class Container(Loose):
    name: str = ""
    resources: ContainerResources = Field(default_factory=ContainerResources)
    restart_policy: str | None = None


class PodSpec(Loose):
    """The parts of a pod spec that admission reads; everything else passes through."""

    containers: list[Container] = Field(default_factory=list)
    init_containers: list[Container] = Field(default_factory=list)
    overhead: dict[str, Any] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    affinity: dict[str, Any] | None = None
    tolerations: list[Toleration] = Field(default_factory=list)


class PodTemplate(Loose):
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: PodSpec = Field(default_factory=PodSpec)


class Object(Strict):
    """Common envelope of every kind."""

    api_version: str
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    status: Any = None


# --- ResourceFlavor, ClusterQueue, Cohort ---------------------------------------------------


class ResourceFlavorSpec(Strict):
    node_labels: dict[str, str] = Field(default_factory=dict)
    node_taints: list[Taint] = Field(default_factory=list)
    tolerations: list[Toleration] = Field(default_factory=list)
    topology_name: str | None = None


class ResourceFlavor(Object):
    spec: ResourceFlavorSpec = Field(default_factory=ResourceFlavorSpec)


class ResourceQuota(Strict):
    name: str
    nominal_quota: NonNegativeQuantity
    borrowing_limit: NonNegativeQuantity | None = None
    lending_limit: NonNegativeQuantity | None = None


class FlavorQuotas(Strict):
    name: str
    resources: list[ResourceQuota] = Field(default_factory=list)


class ResourceGroup(Strict):
    covered_resources: list[str] = Field(default_factory=list)
    flavors: list[FlavorQuotas] = Field(default_factory=list)


class BorrowWithinCohort(Strict):
    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: int | None = None


class Preemption(Strict):
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = "Never"
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = "Never"
    borrow_within_cohort: BorrowWithinCohort | None = None


class FlavorFungibility(Strict):
    when_can_borrow: Literal["MayStopSearch", "TryNextFlavor"] = "MayStopSearch"
    when_can_preempt: Literal["MayStopSearch", "TryNextFlavor"] = "TryNextFlavor"
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = None


class FairSharingWeight(Strict):
    weight: Quantity | None = None


class AdmissionScope(Strict):
    """``spec.admissionScope`` (KEP-4136): required ``admissionMode``."""

    admission_mode: Literal["UsageBasedAdmissionFairSharing", "NoAdmissionFairSharing"]


class AdmissionCheckStrategyRule(Strict):
    name: str
    on_flavors: list[str] = Field(default_factory=list)


class AdmissionChecksStrategy(Strict):
    admission_checks: list[AdmissionCheckStrategyRule] = Field(default_factory=list)


class ClusterQueueSpec(Strict):
    resource_groups: list[ResourceGroup] = Field(default_factory=list)
    cohort_name: str | None = None
    queueing_strategy: Literal["StrictFIFO", "BestEffortFIFO"] = "BestEffortFIFO"
    namespace_selector: LabelSelector | None = None
    flavor_fungibility: FlavorFungibility = Field(default_factory=FlavorFungibility)
    preemption: Preemption = Field(default_factory=Preemption)
    admission_checks_strategy: AdmissionChecksStrategy | None = None
    stop_policy: StopPolicy = "None"
    fair_sharing: FairSharingWeight | None = None
    admission_scope: AdmissionScope | None = None
    concurrent_admission_policy: Any = None


class ClusterQueue(Object):
    spec: ClusterQueueSpec = Field(default_factory=ClusterQueueSpec)


class CohortSpec(Strict):
    parent_name: str | None = None
    resource_groups: list[ResourceGroup] = Field(default_factory=list)
    fair_sharing: FairSharingWeight | None = None


class Cohort(Object):
    spec: CohortSpec = Field(default_factory=CohortSpec)


class TopologyLevel(Strict):
    node_label: str


class TopologySpec(Strict):
    levels: list[TopologyLevel] = Field(default_factory=list)


class Topology(Object):
    spec: TopologySpec = Field(default_factory=TopologySpec)


# --- LocalQueue, priorities, checks ---------------------------------------------------------


class LocalQueueSpec(Strict):
    cluster_queue: str
    stop_policy: StopPolicy = "None"
    fair_sharing: FairSharingWeight | None = None


class AdmissionFairSharingStatus(Loose):
    consumed_resources: dict[str, Quantity] = Field(default_factory=dict)
    last_update: Timestamp | None = None


class LocalQueueFairSharingStatus(Loose):
    admission_fair_sharing_status: AdmissionFairSharingStatus | None = None


class LocalQueueStatus(Loose):
    """What Kueue persists of a LocalQueue that decisions read: its Admission Fair Sharing history
    (a restarted Kueue seeds its usage ledger from it; so does gpuq)."""

    fair_sharing: LocalQueueFairSharingStatus | None = None


class LocalQueue(Object):
    spec: LocalQueueSpec
    status: LocalQueueStatus | None = None


class WorkloadPriorityClass(Object):
    value: int
    description: str = ""


class PriorityClass(Object):
    value: int
    global_default: bool = False
    description: str = ""
    preemption_policy: str | None = None


class Namespace(Object):
    spec: Any = None


class AdmissionCheckParameters(Strict):
    api_group: str
    kind: str
    name: str


class AdmissionCheckSpec(Strict):
    controller_name: str
    parameters: AdmissionCheckParameters | None = None
    retry_delay_minutes: int | None = None


class AdmissionCheck(Object):
    spec: AdmissionCheckSpec


# --- MultiKueue (apis/kueue/v1beta2/multikueue_types.go) ------------------------------------
# Read and cross-checked; dispatch to worker clusters is not modelled (references.py warns).

MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"


class MultiKueueKubeConfig(Strict):
    location: Annotated[str, Field(min_length=1, max_length=256)]
    location_type: Literal["Secret", "Path"] = "Secret"


class ClusterProfileReference(Strict):
    name: Annotated[str, Field(min_length=1, max_length=256)]


class ClusterSource(Strict):
    """``+kubebuilder:validation:ExactlyOneOf=kubeConfig;clusterProfileRef``."""

    kube_config: MultiKueueKubeConfig | None = None
    cluster_profile_ref: ClusterProfileReference | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ClusterSource:
        if (self.kube_config is None) == (self.cluster_profile_ref is None):
            raise ValueError("exactly one of kubeConfig and clusterProfileRef must be set")
        return self


class MultiKueueClusterSpec(Strict):
    cluster_source: ClusterSource


class MultiKueueCluster(Object):
    spec: MultiKueueClusterSpec


class MultiKueueConfigSpec(Strict):
    clusters: Annotated[list[Annotated[str, Field(max_length=256)]], Field(min_length=1, max_length=20)]
    quota_management: Literal["Manual", "Automated"] | None = None

    @model_validator(mode="after")
    def _unique(self) -> MultiKueueConfigSpec:
        if len(set(self.clusters)) != len(self.clusters):
            raise ValueError("clusters must be unique")
        return self


class MultiKueueConfig(Object):
    spec: MultiKueueConfigSpec


class RetryStrategy(Strict):
    backoff_limit_count: int = 3
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 1800


class ProvisioningRequestConfigSpec(Strict):
    provisioning_class_name: str
    parameters: dict[str, str] = Field(default_factory=dict)
    managed_resources: list[str] = Field(default_factory=list)
    retry_strategy: RetryStrategy = Field(default_factory=RetryStrategy)
    pod_set_merge_policy: (
        Literal["IdenticalPodTemplates", "IdenticalWorkloadSchedulingRequirements"] | None
    ) = None
    pod_set_updates: Any = None


class ProvisioningRequestConfig(Object):
    spec: ProvisioningRequestConfigSpec


# --- Workload ---------------------------------------------------------------------------


class PodSetTopologyRequest(Strict):
    """Kueue's ``PodSetTopologyRequest``; read by :mod:`gpuq.api.topology_requests`."""

    required: str | None = None
    preferred: str | None = None
    unconstrained: bool | None = None
    pod_index_label: str | None = None
    sub_group_index_label: str | None = None
    sub_group_count: int | None = None
    pod_set_group_name: str | None = None
    pod_set_slice_required_topology: str | None = None
    pod_set_slice_size: int | None = None
    podset_slice_required_topology_constraints: Any = None


class PodSet(Strict):
    name: str = "main"
    count: int = 1
    min_count: int | None = None
    template: PodTemplate = Field(default_factory=PodTemplate)
    topology_request: PodSetTopologyRequest | None = None


class PriorityClassRef(Strict):
    group: Literal["kueue.x-k8s.io", "scheduling.k8s.io"]
    kind: Literal["WorkloadPriorityClass", "PriorityClass"]
    name: str


class WorkloadSpec(Strict):
    pod_sets: list[PodSet] = Field(default_factory=list)
    queue_name: str = ""
    priority_class_name: str | None = None
    priority_class_source: Literal[
        "", "kueue.x-k8s.io/workloadpriorityclass", "scheduling.k8s.io/priorityclass"
    ] = ""
    priority_class_ref: PriorityClassRef | None = None
    priority: int | None = None
    active: bool = True
    maximum_execution_time_seconds: int | None = Field(default=None, ge=1)  # the CRD's minimum


class TopologyDomainAssignment(Loose):
    values: list[str]
    count: int


class SliceLevelIndividualValues(Loose):
    """v1beta2 ``TopologyAssignmentSliceLevelIndividualValues``: value ``i`` is
    ``prefix + roots[i] + suffix`` (Kueue v0.15+ ``apis/kueue/v1beta2/workload_types.go``)."""

    prefix: str | None = None
    suffix: str | None = None
    roots: list[str | int] = Field(default_factory=list)  # YAML reads ``roots: [1, 2]`` as numbers


class SliceLevelValues(Loose):
    """v1beta2: one value for every domain of a slice, or one root per domain with common affixes."""

    universal: str | int | None = None
    individual: SliceLevelIndividualValues | None = None


class TopologyAssignmentSlice(Loose):
    domain_count: int
    values_per_level: list[SliceLevelValues]
    pod_counts: dict[str, Any]  # {universal: n} or {individual: [n, ...]}


class TopologyAssignment(Loose):
    """Kueue's recorded assignment: v1beta1 ``domains`` or v1beta2 compressed ``slices``."""

    levels: list[str]
    domains: list[TopologyDomainAssignment] | None = None
    slices: list[TopologyAssignmentSlice] | None = None


class PodSetAssignment(Loose):
    name: str = "main"
    flavors: dict[str, str] = Field(default_factory=dict)
    resource_usage: dict[str, Quantity] = Field(default_factory=dict)
    count: int | None = None
    topology_assignment: TopologyAssignment | None = None


class Admission(Loose):
    cluster_queue: str
    pod_set_assignments: list[PodSetAssignment] = Field(default_factory=list)


class AdmissionCheckState(Loose):
    name: str
    state: Literal["Pending", "Ready", "Retry", "Rejected"]


class Condition(Loose):
    type: str
    status: str = "Unknown"
    last_transition_time: Timestamp | None = None


class RequeueState(Loose):
    count: int | None = None
    requeue_at: Timestamp | None = None


class WorkloadStatus(Loose):
    admission: Admission | None = None
    admission_checks: list[AdmissionCheckState] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)
    requeue_state: RequeueState | None = None
    accumulated_past_execution_time_seconds: int | None = None


class Workload(Object):
    spec: WorkloadSpec = Field(default_factory=WorkloadSpec)
    status: WorkloadStatus = Field(default_factory=WorkloadStatus)

    def priority_class(self) -> tuple[str, str] | None:
        """``(source, name)`` of the referenced priority class, or None; priorityClassRef wins."""
        ref = self.spec.priority_class_ref
        if ref is not None:
            return (WPC_SOURCE if ref.group == KUEUE_GROUP else POD_PC_SOURCE), ref.name
        if self.spec.priority_class_name:
            return self.spec.priority_class_source or WPC_SOURCE, self.spec.priority_class_name
        return None


# --- Configuration ------------------------------------------------------------------------


class ConfigFairSharing(Strict):
    enable: bool | None = None
    preemption_strategies: list[Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]] | None = None


class ConfigAdmissionFairSharing(Strict):
    """``admissionFairSharing`` (KEP-4136): a missing ``usageHalfLifeTime`` is Go's zero duration
    (usage reset at every sample), the sampling interval defaults to 5m
    (apis/config/v1beta2/defaults.go), resource weights to 1."""

    usage_half_life_time: Duration = 0.0
    usage_sampling_interval: Duration | None = None
    resource_weights: dict[str, float] = Field(default_factory=dict)


class RequeuingStrategy(Strict):
    """``waitForPodsReady.requeuingStrategy``; unset fields take Kueue's defaults in ``api.convert``."""

    timestamp: Literal["Eviction", "Creation"] | None = None
    backoff_limit_count: int | None = None
    backoff_base_seconds: int | None = None
    backoff_max_seconds: int | None = None


class ConfigWaitForPodsReady(Strict):
    """``waitForPodsReady`` as written: ``enable`` exists only in ``v1beta1`` (validation says so);
    the defaults depend on the API version and are applied in ``api.convert``."""

    enable: bool | None = None
    timeout: Duration | None = None
    block_admission: bool | None = None
    requeuing_strategy: RequeuingStrategy | None = None
    recovery_timeout: Duration | None = None


class DeviceSelectorCEL(Strict):
    expression: str


class DeviceSelector(Strict):
    """A DRA device selector (``resource.k8s.io/v1``): a CEL expression over a device."""

    cel: DeviceSelectorCEL | None = None


class DeviceClassSource(Strict):
    """A counter (``consumesCounters``) or capacity source of a device class mapping."""

    name: str
    driver: str
    device_selector: DeviceSelector | None = None


class DeviceClassSourceConfig(Strict):
    counter: DeviceClassSource | None = None
    capacity: DeviceClassSource | None = None


class DeviceClassMapping(Strict):
    """``resources.deviceClassMappings[]``: DeviceClasses charged as one logical quota resource."""

    name: str
    device_class_names: list[str]
    sources: list[DeviceClassSourceConfig] = Field(default_factory=list)


class ResourceTransformation(Strict):
    """``resources.transformations[]``: how a pod request becomes quota (applyResourceTransformations)."""

    input: str
    strategy: Literal["Retain", "Replace"] = "Retain"
    multiply_by: str | None = None
    outputs: dict[str, Quantity] = Field(default_factory=dict)


class ConfigResources(Strict):
    quota_check_strategy: Literal["BlockUndeclared", "IgnoreUndeclared"] | None = None
    exclude_resource_prefixes: list[str] = Field(default_factory=list)
    transformations: list[ResourceTransformation] = Field(default_factory=list)
    device_class_mappings: list[DeviceClassMapping] = Field(default_factory=list)


class ConfigIntegrations(Strict):
    """``integrations``: which job frameworks Kueue manages (:mod:`gpuq.api.frameworks`)."""

    frameworks: list[str] = Field(default_factory=list)
    external_frameworks: list[str] = Field(default_factory=list)
    label_keys_to_copy: list[str] = Field(default_factory=list)
    pod_options: Any = None


class Configuration(Strict):
    """Kueue's ``Configuration`` (no metadata); settings that do not change decisions pass through.

    ``manageJobsWithoutQueueName``, ``managedJobsNamespaceSelector`` and the LocalQueueDefaulting
    feature gate decide the queue of a job without a queue-name label (:mod:`gpuq.api.queue_defaulting`).
    """

    api_version: str
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    fair_sharing: ConfigFairSharing | None = None
    feature_gates: dict[str, bool] = Field(default_factory=dict)
    wait_for_pods_ready: ConfigWaitForPodsReady | None = None
    queue_visibility: Any = None
    namespace: Any = None
    manage_jobs_without_queue_name: bool | None = None
    managed_jobs_namespace_selector: LabelSelector | None = None
    internal_cert_management: Any = None
    client_connection: Any = None
    integrations: ConfigIntegrations | None = None
    multi_kueue: Any = None
    admission_fair_sharing: ConfigAdmissionFairSharing | None = None
    resources: ConfigResources | None = None
    object_retention_policies: Any = None
    webhook: Any = None
    leader_election: Any = None
    metrics: Any = None
    health: Any = None
    pprof_bind_address: Any = None
    controller: Any = None
    tls: Any = None


KINDS: dict[tuple[str, str], type[BaseModel]] = {}
"""(api group, kind) -> model; versions are checked by :data:`VERSIONS`.

:mod:`gpuq.api.machines` adds ``gpuq.dev`` NodePool and GPUModel and ``v1`` Node when imported
(the loader imports it)."""
VERSIONS: dict[str, tuple[str, ...]] = {
    KUEUE_GROUP: ("v1beta2", "v1beta1", "v1alpha1"),
    CONFIG_GROUP: ("v1beta2", "v1beta1"),
    "scheduling.k8s.io": ("v1",),
    "": ("v1",),
}
for _model in (
    ResourceFlavor,
    ClusterQueue,
    Cohort,
    Topology,
    LocalQueue,
    WorkloadPriorityClass,
    Workload,
    AdmissionCheck,
    ProvisioningRequestConfig,
):
    KINDS[(KUEUE_GROUP, _model.__name__)] = _model
KINDS[(CONFIG_GROUP, "Configuration")] = Configuration
KINDS[("scheduling.k8s.io", "PriorityClass")] = PriorityClass
KINDS[("", "Namespace")] = Namespace
KINDS[(KUEUE_GROUP, "MultiKueueConfig")] = MultiKueueConfig
KINDS[(KUEUE_GROUP, "MultiKueueCluster")] = MultiKueueCluster
V1ALPHA1_KINDS = frozenset({"Cohort", "Topology"})
NAMESPACED_KINDS = frozenset({"LocalQueue", "Workload", "ResourceClaimTemplate", "ResourceClaim"})


def split_api_version(api_version: str) -> tuple[str, str]:
    """``kueue.x-k8s.io/v1beta2`` -> (``kueue.x-k8s.io``, ``v1beta2``); ``v1`` -> (``""``, ``v1``)."""
    group, _, version = api_version.rpartition("/")
    return group, version


def model_for(api_version: str, kind: str) -> type[BaseModel] | None:
    """The model reading ``apiVersion``/``kind``, or None when gpuq does not know that pair."""
    group, version = split_api_version(api_version)
    if version not in VERSIONS.get(group, ()):
        return None
    if group == KUEUE_GROUP and version == "v1alpha1" and kind not in V1ALPHA1_KINDS:
        return None
    return KINDS.get((group, kind))


Rename = tuple[tuple[str | int, ...], tuple[str | int, ...]]
_FUNGIBILITY_V1BETA1 = {"Borrow": "MayStopSearch", "Preempt": "MayStopSearch"}


def upgrade(doc: dict[str, Any]) -> tuple[dict[str, Any], list[Rename]]:
    """Convert a v1beta1 / v1alpha1 Kueue manifest to the v1beta2 shape.

    Returns the converted copy and the ``(old field path, new field path)``
    renames, so diagnostics can still point at the line the user wrote.
    Manifests of other versions are returned unchanged.
    """
    group, version = split_api_version(str(doc.get("apiVersion", "")))
    spec = doc.get("spec")
    if group != KUEUE_GROUP or version == "v1beta2" or not isinstance(spec, dict):
        return doc, []
    spec = dict(spec)
    renames: list[Rename] = []
    if doc.get("kind") == "ClusterQueue":
        renames += _upgrade_cluster_queue(spec)
    elif doc.get("kind") == "Cohort" and "parent" in spec:
        spec["parentName"] = spec.pop("parent")
        renames.append((("spec", "parent"), ("spec", "parentName")))
    elif doc.get("kind") == "MultiKueueCluster":
        renames += _upgrade_multikueue_cluster(spec)
    return {**doc, "apiVersion": f"{KUEUE_GROUP}/v1beta2", "spec": spec}, renames


def _upgrade_cluster_queue(spec: dict[str, Any]) -> list[Rename]:
    """v1beta1 ClusterQueue: ``cohort``, fungibility ``Borrow``/``Preempt``, flat ``admissionChecks``."""
    renames: list[Rename] = []
    if "cohort" in spec:
        spec["cohortName"] = spec.pop("cohort")
        renames.append((("spec", "cohort"), ("spec", "cohortName")))
    fungibility = spec.get("flavorFungibility")
    if isinstance(fungibility, dict):
        spec["flavorFungibility"] = {
            k: _FUNGIBILITY_V1BETA1.get(v, v) if isinstance(v, str) and k.startswith("whenCan") else v
            for k, v in fungibility.items()
        }
    checks = spec.pop("admissionChecks", None)
    if isinstance(checks, list):
        strategy = dict(spec.get("admissionChecksStrategy") or {})
        rules = list(strategy.get("admissionChecks") or [])
        for index, name in enumerate(checks):
            renames.append(
                (
                    ("spec", "admissionChecks", index),
                    ("spec", "admissionChecksStrategy", "admissionChecks", len(rules)),
                )
            )
            rules.append({"name": name})
        spec["admissionChecksStrategy"] = {**strategy, "admissionChecks": rules}
    elif checks is not None:
        spec["admissionChecks"] = checks  # not a list: let validation report it
    return renames


def _upgrade_multikueue_cluster(spec: dict[str, Any]) -> list[Rename]:
    """v1beta1 ``spec.kubeConfig`` (and ``clusterProfileRef``) move under ``spec.clusterSource``
    (``Convert_v1beta1_MultiKueueClusterSpec_To_v1beta2_MultiKueueClusterSpec``)."""
    renames: list[Rename] = []
    source: dict[str, Any] = {}
    for key in ("kubeConfig", "clusterProfileRef"):
        if key in spec:
            source[key] = spec.pop(key)
            renames.append((("spec", key), ("spec", "clusterSource", key)))
    if source:
        spec["clusterSource"] = source
    return renames


_V1BETA2_WORKLOAD_PRIORITY = (
    "v1beta2 names the class in spec.priorityClassRef {group, kind, name} "
    "(apis/kueue/v1beta1/workload_conversion.go)"
)
WRONG_VERSION_FIELDS: dict[tuple[str, str], dict[str, str]] = {
    ("Workload", "v1beta2"): {
        "priorityClassName": _V1BETA2_WORKLOAD_PRIORITY,
        "priorityClassSource": _V1BETA2_WORKLOAD_PRIORITY,
    },
    ("ClusterQueue", "v1beta1"): {"cohortName": "v1beta1 names the cohort in spec.cohort"},
    ("ClusterQueue", "v1beta2"): {"cohort": "v1beta2 names the cohort in spec.cohortName"},
    ("Cohort", "v1beta2"): {"parent": "v1beta2 names the parent in spec.parentName"},
    ("Cohort", "v1beta1"): {"parentName": "v1beta1 names the parent in spec.parent"},
}
"""(kind, version) -> spec fields of the other version -> where this version has them."""


def wrong_version_fields(doc: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``doc`` without the spec fields another version of its Kueue kind has (:data:`WRONG_VERSION_FIELDS`),
    and ``(field, message)`` for each: Kueue's CRD schema does not know them, so the API server prunes
    them (or ``kubectl apply``'s strict field validation refuses the object): gpuq warns and drops them,
    never reading them as the other version's fields."""
    group, version = split_api_version(str(doc.get("apiVersion", "")))
    fields = WRONG_VERSION_FIELDS.get((str(doc.get("kind")), version)) if group == KUEUE_GROUP else None
    spec = doc.get("spec")
    if not fields or not isinstance(spec, dict) or not fields.keys() & spec.keys():
        return doc, []
    found = [
        (
            key,
            f"unknown field in {KUEUE_GROUP}/{version}: {hint}; the API server drops it (kubectl apply's "
            "strict field validation refuses it): ignored",
        )
        for key, hint in fields.items()
        if key in spec
    ]
    return {**doc, "spec": {k: v for k, v in spec.items() if k not in fields}}, found
