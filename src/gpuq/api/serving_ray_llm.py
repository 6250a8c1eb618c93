"""Ray Serve LLM applications (``ray.serve.llm:build_openai_app``): a service per ``llm_configs`` entry.

A Serve application whose ``import_path`` is :data:`LLM_IMPORT_PATHS` declares no ``deployments``;
its ``args.llm_configs`` do. :func:`llm_deployments` reads each entry the way Ray Serve LLM builds
its ``LLMServer`` deployment (ray ``python/ray/llm/_internal/serve/``, Ray 2.5x):

1. the deployment is named ``deployment_config.name``, else the ``model_id`` with ``/`` as ``--`` and
   ``.`` as ``_`` (``core/server/builder.py``, ``_get_deployment_name``);
2. its deployment options are ``deployment_config`` merged over ``DEFAULT_DEPLOYMENT_OPTIONS``
   (``autoscaling_config.target_ongoing_requests`` = ``DEFAULT_MAX_TARGET_ONGOING_REQUESTS``, 1e9),
   the default autoscaling dropped when ``num_replicas`` is set
   (``common/dict_utils.py``, ``maybe_apply_llm_deployment_config_defaults``); a
   ``data_parallel_size`` > 1 fixes the count at ``num_replicas`` (default ``data_parallel_size``)
   and forbids ``autoscaling_config`` (``deployments/data_parallel/dp_server.py``);
3. a replica's GPUs are its placement group's: ``placement_group_config.bundles`` (each ``GPU``
   defaulting to 1, ``engines/vllm/vllm_models.py``, ``BundleConfig``), else one ``{GPU: 1}``
   bundle per device, ``tensor_parallel_size`` × ``pipeline_parallel_size``
   (``VLLMEngineConfig.placement_bundles``); the replica actor's ``ray_actor_options.num_gpus``
   (default 0) is merged into the first bundle (``LLMServer.get_deployment_options``);
4. ``accelerator_type`` (``A10`` read as ``A10G``, as ``LLMConfig.validate_accelerator_type`` does)
   becomes the GPU models of gpuq's catalogue a replica may run on (:data:`RAY_ACCELERATOR_MODELS`).

Every problem raises :class:`~gpuq.api.serving_autoscalers.ServingError` naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuq.api.serving_autoscalers import ServingError, mapping
from gpuq.core.gpus import DEFAULT_CATALOGUE

LLM_IMPORT_PATHS = frozenset({"ray.serve.llm:build_openai_app", "ray.serve.llm.build_openai_app"})
DEFAULT_MAX_TARGET_ONGOING_REQUESTS = 1_000_000_000
"""Ray Serve LLM's default ``target_ongoing_requests`` (``serve/constants.py``): no scale-up on load
unless the config sets a target."""

RAY_ACCELERATOR_MODELS: Mapping[str, tuple[str, ...]] = {
    "V100": ("V100-16GB", "V100-32GB"),
    "P100": ("P100",),
    "T4": ("T4",),
    "A10G": ("A10G",),
    "L4": ("L4",),
    "L40S": ("L40S",),
    "A100": ("A100-40GB", "A100-80GB"),
    "A100-40G": ("A100-40GB",),
    "A100-80G": ("A100-80GB",),
    "H100": ("H100-80GB",),
    "H200": ("H200",),
}
"""Ray's accelerator type names (``ray/util/accelerators/accelerators.py``) -> gpuq catalogue models.
Ray labels a node ``A100`` for either memory size (``A100-40G`` / ``A100-80G`` only when set by
hand), so ``A100`` allows both; the other names Ray knows (``P4``, ``K80``, ``H20``, AMD, Intel,
TPU, Neuron) have no model in gpuq's catalogue."""


@dataclass(frozen=True)
class LLMDeployment:
    """One ``LLMServer`` deployment: its name, the options Serve reads and one replica's needs."""

    name: str
    model_id: str
    model_source: str
    options: Mapping[str, Any]  # deployment options after Ray Serve LLM's defaults
    gpus: float  # GPUs one replica's placement group holds
    gpu_models: tuple[str, ...]  # catalogue models allowed by accelerator_type (() : any)
    fixed_replicas: int | None  # data parallelism: the count, not autoscaled
    at: str = ""  # the llm_configs entry's field path


def is_llm_application(app: Mapping[str, Any]) -> bool:
    return str(app.get("import_path") or "").strip() in LLM_IMPORT_PATHS


def llm_deployments(app: Mapping[str, Any], at: str) -> list[LLMDeployment]:
    """Steps 1-4 of the module docstring for each ``args.llm_configs`` entry of ``app``."""
    args = mapping(app.get("args"), f"{at}.args")
    configs = args.get("llm_configs")
    if not isinstance(configs, list) or not configs:
        raise ServingError(f"{at}.args.llm_configs", "expected a non-empty list of LLM configs")
    out = []
    for i, raw in enumerate(configs):
        c_at = f"{at}.args.llm_configs[{i}]"
        if isinstance(raw, str):
            raise ServingError(c_at, f"a config file path ({raw!r}): gpuq reads llm_configs given inline")
        out.append(_deployment(mapping(raw, c_at), c_at))
    return out


