"""Serving workloads read as their projects define them, turned into typed :class:`ServiceSpec` s.

Kinds read (:data:`SERVING_KINDS`): ``apps/v1`` Deployment and StatefulSet, ``autoscaling/v2``
HorizontalPodAutoscaler, ``keda.sh/v1alpha1`` ScaledObject, ``serving.kserve.io/v1beta1``
InferenceService, ``ray.io/v1`` RayService and ``policy/v1`` PodDisruptionBudget.

:func:`build_services` works on the loaded manifests of a whole configuration:

1. every Deployment / StatefulSet, InferenceService (one service per revision when
   ``canaryTrafficPercent`` splits traffic) and Ray Serve deployment becomes a service: its
   replica's pod template (requests incl. GPUs, node selector, tolerations), queue
   (``kueue.x-k8s.io/queue-name`` on the object or its template), priority class and replicas;
2. each HPA and ScaledObject is attached to the Deployment or StatefulSet its
   ``scaleTargetRef`` names (missing targets and second autoscalers are errors), converted by
   :mod:`gpuq.api.serving_autoscalers`; KServe and Ray Serve carry their own autoscaler;
3. each PodDisruptionBudget is matched by ``selector.matchLabels`` to the services of its
   namespace whose pod labels it selects.

Every problem is a :class:`~gpuq.api.diagnostics.Diagnostic` naming file, line, object and field;
the loader reports them with the rest of the configuration (nothing is half-applied).
A replica is one pod (a Deployment's, a StatefulSet's, a KServe predictor's, or a Ray worker
pod holding one Serve replica); Kueue admits it as its own workload, pod by pod.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import yaml
from pydantic import ValidationError

from gpuq.api import convert, kueue, sources_pods
from gpuq.api import serving_ray_llm as ray_llm
from gpuq.api.diagnostics import Diagnostic, FieldPath, Manifest, format_field_path
from gpuq.api.machines import PRODUCT_LABEL
from gpuq.api.pods import quantity_problems
from gpuq.api.serving_autoscalers import (
    ServingError,
    hpa_spec,
    integer,
    mapping,
    request_autoscaler,
    scaled_object_spec,
)
from gpuq.api.source_fields import QUEUE_LABEL, SourceError
from gpuq.core import model as core
from gpuq.core.autoscaling.keda import ScaledObjectSpec
from gpuq.core.autoscaling.spec import HPASpec, MetricSourceType, MetricSpec, MetricTarget, MetricTargetType
from gpuq.core.nodes import GPU, GPU_MILLI
from gpuq.core.quantity import QuantityError

SERVING_KINDS = frozenset(
    {
        ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
        ("keda.sh/v1alpha1", "ScaledObject"),
        ("serving.kserve.io/v1beta1", "InferenceService"),
        ("ray.io/v1", "RayService"),
        ("policy/v1", "PodDisruptionBudget"),
    }
)
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
ISVC_LABEL = "serving.kserve.io/inferenceservice"
AUTOSCALER_CLASS = "serving.kserve.io/autoscalerClass"
UNBOUNDED_REPLICAS = 1000
"""KServe's ``maxReplicas: 0`` (no upper bound) as gpuq bounds it."""

Autoscaler = HPASpec | ScaledObjectSpec


@dataclass(frozen=True)
class ObjectMeta:
    """What the loader's generic metadata checks read (names, label syntax)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ServingObject:
    """A serving manifest as written: the loader keeps it; :func:`build_services` reads it.

    One subclass per kind, named as the kind, so the loader's duplicate check works per kind.
    """

    api_version: str
    kind: str
    name: str
    namespace: str
    data: Mapping[str, Any] = field(repr=False)

    @property
    def metadata(self) -> ObjectMeta:
        meta = self.data.get("metadata") or {}
        labels, annotations = meta.get("labels"), meta.get("annotations")
        return ObjectMeta(
            self.name,
            labels if isinstance(labels, dict) else {},
            annotations if isinstance(annotations, dict) else {},
        )


class Deployment(ServingObject): ...


class StatefulSet(ServingObject): ...


class HorizontalPodAutoscaler(ServingObject): ...


class ScaledObject(ServingObject): ...


class InferenceService(ServingObject): ...


class RayService(ServingObject): ...


class PodDisruptionBudget(ServingObject): ...


_OBJECT_TYPES: dict[str, type[ServingObject]] = {
    t.__name__: t
    for t in (Deployment, StatefulSet, HorizontalPodAutoscaler, ScaledObject, InferenceService, RayService)
} | {"PodDisruptionBudget": PodDisruptionBudget}


@dataclass(frozen=True)
class Disruption:
    """A PodDisruptionBudget: ``minAvailable`` or ``maxUnavailable``, each a count or ``"N%"``."""

    name: str
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    always_allow_unhealthy: bool = False  # unhealthyPodEvictionPolicy: AlwaysAllow

    def desired_healthy(self, expected: int) -> int:
        """The disruption controller's ``desiredHealthy`` for ``expected`` pods (percents round up)."""
        if self.min_available is not None:
            return _scaled(self.min_available, expected)
        assert self.max_unavailable is not None
        return max(0, expected - _scaled(self.max_unavailable, expected))


