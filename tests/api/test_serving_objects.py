"""Serving objects read as their projects define them: table tests, good and bad inputs."""

from __future__ import annotations

import textwrap

import pytest

from gpuq.api.loader import load_texts
from gpuq.api.serving import KSERVE_FRAMEWORKS, ServiceSpec, build_services
from gpuq.core.autoscaling.keda import ScaledObjectSpec
from gpuq.core.autoscaling.spec import HPASpec, MetricSourceType, MetricTargetType

QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: inference}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: gpu
      resources:
      - {name: cpu, nominalQuota: 100}
      - {name: memory, nominalQuota: 1000Gi}
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: inference, namespace: serve}
spec: {clusterQueue: inference}
"""


def deployment(name: str = "chat", replicas: object = 2, gpu: str = "1", selector: str = "chat") -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: serve, labels: {{kueue.x-k8s.io/queue-name: inference}}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {selector}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - name: server
        resources: {{requests: {{cpu: "4", memory: 16Gi, nvidia.com/gpu: "{gpu}"}}}}
"""


def hpa(target: str = "chat", low: int = 1, high: int = 4, metric: str = "") -> str:
    metric = (
        metric
        or """
  - type: Pods
    pods: {metric: {name: "vllm:num_requests_running"}, target: {type: AverageValue, averageValue: "8"}}"""
    )
    return f"""
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: {target}-hpa, namespace: serve}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: {target}}}
  minReplicas: {low}
  maxReplicas: {high}
  metrics:{metric}
"""


SCALED_OBJECT = """
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: chat-so, namespace: serve}
spec:
  scaleTargetRef: {name: chat}
  minReplicaCount: 0
  maxReplicaCount: 5
  cooldownPeriod: 120
  triggers:
  - type: prometheus
    metadata: {query: "sum(vllm:num_requests_waiting)", threshold: "10", activationThreshold: "2"}
"""

ISVC = """
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata: {name: llm, namespace: serve, labels: {kueue.x-k8s.io/queue-name: inference}}
spec:
  predictor:
    minReplicas: 1
    maxReplicas: 6
    scaleMetric: concurrency
    scaleTarget: 10
    canaryTrafficPercent: 20
    model:
      modelFormat: {name: huggingface}
      storageUri: hf://meta-llama/Llama-3.1-8B-Instruct
      resources: {requests: {cpu: "8", memory: 64Gi, nvidia.com/gpu: "1"}}
"""

RAY_SERVICE = """
apiVersion: ray.io/v1
kind: RayService
metadata: {name: rs, namespace: serve, labels: {kueue.x-k8s.io/queue-name: inference}}
spec:
  serveConfigV2: |
    applications:
    - name: llm
      import_path: app:build
      deployments:
      - name: VLLM
        autoscaling_config: {min_replicas: 0, max_replicas: 3, target_ongoing_requests: 4}
  rayClusterConfig:
    headGroupSpec:
      template: {spec: {containers: [{name: head, resources: {requests: {cpu: "2"}}}]}}
    workerGroupSpecs:
    - groupName: gpu
      replicas: 1
      template:
        spec:
          containers:
          - name: worker
            resources: {requests: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "1"}}
"""