def _deployment(config: Mapping[str, Any], at: str) -> LLMDeployment:
    loading = mapping(config.get("model_loading_config"), f"{at}.model_loading_config")
    model_id = loading.get("model_id")
    if not isinstance(model_id, str) or not model_id:
        raise ServingError(f"{at}.model_loading_config.model_id", "is required")
    source = loading.get("model_source")
    deployment = mapping(config.get("deployment_config"), f"{at}.deployment_config", required=False)
    engine = mapping(config.get("engine_kwargs"), f"{at}.engine_kwargs", required=False)
    name = str(deployment.get("name") or model_id.replace("/", "--").replace(".", "_"))
    options, fixed = _options(deployment, engine, at)
    return LLMDeployment(
        name, model_id, source if isinstance(source, str) else model_id, options,
        _replica_gpus(config, deployment, engine, at), _gpu_models(config.get("accelerator_type"), at),
        fixed, at,
    )  # fmt: skip


def _positive_int(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ServingError(field, f"expected a positive integer, got {value!r}")
    return value


def _options(
    deployment: Mapping[str, Any], engine: Mapping[str, Any], at: str
) -> tuple[dict[str, Any], int | None]:
    """Step 2: the deployment options and, under data parallelism, the fixed replica count."""
    dp = _positive_int(engine.get("data_parallel_size", 1), f"{at}.engine_kwargs.data_parallel_size")
    options = dict(deployment)
    if dp > 1:
        if "autoscaling_config" in deployment:
            raise ServingError(
                f"{at}.deployment_config.autoscaling_config",
                "not supported with data_parallel_size > 1 (Ray Serve LLM fixes num_replicas)",
            )
        count = _positive_int(deployment.get("num_replicas", dp), f"{at}.deployment_config.num_replicas")
        if count % dp:
            raise ServingError(
                f"{at}.deployment_config.num_replicas",
                f"{count} is not a multiple of data_parallel_size {dp}",
            )
        return options, count
    if "num_replicas" not in deployment:
        user = mapping(
            deployment.get("autoscaling_config"), f"{at}.deployment_config.autoscaling_config", required=False
        )
        options["autoscaling_config"] = {
            "target_ongoing_requests": DEFAULT_MAX_TARGET_ONGOING_REQUESTS,
            **user,
        }
    return options, None


def _gpu_count(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ServingError(field, f"expected a non-negative number of GPUs, got {value!r}")
    return float(value)


def _replica_gpus(
    config: Mapping[str, Any], deployment: Mapping[str, Any], engine: Mapping[str, Any], at: str
) -> float:
    """Step 3: the GPUs of one replica's placement group."""
    actor = mapping(
        deployment.get("ray_actor_options"), f"{at}.deployment_config.ray_actor_options", required=False
    )
    actor_gpus = _gpu_count(actor.get("num_gpus", 0), f"{at}.deployment_config.ray_actor_options.num_gpus")
    group = config.get("placement_group_config")
    if group is not None:
        g_at = f"{at}.placement_group_config"
        bundles = mapping(group, g_at).get("bundles")
        if not isinstance(bundles, list) or not bundles:
            raise ServingError(f"{g_at}.bundles", "expected a non-empty list of resource bundles")
        total = sum(
            _gpu_count(mapping(b, f"{g_at}.bundles[{k}]").get("GPU", 1), f"{g_at}.bundles[{k}].GPU")
            for k, b in enumerate(bundles)
        )
        return total + actor_gpus
    tp = _positive_int(engine.get("tensor_parallel_size", 1), f"{at}.engine_kwargs.tensor_parallel_size")
    pp = _positive_int(engine.get("pipeline_parallel_size", 1), f"{at}.engine_kwargs.pipeline_parallel_size")
    return float(tp * pp) + actor_gpus


def _gpu_models(value: object, at: str) -> tuple[str, ...]:
    """Step 4: the catalogue models ``accelerator_type`` allows (() when it is unset)."""
    if value is None:
        return ()
    name = "A10G" if value == "A10" else str(value)
    models = RAY_ACCELERATOR_MODELS.get(name)
    if models is None:
        known = ", ".join(RAY_ACCELERATOR_MODELS)
        raise ServingError(
            f"{at}.accelerator_type", f"{value!r} is no GPU of gpuq's catalogue (known: {known})"
        )
    return models


def gpu_products(models: tuple[str, ...]) -> list[str]:
    """The ``nvidia.com/gpu.product`` values GPU Feature Discovery writes for ``models``: each
    model's product and its PCIe / NVL variants' (the catalogue's aliases shaped like products)."""
    out: list[str] = []
    for name in models:
        spec = DEFAULT_CATALOGUE.get(name)
        assert spec is not None, name
        out += [spec.product, *(a for a in spec.aliases if re.match(r"^(NVIDIA|Tesla)-", a))]
    return sorted(set(out))
