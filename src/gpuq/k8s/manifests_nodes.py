"""Node provisioning objects: GKE ComputeClasses or Karpenter NodePools.

* ``gke`` (default): GKE creates node pools itself (gcloud, Terraform or node auto-provisioning);
  what Kubernetes holds is the ``cloud.google.com/v1`` ComputeClass. A gpuq
  ``gpuq.dev/v1alpha1`` ComputeClass maps to it field by field: ``spec.priorities[]``
  keep GKE's keys (machine family or type, cores, memory, spot, GPU type and count,
  reservations, location, flexStart, priorityScore...), gpuq-only keys (prices,
  stock, delays) are dropped; every other key of GKE's spec (``description``,
  ``whenUnsatisfiable``, ``nodePoolAutoCreation``, ``nodePoolConfig``, ``priorityDefaults``,
  ``activeMigration``, ``autoscalingPolicy``) passes through, and so do a rule's
  ``maxRunDurationSeconds``, ``placement`` and ``nodeSystemConfig``. A configuration
  without ComputeClasses gets none.
* ``karpenter``: one ``karpenter.sh/v1`` NodePool per gpuq NodePool (:func:`karpenter_node_pool`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from gpuq.api import machines
from gpuq.api.compute_class import ComputeClass
from gpuq.api.diagnostics import Manifest
from gpuq.api.machines import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NVLINK_LABEL, POOL_LABEL, SPOT_LABEL
from gpuq.api.machines import ZONE_LABEL as ZONE
from gpuq.k8s.export_common import ExportOptions, Obj, drop_empty, first_models, format_quantity, make
from gpuq.k8s.manifests_devices import node_config_labels
from gpuq.k8s.schemas import GKE_PRIORITY, GKE_SPEC_KEYS

KARPENTER_API = "karpenter.sh/v1"
KARPENTER_CAPACITY = "karpenter.sh/capacity-type"
GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
_GCE_ZONE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
_RESTRICTED_DOMAINS = ("kubernetes.io", "k8s.io", "karpenter.sh", "karpenter.k8s.aws")
KARPENTER_CAPACITY_OF = {
    "on-demand": "on-demand",
    "spot": "spot",
    "reserved": "reserved",
    "calendar": "reserved",
    "flex-start": "on-demand",
}
"""Karpenter knows on-demand, spot and reserved: a calendar block is a capacity reservation, and
flex-start (GKE DWS) has no Karpenter equivalent, so it asks for on-demand."""


def node_objects(manifests: Sequence[Manifest], options: ExportOptions) -> tuple[list[Obj], list[str]]:
    """The provisioner's objects for the configuration's pools or compute classes, and warnings
    about what they cannot express (:func:`karpenter_warnings`)."""
    if options.provisioner == "karpenter":
        pools = list(first_models(manifests, machines.NodePool))
        warnings = [w for pool in pools for w in karpenter_warnings(pool)]
        return [karpenter_node_pool(pool, options) for pool in pools], warnings
    return [gke_compute_class(_plain(m.model)) for m in manifests if _is_compute_class(m)], []


# --- Karpenter ----------------------------------------------------------------------------------


def _restricted(label: str) -> bool:
    """Karpenter refuses template labels in its and Kubernetes' domains (they are requirements)."""
    domain = label.partition("/")[0] if "/" in label else ""
    return any(domain == d or domain.endswith(f".{d}") for d in _RESTRICTED_DOMAINS)


def pool_labels(pool: machines.NodePool) -> dict[str, str]:
    """Labels every node of the pool carries (user's, gpuq's, topology, device configs); the
    per-node ones (hostname, one of several racks) left out."""
    spec = pool.spec
    labels = {**spec.labels, POOL_LABEL: str(pool.metadata.name), CAPACITY_TYPE_LABEL: spec.capacity_type}
    if spec.capacity_type == "spot":
        labels[SPOT_LABEL] = "true"
    if spec.nvlink_domain and spec.nvlink_domain != "none":
        labels[NVLINK_LABEL] = spec.nvlink_domain
    if spec.topology is not None and spec.topology.block:
        labels[spec.topology_labels.block] = spec.topology.block
    if spec.topology is not None and spec.topology.rack and not spec.topology.racks:
        labels[spec.topology_labels.rack] = spec.topology.rack
    labels.update(node_config_labels(pool))
    return dict(sorted(labels.items()))


def gpu_name(model: str) -> str:
    """Karpenter's ``instance-gpu-name`` for a catalogue model: ``A100-80GB`` -> ``a100``."""
    return model.split("-")[0].lower()


def karpenter_warnings(pool: machines.NodePool) -> list[str]:
    """What of a GKE-shaped pool an AWS Karpenter NodePool takes as written but cannot honour.

    EC2 instance types are ``family.size`` (``p5.48xlarge``); GCE machine types
    (``a3-highgpu-8g``) have no dot. AWS zones end in a digit and a letter
    (``us-east-1a``); GCE zones in ``-<letter>`` (``us-central1-a``). Labels in GKE's
    domains (``cloud.google.com/``, ``*.gke.io/``) are copied onto the EC2 nodes as written,
    though GKE is not there to mean anything by them. Nothing is mapped: which EC2 type
    matches a GCE one is the operator's choice.
    """
    spec = pool.spec
    where = f"NodePool/{pool.metadata.name}"
    out = []
    if "." not in spec.machine_type:
        out.append(
            f"{where}: spec.machineType: {spec.machine_type!r} is not an EC2 instance type (family.size, "
            f"e.g. p5.48xlarge): Karpenter's instance-type requirement will match no instance"
        )
    if spec.zone and _GCE_ZONE.match(spec.zone):
        out.append(
            f"{where}: spec.zone: {spec.zone!r} is a GCE zone (AWS zones look like us-east-1a): "
            "Karpenter's zone requirement will match no subnet"
        )
    for key in sorted(spec.labels):
        domain = key.partition("/")[0] if "/" in key else ""
        if domain == "cloud.google.com" or domain.endswith(".gke.io"):
            out.append(f"{where}: spec.labels[{key}]: a GKE label, written as is on the EC2 nodes")
    return out


