"""What the control loop needs to run a workload source: its pods' processes and the Job's rules.

The source (Job, JobSet, a Kubeflow job, Pod...) becomes a Kueue Workload exactly
as ``gpuq admit`` builds it (:func:`gpuq.api.sources_derived.live_workload`); its pod
templates give each pod's command, arguments, environment and working
directory, and the Job gives the rules a kubelet and the Job controller would
apply: ``backoffLimit``, ``activeDeadlineSeconds`` and the pod's
``terminationGracePeriodSeconds``. RayJob and RayCluster pods get commands
gpuq writes itself (a Ray head, Ray workers, the job's entrypoint): see
:mod:`gpuq.run.rayjobs`. Kubeflow jobs run each replica's command (no
rendezvous variables are set); an MPIJob ends when its launcher does. An
AppWrapper, a LeaderWorkerSet of one group and a Sandbox run the pods of the
one Workload they give (:func:`gpuq.api.sources_derived.live_workload`).
SparkApplications and TrainJobs are refused: their pods are built by operators
gpuq does not run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuq.api.source_fields import SourceError
from gpuq.api.sources_derived import live_workload
from gpuq.core.quantity import QuantityError, parse_quantity
from gpuq.run.rayjobs import HEAD, SUBMITTER, cluster_directory, launcher_command, ray_env

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
    """How to run one workload's pods and when it has ended.

    ``completion_pod_set``: ``None`` for a Job, which succeeds once every pod has
    succeeded; otherwise the pod set whose pods end the workload (a RayJob's
    submitter, or its head when the head runs the entrypoint): their exit codes
    decide success or failure, and the other pods are then stopped.
    """

    pod_sets: tuple[PodSetRun, ...]
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    active_deadline_s: float | None = None
    checkpoint: bool = False
    completion_pod_set: str | None = None
    retries: int = 0  # a RayJob's spec.backoffLimit: whole re-runs when the completion pod set fails

    def pod_set(self, name: str) -> PodSetRun:
        return next(ps for ps in self.pod_sets if ps.name == name)


def job_run(doc: Mapping[str, Any], *, workdir: Path | None = None) -> JobRun:
    """The run rules of a workload source; :class:`SourceError` names the field that cannot run.

    ``workdir`` is the executor's work directory, where Ray sources keep their
    cluster directory (a temporary directory when not given).
    """
    if doc.get("kind") in ("SparkApplication", "TrainJob"):
        raise SourceError("kind", f"a {doc.get('kind')} is admitted and simulated, not run, by gpuq")
    workload = live_workload(doc)
    if doc.get("apiVersion") == "ray.io/v1":
        return _ray_job_run(doc, workload, workdir)
    pod_sets = tuple(_pod_set_run(ps, index) for index, ps in enumerate(workload["spec"]["podSets"]))
    spec = doc.get("spec") or {}
    backoff = (
        spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT) if doc.get("kind") == "Job" else DEFAULT_BACKOFF_LIMIT
    )
    if not isinstance(backoff, int) or isinstance(backoff, bool) or backoff < 0:
        raise SourceError("spec.backoffLimit", f"must be a non-negative integer, got {backoff!r}")
    deadline = active_deadline_s(spec) if doc.get("kind") == "Job" else None
    # The MPI operator ends an MPIJob with its launcher (``mpirun``); the workers (sshd) are then stopped.
    ends_with = "launcher" if doc.get("kind") == "MPIJob" else None
    return JobRun(pod_sets, backoff, deadline, wants_checkpoint(doc), completion_pod_set=ends_with)


def active_deadline_s(spec: Mapping[str, Any]) -> float | None:
    """``spec.activeDeadlineSeconds`` (a Job's, a RayJob's), or ``None`` when absent."""
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is None:
        return None
    if not isinstance(deadline, int | float) or isinstance(deadline, bool) or deadline <= 0:
        raise SourceError("spec.activeDeadlineSeconds", f"must be a positive number, got {deadline!r}")
    return float(deadline)


def wants_checkpoint(doc: Mapping[str, Any]) -> bool:
    """The source asks for a checkpoint directory (annotation ``gpuq.dev/checkpoint: "true"``)."""
    annotations = (doc.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(CHECKPOINT_ANNOTATION, "")).lower() == "true"


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
    run = ContainerRun(
        tuple(command),
        tuple(str(a) for a in container.get("args") or []),
        container_env(container, f"{where}.containers[0]"),
        container.get("workingDir"),
        str(container.get("image") or ""),
    )
    grace = termination_grace_s(template_spec, where)
    return PodSetRun(str(pod_set["name"]), int(pod_set.get("count", 1)), run, grace)


def container_env(container: Mapping[str, Any], where: str) -> dict[str, str]:
    """A container's ``env`` as a mapping; ``valueFrom`` cannot be resolved without a cluster."""
    env: dict[str, str] = {}
    for position, item in enumerate(container.get("env") or []):
        if not isinstance(item, Mapping) or "name" not in item:
            raise SourceError(f"{where}.env[{position}]", "expected {name, value}")
        if "valueFrom" in item:
            raise SourceError(f"{where}.env[{position}].valueFrom", "is not supported; give a value")
        env[str(item["name"])] = str(item.get("value", ""))
    return env