PDB = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: chat, namespace: serve}
spec: {minAvailable: "50%", selector: {matchLabels: {app: chat}}}
"""


def services(*docs: str, strict: bool = False) -> tuple[list[ServiceSpec], list[str]]:
    text = "\n---\n".join(textwrap.dedent(d).strip() for d in (QUEUES, *docs))
    result = load_texts([("s.yaml", text)], strict=strict)
    errors = [f"{d.kind}/{d.name}: {d.field}: {d.message}" for d in result.errors]
    return build_services(result.manifests)[0], errors


def test_a_deployment_with_an_hpa_becomes_one_autoscaled_service() -> None:
    found, errors = services(deployment(), hpa(), PDB)
    assert errors == []
    (chat,) = found
    assert (chat.key, chat.queue_name, chat.replicas, chat.min_replicas, chat.max_replicas) == (
        "serve/chat", "inference", 2, 1, 4,
    )  # fmt: skip
    assert chat.pod_set.requests == {"cpu": 4000, "memory": 16 * 2**30, "nvidia.com/gpu": 1}
    assert isinstance(chat.autoscaler, HPASpec)
    (metric,) = chat.autoscaler.metrics
    assert (metric.source, metric.name, metric.target.average_value_milli) == (
        MetricSourceType.PODS, "vllm:num_requests_running", 8000,
    )  # fmt: skip
    assert chat.autoscaler_ref == "HorizontalPodAutoscaler/chat-hpa"
    assert chat.disruption is not None and chat.disruption.desired_healthy(3) == 2  # 50 % of 3, rounded up


def test_a_scaled_object_keeps_keda_defaults_and_its_query() -> None:
    (chat,), errors = services(deployment(), SCALED_OBJECT)
    assert errors == []
    spec = chat.autoscaler
    assert isinstance(spec, ScaledObjectSpec)
    counts = (spec.min_replica_count, spec.max_replica_count, spec.polling_interval_s, spec.cooldown_period_s)
    assert counts == (0, 5, 30, 120)
    (trigger,) = spec.triggers
    assert (trigger.name, trigger.target_milli, trigger.activation_target_milli) == (
        "s0-prometheus",
        10_000,
        2000,
    )
    assert chat.trigger_queries == {"s0-prometheus": "sum(vllm:num_requests_waiting)"}


def test_an_inference_service_with_a_canary_is_two_revisions_sharing_traffic() -> None:
    (stable, canary), errors = services(ISVC)
    assert errors == []
    assert (stable.name, stable.traffic_share, canary.name, canary.traffic_share) == (
        "llm",
        0.8,
        "llm-canary",
        0.2,
    )
    assert canary.traffic_key == "serve/llm"
    assert isinstance(stable.autoscaler, HPASpec)
    (metric,) = stable.autoscaler.metrics
    assert (metric.name, metric.target.type, metric.target.average_value_milli) == (
        "concurrency", MetricTargetType.AVERAGE_VALUE, 10_000,
    )  # fmt: skip
    assert stable.model_uri == "hf://meta-llama/Llama-3.1-8B-Instruct"


def test_a_ray_service_is_one_service_per_serve_deployment() -> None:
    (serve,), errors = services(RAY_SERVICE)
    assert errors == []
    assert (serve.name, serve.min_replicas, serve.max_replicas, serve.replicas) == ("rs-llm-vllm", 0, 3, 0)
    assert isinstance(serve.autoscaler, ScaledObjectSpec)
    assert serve.autoscaler.triggers[0].target_milli == 4000
    assert serve.pod_set.requests["nvidia.com/gpu"] == 1


BAD = [
    pytest.param(
        [deployment(), hpa(target="missing")],
        "HorizontalPodAutoscaler/missing-hpa: spec.scaleTargetRef.name: "
        "Deployment 'missing' not found in namespace serve",
        id="an HPA targeting a missing Deployment",
    ),
    pytest.param(
        [deployment(), hpa(low=5, high=2)],
        "HorizontalPodAutoscaler/chat-hpa: spec.minReplicas: minReplicas 5 is above maxReplicas 2",
        id="min above max",
    ),
    pytest.param(
        [deployment(replicas=-1)],
        "Deployment/chat: spec.replicas: must be at least 0, got -1",
        id="negative replicas",
    ),
    pytest.param(
        [deployment(), hpa(metric="\n  - type: ContainerResource\n    containerResource: {name: cpu}")],
        "HorizontalPodAutoscaler/chat-hpa: spec.metrics[0].type: unknown metric type 'ContainerResource'; "
        "gpuq models Resource, Pods, Object, External",
        id="an unknown metric type",
    ),
    pytest.param(
        [
            deployment(),
            hpa(
                metric="\n  - type: Pods\n    pods: {metric: {name: x}, "
                "target: {type: Utilization, averageUtilization: 50}}"
            ),
        ],
        "HorizontalPodAutoscaler/chat-hpa: spec.metrics[0].pods.target.type: "
        "Utilization targets are only valid for Resource metrics",
        id="a utilization target on a Pods metric",
    ),
    pytest.param(
        [deployment(), hpa(), SCALED_OBJECT],
        "ScaledObject/chat-so: spec.scaleTargetRef.name: Deployment chat is already scaled by "
        "HorizontalPodAutoscaler/chat-hpa",
        id="two autoscalers on one Deployment",
    ),
    pytest.param(
        [deployment(selector="other")],
        "Deployment/chat: spec.selector: selector does not match template labels",
        id="a selector that misses the template",
    ),
    pytest.param(
        [deployment(gpu="lots")],
        "Deployment/chat: spec.template.spec.containers[0].resources.requests[nvidia.com/gpu]:",
        id="a bad quantity",
    ),
    pytest.param(
        [ISVC.replace("canaryTrafficPercent: 20", "canaryTrafficPercent: 120")],
        "InferenceService/llm: spec.predictor.canaryTrafficPercent: must be at most 100, got 120",
        id="a canary above 100 percent",
    ),
    pytest.param(
        [deployment(), SCALED_OBJECT.replace("type: prometheus", "type: carrier-pigeon")],
        "ScaledObject/chat-so: spec.triggers[0].type: scaler type 'carrier-pigeon' is not modelled",
        id="an unknown KEDA scaler",
    ),
    pytest.param(
        [deployment(), PDB.replace('minAvailable: "50%"', "minAvailable: 1, maxUnavailable: 1")],
        "PodDisruptionBudget/chat: spec: give exactly one of minAvailable or maxUnavailable",
        id="a PDB with both minAvailable and maxUnavailable",
    ),
    pytest.param(
        [RAY_SERVICE.replace("min_replicas: 0", "min_replicas: 5")],
        "RayService/rs: spec.serveConfigV2.applications[0].deployments[0].autoscaling_config.min_replicas: "
        "min_replicas 5 is above max_replicas 3",
        id="a Serve deployment with min above max",
    ),
]


@pytest.mark.parametrize(("docs", "expected"), BAD)
def test_bad_serving_objects_are_refused_naming_object_and_field(docs: list[str], expected: str) -> None:
    _, errors = services(*docs, strict=True)  # as gpuq validate reads them
    assert any(e.startswith(expected) for e in errors), errors


def test_errors_carry_the_file_and_line() -> None:
    text = "\n---\n".join(textwrap.dedent(d).strip() for d in (QUEUES, deployment(), hpa(target="nope")))
    result = load_texts([("conf.yaml", text)])
    (error,) = result.errors
    assert str(error).startswith("conf.yaml:")
    assert error.line > 1 and result.config is None


# --- KServe framework predictors (pkg/apis/serving/v1beta1/predictor_*.go) ---------------------


def isvc(framework: str, resources: str) -> str:
    return f"""
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: {framework}-iris
  namespace: serve
  labels: {{kueue.x-k8s.io/queue-name: inference}}
spec:
  predictor:
    minReplicas: 1
    maxReplicas: 1
    {framework}:
      storageUri: gs://kfserving-examples/models/{framework}/1.0/model
      resources: {resources}
"""


@pytest.mark.parametrize("framework", KSERVE_FRAMEWORKS)
def test_a_framework_predictor_takes_its_specs_resources(framework: str) -> None:
    resources = "{requests: {cpu: '2', memory: 8Gi, nvidia.com/gpu: '1'}, limits: {nvidia.com/gpu: '1'}}"
    (found,), errors = services(isvc(framework, resources))
    assert errors == []
    assert (found.pod_set.requests["nvidia.com/gpu"], found.pod_set.requests["cpu"]) == (1, 2000)
    assert found.model_uri == f"gs://kfserving-examples/models/{framework}/1.0/model"


def test_a_predictor_without_model_or_containers_names_the_field() -> None:
    bad = isvc("sklearn", "{}").replace("sklearn:", "notaframework:")
    _found, errors = services(bad, strict=True)
    assert any(
        e.startswith("InferenceService/notaframework-iris: spec.predictor: needs a model")
        or "spec.predictor: needs a model" in e
        for e in errors
    ), errors
