"""Binding pods where Kueue already placed them: a recorded ``topologyAssignment``.

A workload read from a live cluster with ``status.admission`` carries, per
topology-aware pod set, the pods Kueue assigned to each lowest-level domain
(often only the hostname). Placing it again with the algorithm could put it
elsewhere than where it runs, so its pods are bound inside the recorded
domains instead; a domain that no longer holds its pods (a node gone or full)
leaves the workload unplaced, with the domain named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuq.core.placement.filters import selector_matches, static_rejection

if TYPE_CHECKING:
    from gpuq.core.placement.engine import (
        PlacementFailure,
        Placer,
        PodBinding,
        PodSetPlacement,
        _PodSetRequest,
    )


def place_recorded(
    placer: Placer, key: str, request: _PodSetRequest, taken: list[PodBinding]
) -> PodSetPlacement | PlacementFailure:
    """Bind ``count`` pods in each recorded domain, nodes in name order, or fail naming the domain."""
    from gpuq.core.placement.engine import PlacementFailure, PodSetPlacement

    recorded = request.recorded
    assert recorded is not None
    name = request.pod_set.name
    members = _domain_members(placer, recorded.levels)
    bindings: list[PodBinding] = []
    index = 0
    for values, count in recorded.domains:
        remaining = count
        for node in members.get(values, ()):
            capacity = placer.nodes[node]
            if static_rejection(capacity.node, request.requirements) or not selector_matches(
                request.requirements, capacity.node.labels
            ):
                continue
            while remaining and capacity.shortage(request.shape) is None:
                bindings.append(placer._bind(f"{key}/{name}-{index}", node, request.shape))
                index += 1
                remaining -= 1
            if not remaining:
                break
        if remaining:
            taken.extend(bindings)
            where = ", ".join(
                f"{level}={value}" for level, value in zip(recorded.levels, values, strict=True)
            )
            message = f"the recorded topology domain {where} holds only {count - remaining} of {count} pod(s)"
            return PlacementFailure(key, name, "Unschedulable", message)
    taken.extend(bindings)
    return PodSetPlacement(name, tuple(bindings))


def _domain_members(placer: Placer, levels: tuple[str, ...]) -> dict[tuple[str, ...], list[str]]:
    """Node names per domain of ``levels``, in name order."""
    members: dict[tuple[str, ...], list[str]] = {}
    for node, values in sorted(placer._positions(levels).items()):
        members.setdefault(values, []).append(node)
    return members
