"""Flavor assignment: which ResourceFlavor each pod set gets for each resource group.

Kueue: pkg/scheduler/flavorassigner/flavorassigner.go, keps/582-preempt-based-on-flavor-order.

For each pod set, in spec order, and each resource group covering its
requests, the flavors of the group are tried in the order the ClusterQueue
lists them:

1. A flavor must be eligible: its taints tolerated, its node labels compatible
   with the pod's node selector and required affinity.
2. Each requested resource gets a mode: fit, reclaim, preempt, no candidates or
   no fit, by comparing the request with ``available`` and
   ``potential_available`` and, where preemption may help, asking the
   preemption oracle (fitsResourceQuota). The flavor's mode is the worst of its resources.
3. flavorFungibility decides whether to stop at this flavor or try the next;
   when every flavor was tried, the preferred one is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from gpuq.core.fair_preemption import preemption_targets
from gpuq.core.model import (
    ClusterQueue,
    FairSharing,
    FlavorFungibility,
    FungibilityPolicy,
    FungibilityPreference,
    PodSet,
    PodSetAssignment,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    Workload,
)
from gpuq.core.preemption import Preemptor
from gpuq.core.quantity import format_amount
from gpuq.core.quota import FlavorResource, available, lowest_fitting_subtree, potential_available
from gpuq.core.state import ClusterState

PODS = "pods"


class Mode(IntEnum):
    """Ordered from worst to best (Kueue's granularMode)."""

    NO_FIT = 0
    NO_CANDIDATES = 1
    PREEMPT = 2
    RECLAIM = 3
    FIT = 4

    @property
    def is_preempt(self) -> bool:
        return self in (Mode.NO_CANDIDATES, Mode.PREEMPT, Mode.RECLAIM)


@dataclass(slots=True)
class PodSetFlavors:
    """The flavors chosen for one pod set, with its total requests at ``count`` pods."""

    name: str
    count: int
    flavors: dict[str, str]
    requests: dict[str, int]


@dataclass(slots=True)
class Assignment:
    """A whole workload's flavor assignment and what admitting it would take."""

    pod_sets: list[PodSetFlavors] = field(default_factory=list)
    mode: Mode = Mode.FIT
    borrowing: int = 0
    usage: dict[FlavorResource, int] = field(default_factory=dict)
    frs_need_preemption: set[FlavorResource] = field(default_factory=set)
    reasons: list[str] = field(default_factory=list)
    last_tried: list[dict[str, int]] = field(default_factory=list)
    """Per pod set, resource -> index of the last flavor tried (-1: the scan reached the end)."""

    def pod_set_assignments(self) -> tuple[PodSetAssignment, ...]:
        """The assignment as the core model's admitted pod sets (what admission and placement read)."""
        return tuple(
            PodSetAssignment(ps.name, dict(ps.flavors), dict(ps.requests), ps.count) for ps in self.pod_sets
        )

    @property
    def pending_flavors(self) -> bool:
        """Whether a later attempt would resume at an untried flavor."""
        return any(idx != -1 for tried in self.last_tried for idx in tried.values())


@dataclass(slots=True)
class _FlavorTry:
    flavor: str
    mode: Mode
    borrowing: int
    preempt_frs: set[FlavorResource]
    tried_idx: int = -1
    deferred: list[_Question] | None = None  # preemption questions not asked yet (lazy scan)


class _Placeholder(str):
    """Where a deferred question's reason goes in ``Assignment.reasons`` (compared by identity)."""

    __slots__ = ()


@dataclass(slots=True)
class _Question:
    """The preemption oracle's question for one (flavor, resource), asked only if its answer matters."""

    fr: FlavorResource
    value: int
    borrow: int
    placeholder: _Placeholder
    mode: Mode = Mode.NO_CANDIDATES
    borrow_after: int = 0


def flavor_matches(
    flavor: ResourceFlavor,
    pod_set: PodSet,
    topologies: Mapping[str, tuple[str, ...]] | None = None,
    implied_tas: bool = False,
    covered: tuple[str, ...] = (),
) -> str | None:
    """None when the flavor may serve the pod set, else why not (TAS rules: tas_flavorassigner.go).

    ``implied_tas``: every flavor of the queue is topology-aware, so a pod set
    without a topology request is treated as unconstrained.
    """
    tolerations = pod_set.tolerations + flavor.tolerations
    for taint in flavor.node_taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(t.tolerates(taint) for t in tolerations):
            return f"untolerated taint {{{taint.key}: {taint.value}}} in flavor {flavor.name}"
    labels = flavor.node_labels
    for key, value in pod_set.node_selector.items():
        if key in labels and labels[key] != value:
            return f"flavor {flavor.name} doesn't match node affinity"
    if pod_set.node_affinity:
        terms = [tuple(r for r in term if r.key in labels) for term in pod_set.node_affinity]
        if not any(all(r.matches(labels) for r in term) for term in terms):
            return f"flavor {flavor.name} doesn't match node affinity"
    return _topology_mismatch(flavor, pod_set, topologies or {}, implied_tas, covered)


def _topology_mismatch(
    flavor: ResourceFlavor,
    pod_set: PodSet,
    topologies: Mapping[str, tuple[str, ...]],
    implied_tas: bool,
    covered: tuple[str, ...],
) -> str | None:
    """Kueue's checkPodSetAndFlavorMatchForTAS, in its words.

    A pod set asking for topology may still take a non-TAS flavor for resources it does not
    request (quota-only resources); one that does not ask only matches non-TAS flavors, unless
    every flavor of the queue is TAS (an implied request).
    """
    request = pod_set.topology
    if request is None and implied_tas:
        return None
    if flavor.topology_name is None:
        if request is None or not any(pod_set.charged.get(r) for r in covered):
            return None
        return f'Flavor "{flavor.name}" does not support TopologyAwareScheduling'
    if request is None:
        return f'Flavor "{flavor.name}" supports only TopologyAwareScheduling'
    levels = topologies.get(flavor.topology_name)
    if levels is None:
        return f'Flavor "{flavor.name}" information missing in TAS cache'
    for level in (request.level, request.slice_level):
        if level is not None and level not in levels:
            return f'Flavor "{flavor.name}" does not contain the requested level'
    return None


def pod_set_requests(pod_set: PodSet, count: int, covers_pods: bool) -> dict[str, int]:
    """Total requests of ``count`` pods, plus ``pods`` when a group covers it (as Kueue's assignFlavors)."""
    totals = {r: v * count for r, v in pod_set.charged.items() if v}
    if covers_pods:
        totals[PODS] = count
    return totals


def can_preempt_while_borrowing(cq: ClusterQueue, fair_sharing: FairSharing) -> bool:
    bwc = cq.preemption.borrow_within_cohort
    if bwc is not None and bwc.policy != PreemptionPolicy.NEVER:
        return True
    return fair_sharing.enable and cq.preemption.reclaim_within_cohort != PreemptionPolicy.NEVER


class FlavorAssigner:
    """Assigns flavors for one workload in one ClusterQueue against the current state."""

    def __init__(self, state: ClusterState, workload: Workload, cq_name: str) -> None:
        self.state = state
        self.workload = workload
        self.cq_name = cq_name
        self.cq = state.cluster_queue(cq_name)
        self.node = state.node(cq_name)
        self.covers_pods = any(PODS in g.covered_resources for g in self.cq.resource_groups)
        flavors = [state.config.flavors.get(f.name) for g in self.cq.resource_groups for f in g.flavors]
        self.implied_tas = bool(flavors) and all(f is not None and f.topology_name for f in flavors)

    def assign(
        self,
        counts: Mapping[str, int] | None = None,
        resume: Sequence[Mapping[str, int]] | None = None,
        pinned: Mapping[str, Mapping[str, str]] | None = None,
        lazy: bool = False,
    ) -> Assignment:
        """Assign flavors to every pod set at ``counts`` pods (default: full counts).

        ``resume`` is a previous attempt's ``last_tried``: each group's scan starts
        after the flavor tried last (gate FlavorFungibilityPreserveScanProgress). ``pinned``
        restricts each pod set's resources to the flavors of an earlier assignment (gate
        RecomputeAssignmentUponPreemptionTargetsOverlap).

        ``lazy``: ask the preemption oracle about a flavor only when its answer can matter. With
        ``whenCanPreempt: TryNextFlavor`` (and no ``preference: PreemptionOverBorrowing``) the scan
        goes on past a flavor that needs preemption whatever the answer, and a flavor that fits
        beats it whatever the answer, so a group that ends on a fit never needs it. The result is
        the same assignment; only its ``reasons``, which nothing reads when every group fits, lack
        the answers never asked (with nodes, where a fit can still fail, callers keep it off).
        ``lazy`` also lets the oracle reuse an earlier answer (:meth:`_preemption_oracle`): only
        for a nomination, which sees the state as the cycle found it.
        """
        self._memo = lazy and not self.state.config.scheduler.fair_sharing.enable
        self._lazy = lazy and (
            self.cq.flavor_fungibility.when_can_preempt == FungibilityPolicy.TRY_NEXT_FLAVOR
            and self.cq.flavor_fungibility.preference != FungibilityPreference.PREEMPTION_OVER_BORROWING
        )
        self._unasked: list[_Question] = []
        result = Assignment()
        members: dict[str, list[tuple[PodSet, dict[str, int], PodSetFlavors]]] = {}
        for index, pod_set in enumerate(self.workload.pod_sets):
            count = counts[pod_set.name] if counts else pod_set.count
            requests = pod_set_requests(pod_set, count, self.covers_pods)
            chosen = PodSetFlavors(pod_set.name, count, {}, requests)
            result.pod_sets.append(chosen)
            result.last_tried.append({})
            group = pod_set.topology.group if pod_set.topology and pod_set.topology.group else f"#{index}"
            members.setdefault(group, []).append((pod_set, requests, chosen))
        first_index = {ps.name: i for i, ps in enumerate(self.workload.pod_sets)}
        for group_members in members.values():
            index = first_index[group_members[0][0].name]
            previous = resume[index] if resume is not None and index < len(resume) else {}
            pinned_flavors = (pinned or {}).get(group_members[0][0].name)
            tried = self._assign_group(group_members, result, previous, pinned_flavors)
            for pod_set, _, _ in group_members:
                result.last_tried[first_index[pod_set.name]] = tried
        if self._unasked:  # questions of groups that fit: their reasons count only if a group did not
            if result.mode == Mode.FIT:
                placeholders = {id(q.placeholder) for q in self._unasked}
                result.reasons[:] = [r for r in result.reasons if id(r) not in placeholders]
            else:
                self._ask(self._unasked, result)
            self._unasked = []
        return result

    def _assign_group(
        self,
        members: list[tuple[PodSet, dict[str, int], PodSetFlavors]],
        result: Assignment,
        previous: Mapping[str, int],
        pinned: Mapping[str, str] | None,
    ) -> dict[str, int]:
        """Flavors for one pod set, or for a TAS pod-set group as one unit (Kueue's podSetGroups).

        A group's requests are summed and every member takes the same flavor per resource
        group, so a leader and its workers land on one flavor (and one topology).
        """
        requests: dict[str, int] = {}
        for _, member_requests, _ in members:
            for resource, amount in member_requests.items():
                requests[resource] = requests.get(resource, 0) + amount
        pod_sets = [pod_set for pod_set, _, _ in members]
        remaining = set(requests)
        tried: dict[str, int] = {}
        for group in self.cq.resource_groups:
            group_requests = {r: requests[r] for r in group.covered_resources if r in requests}
            if not group_requests:
                continue
            remaining -= group_requests.keys()
            first = next(iter(group_requests))
            start = previous[first] + 1 if first in previous else 0
            only = pinned.get(first) if pinned else None
            best = self._find_flavor(pod_sets, group, group_requests, result, start, only)
            if best is None:
                result.mode = Mode.NO_FIT
                continue
            for resource, amount in group_requests.items():
                for _, member_requests, chosen in members:
                    if resource in member_requests:
                        chosen.flavors[resource] = best.flavor
                fr = (best.flavor, resource)
                result.usage[fr] = result.usage.get(fr, 0) + amount
                tried[resource] = best.tried_idx
            result.mode = min(result.mode, best.mode)
            result.borrowing = max(result.borrowing, best.borrowing)
            result.frs_need_preemption |= best.preempt_frs
        if self.state.config.scheduler.ignore_undeclared_resources:
            remaining.clear()  # Kueue's flavorassigner: skipped, and not counted as usage
        for resource in sorted(remaining):
            result.mode = Mode.NO_FIT
            result.reasons.append(f"resource {resource} unavailable in ClusterQueue {self.cq_name}")
        return tried

    def _find_flavor(
        self,
        pod_sets: Sequence[PodSet],
        group: ResourceGroup,
        requests: dict[str, int],
        result: Assignment,
        start: int = 0,
        only: str | None = None,
    ) -> _FlavorTry | None:
        """Walk the group's flavors in order from ``start``, stopping as fungibility allows.

        The chosen flavor records the index of the last flavor tried, or -1 when
        the scan reached the last flavor, so the next attempt starts over.
        """
        fungibility = self.cq.flavor_fungibility
        attempts: list[_FlavorTry] = []
        flavors = group.flavors
        attempted = -1
        for index in range(start if start < len(flavors) else 0, len(flavors)):
            attempted = index
            flavor_quotas = flavors[index]
            if only is not None and flavor_quotas.name != only:
                continue
            flavor = self.state.config.flavors.get(flavor_quotas.name)
            if flavor is None:
                result.reasons.append(f"flavor {flavor_quotas.name} not found")
                continue
            mismatch = next(
                (
                    why
                    for pod_set in pod_sets
                    if (
                        why := flavor_matches(
                            flavor,
                            pod_set,
                            self.state.config.topologies,
                            self.implied_tas,
                            group.covered_resources,
                        )
                    )
                ),
                None,
            )
            if mismatch:
                result.reasons.append(mismatch)
                continue
            attempt = self._try_flavor(flavor.name, requests, result)
            attempts.append(attempt)
            if attempt.deferred is not None:
                continue  # needs preemption whatever the answer: TryNextFlavor goes on
            if attempt.mode > Mode.NO_CANDIDATES and not _try_next(attempt, fungibility):
                break
        best = _select([a for a in attempts if a.deferred is None], fungibility)
        deferred = [q for a in attempts if a.deferred is not None for q in a.deferred]
        if deferred and (best is None or best.mode != Mode.FIT):
            self._ask(deferred, result)
            for attempt in attempts:
                for question in attempt.deferred or ():
                    attempt.mode = min(attempt.mode, question.mode)
                    attempt.borrowing = max(attempt.borrowing, question.borrow_after)
                attempt.deferred = None
            best = _select(attempts, fungibility)
        elif deferred:
            self._unasked += deferred
        if best is None or best.mode == Mode.NO_FIT:
            return None
        best.tried_idx = -1 if attempted == len(flavors) - 1 else attempted
        return best

    def _try_flavor(self, flavor: str, requests: dict[str, int], result: Assignment) -> _FlavorTry:
        mode, borrowing, preempt_frs = Mode.FIT, 0, set()
        deferred: list[_Question] | None = [] if self._lazy else None
        for resource, amount in requests.items():
            fr = (flavor, resource)
            value = result.usage.get(fr, 0) + amount
            asked = len(deferred) if deferred is not None else 0
            fr_mode, fr_borrow = self._fits_resource_quota(fr, value, result, deferred)
            if deferred is not None and len(deferred) > asked:
                preempt_frs.add(fr)  # some preemption mode (never NoFit); its answer waits
                continue
            mode = min(mode, fr_mode)
            borrowing = max(borrowing, fr_borrow)
            if fr_mode.is_preempt:
                preempt_frs.add(fr)
            if mode == Mode.NO_FIT:
                break  # as Kueue: the flavor cannot fit, the other resources need no check
        if deferred and mode == Mode.NO_FIT:  # the flavor is out; only the reasons wait
            self._unasked += deferred
            deferred = None
        return _FlavorTry(flavor, mode, borrowing, preempt_frs, deferred=deferred or None)

    def _fits_resource_quota(
        self,
        fr: FlavorResource,
        value: int,
        result: Assignment,
        deferred: list[_Question] | None = None,
    ) -> tuple[Mode, int]:
        """Kueue's fitsResourceQuota for one (flavor, resource) needing ``value`` in total; with
        ``deferred``, a question for the preemption oracle is put there instead of asked."""
        node = self.node
        borrow, may_reclaim_in_hierarchy = lowest_fitting_subtree(node, fr, value)
        flavor, resource = fr
        maximum = potential_available(node, fr)
        if value > maximum:
            result.reasons.append(
                f"insufficient quota for {resource} in flavor {flavor}, request > maximum capacity "
                f"({format_amount(resource, value)} > {format_amount(resource, maximum)})"
            )
            return Mode.NO_FIT, 0
        free = available(node, fr)
        if value <= free:
            return Mode.FIT, borrow
        nominal = node.nominal(fr)
        fair_sharing = self.state.config.scheduler.fair_sharing
        if value <= nominal or may_reclaim_in_hierarchy or can_preempt_while_borrowing(self.cq, fair_sharing):
            if deferred is not None:
                placeholder = _Placeholder()
                result.reasons.append(placeholder)
                deferred.append(_Question(fr, value, borrow, placeholder))
                return Mode.NO_CANDIDATES, borrow  # not used: the caller sees the question
            mode, borrow_after, why = self._preemption_oracle(fr, value, borrow)
            if why:
                result.reasons.append(why)
            return mode, borrow_after
        result.reasons.append(
            f"insufficient unused quota for {resource} in flavor {flavor}, "
            f"{format_amount(resource, value - max(free, 0))} more needed"
            f" ({format_amount(resource, max(free, 0))} available)"
        )
        return Mode.NO_FIT, 0

    def _preemption_oracle(self, fr: FlavorResource, value: int, borrow: int) -> tuple[Mode, int, str]:
        """Would preemption free ``value`` of ``fr``? Reclaim if only other queues lose. The mode,
        the borrowing distance, and the reason to report when nothing can be preempted.

        The answer depends on the queue, ``fr``, ``value``, ``borrow``, the preemptor's priority
        (and creation time, under a LowerOrNewerEqualPriority policy) and, of the state, only on
        flavor ``fr[0]`` in the queue's cohort tree (its quota usage and the workloads holding
        quota in it): classical preemption asks about ``fr`` alone. So during a nomination
        (``self._memo``, not with fair sharing, whose shares span flavors) an answer is reused
        while no workload started or stopped holding quota in that flavor of that tree
        (:meth:`ClusterState.version`'s counters); another head of the queue with the same request
        and priority gets it too.
        """
        if not self._memo:
            return self._ask_oracle(fr, value, borrow)
        preemption = self.cq.preemption
        needs_time = PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY in (
            preemption.within_cluster_queue,
            preemption.reclaim_within_cohort,
        )
        created = self.workload.creation_time if needs_time else None
        key = (self.cq_name, fr, value, borrow, self.workload.priority, created)
        version = self.state.versions.get((self.node.root(), fr[0]), 0)
        known = self.state.oracle_answers.get(key)
        if known is not None and known[0] == version:
            answer: tuple[Mode, int, str] = known[1]
            return answer
        answer = self._ask_oracle(fr, value, borrow)
        self.state.oracle_answers[key] = (version, answer)
        return answer

    def _ask_oracle(self, fr: FlavorResource, value: int, borrow: int) -> tuple[Mode, int, str]:
        preemptor = Preemptor(self.workload, self.cq_name, {fr: value}, frozenset({fr}))
        targets = preemption_targets(self.state, preemptor)
        flavor, resource = fr
        if not targets:
            why = (
                f"insufficient unused quota for {resource} in flavor {flavor}, "
                f"{format_amount(resource, value - max(available(self.node, fr), 0))} more needed, "
                "and no workload can be preempted to free it"
            )
            return Mode.NO_CANDIDATES, borrow, why
        with self.state.without_usage(t.victim for t in targets):
            borrow_after, _ = lowest_fitting_subtree(self.node, fr, value)
        if all(t.victim.cluster_queue != self.cq_name for t in targets):
            return Mode.RECLAIM, borrow_after, ""
        return Mode.PREEMPT, borrow_after, ""

    def _ask(self, questions: list[_Question], result: Assignment) -> None:
        """Ask the oracle the deferred questions; each reason takes its placeholder's place."""
        answers: dict[int, str] = {}
        for question in questions:
            question.mode, question.borrow_after, why = self._preemption_oracle(
                question.fr, question.value, question.borrow
            )
            answers[id(question.placeholder)] = why
        reasons: list[str] = []
        for reason in result.reasons:
            if isinstance(reason, _Placeholder) and id(reason) in answers:
                if answers[id(reason)]:
                    reasons.append(answers[id(reason)])
            else:
                reasons.append(reason)  # another question's placeholder stays until it is asked
        result.reasons[:] = reasons


def _try_next(attempt: _FlavorTry, fungibility: FlavorFungibility) -> bool:
    """Whether the scan goes on after a flavor that can be used (fit or preempt), per flavorFungibility."""
    return (
        attempt.mode.is_preempt and fungibility.when_can_preempt == FungibilityPolicy.TRY_NEXT_FLAVOR
    ) or (attempt.borrowing > 0 and fungibility.when_can_borrow == FungibilityPolicy.TRY_NEXT_FLAVOR)


def _select(attempts: Sequence[_FlavorTry], fungibility: FlavorFungibility) -> _FlavorTry | None:
    """The flavor the scan keeps, from its attempts in order (findFlavorForPodSetResource)."""
    best: _FlavorTry | None = None
    for attempt in attempts:
        if attempt.mode <= Mode.NO_CANDIDATES:
            if best is None or attempt.mode > best.mode:
                best = attempt
            continue
        if best is None or _preferred(attempt, best, fungibility.preference):
            best = attempt
        if not _try_next(attempt, fungibility):
            best = attempt
            break
    return best


def _preferred(a: _FlavorTry, b: _FlavorTry, preference: FungibilityPreference | None) -> bool:
    """Whether ``a`` beats ``b`` (ties keep the earlier flavor ``b``)."""
    if preference == FungibilityPreference.PREEMPTION_OVER_BORROWING:
        if a.borrowing != b.borrowing:
            return a.borrowing < b.borrowing
        return a.mode > b.mode
    if a.mode != b.mode:
        return a.mode > b.mode
    return a.borrowing < b.borrowing
