"""Kubernetes name syntax: object names, label keys and values, resource names.

Each ``*_problem`` function returns why a value is invalid, or None; the
messages are meant to follow a field path in a diagnostic.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from gpuq.api.diagnostics import FieldPath

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

Findings = Iterator[tuple[FieldPath, str]]
"""(field path, message) pairs a check yields; the caller locates them."""


def dns_subdomain_problem(value: str) -> str | None:
    """Why ``value`` is not an RFC 1123 subdomain (most object names), or None."""
    if len(value) > 253:
        return "must be no more than 253 characters"
    if not _DNS_SUBDOMAIN.match(value):
        return "must be a lowercase RFC 1123 subdomain (lowercase letters, digits, '-' and '.')"
    return None


def dns_label_problem(value: str) -> str | None:
    """Why ``value`` is not an RFC 1123 label (namespaces, pod set names), or None."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _DNS_LABEL.match(value):
        return "must be a lowercase RFC 1123 label (lowercase letters, digits and '-')"
    return None


def qualified_name_problem(value: str) -> str | None:
    """Why ``value`` is not a qualified name (``[prefix/]name``: label keys, resource names), or None."""
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or dns_subdomain_problem(prefix)):
        return "prefix must be a DNS subdomain"
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return "must be a qualified name (alphanumerics, '-', '_' or '.', at most 63, optional DNS prefix)"
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a label value (at most 63 alphanumerics, '-', '_', '.'), or None."""
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        return "must be a label value (at most 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends)"
    return None


def label_problems(labels: Mapping[str, str], at: FieldPath) -> Findings:
    """Invalid keys or values of a label map, each at ``(*at, key)``."""
    for key, value in labels.items():
        if problem := qualified_name_problem(key):
            yield (*at, key), f"invalid label key {key!r}: {problem}"
        elif label_value_problem(value):
            yield (*at, key), f"invalid label value {value!r}"


_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def dns1035_label_problem(value: str, max_length: int = 63) -> str | None:
    """Why ``value`` is not an RFC 1035 label of at most ``max_length`` (Services' names, and the names
    of objects some controllers turn into Services or host names), or None."""
    if len(value) > max_length:
        return f"must be no more than {max_length} characters"
    if not _DNS_1035_LABEL.match(value):
        return "must be a lowercase RFC 1035 label (a letter first, then lowercase letters, digits and '-')"
    return None


# --- names of workload sources ------------------------------------------------------------------
#
# Each source kind's name is bounded by what its API server or controller makes of it; a name past
# that bound is refused there, at create, so here too (it would otherwise be admitted, hold quota and
# fail to start its pods for ever).

POD_DIRECTORY_NAME_MAX = 255
"""Linux's NAME_MAX: the longest file name. gpuq keeps each pod's directory as one file name,
``<workload>_<pod>`` (``workdir/pods/<namespace>/``), so a plain Pod's name is bounded by it too."""

RAY_CLUSTER_NAME_MAX = 53
"""KubeRay (ray-operator/controllers/ray/utils/constant.go, ``MaxRayClusterNameLength``): the longest
Service suffix is ``-serve-svc``, and 63 - 10 = 53; ``ValidateRayClusterMetadata`` also wants a
DNS-1035 label."""

RAY_JOB_NAME_MAX = RAY_CLUSTER_NAME_MAX - 6
"""KubeRay's ``MaxRayJobNameLength``: a RayJob's RayCluster is its name plus 6 characters
(``GenerateRayClusterName``), which must pass the RayCluster rule; ``ValidateRayJobMetadata``."""


def source_name_problem(kind: str, name: str, pod_sets: tuple[str, ...] = ()) -> str | None:
    """Why a workload source of ``kind`` cannot be called ``name``, by its own controller's rules, or
    None. ``pod_sets`` are its pod set names (a JobSet's replicated jobs)."""
    if kind == "Job":
        # Kubernetes, pkg/apis/batch/validation ValidateJob -> validateGeneratedSelector: the Job
        # controller labels the Job's pods (and its selector) batch.kubernetes.io/job-name=<name>,
        # and job-name=<name>: a label value, at most 63 characters.
        if len(name) > 63:
            return (
                "must be no more than 63 characters: the Job controller puts the name in the label "
                "batch.kubernetes.io/job-name of its pods, and a label value is at most 63 characters"
            )
        return None
    if kind == "JobSet":
        # JobSet, pkg/webhooks/jobset_webhook.go ValidateCreate: each replicated job's Jobs are named
        # <jobset>-<replicated job>-<index> (placement.GenJobName), and each must be a DNS-1035 label.
        # With the smallest index, 0: more replicas only make the names longer.
        if problem := dns1035_label_problem(name):
            return problem
        for replicated in pod_sets:
            job_name = f"{name}-{replicated}-0"
            if len(job_name) > 63:
                return (
                    f"too long: the JobSet controller names the Jobs of replicated job {replicated!r} "
                    f"{job_name!r} and on, which must be DNS-1035 labels of at most 63 characters"
                )
        return None
    if kind in ("PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob"):
        # Kubeflow training-operator, pkg/webhooks/<framework>/*_webhook.go: NameIsDNS1035Label.
        problem = dns1035_label_problem(name)
        return f"{problem} (the training operator's rule for a {kind})" if problem else None
    if kind in ("RayJob", "RayCluster"):
        limit = RAY_JOB_NAME_MAX if kind == "RayJob" else RAY_CLUSTER_NAME_MAX
        problem = dns1035_label_problem(name, limit)
        return f"{problem} (KubeRay's rule for a {kind})" if problem else None
    if kind == "Pod":
        # Kubernetes: a Pod's name is a DNS-1123 subdomain (253). gpuq: its directory is one file name.
        if problem := dns_subdomain_problem(name):
            return problem
        longest_pod = max((f"{pod_set}-0" for pod_set in pod_sets), key=len, default="main-0")
        if len(name) + 1 + len(longest_pod) > POD_DIRECTORY_NAME_MAX:
            limit = POD_DIRECTORY_NAME_MAX - 1 - len(longest_pod)
            return (
                f"must be no more than {limit} characters here: gpuq keeps the pod's directory as the one "
                f"file name {name[:8]}..._{longest_pod}, and a file name is at most "
                f"{POD_DIRECTORY_NAME_MAX} characters"
            )
        return None
    return None


