"""Binding admitted workloads' pods to nodes: filters, a scoring policy, gangs and topology.

Kueue decides whether a workload may start; this decides where its pods run,
the job of the kube-scheduler, the NVIDIA device plugin and Kueue's Topology
Aware Scheduling together. A workload is a gang: every pod is bound or none
is (:meth:`Placer.place` rolls back a partial attempt). Pod sets whose
flavor names a Topology go through Kueue's TAS algorithm first
(:mod:`gpuq.core.topology`), which says how many pods go to each lowest-level
domain; it reads a live capacity view of the topology
(:mod:`gpuq.core.placement.topology_view`) rather than every node. A pod-set
group (a leader and its workers) is chosen and bound as one unit
(:mod:`gpuq.core.placement.groups`).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuq.core.model import (
    PodSet,
    PodSetAssignment,
    RecordedTopology,
    ResourceFlavor,
    TopologyMode,
    TopologyRequest,
    Workload,
)
from gpuq.core.nodes import NO_GPU, GPUDemand, Node
from gpuq.core.placement.capacity import NodeCapacity, PodShape, pod_shape
from gpuq.core.placement.filters import NodeRequirements, requirements_for, selector_matches, static_rejection
from gpuq.core.placement.groups import place_units, placement_units
from gpuq.core.placement.index import CapacityIndex, NodeClass
from gpuq.core.placement.policies import PolicyInputs, TieBreak
from gpuq.core.placement.scoring import BucketWalk, Chooser, ScoredBuckets, chooser_for
from gpuq.core.placement.topology_view import CapacityView, CapacityViews, ViewKey, view_members
from gpuq.core.topology import TopologyAssignment, TopologyFailure, TopologyPlan, assign, assign_in, resolve
from gpuq.core.topology_tree import Values

DOWN_POD = "<node down>"

NodesWithRoom = Callable[[Values], list[tuple[str, int]]]
"""A leaf's nodes with room for the pod set and how many pods fit on each, fullest first."""


@dataclass(frozen=True, slots=True)
class PodBinding:
    pod: str  # <namespace>/<workload>/<pod set>-<index>
    node: str
    gpus: tuple[int, ...] = ()  # device indices for whole or fractional GPUs


@dataclass(frozen=True, slots=True)
class PodSetPlacement:
    name: str
    bindings: tuple[PodBinding, ...]
    topology: TopologyAssignment | None = None


@dataclass(frozen=True, slots=True)
class WorkloadPlacement:
    workload: str
    pod_sets: tuple[PodSetPlacement, ...]

    @property
    def bindings(self) -> tuple[PodBinding, ...]:
        return tuple(b for ps in self.pod_sets for b in ps.bindings)


@dataclass(frozen=True, slots=True)
class PlacementFailure:
    """Why a workload's gang cannot be bound now; ``reason`` is a short code, ``message`` the details."""

    workload: str
    pod_set: str
    reason: str  # Unschedulable | TopologyPlacementFailed
    message: str


@dataclass(frozen=True, slots=True)
class _PodSetRequest:
    pod_set: PodSet
    count: int
    requirements: NodeRequirements
    shape: PodShape
    topology: tuple[str, tuple[str, ...]] | None  # (topology name, levels) for a TAS flavor
    recorded: RecordedTopology | None = None  # pods per domain Kueue already decided (status.admission)


