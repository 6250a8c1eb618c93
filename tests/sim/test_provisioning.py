"""The simulator carries out provisioning decisions: hand-computed timelines (gpuq.sim.provisioning).

Each case writes a small cluster, a trace and a Scenario with ``spec.provisioning``, runs it and
compares slices of the provisioner's ``(t, kind, subject, detail)`` log and the workloads' runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpuq.api.scenario import Generator
from gpuq.core.lifecycle import WorkloadState
from gpuq.sim.generator import generate
from gpuq.sim.metrics import checkpoint_metrics
from gpuq.sim.provisioning.provisioner import Provisioner
from gpuq.sim.provisioning.report import cost_metrics, provisioning_metrics
from gpuq.sim.report import render_report
from gpuq.sim.scenario import ScenarioError, load_workloads, plan_scenario, prepare
from gpuq.sim.simulator import SimResult

QUEUE = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: gpu}}
spec: {{nodeLabels: {labels}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: team-a}}
spec:
  namespaceSelector: {{}}
  admissionChecksStrategy: {{admissionChecks: {checks}}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{{name: nvidia.com/gpu, nominalQuota: {quota}}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: q, namespace: team-a}}
spec: {{clusterQueue: team-a}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: q, namespace: team-b}}
spec: {{clusterQueue: team-a}}
"""

POOL = """\
---
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {{name: {name}}}
spec:
  machineType: a3-highgpu-8g
  cpu: "64"
  memory: 512Gi
  gpu: {{model: H100-80GB, count: 8}}
  capacityType: {capacity}
  zone: us-central1-a
  price: {price}
{extra}
"""

DWS = """\
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {{name: dws}}
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters: {{apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: cfg}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ProvisioningRequestConfig
metadata: {{name: cfg}}
spec:
  provisioningClassName: {klass}
  parameters: {params}
  retryStrategy: {{backoffLimitCount: 3, backoffBaseSeconds: 60, backoffMaxSeconds: 1800}}
"""

EXAMPLE = Path(__file__).parents[2] / "examples/symbol-retail/capacity/capacity.scenario"

HEADER = "name,namespace,queue,submit_s,duration_s,priority,pods,gpus,cpu,memory,gpu_model,checkpoint_s\n"


def pool(name: str, extra: str, capacity: str = "on-demand", price: float = 80) -> str:
    body = "\n".join(f"  {line}" for line in extra.strip().splitlines())
    return POOL.format(name=name, capacity=capacity, price=price, extra=body)


def run(
    tmp_path: Path,
    pools: str,
    rows: list[str],
    provisioning: str = "{}",
    labels: str = "{}",
    checks: str = "[]",
    extra: str = "",
    quota: int = 256,
    header: str = HEADER,
    settings: str = "{}",
) -> tuple[SimResult, Provisioner]:
    (tmp_path / "cluster.yaml").write_text(
        QUEUE.format(labels=labels, checks=checks, quota=quota) + pools + extra
    )
    (tmp_path / "trace.csv").write_text(header + "\n".join(rows) + "\n")
    (tmp_path / "scenario.yaml").write_text(
        "apiVersion: gpuq.dev/v1alpha1\nkind: Scenario\nmetadata: {name: t}\nspec:\n"
        "  config: [cluster.yaml]\n  workloads: {trace: {path: trace.csv}}\n"
        f"  provisioning: {provisioning}\n  settings: {settings}\n"
    )
    plan = plan_scenario([str(tmp_path / "scenario.yaml")])
    prepared = prepare(plan, plan.variants[0], load_workloads(plan))
    assert not prepared.bad_rows, prepared.bad_rows
    simulation = prepared.simulation()
    result = simulation.run()
    assert isinstance(simulation.provisioning, Provisioner)
    return result, simulation.provisioning


def log(prov: Provisioner, *kinds: str) -> list[tuple[float, str, str]]:
    return [(t, kind, subject) for t, kind, subject, _ in prov.log if kind in kinds]


def times(result: SimResult, key: str) -> tuple[float | None, float | None, WorkloadState]:
    r = result.runs[key]
    return r.first_started, r.ended, r.status


AUTOSCALED = (
    "autoscaling: {min: 0, max: 2}\nprovisioning: {boot: 60s, driverInstall: 30s, imagePull: 30s}\n"
    "scaleDown: {idleAfter: 10m}"
)


