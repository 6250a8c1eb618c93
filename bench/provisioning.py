"""A week of a 1,000-node autoscaled GPU cluster with spot interruptions.

Prints the wall time of the run and the share spent inside core provisioning decisions
(scale-up, scale-down, consolidation). Usage: ``python bench/provisioning.py [--nodes 1000]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from gpuq.sim.provisioning.provisioner import Provisioner
from gpuq.sim.scenario import load_workloads, plan_scenario, prepare

CLUSTER = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: ondemand}}
spec: {{nodeLabels: {{gpuq.dev/capacity-type: on-demand}}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: spot}}
spec: {{nodeLabels: {{gpuq.dev/capacity-type: spot}}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: all}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: spot
      resources: [{{name: nvidia.com/gpu, nominalQuota: {gpus}}}]
    - name: ondemand
      resources: [{{name: nvidia.com/gpu, nominalQuota: {gpus}}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: q, namespace: ml}}
spec: {{clusterQueue: all}}
---
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {{name: ondemand}}
spec:
  machineType: a3-highgpu-8g
  cpu: "208"
  memory: 1800Gi
  gpu: {{model: H100-80GB, count: 8}}
  autoscaling: {{min: 0, max: {half}}}
  provisioning: {{boot: 2m, driverInstall: 2m, imagePull: 3m}}
  scaleDown: {{idleAfter: 10m}}
---
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {{name: spot}}
spec:
  machineType: a3-highgpu-8g
  capacityType: spot
  cpu: "208"
  memory: 1800Gi
  gpu: {{model: H100-80GB, count: 8}}
  autoscaling: {{min: 0, max: {half}}}
  provisioning: {{boot: 2m, driverInstall: 2m, imagePull: 3m}}
  scaleDown: {{idleAfter: 10m}}
"""

SCENARIO = """\
apiVersion: gpuq.dev/v1alpha1
kind: Scenario
metadata: {{name: week}}
spec:
  config: [cluster.yaml]
  workloads:
    generate:
      horizon: 168h
      teams:
      - namespace: ml
        queue: q
        arrivalsPerHour: {rate}
        gpusPerPod: {{choice: [1, 4, 8]}}
        pods: {{choice: [1, 2, 4]}}
        duration: {{lognormal: [2h, 0.8]}}
        checkpointInterval: 30m
  settings: {{seed: 7, horizon: 168h}}
  provisioning:
    spot: {{interruptionsPerNodeHour: {{spot: 0.02}}}}
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=None, help="arrivals per hour")
    args = parser.parse_args()
    half = args.nodes // 2
    # Offered load ~ 60% of the cluster: mean job ~ 2.7 h x ~ 9 GPUs.
    rate = args.rate if args.rate is not None else round(0.6 * args.nodes * 8 / (2.7 * 9.3), 1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "cluster.yaml").write_text(CLUSTER.format(gpus=half * 8, half=half))
        (root / "scenario.yaml").write_text(SCENARIO.format(rate=rate))
        try:
            plan = plan_scenario([str(root / "scenario.yaml")])
        except Exception as error:  # show what is wrong with the generated files
            for d in getattr(error, "diagnostics", ()):
                print(d)
            raise
        prepared = prepare(plan, plan.variants[0], load_workloads(plan))
        simulation = prepared.simulation()
        started = time.perf_counter()
        result = simulation.run()
        wall = time.perf_counter() - started
    prov = simulation.provisioning
    assert isinstance(prov, Provisioner)
    c = prov.counters
    print(
        f"nodes (max) {args.nodes}, arrivals/h {rate}, workloads {len(result.runs)}, events {result.events}"
    )
    print(
        f"nodes added {c.nodes_added}, scale-downs {c.scale_downs}, spot interruptions {c.spot_interruptions}"
    )
    print(
        f"wall {wall:.1f} s; in provisioning decisions {prov.decision_s:.2f} s "
        f"({100 * prov.decision_s / wall:.1f}%)"
    )


if __name__ == "__main__":
    main()