def _scaled(value: int | str, total: int) -> int:
    if isinstance(value, int):
        return value
    return math.ceil(int(value[:-1]) * total / 100)


@dataclass(frozen=True)
class ServiceSpec:
    """One autoscaled (or fixed) service; ``pod_set`` is one replica (``count`` pods per replica).

    ``replicas`` is the count at the start (``spec.replicas``, KServe's ``minReplicas``, Ray's
    ``initial_replicas``); ``autoscaler`` is None for a fixed count. ``traffic_share`` is the
    fraction of the service's requests this revision receives (a KServe canary split).
    """

    kind: str
    namespace: str
    name: str
    queue_name: str
    pod_set: core.PodSet
    replicas: int
    min_replicas: int
    max_replicas: int
    labels: Mapping[str, str] = field(default_factory=dict)
    priority_class: str = ""
    priority_source: str = ""
    autoscaler: Autoscaler | None = None
    autoscaler_ref: str = ""
    traffic_share: float = 1.0
    traffic_of: str = ""  # the service whose traffic this revision shares ("" : its own)
    disruption: Disruption | None = None
    model_uri: str = ""
    source: str = ""  # path:line of the object
    trigger_queries: Mapping[str, str] = field(default_factory=dict)  # KEDA trigger -> metadata.query
    pending: str = ""
    """Why no replica of this service can be admitted ("" : it can): its object has a field gpuq
    cannot derive a replica shape from. Such a service has no replicas (0 at start, 0 at most)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def traffic_key(self) -> str:
        return f"{self.namespace}/{self.traffic_of or self.name}"


def is_serving_kind(api_version: str, kind: str) -> bool:
    return (api_version, kind) in SERVING_KINDS


def read_document(
    path: str,
    line: int,
    data: Mapping[str, Any],
    lines: Mapping[FieldPath, int],
    diagnostics: list[Diagnostic],
) -> Manifest | None:
    """The loader's step 3 for a serving kind: keep the object, checked for a name."""
    kind = str(data["kind"])
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    namespace = (
        str((metadata or {}).get("namespace") or "default") if isinstance(metadata, dict) else "default"
    )
    where = Manifest(path, line, kind, str(name or ""), namespace, None, lines)
    if not isinstance(name, str) or not name:
        diagnostics.append(where.diagnostic(("metadata", "name"), "is required"))
        return None
    obj = _OBJECT_TYPES[kind](str(data["apiVersion"]), kind, name, namespace, data)
    return replace(where, model=obj)


def validate_services(manifests: Sequence[Manifest]) -> list[Diagnostic]:
    """Every problem :func:`build_services` finds (the loader's whole-configuration check)."""
    return build_services(manifests)[1]


def _field_path(text: str) -> FieldPath:
    parts: list[str | int] = []
    for chunk in re.split(r"\.(?![^\[]*\])", text):
        for piece in re.findall(r"[^\[\]]+|\[[^\]]*\]", chunk):
            inner = piece[1:-1] if piece.startswith("[") else piece
            parts.append(int(inner) if inner.isdigit() else inner)
    return tuple(parts)


def _error(manifest: Manifest, err: ServingError, severity: str = "error") -> Diagnostic:
    parts = _field_path(err.field)
    return Diagnostic(
        manifest.path, manifest.line_of(parts), manifest.kind, manifest.name, err.field, err.message,
        "warning" if severity == "warning" else "error",
    )  # fmt: skip