def _requirements(pool: machines.NodePool) -> list[Obj]:
    spec = pool.spec
    reqs: list[Obj] = [
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [spec.machine_type]},
        {"key": KARPENTER_CAPACITY, "operator": "In", "values": [KARPENTER_CAPACITY_OF[spec.capacity_type]]},
    ]
    if spec.gpu is not None:
        reqs.append({"key": GPU_NAME, "operator": "In", "values": [gpu_name(spec.gpu.model)]})
        reqs.append({"key": GPU_COUNT, "operator": "In", "values": [str(spec.gpu.count)]})
    if spec.zone:
        reqs.append({"key": ZONE, "operator": "In", "values": [spec.zone]})
    return reqs


def _limits(pool: machines.NodePool) -> Obj:
    """The pool's ``limits`` when written, else its resources at its maximum size."""
    spec = pool.spec
    if spec.limits:
        return {name: format_quantity(name, value) for name, value in sorted(spec.limits.items())}
    most = Decimal(spec.sizes()[2])
    limits = {
        "cpu": format_quantity("cpu", spec.cpu * most),
        "memory": format_quantity("memory", spec.memory * most),
    }
    if spec.gpu is not None:
        limits["nvidia.com/gpu"] = str(spec.gpu.count * int(most))
    return limits


def _expire_after(pool: machines.NodePool) -> str:
    written = pool.spec.disruption.expire_after if pool.spec.disruption else None
    if written is None:
        return "720h"
    return written if isinstance(written, str) else _seconds(written)


def karpenter_node_pool(pool: machines.NodePool, options: ExportOptions) -> Obj:
    """A Karpenter NodePool with the pool's requirements, labels, taints, limits and disruption.

    Consolidation only removes empty nodes (a GPU job is never moved to save money),
    at most 10% of the nodes at a time; reserved pools are never disrupted.
    """
    spec = pool.spec
    labels = {k: v for k, v in pool_labels(pool).items() if not _restricted(k)}
    node_class = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": options.node_class}
    template_spec = drop_empty(
        {
            "nodeClassRef": node_class,
            "requirements": _requirements(pool),
            "taints": [
                drop_empty({"key": t.key, "value": t.value or None, "effect": t.effect}) for t in spec.taints
            ],
            "expireAfter": _expire_after(pool),
        }
    )
    body = {
        "template": {"metadata": {"labels": labels}, "spec": template_spec},
        "limits": _limits(pool),
        "disruption": _disruption(pool),
    }
    return {**make(KARPENTER_API, "NodePool", str(pool.metadata.name)), "spec": body}


def _seconds(value: float) -> str:
    return f"{int(value)}s" if value % 60 else f"{int(value // 60)}m"


def _disruption(pool: machines.NodePool) -> Obj:
    """The pool's ``disruption`` when written; else only empty nodes, after 10 minutes, 10% at a
    time, and never for reserved or calendar pools."""
    spec = pool.spec
    written = spec.disruption
    if written is None:
        budget = "0" if spec.capacity_type in ("reserved", "calendar") else "10%"
        return {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m", "budgets": [{"nodes": budget}]}
    budgets = [
        drop_empty(
            {
                "nodes": str(b.nodes),
                "reasons": list(b.reasons) or None,
                "schedule": b.schedule,
                "duration": _seconds(b.duration) if b.duration is not None else None,
            }
        )
        for b in written.budgets
    ]
    return drop_empty(
        {
            "consolidationPolicy": written.consolidation_policy,
            "consolidateAfter": _seconds(written.consolidate_after),
            "budgets": budgets or None,
        }
    )


# --- GKE ComputeClass ---------------------------------------------------------------------------


def _is_compute_class(manifest: Manifest) -> bool:
    """A ComputeClass gpuq read, written as gpuq's (``gpuq.dev``) or as GKE's own object."""
    return isinstance(manifest.model, ComputeClass)


def _plain(model: Any) -> Obj:
    if hasattr(model, "model_dump"):
        dumped: Obj = model.model_dump(by_alias=True, exclude_none=True, mode="json")
        return dumped
    return dict(model)


def _gke_rule(entry: Mapping[str, Any]) -> Obj:
    """One priority rule with GKE's keys only; ``reservations.specific`` left out when empty (gpuq's
    default, which GKE's ``AnyBestEffort`` and ``None`` affinities do not take)."""
    rule = {k: v for k, v in entry.items() if k in GKE_PRIORITY.fields and v is not None}
    reservations = rule.get("reservations")
    if isinstance(reservations, dict) and reservations.get("specific") == []:
        rule["reservations"] = {k: v for k, v in reservations.items() if k != "specific"}
    return rule


def gke_compute_class(source: Mapping[str, Any]) -> Obj:
    """A ``cloud.google.com/v1`` ComputeClass from a gpuq ComputeClass (plain data)."""
    spec = source.get("spec") or {}
    priorities = [_gke_rule(entry) for entry in spec.get("priorities") or []]
    body: Obj = {k: spec[k] for k in GKE_SPEC_KEYS if spec.get(k) is not None}
    body["priorities"] = priorities
    body.setdefault("nodePoolAutoCreation", {"enabled": True})
    name = str((source.get("metadata") or {}).get("name", ""))
    return {**make("cloud.google.com/v1", "ComputeClass", name), "spec": body}
