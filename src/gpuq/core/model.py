"""The core's input types: frozen, framework-free views of the configuration and workloads.

The api layer converts user manifests (Kueue kinds and workload sources) into
these; the admission engine reads nothing else. Amounts are integers in the
core unit of their resource (CPU in milli-units, everything else in whole
units, see ``gpuq.core.quantity.to_amount``). Times are seconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction

Resources = Mapping[str, int]
"""Resource name -> amount in the core unit of that resource."""


class QueueingStrategy(StrEnum):
    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"


class PreemptionPolicy(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
    ANY = "Any"


class FungibilityPolicy(StrEnum):
    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FungibilityPreference(StrEnum):
    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


class StopPolicy(StrEnum):
    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"


class CheckState(StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    RETRY = "Retry"
    REJECTED = "Rejected"


class AdmissionMode(StrEnum):
    """A ClusterQueue's ``admissionScope.admissionMode`` (KEP-4136)."""

    USAGE_BASED = "UsageBasedAdmissionFairSharing"
    NONE = "NoAdmissionFairSharing"


class FairSharingStrategy(StrEnum):
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # "" tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes toleration matching (``k8s.io/api/core/v1`` ToleratesTaint)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value and bool(self.key)


@dataclass(frozen=True, slots=True)
class Requirement:
    """One label selector requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.operator == "In":
            return present and value in self.values
        if self.operator == "NotIn":
            return not present or value not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator in ("Gt", "Lt") and present and self.values:
            try:
                left, right = int(value), int(self.values[0])
            except ValueError:
                return False
            return left > right if self.operator == "Gt" else left < right
        return False


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes label selector; an empty selector matches everything."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        return all(req.matches(labels) for req in self.match_expressions)


@dataclass(frozen=True, slots=True)
class ResourceFlavor:
    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    topology_name: str | None = None


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """Quota of one resource in one flavor. ``None`` limits mean unlimited / all lendable."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    name: str
    resources: Mapping[str, ResourceQuota]


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


@dataclass(frozen=True, slots=True)
class BorrowWithinCohort:
    policy: PreemptionPolicy = PreemptionPolicy.NEVER
    max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True)
class Preemption:
    within_cluster_queue: PreemptionPolicy = PreemptionPolicy.NEVER
    reclaim_within_cohort: PreemptionPolicy = PreemptionPolicy.NEVER
    borrow_within_cohort: BorrowWithinCohort | None = None


@dataclass(frozen=True, slots=True)
class FlavorFungibility:
    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH
    when_can_preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR
    preference: FungibilityPreference | None = None


@dataclass(frozen=True, slots=True)
class AdmissionCheckRule:
    """A check a ClusterQueue requires; ``on_flavors`` empty means for every flavor."""

    name: str
    on_flavors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    name: str
    resource_groups: tuple[ResourceGroup, ...] = ()
    cohort: str | None = None
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    namespace_selector: LabelSelector | None = None  # None matches no namespace; empty matches all
    preemption: Preemption = Preemption()
    flavor_fungibility: FlavorFungibility = FlavorFungibility()
    fair_weight: Fraction = Fraction(1)
    admission_checks: tuple[AdmissionCheckRule, ...] = ()
    stop_policy: StopPolicy = StopPolicy.NONE
    least_lost_work: bool = False
    admission_mode: AdmissionMode | None = None  # spec.admissionScope.admissionMode
    """``gpuq.dev/victim-order: lost-work``: among preemption candidates of one priority, those that
    lose the least work since their last checkpoint go first (Kueue: the most recently admitted)."""
    backfill: bool = False
    """``gpuq.dev/backfill: "true"`` on a StrictFIFO queue: a head that cannot be admitted gets a
    reservation, and later workloads that end before it are admitted meanwhile (gpuq's; Kueue has
    none: :mod:`gpuq.core.backfill`)."""


@dataclass(frozen=True, slots=True)
class Cohort:
    name: str
    parent: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    fair_weight: Fraction = Fraction(1)
    usage_half_life_s: float | None = None
    """``gpuq.dev/usage-half-life`` on a root cohort: fair sharing in its tree ranks by decayed usage
    history before current borrowing (:mod:`gpuq.core.usage_history`)."""