def test_pool_max_caps_arrivals_and_scales_to_zero_after_idle(tmp_path: Path) -> None:
    rows = [f"a{i},team-a,q,0,3600,,1,8,,,," for i in (1, 2, 3)]
    result, prov = run(tmp_path, pool("box", AUTOSCALED), rows)
    # Two nodes (max 2) arrive after 60+30+30 s; the third job waits for a node to free up.
    assert log(prov, "scale-up", "not-scaled", "scale-down") == [
        (0.0, "scale-up", "box"),
        (0.0, "scale-up", "box"),
        (0.0, "not-scaled", "team-a/a3"),
        (4320.0, "scale-down", "box-01"),  # idle from 3720 for idleAfter 600 s
        # then to zero (min 0): a3, admitted at 0 with no node, timed out of waitForPodsReady
        # (on by default) at 1800 and 3660, back at 3780 after 120 s of backoff, ran to 7380
        (7980.0, "scale-down", "box-00"),
    ]
    assert [times(result, f"team-a/a{i}") for i in (1, 2, 3)] == [
        (120.0, 3720.0, WorkloadState.SUCCEEDED),
        (120.0, 3720.0, WorkloadState.SUCCEEDED),
        (3780.0, 7380.0, WorkloadState.SUCCEEDED),  # after its second PodsReady timeout
    ]
    assert prov.counters.nodes_added == 2


def test_workloads_arriving_while_a_node_boots_wait_for_its_room_instead_of_ordering_more(
    tmp_path: Path,
) -> None:
    """As the cluster autoscaler counts upcoming nodes: three 2-GPU jobs 10 s apart need one 8-GPU
    node, not three; the first orders it (ready at 120 s), the others take the room left on it."""
    rows = [f"n{i},team-a,q,{10 * i},600,,1,2,,,," for i in (0, 1, 2)]
    result, prov = run(tmp_path, pool("box", AUTOSCALED.replace("max: 2", "max: 3")), rows)
    assert log(prov, "scale-up", "upcoming") == [
        (0.0, "scale-up", "box"),
        (10.0, "upcoming", "team-a/n1"),
        (20.0, "upcoming", "team-a/n2"),
    ]
    assert prov.counters.nodes_added == 1
    assert [times(result, f"team-a/n{i}")[0] for i in (0, 1, 2)] == [120.0, 120.0, 120.0]


CLASS = """\
---
apiVersion: gpuq.dev/v1alpha1
kind: ComputeClass
metadata: {name: training}
spec:
  priorities:
  - {machineType: a3-highgpu-8g, spot: true}
  - {machineType: a3-highgpu-8g}
  activeMigration: {optimizeRulePriority: true}
"""
CLASS_LABELS = "{cloud.google.com/compute-class: training}"


def test_stock_out_falls_down_the_class_rules_and_migrates_back(tmp_path: Path) -> None:
    labels = (
        "labels: {cloud.google.com/compute-class: training}\nautoscaling: {min: 0, max: 1}\n"
        "provisioning: {boot: 60s}"
    )
    spot = pool("spot", labels + "\nstock: [{available: 0}, {available: 1, from: 1h}]", "spot", 30)
    demand = pool("demand", labels, "on-demand", 88)
    result, prov = run(
        tmp_path, spot + demand, ["job,team-a,q,0,14400,,1,8,,,,1800"], labels=CLASS_LABELS, extra=CLASS
    )
    assert log(prov, "scale-up", "fallback", "migrate") == [
        (0.0, "fallback", "team-a/job"),  # rule 0 (spot) is out of stock: rule 1
        (0.0, "scale-up", "demand"),
        (3600.0, "migrate", "team-a/job"),  # spot stock is back: order a spot node first
        (3600.0, "scale-up", "spot"),
        (3660.0, "migrate", "demand-00"),  # drained once the spot node is ready
    ]
    job = result.runs["team-a/job"]
    # Ran 60..3660 on demand (3600 s, two 1800 s checkpoints: nothing lost), then on spot.
    assert (job.evictions, job.lost_gpu_s, job.ended) == (1, 0.0, 3660 + 14400 - 3600)
    assert prov.counters.fallbacks == 1 and prov.counters.migrations == 1


