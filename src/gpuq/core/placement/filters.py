"""Static node filters: what rules a node out for a pod regardless of free capacity.

The kube-scheduler's NodeUnschedulable, NodeAffinity (nodeSelector plus
required node affinity) and TaintToleration filters, with Kueue's additions
for an admitted pod set: the assigned ResourceFlavors' ``nodeLabels`` join the
node selector and their ``tolerations`` join the pod's. Messages use the
kube-scheduler's wording so ``0/12 nodes are available: ...`` reads familiar.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuq.core.model import PodSet, Requirement, ResourceFlavor, Taint, Toleration
from gpuq.core.nodes import Node

UNSCHEDULABLE = "node(s) were unschedulable"
SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
FILTERING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class NodeRequirements:
    """The static constraints of one pod set's pods, flavors included."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[tuple[Requirement, ...], ...] = ()  # required terms, ORed
    tolerations: tuple[Toleration, ...] = ()

    def keys(self) -> frozenset[str]:
        """Every label key these requirements read."""
        keys = set(self.node_selector)
        for term in self.affinity:
            keys.update(req.key for req in term)
        return frozenset(keys)


def requirements_for(pod_set: PodSet, flavors: Iterable[ResourceFlavor] = ()) -> NodeRequirements:
    """A pod set's constraints plus those Kueue injects for its assigned flavors."""
    selector = dict(pod_set.node_selector)
    tolerations = list(pod_set.tolerations)
    for flavor in flavors:
        selector.update(flavor.node_labels)
        tolerations.extend(flavor.tolerations)
    return NodeRequirements(selector, pod_set.node_affinity, tuple(tolerations))


def selector_matches(requirements: NodeRequirements, labels: Mapping[str, str]) -> bool:
    """nodeSelector ANDed with the ORed required affinity terms (an empty term list matches all)."""
    if any(labels.get(key) != value for key, value in requirements.node_selector.items()):
        return False
    if not requirements.affinity:
        return True
    return any(all(req.matches(labels) for req in term) for term in requirements.affinity)


def untolerated_taint(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> Taint | None:
    """The first NoSchedule / NoExecute taint no toleration covers (PreferNoSchedule only scores)."""
    tolerations = tuple(tolerations)
    for taint in taints:
        if taint.effect in FILTERING_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def taint_message(taint: Taint) -> str:
    value = f": {taint.value}" if taint.value else ""
    return f"node(s) had untolerated taint {{{taint.key}{value}}}"


def static_rejection(node: Node, requirements: NodeRequirements) -> str | None:
    """Why ``node`` can never hold these pods whatever is free, or None when it may."""
    if node.unschedulable:
        return UNSCHEDULABLE
    if not selector_matches(requirements, node.labels):
        return SELECTOR_MISMATCH
    taint = untolerated_taint(node.taints, requirements.tolerations)
    return None if taint is None else taint_message(taint)
