"""Fluent builders for core objects: ``workload("low").priority(-1).request(gpu=2).build()``."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

from gpuq.core.model import (
    Admission,
    AdmissionCheck,
    AdmissionCheckRule,
    BorrowWithinCohort,
    CheckState,
    ClusterConfig,
    ClusterQueue,
    Cohort,
    FairSharing,
    FairSharingStrategy,
    FlavorFungibility,
    FlavorQuotas,
    FungibilityPolicy,
    FungibilityPreference,
    LabelSelector,
    LocalQueue,
    PodSet,
    PodSetAssignment,
    Preemption,
    PreemptionPolicy,
    QueueingStrategy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    SchedulerConfig,
    StopPolicy,
    Taint,
    Toleration,
    Workload,
)

GPU = "nvidia.com/gpu"
_ALIASES = {"gpu": GPU, "cpu": "cpu", "memory": "memory", "pods": "pods"}


def _res(name: str) -> str:
    return _ALIASES.get(name, name)


def _amount(resource: str, value: float | int) -> int:
    return int(value * 1000) if resource == "cpu" else int(value)


class ClusterQueueBuilder:
    def __init__(self, name: str) -> None:
        self._cq = ClusterQueue(name=name, namespace_selector=LabelSelector())
        self._groups: list[ResourceGroup] = []

    def cohort(self, name: str) -> ClusterQueueBuilder:
        self._cq = replace(self._cq, cohort=name)
        return self

    def flavor(self, flavor: str, **quotas: Any) -> ClusterQueueBuilder:
        """Add a flavor to a resource group covering the same resources (new group if none).

        Each quota is ``n`` or ``(nominal, borrowing_limit, lending_limit)``.
        """
        resources: dict[str, ResourceQuota] = {}
        for key, value in quotas.items():
            res = _res(key)
            if isinstance(value, tuple):
                nominal, bl, ll = (list(value) + [None, None])[:3]
                resources[res] = ResourceQuota(
                    _amount(res, nominal),
                    None if bl is None else _amount(res, bl),
                    None if ll is None else _amount(res, ll),
                )
            else:
                resources[res] = ResourceQuota(_amount(res, value))
        covered = tuple(resources)
        fq = FlavorQuotas(flavor, resources)
        for i, group in enumerate(self._groups):
            if set(group.covered_resources) == set(covered):
                self._groups[i] = ResourceGroup(group.covered_resources, (*group.flavors, fq))
                return self
        self._groups.append(ResourceGroup(covered, (fq,)))
        return self

    def strategy(self, strategy: QueueingStrategy) -> ClusterQueueBuilder:
        self._cq = replace(self._cq, queueing_strategy=strategy)
        return self

    def preemption(
        self,
        within: PreemptionPolicy = PreemptionPolicy.NEVER,
        reclaim: PreemptionPolicy = PreemptionPolicy.NEVER,
        borrow_within_cohort: PreemptionPolicy | None = None,
        max_priority_threshold: int | None = None,
    ) -> ClusterQueueBuilder:
        bwc = (
            None
            if borrow_within_cohort is None
            else BorrowWithinCohort(borrow_within_cohort, max_priority_threshold)
        )
        self._cq = replace(self._cq, preemption=Preemption(within, reclaim, bwc))
        return self

    def fungibility(
        self,
        when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH,
        when_can_preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR,
        preference: FungibilityPreference | None = None,
    ) -> ClusterQueueBuilder:
        self._cq = replace(
            self._cq, flavor_fungibility=FlavorFungibility(when_can_borrow, when_can_preempt, preference)
        )
        return self

    def weight(self, weight: float | Fraction) -> ClusterQueueBuilder:
        self._cq = replace(self._cq, fair_weight=Fraction(weight))
        return self

    def checks(self, *names: str, on_flavors: tuple[str, ...] = ()) -> ClusterQueueBuilder:
        rules = tuple(AdmissionCheckRule(n, on_flavors) for n in names)
        self._cq = replace(self._cq, admission_checks=self._cq.admission_checks + rules)
        return self

    def namespaces(self, selector: LabelSelector | None) -> ClusterQueueBuilder:
        self._cq = replace(self._cq, namespace_selector=selector)
        return self

    def stop(self, policy: StopPolicy = StopPolicy.HOLD) -> ClusterQueueBuilder:
        self._cq = replace(self._cq, stop_policy=policy)
        return self

    def build(self) -> ClusterQueue:
        return replace(self._cq, resource_groups=tuple(self._groups))


class WorkloadBuilder:
    def __init__(self, name: str, namespace: str = "default") -> None:
        self._w = Workload(namespace=namespace, name=name, queue_name="", pod_sets=(), uid=name)
        self._pod_sets: list[PodSet] = []
        self._created = 0.0

    def queue(self, name: str) -> WorkloadBuilder:
        self._w = replace(self._w, queue_name=name)
        return self

    def priority(self, value: int) -> WorkloadBuilder:
        self._w = replace(self._w, priority=value)
        return self

    def created(self, t: float) -> WorkloadBuilder:
        self._w = replace(self._w, creation_time=t)
        return self

    def pod_set(
        self,
        name: str = "main",
        count: int = 1,
        min_count: int | None = None,
        node_selector: dict[str, str] | None = None,
        tolerations: tuple[Toleration, ...] = (),
        **requests: float,
    ) -> WorkloadBuilder:
        reqs = {_res(k): _amount(_res(k), v) for k, v in requests.items()}
        self._pod_sets.append(PodSet(name, count, reqs, min_count, node_selector or {}, (), tolerations))
        return self

    def request(self, count: int = 1, **requests: float) -> WorkloadBuilder:
        return self.pod_set("main", count, **requests)

    def admitted(self, cq: str, flavors: dict[str, str], at: float = 0.0) -> WorkloadBuilder:
        """Mark as already holding quota with the given resource -> flavor mapping."""
        self._admitted = (cq, {_res(k): v for k, v in flavors.items()}, at)
        return self

    def checks(self, **states: CheckState) -> WorkloadBuilder:
        self._w = replace(self._w, admission_checks=dict(states))
        return self

    def inactive(self) -> WorkloadBuilder:
        self._w = replace(self._w, active=False)
        return self

    def build(self) -> Workload:
        w = replace(self._w, pod_sets=tuple(self._pod_sets))
        admitted = getattr(self, "_admitted", None)
        if admitted:
            cq, flavors, at = admitted
            assignments = tuple(
                PodSetAssignment(
                    ps.name,
                    {r: flavors[r] for r in ps.requests if r in flavors},
                    {r: v * ps.count for r, v in ps.requests.items()},
                    ps.count,
                )
                for ps in w.pod_sets
            )
            w = replace(w, admission=Admission(cq, assignments), quota_reserved_time=at)
        return w


def cluster_queue(name: str) -> ClusterQueueBuilder:
    return ClusterQueueBuilder(name)


def workload(name: str, namespace: str = "default") -> WorkloadBuilder:
    return WorkloadBuilder(name, namespace)


def flavor(name: str, labels: dict[str, str] | None = None, taints: tuple[Taint, ...] = ()) -> ResourceFlavor:
    return ResourceFlavor(name, labels or {}, taints)


def config(
    *cluster_queues: ClusterQueue,
    flavors: tuple[ResourceFlavor, ...] = (),
    cohorts: tuple[Cohort, ...] = (),
    local_queues: tuple[LocalQueue, ...] | None = None,
    fair_sharing: bool = False,
    strategies: tuple[FairSharingStrategy, ...] | None = None,
    partial_admission: bool = True,
    checks: tuple[str, ...] = (),
) -> ClusterConfig:
    """A configuration; by default every flavor named by a queue exists and each queue ``q`` has
    a LocalQueue ``q`` in namespace ``default``."""
    known = {f.name: f for f in flavors}
    for cq in cluster_queues:
        for group in cq.resource_groups:
            for fq in group.flavors:
                known.setdefault(fq.name, ResourceFlavor(fq.name))
    if local_queues is None:
        local_queues = tuple(LocalQueue("default", cq.name, cq.name) for cq in cluster_queues)
    fs = FairSharing(enable=fair_sharing) if strategies is None else FairSharing(fair_sharing, strategies)
    return ClusterConfig(
        flavors=known,
        cluster_queues={cq.name: cq for cq in cluster_queues},
        cohorts={c.name: c for c in cohorts},
        local_queues={(lq.namespace, lq.name): lq for lq in local_queues},
        admission_checks={n: AdmissionCheck(n, "test") for n in checks},
        scheduler=SchedulerConfig(fair_sharing=fs, partial_admission=partial_admission),
    )