CONSOLIDATING = (
    "count: 2\nautoscaling: {min: 0, max: 2}\nscaleDown: {idleAfter: 10h}\n"
    "disruption: {consolidationPolicy: WhenEmptyOrUnderutilized}"
)


@pytest.mark.parametrize(
    ("name", "pdbs", "expected"),
    [
        ("without a budget the half-empty node is consolidated", "[]", [(1000.0, "consolidate", "box-00")]),
        (
            "a PodDisruptionBudget on the long jobs blocks it",
            "[{name: long, namespace: team-a, selector: {app: long}, minAvailable: 2}]",
            [(1000.0, "consolidation-blocked", "box-00"), (1000.0, "consolidation-blocked", "box-01")],
        ),
    ],
)
def test_consolidation_respects_a_pod_disruption_budget(
    tmp_path: Path, name: str, pdbs: str, expected: list[tuple[float, str, str]]
) -> None:
    rows = [
        "short-1,team-a,q,0,1000,,1,4,,,,",
        "long-1,team-a,q,0,9000,,1,4,,,,",
        "long-2,team-a,q,0,9000,,1,4,,,,",
    ]
    result, prov = run(tmp_path, pool("box", CONSOLIDATING), rows, f"{{podDisruptionBudgets: {pdbs}}}")
    assert log(prov, "consolidate", "consolidation-blocked") == expected, name
    moved = result.runs["team-a/long-1"].evictions
    assert moved == (1 if pdbs == "[]" else 0)


@pytest.mark.parametrize(
    ("name", "stock", "expected", "status"),
    [
        (
            "4 nodes with 3 in stock wait, retry with backoff 60/120/240 s and are rejected",
            "stock: [{available: 3}]",
            [
                (0.0, "request", "team-a/big"),
                (0.0, "request-waiting", "team-a/big"),
                (600.0, "request-failed", "team-a/big"),
                (660.0, "request-retry", "team-a/big"),
                (660.0, "request-waiting", "team-a/big"),
                (1260.0, "request-failed", "team-a/big"),
                (1380.0, "request-retry", "team-a/big"),
                (1380.0, "request-waiting", "team-a/big"),
                (1980.0, "request-failed", "team-a/big"),
                (2220.0, "request-retry", "team-a/big"),
                (2220.0, "request-waiting", "team-a/big"),
                (2820.0, "request-rejected", "team-a/big"),
            ],
            WorkloadState.INACTIVE,
        ),
        (
            "the fourth node comes back in stock: all four are provisioned together",
            "stock: [{available: 3}, {available: 4, from: 1000s}]",
            [
                (0.0, "request", "team-a/big"),
                (0.0, "request-waiting", "team-a/big"),
                (600.0, "request-failed", "team-a/big"),
                (660.0, "request-retry", "team-a/big"),
                (660.0, "request-waiting", "team-a/big"),
                (1060.0, "request-provisioned", "team-a/big"),
                (4660.0, "request-released", "team-a/big"),
            ],
            WorkloadState.SUCCEEDED,
        ),
    ],
)
def test_queued_provisioning_is_all_or_nothing_with_backoff(
    tmp_path: Path, name: str, stock: str, expected: list[tuple[float, str, str]], status: WorkloadState
) -> None:
    spec = f"autoscaling: {{min: 0, max: 8}}\nprovisioning: {{boot: 60s}}\nlabels: {{dws: 'yes'}}\n{stock}"
    result, prov = run(
        tmp_path,
        pool("flex", spec, "flex-start", 50),
        ["big,team-a,q,0,3600,,4,8,,,,"],
        "{queued: {attemptTimeout: 10m}}",
        labels="{dws: 'yes'}",
        checks="[{name: dws}]",
        extra=DWS.format(klass="check-capacity.autoscaling.x-k8s.io", params="{}"),
    )
    kinds = ("request", "request-waiting", "request-failed", "request-retry", "request-provisioned")
    assert log(prov, *kinds, "request-rejected", "request-released") == expected, name
    assert result.runs["team-a/big"].status == status
    # Nothing partial: either no node ever joined, or all four at once.
    assert prov.counters.nodes_added in (0, 4)
    if status == WorkloadState.SUCCEEDED:
        assert times(result, "team-a/big")[:2] == (1060.0, 4660.0)
        assert prov.queued.waits_s == [1060.0]


