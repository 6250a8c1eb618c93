"""What the control loop needs to run a workload source: its pods' processes and the Job's rules.

The source (Job, JobSet, PyTorchJob, Pod...) becomes a Kueue Workload exactly
as ``gpuq admit`` builds it (:func:`gpuq.api.sources.to_workload`); its pod
templates give each pod's command, arguments, environment and working
directory, and the Job gives the rules a kubelet and the Job controller would
apply: ``backoffLimit``, ``activeDeadlineSeconds`` and the pod's
``terminationGracePeriodSeconds``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuq.api.source_fields import SourceError
from gpuq.api.sources import to_workload

CHECKPOINT_ANNOTATION = "gpuq.dev/checkpoint"
DEFAULT_BACKOFF_LIMIT = 6  # batch/v1 Job's default
DEFAULT_GRACE_S = 30.0  # the pod's terminationGracePeriodSeconds default


@dataclass(frozen=True, slots=True)
class ContainerRun:
    command: tuple[str, ...]
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    image: str = ""


@dataclass(frozen=True, slots=True)
class PodSetRun:
    name: str
    count: int
    container: ContainerRun
    grace_s: float = DEFAULT_GRACE_S


@dataclass(frozen=True, slots=True)
class JobRun:
    """How to run one workload's pods and when it has failed."""

    pod_sets: tuple[PodSetRun, ...]
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    active_deadline_s: float | None = None
    checkpoint: bool = False

    def pod_set(self, name: str) -> PodSetRun:
        return next(ps for ps in self.pod_sets if ps.name == name)


def job_run(doc: Mapping[str, Any]) -> JobRun:
    """The run rules of a workload source; :class:`SourceError` names the field that cannot run."""
    workload = to_workload(dict(doc))
    pod_sets = tuple(_pod_set_run(ps, index) for index, ps in enumerate(workload["spec"]["podSets"]))
    spec = doc.get("spec") or {}
    annotations = (doc.get("metadata") or {}).get("annotations") or {}
    backoff = (
        spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT) if doc.get("kind") == "Job" else DEFAULT_BACKOFF_LIMIT
    )
    deadline = spec.get("activeDeadlineSeconds") if doc.get("kind") == "Job" else None
    if not isinstance(backoff, int) or isinstance(backoff, bool) or backoff < 0:
        raise SourceError("spec.backoffLimit", f"must be a non-negative integer, got {backoff!r}")
    if deadline is not None and (
        not isinstance(deadline, int | float) or isinstance(deadline, bool) or deadline <= 0
    ):
        raise SourceError("spec.activeDeadlineSeconds", f"must be a positive number, got {deadline!r}")
    checkpoint = str(annotations.get(CHECKPOINT_ANNOTATION, "")).lower() == "true"
    return JobRun(pod_sets, backoff, float(deadline) if deadline is not None else None, checkpoint)


def _pod_set_run(pod_set: Mapping[str, Any], index: int) -> PodSetRun:
    where = f"spec.podSets[{index}].template.spec"
    template_spec = ((pod_set.get("template") or {}).get("spec")) or {}
    containers = template_spec.get("containers") or []
    if len(containers) != 1:
        raise SourceError(
            f"{where}.containers",
            f"the local executor runs one container per pod, this pod set has {len(containers)}",
        )
    container = containers[0]
    command = [str(c) for c in container.get("command") or []]
    if not command:
        raise SourceError(f"{where}.containers[0].command", "a command is required (images are not pulled)")
    env: dict[str, str] = {}
    for position, item in enumerate(container.get("env") or []):
        if not isinstance(item, Mapping) or "name" not in item:
            raise SourceError(f"{where}.containers[0].env[{position}]", "expected {name, value}")
        if "valueFrom" in item:
            raise SourceError(
                f"{where}.containers[0].env[{position}].valueFrom", "is not supported; give a value"
            )
        env[str(item["name"])] = str(item.get("value", ""))
    grace = template_spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
    if not isinstance(grace, int | float) or isinstance(grace, bool) or grace < 0:
        raise SourceError(f"{where}.terminationGracePeriodSeconds", f"must be 0 or more, got {grace!r}")
    run = ContainerRun(
        tuple(command),
        tuple(str(a) for a in container.get("args") or []),
        env,
        container.get("workingDir"),
        str(container.get("image") or ""),
    )
    return PodSetRun(str(pod_set["name"]), int(pod_set.get("count", 1)), run, float(grace))