class Placer:
    """Free capacity of a set of nodes and the workloads bound to them.

    ``topology_views`` bounds the live capacity views kept for topology-aware pod sets (one per
    pod shape, requirements, topology, per-node cap and slicing; least recently used dropped);
    0 keeps none and reads every node with room for each such pod set, as Kueue's TAS snapshot
    does. Both make the same decisions.
    """

    def __init__(
        self,
        nodes: Iterable[Node],
        *,
        policy: str | Chooser = "binpack",
        policy_inputs: PolicyInputs | None = None,
        flavors: Mapping[str, ResourceFlavor] | None = None,
        topologies: Mapping[str, tuple[str, ...]] | None = None,
        topology_views: int = 64,
    ) -> None:
        self.flavors = dict(flavors or {})
        self.topologies = dict(topologies or {})
        varying = {level for levels in self.topologies.values() for level in levels}
        self.index = CapacityIndex(nodes, varying)
        self.chooser = chooser_for(policy, policy_inputs) if isinstance(policy, str) else policy
        self.placements: dict[str, WorkloadPlacement] = {}
        self._classes: dict[tuple[object, ...], list[NodeClass]] = {}
        self._topology_positions: dict[tuple[str, ...], dict[str, tuple[str, ...]]] = {}
        self._soft_tiers: dict[tuple[object, ...], list[list[NodeClass]]] = {}
        self._views = CapacityViews(self.index, topology_views)
        self._most_per_node_cache: dict[tuple[object, ...], int] = {}
        self._answers: dict[str, _Answer] = {}  # the last placement computed for each workload
        self._reuse = _deterministic(self.chooser)

    # ------------------------------------------------------------------ public
    def place(
        self, workload: Workload, pod_sets: Sequence[PodSetAssignment] | None = None, *, explain: bool = True
    ) -> WorkloadPlacement | PlacementFailure:
        """Bind every pod of ``workload`` (as admitted, when ``pod_sets`` is given) or none.

        Pod sets are placed in order, a pod-set group (:mod:`gpuq.core.placement.groups`) as one
        unit at its first member. ``explain=False`` skips the per-node failure summary, which
        reads every node.
        """
        key = workload.key
        if key in self.placements:
            return self.placements[key]
        asked = tuple(pod_sets) if pod_sets is not None else None
        before = self.index.version
        answer = self._answers.pop(key, None) if self._reuse else None
        if answer is not None and answer.same_question(workload, asked, before):
            return self._retake(answer)
        requests = self._requests(workload, pod_sets)
        units = placement_units(workload.key, requests) if len(requests) > 1 else None
        if units is not None:  # not remembered: its pods are bound in unit order, not listed order
            return place_units(self, workload.key, requests, units, explain)
        outcome = self._place_plain(workload, requests, explain)
        if isinstance(outcome, WorkloadPlacement) and self._reuse:
            self._remember(workload, asked, before, outcome)
        return outcome

    def _place_plain(
        self, workload: Workload, requests: Sequence[_PodSetRequest], explain: bool
    ) -> WorkloadPlacement | PlacementFailure:
        """Pod sets one after the other (no pod-set group): every pod bound in listed order, or none."""
        before = self.index.version
        taken: list[PodBinding] = []
        placed: list[PodSetPlacement] = []
        for request in requests:
            outcome = self._place_pod_set(workload.key, request, taken, explain)
            if isinstance(outcome, PlacementFailure):
                self._unbind(taken)
                self.index.restore_version(before)  # every pod taken was given back: nothing changed
                return outcome
            placed.append(outcome)
        result = WorkloadPlacement(workload.key, tuple(placed))
        self.placements[workload.key] = result
        return result

    def _remember(
        self,
        workload: Workload,
        asked: tuple[PodSetAssignment, ...] | None,
        before: int,
        placement: WorkloadPlacement,
    ) -> None:
        """Keep a computed placement: asked again in the same free state (a what-if's answer asked by
        assume, an assumed one asked by bind), it is taken as it is rather than computed anew."""
        if len(self._answers) >= MAX_ANSWERS:
            self._answers.clear()
        shapes = tuple(self.index.capacity[b.node].bound[b.pod][0] for b in placement.bindings)
        self._answers[workload.key] = _Answer(
            workload.pod_sets, asked, before, self.index.version, placement, shapes
        )

    def _retake(self, answer: _Answer) -> WorkloadPlacement:
        """Bind every pod exactly where the remembered placement put it: the nodes are in the state it
        was computed in, and placement is a function of that state, so computing would give it again."""
        capacity = self.index.capacity
        for binding, shape in zip(answer.placement.bindings, answer.shapes, strict=True):
            capacity[binding.node].take(binding.pod, shape, binding.gpus)
            self.index.refresh(binding.node)
        self.index.restore_version(answer.after)
        self.placements[answer.placement.workload] = answer.placement
        self._answers[answer.placement.workload] = answer  # bind may ask after assume was forgotten
        return answer.placement

    @property
    def capacity_version(self) -> int:
        """Names the nodes' free state (:attr:`CapacityIndex.version`)."""
        return self.index.version

    def check(
        self, workload: Workload, pod_sets: Sequence[PodSetAssignment] | None = None
    ) -> PlacementFailure | None:
        """Whether ``place`` would succeed now; nothing changes."""
        if workload.key in self.placements:
            return None
        before = self.index.version
        outcome = self.place(workload, pod_sets, explain=False)
        if isinstance(outcome, PlacementFailure):
            return outcome
        self.release(workload.key)
        self.index.restore_version(before)  # released exactly what was taken
        return None

    def release(self, key: str) -> None:
        """Unbind every pod of a workload (finished, evicted or forgotten); unknown keys are ignored."""
        placement = self.placements.pop(key, None)
        if placement is not None:
            self._unbind(list(placement.bindings))

    def restore(self, workload: Workload, bindings: Sequence[PodBinding]) -> WorkloadPlacement:
        """Bind ``workload``'s pods exactly where they already run (pod ``<key>/<pod set>-<i>`` on its node
        and GPUs), replacing any placement it had: a control plane rebuilding its view of running pods
        must not move them on paper while their processes stay put."""
        self.release(workload.key)
        shapes = {ps.name: pod_shape(ps.requests) for ps in workload.pod_sets}
        placed: dict[str, list[PodBinding]] = {}
        for binding in bindings:
            pod_set = binding.pod.rsplit("/", 1)[1].rsplit("-", 1)[0]
            capacity = self.index.capacity[binding.node]
            gpus = capacity.take(binding.pod, shapes[pod_set], binding.gpus or None)
            self.index.refresh(binding.node)
            placed.setdefault(pod_set, []).append(PodBinding(binding.pod, binding.node, gpus))
        result = WorkloadPlacement(
            workload.key, tuple(PodSetPlacement(name, tuple(bound)) for name, bound in placed.items())
        )
        self.placements[workload.key] = result
        return result

    def set_down(self, name: str, down: bool) -> None:
        """Take a node out of service (removed, failed, not yet provisioned) or back in.

        A down node holds a phantom pod that takes everything it has, so every filter,
        bucket and topology view sees it full, with no special case anywhere. A node that
        still holds pods (a live eviction waits for their processes to end) goes down at
        once too: the phantom takes what is free now, and what each leaving pod returns.
        """
        capacity = self.index.capacity[name]
        if down == (DOWN_POD in capacity.bound):
            return
        if down:
            self._seal(name)
        else:
            capacity.give(DOWN_POD)
        self.index.refresh(name)

    def _seal(self, name: str) -> None:
        """Let a down node's phantom pod take everything the node has free (again)."""
        capacity = self.index.capacity[name]
        if DOWN_POD in capacity.bound:
            capacity.give(DOWN_POD)
        # Every GPU no pod holds. A GPU a shared pod partly holds keeps its rest until that pod leaves
        # (then this runs again and takes it): only while a down node's pods are being stopped.
        whole = tuple(i for i in range(len(capacity.gpu_milli)) if capacity._holds(i, GPUDemand(count=1)))
        demand = GPUDemand(count=len(whole)) if capacity.per_device and whole else NO_GPU
        capacity.take(DOWN_POD, PodShape(dict(capacity.free), demand), whole)

    def is_down(self, name: str) -> bool:
        return DOWN_POD in self.index.capacity[name].bound

    def uses_topology(self, workload: Workload, pod_sets: Sequence[PodSetAssignment] | None = None) -> bool:
        return any(r.topology is not None for r in self._requests(workload, pod_sets))

    @property
    def nodes(self) -> Mapping[str, NodeCapacity]:
        return self.index.capacity

    # ---------------------------------------------------------------- requests
    def _requests(
        self, workload: Workload, pod_sets: Sequence[PodSetAssignment] | None
    ) -> list[_PodSetRequest]:
        assigned = {ps.name: ps for ps in pod_sets or ()}
        requests = []
        for pod_set in workload.pod_sets:
            assignment = assigned.get(pod_set.name)
            if pod_sets is not None and assignment is None:
                continue
            names = sorted(set(assignment.flavors.values())) if assignment else []
            flavors = [self.flavors[n] for n in names if n in self.flavors]
            topology = None
            for flavor in flavors:
                if flavor.topology_name and flavor.topology_name in self.topologies:
                    topology = (flavor.topology_name, self.topologies[flavor.topology_name])
            count = assignment.count if assignment else pod_set.count
            shape = pod_shape(pod_set.requests)
            recorded = assignment.topology if assignment else None
            requests.append(
                _PodSetRequest(pod_set, count, requirements_for(pod_set, flavors), shape, topology, recorded)
            )
        return requests

    def _place_pod_set(
        self, key: str, request: _PodSetRequest, taken: list[PodBinding], explain: bool
    ) -> PodSetPlacement | PlacementFailure:
        name = request.pod_set.name
        if request.recorded is not None:
            from gpuq.core.placement.recorded import place_recorded

            return place_recorded(self, key, request, taken)
        if request.topology is not None:
            return self._place_topology(key, request, taken)
        bindings: list[PodBinding] = []
        for index in range(request.count):
            node = self._choose(request)
            if node is None:
                taken.extend(bindings)
                message = self.explain(request) if explain else "no node fits the pod"
                return PlacementFailure(key, name, "Unschedulable", message)
            bindings.append(self._bind(f"{key}/{name}-{index}", node, request.shape))
        taken.extend(bindings)
        return PodSetPlacement(name, tuple(bindings))

    # ---------------------------------------------------------------- choosing
    def matching_classes(self, requirements: NodeRequirements) -> list[NodeClass]:
        """Classes whose nodes may pass the static filters (per-node labels are checked later)."""
        cache_key = _requirements_key(requirements)
        classes = self._classes.get(cache_key)
        if classes is None:
            per_node = bool(requirements.keys() & self.index.varying)
            loose = NodeRequirements(tolerations=requirements.tolerations) if per_node else requirements
            classes = [c for c in self.index.classes if static_rejection(c.sample, loose) is None]
            self._classes[cache_key] = classes
        return classes

    def _choose(self, request: _PodSetRequest) -> str | None:
        per_node = bool(request.requirements.keys() & self.index.varying)

        def admissible(capacity: NodeCapacity) -> bool:
            if per_node and not selector_matches(request.requirements, capacity.node.labels):
                return False
            return capacity.shortage(request.shape) is None

        key = _requirements_key(request.requirements)
        tiers = self._soft_tiers.get(key)
        if tiers is None:
            tiers = self._soft_tiers[key] = _by_soft_taints(
                self.matching_classes(request.requirements), request.requirements
            )
        for tier in tiers:
            chosen = self.chooser.choose(self.index, tier, request.shape, admissible)
            if chosen is not None:
                return chosen
        return None

    def _bind(self, pod: str, node: str, shape: PodShape) -> PodBinding:
        capacity = self.index.capacity[node]
        gpus = capacity.take(pod, shape, self.chooser.pick_gpus(capacity, shape))
        self.index.refresh(node)
        return PodBinding(pod, node, gpus)

    def _unbind(self, bindings: list[PodBinding]) -> None:
        for binding in reversed(bindings):
            capacity = self.index.capacity[binding.node]
            capacity.give(binding.pod)
            if DOWN_POD in capacity.bound:  # a node gone down while it held the pod: it stays full
                self._seal(binding.node)
            self.index.refresh(binding.node)
        bindings.clear()

    # ---------------------------------------------------------------- topology
    def _place_topology(
        self, key: str, request: _PodSetRequest, taken: list[PodBinding]
    ) -> PodSetPlacement | PlacementFailure:
        """TAS: let Kueue's algorithm choose leaf domains and pods per leaf, bind within each leaf.

        1. Resolve the request (level, slicing); zero pods get an empty assignment.
        2. Choose the leaves on the live view of the pod set's capacities (or, without views,
           on the leaves summed from every node with room).
        3. In each chosen leaf (sorted by values), fill the nodes fullest first, then by name.
        """
        assert request.topology is not None
        topology_name, levels = request.topology
        topology_request = request.pod_set.topology or TopologyRequest(TopologyMode.UNCONSTRAINED)
        name = request.pod_set.name
        plan = resolve(levels, request.count, topology_request)
        if isinstance(plan, TopologyFailure):
            return PlacementFailure(key, name, "TopologyPlacementFailed", plan.reason)
        outcome: TopologyAssignment | TopologyFailure
        nodes_in: NodesWithRoom
        if plan.count == 0:
            outcome, nodes_in = TopologyAssignment(levels, ()), lambda leaf: []
        elif self._views.limit:
            view = self._view(request, levels, plan)
            outcome = assign_in(levels, view.tree, plan, topology_name=topology_name)
            nodes_in = view.nodes_with_room
        else:
            outcome, nodes_in = self._assign_from_scratch(request, topology_request, topology_name)
        if isinstance(outcome, TopologyFailure):
            return PlacementFailure(key, name, "TopologyPlacementFailed", outcome.reason)
        bindings: list[PodBinding] = []
        for domain in outcome.domains:
            remaining = domain.count
            for node, fit in nodes_in(domain.values):
                for _ in range(min(fit, remaining)):
                    bindings.append(self._bind(f"{key}/{name}-{len(bindings)}", node, request.shape))
                remaining -= min(fit, remaining)
                if not remaining:
                    break
        taken.extend(bindings)
        return PodSetPlacement(name, tuple(bindings), outcome)

    def _assign_from_scratch(
        self, request: _PodSetRequest, topology_request: TopologyRequest, topology_name: str
    ) -> tuple[TopologyAssignment | TopologyFailure, NodesWithRoom]:
        """Kueue's snapshot: sum the pods that fit per leaf over every node with room, then assign."""
        assert request.topology is not None
        levels = request.topology[1]
        leaves: dict[Values, list[tuple[str, int]]] = {}
        positions = self._positions(levels)
        for node, fit in self._fits(request):
            values = positions.get(node)
            if values is not None:  # Kueue ignores nodes without every level label
                leaves.setdefault(values, []).append((node, fit))
        counts = {leaf: sum(fit for _, fit in nodes) for leaf, nodes in leaves.items()}
        outcome = assign(levels, counts, request.count, topology_request, topology_name=topology_name)
        return outcome, lambda leaf: sorted(leaves[leaf], key=lambda item: (-item[1], item[0]))

    def _view(self, request: _PodSetRequest, levels: tuple[str, ...], plan: TopologyPlan) -> CapacityView:
        """The live view for this pod set, caught up with every change since its last use."""
        cap = self._most_per_node(request)  # no node holds more than an empty one: fits are exact
        shape, requirements = request.shape, _requirements_key(request.requirements)
        key = ViewKey(shape.key, requirements, levels, cap, plan.slice_level_idx, plan.slice_size)
        return self._views.get(
            key,
            lambda: CapacityView(
                self.index,
                self._members(request, levels),
                shape,
                cap,
                slice_level_idx=plan.slice_level_idx,
                slice_size=plan.slice_size,
                depth=len(levels),
            ),
        )

    def _most_per_node(self, request: _PodSetRequest) -> int:
        """The most pods of the shape any candidate node holds, which is when it is empty."""
        key = (request.shape.key, _requirements_key(request.requirements))
        most = self._most_per_node_cache.get(key)
        if most is None:
            classes = self.matching_classes(request.requirements)
            empty = (NodeCapacity(c.sample).fit_count(request.shape, sys.maxsize) for c in classes)
            most = self._most_per_node_cache[key] = max(empty, default=0)
        return most

    def _members(self, request: _PodSetRequest, levels: tuple[str, ...]) -> dict[str, Values]:
        """The nodes that may ever hold the pod set's pods in the topology, with their leaves."""
        classes = self.matching_classes(request.requirements)
        return view_members(self.index, classes, self._positions(levels), request.requirements)

    def _positions(self, levels: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
        """Each node's domain values for a topology's levels (nodes missing a level are left out)."""
        positions = self._topology_positions.get(levels)
        if positions is None:
            positions = {}
            for name, capacity in self.index.capacity.items():
                labels = capacity.node.labels
                if all(level in labels for level in levels):
                    positions[name] = tuple(labels[level] for level in levels)
            self._topology_positions[levels] = positions
        return positions

    def _fits(self, request: _PodSetRequest) -> Iterable[tuple[str, int]]:
        """Nodes passing the filters with room for at least one pod, and how many pods fit on each.

        Only buckets whose GPU state may hold a pod are read, so a full cluster costs little;
        a cluster with room costs one step per node with room, as Kueue's TAS snapshot does.
        """
        per_node = bool(request.requirements.keys() & self.index.varying)
        shape, limit = request.shape, sys.maxsize  # exact counts: Kueue's best fit compares them
        for node_class in self.matching_classes(request.requirements):
            for bucket in self.index.buckets(node_class, shape.gpu, descending=True):
                for name in bucket:
                    capacity = self.index.capacity[name]
                    if per_node and not selector_matches(request.requirements, capacity.node.labels):
                        continue
                    fit = capacity.fit_count(shape, limit)
                    if fit:
                        yield name, fit

    # ----------------------------------------------------------------- explain
    def explain(self, request: _PodSetRequest) -> str:
        """kube-scheduler's summary: ``0/N nodes are available: 3 Insufficient nvidia.com/gpu, ...``."""
        reasons: Counter[str] = Counter()
        for capacity in self.index.capacity.values():
            why = static_rejection(capacity.node, request.requirements) or capacity.shortage(request.shape)
            if why is not None:
                reasons[why] += 1
        total = len(self.index.capacity)
        detail = ", ".join(f"{count} {why}" for why, count in sorted(reasons.items()))
        return f"0/{total} nodes are available: {detail or 'no nodes'}."


MAX_ANSWERS = 4096  # remembered placements kept at most (one per workload; cleared when full)


@dataclass(frozen=True, slots=True)
class _Answer:
    """A placement computed for ``workload`` in the free state ``before``, leaving state ``after``."""

    specs: tuple[PodSet, ...]  # the workload's pod sets (the same object while it is the same workload)
    asked: tuple[PodSetAssignment, ...] | None
    before: int
    after: int
    placement: WorkloadPlacement
    shapes: tuple[PodShape, ...]  # each binding's pod shape, in binding order

    def same_question(
        self, workload: Workload, asked: tuple[PodSetAssignment, ...] | None, version: int
    ) -> bool:
        return self.before == version and self.specs is workload.pod_sets and self.asked == asked


def _deterministic(chooser: Chooser) -> bool:
    """Whether placing twice in one state binds alike: not for a policy that draws at random (its
    generator would advance once less when an answer is reused). Seeded orders are left out too."""
    if isinstance(chooser, BucketWalk):
        return True
    if isinstance(chooser, ScoredBuckets):
        return chooser.policy.tie_break is TieBreak.ORDER and chooser.policy.name != "random"
    return False


def _requirements_key(requirements: NodeRequirements) -> tuple[object, ...]:
    return (
        tuple(sorted(requirements.node_selector.items())),
        requirements.affinity,
        requirements.tolerations,
    )


def summarize(placements: Sequence[WorkloadPlacement]) -> Mapping[str, int]:
    """Pods bound per node, for reports."""
    per_node: Counter[str] = Counter()
    for placement in placements:
        per_node.update(b.node for b in placement.bindings)
    return dict(sorted(per_node.items()))


def _by_soft_taints(classes: list[NodeClass], requirements: NodeRequirements) -> list[list[NodeClass]]:
    """Classes grouped by how many PreferNoSchedule taints they carry that the pods do not tolerate,
    fewest first: the kube-scheduler's TaintToleration score prefers such nodes only when no other fits.
    """
    tiers: dict[int, list[NodeClass]] = {}
    for node_class in classes:
        soft = sum(
            1
            for taint in node_class.sample.taints
            if taint.effect == "PreferNoSchedule"
            and not any(t.tolerates(taint) for t in requirements.tolerations)
        )
        tiers.setdefault(soft, []).append(node_class)
    return [tiers[k] for k in sorted(tiers)]
