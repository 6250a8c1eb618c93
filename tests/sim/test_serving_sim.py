"""Autoscaled services in the simulator, end to end, against values computed by hand."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from gpuq.api.loader import load_texts
from gpuq.api.serving_scenario import ServingSection
from gpuq.core.autoscaling.replicas import Pod, PodMetrics
from gpuq.core.autoscaling.sync import sync
from gpuq.core.lifecycle import WorkloadState
from gpuq.core.model import PodSet, Workload
from gpuq.sim.jobs import SimJob
from gpuq.sim.serving.fleet import ServiceRun, ServingFleet
from gpuq.sim.serving.plan import serving_plan
from gpuq.sim.serving.replica_model import LatencyBook, erlang_c, steady
from gpuq.sim.simulator import SimResult, SimSettings, Simulation


def cluster(gpus: int, nodes: int = 4, preemption: str = "") -> str:
    return f"""
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {{name: pool}}
spec: {{machineType: m, count: {nodes}, cpu: "64", memory: 512Gi, gpu: {{model: H100-80GB, count: 1}}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: gpu}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: q}}
spec:
  namespaceSelector: {{}}
  {preemption}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{{name: nvidia.com/gpu, nominalQuota: {gpus}}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: q, namespace: s}}
spec: {{clusterQueue: q}}
"""


def deployment(replicas: int) -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: chat, namespace: s, labels: {{kueue.x-k8s.io/queue-name: q}}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: chat}}}}
  template:
    metadata: {{labels: {{app: chat}}}}
    spec:
      containers: [{{name: c, resources: {{requests: {{nvidia.com/gpu: "1"}}}}}}]
"""


def run(
    tmp_path: Path,
    docs: list[str],
    trace: list[tuple[float, float]],
    horizon_s: float,
    *,
    replica: dict[str, object] | None = None,
    jobs: list[SimJob] = (),  # type: ignore[assignment]
    timeout_s: float = 60.0,
) -> tuple[ServiceRun, SimResult]:
    (tmp_path / "rps.csv").write_text("time_s,rps\n" + "".join(f"{t},{r}\n" for t, r in trace))
    text = "\n---\n".join(textwrap.dedent(d).strip() for d in docs)
    result = load_texts([("c.yaml", text)])
    assert result.config is not None, [str(d) for d in result.errors]
    section = ServingSection.model_validate(
        {
            "step": 15,
            "services": [
                {
                    "service": "s/chat",
                    "traffic": {"trace": "rps.csv"},
                    "replica": replica or {"maxRps": 10, "concurrency": 1, "latency": 0.1},
                    "coldStart": {"imagePull": 10, "modelLoad": 20},
                    "slo": {"latency": 1.0},
                    "queueTimeout": timeout_s,
                }
            ],
        }
    )
    plan = serving_plan(result, section, horizon_s, 0, tmp_path)
    sim = Simulation(
        result.config, result.nodes, list(jobs), SimSettings(horizon_s=horizon_s), services=ServingFleet(plan)
    )
    out = sim.run()
    assert isinstance(out.services, ServingFleet)
    return out.services.services[0], out


def test_erlang_c_and_the_steady_state_of_one_replica() -> None:
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: P(wait) = ρ
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)  # a = 1, c = 2: (1/2)/(1/(1-0.5)) ... = 1/3
    state = steady(5.0, 10.0, 1)
    assert (state.utilisation, state.wait_chance, state.decay, state.mean_wait_s) == pytest.approx(
        (0.5, 0.5, 5.0, 0.1)
    )


def test_a_steady_load_on_one_replica_has_the_mm1_latency(tmp_path: Path) -> None:
    """5 rps on one warm replica (10 rps, 1 slot, 0.1 s): P(latency > x) = 0.5·exp(-5(x - 0.1)),
    so p50 = 0.1 s and p99 = 0.1 + ln(50)/5 s; SLO 1 s: 1 - 0.5·exp(-4.5)."""
    svc, _ = run(tmp_path, [cluster(4), deployment(1)], [(0, 5)], 300)
    assert svc.arrived == pytest.approx(1500)
    assert svc.book.served == pytest.approx(1500)
    assert svc.book.quantile(0.5) == pytest.approx(0.1)
    assert svc.book.quantile(0.99) == pytest.approx(0.1 + math.log(50) / 5, rel=1e-5)
    assert svc.book.within(1.0) / svc.arrived == pytest.approx(1 - 0.5 * math.exp(-4.5))
    assert svc.cold_starts == [] and svc.dropped == 0


