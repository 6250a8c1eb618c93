"""Objects that are not gpuq's business: which kinds a directory may hold beside what gpuq reads.

A user's directory (a Kueue setup, a chart's output, ``gpuq export k8s``'s own) holds ConfigMaps, RBAC,
admission policies, CRDs, a ``kind`` cluster's config... None of these schedules anything, so each kind
gpuq does not read is classified once (:func:`classify`):

1. ``ignored``: a Kubernetes built-in kind that schedules nothing, a cluster tool's configuration, or
   an object ``gpuq export k8s`` writes beside the configuration (:data:`IGNORED_KINDS`). It is not an
   error or a warning: the verbs print one line, :func:`summary`, counting them by kind;
2. ``error``: an unknown kind of a group gpuq reads in full (``kueue.x-k8s.io``, gpuq's own): a typo
   there would change what is scheduled;
3. ``warning``: any other kind (another project's CRD, or a kind gpuq may read one day): skipped with a
   warning naming its file and line.

Workload kinds Kueue integrates (``pkg/controller/jobs/*``: CronJob, Deployment, StatefulSet,
LeaderWorkerSet, the Kubeflow jobs, AppWrapper...) and DRA's ``resource.k8s.io`` are deliberately not
in :data:`IGNORED_KINDS`: they schedule pods, and a kind gpuq does not read yet must be seen.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

IGNORED_KINDS: frozenset[tuple[str, str]] = frozenset(
    [
        *(
            ("", kind)
            for kind in (
                "ConfigMap",
                "Secret",
                "Service",
                "ServiceAccount",
                "Endpoints",
                "ResourceQuota",
                "LimitRange",
                "PersistentVolume",
                "PersistentVolumeClaim",
                "Event",
                "PodTemplate",
            )
        ),
        ("apps", "ControllerRevision"),
        ("discovery.k8s.io", "EndpointSlice"),
        ("events.k8s.io", "Event"),
        ("networking.k8s.io", "NetworkPolicy"),
        ("networking.k8s.io", "Ingress"),
        ("networking.k8s.io", "IngressClass"),
        *(
            ("rbac.authorization.k8s.io", kind)
            for kind in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
        ),
        *(
            ("admissionregistration.k8s.io", kind)
            for kind in (
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding",
                "MutatingAdmissionPolicy",
                "MutatingAdmissionPolicyBinding",
                "ValidatingWebhookConfiguration",
                "MutatingWebhookConfiguration",
            )
        ),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("apiregistration.k8s.io", "APIService"),
        *(("storage.k8s.io", kind) for kind in ("StorageClass", "CSIDriver", "CSINode", "VolumeAttachment")),
        ("coordination.k8s.io", "Lease"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
        ("node.k8s.io", "RuntimeClass"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
        # cluster tools' own configuration files, often kept beside the manifests
        ("kind.x-k8s.io", "Cluster"),
        *(
            ("kubeadm.k8s.io", kind)
            for kind in ("ClusterConfiguration", "InitConfiguration", "JoinConfiguration")
        ),
        ("kustomize.config.k8s.io", "Kustomization"),
        # written by ``gpuq export k8s`` beside the configuration, deciding nothing gpuq simulates
        ("monitoring.coreos.com", "PrometheusRule"),
        ("karpenter.sh", "NodePool"),
        ("karpenter.k8s.aws", "EC2NodeClass"),
    ]
)
"""(API group, kind) of the objects listed as "not scheduled by gpuq, ignored"."""

READ_GROUPS = frozenset({"kueue.x-k8s.io", "config.kueue.x-k8s.io", "gpuq.dev"})
"""Groups gpuq reads in full: an unknown kind (or version) there is an error."""

Verdict = Literal["ignored", "error", "warning"]


def classify(group: str, kind: str) -> Verdict:
    """What a kind that no reader of gpuq takes becomes (see the module's steps)."""
    if (group, kind) in IGNORED_KINDS:
        return "ignored"
    return "error" if group in READ_GROUPS else "warning"


@dataclass(frozen=True)
class IgnoredObject:
    """One object listed as not scheduled by gpuq: where it was and what it was."""

    path: str
    line: int
    kind: str
    name: str


NOT_SCHEDULED = "not scheduled by gpuq, ignored"


def summary(ignored: Iterable[IgnoredObject]) -> str | None:
    """``not scheduled by gpuq, ignored: 2 ConfigMap, 1 Secret`` (kinds by name), None when none."""
    counts = Counter(obj.kind for obj in ignored)
    if not counts:
        return None
    return f"{NOT_SCHEDULED}: " + ", ".join(f"{counts[kind]} {kind}" for kind in sorted(counts))


def unknown_kind_message(kind: str, api_version: str, verdict: Verdict) -> str:
    """The diagnostic of a kind gpuq does not read: an error in a group it reads, else a warning."""
    if verdict == "error":
        return f"unknown kind {kind!r} in apiVersion {api_version!r}"
    return f"unknown kind {kind!r} in apiVersion {api_version!r}: not read by gpuq, skipped"
