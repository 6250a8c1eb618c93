"""Ray Serve LLM applications, KServe's upstream samples, and serving objects gpuq cannot shape.

Upstream files are read unchanged from tests/data (see each folder's PROVENANCE.md)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuq.api.loader import load, load_texts
from gpuq.api.serving import ServiceSpec, build_services
from gpuq.api.serving_scenario import ServingSection
from gpuq.cli import app
from gpuq.core.autoscaling.spec import HPASpec
from gpuq.core.model import Requirement
from gpuq.sim.serving.fleet import ServingFleet
from gpuq.sim.serving.plan import serving_plan
from gpuq.sim.serving.report import serving_metrics
from gpuq.sim.simulator import SimSettings, Simulation

DATA = Path(__file__).parent.parent / "data"
GIB = 2**30


def _services(result_manifests: object) -> dict[str, ServiceSpec]:
    specs, _ = build_services(result_manifests)  # type: ignore[arg-type]
    return {s.name: s for s in specs}


def _shape(spec: ServiceSpec) -> tuple[int, dict[str, int], int, int, int]:
    return (
        spec.pod_set.count,
        dict(spec.pod_set.requests),
        spec.replicas,
        spec.min_replicas,
        spec.max_replicas,
    )


def _target_milli(spec: ServiceSpec) -> int | None:
    assert isinstance(spec.autoscaler, HPASpec)
    target = spec.autoscaler.metrics[0].target
    return target.average_value_milli


def test_kuberays_llm_sample_gives_one_model_on_a_four_gpu_worker_pod() -> None:
    """No tensor_parallel_size: one GPU per replica; the worker pod (4 GPUs) is a replica's pod."""
    result = load([str(DATA / "kuberay-0ca8718" / "ray-service.llm-serve.yaml")])
    found = _services(result.manifests)
    (name,) = found
    spec = found[name]
    assert name == "ray-serve-llm-llms-qwen2_5-7b-instruct".replace("_", "-")
    assert _shape(spec) == (1, {"cpu": 32000, "memory": 32 * GIB, "nvidia.com/gpu": 4}, 1, 1, 4)
    assert _target_milli(spec) == 64_000  # target_ongoing_requests: 64
    assert spec.model_uri == "Qwen/Qwen2.5-7B-Instruct" and spec.pending == ""
    # the sample's v1 Secret schedules nothing: listed as not scheduled, the file loads unchanged
    assert result.errors == ()
    assert result.ignored_summary == "not scheduled by gpuq, ignored: 1 Secret"


def _ray_service(serve_config: str, worker_gpus: int = 8, node_selector: str = "") -> str:
    config = textwrap.indent(serve_config, "    ")
    return f"""
apiVersion: ray.io/v1
kind: RayService
metadata: {{name: llm, namespace: s, labels: {{kueue.x-k8s.io/queue-name: q}}}}
spec:
  serveConfigV2: |
{config}
  rayClusterConfig:
    headGroupSpec:
      template: {{spec: {{containers: [{{name: head, resources: {{requests: {{cpu: "2"}}}}}}]}}}}
    workerGroupSpecs:
    - groupName: gpu
      template:
        spec:
          {node_selector}
          containers:
          - name: worker
            resources: {{requests: {{cpu: "16", memory: 64Gi, nvidia.com/gpu: "{worker_gpus}"}}}}
"""


