"""What every export module shares: options, the object envelope, quantities, first definitions."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, TypeVar

from gpuq.api.diagnostics import Manifest
from gpuq.core.quantity import MILLI_RESOURCES, format_amount

Obj = dict[str, Any]
"""One Kubernetes object as plain data, ready for YAML."""
Provisioner = Literal["gke", "karpenter"]
KueueVersion = Literal["v1beta1", "v1beta2"]
PodSecurityLevel = Literal["restricted", "baseline", "privileged"]
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuq"}
_M = TypeVar("_M")


@dataclass(frozen=True)
class ExportOptions:
    """Choices the export leaves to the operator (see docs/kubernetes.md, "Export")."""

    provisioner: Provisioner = "gke"
    kueue_release: str = "v0.19"
    kueue_version: KueueVersion = "v1beta2"
    """The Kueue API written; :func:`gpuq.k8s.kueue_releases.version_for` picks it for a release."""
    kubernetes_version: str = "1.33"
    pod_security: PodSecurityLevel = "restricted"
    monitoring_namespace: str = "monitoring"
    gpu_operator_namespace: str = "gpu-operator"
    ingress_namespaces: tuple[str, ...] = ("istio-system",)
    """Namespaces of the ingress gateways that reach serving pods (KServe's default is Istio's)."""
    knative_namespace: str = "knative-serving"
    """Knative Serving's namespace: its activator proxies requests to KServe's serverless predictors."""
    kuberay_namespace: str = "default"
    """The KubeRay operator's namespace (its kustomize default): it calls Ray heads' dashboard and Serve."""
    node_class: str = "default"


def make(
    api_version: str,
    kind: str,
    name: str,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Obj:
    """A new object's envelope; ``labels`` default to gpuq's managed-by label."""
    metadata: Obj = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = dict(MANAGED_BY if labels is None else labels)
    if not metadata["labels"]:
        del metadata["labels"]
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}


def first_models(manifests: Sequence[Manifest], model: type[_M]) -> Iterator[_M]:
    """Models of type ``model``, the first definition of each (namespace, name) only, in file order.

    The loader's conversion keeps the first definition too, so the export writes
    exactly the objects the configuration was built from.
    """
    seen: set[tuple[str, str]] = set()
    for manifest in manifests:
        if isinstance(manifest.model, model) and type(manifest.model) is model:
            key = (manifest.namespace, manifest.name)
            if key not in seen:
                seen.add(key)
                yield manifest.model


def format_quantity(resource: str, value: Decimal) -> str:
    """An exact quantity the way a person writes it (``500m``, ``8``, ``200Gi``); never rounded."""
    scaled = value * 1000 if resource in MILLI_RESOURCES else value
    if scaled == scaled.to_integral_value():
        return format_amount(resource, int(scaled))
    if resource not in MILLI_RESOURCES and (value * 1000) == (value * 1000).to_integral_value():
        return f"{int(value * 1000)}m"
    return str(value.normalize())


def drop_empty(data: Mapping[str, Any]) -> Obj:
    """``data`` without None values, empty maps and empty lists (Kubernetes' omitempty)."""
    return {k: v for k, v in data.items() if v is not None and v != {} and v != []}
