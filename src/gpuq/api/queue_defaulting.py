"""The LocalQueue of a workload source (Job, JobSet, ...) written without a queue-name label.

Kueue decides it in its job webhooks and job reconciler (``pkg/controller/jobframework``:
``ApplyDefaultLocalQueue``, ``WorkloadShouldBeSuspended``, the reconciler's
``manageJobsWithoutQueueName`` check), in this order:

1. LocalQueueDefaulting (a feature gate, beta and on by default since v0.13): a job without
   the ``kueue.x-k8s.io/queue-name`` label (or the deprecated annotation) in a namespace that
   has a LocalQueue named ``default`` gets ``queue-name: default``, whatever
   ``manageJobsWithoutQueueName`` says.
2. Otherwise, with ``manageJobsWithoutQueueName: false`` (Kueue's default) Kueue does not manage
   the job at all: on a real cluster its pods run outside quota.
3. With ``manageJobsWithoutQueueName: true``, a job in a namespace that
   ``managedJobsNamespaceSelector`` selects (by default every namespace but ``kube-system`` and
   ``kueue-system``) gets a Workload without a queue, which stays pending ("LocalQueue  doesn't
   exist" in Kueue); a job outside the selector is not managed (as in 2).

gpuq cannot run pods outside quota, so in cases 2 and 3 the workload is kept without a queue
(pending, with the engine's message) and the loader warns, naming the label the user did not
write (``metadata.labels[kueue.x-k8s.io/queue-name]``), never the Workload's ``spec.queueName``.

:func:`default_queues` does this for the loader; :func:`apply_default_local_queue` is the
webhook's mutation of one source document, for a control plane that stores documents.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuq.api import kueue
from gpuq.api.convert import NAMESPACE_NAME_LABEL, label_selector
from gpuq.api.diagnostics import Diagnostic, Manifest
from gpuq.api.source_fields import QUEUE_LABEL
from gpuq.core import model as core

DEFAULT_QUEUE = "default"
"""Kueue's ``constants.DefaultLocalQueueName``."""
QUEUE_FIELD = ("spec", "queueName")
"""The Workload field a source's queue-name label becomes (the loader aliases it to the label)."""
LOCAL_QUEUE_DEFAULTING = "LocalQueueDefaulting"
MANAGED_JOBS_NAMESPACE_SELECTOR = "ManagedJobsNamespaceSelector"
DEFAULT_MANAGED_NAMESPACES = core.LabelSelector(
    match_expressions=(core.Requirement(NAMESPACE_NAME_LABEL, "NotIn", ("kube-system", "kueue-system")),)
)
"""Kueue's default ``managedJobsNamespaceSelector`` (``SetDefaults_Configuration``)."""


@dataclass(frozen=True)
class QueueDefaults:
    """What decides the queue of a source without a queue-name label (read from the manifests)."""

    manage_without_queue_name: bool = False
    defaulting: bool = True
    """The LocalQueueDefaulting feature gate."""
    managed_namespaces: core.LabelSelector | None = DEFAULT_MANAGED_NAMESPACES
    """``managedJobsNamespaceSelector``; None when the ManagedJobsNamespaceSelector gate is off."""
    default_queue_namespaces: frozenset[str] = frozenset()
    """Namespaces that have a LocalQueue named ``default``."""
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @classmethod
    def from_models(cls, models: Iterable[Any]) -> QueueDefaults:
        """The first Configuration's settings, the LocalQueues named ``default`` and the Namespaces."""
        models = list(models)
        config = next((m for m in models if isinstance(m, kueue.Configuration)), None)
        gates = config.feature_gates if config is not None else {}
        selector = DEFAULT_MANAGED_NAMESPACES
        if config is not None and config.managed_jobs_namespace_selector is not None:
            selector = label_selector(config.managed_jobs_namespace_selector) or DEFAULT_MANAGED_NAMESPACES
        labels: dict[str, Mapping[str, str]] = {}
        for obj in models:
            if isinstance(obj, kueue.Namespace):
                name = str(obj.metadata.name)
                labels.setdefault(name, {**obj.metadata.labels, NAMESPACE_NAME_LABEL: name})
        return cls(
            manage_without_queue_name=bool(config is not None and config.manage_jobs_without_queue_name),
            defaulting=gates.get(LOCAL_QUEUE_DEFAULTING, True),
            managed_namespaces=selector if gates.get(MANAGED_JOBS_NAMESPACE_SELECTOR, True) else None,
            default_queue_namespaces=frozenset(
                m.metadata.namespace or "default"
                for m in models
                if isinstance(m, kueue.LocalQueue) and m.metadata.name == DEFAULT_QUEUE
            ),
            namespace_labels=labels,
        )

    def default_queue(self, namespace: str) -> str:
        """``default`` when LocalQueueDefaulting gives an unlabelled job of ``namespace`` that queue."""
        return DEFAULT_QUEUE if self.defaulting and namespace in self.default_queue_namespaces else ""

    def unmanaged_reason(self, namespace: str) -> str:
        """Why Kueue leaves an unlabelled job of ``namespace`` alone, or "" when it manages it."""
        if not self.manage_without_queue_name:
            return "manageJobsWithoutQueueName is false"
        labels = self.namespace_labels.get(namespace, {NAMESPACE_NAME_LABEL: namespace})
        if self.managed_namespaces is not None and not self.managed_namespaces.matches(labels):
            return f"namespace {namespace} is not selected by managedJobsNamespaceSelector"
        return ""


