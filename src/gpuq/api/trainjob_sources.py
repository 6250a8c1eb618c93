"""Kubeflow Trainer v2 TrainJob (``trainer.kubeflow.org/v1alpha1``) resolved against its training runtime.

The one source that needs another object: its pod sets are the JobSet its
runtime (a ``ClusterTrainingRuntime``, or a ``TrainingRuntime`` of the job's
namespace) would make, with the TrainJob's overrides. Kueue's
``pkg/controller/jobs/trainjob/trainjob_controller.go`` (``getChildJobSet``)
asks Trainer v2.2.1 for that JobSet and takes the JobSet integration's pod
sets. The steps, as Trainer's ``pkg/runtime/core/trainingruntime.go``
(``newRuntimeInfo``), its ML-policy plugins and ``plugins/jobset/builder.go``
apply them:

1. Resolve ``spec.runtimeRef`` (kind default ``ClusterTrainingRuntime``); a
   missing runtime is :class:`RuntimeMissing` (Kueue: "runtime 'x' not found",
   no Workload, the job stays suspended).
2. Copy the runtime's ``spec.template.spec.replicatedJobs`` and merge each
   ``spec.runtimePatches[*].trainingRuntimeSpec.template.spec.replicatedJobs``
   entry into the replicated job of its name (a strategic merge: mappings
   merge, lists of named items merge by name, other lists are replaced).
3. Pods per replicated job: its ``parallelism`` (default 1); the trainer job
   (label ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``) takes
   ``spec.mlPolicy.numNodes`` (default 1), and ``spec.trainer.numNodes``
   overrides it: on the trainer job, or with an MPI policy on the job named
   ``node`` (one fewer with ``runLauncherAsNode``, at least 1).
4. The trainer job's container named ``node`` gets ``spec.trainer``'s image,
   command, args and env, and ``resourcesPerNode`` as its whole resources
   (with ``runLauncherAsNode`` the ``node`` job's container gets them too).
5. Replicas are 1; each replicated job becomes a JobSet pod set: its name,
   count = the pods of step 3, its pod template.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuq.api.source_fields import (
    SourceError,
    check_pod_sets,
    count_field,
    int_field,
    make_pod_set,
    mapping_field,
    pod_template,
)

TRAINER_API_VERSION = "trainer.kubeflow.org/v1alpha1"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
_TRAINER, _NODE = "trainer", "node"
RUNTIME_FIELD = "spec.runtimeRef.name"


def _namespace(kind: str, metadata: Mapping[str, Any]) -> str:
    """A runtime's key namespace: ``""`` for the cluster-scoped kind, else the namespace (``default``)."""
    return "" if kind == "ClusterTrainingRuntime" else str(metadata.get("namespace") or "default")


class RuntimeMissing(SourceError):
    """The TrainJob's runtime is not among the loaded objects: Kueue makes no Workload, the job waits."""


def is_runtime(api_version: str, kind: str) -> bool:
    return api_version == TRAINER_API_VERSION and kind in RUNTIME_KINDS


@dataclass(frozen=True)
class SourceContext:
    """The objects a source may refer to, by ``(kind, namespace, name)``; cluster-scoped kinds use ``""``.

    Built once per load from every document (the loader's second pass reads
    sources against it), so the order of files does not matter.
    """

    runtimes: Mapping[tuple[str, str, str], Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, documents: Iterable[object]) -> SourceContext:
        runtimes: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        for doc in documents:
            if not isinstance(doc, dict) or not is_runtime(str(doc.get("apiVersion")), str(doc.get("kind"))):
                continue
            metadata: dict[str, Any] = doc["metadata"] if isinstance(doc.get("metadata"), dict) else {}
            kind = str(doc["kind"])
            namespace = _namespace(kind, metadata)
            runtimes.setdefault((kind, namespace, str(metadata.get("name") or "")), doc)
        return cls(runtimes)


def _runtime(doc: Mapping[str, Any], spec: Mapping[str, Any], context: SourceContext) -> Mapping[str, Any]:
    """Step 1."""
    ref = mapping_field(spec.get("runtimeRef"), "spec.runtimeRef")
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        raise SourceError(RUNTIME_FIELD, "is required")
    kind = str(ref.get("kind") or "ClusterTrainingRuntime")
    group = str(ref.get("apiGroup") or "trainer.kubeflow.org")
    if group != "trainer.kubeflow.org" or kind not in RUNTIME_KINDS:
        raise SourceError("spec.runtimeRef", f"unsupported runtime: {group}/{kind}")
    namespace = _namespace(kind, doc["metadata"])
    runtime = context.runtimes.get((kind, namespace, name))
    if runtime is None:
        where = f"{kind} {name!r}" + (f" in namespace {namespace!r}" if namespace else "")
        raise RuntimeMissing(RUNTIME_FIELD, f"runtime '{name}' not found (no {where} is loaded)")
    return runtime


