"""Ray nodes as gpuq nodes: what ``ray.nodes()`` says, as the placement core's :class:`Node`.

Pure conversion (no Ray import), so that it is tested with the dicts ``ray.nodes()`` returns
(``NodeID``, ``Alive``, ``NodeManagerAddress``, ``Resources``, ``Labels``,
``DeathReasonMessage``; Ray's ``python/ray/_private/state.py``, ``node_table``).

Names. A node labelled ``gpuq.dev/node`` (``ray start --labels gpuq.dev/node=a100-1``) is called
that; otherwise it is called by its ``NodeManagerAddress``, with the first six hex digits of its
node id appended when another alive node has the same address (several raylets on one machine).
A name once given to a node id is kept for as long as the caller passes it back (``known``), so
that a node joining later never renames one that placement already uses. A dead node keeps its
name; a node that restarts comes back with a new id, and, at the same address, the same name.

Allocatable: ``cpu`` (milli) from ``CPU``, ``memory`` (bytes), ``nvidia.com/gpu`` from ``GPU``, the
kubelet's 110 ``pods``, and every custom resource by its Ray name (floored to a whole amount);
Ray's bookkeeping resources (``node:<ip>``, ``node:__internal_head__``, ``object_store_memory``,
``accelerator_type:*``) are left out. Labels: the Ray node's own (``ray start --labels``,
``ray.io/*`` included), then ``kubernetes.io/hostname`` set to the gpuq name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuq.core.nodes import GPU, HOSTNAME_LABEL, PODS, Node

NODE_LABEL = "gpuq.dev/node"
"""The Ray node label that names the gpuq node (``ray start --labels gpuq.dev/node=NAME``)."""
DEFAULT_PODS = 110  # the kubelet's default pod capacity
_ID_SUFFIX = 6
_BOOKKEEPING = ("node:", "accelerator_type:")
_OWN = {"CPU", "GPU", "memory", "object_store_memory"}


@dataclass(frozen=True, slots=True)
class RayNode:
    """One Ray node: its id, its gpuq name, whether Ray has it alive, why it died, its gpuq node."""

    node_id: str
    name: str
    alive: bool
    node: Node
    death: str = ""  # Ray's DeathReasonMessage of a dead node


def ray_nodes(
    infos: Sequence[Mapping[str, Any]], *, known: Mapping[str, str] | None = None, pods: int = DEFAULT_PODS
) -> list[RayNode]:
    """Every node of ``ray.nodes()`` (alive first, then by name); ``known``: node id -> name given
    earlier, kept. Raises ``ValueError`` for an entry without a ``NodeID``."""
    names = node_names(infos, known=known)
    found = [
        RayNode(
            str(info["NodeID"]),
            names[str(info["NodeID"])],
            bool(info.get("Alive")),
            to_node(info, names[str(info["NodeID"])], pods=pods),
            str(info.get("DeathReasonMessage") or ""),
        )
        for info in infos
    ]
    return sorted(found, key=lambda n: (not n.alive, n.name, n.node_id))


def gpuq_nodes(infos: Sequence[Mapping[str, Any]], *, known: Mapping[str, str] | None = None) -> list[Node]:
    """The alive Ray nodes as gpuq nodes, by name: what placement places on."""
    return [found.node for found in ray_nodes(infos, known=known) if found.alive]


def node_names(
    infos: Sequence[Mapping[str, Any]], *, known: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Node id -> gpuq name, as the module docstring says; unique among alive nodes."""
    known = known or {}
    ids = []
    for position, info in enumerate(infos):
        node_id = info.get("NodeID")
        if not isinstance(node_id, str) or not node_id:
            raise ValueError(f"ray.nodes()[{position}] has no NodeID: {dict(info)!r}")
        ids.append(node_id)
    by_id = dict(zip(ids, infos, strict=True))
    alive = sorted(i for i in ids if by_id[i].get("Alive"))
    names: dict[str, str] = {i: known[i] for i in alive if i in known}
    taken = set(names.values())
    fresh = [i for i in alive if i not in names]
    bases = {i: _base_name(by_id[i]) for i in ids}
    for node_id in fresh:
        base = bases[node_id]
        shared = base in taken or sum(1 for other in fresh if bases[other] == base) > 1
        name = f"{base}-{node_id[:_ID_SUFFIX]}" if shared else base
        names[node_id] = name
        taken.add(name)
    for node_id in ids:
        if node_id not in names:  # dead: its earlier name, else one that no alive node has
            base = known.get(node_id, bases[node_id])
            clash = base in taken and node_id not in known
            names[node_id] = f"{base}-{node_id[:_ID_SUFFIX]}" if clash else base
    return names


def to_node(info: Mapping[str, Any], name: str, *, pods: int = DEFAULT_PODS) -> Node:
    """One ``ray.nodes()`` entry as a gpuq node called ``name`` (see the module docstring)."""
    resources: Mapping[str, Any] = info.get("Resources") or {}
    gpus = int(_amount(resources, "GPU"))
    allocatable: dict[str, int] = {
        "cpu": round(_amount(resources, "CPU") * 1000),
        "memory": int(_amount(resources, "memory")),
        PODS: pods,
    }
    if gpus:
        allocatable[GPU] = gpus
    for resource, amount in resources.items():
        if resource in _OWN or resource.startswith(_BOOKKEEPING):
            continue
        whole = math.floor(float(amount))
        if whole > 0:
            allocatable[str(resource)] = whole
    labels = {str(k): str(v) for k, v in (info.get("Labels") or {}).items()}
    labels[HOSTNAME_LABEL] = name
    return Node(
        name=name,
        allocatable=dict(sorted(allocatable.items())),
        labels=dict(sorted(labels.items())),
        gpu_count=gpus,
    )


def _base_name(info: Mapping[str, Any]) -> str:
    """The node's ``gpuq.dev/node`` label, else its address (else its id)."""
    label = (info.get("Labels") or {}).get(NODE_LABEL)
    if label:
        return str(label)
    return str(info.get("NodeManagerAddress") or info.get("NodeName") or info["NodeID"])


def _amount(resources: Mapping[str, Any], name: str) -> float:
    value = resources.get(name, 0.0)
    return float(value) if isinstance(value, int | float) else 0.0