HPA_ON_RPS = """
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: chat, namespace: s}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: chat}
  minReplicas: 1
  maxReplicas: 4
  metrics:
  - type: External
    external: {metric: {name: rps}, target: {type: AverageValue, averageValue: "5"}}
  behavior: {}
"""


def test_a_step_in_traffic_scales_up_and_the_queue_drains_after_the_cold_start(tmp_path: Path) -> None:
    """5 → 20 rps at 60 s. The HPA sync at 60 s wants ceil(20/5) = 4 replicas (default rules allow
    +4 per 15 s); the three new ones start cold: 10 s image pull + 20 s model load, ready at 90 s.
    From 60 to 90 s one replica serves 10 of the 20 rps: 300 requests queue; from 90 s four serve
    40 rps and the queue drains at 20 rps, in 15 s. Nothing waits the 60 s timeout. The longest
    wait, exactly 300 / 40 = 7.5 s for a request arriving at 90 s, is seen through 15 s chunks:
    above 7.5 s and at most one step (15 s)."""
    svc, _ = run(tmp_path, [cluster(4), deployment(1), HPA_ON_RPS], [(0, 5), (60, 20)], 300)
    assert [row for row in svc.timeline if row[0] <= 90] == [
        (0.0, 1, 1, 1),
        (60.0, 4, 1, 4),
        (90.0, 4, 4, 4),
    ]
    assert svc.cold_starts == [30.0, 30.0, 30.0]
    assert svc.dropped == 0
    assert svc.arrived == pytest.approx(60 * 5 + 240 * 20)
    assert svc.book.served == pytest.approx(svc.arrived)
    worst = max(latency for latency, _ in svc.book.points)
    assert 7.5 + 0.1 <= worst <= 15 + 0.1 + 1e-6


KEDA_FROM_ZERO = """
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: chat, namespace: s}
spec:
  scaleTargetRef: {name: chat}
  pollingInterval: 15
  minReplicaCount: 0
  maxReplicaCount: 2
  triggers:
  - type: prometheus
    metadata: {query: "sum(vllm:num_requests_waiting)", threshold: "100"}
"""


def test_a_burst_during_a_cold_start_from_zero_queues_then_drops_past_the_timeout(tmp_path: Path) -> None:
    """No replica until 10 rps start at 105 s. KEDA polls every 15 s: at 105 s nothing waits, at
    120 s 150 requests wait (> activation 0): 0 → 1. At 135 s the poll keeps it active and the HPA
    KEDA drives sees 300 waiting against 100 per replica: ceil(3) = 3, capped at 2. The first cold
    start (30 s) ends at 150 s. Requests arrive in 15 s chunks (midpoints 112.5, 127.5, 142.5); at
    150 s the chunks older than the 20 s timeout (112.5 and 127.5: 300 requests) are dropped."""
    replica = {"maxRps": 40, "concurrency": 1, "latency": 0.1}
    svc, _ = run(tmp_path, [cluster(4), deployment(0), KEDA_FROM_ZERO], [(0, 0), (105, 10)], 160,
                 replica=replica, timeout_s=20)  # fmt: skip
    assert [row for row in svc.timeline if row[0] <= 150] == [
        (0.0, 0, 0, 0),
        (120.0, 1, 0, 1),
        (135.0, 2, 0, 2),
        (150.0, 2, 1, 2),
    ]
    assert svc.cold_queued == pytest.approx(450)
    assert (svc.dropped, svc.cold_dropped) == pytest.approx((300, 300))
    assert svc.zero_s == pytest.approx(120)


def batch_job(name: str, gpus: int, duration_s: float, priority: int, at: float = 0.0) -> SimJob:
    pod_set = PodSet("main", 1, {"nvidia.com/gpu": gpus})
    workload = Workload("s", name, "q", (pod_set,), priority=priority, creation_time=at, uid=name)
    return SimJob(workload, duration_s, float(gpus))