def test_a_failed_attempt_releases_the_quota_through_its_backoff(tmp_path: Path) -> None:
    # Kueue: a failed ProvisioningRequest sets the check to Retry; the workload is evicted (quota
    # released) and requeued after the backoff, then gets a new attempt when it has quota again.
    spec = "autoscaling: {min: 0, max: 8}\nprovisioning: {boot: 60s}\nlabels: {dws: 'yes'}\n"
    spec += "stock: [{available: 3}]"
    result, prov = run(
        tmp_path,
        pool("flex", spec, "flex-start", 50),
        ["big,team-a,q,0,3600,,4,8,,,,", "small,team-a,q,100,60,,1,8,,,,"],
        "{queued: {attemptTimeout: 10m}}",
        labels="{dws: 'yes'}",
        checks="[{name: dws}]",
        extra=DWS.format(klass="check-capacity.autoscaling.x-k8s.io", params="{}"),
        quota=32,
    )
    kinds = ("request", "request-failed", "request-retry", "request-provisioned", "request-rejected")
    assert log(prov, *kinds, "request-released") == [
        (0.0, "request", "team-a/big"),  # 32 of 32 GPUs of quota; 3 of 4 nodes in stock
        (600.0, "request-failed", "team-a/big"),  # Retry: evicted, requeued at 660
        (600.0, "request", "team-a/small"),  # the quota big released
        (660.0, "request-provisioned", "team-a/small"),
        (720.0, "request-retry", "team-a/big"),  # small finished: big has its quota back, attempt 2
        (720.0, "request-released", "team-a/small"),
        (1320.0, "request-failed", "team-a/big"),  # backoff 120 s
        (1440.0, "request-retry", "team-a/big"),
        (2040.0, "request-failed", "team-a/big"),  # backoff 240 s
        (2280.0, "request-retry", "team-a/big"),
        (2880.0, "request-rejected", "team-a/big"),  # attempt 4 > backoffLimitCount 3
    ]
    big, small = result.runs["team-a/big"], result.runs["team-a/small"]
    assert (big.status, big.evictions, big.ended) == (WorkloadState.INACTIVE, 3, 2880.0)
    assert (small.status, small.first_admitted, small.ended) == (WorkloadState.SUCCEEDED, 600.0, 720.0)
    assert prov.queued.counts == {"created": 2, "provisioned": 1, "retries": 3, "rejected": 1, "reclaimed": 0}


def test_flex_start_stops_the_run_at_max_run_duration(tmp_path: Path) -> None:
    spec = "autoscaling: {min: 0, max: 2}\nprovisioning: {boot: 60s}\nlabels: {dws: 'yes'}"
    result, prov = run(
        tmp_path,
        pool("flex", spec, "flex-start", 50),
        ["train,team-a,q,0,7200,,1,8,,,,1500"],
        labels="{dws: 'yes'}",
        checks="[{name: dws}]",
        extra=DWS.format(klass="queued-provisioning.gke.io", params="{maxRunDurationSeconds: '3600'}"),
    )
    # Nodes at 60, capped at 3660: 3600 s ran, 3000 s checkpointed, 600 s x 8 GPUs lost; again at
    # 3720..7320 (3000 s saved, 1200 s left), then 7380..8580.
    assert log(prov, "request-provisioned", "request-reclaimed") == [
        (60.0, "request-provisioned", "team-a/train"),
        (3660.0, "request-reclaimed", "team-a/train"),
        (3720.0, "request-provisioned", "team-a/train"),
        (7320.0, "request-reclaimed", "team-a/train"),
        (7380.0, "request-provisioned", "team-a/train"),
    ]
    train = result.runs["team-a/train"]
    assert (train.status, train.ended, train.evictions) == (WorkloadState.SUCCEEDED, 8580.0, 2)
    assert train.lost_gpu_s == 2 * 600 * 8