def build_services(manifests: Sequence[Manifest]) -> tuple[list[ServiceSpec], list[Diagnostic]]:
    """The services of a configuration (steps 1-3 of the module docstring) and what was wrong."""
    serving = [m for m in manifests if isinstance(m.model, ServingObject)]
    diagnostics: list[Diagnostic] = []
    services: dict[str, list[ServiceSpec]] = {}
    workloads: dict[tuple[str, str, str], Manifest] = {}
    for manifest in serving:
        builder = _WORKLOAD_BUILDERS.get(manifest.kind)
        if builder is None:
            continue
        try:
            built = builder(manifest)
        except ServingError as err:
            diagnostics.append(replace(_error(manifest, err), stays_pending=True))
            built = [_pending_service(manifest, err)]
        key = f"{manifest.namespace}/{manifest.name}"
        if any(s.key in {b.key for b in built} for group in services.values() for s in group):
            diagnostics.append(manifest.diagnostic(("metadata", "name"), f"service {key} is defined twice"))
            continue
        services[key] = built
        workloads[(manifest.namespace, manifest.kind, manifest.name)] = manifest
    _attach_autoscalers(serving, services, workloads, diagnostics)
    _attach_disruption_budgets(serving, services, diagnostics)
    out = [s for group in services.values() for s in group]
    for service in out:
        owner = _owner(serving, service)
        if not service.queue_name and owner is not None and not service.pending:
            message = f"no {QUEUE_LABEL} label: Kueue does not manage its pods and gpuq never admits them"
            diagnostics.append(owner.diagnostic(("metadata", "labels"), message, "warning"))
    return sorted(out, key=lambda s: s.key), diagnostics


def _pending_service(manifest: Manifest, err: ServingError) -> ServiceSpec:
    """The service of an object gpuq cannot derive replicas from: no replicas, the reason kept.

    Like a workload Kueue never admits, it loads (``gpuq validate`` alone reports it as an error),
    so one wrong InferenceService or RayService does not stop the rest of a configuration."""
    metadata = manifest.model.data.get("metadata") or {}
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    queue = str(labels.get(QUEUE_LABEL) or "") if isinstance(labels, dict) else ""
    return ServiceSpec(
        manifest.kind, manifest.namespace, manifest.name, queue, core.PodSet("main", 0, {}), 0, 0, 0,
        source=f"{manifest.path}:{manifest.line}", pending=f"{err.field}: {err.message}",
    )  # fmt: skip


def _owner(serving: Sequence[Manifest], service: ServiceSpec) -> Manifest | None:
    return next((m for m in serving if service.source == f"{m.path}:{m.line}"), None)


# --- step 1: workloads -------------------------------------------------------------------------


def _labels(value: object, field_name: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in mapping(value, field_name, required=False).items()}


def replica_pod_set(template: Mapping[str, Any], field_name: str, count: int = 1) -> core.PodSet:
    """A replica's pods as a core PodSet, through the same conversion Workloads use."""
    spec = mapping(template.get("spec"), f"{field_name}.spec")
    for path, message in quantity_problems(spec):
        raise ServingError(f"{field_name}.{format_field_path(('spec', *path))}", message)
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ServingError(f"{field_name}.spec.containers", "expected a non-empty list of containers")
    try:
        pod_set = kueue.PodSet.model_validate({"name": "main", "count": count, "template": dict(template)})
        return convert.pod_set(pod_set)
    except (ValidationError, QuantityError) as err:
        raise ServingError(f"{field_name}.spec", f"not a valid pod template: {err}".splitlines()[0]) from None


def _queue_and_priority(
    metadata: Mapping[str, Any], template: Mapping[str, Any]
) -> tuple[str, str, str, dict[str, str]]:
    labels = _labels(metadata.get("labels"), "metadata.labels")
    tmeta = mapping(template.get("metadata"), "spec.template.metadata", required=False)
    tlabels = _labels(tmeta.get("labels"), "spec.template.metadata.labels")
    queue = labels.get(QUEUE_LABEL) or tlabels.get(QUEUE_LABEL) or ""
    wpc = labels.get(PRIORITY_CLASS_LABEL) or tlabels.get(PRIORITY_CLASS_LABEL)
    if wpc:
        return queue, wpc, kueue.WPC_SOURCE, tlabels
    pod_class = str((template.get("spec") or {}).get("priorityClassName") or "")
    return queue, pod_class, kueue.POD_PC_SOURCE if pod_class else "", tlabels


def _apps_workload(manifest: Manifest) -> list[ServiceSpec]:
    """Deployment / StatefulSet: ``spec.replicas`` (default 1) pods of ``spec.template``."""
    data = manifest.model.data
    spec = mapping(data.get("spec"), "spec")
    replicas = integer(spec, "replicas", "spec.replicas", 1)
    assert replicas is not None
    template = mapping(spec.get("template"), "spec.template")
    queue, priority, source, labels = _queue_and_priority(data.get("metadata") or {}, template)
    selector = mapping(spec.get("selector"), "spec.selector", required=False)
    wanted = _labels(selector.get("matchLabels"), "spec.selector.matchLabels")
    if any(labels.get(k) != v for k, v in wanted.items()):
        raise ServingError("spec.selector", "selector does not match template labels")
    pod_set = replica_pod_set(template, "spec.template")
    return [
        ServiceSpec(
            manifest.kind, manifest.namespace, manifest.name, queue, pod_set, replicas, replicas, replicas,
            labels, priority, source, source=f"{manifest.path}:{manifest.line}",
        )
    ]  # fmt: skip


