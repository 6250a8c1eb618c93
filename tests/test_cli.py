"""The ``gpuq`` command as a user runs it: exit codes, output shapes, error lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuq.cli import app

EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "symbol-retail")
NOW = "1796023000"
GPU_ESTATE = str(Path(__file__).resolve().parents[1] / "examples" / "gpu-estate")
runner = CliRunner()

QUEUE = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: default}
spec: {clusterQueue: team}
"""


def job(name: str, gpus: int, created: str) -> str:
    return f"""\
---
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: default
  creationTimestamp: "{created}"
  labels: {{kueue.x-k8s.io/queue-name: q}}
spec:
  template:
    spec:
      containers:
      - name: c
        image: busybox
        resources: {{requests: {{nvidia.com/gpu: "{gpus}"}}}}
"""


FAIR_SHARING = str(Path(EXAMPLE).parent / "configs" / "fair-sharing.yaml")


@pytest.mark.parametrize(
    "files",
    [[EXAMPLE], [EXAMPLE, FAIR_SHARING]],
    ids=["the bundled example", "the bundled example with Kueue's fair sharing on"],
)
def test_validate_accepts(files: list[str]) -> None:
    args = ["validate"] + [arg for f in files for arg in ("-f", f)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "valid: 3 ClusterQueue(s)" in result.output


def test_the_fair_sharing_configuration_turns_fair_sharing_on() -> None:
    from gpuq.api.loader import load_or_raise

    config, _ = load_or_raise([EXAMPLE, FAIR_SHARING])
    assert config.scheduler.fair_sharing.enable


def test_admit_json_has_the_documented_shape() -> None:
    result = runner.invoke(app, ["admit", "-f", EXAMPLE, "-o", "json", "--now", NOW])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert list(document) == ["cycles", "admitted", "preempted", "pending", "unplaced"]
    ranker = document["admitted"]["recsys/pytorchjob-holiday-ranker-97845"]
    assert {binding["node"] for binding in ranker["pods"].values()} <= {
        f"{pool}-{i:02d}" for pool in ("a100-reserved", "h100-ondemand") for i in range(4)
    }
    assert ranker["clusterQueue"] == "recsys"
    assert ranker["podSets"]["worker"] == {
        "count": 4,
        "flavors": {"cpu": "h100-ondemand", "memory": "h100-ondemand", "nvidia.com/gpu": "h100-ondemand"},
    }
    victim = {"by": "recsys/job-feature-backfill-5d0bc", "reason": "InCohortReclamation"}
    assert document["preempted"] == {"research/notebook-vision-sweep": victim}
    tokenizer = document["pending"]["research/pod-notebook-tokenizer-14d8b"]
    assert "insufficient unused quota for nvidia.com/gpu" in tokenizer


def test_admit_one_cycle_is_exactly_one_kueue_cycle() -> None:
    result = runner.invoke(app, ["admit", "-f", EXAMPLE, "--cycles", "1", "-o", "json", "--now", NOW])
    document = json.loads(result.stdout)
    assert document["cycles"] == 1
    assert document["preempted"] == {}
    assert sorted(document["admitted"]) == [
        "llm-finetune/job-llama-sft-returns-75064",
        "recsys/pytorchjob-holiday-ranker-97845",
        "research/pod-notebook-ab-analysis-05457",
    ]


def test_admit_yaml_matches_json() -> None:
    as_json = json.loads(runner.invoke(app, ["admit", "-f", EXAMPLE, "-o", "json", "--now", NOW]).stdout)
    as_yaml = yaml.safe_load(runner.invoke(app, ["admit", "-f", EXAMPLE, "-o", "yaml", "--now", NOW]).stdout)
    assert as_json == as_yaml


def test_admit_table_names_every_section() -> None:
    result = runner.invoke(app, ["admit", "-f", EXAMPLE, "--now", NOW])
    assert result.exit_code == 0
    for title in ("Admitted", "Preempted", "Pending", "Quota usage"):
        assert title in result.stdout


def test_admit_reads_stdin() -> None:
    manifests = QUEUE + job("small", 2, "2026-01-01T00:00:00Z") + job("big", 4, "2026-01-01T00:01:00Z")
    result = runner.invoke(app, ["admit", "-f", "-", "-o", "json", "--now", NOW], input=manifests)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (admitted,) = document["admitted"]
    assert admitted.startswith("default/job-small-")
    (big,) = document["pending"].values()
    assert "insufficient unused quota for nvidia.com/gpu in flavor gpu, 2 more needed" in big


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("kind: [unclosed\n", "bad.yaml:2: malformed YAML"),
        ("apiVersion: kueue.x-k8s.io/v1beta2\nkind: Gizmo\nmetadata: {name: g}\n", "Gizmo"),
        (
            QUEUE.replace("nominalQuota: 4", "nominalQuota: -4"),
            "ClusterQueue/team: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
        ),
    ],
    ids=["malformed YAML names the line", "an unknown kind is an error", "a negative quota names its field"],
)
def test_validate_reports_errors_with_location_and_exit_1(tmp_path: Path, text: str, expected: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    result = runner.invoke(app, ["validate", "-f", str(bad)])
    assert result.exit_code == 1
    assert expected in result.stderr
    assert str(bad) in result.stderr


def test_admit_refuses_invalid_manifests(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(QUEUE.replace("nominalQuota: 4", "nominalQuota: -4"))
    result = runner.invoke(app, ["admit", "-f", str(bad)])
    assert result.exit_code == 1
    assert "nominalQuota" in result.stderr


def test_admit_leaves_the_workloads_of_a_local_queue_without_cluster_queue_pending(tmp_path: Path) -> None:
    lost = tmp_path / "lost.yaml"
    lost.write_text(
        QUEUE.replace("clusterQueue: team", "clusterQueue: missing") + job("a", 1, "2026-01-01T00:00:00Z")
    )
    result = runner.invoke(app, ["admit", "-f", str(lost), "-o", "json"])
    assert result.exit_code == 0, result.output
    assert "ClusterQueue missing doesn't exist" in result.stdout
    assert runner.invoke(app, ["validate", "-f", str(lost)]).exit_code == 1


CREATED = "2026-01-01T00:00:00Z"
# id, the job, the line validate names, what it reports (Kind/name: field: message), admit's message
NEVER_ADMITTED = [
    pytest.param(
        job("huge", 100_000, CREATED),
        "apiVersion: batch/v1",
        "Job/huge: spec.podSets[0]: pod set 'main' needs 100000 nvidia.com/gpu (1 pods) but cluster queue "
        "team can never hold more than 4 in any flavor",
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor gpu, "
        "request > maximum capacity (100000 > 4)",
        id="a job asking for 100,000 GPUs",
    ),
    pytest.param(
        job("lost", 1, CREATED).replace("queue-name: q}", "queue-name: nope}"),
        "  labels: {kueue.x-k8s.io/queue-name: nope}",
        "Job/lost: metadata.labels[kueue.x-k8s.io/queue-name]: LocalQueue 'nope' not found in namespace "
        "'default'",
        "LocalQueue nope doesn't exist in namespace default",
        id="a job naming a LocalQueue that does not exist",
    ),
]


def _never_admitted(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(QUEUE + job("small", 1, CREATED) + text)
    return path


@pytest.mark.parametrize(("text", "line", "reported", "pending"), NEVER_ADMITTED)
def test_validate_reports_a_job_kueue_never_admits_as_an_error(
    tmp_path: Path, text: str, line: str, reported: str, pending: str
) -> None:
    path = _never_admitted(tmp_path, text)
    result = runner.invoke(app, ["validate", "-f", str(path)])
    assert result.exit_code == 1
    lines = path.read_text().splitlines()
    number = 1 + max(i for i, written in enumerate(lines) if written == line)
    assert f"{path}:{number}: {reported}\n" in result.stderr
    assert "1 error(s)" in result.stderr


@pytest.mark.parametrize(("text", "line", "reported", "pending"), NEVER_ADMITTED)
def test_admit_loads_a_job_kueue_never_admits_and_leaves_it_pending(
    tmp_path: Path, text: str, line: str, reported: str, pending: str
) -> None:
    path = str(_never_admitted(tmp_path, text))
    result = runner.invoke(app, ["admit", "-f", path, "-o", "json", "--now", NOW])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (admitted,) = document["admitted"]
    assert admitted.startswith("default/job-small-")
    assert list(document["pending"].values()) == [pending]


def test_a_job_without_a_queue_label_is_a_warning_and_stays_pending(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(QUEUE + job("bare", 1, CREATED).replace("  labels: {kueue.x-k8s.io/queue-name: q}\n", ""))
    validated = runner.invoke(app, ["validate", "-f", str(path)])
    assert validated.exit_code == 0, validated.output
    assert (
        "Job/bare: metadata.labels[kueue.x-k8s.io/queue-name]: warning: Job default/bare has no "
        "kueue.x-k8s.io/queue-name label: Kueue does not manage it (manageJobsWithoutQueueName is false); "
        "on a real cluster it runs outside quota"
    ) in " ".join(validated.stderr.split())
    assert "spec.queueName" not in validated.stderr
    admitted = runner.invoke(app, ["admit", "-f", str(path), "-o", "json", "--now", NOW])
    assert admitted.exit_code == 0, admitted.output
    pending = json.loads(admitted.stdout)["pending"]
    assert list(pending.values()) == ["workload has no queue name (label kueue.x-k8s.io/queue-name)"]


GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize(
    ("files", "golden"),
    [
        ([EXAMPLE], "symbol-retail-admit.json"),
        ([EXAMPLE, FAIR_SHARING], "symbol-retail-fair-sharing-admit.json"),
        ([GPU_ESTATE], "gpu-estate-admit.json"),
    ],
    ids=[
        "the bundled example",
        "the bundled example under fair sharing",
        "topology, MIG and fractional GPUs",
    ],
)
def test_admit_output_matches_the_golden_file(files: list[str], golden: str) -> None:
    """The example's decisions are pinned; regenerate with ``gpuq admit ... -o json --now 1796023000``."""
    args = ["admit", "-o", "json", "--now", NOW] + [arg for f in files for arg in ("-f", f)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads((GOLDEN / golden).read_text())


# ---------------------------------------------------------------------------------------- nodes
NODES = """\
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {name: l4}
spec:
  machineType: g2-standard-24
  count: 2
  cpu: "24"
  memory: 96Gi
  gpu: {model: L4, count: 2}
"""

MIG_NODES = """\
apiVersion: gpuq.dev/v1alpha1
kind: NodePool
metadata: {name: mig}
spec:
  machineType: a2-ultragpu-1g
  count: 1
  cpu: "12"
  memory: 170Gi
  gpu:
    model: A100-80GB
    count: 1
    sharing: {strategy: mig-mixed, migLayout: [3g.40gb, 2g.20gb, 1g.10gb]}
"""


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_admit_with_nodes_binds_pods_and_reports_unplaced(tmp_path: Path) -> None:
    queue = _write(tmp_path, "queue.yaml", QUEUE + "---\n" + _job("three", 3))
    nodes = _write(tmp_path, "nodes.yaml", NODES.replace("count: 2\n  cpu", "count: 1\n  cpu"))
    result = runner.invoke(app, ["admit", "-f", queue, "--nodes", nodes, "-o", "json", "--now", NOW])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (key,) = document["admitted"]
    assert document["unplaced"] == {key: "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}, (
        "quota admits 3 GPUs; one 2-GPU node holds two pods of one GPU, not three"
    )


def _job(name: str, gpus: int) -> str:
    return f"""\
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: default
  labels: {{kueue.x-k8s.io/queue-name: q}}
spec:
  parallelism: {gpus}
  completions: {gpus}
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: trainer
        resources: {{requests: {{nvidia.com/gpu: 1}}, limits: {{nvidia.com/gpu: 1}}}}
"""


def test_admit_with_nodes_binds_every_pod(tmp_path: Path) -> None:
    files = [
        _write(tmp_path, "queue.yaml", QUEUE + "---\n" + _job("two", 2)),
        _write(tmp_path, "n.yaml", NODES),
    ]
    result = runner.invoke(app, ["admit", "-f", files[0], "-f", files[1], "-o", "json", "--now", NOW])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (workload,) = document["admitted"].values()
    assert sorted(workload["pods"]) == ["main-0", "main-1"]
    assert {pod["node"] for pod in workload["pods"].values()} == {"l4-00"}, "binpack fills one node first"
    assert document["unplaced"] == {}


def test_get_nodes_lists_devices(tmp_path: Path) -> None:
    files = [_write(tmp_path, "n.yaml", NODES), _write(tmp_path, "m.yaml", MIG_NODES)]
    result = runner.invoke(app, ["get", "nodes", "-f", files[0], "-f", files[1], "-o", "json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert sorted(rows) == ["l4-00", "l4-01", "mig-00"]
    assert rows["l4-00"]["devices"] == {"nvidia.com/gpu": {"allocatable": 2, "allocated": 0, "free": 2}}
    assert rows["mig-00"]["devices"] == {
        f"nvidia.com/mig-{profile}": {"allocatable": 1, "allocated": 0, "free": 1}
        for profile in ("1g.10gb", "2g.20gb", "3g.40gb")
    }
    table = runner.invoke(app, ["get", "nodes", "-f", files[0]])
    assert table.exit_code == 0 and "l4-01" in table.stdout


def test_describe_node_shows_gfd_labels_mig_slices_and_pods(tmp_path: Path) -> None:
    path = _write(tmp_path, "m.yaml", MIG_NODES)
    result = runner.invoke(app, ["describe", "node", "mig-00", "-f", path])
    assert result.exit_code == 0, result.output
    detail = yaml.safe_load(result.stdout)
    assert detail["gfdLabels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert detail["gfdLabels"]["nvidia.com/mig.strategy"] == "mixed"
    assert detail["migLayout"][0] == {"gpu": 0, "slices": ["3g.40gb", "2g.20gb", "1g.10gb"]}


def test_describe_node_after_admission_lists_bound_pods() -> None:
    result = runner.invoke(app, ["describe", "node", "h100-spot-01", "-f", EXAMPLE, "--admit", "-o", "json"])
    assert result.exit_code == 0, result.output
    detail = json.loads(result.stdout)
    assert detail["boundPods"], "the example's spot node runs pods after admission"
    assert all(pod["pod"].startswith("llm-finetune/") for pod in detail["boundPods"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["describe", "node", "nope"], "node 'nope' not found"),
        (["get", "nodes"], "no nodes"),
    ],
    ids=["unknown node", "no nodes in the files"],
)
def test_node_commands_fail_clearly(tmp_path: Path, args: list[str], message: str) -> None:
    files = (
        [_write(tmp_path, "n.yaml", NODES)] if args[0] == "describe" else [_write(tmp_path, "q.yaml", QUEUE)]
    )
    result = runner.invoke(app, [*args, *(arg for f in files for arg in ("-f", f))])
    assert result.exit_code == 1
    assert message in result.stderr


def test_pack_is_a_gpuq_command(tmp_path: Path) -> None:
    nodes = _write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn1,96000,393216,2,T4\n")
    pods = _write(
        tmp_path,
        "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
        "scheduled_time\np1,4000,1024,1,500,,LS,Running,0,10,1\np2,4000,1024,1,1000,,LS,Running,0,10,1\n",
    )
    args = ["pack", "--nodes", nodes, "--pods", pods, "--policy", "fgd", "--tune", "1.0", "-o", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["policy"] == "fgd" and document["total_gpus"] == 2
    assert document["points"][0]["arrived_pct"] == 0


def test_validate_warns_about_a_pod_larger_than_every_node(tmp_path: Path) -> None:
    huge = _job("huge", 1).replace("nvidia.com/gpu: 1}", "nvidia.com/gpu: 16}")
    path = _write(tmp_path, "all.yaml", QUEUE.replace("nominalQuota: 4", "nominalQuota: 64") + "---\n" + huge)
    nodes = _write(tmp_path, "nodes.yaml", NODES)
    result = runner.invoke(app, ["validate", "-f", path, "-f", nodes])
    assert result.exit_code == 0, result.output
    assert "no node can hold one pod of pod set 'main' even when empty (Insufficient nvidia.com/gpu)" in (
        result.stderr
    )
    assert "Job/huge" in result.stderr


def test_the_gpu_estate_example_preempts_for_topology_and_refuses_what_no_host_holds() -> None:
    result = runner.invoke(app, ["admit", "-f", GPU_ESTATE, "-o", "json", "--now", NOW])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (urgent,) = [key for key in document["admitted"] if "eval-urgent" in key]
    assert document["preempted"] == {"research/finetune-b": {"by": urgent, "reason": "InClusterQueue"}}
    (sweep,) = [message for key, message in document["pending"].items() if "sweep" in key]
    assert 'topology "lab" allows to fit only 2 out of 3 pod(s)' in sweep
    nodes = {pod["node"] for pod in document["admitted"][urgent]["pods"].values()}
    assert nodes == {"h100-04", "h100-05"}, "the rack the fine-tune left"
    assert document["admitted"][urgent]["podSets"]["main"]["topologyAssignment"] == {
        "levels": ["kubernetes.io/hostname"],
        "domains": [{"values": ["h100-04"], "count": 1}, {"values": ["h100-05"], "count": 1}],
    }, "Kueue keeps only the hostname level when it is the lowest"
    notebook_gpus = [
        (pod["node"], pod["gpus"])
        for key, workload in document["admitted"].items()
        if "pod-nb-" in key
        for pod in workload["pods"].values()
    ]
    assert sorted(notebook_gpus)[0] == ("l4-shared-00", [0]), "GPU shares pack onto one GPU first"


def test_admit_warns_when_topology_cannot_be_checked(tmp_path: Path) -> None:
    tas = QUEUE.replace("metadata: {name: gpu}\n", "metadata: {name: gpu}\nspec: {topologyName: t}\n")
    topology = "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {name: t}\n"
    topology += "spec:\n  levels: [{nodeLabel: kubernetes.io/hostname}]\n"
    path = _write(tmp_path, "tas.yaml", tas + topology)
    result = runner.invoke(app, ["admit", "-f", path, "--now", NOW])
    assert result.exit_code == 0, result.output
    assert "flavor(s) gpu are topology-aware but no nodes were given" in result.stderr


IMPORT_DUMP = """\
apiVersion: v1
kind: List
items:
- apiVersion: kueue.x-k8s.io/v1beta1
  kind: ResourceFlavor
  metadata: {name: gpu}
- apiVersion: kueue.x-k8s.io/v1beta1
  kind: ClusterQueue
  metadata: {name: team}
  spec:
    namespaceSelector: {}
    resourceGroups:
    - coveredResources: [nvidia.com/gpu]
      flavors:
      - name: gpu
        resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
- apiVersion: kueue.x-k8s.io/v1beta1
  kind: LocalQueue
  metadata: {name: q, namespace: ml}
  spec: {clusterQueue: team}
- apiVersion: v1
  kind: Node
  metadata:
    name: gpu-node-1
    labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count: "8",
             node.kubernetes.io/instance-type: a3-highgpu-8g}
  status:
    allocatable: {cpu: "200", memory: 1800Gi, nvidia.com/gpu: "8", pods: "110"}
- apiVersion: kueue.x-k8s.io/v1beta1
  kind: Workload
  metadata: {name: huge, namespace: ml, creationTimestamp: "2025-06-01T10:00:00Z"}
  spec:
    queueName: q
    podSets:
    - name: main
      count: 1
      template:
        spec:
          containers:
          - name: c
            resources: {requests: {nvidia.com/gpu: "100000"}}
  status: {conditions: []}
"""


def test_import_k8s_keeps_a_pending_workload_kueue_never_admits(tmp_path: Path) -> None:
    (tmp_path / "dump.yaml").write_text(IMPORT_DUMP)
    out = tmp_path / "scenario"
    result = runner.invoke(app, ["import", "k8s", "-f", str(tmp_path / "dump.yaml"), "--out-dir", str(out)])
    assert result.exit_code == 0, result.output
    assert "can never hold more than 8 in any flavor: the workload stays pending" in " ".join(
        result.stderr.split()
    )
    state = yaml.safe_load_all((out / "state" / "workloads.yaml").read_text())
    assert [w["metadata"]["name"] for w in state if w] == ["huge"]


# Two cohorts whose workloads keep changing hands, with periods 5 and 7 (tests/core/test_cycles.py):
# no fixed period, so `gpuq admit` stops on no progress and says who churns and why.
CHURN_QUEUES = [  # (name, cohort, [(flavor, GPUs)], withinClusterQueue)
    ("a0", "a", [("f1", 2), ("f2", 3)], "LowerPriority"),
    ("a1", "a", [("f2", 1), ("f1", 0)], "LowerPriority"),
    ("b0", "b", [("f3", 3), ("f1", 1), ("f2", 1)], "Never"),
    ("b1", "b", [("f3", 0), ("f1", 3), ("f2", 0)], "LowerPriority"),
]
CHURN_JOBS = {  # cohort -> (index, queue, priority, GPUs)
    "a": [(0, 1, 1, 2), (1, 1, 2, 2), (2, 0, 1, 2), (3, 0, 2, 1), (4, 0, 0, 1), (5, 0, 2, 1), (6, 0, 2, 2)],
    "b": [
        (0, 1, 2, 1),
        (1, 1, 0, 2),
        (2, 1, 0, 1),
        (3, 0, 2, 2),
        (4, 1, 1, 2),
        (5, 1, 0, 1),
        (6, 1, 2, 2),
        (7, 0, 2, 2),
        (8, 1, 2, 2),
    ],
}


def _churning_snapshot(path: Path) -> Path:
    docs = [
        f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {{name: {f}}}\n"
        for f in ("f1", "f2", "f3")
    ]
    docs += [
        f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {{name: {c}}}\nspec: {{}}\n"
        for c in "ab"
    ]
    for name, cohort, flavors, within in CHURN_QUEUES:
        listed = "".join(
            f"    - name: {f}\n      resources: [{{name: nvidia.com/gpu, nominalQuota: {gpus}}}]\n"
            for f, gpus in flavors
        )
        docs.append(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\n"
            f"metadata: {{name: {name}}}\nspec:\n  cohortName: {cohort}\n  namespaceSelector: {{}}\n"
            f"  preemption: {{withinClusterQueue: {within}, reclaimWithinCohort: Any}}\n"
            "  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n" + listed
        )
        docs.append(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\n"
            f"metadata: {{name: {name}, namespace: default}}\nspec: {{clusterQueue: {name}}}\n"
        )
    for cohort, jobs in CHURN_JOBS.items():
        for i, queue, priority, gpus in jobs:
            docs.append(
                "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\n"
                f"metadata:\n  name: {cohort}-w{i}\n  namespace: default\n"
                f'  creationTimestamp: "2026-01-01T00:00:{i:02d}Z"\n'
                f"spec:\n  queueName: {cohort}{queue}\n  priority: {priority}\n"
                "  podSets:\n  - name: main\n    count: 1\n    template:\n      spec:\n        containers:\n"
                "        - name: c\n          image: busybox\n"
                f'          resources: {{requests: {{nvidia.com/gpu: "{gpus}"}}}}\n'
            )
    path.write_text("---\n".join(docs))
    return path


def test_admit_that_stops_on_no_progress_names_the_churning_workloads(tmp_path: Path) -> None:
    snapshot = str(_churning_snapshot(tmp_path / "churn.yaml"))
    result = runner.invoke(app, ["admit", "-f", snapshot, "-o", "json", "--now", NOW])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert list(document) == ["cycles", "admitted", "preempted", "pending", "stopped"]
    stopped = document["stopped"]
    assert stopped["reason"] == "NoProgress"
    assert stopped["cycles"] == document["cycles"] == stopped["lastProgress"] + stopped["window"]
    assert stopped["window"] == 64
    assert stopped["churning"] == ["default/a-w1", "default/a-w4", "default/b-w5", "default/b-w7"]
    assert stopped["why"].startswith(
        "ClusterQueues a0, a1 in cohort a: withinClusterQueue LowerPriority with reclaimWithinCohort Any "
        "and borrowing (a1 without a borrowingLimit) lets each reclaim what the other borrowed"
    )
    assert "; ClusterQueues b0, b1 in cohort b: " in stopped["why"]
    assert "stopped after" in result.stderr and "no progress in the last 64 cycles" in result.stderr
    as_yaml = yaml.safe_load(runner.invoke(app, ["admit", "-f", snapshot, "-o", "yaml", "--now", NOW]).stdout)
    assert as_yaml["stopped"] == stopped

    table = runner.invoke(app, ["admit", "-f", snapshot, "--now", NOW])
    assert table.exit_code == 0, table.output
    assert "Admitted" in table.stdout and "stopped" not in table.stdout
    warning = " ".join(table.stderr.split())  # the console wraps long lines
    assert (
        "4 workload(s) keep changing hands: default/a-w1, default/a-w4, default/b-w5, default/b-w7" in warning
    )
    assert "ClusterQueues b0, b1 in cohort b" in warning


def test_admit_of_a_quiet_run_has_no_stopped_field() -> None:
    result = runner.invoke(app, ["admit", "-f", EXAMPLE, "-o", "json", "--now", NOW])
    assert "stopped" not in json.loads(result.stdout)
    assert "warning: stopped" not in result.stderr


FOREIGN = (
    "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
    "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"
)
NOT_SCHEDULED = "note: not scheduled by gpuq, ignored: 1 ConfigMap, 1 Secret"


@pytest.mark.parametrize("verb", [["validate"], ["admit", "--now", NOW]])
def test_objects_gpuq_does_not_schedule_are_one_note_line(tmp_path: Path, verb: list[str]) -> None:
    path = tmp_path / "dir.yaml"
    path.write_text(QUEUE + job("small", 1, "2026-01-01T00:00:00Z") + FOREIGN)
    result = runner.invoke(app, [*verb, "-f", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("not scheduled by gpuq") == 1
    assert NOT_SCHEDULED in result.stderr
