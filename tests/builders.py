"""Fluent builders for core objects: ``workload("low").priority(-1).request(gpu=2).build()``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from gpuq.core.admission import Scheduler
from gpuq.core.cycles import run_cycles
from gpuq.core.decisions import Admit, Pending, Preempt
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
    Requirement,
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


def _add_flavor(groups: list[ResourceGroup], flavor: str, quotas: dict[str, Any]) -> None:
    resources: dict[str, ResourceQuota] = {}
    for key, value in quotas.items():
        res = _res(key)
        if isinstance(value, tuple):
            nominal, bl, ll = [*value, None, None][:3]
            resources[res] = ResourceQuota(
                _amount(res, nominal),
                None if bl is None else _amount(res, bl),
                None if ll is None else _amount(res, ll),
            )
        else:
            resources[res] = ResourceQuota(_amount(res, value))
    covered = tuple(resources)
    fq = FlavorQuotas(flavor, resources)
    for i, group in enumerate(groups):
        if set(group.covered_resources) == set(covered):
            groups[i] = ResourceGroup(group.covered_resources, (*group.flavors, fq))
            return
    groups.append(ResourceGroup(covered, (fq,)))


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
        _add_flavor(self._groups, flavor, quotas)
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
        affinity: tuple[tuple[Requirement, ...], ...] = (),
        **requests: float,
    ) -> WorkloadBuilder:
        """Add a pod set; ``affinity`` is required node affinity (terms ORed, requirements ANDed)."""
        reqs = {_res(k): _amount(_res(k), v) for k, v in requests.items()}
        self._pod_sets.append(
            PodSet(name, count, reqs, min_count, node_selector or {}, affinity, tolerations)
        )
        return self

    def request(self, count: int = 1, **requests: float) -> WorkloadBuilder:
        return self.pod_set("main", count, **requests)

    def admitted(
        self, cq: str, flavors: dict[str, str], at: float = 0.0, counts: dict[str, int] | None = None
    ) -> WorkloadBuilder:
        """Mark as already holding quota with the given resource -> flavor mapping.

        ``counts`` (pod set -> admitted count) records a partial admission.
        """
        self._admitted = (cq, {_res(k): v for k, v in flavors.items()}, at)
        self._admitted_counts = counts or {}
        return self

    def requeue_at(self, t: float) -> WorkloadBuilder:
        self._w = replace(self._w, requeue_at=t)
        return self

    def uid(self, uid: str) -> WorkloadBuilder:
        self._w = replace(self._w, uid=uid)
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
            counts = getattr(self, "_admitted_counts", {})
            assignments = tuple(
                PodSetAssignment(
                    ps.name,
                    {r: flavors[r] for r in (*ps.requests, "pods") if r in flavors},
                    {
                        **{r: v * counts.get(ps.name, ps.count) for r, v in ps.requests.items()},
                        **({"pods": counts.get(ps.name, ps.count)} if "pods" in flavors else {}),
                    },
                    counts.get(ps.name, ps.count),
                )
                for ps in w.pod_sets
            )
            w = replace(w, admission=Admission(cq, assignments), quota_reserved_time=at)
        return w


def cluster_queue(name: str) -> ClusterQueueBuilder:
    return ClusterQueueBuilder(name)


def workload(name: str, namespace: str = "default") -> WorkloadBuilder:
    return WorkloadBuilder(name, namespace)


def flavor(
    name: str,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    tolerations: tuple[Toleration, ...] = (),
) -> ResourceFlavor:
    return ResourceFlavor(name, labels or {}, taints, tolerations)


class CohortBuilder:
    """``cohort("c").parent("root").flavor("f", gpu=(nominal, bl, ll)).build()``."""

    def __init__(self, name: str) -> None:
        self._cohort = Cohort(name)
        self._groups: list[ResourceGroup] = []

    def parent(self, name: str) -> CohortBuilder:
        self._cohort = replace(self._cohort, parent=name)
        return self

    def flavor(self, flavor: str, **quotas: Any) -> CohortBuilder:
        _add_flavor(self._groups, flavor, quotas)
        return self

    def weight(self, weight: float | Fraction) -> CohortBuilder:
        self._cohort = replace(self._cohort, fair_weight=Fraction(weight))
        return self

    def build(self) -> Cohort:
        return replace(self._cohort, resource_groups=tuple(self._groups))


def cohort(name: str) -> CohortBuilder:
    return CohortBuilder(name)


def config(
    *cluster_queues: ClusterQueue,
    flavors: tuple[ResourceFlavor, ...] = (),
    cohorts: tuple[Cohort, ...] = (),
    local_queues: tuple[LocalQueue, ...] | None = None,
    fair_sharing: bool = False,
    strategies: tuple[FairSharingStrategy, ...] | None = None,
    partial_admission: bool = True,
    checks: tuple[str, ...] = (),
    inactive_checks: tuple[str, ...] = (),
    namespace_labels: dict[str, dict[str, str]] | None = None,
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
        admission_checks={
            **{n: AdmissionCheck(n, "test") for n in checks},
            **{n: AdmissionCheck(n, "test", active=False) for n in inactive_checks},
        },
        namespace_labels=namespace_labels or {},
        scheduler=SchedulerConfig(fair_sharing=fs, partial_admission=partial_admission),
    )


# --------------------------------------------------------------------------- outcomes
# Whole-result helpers for table-driven admission tests: a run is reduced to an
# ``Outcome`` whose fields name workloads without the "default/" namespace.


@dataclass(frozen=True)
class Outcome:
    """What a cycle (or a run of cycles) decided.

    ``admitted``/``reserved`` map a workload to its flavors: ``"f"`` when every
    resource got flavor ``f``, else ``"cpu=f1,gpu=f2"``; ``*N`` is appended for a
    partial admission of N pods, ``name:`` prefixes each pod set of a
    multi-pod-set workload and `` borrowing`` ends the text of an admission
    that borrows. ``reserved`` holds quota-reserved workloads still
    waiting for admission checks, as ``"<flavors> until <checks>"``.
    ``preempted`` maps a victim to Kueue's reason; ``pending`` to its message (a
    test's expected value is a phrase the message must contain).
    """

    admitted: dict[str, str] = field(default_factory=dict)
    preempted: dict[str, str] = field(default_factory=dict)
    pending: dict[str, str] = field(default_factory=dict)
    reserved: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    """A named admission scenario: ``cycles=1`` plans one cycle, ``None`` runs until quiescent."""

    name: str
    config: ClusterConfig
    workloads: tuple[Workload, ...]
    want: Outcome
    cycles: int | None = 1


def case(
    name: str,
    cfg: ClusterConfig,
    *workloads: Workload,
    admitted: dict[str, str] | None = None,
    preempted: dict[str, str] | None = None,
    pending: dict[str, str] | None = None,
    reserved: dict[str, str] | None = None,
    cycles: int | None = 1,
) -> Case:
    want = Outcome(admitted or {}, preempted or {}, pending or {}, reserved or {})
    return Case(name, cfg, tuple(workloads), want, cycles)


def _short(key: str) -> str:
    return key.removeprefix("default/")


_SHORT_RESOURCES = {v: k for k, v in _ALIASES.items()}


def describe_admission(admit: Admit, spec: Workload) -> str:
    counts = {ps.name: ps.count for ps in spec.pod_sets}
    parts = []
    for psa in admit.pod_sets:
        by_resource = {_SHORT_RESOURCES.get(r, r): f for r, f in psa.flavors.items()}
        names = set(by_resource.values())
        text = (
            next(iter(names))
            if len(names) == 1
            else ",".join(f"{r}={f}" for r, f in sorted(by_resource.items()))
        )
        if psa.count != counts.get(psa.name):
            text += f"*{psa.count}"
        if len(admit.pod_sets) > 1:
            text = f"{psa.name}:{text}"
        parts.append(text)
    if admit.borrowing:
        parts.append("borrowing")
    return " ".join(parts)


def outcome_of(
    specs: dict[str, Workload],
    admitted: Iterable[Admit],
    preempted: Iterable[Preempt],
    pending: Iterable[Pending],
) -> Outcome:
    out = Outcome()
    for admit in admitted:
        text = describe_admission(admit, specs[admit.workload])
        if admit.checks_pending:
            out.reserved[_short(admit.workload)] = f"{text} until {','.join(admit.checks_pending)}"
        else:
            out.admitted[_short(admit.workload)] = text
    for eviction in preempted:
        out.preempted[_short(eviction.workload)] = eviction.reason
    for waiting in pending:
        out.pending[_short(waiting.workload)] = waiting.message
    return out


def scheduler_with(cfg: ClusterConfig, workloads: Iterable[Workload]) -> Scheduler:
    scheduler = Scheduler(cfg)
    for w in workloads:
        scheduler.submit(w)
    return scheduler


def run_case(c: Case, now: float = 0.0) -> Outcome:
    """Run a case and return its outcome, pending messages reduced to the expected phrases."""
    specs = {w.key: w for w in c.workloads}
    scheduler = scheduler_with(c.config, c.workloads)
    if c.cycles == 1:
        result, _ = scheduler.plan_cycle(now)
        got = outcome_of(specs, result.admitted, result.preempted, result.pending)
    else:
        run = run_cycles(scheduler, c.cycles, now)
        got = outcome_of(specs, run.admitted.values(), run.preempted.values(), run.pending.values())
    return normalized(got, c.want)


def normalized(got: Outcome, want: Outcome) -> Outcome:
    """``got`` with each pending message replaced by the expected phrase when it contains it."""
    pending = {
        name: want.pending[name] if name in want.pending and want.pending[name] in message else message
        for name, message in got.pending.items()
    }
    return replace(got, pending=pending)