def termination_grace_s(template_spec: Mapping[str, Any], where: str) -> float:
    """The pod's ``terminationGracePeriodSeconds`` (Kubernetes' default 30)."""
    grace = template_spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
    if not isinstance(grace, int | float) or isinstance(grace, bool) or grace < 0:
        raise SourceError(f"{where}.terminationGracePeriodSeconds", f"must be 0 or more, got {grace!r}")
    return float(grace)


# ------------------------------------------------------------------------------- RayJob and RayCluster
_RAY_OWNED_PARAMS = frozenset(
    {
        "head",
        "address",
        "port",
        "block",
        "temp-dir",
        "num-gpus",
        "node-ip-address",
        "include-dashboard",
        "dashboard-port",
        "dashboard-agent-listen-port",
        "ray-client-server-port",
        "disable-usage-stats",
    }
)
_RAY_FLAG_PARAMS = frozenset(  # `ray start` options that take no value
    {
        "no-redirect-output",
        "enable-object-reconstruction",
        "no-monitor",
        "ray-debugger-external",
        "enable-resource-isolation",
        "verbose",
    }
)


def _ray_job_run(doc: Mapping[str, Any], workload: Mapping[str, Any], workdir: Path | None) -> JobRun:
    """The run rules of a ``ray.io/v1`` RayJob or RayCluster (:mod:`gpuq.run.rayjobs`, steps 1-4).

    ``workload`` is the source's Kueue Workload (:func:`gpuq.api.sources.to_workload`);
    :class:`SourceError` names a field that cannot run here.
    """
    is_job = doc.get("kind") == "RayJob"
    spec: Mapping[str, Any] = doc.get("spec") or {}
    metadata: Mapping[str, Any] = doc.get("metadata") or {}
    cluster: Mapping[str, Any] = (spec.get("rayClusterSpec") or {}) if is_job else spec
    prefix = "spec.rayClusterSpec" if is_job else "spec"
    directory = cluster_directory(workdir, str(metadata.get("namespace") or "default"), str(metadata["name"]))
    groups = cluster.get("workerGroupSpecs") or []
    workers = workload["spec"]["podSets"][1 : 1 + len(groups)]
    has_submitter = is_job and (spec.get("submissionMode") or "K8sJobMode") == "K8sJobMode"
    entry = _ray_entrypoint(spec, 1 + sum(int(ps.get("count", 1)) for ps in workers)) if is_job else ()
    head = cluster.get("headGroupSpec") or {}
    head_entry = () if has_submitter else entry
    runs = [
        _ray_pod_set_run(HEAD, 1, head, f"{prefix}.headGroupSpec", directory, head_entry, own_command=False)
    ]
    for index, pod_set in enumerate(workers):
        at = f"{prefix}.workerGroupSpecs[{index}]"
        runs.append(
            _ray_pod_set_run(str(pod_set["name"]), int(pod_set.get("count", 1)), groups[index], at, directory)
        )
    if has_submitter:
        template = spec.get("submitterPodTemplate") or _default_submitter(head, f"{prefix}.headGroupSpec")
        runs.append(
            _ray_pod_set_run(
                SUBMITTER, 1, {"template": template}, "spec.submitterPodTemplate", directory, entry
            )
        )
    completion = (SUBMITTER if has_submitter else HEAD) if is_job else None
    deadline = active_deadline_s(spec) if is_job else None
    retries = _count(spec, "backoffLimit", 0) if is_job else 0
    return JobRun(tuple(runs), DEFAULT_BACKOFF_LIMIT, deadline, wants_checkpoint(doc), completion, retries)


