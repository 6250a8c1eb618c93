"""Simulated serving at scale: 50 autoscaled services on 200 GPU nodes for a week.

Half the services use an HPA v2 (Pods metric ``vllm:num_requests_running``), half a KEDA
ScaledObject (``vllm:num_requests_waiting`` + ``vllm:num_requests_running``, scale to zero); each
sees a daily cycle with its own phase, peak and a burst. Autoscalers sync once a minute
(``--horizontal-pod-autoscaler-sync-period=60s``, KEDA ``pollingInterval: 60``) and traffic steps are
one minute, so a week is 10,080 decisions per service. Every replica is a Kueue workload in one
ClusterQueue. Prints the simulation's wall time, decisions per second, and the report's time.

    python bench/serving.py [--services 50] [--nodes 200] [--days 7]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from gpuq.api.loader import load_texts
from gpuq.api.serving_scenario import ServingSection
from gpuq.core.autoscaling.keda import ScaledObjectSpec
from gpuq.core.autoscaling.spec import ControllerConfig
from gpuq.sim.serving.fleet import ServingFleet, ServingPlan
from gpuq.sim.serving.plan import serving_plan
from gpuq.sim.serving.report import serving_metrics
from gpuq.sim.simulator import SimSettings, Simulation

MINUTE = ControllerConfig(sync_period_s=60)


def manifests(services: int, nodes: int) -> str:
    docs = [
        f"""apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {{name: gpu}}
spec:
  machineType: a3
  count: {nodes}
  cpu: "208"
  memory: 1800Gi
  gpu: {{model: H100-80GB, count: 8}}
  price: 80""",
        """apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}""",
        f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: inference}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{{name: nvidia.com/gpu, nominalQuota: {nodes * 8}}}]""",
        """apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: inference, namespace: serve}
spec: {clusterQueue: inference}""",
    ]
    for i in range(services):
        name = f"svc-{i:02d}"
        docs.append(f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: serve, labels: {{kueue.x-k8s.io/queue-name: inference}}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers: [{{name: vllm, resources: {{requests: {{nvidia.com/gpu: "{1 + i % 2}"}}}}}}]""")
        if i % 2 == 0:
            docs.append(f"""apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: {name}, namespace: serve}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: {name}}}
  minReplicas: 1
  maxReplicas: 24
  metrics:
  - type: Pods
    pods:
      metric: {{name: "vllm:num_requests_running"}}
      target: {{type: AverageValue, averageValue: "12"}}""")
        else:
            docs.append(f"""apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {{name: {name}, namespace: serve}}
spec:
  scaleTargetRef: {{name: {name}}}
  pollingInterval: 60
  minReplicaCount: 0
  maxReplicaCount: 24
  triggers:
  - type: prometheus
    metadata: {{query: "sum(vllm:num_requests_running)", threshold: "12"}}
  - type: prometheus
    name: waiting
    metadata: {{query: "sum(vllm:num_requests_waiting)", threshold: "20"}}""")
    return "\n---\n".join(docs)


def section(services: int) -> ServingSection:
    entries = []
    for i in range(services):
        peak = 10 + 3 * (i % 7)
        entries.append(
            {
                "service": f"serve/svc-{i:02d}",
                "traffic": {
                    "generate": {
                        "baseRps": 0.0 if i % 2 else 1.0,
                        "peakRps": peak,
                        "peakAt": 3600 * (10 + i % 8),
                        "bursts": [{"at": 86400 * (i % 7) + 3600 * 11, "duration": 1200, "multiplier": 2}],
                        "noise": 0.1,
                    }
                },
                "replica": {"maxRps": 2, "concurrency": 16, "latency": 3},
                "coldStart": {"imagePull": 90, "modelLoad": 120, "cachedModelLoad": 30, "readiness": 10},
                "slo": {"latency": 10},
            }
        )
    return ServingSection.model_validate({"step": 60, "services": entries})


def per_minute(plan: ServingPlan) -> ServingPlan:
    """Sync every autoscaler once a minute (the HPA controller flag; KEDA's generated HPA too)."""
    out = []
    for svc in plan.services:
        scaler = svc.spec.autoscaler
        if isinstance(scaler, ScaledObjectSpec):
            scaler = dataclasses.replace(scaler, hpa_config=MINUTE)
        elif scaler is not None:
            scaler = dataclasses.replace(scaler, config=MINUTE)
        out.append(dataclasses.replace(svc, spec=dataclasses.replace(svc.spec, autoscaler=scaler)))
    return dataclasses.replace(plan, services=tuple(out))


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--services", type=int, default=50)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--days", type=float, default=7)
    args = parser.parse_args()
    horizon = args.days * 86400
    started = time.perf_counter()
    result = load_texts([("bench.yaml", manifests(args.services, args.nodes))])
    assert result.config is not None, [str(d) for d in result.errors]
    plan = per_minute(serving_plan(result, section(args.services), horizon, 1, Path.cwd()))
    prepared = time.perf_counter() - started
    fleet = ServingFleet(plan)
    sim = Simulation(result.config, result.nodes, [], SimSettings(horizon_s=horizon), services=fleet)
    started = time.perf_counter()
    out = sim.run()
    wall = time.perf_counter() - started
    started = time.perf_counter()
    report = serving_metrics(out, bins=7 * 24)
    reported = time.perf_counter() - started
    replicas = len(out.runs)
    attained = sum(1 for s in report if s["slo"]["met"])
    gpu_hours = sum(s["gpu_hours"] for s in report)
    print(f"services {args.services}, nodes {args.nodes} ({args.nodes * 8} GPUs), {args.days:g} days")
    print(f"prepare (load + traffic):  {prepared:.2f} s")
    print(f"simulation wall:           {wall:.2f} s")
    print(f"autoscaling decisions:     {fleet.decisions:,} ({fleet.decisions / wall:,.0f} per second)")
    print(f"scheduling cycles:         {out.cycles:,}; replica workloads created: {replicas:,}")
    print(f"report (latency quantiles): {reported:.2f} s")
    print(f"services meeting their SLO: {attained} / {len(report)}; GPU-hours {gpu_hours:,.0f}")


if __name__ == "__main__":
    main()