def strategic_merge(base: Any, patch: Any) -> Any:
    """Step 2's merge: mappings key by key, lists of ``name``d mappings by name, anything else replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = strategic_merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list) and _named(base) and _named(patch):
        merged = [dict(item) for item in base]
        for item in patch:
            index = next((i for i, b in enumerate(merged) if b["name"] == item["name"]), None)
            if index is None:
                merged.append(copy.deepcopy(item))
            else:
                merged[index] = strategic_merge(merged[index], item)
        return merged
    return copy.deepcopy(patch)


def _named(items: list[Any]) -> bool:
    return all(isinstance(item, dict) and isinstance(item.get("name"), str) for item in items)


def _patched_jobs(runtime: Mapping[str, Any], spec: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    """Step 2: the runtime's replicated jobs with the TrainJob's runtime patches merged in."""
    template = mapping_field(
        mapping_field(runtime.get("spec"), f"{where}spec").get("template"), f"{where}spec.template"
    )
    jobs = mapping_field(template.get("spec"), f"{where}spec.template.spec").get("replicatedJobs")
    if not isinstance(jobs, list) or not jobs:
        raise SourceError(RUNTIME_FIELD, f"{where}spec.template.spec.replicatedJobs: expected a list of jobs")
    jobs = [
        copy.deepcopy(mapping_field(job, f"{where}spec.template.spec.replicatedJobs[{i}]"))
        for i, job in enumerate(jobs)
    ]
    patches = spec.get("runtimePatches") or []
    if not isinstance(patches, list):
        raise SourceError("spec.runtimePatches", "expected a list")
    for p_index, patch in enumerate(patches):
        at = f"spec.runtimePatches[{p_index}].trainingRuntimeSpec.template.spec.replicatedJobs"
        runtime_spec = mapping_field((patch or {}).get("trainingRuntimeSpec"), at, required=False)
        job_patches = (((runtime_spec.get("template") or {}).get("spec")) or {}).get("replicatedJobs") or []
        for j_index, job_patch in enumerate(job_patches):
            job_patch = mapping_field(job_patch, f"{at}[{j_index}]")
            for job in jobs:
                if job.get("name") == job_patch.get("name") and job_patch.get("template") is not None:
                    job["template"] = strategic_merge(job.get("template") or {}, job_patch["template"])
    return jobs


def _overrides(trainer: Mapping[str, Any]) -> dict[str, Any]:
    """Step 4's container fields from ``spec.trainer``."""
    out = {
        key: copy.deepcopy(trainer[key])
        for key in ("image", "command", "args")
        if trainer.get(key) is not None
    }
    return out


def _apply_trainer(container: dict[str, Any], trainer: Mapping[str, Any], full: bool) -> None:
    """Step 4 on the ``node`` container: image/command/args when ``full``, then resources and env."""
    if full:
        container.update(_overrides(trainer))
    resources = mapping_field(
        trainer.get("resourcesPerNode"), "spec.trainer.resourcesPerNode", required=False
    )
    if resources.get("limits") is not None or resources.get("requests") is not None:
        container["resources"] = copy.deepcopy(resources)
    env = trainer.get("env")
    if isinstance(env, list) and env:
        container["env"] = strategic_merge(container.get("env") or [], env)


def trainjob_pod_sets(
    doc: Mapping[str, Any], spec: dict[str, Any], context: SourceContext
) -> list[dict[str, Any]]:
    """Steps 1 to 5 of the module docstring."""
    runtime = _runtime(doc, spec, context)
    where = f"{runtime['kind']} {((runtime.get('metadata') or {}).get('name'))!r}: "
    jobs = _patched_jobs(runtime, spec, where)
    runtime_spec = runtime.get("spec") or {}
    policy = mapping_field(runtime_spec.get("mlPolicy"), f"{where}spec.mlPolicy", required=False)
    trainer = mapping_field(spec.get("trainer"), "spec.trainer", required=False)
    num_nodes = count_field(trainer, "numNodes", "spec.trainer.numNodes", None)
    mpi = policy.get("mpi") if isinstance(policy.get("mpi"), dict) else None
    launcher_as_node = bool(mpi and mpi.get("runLauncherAsNode") is True)
    pod_sets = []
    for index, job in enumerate(jobs):
        at = f"{where}spec.template.spec.replicatedJobs[{index}]"
        name = str(job.get("name") or "")
        job_template = mapping_field(job.get("template"), f"{at}.template")
        job_spec = mapping_field(job_template.get("spec"), f"{at}.template.spec")
        is_trainer = ((job_template.get("metadata") or {}).get("labels") or {}).get(
            ANCESTOR_LABEL
        ) == _TRAINER
        count = int_field(job_spec, "parallelism", f"{at}.template.spec.parallelism", 1)
        if is_trainer and policy:
            count = int_field(policy, "numNodes", f"{where}spec.mlPolicy.numNodes", 1)
        if num_nodes is not None and mpi is not None and name == _NODE:
            count = max(num_nodes - 1, 1) if launcher_as_node else num_nodes
        elif num_nodes is not None and mpi is None and is_trainer:
            count = num_nodes
        template = pod_template(job_spec, "template", f"{at}.template.spec.template")
        if is_trainer or (launcher_as_node and name == _NODE):
            for container in template["spec"].get("containers") or []:
                if isinstance(container, dict) and container.get("name") == _NODE:
                    _apply_trainer(container, trainer, is_trainer)
        pod_sets.append(make_pod_set(name, count, template, RUNTIME_FIELD))
    return check_pod_sets(pod_sets, RUNTIME_FIELD)