@pytest.mark.parametrize(
    ("name", "duration", "status", "ended"),
    [
        ("a job that ends inside the window runs at its start", 3600, WorkloadState.SUCCEEDED, 7200.0),
        ("a job too long for the window is not admitted into it", 90000, WorkloadState.INACTIVE, 3600.0),
    ],
)
def test_calendar_window_admits_only_jobs_that_end_before_it_closes(
    tmp_path: Path, name: str, duration: int, status: WorkloadState, ended: float
) -> None:
    spec = "autoscaling: {min: 0, max: 2}\nprovisioning: {boot: 60s}\nlabels: {dws: 'yes'}"
    result, _prov = run(
        tmp_path,
        pool("cal", spec, "calendar", 50),
        [f"job,team-a,q,0,{duration},,1,8,,,,"],
        "{queued: {checks: {dws: {mode: calendar, windowStart: 1h, windowEnd: 25h}}}}",
        labels="{dws: 'yes'}",
        checks="[{name: dws}]",
        extra=DWS.format(klass="check-capacity.autoscaling.x-k8s.io", params="{}"),
    )
    job = result.runs["team-a/job"]
    assert (job.status, job.ended) == (status, ended), name


SPOT = "count: 1\nprovisioning: {boot: 0s}"


@pytest.mark.parametrize(
    ("name", "checkpoint", "lost_s"),
    [
        ("with 30 min checkpoints only the work since 1800 s is lost", "1800", 3030 - 1800),
        ("without checkpoints everything since the start is lost", "", 3030),
    ],
)
def test_spot_interruption_loses_the_work_since_the_last_checkpoint(
    tmp_path: Path, name: str, checkpoint: str, lost_s: int
) -> None:
    result, prov = run(
        tmp_path,
        pool("spot", SPOT, "spot", 30),
        [f"job,team-a,q,0,7200,,1,8,,,,{checkpoint}"],
        "{spot: {trace: [{at: 3000s, node: spot-00}]}}",
    )
    assert log(prov, "spot-notice", "spot-interrupt") == [
        (3000.0, "spot-notice", "spot-00"),
        (3030.0, "spot-interrupt", "spot-00"),  # GCP's 30 s notice
    ]
    job = result.runs["team-a/job"]
    assert job.lost_gpu_s == lost_s * 8, name
    assert prov.counters.spot_lost_gpu_s == lost_s * 8
    saved = 1800 if checkpoint else 0
    assert job.ended == 3030 + 7200 - saved  # the replacement node joins at once (boot 0 s)


@pytest.mark.parametrize(
    ("name", "trace", "ended", "lost_s", "written"),
    [
        # 7200 s of work, a checkpoint every 1800 s of work costing 60 s: 3 checkpoints (none after
        # the last piece), 7200 + 3 x 60 = 7380 s.
        ("each checkpoint adds its cost to the run", "[]", 7380.0, 0, 3),
        # Interrupted at 3030 (notice at 3000 + 30 s): one checkpoint done at 1800 + 60 = 1860, so
        # 1800 s of work kept and 3030 - 1860 = 1170 s lost; the 5400 s left take 5400 + 2 x 60
        # from 3030 (the replacement joins at once): 8550.
        ("an interruption keeps the work up to the last completed checkpoint", "[{at: 3000s, node: spot-00}]",
         8550.0, 1170, 1 + 2),
    ],
)  # fmt: skip
def test_checkpoint_cost_lengthens_the_run_by_each_checkpoint_taken(
    tmp_path: Path, name: str, trace: str, ended: float, lost_s: int, written: int
) -> None:
    result, prov = run(
        tmp_path,
        pool("spot", SPOT, "spot", 30),
        ["job,team-a,q,0,7200,,1,8,,,,1800,60"],
        f"{{spot: {{trace: {trace}}}}}",
        header=HEADER.rstrip("\n") + ",checkpoint_cost_s\n",
    )
    job = result.runs["team-a/job"]
    assert (job.ended, job.lost_gpu_s, job.checkpoints) == (ended, lost_s * 8, written), name
    assert job.checkpoint_overhead_s == written * 60
    metrics = provisioning_metrics(prov, result, 4)
    assert metrics["spot"]["checkpoint_overhead_gpu_hours"] == written * 60 * 8 / 3600
    assert checkpoint_metrics(list(result.runs.values())) == {
        "written": written,
        "overhead_gpu_hours": round(written * 60 * 8 / 3600, 6),
        "lost_gpu_hours": round(lost_s * 8 / 3600, 6),
    }