def test_a_scale_up_beyond_quota_waits_with_kueues_reason_and_resumes_when_quota_frees(
    tmp_path: Path,
) -> None:
    """Quota 2 GPUs; a training job holds 1 until 200 s. The second replica waits for quota with
    Kueue's reason, is admitted at 200 s and is ready after its 30 s cold start."""
    job = batch_job("train", 1, 200, priority=10)
    svc, result = run(tmp_path, [cluster(2), deployment(2)], [(0, 1)], 400, jobs=[job])
    (wait,) = {(key, reason) for _, key, reason in svc.waits} or {("", "")}
    assert wait[0] == "s/chat-1" and "insufficient unused quota for nvidia.com/gpu" in wait[1]
    assert result.runs["s/chat-1"].first_admitted == 200.0
    assert [row for row in svc.timeline if row[0] >= 200][:2] == [(200.0, 2, 1, 2), (230.0, 2, 2, 2)]


PDB = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: chat, namespace: s}
spec: {minAvailable: 2, selector: {matchLabels: {app: chat}}}
"""


@pytest.mark.parametrize(
    ("gpus", "preempted"),
    [
        pytest.param(2, 0, id="a preemptor that needs two replicas waits: the budget allows one disruption"),
        pytest.param(1, 1, id="a preemptor that needs one replica preempts it: the budget allows one"),
    ],
)
def test_a_pod_disruption_budget_protects_its_minimum_from_preemption(
    tmp_path: Path, gpus: int, preempted: int
) -> None:
    """Quota 3 GPUs held by 3 chat replicas (priority 0); a priority-100 job wants ``gpus`` at 50 s.
    withinClusterQueue: LowerPriority would evict replicas; minAvailable 2 leaves one disruption."""
    job = batch_job("urgent", gpus, 100, priority=100, at=50)
    preemption = "preemption: {withinClusterQueue: LowerPriority}"
    svc, result = run(
        tmp_path, [cluster(3, preemption=preemption), deployment(3), PDB], [(0, 1)], 120, jobs=[job]
    )
    replicas = [r for k, r in result.runs.items() if k.startswith("s/chat-")]
    assert sum(r.preempted for r in replicas) == preempted
    urgent = result.runs["s/urgent"]
    if preempted:
        assert urgent.first_admitted == 50.0
    else:
        assert urgent.status == WorkloadState.PENDING and urgent.first_admitted is None
        assert svc.ready == 3


def test_latency_book_quantiles_over_a_mixture() -> None:
    book = LatencyBook()
    book.add_point(2.0, 10)
    book.add_point(4.0, 10)
    assert book.quantile(0.5) == 2.0
    assert book.quantile(0.99) == 4.0
    assert book.within(3.0) == 10


HPA_ON_RUNNING = """
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: chat, namespace: s}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: chat}
  maxReplicas: 10
  metrics:
  - type: Pods
    pods:
      metric: {name: "vllm:num_requests_running"}
      target: {type: AverageValue, averageValue: "2"}
"""


def test_the_fleet_sets_the_count_the_core_sync_decides_as_the_live_controller_does(tmp_path: Path) -> None:
    """The observation of tests/run/test_serving_controller.py's twin: at the 15 s sync two warm
    replicas serve 15 rps at μ 10 and c 4 (ρ 0.75), so 3 requests run on each; the HPA targets 2
    per pod: core says 3, and so does the fleet."""
    replica = {"maxRps": 10, "concurrency": 4, "latency": 0.1}
    svc, _ = run(tmp_path, [cluster(4), deployment(2), HPA_ON_RUNNING], [(0, 15)], 40, replica=replica)
    assert svc.plan.spec.autoscaler is not None
    pods = (Pod("s/chat-0"), Pod("s/chat-1"))
    running = {"vllm:num_requests_running": PodMetrics({"s/chat-0": 3000, "s/chat-1": 3000})}
    core = sync(svc.plan.spec.autoscaler, None, 2, 2, pods, running, 15.0)
    assert [row[:2] for row in svc.timeline] == [(0.0, 2), (15.0, core.replicas)]
    assert core.replicas == 3