@dataclass(frozen=True, slots=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str
    stop_policy: StopPolicy = StopPolicy.NONE
    fair_weight: Fraction = Fraction(1)  # spec.fairSharing.weight: divides its admission fair-sharing usage
    consumed: Mapping[str, float] = field(default_factory=dict)
    """``status.fairSharing.admissionFairSharingStatus.consumedResources`` in Kueue's units (CPU in
    cores): the decayed usage Admission Fair Sharing starts from."""
    consumed_at: float | None = None  # its lastUpdate


@dataclass(frozen=True, slots=True)
class AdmissionCheck:
    name: str
    controller_name: str = ""
    active: bool = True


class TopologyMode(StrEnum):
    REQUIRED = "Required"
    PREFERRED = "Preferred"
    UNCONSTRAINED = "Unconstrained"


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """A pod set's Topology Aware Scheduling request (Kueue ``podSets[].topologyRequest``).

    ``level`` is a node label key of the flavor's Topology (None for unconstrained);
    ``slice_level`` / ``slice_size`` ask for groups of ``slice_size`` pods each kept in
    one domain of ``slice_level``.
    """

    mode: TopologyMode
    level: str | None = None
    slice_level: str | None = None
    slice_size: int | None = None
    group: str | None = None


@dataclass(frozen=True, slots=True)
class PodSet:
    """A group of identical pods. ``requests`` is per pod; totals are requests × count."""

    name: str
    count: int
    requests: Resources
    min_count: int | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    node_affinity: tuple[tuple[Requirement, ...], ...] = ()  # required terms, ORed; each term ANDs
    tolerations: tuple[Toleration, ...] = ()
    topology: TopologyRequest | None = None
    quota_requests: Resources | None = None
    """Per-pod requests as quota counts them, when they differ from what a pod asks of a node
    (Kueue's resource transformations and excluded prefixes, DRA claims); None: ``requests``."""

    @property
    def charged(self) -> Resources:
        """What one pod charges against quota."""
        return self.requests if self.quota_requests is None else self.quota_requests


@dataclass(frozen=True, slots=True)
class RecordedTopology:
    """A topology assignment Kueue recorded in ``status.admission`` (pods per lowest-level domain).

    ``levels`` may be only the hostname level, as Kueue writes it when that is the lowest.
    """

    levels: tuple[str, ...]
    domains: tuple[tuple[tuple[str, ...], int], ...]  # (values per level, pods)


@dataclass(frozen=True, slots=True)
class PodSetAssignment:
    name: str
    flavors: Mapping[str, str]  # resource -> flavor
    resource_usage: Resources  # total over ``count`` pods
    count: int
    topology: RecordedTopology | None = None


@dataclass(frozen=True, slots=True)
class Admission:
    cluster_queue: str
    pod_set_assignments: tuple[PodSetAssignment, ...]


@dataclass(frozen=True, slots=True)
class Workload:
    namespace: str
    name: str
    queue_name: str
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    creation_time: float = 0.0
    uid: str = ""
    active: bool = True
    admission: Admission | None = None  # set when the workload already holds quota
    quota_reserved_time: float | None = None
    admission_checks: Mapping[str, CheckState] = field(default_factory=dict)
    requeue_at: float | None = None
    queue_order_time: float | None = None
    """When it was evicted for PodsReadyTimeout under the Eviction requeuing timestamp: its place in
    the queue from then on (Kueue's GetQueueOrderTimestamp); None: its creation time."""
    inadmissible: str = ""
    """Why the workload can never be queued as it is (Kueue's workload reconciler keeps it
    pending with this message: a DRA claim it cannot resolve); empty when it can."""
    maximum_execution_s: int | None = None
    """``spec.maximumExecutionTimeSeconds``: admitted this long in all, it is deactivated."""
    past_execution_s: int = 0
    """``status.accumulatedPastExecutionTimeSeconds``: seconds admitted before the current admission."""
    checkpoint_interval_s: float = 0.0
    """How often it checkpoints (0: never, or not known): what a preemption loses (victim order)."""
    min_runtime_s: float = 0.0
    """``gpuq.dev/min-runtime``: for this long after its quota is reserved the workload is not a
    preemption candidate (gpuq's preemption protection; Kueue has none)."""
    admission_gated_by: str = ""
    """The controllers that gate its admission (``kueue.x-k8s.io/admission-gated-by``): while set, the
    workload is not queued and stays pending with "Admission is gated by: ..."."""
    expected_runtime_s: float | None = None
    """``gpuq.dev/expected-duration``: how long it holds quota once admitted, as its owner declares it;
    read by backfill only (with ``maximum_execution_s``, the upper bound Kueue enforces)."""
    deadline: float | None = None
    """When its owner needs it finished, on the clock of ``creation_time`` (the ``gpuq.dev/deadline``
    annotations): reported as met or missed, never used to order or admit."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def order_time(self) -> float:
        """The queue-order timestamp: FIFO among equal priorities goes by it."""
        return self.creation_time if self.queue_order_time is None else self.queue_order_time


@dataclass(frozen=True, slots=True)
class FairSharing:
    enable: bool = False
    preemption_strategies: tuple[FairSharingStrategy, ...] = (
        FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
        FairSharingStrategy.LESS_THAN_INITIAL_SHARE,
    )


class RequeuingTimestamp(StrEnum):
    """``waitForPodsReady.requeuingStrategy.timestamp``: what orders a workload requeued after a
    PodsReady timeout in its queue (Kueue's ``Ordering.GetQueueOrderTimestamp``)."""

    EVICTION = "Eviction"  # the eviction's time: it goes behind workloads created before it
    CREATION = "Creation"  # its creation time: it keeps its place


@dataclass(frozen=True, slots=True)
class AdmissionFairSharing:
    """Kueue's Configuration ``admissionFairSharing`` (KEP-4136), durations in seconds.

    ``resource_weights``: resource name -> weight of its usage (absent: 1)."""

    usage_half_life_s: float = 0.0
    usage_sampling_interval_s: float = 300.0
    resource_weights: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WaitForPodsReady:
    """Kueue's waitForPodsReady after Kueue's defaulting (``gpuq.api.convert.wait_for_pods_ready``).

    ``enable`` False is no waitForPodsReady at all: the core's own default, for a configuration
    built directly (the first-come-first-served baseline); Kueue v0.19 reading a Configuration, or
    none, turns it on.
    """

    enable: bool = False
    timeout_s: float = 1800.0
    block_admission: bool = False
    requeuing_backoff_base_s: float = 60.0
    requeuing_backoff_max_s: float = 3600.0
    requeuing_backoff_limit_count: int | None = None
    recovery_timeout_s: float | None = None
    """Read as Kueue defaults it (the timeout; ``0s``: none); not applied (docs/kueue-parity.md)."""
    requeuing_timestamp: RequeuingTimestamp = RequeuingTimestamp.EVICTION


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """The parts of Kueue's Configuration that change scheduling decisions."""

    fair_sharing: FairSharing = FairSharing()
    partial_admission: bool = True
    wait_for_pods_ready: WaitForPodsReady = WaitForPodsReady()
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    admission_fair_sharing: AdmissionFairSharing | None = None
    ignore_undeclared_resources: bool = False
    """``resources.quotaCheckStrategy: IgnoreUndeclared`` (gate QuotaCheckStrategy, beta since v0.19): a
    request for a resource no resource group of the ClusterQueue covers is not checked against quota."""


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Everything the engine knows about the cluster's configuration, keyed by name."""

    flavors: Mapping[str, ResourceFlavor] = field(default_factory=dict)
    cluster_queues: Mapping[str, ClusterQueue] = field(default_factory=dict)
    cohorts: Mapping[str, Cohort] = field(default_factory=dict)
    local_queues: Mapping[tuple[str, str], LocalQueue] = field(default_factory=dict)  # (namespace, name)
    admission_checks: Mapping[str, AdmissionCheck] = field(default_factory=dict)
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    scheduler: SchedulerConfig = SchedulerConfig()
    topologies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # name -> level label keys

    def labels_of_namespace(self, namespace: str) -> Mapping[str, str]:
        """Labels of a namespace; one never declared has only its well-known name label."""
        labels = self.namespace_labels.get(namespace)
        if labels is None:
            return {"kubernetes.io/metadata.name": namespace}
        return labels
