"""``spec.serving`` of a Scenario: the traffic each service receives and how its replicas behave.

The manifests say what is deployed (Deployments, HPAs, ScaledObjects, InferenceServices); the
Scenario says what the world does to them, so the manifests stay deployable unchanged:

- ``traffic``: a CSV trace of ``time_s,rps`` (the rate holds from each row to the next), or a
  generator: a daily cycle between ``baseRps`` and ``peakRps`` peaking at ``peakAt``, plus bursts;
- ``replica``: what one replica sustains (``maxRps``), its ``concurrency`` (requests served at once)
  and the ``latency`` of one request at low load;
- ``coldStart``: image pull, model load (``cachedModelLoad`` where the model is in the node's
  cache, ``preloaded`` for every node), readiness delay; node provisioning comes from
  ``spec.serving.provisioning`` per NodePool;
- ``slo``: the latency a request must meet; ``queueTimeout``: how long a request waits for a
  replica before it is dropped.

See docs/serving.md for the formulas.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from gpuq.api.kueue import Duration, Strict

_Seconds = Annotated[Duration, Field(ge=0)]
_Positive = Annotated[Duration, Field(gt=0)]
_Rate = Annotated[float, Field(ge=0, le=10_000_000)]


class Burst(Strict):
    """``rps`` more requests per second (or the rate times ``multiplier``) during ``[at, at + duration)``."""

    at: _Seconds
    duration: _Positive
    rps: _Rate | None = None
    multiplier: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _one(self) -> Burst:
        if (self.rps is None) == (self.multiplier is None):
            raise ValueError("give exactly one of rps or multiplier")
        return self


class TrafficGenerator(Strict):
    """``rate(t) = base + (peak - base)·(1 + cos(2π (t - peakAt) / period)) / 2`` (``peak`` at
    ``peakAt``, ``base`` half a period away), plus bursts, times a seeded noise factor
    ``1 + noise·u``, u uniform in [-1, 1), drawn per step (:mod:`gpuq.sim.serving.traffic`)."""

    base_rps: _Rate
    peak_rps: _Rate | None = None
    peak_at: _Seconds = 14 * 3600.0
    period: _Positive = 86400.0
    bursts: list[Burst] = Field(default_factory=list)
    noise: Annotated[float, Field(ge=0, lt=1)] = 0.0


class Traffic(Strict):
    trace: str | None = None  # CSV time_s,rps relative to the Scenario's file
    generate: TrafficGenerator | None = None
    scale: Annotated[float, Field(gt=0)] = 1.0

    @model_validator(mode="after")
    def _one(self) -> Traffic:
        if (self.trace is None) == (self.generate is None):
            raise ValueError("give exactly one of trace or generate")
        return self


class ReplicaModel(Strict):
    max_rps: Annotated[float, Field(gt=0)]  # requests per second one replica sustains
    concurrency: Annotated[int, Field(ge=1, le=100_000)] = 1  # requests served at once
    latency: _Positive  # one request at low load
    tokens_per_request: Annotated[float, Field(ge=0)] = 0.0  # for vllm:generation_tokens_total


class ColdStart(Strict):
    image_pull: _Seconds = 0.0
    model_load: _Seconds = 0.0
    cached_model_load: _Seconds | None = None  # model load from the node's cache
    preloaded: bool = False  # every node's cache holds the model from the start
    readiness: _Seconds = 0.0  # readiness probe's initial delay


class Slo(Strict):
    latency: _Positive
    target: Annotated[float, Field(gt=0, le=1)] = 0.99


class ServiceTraffic(Strict):
    service: (
        str  # "namespace/name" or "name" of a Deployment, StatefulSet, InferenceService, Serve deployment
    )
    traffic: Traffic
    replica: ReplicaModel
    cold_start: ColdStart = ColdStart()
    slo: Slo
    queue_timeout: _Positive = 60.0


class ServingSection(Strict):
    services: list[ServiceTraffic] = Field(min_length=1)
    step: _Positive = 15.0  # traffic resolution: the rate is constant within a step
    provisioning: dict[str, _Seconds] = Field(default_factory=dict)  # NodePool -> node provisioning delay
    price_per_gpu_hour: Annotated[float, Field(ge=0)] | None = None  # else the nodes' prices

    @model_validator(mode="after")
    def _unique(self) -> ServingSection:
        names = [s.service for s in self.services]
        if len(set(names)) != len(names):
            raise ValueError(f"a service is listed twice in {names}")
        return self