def _count(spec: Mapping[str, Any], name: str, default: int) -> int:
    """A non-negative integer field of the spec, or a :class:`SourceError` naming it."""
    value = spec.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SourceError(f"spec.{name}", f"must be a non-negative integer, got {value!r}")
    return value


def _ray_pod_set_run(
    name: str,
    count: int,
    group: Mapping[str, Any],
    where: str,
    directory: Path,
    entry: tuple[str, ...] = (),
    *,
    own_command: bool = True,
) -> PodSetRun:
    """One Ray pod set: the launcher's role for it (``head``, ``worker``, ``submit`` by name), or, when
    ``own_command`` and the container has a ``command``, that command and its ``args``."""
    template_spec = (group.get("template") or {}).get("spec") or {}
    containers = template_spec.get("containers") or []
    if len(containers) != 1 or not isinstance(containers[0], Mapping):
        raise SourceError(
            f"{where}.template.spec.containers",
            f"the local executor runs one container per pod, this pod has {len(containers)}",
        )
    container = containers[0]
    if own_command and container.get("command"):
        command = tuple(str(c) for c in container["command"])
        args = tuple(str(a) for a in container.get("args") or [])
    elif name == SUBMITTER:
        command, args = launcher_command("submit", directory, *entry), ()
    else:
        ray_args = _ray_start_args(container, group.get("rayStartParams"), where)
        role = HEAD if name == HEAD else "worker"
        command, args = launcher_command(role, directory, *entry, ray_args=ray_args), ()
    env = container_env(container, f"{where}.template.spec.containers[0]") | ray_env(directory)
    run = ContainerRun(command, args, env, container.get("workingDir"), str(container.get("image") or ""))
    return PodSetRun(name, count, run, termination_grace_s(template_spec, f"{where}.template.spec"))


def _default_submitter(head: Mapping[str, Any], where: str) -> dict[str, Any]:
    """KubeRay's default submitter pod: one container with the head's image (and here its workingDir)."""
    containers = ((head.get("template") or {}).get("spec") or {}).get("containers") or [{}]
    if not isinstance(containers[0], Mapping):
        raise SourceError(f"{where}.template.spec.containers[0]", "expected a container")
    container = {"name": "ray-job-submitter", "image": containers[0].get("image") or ""}
    if containers[0].get("workingDir"):
        container["workingDir"] = containers[0]["workingDir"]
    return {"spec": {"containers": [container]}}


def _ray_start_args(container: Mapping[str, Any], params: object, where: str) -> tuple[str, ...]:
    """``--num-cpus`` (rounded up) and ``--memory`` (bytes) from requests, else limits; then
    ``rayStartParams`` as KubeRay renders them (``--key=value``, a flag bare when ``"true"``)."""
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    values: dict[str, str] = {}
    for resource, key in (("cpu", "num-cpus"), ("memory", "memory")):
        quantity = requests.get(resource, limits.get(resource))
        if quantity is None:
            continue
        try:
            values[key] = str(math.ceil(parse_quantity(quantity)))
        except QuantityError as error:
            raise SourceError(f"{where}.template.spec.containers[0].resources", str(error)) from None
    if params is not None and not isinstance(params, Mapping):
        raise SourceError(f"{where}.rayStartParams", "expected a mapping of option names to values")
    for key, value in (params or {}).items():
        if not isinstance(key, str) or not key.replace("-", "").isalnum():
            raise SourceError(f"{where}.rayStartParams", f"not a ray start option: {key!r}")
        if key not in _RAY_OWNED_PARAMS:
            values[key] = str(value).lower() if isinstance(value, bool) else str(value)
    args: list[str] = []
    for key, value in values.items():
        if key not in _RAY_FLAG_PARAMS:
            args.append(f"--{key}={value}")
        elif value.lower() == "true":
            args.append(f"--{key}")
    return tuple(args)


