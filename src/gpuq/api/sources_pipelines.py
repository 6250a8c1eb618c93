"""Argo Workflows and Tekton pipelines: the pods they create, each a plain-Pod Workload.

Kueue has no integration for these kinds: it admits the pods they create through the plain-Pod
integration (Kueue's docs ``tasks/run/plain_pods.md`` and the Argo and Tekton pages): a pod that
carries ``kueue.x-k8s.io/queue-name`` is gated and becomes a Workload ``pod-<pod>-<hash>`` of one
pod set ``main``. gpuq derives those pods from the manifests, as far as they say it:

1. **Workflow** (``argoproj.io/v1alpha1``): the templates reachable from ``spec.entrypoint``
   through ``steps`` and ``dag`` tasks; every ``container``, ``script`` or ``containerSet``
   template invocation is one pod named ``<workflow>-<step>`` (``-<i>`` per ``withItems`` item
   or ``withSequence.count``; ``withParam`` fans out at run time and counts one pod, a warning).
   Its labels are ``spec.podMetadata`` then the template's ``metadata`` (the queue may differ
   per template); node selector, tolerations, affinity and priority class come from the template,
   else the Workflow's ``spec``. Argo's ``init``/``wait`` executor containers request nothing
   by default and are not added; ``resource``, ``suspend``, ``http`` templates make no pod;
   ``templateRef`` (another WorkflowTemplate) is not followed (a warning).
2. **Tekton** (``tekton.dev/v1``): a ``Task`` or ``Pipeline`` creates no pods by itself (a
   warning: not scheduled by gpuq); a ``TaskRun`` is one pod ``<taskrun>-pod`` whose containers
   are the Task's steps (``step-<name>``, ``computeResources`` over ``stepTemplate``) and
   sidecars; a ``PipelineRun`` is one such pod per pipeline task and ``finally`` task, TaskRuns
   named ``<pipelinerun>-<task>``. Tasks and Pipelines are found by name among the loaded
   documents of the namespace (or inline ``taskSpec``/``pipelineSpec``); Tekton copies the
   run's labels onto its pods, so the queue is the run's. All of a run's pods are pending at
   once: ``runAfter`` ordering is not modelled.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from gpuq.api.source_fields import SourceError, make_pod_set, mapping_field
from gpuq.api.sources import DEFAULT_POD_SET, _metadata, workload_name
from gpuq.api.sources_pods import Derived, Finding, build_workload

ARGO_API_VERSION = "argoproj.io/v1alpha1"
TEKTON_API_VERSION = "tekton.dev/v1"
TEKTON_KINDS = frozenset({"Task", "Pipeline", "TaskRun", "PipelineRun"})
_POD_TEMPLATES = ("container", "script", "containerSet")
_NO_POD_TEMPLATES = ("resource", "suspend", "http", "plugin", "data")
_POD_FIELDS = ("nodeSelector", "tolerations", "affinity")
_MAX_DEPTH = 32


def _pod_workload(owner: Mapping[str, Any], kind: str, pod_name: str, labels: Mapping[str, Any],
                  annotations: Mapping[str, Any], spec: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """A plain Pod's Workload (Kueue's ``constructPodSets``) for a pod a run creates."""
    meta = {**owner, "labels": dict(labels), "annotations": dict(annotations)}
    pod_set = make_pod_set(DEFAULT_POD_SET, 1, {"spec": spec}, "spec")
    return build_workload(meta, kind, workload_name(pod_name, "", "Pod", ""), [pod_set])


# --- Argo Workflow --------------------------------------------------------------------------------


def workflow(doc: Mapping[str, Any]) -> Derived:
    """One Workload per pod the Workflow runs (step 1 of the module doc)."""
    metadata = _metadata(doc)
    spec = mapping_field(doc.get("spec"), "spec")
    templates = spec.get("templates")
    if not isinstance(templates, list):
        raise SourceError("spec.templates", "expected a list of templates")
    by_name = {t.get("name"): (i, t) for i, t in enumerate(templates) if isinstance(t, dict)}
    entry = spec.get("entrypoint")
    if not isinstance(entry, str) or entry not in by_name:
        raise SourceError("spec.entrypoint", f"names no template of spec.templates: {entry!r}")
    pods: list[tuple[str, int, int]] = []  # (pod name, template index, copies)
    findings: list[Finding] = []
    _walk(by_name, entry, metadata["name"], 1, (), pods, findings)
    pod_meta = mapping_field(spec.get("podMetadata"), "spec.podMetadata", required=False)
    workloads = []
    seen: dict[str, int] = {}
    for pod_name, index, copies in pods:
        template = templates[index]
        tmeta = mapping_field(template.get("metadata"), "metadata", required=False)
        labels = {**(pod_meta.get("labels") or {}), **(tmeta.get("labels") or {})}
        annotations = {**(pod_meta.get("annotations") or {}), **(tmeta.get("annotations") or {})}
        pod_spec = _argo_pod_spec(spec, template, f"spec.templates[{index}]")
        for copy_index in range(copies):
            name = pod_name if copies == 1 else f"{pod_name}-{copy_index}"
            seen[name] = seen.get(name, 0) + 1
            unique = name if seen[name] == 1 else f"{name}-{seen[name] - 1}"
            workloads.append(
                _pod_workload(metadata, "Workflow", unique, labels, annotations, copy.deepcopy(pod_spec))
            )
    return Derived(tuple(workloads), tuple(findings))


_Pods = list[tuple[str, int, int]]  # (pod name, template index, copies)


def _walk(by_name: Mapping[Any, tuple[int, dict[str, Any]]], name: str, pod_name: str, copies: int,
          stack: tuple[str, ...], pods: _Pods, findings: list[Finding]) -> None:  # fmt: skip
    if name in stack or len(stack) > _MAX_DEPTH:
        raise SourceError("spec.templates", f"template {name!r} calls itself: {' -> '.join((*stack, name))}")
    index, template = by_name[name]
    at = f"spec.templates[{index}]"
    if any(key in template for key in _POD_TEMPLATES):
        pods.append((pod_name, index, copies))
        return
    steps = template.get("steps")
    if isinstance(steps, list):
        calls = [
            (f"{at}.steps[{i}][{j}]", s) for i, group in enumerate(steps) for j, s in enumerate(group or [])
        ]
    elif isinstance((template.get("dag") or {}).get("tasks"), list):
        calls = [(f"{at}.dag.tasks[{i}]", t) for i, t in enumerate(template["dag"]["tasks"])]
    else:
        if not any(key in template for key in _NO_POD_TEMPLATES):
            findings.append(
                Finding(at, "a template of no known type: it runs no pod gpuq schedules", "warning")
            )
        return
    for where, call in calls:
        call = mapping_field(call, where)
        if "templateRef" in call:
            findings.append(Finding(f"{where}.templateRef", "templates of other WorkflowTemplates are not "
                                    "followed: their pods are not scheduled by gpuq", "warning"))  # fmt: skip
            continue
        target = call.get("template")
        if target not in by_name:
            raise SourceError(f"{where}.template", f"names no template of spec.templates: {target!r}")
        fan_out = _fan_out(call, where, findings)
        step_pod = f"{pod_name}-{call.get('name') or target}"
        _walk(by_name, str(target), step_pod, copies * fan_out, (*stack, name), pods, findings)


def _fan_out(call: Mapping[str, Any], where: str, findings: list[Finding]) -> int:
    if isinstance(call.get("withItems"), list):
        return len(call["withItems"])
    sequence = call.get("withSequence")
    if isinstance(sequence, dict) and str(sequence.get("count", "")).isdigit():
        return int(str(sequence["count"]))
    if "withParam" in call or "withSequence" in call:
        findings.append(
            Finding(where, "the fan-out is known at run time only: gpuq counts one pod", "warning")
        )
    return 1


def _argo_pod_spec(spec: Mapping[str, Any], template: Mapping[str, Any], at: str) -> dict[str, Any]:
    if "containerSet" in template:
        containers = copy.deepcopy(
            mapping_field(template["containerSet"], f"{at}.containerSet").get("containers") or []
        )
    else:
        key = "container" if "container" in template else "script"
        container = copy.deepcopy(mapping_field(template[key], f"{at}.{key}"))
        container.pop("source", None)
        containers = [{"name": "main", **container}]
    pod: dict[str, Any] = {"containers": containers, "restartPolicy": "Never"}
    for key in _POD_FIELDS:
        value = template.get(key, spec.get(key))
        if value:
            pod[key] = copy.deepcopy(value)
    priority = template.get("priorityClassName") or spec.get("podPriorityClassName")
    if priority:
        pod["priorityClassName"] = priority
    return pod


# --- Tekton ---------------------------------------------------------------------------------------


def tekton(docs: Sequence[Mapping[str, Any]]) -> list[Derived]:
    """One :class:`Derived` per Tekton document of ``docs``, runs resolved among them (step 2)."""
    named: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for doc in docs:
        meta = mapping_field(doc.get("metadata"), "metadata", required=False)
        named.setdefault(
            (str(doc.get("kind")), str(meta.get("namespace") or "default"), str(meta.get("name"))), doc
        )
    out = []
    for doc in docs:
        try:
            out.append(_tekton_one(doc, named))
        except SourceError as err:
            out.append(Derived((), (Finding(err.field, err.message),)))
    return out


def _tekton_one(doc: Mapping[str, Any], named: Mapping[tuple[str, str, str], Mapping[str, Any]]) -> Derived:
    kind = str(doc.get("kind"))
    metadata = _metadata(doc)
    if kind in ("Task", "Pipeline"):  # creates no pods by itself (a TaskRun / PipelineRun runs it)
        return Derived(not_scheduled=True)
    namespace = str(metadata.get("namespace") or "default")
    spec = mapping_field(doc.get("spec"), "spec")
    labels, annotations = metadata.get("labels") or {}, metadata.get("annotations") or {}
    if kind == "TaskRun":
        task = _resolve(spec, "taskRef", "taskSpec", "Task", namespace, named, "spec")
        if task is None:
            return Derived((), (_missing("spec.taskRef", spec),))
        pod = _task_pod(task, "spec")
        return Derived((_pod_workload(metadata, kind, f"{metadata['name']}-pod", labels, annotations, pod),))
    pipeline = _resolve(spec, "pipelineRef", "pipelineSpec", "Pipeline", namespace, named, "spec")
    if pipeline is None:
        return Derived((), (_missing("spec.pipelineRef", spec),))
    workloads, findings = [], []
    for key in ("tasks", "finally"):
        for index, item in enumerate(pipeline.get(key) or []):
            at = f"pipeline {key}[{index}]"
            task_call = mapping_field(item, at)
            task = _resolve(task_call, "taskRef", "taskSpec", "Task", namespace, named, at)
            if task is None:
                findings.append(_missing(f"spec.pipelineRef ({at}.taskRef)", task_call))
                continue
            pod_name = f"{metadata['name']}-{task_call.get('name')}-pod"
            workloads.append(
                _pod_workload(metadata, kind, pod_name, labels, annotations, _task_pod(task, at))
            )
    return Derived(tuple(workloads), tuple(findings))


_Named = Mapping[tuple[str, str, str], Mapping[str, Any]]


def _resolve(spec: Mapping[str, Any], ref_key: str, inline_key: str, kind: str, namespace: str,
             named: _Named, at: str) -> dict[str, Any] | None:  # fmt: skip
    """The spec of the Task or Pipeline a run names (inline, or by name among the documents)."""
    if isinstance(spec.get(inline_key), dict):
        return dict(spec[inline_key])
    ref = mapping_field(spec.get(ref_key), f"{at}.{ref_key}")
    found = named.get((kind, namespace, str(ref.get("name"))))
    return None if found is None else mapping_field(found.get("spec"), f"{kind} {ref.get('name')}: spec")


def _missing(field: str, spec: Mapping[str, Any]) -> Finding:
    ref = next((v for k, v in spec.items() if k.endswith("Ref") and isinstance(v, dict)), {})
    message = f"{ref.get('name')!r} is not among the loaded objects: its pods are not scheduled by gpuq"
    return Finding(field, message, "warning")


def _task_pod(task: Mapping[str, Any], at: str) -> dict[str, Any]:
    """The pod of one TaskRun: its steps (over ``stepTemplate``) then its sidecars."""
    steps = task.get("steps")
    if not isinstance(steps, list) or not steps:
        raise SourceError(f"{at}.steps", "a Task needs at least one step")
    base = mapping_field(task.get("stepTemplate"), "stepTemplate", required=False)
    containers = []
    for index, step in enumerate(steps):
        step = mapping_field(step, f"{at}.steps[{index}]")
        resources = step.get("computeResources") or base.get("computeResources") or {}
        container: dict[str, Any] = {"name": f"step-{step.get('name') or f'unnamed-{index}'}"}
        container["image"] = step.get("image") or base.get("image") or ""
        if resources:
            container["resources"] = copy.deepcopy(resources)
        containers.append(container)
    for sidecar in task.get("sidecars") or []:
        if isinstance(sidecar, dict):
            containers.append(
                {k: copy.deepcopy(v) for k, v in sidecar.items() if k in ("name", "image", "resources")}
            )
    return {"containers": containers, "restartPolicy": "Never"}
