"""Which documents give Workloads through :mod:`gpuq.api.sources_pods` and its siblings, and those Workloads.

The loader hands every such document of a load to :func:`derive_all` at once, because some need
the others: the pods of one pod group are one Workload, and a Tekton run names its Pipeline and
Tasks. Each kind's builder is in :mod:`gpuq.api.sources_pods` (pod groups, LeaderWorkerSet),
:mod:`gpuq.api.sources_wrapped` (AppWrapper, CronJob, Sandbox) or :mod:`gpuq.api.sources_pipelines`
(Argo Workflow, Tekton).

A live control plane runs the kinds of :data:`LIVE_KINDS`, whose one document gives one Workload
(:func:`live_workload`); the others need the controller that creates their pods (a CronJob's
schedule, Argo's and Tekton's DAGs, the pods of a group arriving one by one) and are read by
``gpuq admit`` and ``gpuq simulate`` only (:func:`live_refusal` says why).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuq.api.source_fields import SourceError, int_field
from gpuq.api.sources import to_workload
from gpuq.api.sources_pipelines import ARGO_API_VERSION, TEKTON_API_VERSION, TEKTON_KINDS, tekton, workflow
from gpuq.api.sources_pods import LWS_API_VERSION, Derived, Finding, group_name, leaderworkerset, pod_groups
from gpuq.api.sources_wrapped import SANDBOX_API_VERSION, appwrapper, cronjob, sandbox

_PER_DOCUMENT: dict[tuple[str, str], Callable[[Mapping[str, Any]], Derived]] = {
    (LWS_API_VERSION, "LeaderWorkerSet"): leaderworkerset,
    ("workload.codeflare.dev/v1beta2", "AppWrapper"): appwrapper,
    ("batch/v1", "CronJob"): cronjob,
    (ARGO_API_VERSION, "Workflow"): workflow,
    (SANDBOX_API_VERSION, "Sandbox"): sandbox,
}
DERIVED_KINDS = frozenset({*_PER_DOCUMENT, *((TEKTON_API_VERSION, k) for k in TEKTON_KINDS)})
"""``(apiVersion, kind)`` read here; plus ``v1`` Pods of a pod group (:func:`is_derived`)."""
LIVE_REFUSAL = (
    "gpuq serve does not run {what} live (gpuq admit and gpuq simulate read it): "
    "apply the Jobs, JobSets or Pods it would create instead"
)
LIVE_KINDS = frozenset(
    {
        (LWS_API_VERSION, "LeaderWorkerSet"),
        ("workload.codeflare.dev/v1beta2", "AppWrapper"),
        (SANDBOX_API_VERSION, "Sandbox"),
    }
)
"""Derived kinds a live control plane stores and runs: one document, one Workload (a LeaderWorkerSet
of one group; a Sandbox that is not paused)."""
_ONE_GROUP = (
    "gpuq serve runs a LeaderWorkerSet of one group (spec.replicas: 1), one Workload per stored object; "
    "apply one LeaderWorkerSet per group (gpuq admit and gpuq simulate read {replicas} groups)"
)


def runs_live(api_version: str, kind: str) -> bool:
    """True for a derived kind a live control plane stores as a workload source (:data:`LIVE_KINDS`)."""
    return (api_version, kind) in LIVE_KINDS


def live_workload(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The Workload a live control plane runs for ``doc``: :func:`gpuq.api.sources.to_workload` for a
    workload source, the one Workload of a :data:`LIVE_KINDS` document; :class:`SourceError` names the
    field when there is not exactly one."""
    key = (str(doc.get("apiVersion")), str(doc.get("kind")))
    if key not in LIVE_KINDS:
        return to_workload(dict(doc))
    derived = _PER_DOCUMENT[key](doc)
    errors = [f for f in derived.findings if f.severity != "warning"]
    if errors:
        raise SourceError(errors[0].field, errors[0].message)
    if len(derived.workloads) != 1:
        notes = [f for f in derived.findings if f.severity == "warning"]
        if notes:
            raise SourceError(notes[0].field, notes[0].message)
        raise SourceError("spec.replicas", f"gives {len(derived.workloads)} Workloads, a live one runs one")
    return derived.workloads[0]


def is_derived(data: Any) -> bool:
    """True for a document :func:`derive_all` reads (not :func:`gpuq.api.sources.to_workload`)."""
    if not isinstance(data, dict):
        return False
    return (str(data.get("apiVersion")), str(data.get("kind"))) in DERIVED_KINDS or bool(group_name(data))


def live_refusal(data: Any) -> str | None:
    """Why a live control plane refuses ``data`` (None when it does not): these kinds, and pod groups,
    are read by admit and simulate only."""
    if not is_derived(data):
        return None
    if runs_live(str(data.get("apiVersion")), str(data.get("kind"))):
        if data.get("kind") == "AppWrapper":
            return None
        try:
            replicas = int_field(data.get("spec") or {}, "replicas", "spec.replicas", 1)
        except SourceError:
            return None  # the loader names the field
        if replicas == 1:
            return None
        if data.get("kind") == "Sandbox":
            return "a paused Sandbox (spec.replicas: 0) makes no pod: a live control plane has nothing to run"
        return _ONE_GROUP.format(replicas=replicas)
    what = f"a pod group's pods ({group_name(data)!r})" if group_name(data) else f"a {data.get('kind')}"
    return LIVE_REFUSAL.format(what=what)


def derive_all(docs: Sequence[Mapping[str, Any]]) -> list[Derived]:
    """One :class:`Derived` per document, in order; a document that cannot become Workloads gets
    one error finding (its field and message, as :class:`SourceError` names them)."""
    out: list[Derived] = [Derived() for _ in docs]
    grouped = [i for i, doc in enumerate(docs) if group_name(doc)]
    for index, derived in zip(grouped, pod_groups([docs[i] for i in grouped]), strict=True):
        out[index] = derived
    pipeline = [i for i, doc in enumerate(docs) if doc.get("apiVersion") == TEKTON_API_VERSION]
    for index, derived in zip(pipeline, tekton([docs[i] for i in pipeline]), strict=True):
        out[index] = derived
    for index, doc in enumerate(docs):
        builder = _PER_DOCUMENT.get((str(doc.get("apiVersion")), str(doc.get("kind"))))
        if builder is None:
            continue
        try:
            out[index] = builder(doc)
        except SourceError as err:
            out[index] = Derived((), (Finding(err.field, err.message),))
    return out