def pod_workloads(manifest: Manifest) -> list[dict[str, Any]]:
    """The Workload manifests Kueue's deployment / statefulset integrations make of the pods of this
    Deployment or StatefulSet (:func:`gpuq.api.sources_pods.serving_workloads`), from the service read
    here; [] for other kinds, without a queue, or when the object has errors (:func:`build_services`
    reports those)."""
    if not isinstance(manifest.model, Deployment | StatefulSet):
        return []
    try:
        (service,) = _apps_workload(manifest)
        template = manifest.model.data["spec"]["template"]
        return sources_pods.serving_workloads(
            manifest.kind, manifest.model.data, service.queue_name, service.replicas, template
        )
    except (ServingError, SourceError):
        return []


def _inference_service(manifest: Manifest) -> list[ServiceSpec]:
    """KServe v1beta1: the predictor's pod (model or containers), its autoscaler, a canary split."""
    data = manifest.model.data
    metadata = data.get("metadata") or {}
    spec = mapping(data.get("spec"), "spec")
    predictor = mapping(spec.get("predictor"), "spec.predictor")
    template = _predictor_template(
        predictor, manifest.name, _labels(metadata.get("labels"), "metadata.labels")
    )
    queue, priority, source, labels = _queue_and_priority(metadata, template)
    pod_set = _predictor_pod_set(template, predictor)
    low = integer(predictor, "minReplicas", "spec.predictor.minReplicas", 1)
    high = integer(predictor, "maxReplicas", "spec.predictor.maxReplicas", 0)
    assert low is not None and high is not None
    high = high or max(low, UNBOUNDED_REPLICAS)
    if low > high:
        raise ServingError("spec.predictor.minReplicas", f"minReplicas {low} is above maxReplicas {high}")
    autoscaler = _kserve_autoscaler(predictor, metadata, low, high)
    canary = integer(predictor, "canaryTrafficPercent", "spec.predictor.canaryTrafficPercent", None)
    if canary is not None and canary > 100:
        raise ServingError("spec.predictor.canaryTrafficPercent", f"must be at most 100, got {canary}")
    framework = next((key for key in KSERVE_FRAMEWORKS if predictor.get(key) is not None), "model")
    model = mapping(predictor.get(framework), f"spec.predictor.{framework}", required=False)
    start = max(low, 1 if low else 0)
    base = ServiceSpec(
        manifest.kind, manifest.namespace, manifest.name, queue, pod_set, start, low, high,
        labels, priority, source, autoscaler, f"{manifest.kind}/{manifest.name}" if autoscaler else "",
        model_uri=str(model.get("storageUri") or ""), source=f"{manifest.path}:{manifest.line}",
    )  # fmt: skip
    if canary is None or canary in (0, 100):
        return [base]
    stable = replace(base, traffic_share=(100 - canary) / 100)
    latest = replace(
        base, name=f"{manifest.name}-canary", traffic_share=canary / 100, traffic_of=manifest.name
    )
    return [stable, latest]


def _predictor_pod_set(template: Mapping[str, Any], predictor: Mapping[str, Any]) -> core.PodSet:
    """The predictor's pod; a problem in the pod gpuq built names the predictor's own field
    (``spec.predictor.sklearn.resources...``, ``spec.predictor.containers[0]...``)."""
    try:
        return replica_pod_set(template, "spec.predictor")
    except ServingError as err:
        framework = next((key for key in KSERVE_FRAMEWORKS if predictor.get(key) is not None), None)
        built = "spec.predictor.spec.containers[0]"
        if framework is not None and err.field.startswith(built):
            raise ServingError(f"spec.predictor.{framework}{err.field[len(built) :]}", err.message) from None
        if err.field.startswith("spec.predictor.spec."):
            raise ServingError(
                f"spec.predictor.{err.field[len('spec.predictor.spec.') :]}", err.message
            ) from None
        raise


_POD_SPEC_FIELDS = ("nodeSelector", "tolerations", "affinity", "priorityClassName", "runtimeClassName")


