"""Which job frameworks Kueue manages: Configuration ``integrations.frameworks`` / ``externalFrameworks``.

A job of a framework that is not enabled is not a Kueue workload: Kueue's job reconcilers for it
never start (``pkg/controller/jobframework/setup.go``), so on a real cluster it runs unmanaged,
outside every quota. gpuq does the same: such a source is not admitted through quota, and the
loader says so in a warning naming the object and ``integrations.frameworks``.

:data:`FRAMEWORKS` is the one table from a source's (API group, kind) to Kueue's framework name
(each controller's ``FrameworkName`` under ``pkg/controller/jobs/``); a new source kind adds a line.
Without a Configuration every framework is managed (Kueue's shipped
``config/components/manager/controller_manager_config.yaml`` enables the common ones); a
Configuration without ``integrations.frameworks`` enables only ``batch/job``
(``apis/config/v1beta2/defaults.go``).
"""

from __future__ import annotations

from gpuq.api import kueue

FRAMEWORKS: dict[tuple[str, str], str] = {
    ("batch", "Job"): "batch/job",
    ("jobset.x-k8s.io", "JobSet"): "jobset.x-k8s.io/jobset",
    ("kubeflow.org", "PyTorchJob"): "kubeflow.org/pytorchjob",
    ("kubeflow.org", "TFJob"): "kubeflow.org/tfjob",
    ("kubeflow.org", "MPIJob"): "kubeflow.org/mpijob",
    ("kubeflow.org", "PaddleJob"): "kubeflow.org/paddlejob",
    ("kubeflow.org", "XGBoostJob"): "kubeflow.org/xgboostjob",
    ("kubeflow.org", "JAXJob"): "kubeflow.org/jaxjob",
    ("trainer.kubeflow.org", "TrainJob"): "trainer.kubeflow.org/trainjob",
    ("ray.io", "RayJob"): "ray.io/rayjob",
    ("ray.io", "RayCluster"): "ray.io/raycluster",
    ("ray.io", "RayService"): "ray.io/rayservice",
    ("workload.codeflare.dev", "AppWrapper"): "workload.codeflare.dev/appwrapper",
    ("sparkoperator.k8s.io", "SparkApplication"): "sparkoperator.k8s.io/sparkapplication",
    ("", "Pod"): "pod",
    ("apps", "Deployment"): "deployment",
    ("apps", "StatefulSet"): "statefulset",
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): "leaderworkerset.x-k8s.io/leaderworkerset",
}
"""(API group, kind) -> Kueue's framework name."""

CREATED_BY: dict[tuple[str, str], str] = {
    ("batch", "CronJob"): "batch/job",
    ("argoproj.io", "Workflow"): "pod",
    ("tekton.dev", "PipelineRun"): "pod",
    ("tekton.dev", "TaskRun"): "pod",
    ("agents.x-k8s.io", "Sandbox"): "pod",
}
"""Kinds Kueue does not integrate whose controllers create objects of a framework (a CronJob's
Jobs, a Workflow's or a Sandbox's Pods): managed when that framework is."""

DEFAULT_FRAMEWORKS = ("batch/job",)
"""``integrations.frameworks`` when a Configuration leaves it out (``defaultJobFrameworkName``)."""
FRAMEWORKS_FIELD = ("integrations", "frameworks")


def framework_of(api_version: str, kind: str) -> str | None:
    """Kueue's framework name for a source (for a kind of :data:`CREATED_BY`, the framework of what
    it creates), or None when the kind is not a job framework."""
    key = (kueue.split_api_version(api_version)[0], kind)
    return FRAMEWORKS.get(key) or CREATED_BY.get(key)


def _external(entry: str) -> tuple[str, str] | None:
    """``Kind.version.group`` (Kueue's ``schema.ParseKindArg``) -> (group, kind), or None when malformed."""
    kind, _, rest = entry.partition(".")
    _version, _, group = rest.partition(".")
    return (group, kind) if kind and group else None


def managed(config: kueue.Configuration | None, api_version: str, kind: str) -> bool:
    """Whether Kueue with ``config`` manages sources of ``api_version``/``kind``."""
    if config is None:
        return True
    name = framework_of(api_version, kind)
    integrations = config.integrations
    enabled = integrations.frameworks if integrations and integrations.frameworks else DEFAULT_FRAMEWORKS
    if name is not None and name in enabled:
        return True
    external = integrations.external_frameworks if integrations else []
    group = kueue.split_api_version(api_version)[0]
    return any(_external(entry) == (group, kind) for entry in external)


def unmanaged_message(api_version: str, kind: str) -> str:
    """The warning for a source whose framework is not enabled."""
    name = framework_of(api_version, kind) or f"{kind}.{api_version}"
    return (
        f"framework {name!r} is not enabled in the Configuration's integrations.frameworks: Kueue does "
        "not manage this job (it runs unmanaged, outside quota) and gpuq does not admit it"
    )