def _ray_entrypoint(spec: Mapping[str, Any], nodes: int) -> tuple[str, ...]:
    """The launcher options that run a RayJob's entrypoint: the command, the nodes to wait for and
    the runtime environment of ``runtimeEnvYAML`` (handed to ``ray.init`` as job submission does)."""
    entrypoint = spec.get("entrypoint")
    if entrypoint is not None and not isinstance(entrypoint, str):
        raise SourceError("spec.entrypoint", f"expected a command line, got {entrypoint!r}")
    if not entrypoint:
        why = "InteractiveMode waits for a job submitted to the Ray dashboard, which gpuq does not run; "
        interactive = spec.get("submissionMode") == "InteractiveMode"
        raise SourceError("spec.entrypoint", (why if interactive else "") + "an entrypoint is required")
    options = ["--entrypoint", entrypoint, "--nodes", str(nodes)]
    options += _entrypoint_resources(spec)
    text = spec.get("runtimeEnvYAML")
    if text:
        try:
            runtime_env = yaml.safe_load(str(text))
        except yaml.YAMLError as error:
            raise SourceError("spec.runtimeEnvYAML", f"not YAML: {error}") from None
        env_vars = runtime_env.get("env_vars") if isinstance(runtime_env, dict) else None
        if not isinstance(runtime_env, dict) or not isinstance(env_vars or {}, dict):
            raise SourceError(
                "spec.runtimeEnvYAML", "expected a runtime environment mapping (env_vars a mapping)"
            )
        options += ["--runtime-env", json.dumps(runtime_env, sort_keys=True, default=str)]
    return tuple(options)


def _entrypoint_resources(spec: Mapping[str, Any]) -> list[str]:
    """``spec.entrypointNumCpus`` / ``entrypointNumGpus`` (numbers, 0 or more) and
    ``entrypointResources`` (a JSON object of custom resource amounts) as the launcher's
    ``--entrypoint-num-cpus`` / ``--entrypoint-num-gpus`` / ``--entrypoint-resources``: KubeRay passes
    them to ``ray job submit``, which reserves them for the entrypoint on a node that has them."""
    options: list[str] = []
    for field_name, option in (("entrypointNumCpus", "cpus"), ("entrypointNumGpus", "gpus")):
        value = spec.get(field_name)
        if value is None:
            continue
        if not isinstance(value, int | float) or isinstance(value, bool) or not value >= 0:
            raise SourceError(f"spec.{field_name}", f"must be a number, 0 or more, got {value!r}")
        if value:
            options += [f"--entrypoint-num-{option}", f"{float(value):g}"]
    text = spec.get("entrypointResources")
    if text is None or text == "":
        return options
    where = "spec.entrypointResources"
    if not isinstance(text, str):
        raise SourceError(where, f"expected a JSON string such as '{{\"TPU\": 1}}', got {text!r}")
    try:
        resources = json.loads(text)
    except json.JSONDecodeError as error:
        raise SourceError(where, f"not JSON: {error}") from None
    if not isinstance(resources, dict):
        raise SourceError(where, f"expected a JSON object of resource amounts, got {text!r}")
    for name, amount in resources.items():
        if not isinstance(amount, int | float) or isinstance(amount, bool) or not amount >= 0:
            why = f"resource {name!r}: the amount must be a number, 0 or more, got {amount!r}"
            raise SourceError(where, why)
        if name in ("CPU", "GPU"):
            raise SourceError(where, f"{name} is set with entrypointNum{name.title()}s, not here")
    if resources:
        options += ["--entrypoint-resources", json.dumps(resources, sort_keys=True)]
    return options