def test_the_generator_reads_checkpoint_cost_beside_checkpoint_interval() -> None:
    generator = Generator.model_validate(
        {
            "horizon": "1h",
            "teams": [
                {"namespace": "a", "queue": "q", "every": "30m", "duration": "1h"}
                | {"checkpointInterval": "10m", "checkpointCost": "45s"}
            ],
        }
    )
    jobs = generate(generator, 1)
    assert [(j.checkpoint_s, j.checkpoint_cost_s) for j in jobs] == [(600.0, 45.0), (600.0, 45.0)]


def test_spot_interruptions_drawn_from_a_rate_are_seeded(tmp_path: Path) -> None:
    rows = ["job,team-a,q,0,36000,,1,8,,,,600"]
    provisioning = "{spot: {interruptionsPerNodeHour: {spot: 0.5}, provider: aws}}"
    first = run(tmp_path, pool("spot", SPOT, "spot", 30), rows, provisioning)[1]
    again = run(tmp_path, pool("spot", SPOT, "spot", 30), rows, provisioning)[1]
    assert first.log == again.log
    notices = log(first, "spot-notice")
    interrupts = log(first, "spot-interrupt")
    assert notices and [t + 120 for t, _, _ in notices[: len(interrupts)]] == [t for t, _, _ in interrupts]


@pytest.mark.parametrize(
    ("name", "extra", "provisioning", "left_at"),
    [
        ("a rate's next notice", "", "{spot: {interruptionsPerNodeHour: {spot: 0.05}}}", 69728.04906741648),
        ("a trace's interruption", "", "{spot: {trace: [{at: 5h, node: spot-00}]}}", 18000.0),
        ("a stock step", "\nstock: [{available: 1}, {available: 2, from: 3h}]", "{}", 10800.0),
    ],
)
def test_spot_and_stock_events_alone_do_not_keep_the_run_alive(
    tmp_path: Path, name: str, extra: str, provisioning: str, left_at: float
) -> None:
    """They share the simulation's one event heap but stop counting once no workload is left: the
    run ends at the node's idle timer (600 s after the job), the background event never applied."""
    result, prov = run(
        tmp_path, pool("spot", SPOT + extra, "spot", 30), ["job,team-a,q,0,600,,1,8,,,,"], provisioning
    )
    assert result.runs["team-a/job"].ended == 600.0
    assert result.span_s == 1200.0, name
    assert prov.log == []
    assert prov._sim is not None
    queue = prov._sim.queue
    assert len(queue) == 0  # no core event left
    assert queue.peek_time() == left_at and queue.peek_time(background=False) is None


def test_cost_attribution_adds_up_to_the_total_bill(tmp_path: Path) -> None:
    rows = [
        "a1,team-a,q,0,3600,,1,4,,,,",
        "b1,team-b,q,0,1800,,1,2,,,,",
        "b2,team-b,q,100,7200,,1,8,,,,",
    ]
    result, prov = run(tmp_path, pool("box", AUTOSCALED) + pool("spare", "count: 1", price=40), rows)
    cost = cost_metrics(prov, result)
    total = cost["total"]
    assert math.isclose(sum(cost["by_namespace"].values()) + cost["idle"], total, abs_tol=1e-5)
    assert math.isclose(sum(cost["by_cluster_queue"].values()) + cost["idle"], total, abs_tol=1e-5)
    assert math.isclose(sum(cost["by_pool"].values()), total, abs_tol=1e-5)
    assert math.isclose(sum(cost["by_capacity_type"].values()), total, abs_tol=1e-5)
    assert cost["by_namespace"]["team-b"] > 0 and cost["idle"] > 0


def test_a_flavor_no_pool_can_serve_is_refused_naming_the_flavor(tmp_path: Path) -> None:
    # The flavor selects dws=yes; the only pool (even at max) does not carry it: Kueue would admit
    # on quota and the workload would hold it for the whole run without a node.
    with pytest.raises(ScenarioError) as caught:
        run(tmp_path, pool("box", AUTOSCALED), ["a1,team-a,q,0,3600,,1,8,,,,"], labels="{dws: 'yes'}")
    (diagnostic,) = caught.value.diagnostics
    assert (diagnostic.kind, diagnostic.name, diagnostic.field) == (
        "ResourceFlavor",
        "gpu",
        "spec.nodeLabels",
    )
    assert "dws=yes" in diagnostic.message