def is_source(manifest: Manifest) -> bool:
    """A Workload the loader built from a workload source (a Job...), not one the user wrote."""
    return isinstance(manifest.model, kueue.Workload) and manifest.kind != "Workload"


def default_queues(
    manifests: Sequence[Manifest], defaults: QueueDefaults | None = None
) -> tuple[list[Manifest], list[Diagnostic]]:
    """``manifests`` with Kueue's queue defaulting applied to the sources without a queue, and a
    warning for each source left without one (steps 2 and 3 of the module's docstring).
    ``defaults``: those of the configuration the manifests join (else read from them)."""
    if defaults is None:
        defaults = QueueDefaults.from_models(m.model for m in manifests)
    out: list[Manifest] = []
    found: list[Diagnostic] = []
    for manifest in manifests:
        if not is_source(manifest) or manifest.model.spec.queue_name:
            out.append(manifest)
            continue
        namespace = manifest.namespace or "default"
        queue = defaults.default_queue(namespace)
        if queue:
            out.append(dataclasses.replace(manifest, model=with_queue(manifest.model, queue)))
            continue
        out.append(manifest)
        found.append(manifest.diagnostic(QUEUE_FIELD, _no_queue_message(manifest, defaults), "warning"))
    return out, found


def _no_queue_message(manifest: Manifest, defaults: QueueDefaults) -> str:
    namespace = manifest.namespace or "default"
    job = f"{manifest.kind} {namespace}/{manifest.name}"
    reason = defaults.unmanaged_reason(namespace)
    if reason:
        return (
            f"{job} has no {QUEUE_LABEL} label: Kueue does not manage it ({reason}); "
            "on a real cluster it runs outside quota"
        )
    return (
        f"{job} has no {QUEUE_LABEL} label and namespace {namespace} has no LocalQueue named "
        f"{DEFAULT_QUEUE}: Kueue manages it (manageJobsWithoutQueueName is true) but its Workload "
        "has no queue and stays pending"
    )


def with_queue(workload: kueue.Workload, queue: str) -> kueue.Workload:
    """A copy of ``workload`` with ``spec.queueName`` set."""
    return workload.model_copy(update={"spec": workload.spec.model_copy(update={"queue_name": queue})})


def apply_default_local_queue(document: Mapping[str, Any], defaults: QueueDefaults) -> dict[str, Any]:
    """Kueue's ``ApplyDefaultLocalQueue`` on one source document: a copy with
    ``kueue.x-k8s.io/queue-name: default`` added when the document names no queue (label or the
    deprecated annotation) and its namespace has a LocalQueue named ``default``; otherwise an
    unchanged copy."""
    out = copy.deepcopy(dict(document))
    metadata = out.get("metadata")
    if not isinstance(metadata, dict):
        return out
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    if not isinstance(labels, dict) or not isinstance(annotations, dict):
        return out
    if labels.get(QUEUE_LABEL) or annotations.get(QUEUE_LABEL):
        return out
    queue = defaults.default_queue(str(metadata.get("namespace") or "default"))
    if queue:
        metadata["labels"] = {**labels, QUEUE_LABEL: queue}
    return out