KSERVE_FRAMEWORKS = (
    "model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "huggingface",
    "pmml", "lightgbm", "paddle",
)  # fmt: skip
"""KServe v1beta1 predictor implementations (``pkg/apis/serving/v1beta1/predictor_*.go``): each embeds
a container spec that KServe turns into the ``kserve-container`` with that spec's resources."""


def _predictor_template(predictor: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {k: predictor[k] for k in _POD_SPEC_FIELDS if k in predictor}
    framework = next((key for key in KSERVE_FRAMEWORKS if predictor.get(key) is not None), None)
    if framework is not None:
        model = mapping(predictor[framework], f"spec.predictor.{framework}")
        at = f"spec.predictor.{framework}.resources"
        resources = _kserve_default_resources(mapping(model.get("resources"), at, required=False), at)
        pod_spec["containers"] = [{"name": "kserve-container", "resources": resources}]
    elif isinstance(predictor.get("containers"), list) and predictor["containers"]:
        first, *rest = predictor["containers"]
        at = "spec.predictor.containers[0]"
        container = dict(mapping(first, at))
        resources = mapping(container.get("resources"), f"{at}.resources", required=False)
        container["resources"] = _kserve_default_resources(resources, f"{at}.resources")
        pod_spec["containers"] = [container, *rest]
    elif predictor.get("containers") is not None:
        pod_spec["containers"] = predictor["containers"]
    else:
        raise ServingError(
            "spec.predictor", f"needs a model ({', '.join(KSERVE_FRAMEWORKS[1:])} or model) or containers"
        )
    return {"metadata": {"labels": {**labels, ISVC_LABEL: name}}, "spec": pod_spec}


KSERVE_DEFAULT_RESOURCES = {"cpu": "1", "memory": "2Gi"}
"""The ``inferenceService.resource`` defaults of KServe's ``inferenceservice-config`` ConfigMap
(``config/configmap/inferenceservice.yaml``: cpuRequest/cpuLimit "1", memoryRequest/memoryLimit
"2Gi"); the defaulting webhook (``pkg/apis/serving/v1beta1/inference_service_defaults.go``,
``setResourceRequirementDefaults``) adds each to requests and to limits where that key is unset."""


def _kserve_default_resources(resources: Mapping[str, Any], at: str) -> dict[str, Any]:
    """``resources`` with KServe's defaults where a request or limit of cpu / memory is unset."""
    out: dict[str, Any] = dict(resources)
    for section in ("requests", "limits"):
        given = mapping(resources.get(section), f"{at}.{section}", required=False)
        out[section] = {**KSERVE_DEFAULT_RESOURCES, **given}
    return out


_KSERVE_METRICS = ("concurrency", "rps", "cpu", "memory")


def _kserve_autoscaler(
    predictor: Mapping[str, Any], metadata: Mapping[str, Any], low: int, high: int
) -> Autoscaler | None:
    """KServe: ``none`` or min == max is fixed; cpu / memory are HPA Utilization targets; concurrency
    and rps are request targets (Knative KPA: 60 s stable window, to zero 30 s after it)."""
    annotations = mapping(metadata.get("annotations"), "metadata.annotations", required=False)
    klass = str(annotations.get(AUTOSCALER_CLASS) or "kpa")
    if klass not in ("kpa", "hpa", "keda", "none", "external"):
        raise ServingError(f"metadata.annotations[{AUTOSCALER_CLASS}]", f"unknown autoscaler class {klass!r}")
    if klass in ("none", "external") or low == high:
        return None
    metric = str(predictor.get("scaleMetric") or ("cpu" if klass == "hpa" else "concurrency"))
    if metric not in _KSERVE_METRICS:
        raise ServingError(
            "spec.predictor.scaleMetric", f"expected one of {', '.join(_KSERVE_METRICS)}, got {metric!r}"
        )
    default_target = 80 if metric in ("cpu", "memory") else 100
    target = integer(predictor, "scaleTarget", "spec.predictor.scaleTarget", default_target, minimum=1)
    assert target is not None
    if metric in ("cpu", "memory"):
        if low == 0:
            raise ServingError("spec.predictor.minReplicas", f"a {metric} target cannot scale to zero")
        spec = MetricSpec(
            MetricSourceType.RESOURCE, metric, MetricTarget(MetricTargetType.UTILIZATION, target)
        )
        return HPASpec(high, (spec,), low)
    return request_autoscaler(metric, target * 1000, low, high, down_window_s=60, to_zero_delay_s=90)


def _ray_service(manifest: Manifest) -> list[ServiceSpec]:
    """RayService: one service per Serve deployment of ``serveConfigV2``; a replica is one worker pod
    of the first worker group that requests GPUs (else the first group)."""
    data = manifest.model.data
    metadata = data.get("metadata") or {}
    spec = mapping(data.get("spec"), "spec")
    cluster = mapping(spec.get("rayClusterConfig"), "spec.rayClusterConfig")
    groups = cluster.get("workerGroupSpecs")
    if not isinstance(groups, list) or not groups:
        raise ServingError(
            "spec.rayClusterConfig.workerGroupSpecs", "needs a worker group to hold Serve replicas"
        )
    index = next((i for i, g in enumerate(groups) if "gpu" in str((g or {}).get("template", ""))), 0)
    at = f"spec.rayClusterConfig.workerGroupSpecs[{index}].template"
    template = mapping(mapping(groups[index], at[:-9]).get("template"), at)
    queue, priority, source, labels = _queue_and_priority(metadata, template)
    pod_set = replica_pod_set(template, at)
    try:
        config = yaml.safe_load(str(spec.get("serveConfigV2") or ""))
    except yaml.YAMLError as err:
        raise ServingError("spec.serveConfigV2", f"malformed YAML: {err}") from None
    apps = mapping(config, "spec.serveConfigV2").get("applications")
    if not isinstance(apps, list) or not apps:
        raise ServingError("spec.serveConfigV2.applications", "expected a non-empty list")
    out = []
    for a, app in enumerate(apps):
        app_at = f"spec.serveConfigV2.applications[{a}]"
        app_map = mapping(app, app_at)
        if ray_llm.is_llm_application(app_map):
            for llm in ray_llm.llm_deployments(app_map, app_at):
                low, high, start, autoscaler = _llm_replicas(llm)
                out.append(
                    ServiceSpec(
                        manifest.kind, manifest.namespace,
                        _serve_name(manifest.name, app_map.get("name", a), llm.name), queue,
                        _llm_pod_set(llm, template, at), start, low, high, labels, priority, source,
                        autoscaler, f"{manifest.kind}/{manifest.name}" if autoscaler else "",
                        model_uri=llm.model_source, source=f"{manifest.path}:{manifest.line}",
                    )
                )  # fmt: skip
            continue
        for d, deployment in enumerate(app_map.get("deployments") or []):
            d_at = f"{app_at}.deployments[{d}]"
            low, high, start, autoscaler = _serve_replicas(mapping(deployment, d_at), d_at)
            name = _serve_name(manifest.name, app_map.get("name", a), deployment.get("name", d))
            out.append(
                ServiceSpec(
                    manifest.kind, manifest.namespace, name, queue, pod_set, start, low, high, labels,
                    priority, source, autoscaler, f"{manifest.kind}/{manifest.name}" if autoscaler else "",
                    source=f"{manifest.path}:{manifest.line}",
                )
            )  # fmt: skip
    if not out:
        raise ServingError("spec.serveConfigV2.applications", "no Serve deployment declared")
    return out


def _serve_name(service: str, app: object, deployment: object) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", f"{service}-{app}-{deployment}".lower()).strip("-")


def _llm_replicas(llm: ray_llm.LLMDeployment) -> tuple[int, int, int, Autoscaler | None]:
    if llm.fixed_replicas is not None:
        return llm.fixed_replicas, llm.fixed_replicas, llm.fixed_replicas, None
    return _serve_replicas(llm.options, f"{llm.at}.deployment_config")


_GPU_MODEL_LABELS = (PRODUCT_LABEL, "cloud.google.com/gke-accelerator")


def _llm_pod_set(llm: ray_llm.LLMDeployment, template: Mapping[str, Any], at: str) -> core.PodSet:
    """A Serve LLM replica: the worker pods its placement group needs (its GPUs over a worker pod's,
    rounded up: PACK may span pods), on the GPU models ``accelerator_type`` allows."""
    shaped = _with_gpu_models(template, llm.gpu_models)
    per_pod = replica_pod_set(shaped, at)
    gpus = per_pod.requests.get(GPU, 0) + per_pod.requests.get(GPU_MILLI, 0) / 1000
    if llm.gpus > 0 and gpus <= 0:
        raise ServingError(
            f"{at}.spec.containers",
            f"a replica of {llm.model_id} needs {llm.gpus:g} GPUs; the worker pod has none",
        )
    count = max(1, math.ceil(llm.gpus / gpus - 1e-9)) if llm.gpus > 0 else 1
    return replace(per_pod, count=count)


def _with_gpu_models(template: Mapping[str, Any], models: tuple[str, ...]) -> dict[str, Any]:
    """``template`` whose pods also require one of ``models`` (a required node affinity on
    ``nvidia.com/gpu.product``), unless its nodeSelector already names a GPU model."""
    spec = dict(template.get("spec") or {})
    given = spec.get("nodeSelector")
    selector: Mapping[str, Any] = given if isinstance(given, dict) else {}
    if not models or any(label in selector for label in _GPU_MODEL_LABELS):
        return dict(template)
    expression = {"key": PRODUCT_LABEL, "operator": "In", "values": ray_llm.gpu_products(models)}
    affinity = dict(spec.get("affinity") or {})
    node = dict(affinity.get("nodeAffinity") or {})
    required = dict(node.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or []] or [{}]
    for term in terms:
        term["matchExpressions"] = [*(term.get("matchExpressions") or []), expression]
    required["nodeSelectorTerms"] = terms
    node["requiredDuringSchedulingIgnoredDuringExecution"] = required
    affinity["nodeAffinity"] = node
    spec["affinity"] = affinity
    return {**template, "spec": spec}


def _serve_replicas(deployment: Mapping[str, Any], at: str) -> tuple[int, int, int, Autoscaler | None]:
    """Ray Serve: ``num_replicas`` fixed, or ``autoscaling_config`` (defaults of Ray 2.x: min 1, max 1,
    target_ongoing_requests 2, upscale_delay_s 30, downscale_delay_s 600)."""
    config = deployment.get("autoscaling_config")
    if config is None:
        fixed = integer(deployment, "num_replicas", f"{at}.num_replicas", 1)
        assert fixed is not None
        return fixed, fixed, fixed, None
    cfg = mapping(config, f"{at}.autoscaling_config")
    c_at = f"{at}.autoscaling_config"
    low = integer(cfg, "min_replicas", f"{c_at}.min_replicas", 1)
    high = integer(cfg, "max_replicas", f"{c_at}.max_replicas", 1, minimum=1)
    assert low is not None and high is not None
    if low > high:
        raise ServingError(f"{c_at}.min_replicas", f"min_replicas {low} is above max_replicas {high}")
    start = integer(cfg, "initial_replicas", f"{c_at}.initial_replicas", low)
    target = cfg.get("target_ongoing_requests", 2)
    if isinstance(target, bool) or not isinstance(target, int | float) or target <= 0:
        raise ServingError(f"{c_at}.target_ongoing_requests", f"expected a positive number, got {target!r}")
    up = _seconds(cfg, "upscale_delay_s", c_at, 30)
    down = _seconds(cfg, "downscale_delay_s", c_at, 600)
    to_zero = _seconds(cfg, "downscale_to_zero_delay_s", c_at, down)
    assert start is not None
    spec = request_autoscaler(
        "ongoing_requests", round(target * 1000), low, high, up_window_s=up, down_window_s=min(down, 3600),
        to_zero_delay_s=to_zero,
    )  # fmt: skip
    return low, high, min(max(start, low), high), spec


def _seconds(cfg: Mapping[str, Any], key: str, at: str, default: int) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ServingError(f"{at}.{key}", f"expected a non-negative number of seconds, got {value!r}")
    return round(value)


_WORKLOAD_BUILDERS: dict[str, Callable[[Manifest], list[ServiceSpec]]] = {
    "Deployment": _apps_workload,
    "StatefulSet": _apps_workload,
    "InferenceService": _inference_service,
    "RayService": _ray_service,
}


# --- step 2: autoscalers -----------------------------------------------------------------------


def _attach_autoscalers(
    serving: Sequence[Manifest],
    services: dict[str, list[ServiceSpec]],
    workloads: Mapping[tuple[str, str, str], Manifest],
    diagnostics: list[Diagnostic],
) -> None:
    for manifest in serving:
        if manifest.kind not in ("HorizontalPodAutoscaler", "ScaledObject"):
            continue
        try:
            key, autoscaler, low, high = _autoscaler(manifest, workloads)
        except ServingError as err:
            diagnostics.append(_error(manifest, err))
            continue
        (service,) = services[key]
        if service.pending:
            continue  # no replicas to scale: the target's own diagnostic says why
        if service.autoscaler is not None:
            message = f"{service.kind} {service.name} is already scaled by {service.autoscaler_ref}"
            diagnostics.append(manifest.diagnostic(("spec", "scaleTargetRef", "name"), message))
            continue
        ref = f"{manifest.kind}/{manifest.name}"
        start = service.replicas if low <= service.replicas <= high else min(max(service.replicas, low), high)
        queries = _trigger_queries(manifest) if manifest.kind == "ScaledObject" else {}
        services[key] = [
            replace(
                service, autoscaler=autoscaler, autoscaler_ref=ref, min_replicas=low, max_replicas=high,
                replicas=start, trigger_queries=queries,
            )
        ]  # fmt: skip


def _trigger_queries(manifest: Manifest) -> dict[str, str]:
    """Each trigger's ``metadata.query`` by the name :func:`scaled_object_spec` gives it."""
    triggers = (manifest.model.data.get("spec") or {}).get("triggers") or []
    out = {}
    for index, item in enumerate(triggers):
        name = str(item.get("name") or f"s{index}-{item.get('type')}")
        out[name] = str((item.get("metadata") or {}).get("query") or "")
    return out


def _autoscaler(
    manifest: Manifest, workloads: Mapping[tuple[str, str, str], Manifest]
) -> tuple[str, Autoscaler, int, int]:
    data = manifest.model.data
    spec = mapping(data.get("spec"), "spec")
    ref = mapping(spec.get("scaleTargetRef"), "spec.scaleTargetRef")
    kind = str(ref.get("kind") or ("Deployment" if manifest.kind == "ScaledObject" else ""))
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        raise ServingError("spec.scaleTargetRef.name", "is required")
    if kind not in ("Deployment", "StatefulSet"):
        raise ServingError(
            "spec.scaleTargetRef.kind", f"gpuq scales a Deployment or StatefulSet, not {kind!r}"
        )
    if (manifest.namespace, kind, name) not in workloads:
        raise ServingError(
            "spec.scaleTargetRef.name", f"{kind} {name!r} not found in namespace {manifest.namespace}"
        )
    key = f"{manifest.namespace}/{name}"
    if manifest.kind == "HorizontalPodAutoscaler":
        hpa = hpa_spec(spec)
        return key, hpa, hpa.min_replicas, hpa.max_replicas
    keda = scaled_object_spec(spec)
    return key, keda, keda.min_replica_count, keda.max_replica_count


# --- step 3: disruption budgets ----------------------------------------------------------------


def _budget_value(spec: Mapping[str, Any], key: str) -> int | str | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and re.fullmatch(r"\d{1,3}%", value) and int(value[:-1]) <= 100:
        return value
    raise ServingError(
        f"spec.{key}", f"expected a non-negative integer or a percentage 0%-100%, got {value!r}"
    )


def disruption(manifest: Manifest) -> tuple[Disruption, dict[str, str]]:
    """A PodDisruptionBudget and the labels it selects (``matchLabels`` only)."""
    spec = mapping(manifest.model.data.get("spec"), "spec")
    low, high = _budget_value(spec, "minAvailable"), _budget_value(spec, "maxUnavailable")
    if (low is None) == (high is None):
        raise ServingError("spec", "give exactly one of minAvailable or maxUnavailable")
    selector = mapping(spec.get("selector"), "spec.selector")
    if selector.get("matchExpressions"):
        raise ServingError("spec.selector.matchExpressions", "not modelled; use matchLabels")
    labels = _labels(selector.get("matchLabels"), "spec.selector.matchLabels")
    if not labels:
        raise ServingError(
            "spec.selector.matchLabels", "is required (an empty selector would match every pod)"
        )
    policy = str(spec.get("unhealthyPodEvictionPolicy") or "IfHealthyBudget")
    if policy not in ("IfHealthyBudget", "AlwaysAllow"):
        raise ServingError(
            "spec.unhealthyPodEvictionPolicy", f"expected IfHealthyBudget or AlwaysAllow, got {policy!r}"
        )
    return Disruption(manifest.name, low, high, policy == "AlwaysAllow"), labels


def _attach_disruption_budgets(
    serving: Sequence[Manifest], services: dict[str, list[ServiceSpec]], diagnostics: list[Diagnostic]
) -> None:
    for manifest in serving:
        if manifest.kind != "PodDisruptionBudget":
            continue
        try:
            budget, labels = disruption(manifest)
        except ServingError as err:
            diagnostics.append(_error(manifest, err))
            continue
        matched = 0
        for key, group in services.items():
            for i, service in enumerate(group):
                selected = all(service.labels.get(k) == v for k, v in labels.items())
                if service.namespace != manifest.namespace or not selected:
                    continue
                matched += 1
                if service.disruption is not None:
                    message = (
                        f"{service.key} is already selected by PodDisruptionBudget {service.disruption.name}"
                    )
                    diagnostics.append(manifest.diagnostic(("spec", "selector"), message))
                    continue
                group[i] = replace(service, disruption=budget)
                services[key] = group
        if not matched:
            diagnostics.append(
                manifest.diagnostic(("spec", "selector"), "selects no service's pods", "warning")
            )