def test_the_capacity_example_leaves_no_workload_holding_quota_without_a_node() -> None:
    # Regression: the on-demand variant's pool for the spot flavor lacked the flavor's gke-spot
    # label, so 10 workloads were admitted on that flavor and ended the run "running" on no node.
    plan = plan_scenario([str(EXAMPLE)], compare=True)
    trace = load_workloads(plan)
    for variant in plan.variants:
        result = prepare(plan, variant, trace).simulation().run()
        left = sorted(k for k, r in result.runs.items() if r.status != WorkloadState.SUCCEEDED)
        assert left == [], variant.name


READY_TIMEOUT_1H = """---
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
waitForPodsReady: {timeout: 1h}
"""


def test_idle_alerts_per_pool_and_per_namespace(tmp_path: Path) -> None:
    # One fixed 8-GPU node, a 4-GPU job bound at 0 that starts 40 min later (the start-up delay) and
    # runs 1 h (2400..6000); the run ends at 6600 (the node's idle check, idleAfter 10 min). The
    # start-up is longer than Kueue's default 30 min waitForPodsReady timeout: given 1 h.
    result, prov = run(
        tmp_path,
        pool("box", "count: 1"),
        ["a1,team-a,q,0,3600,,1,4,,,,"],
        "{idleAlertAfter: 30m}",
        extra=READY_TIMEOUT_1H,
        settings="{startupDelay: 40m}",
    )
    assert times(result, "team-a/a1") == (2400.0, 6000.0, WorkloadState.SUCCEEDED)
    assert result.span_s == 6600.0
    cost = cost_metrics(prov, result)
    # Four GPUs never allocated: free 0..6600, four alerts. The job's four: free 6000..6600, under
    # the 30 min threshold. Unallocated: 4 x 6600 + 4 x 600 = 28800 GPU-s = 8 GPU-h.
    assert cost["idle_alerts"]["by_pool"] == {
        "box": {"count": 4, "idle_gpu_hours": round(4 * 6600 / 3600, 6)}
    }
    assert cost["idle_gpu_hours"]["unallocated_by_pool"] == {"box": 8.0}
    # The job's GPUs allocated but unused for 2400 s (> 30 min): one alert for team-a.
    unused = round(4 * 2400 / 3600, 6)
    assert cost["idle_gpu_hours"]["allocated_unused_by_namespace"] == {"team-a": unused}
    assert cost["idle_alerts"]["allocated_unused_by_namespace"] == {
        "team-a": {"count": 1, "idle_gpu_hours": unused}
    }


def test_a_start_up_longer_than_the_ready_timeout_stops_the_run_instead_of_looping(tmp_path: Path) -> None:
    """Kueue's default waitForPodsReady (30 min, requeued for ever) against a 40 min start-up: the
    workload times out on every admission; with nothing else left to happen the run stops."""
    result, _ = run(
        tmp_path, pool("box", "count: 1"), ["a1,team-a,q,0,3600,,1,4,,,,"], settings="{startupDelay: 40m}"
    )
    a1 = result.runs["team-a/a1"]
    assert (a1.first_started, a1.ended) == (None, None)
    assert a1.ready_timeouts > 64


def test_the_report_shows_cost_and_a_provisioning_timeline_only_with_provisioning(tmp_path: Path) -> None:
    result, prov = run(
        tmp_path,
        pool("spot", SPOT, "spot", 30),
        ["job,team-a,q,0,7200,,1,8,,,,1800"],
        "{spot: {trace: [{at: 3000s, node: spot-00}]}}",
    )
    timeline = provisioning_metrics(prov, result, 8)
    # Ends at 9030 (finish at 8430, the node's idle check 600 s later): bins of 1128.75 s, the
    # interruption at 3030 s in the third.
    assert result.span_s == 9030.0
    assert timeline["timeline"]["spot_interruptions"] == [0, 0, 1, 0, 0, 0, 0, 0]
    variant = {"name": "spot", "provisioning": timeline, "cost_attribution": cost_metrics(prov, result)}
    page = render_report({"variants": [variant]})
    assert '<section id="cost">' in page and '<section id="provisioning">' in page
    assert 'id="fig-provisioning"' in page and "spot interruptions" in page
    assert "<td>team-a</td>" in page  # the bill per namespace
    plain = render_report({"variants": [{"name": "spot"}]})
    assert '<section id="cost">' not in plain and '<section id="provisioning">' not in plain