def source_document_problems(document: Mapping[str, Any]) -> Findings:
    """The rules of :func:`source_name_problem` that need more of the source than its name, from the
    source ``document`` as written (it is only read; malformed parts are left to the loader):

    - Kubernetes' ValidateJob, for an Indexed Job (``completionMode: Indexed``): its pods' host names
      are ``<name>-<index>`` up to ``completions - 1``, each a DNS-1123 label;
    - JobSet's ValidateCreate: the longest Job name of each replicated job, ``<jobset>-<job>-<replicas
      - 1>``, and, for an Indexed Job with completions, the longest pod name, ``<jobset>-<job>-<replicas
      - 1>-<completions - 1>-abcde`` (5 random characters), must be DNS-1035 labels.

    It needs the document as written, which the loader has and a loaded manifest no longer does: the
    loader calls it on each source it reads (validation checks the name rules alone).
    """
    kind, metadata = document.get("kind"), document.get("metadata")
    spec = document.get("spec")
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        return
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return
    if kind == "Job":
        completions = _indexed_completions(spec)
        if completions:
            longest = f"{name}-{completions - 1}"
            if dns_label_problem(longest):
                yield (
                    ("metadata", "name"),
                    (
                        f"will not be able to create pods: an Indexed Job's pod host name {longest!r} "
                        "(<name>-<completions - 1>) must be a DNS-1123 label of at most 63 characters"
                    ),
                )
    elif kind == "MPIJob":
        # mpi-operator, pkg/apis/kubeflow/validation/validation.go validateMPIJobName: the last worker's
        # host name <name>-worker-<replicas - 1> must be a DNS-1035 label.
        specs = spec.get("mpiReplicaSpecs")
        worker = specs.get("Worker") if isinstance(specs, Mapping) else None
        replicas = worker.get("replicas") if isinstance(worker, Mapping) else None
        replicas = replicas if isinstance(replicas, int) and replicas > 0 else 1
        longest = f"{name}-worker-{replicas - 1}"
        if problem := dns1035_label_problem(longest):
            yield (
                ("metadata", "name"),
                f"will not be able to create pods: the MPI operator's worker host name {longest!r} {problem}",
            )
    elif kind == "JobSet":
        for index, rjob in enumerate(spec.get("replicatedJobs") or ()):
            if not isinstance(rjob, Mapping) or not isinstance(rjob.get("name"), str):
                continue
            replicas = rjob.get("replicas", 1)
            replicas = replicas if isinstance(replicas, int) and replicas > 0 else 1
            at: FieldPath = ("spec", "replicatedJobs", index, "name")
            longest_job = f"{name}-{rjob['name']}-{replicas - 1}"
            if dns1035_label_problem(longest_job):
                yield (
                    at,
                    (
                        f"the JobSet controller would name a Job {longest_job!r}, which must be a DNS-1035 "
                        "label of at most 63 characters"
                    ),
                )
                continue
            template = rjob.get("template")
            job_spec = template.get("spec") if isinstance(template, Mapping) else None
            completions = _indexed_completions(job_spec) if isinstance(job_spec, Mapping) else None
            if completions:
                longest_pod = f"{longest_job}-{completions - 1}-abcde"
                if dns1035_label_problem(longest_pod):
                    yield (
                        at,
                        (
                            f"the JobSet's pods would be named like {longest_pod!r}, which must be a "
                            "DNS-1035 label of at most 63 characters"
                        ),
                    )


def _indexed_completions(job_spec: Mapping[str, Any]) -> int | None:
    completions = job_spec.get("completions")
    indexed = job_spec.get("completionMode") == "Indexed"
    return completions if indexed and isinstance(completions, int) and completions > 0 else None