H100 = Requirement("nvidia.com/gpu.product", "In", ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"))
A10G = Requirement("nvidia.com/gpu.product", "In", ("NVIDIA-A10G",))
A100 = Requirement(
    "nvidia.com/gpu.product", "In",
    ("NVIDIA-A100-80GB-PCIe", "NVIDIA-A100-PCIE-40GB", "NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"),
)  # fmt: skip


def test_rays_llm_config_example_gives_one_service_per_model_on_a10g() -> None:
    serve_config = (DATA / "ray-b2dfbca" / "llm_config_example.yaml").read_text()
    result = load_texts([("llm.yaml", _ray_service(serve_config, worker_gpus=1))])
    found = _services(result.manifests)
    assert sorted(found) == ["llm-llm-app-qwen-0-5b", "llm-llm-app-qwen-1-5b"]
    for spec in found.values():
        assert _shape(spec) == (1, {"cpu": 16000, "memory": 64 * GIB, "nvidia.com/gpu": 1}, 1, 1, 2)
        assert spec.pod_set.node_affinity == ((A10G,),)
        assert _target_milli(spec) == 1_000_000_000_000  # Ray Serve LLM's default target, 1e9


LLM_SHAPES = [
    pytest.param(
        "tensor_parallel_size: 8\n    pipeline_parallel_size: 2",
        "accelerator_type: H100",
        "",
        8,
        (2, 8, 1, 1, 1),
        ((H100,),),
        id="tp 8 x pp 2 spans two 8-GPU worker pods on H100",
    ),
    pytest.param(
        "tensor_parallel_size: 2",
        "accelerator_type: A100",
        "",
        8,
        (1, 8, 1, 1, 1),
        ((A100,),),
        id="A100 allows both memory sizes; two GPUs fit one worker pod",
    ),
    pytest.param(
        "tensor_parallel_size: 4",
        "accelerator_type: A10",
        "",
        1,
        (4, 1, 1, 1, 1),
        ((A10G,),),
        id="A10 is read as A10G, as LLMConfig does; four 1-GPU pods",
    ),
    pytest.param(
        "tensor_parallel_size: 1",
        "placement_group_config: {bundles: [{GPU: 1}, {GPU: 1}, {CPU: 4}]}",
        "",
        1,
        (3, 1, 1, 1, 1),
        (),
        id="placement_group_config bundles: GPU defaults to 1 per bundle",
    ),
    pytest.param(
        "data_parallel_size: 2",
        "",
        "",
        8,
        (1, 8, 2, 2, 2),
        (),
        id="data parallelism fixes num_replicas at data_parallel_size",
    ),
    pytest.param(
        "tensor_parallel_size: 2",
        "accelerator_type: H100",
        "nodeSelector: {nvidia.com/gpu.product: NVIDIA-H200}",
        8,
        (1, 8, 1, 1, 1),
        (),
        id="a worker nodeSelector naming a GPU model is kept as written",
    ),
]


@pytest.mark.parametrize(("engine", "extra", "selector", "worker_gpus", "shape", "affinity"), LLM_SHAPES)
def test_an_llm_replica_has_the_gpus_of_its_placement_group(
    engine: str,
    extra: str,
    selector: str,
    worker_gpus: int,
    shape: tuple[int, int, int, int, int],
    affinity: tuple[tuple[Requirement, ...], ...],
) -> None:
    serve_config = f"""applications:
- name: app
  import_path: ray.serve.llm:build_openai_app
  args:
    llm_configs:
    - model_loading_config: {{model_id: meta-llama/Llama-3.1-70B}}
      {extra}
      engine_kwargs:
        {engine.replace(chr(10) + "    ", chr(10) + "        ")}
"""
    result = load_texts([("llm.yaml", _ray_service(serve_config, worker_gpus, selector))])
    (spec,) = _services(result.manifests).values()
    assert spec.name == "llm-app-meta-llama--llama-3-1-70b", spec.name
    assert spec.pending == "", spec.pending
    count, gpus, start, low, high = shape
    assert (spec.pod_set.count, spec.pod_set.requests["nvidia.com/gpu"], spec.replicas, spec.min_replicas,
            spec.max_replicas) == (count, gpus, start, low, high)  # fmt: skip
    assert spec.pod_set.node_affinity == affinity


KSERVE_SAMPLES = [
    pytest.param(
        "sklearn-v1.yaml", {"cpu": 1000, "memory": 2 * GIB}, id="sklearn: KServe's default cpu 1, 2Gi"
    ),
    pytest.param(
        "torchserve-v1-gpu.yaml",
        {"cpu": 1000, "memory": 2 * GIB, "nvidia.com/gpu": 1},
        id="pytorch on a GPU, limits only: default requests cpu 1 and memory 2Gi, the GPU from its limit",
    ),
]


@pytest.mark.parametrize(("file", "requests"), KSERVE_SAMPLES)
def test_kserves_samples_load_with_the_default_predictor_resources(
    file: str, requests: dict[str, int]
) -> None:
    result = load([str(DATA / "kserve-master" / file)])
    assert result.errors == ()
    (spec,) = build_services(result.manifests)[0]
    assert dict(spec.pod_set.requests) == requests
    assert spec.model_uri.startswith("gs://kfserving-")


QUEUES = """
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {name: pool}
spec: {machineType: m, count: 2, cpu: "64", memory: 512Gi, gpu: {model: H100-80GB, count: 1}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: q}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: gpu
      resources:
      - {name: cpu, nominalQuota: "128"}
      - {name: memory, nominalQuota: 1Ti}
      - {name: nvidia.com/gpu, nominalQuota: 2}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: s}
spec: {clusterQueue: q}
"""


def _isvc(name: str, resources: str) -> str:
    return f"""
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata: {{name: {name}, namespace: s, labels: {{kueue.x-k8s.io/queue-name: q}}}}
spec:
  predictor:
    minReplicas: 1
    maxReplicas: 1
    sklearn:
      storageUri: gs://models/{name}
      resources: {resources}
"""


GOOD_AND_BAD = "\n---\n".join(
    textwrap.dedent(d).strip()
    for d in (
        QUEUES,
        _isvc("good", '{limits: {nvidia.com/gpu: "1"}}'),
        _isvc("bad", '{requests: {cpu: "lots"}}'),
    )
)


def test_a_wrong_inference_service_loads_pending_and_the_good_one_serves(tmp_path: Path) -> None:
    result = load_texts([("c.yaml", GOOD_AND_BAD)])
    assert result.config is not None, [str(d) for d in result.errors]
    (warning,) = [d for d in result.warnings if d.name == "bad"]
    assert (warning.field, warning.stays_pending) == ("spec.predictor.sklearn.resources.requests.cpu", True)
    assert warning.message.endswith("the workload stays pending (an error for gpuq validate)")
    (tmp_path / "rps.csv").write_text("time_s,rps\n0,5\n")
    section = ServingSection.model_validate(
        {
            "services": [
                {
                    "service": f"s/{name}",
                    "traffic": {"trace": "rps.csv"},
                    "replica": {"maxRps": 10, "latency": 0.1},
                    "slo": {"latency": 1.0},
                }
                for name in ("good", "bad")
            ]
        }
    )
    plan = serving_plan(result, section, 600.0, 0, tmp_path)
    sim = Simulation(
        result.config, result.nodes, [], SimSettings(horizon_s=600.0), services=ServingFleet(plan)
    )
    report = {m["name"]: m for m in serving_metrics(sim.run(), bins=4)}
    good, bad = report["s/good"], report["s/bad"]
    assert (good["pending"], good["replicas"]["mean_ready"], good["requests"]["served"]) == (
        None,
        1.0,
        3000.0,
    )
    assert bad["pending"].startswith("spec.predictor.sklearn.resources.requests.cpu: ")
    assert (bad["replicas"]["mean_ready"], bad["requests"]["served"], bad["gpu_hours"]) == (0.0, 0.0, 0.0)
    assert bad["requests"]["dropped"] > 0  # its traffic waits for a replica that never comes


def test_a_pending_service_needs_no_traffic_entry(tmp_path: Path) -> None:
    result = load_texts([("c.yaml", GOOD_AND_BAD)])
    (tmp_path / "rps.csv").write_text("time_s,rps\n0,5\n")
    entry = {"service": "good", "traffic": {"trace": "rps.csv"}, "replica": {"maxRps": 10, "latency": 0.1},
             "slo": {"latency": 1.0}}  # fmt: skip
    plan = serving_plan(result, ServingSection.model_validate({"services": [entry]}), 60.0, 0, tmp_path)
    assert [(p.spec.name, p.traffic is None, p.spec.max_replicas) for p in plan.services] == [
        ("bad", True, 0), ("good", False, 1),
    ]  # fmt: skip


def test_validate_exits_1_naming_the_bad_inference_services_field(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(GOOD_AND_BAD)
    result = CliRunner().invoke(app, ["validate", "-f", str(path)])
    assert result.exit_code == 1, result.output
    line = 1 + GOOD_AND_BAD.splitlines().index('      resources: {requests: {cpu: "lots"}}')
    assert (
        f"{path}:{line}: InferenceService/bad: spec.predictor.sklearn.resources.requests.cpu: "
        in result.stderr
    )
    assert "InferenceService/good" not in result.stderr


BAD_LLM = [
    pytest.param(
        "accelerator_type: TPU-V4",
        "spec.serveConfigV2.applications[0].args.llm_configs[0].accelerator_type",
        id="an accelerator gpuq's catalogue lacks",
    ),
    pytest.param(
        "engine_kwargs: {tensor_parallel_size: 0}",
        "spec.serveConfigV2.applications[0].args.llm_configs[0].engine_kwargs.tensor_parallel_size",
        id="a zero tensor parallel size",
    ),
    pytest.param(
        "engine_kwargs: {data_parallel_size: 2}\n"
        "      deployment_config: {autoscaling_config: {max_replicas: 2}}",
        "spec.serveConfigV2.applications[0].args.llm_configs[0].deployment_config.autoscaling_config",
        id="autoscaling with data parallelism",
    ),
]


@pytest.mark.parametrize(("extra", "field"), BAD_LLM)
def test_a_wrong_llm_config_is_pending_and_an_error_for_validate(extra: str, field: str) -> None:
    serve_config = f"""applications:
- name: app
  import_path: ray.serve.llm:build_openai_app
  args:
    llm_configs:
    - model_loading_config: {{model_id: m}}
      {extra}
"""
    text = _ray_service(serve_config)
    loaded = load_texts([("llm.yaml", text)])
    (spec,) = build_services(loaded.manifests)[0]
    assert (spec.name, spec.max_replicas, spec.pending.split(": ")[0]) == ("llm", 0, field)
    # the RayCluster Kueue would admit for the service names a LocalQueue this test does not declare
    queue = "metadata.labels[kueue.x-k8s.io/queue-name]"
    assert [d.field for d in loaded.warnings if d.stays_pending and d.field != queue] == [field]
    strict = load_texts([("llm.yaml", text)], strict=True)
    errors = [(d.kind, d.name, d.field) for d in strict.errors if d.field != queue]
    assert errors == [("RayService", "llm", field)]
