"""RayJob and RayCluster under the control loop: the commands gpuq writes, then real Ray clusters.

The process tests start real Ray nodes (``ray start``) on virtual GPUs; Ray is slow to start on a small
machine, so each is one scenario with generous timeouts.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.api.source_fields import SourceError
from gpuq.run import rayjobs
from gpuq.run.executors.local import LocalExecutor
from gpuq.run.gpus import local_node, virtual_devices
from gpuq.run.jobs import ContainerRun, JobRun, PodSetRun, job_run
from gpuq.run.loop import ControlLoop
from gpuq.run.store import Store

PY = sys.executable
WORK = Path("/w")
CLUSTER = WORK / "ray" / "team-a" / "rj"
ENV = {
    "GPUQ_RAY_CLUSTER_DIR": str(CLUSTER),
    "RAY_AUTH_MODE": "token",
    "RAY_AUTH_TOKEN_PATH": str(CLUSTER / "auth_token"),
}
LAUNCHER = (PY, "-m", "gpuq.run.rayjobs")


# ------------------------------------------------------------------------------------------- builders
def container(gpus: int = 0, **extra: Any) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": "1", "memory": "1Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = gpus
    return {"name": "ray", "image": "rayproject/ray:2.9", "resources": {"requests": requests}, **extra}


def cluster_spec(
    head_gpus: int = 0, workers: int = 0, worker: dict[str, Any] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container(head_gpus)]}}}
    }
    if workers:
        spec["workerGroupSpecs"] = [
            {
                "groupName": "GPU-Workers",
                "replicas": workers,
                "rayStartParams": {},
                "template": {"spec": {"containers": [worker or container(1)]}},
            }
        ]
    return spec


def ray_source(kind: str, name: str, spec: dict[str, Any], namespace: str = "team-a") -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": "q"}
    return {
        "apiVersion": "ray.io/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def rayjob(name: str, entrypoint: str | None, cluster: dict[str, Any], **spec: Any) -> dict[str, Any]:
    body = {"rayClusterSpec": cluster, "shutdownAfterJobFinishes": True, **spec}
    if entrypoint is not None:
        body["entrypoint"] = entrypoint
    return ray_source("RayJob", name, body)


def run(
    command: tuple[str, ...], *, image: str = "rayproject/ray:2.9", args: tuple[str, ...] = ()
) -> ContainerRun:
    return ContainerRun(command, args, ENV, None, image)


# ------------------------------------------------------------------------------------ what runs (pure)
HEAD_ARGS = ("--", "--num-cpus=1", "--memory=1073741824")
SYNTHESIS_CASES = [
    pytest.param(
        rayjob("rj", "python train.py", cluster_spec(1, workers=2)),
        JobRun(
            (
                PodSetRun("head", 1, run((*LAUNCHER, "head", "--dir", str(CLUSTER), *HEAD_ARGS))),
                PodSetRun("gpu-workers", 2, run((*LAUNCHER, "worker", "--dir", str(CLUSTER), *HEAD_ARGS))),
                PodSetRun(
                    "submitter",
                    1,
                    run(
                        (
                            *LAUNCHER,
                            "submit",
                            "--dir",
                            str(CLUSTER),
                            "--entrypoint",
                            "python train.py",
                            "--nodes",
                            "3",
                        )
                    ),
                ),
            ),
            completion_pod_set="submitter",
        ),
        id="a rayjob in K8sJobMode runs its entrypoint in the submitter, which completes it",
    ),
    pytest.param(
        rayjob("rj", "python train.py", cluster_spec(1), submissionMode="HTTPMode", activeDeadlineSeconds=60),
        JobRun(
            (
                PodSetRun(
                    "head",
                    1,
                    run(
                        (
                            *LAUNCHER,
                            "head",
                            "--dir",
                            str(CLUSTER),
                            "--entrypoint",
                            "python train.py",
                            "--nodes",
                            "1",
                            *HEAD_ARGS,
                        )
                    ),
                ),
            ),
            active_deadline_s=60.0,
            completion_pod_set="head",
        ),
        id="without a submitter the head's launcher runs the entrypoint and the head completes the job",
    ),
    pytest.param(
        ray_source("RayCluster", "rj", cluster_spec(workers=1)),
        JobRun(
            (
                PodSetRun("head", 1, run((*LAUNCHER, "head", "--dir", str(CLUSTER), *HEAD_ARGS))),
                PodSetRun("gpu-workers", 1, run((*LAUNCHER, "worker", "--dir", str(CLUSTER), *HEAD_ARGS))),
            ),
        ),
        id="a raycluster has no entrypoint and no completion pod set: it runs until deleted",
    ),
]


@pytest.mark.parametrize(("doc", "want"), SYNTHESIS_CASES)
def test_ray_sources_become_launcher_commands(doc: dict[str, Any], want: JobRun) -> None:
    assert job_run(doc, workdir=WORK) == want


def test_an_explicit_command_wins_for_a_worker_but_not_for_the_head() -> None:
    own = ["/bin/sh", "-c", "my-ray-worker"]
    head = container(1, command=["sleep", "1"], env=[{"name": "A", "value": "1"}], workingDir="/srv")
    cluster = cluster_spec(workers=1, worker=container(1, command=own, args=["x"]))
    cluster["headGroupSpec"]["template"]["spec"]["containers"] = [head]
    got = job_run(ray_source("RayCluster", "rj", cluster), workdir=WORK)
    assert got.pod_set("head").container == ContainerRun(
        (*LAUNCHER, "head", "--dir", str(CLUSTER), *HEAD_ARGS),
        (),
        {"A": "1", **ENV},
        "/srv",
        "rayproject/ray:2.9",
    )
    assert got.pod_set("gpu-workers").container == run(tuple(own), args=("x",))


def test_ray_start_params_follow_kuberay_and_the_keys_gpuq_owns_are_dropped() -> None:
    cluster = cluster_spec()
    cluster["headGroupSpec"]["rayStartParams"] = {
        "num-cpus": "0",  # wins over the request, as in KubeRay
        "port": "6379",
        "num-gpus": "4",
        "block": "true",
        "dashboard-host": "0.0.0.0",
        "no-monitor": "true",
        "ray-debugger-external": "false",
        "object-store-memory": 100_000_000,
    }
    limits_only = {"resources": {"limits": {"cpu": "1500m"}}}
    cluster["headGroupSpec"]["template"]["spec"]["containers"][0].update(limits_only)
    head = job_run(ray_source("RayCluster", "rj", cluster), workdir=WORK).pod_set("head")
    assert head.container.command[-5:] == (
        "--",
        "--num-cpus=0",
        "--dashboard-host=0.0.0.0",
        "--no-monitor",
        "--object-store-memory=100000000",
    )


def test_the_runtime_env_is_handed_to_the_entrypoint() -> None:
    doc = rayjob("rj", "python a.py", cluster_spec(), runtimeEnvYAML="env_vars: {MODE: fast}\npip: [emoji]\n")
    submitter = job_run(doc, workdir=WORK).pod_set("submitter").container.command
    at = submitter.index("--runtime-env")
    assert json.loads(submitter[at + 1]) == {"env_vars": {"MODE": "fast"}, "pip": ["emoji"]}


REFUSED_CASES = [
    pytest.param(rayjob("rj", None, cluster_spec()), "spec.entrypoint", "required", id="no entrypoint"),
    pytest.param(
        rayjob("rj", None, cluster_spec(), submissionMode="InteractiveMode"),
        "spec.entrypoint",
        "InteractiveMode",
        id="an interactive rayjob needs the dashboard gpuq does not run",
    ),
    pytest.param(
        rayjob("rj", "x", cluster_spec(), runtimeEnvYAML="[1, 2]"),
        "spec.runtimeEnvYAML",
        "mapping",
        id="a runtime env that is not a mapping",
    ),
    pytest.param(
        ray_source(
            "RayCluster",
            "rj",
            {"headGroupSpec": {"template": {"spec": {"containers": [container(), container()]}}}},
        ),
        "spec.headGroupSpec.template.spec.containers",
        "one container per pod",
        id="a head with a sidecar",
    ),
    pytest.param(
        ray_source(
            "RayCluster",
            "rj",
            {
                "headGroupSpec": {
                    "rayStartParams": {"bad key": "1"},
                    "template": {"spec": {"containers": [container()]}},
                }
            },
        ),
        "spec.headGroupSpec.rayStartParams",
        "not a ray start option",
        id="a ray start parameter that is not an option name",
    ),
    pytest.param(
        rayjob("rj", "x", cluster_spec(), backoffLimit=-1),
        "spec.backoffLimit",
        "non-negative integer, got -1",
        id="a negative backoffLimit",
    ),
    pytest.param(
        rayjob("rj", "x", cluster_spec(), backoffLimit=True),
        "spec.backoffLimit",
        "non-negative integer",
        id="a backoffLimit that is a boolean",
    ),
    pytest.param(
        rayjob("rj", "x", cluster_spec(), entrypointNumGpus=-1),
        "spec.entrypointNumGpus",
        "0 or more, got -1",
        id="a negative entrypointNumGpus",
    ),
    pytest.param(
        rayjob("rj", "x", cluster_spec(), entrypointNumCpus="two"),
        "spec.entrypointNumCpus",
        "must be a number",
        id="an entrypointNumCpus that is not a number",
    ),
    pytest.param(
        rayjob("rj", "x", cluster_spec(), entrypointResources='{"ssd": 1'),
        "spec.entrypointResources",
        "not JSON",
        id="entrypointResources that is not JSON",
    ),
    pytest.param(
        rayjob("rj", "x", cluster_spec(), entrypointResources="[1]"),
        "spec.entrypointResources",
        "JSON object",
        id="entrypointResources that is not a JSON object",
    ),
    pytest.param(
        rayjob("rj", "x", cluster_spec(), entrypointResources='{"ssd": -2}'),
        "spec.entrypointResources",
        "resource 'ssd': the amount must be a number, 0 or more",
        id="a negative entrypoint resource",
    ),
    pytest.param(
        rayjob("rj", "x", cluster_spec(), entrypointResources='{"GPU": 1}'),
        "spec.entrypointResources",
        "GPU is set with entrypointNumGpus",
        id="GPUs among entrypointResources",
    ),
    pytest.param(
        rayjob("rj", "x", cluster_spec(), entrypointResources={"ssd": 1}),
        "spec.entrypointResources",
        "expected a JSON string",
        id="entrypointResources as a mapping, not KubeRay's JSON string",
    ),
]


@pytest.mark.parametrize(("doc", "field", "words"), REFUSED_CASES)
def test_ray_sources_that_cannot_run_name_the_field(doc: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SourceError) as caught:
        job_run(doc, workdir=WORK)
    assert caught.value.field == field and words in caught.value.message


def test_a_long_cluster_directory_gets_a_short_linked_temp_dir(tmp_path: Path) -> None:
    directory = tmp_path / ("x" * 60)
    short = rayjobs._temp_dir(directory, "head-0")
    assert len(str(short)) <= 40 and short.is_dir()
    assert (directory / "head-0").resolve() == short.resolve()
    assert rayjobs._temp_dir(directory, "head-0") == short  # the same pod gets the same directory
    short.rmdir()


def test_a_ray_node_that_ends_is_a_failure() -> None:
    assert (rayjobs._node_ended(0), rayjobs._node_ended(1), rayjobs._node_ended(-9)) == (1, 1, 137)


def test_a_stale_head_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / rayjobs.HEAD_FILE).write_text(json.dumps({"address": "127.0.0.1:1", "pid": 2**22 + 1}))
    assert rayjobs._wait_for_head(tmp_path, 0.3) is None


# --------------------------------------------------------------------------------- real Ray clusters
CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: shared}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: default
      resources:
      - {name: cpu, nominalQuota: 16}
      - {name: memory, nominalQuota: 64Gi}
      - {name: nvidia.com/gpu, nominalQuota: 2}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: shared}
"""

DRIVER = """
import os, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init()

@ray.remote(num_gpus=1)
def where():
    ids = [str(g) for g in ray.get_gpu_ids()]
    return ray.get_runtime_context().get_node_id(), os.environ["CUDA_VISIBLE_DEVICES"], ids

nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
pinned = [where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)) for n in nodes]
for node, visible, ids in ray.get([task.remote() for task in pinned]):
    print("RESULT", node, visible, ",".join(ids), flush=True)
"""
START_S = 90.0  # Ray nodes start in seconds, but slowly on a loaded two-core machine


@pytest.fixture
def plane(tmp_path: Path):  # type: ignore[no-untyped-def]
    store = Store(f"sqlite:///{tmp_path / 'gpuq.db'}")
    store.migrate()
    for document in yaml.safe_load_all(CONFIG):
        store.apply_object(document)
    node = local_node(virtual_devices(2, "A100-80GB"), name="box", cpu_milli=16_000, memory_bytes=64 << 30)
    work = tmp_path / "work"
    loop = ControlLoop(store, LocalExecutor(work), [node], workdir=work, restart_backoff_s=0)
    yield store, loop, tmp_path
    loop.close()
    store.close()
    for link in (work / "ray").glob("*/*/*"):
        if link.is_symlink():  # a pod's Ray temp dir, too long for Ray's sockets under tmp_path
            shutil.rmtree(link.resolve(), ignore_errors=True)


def submit(store: Store, doc: dict[str, Any]) -> None:
    meta = doc["metadata"]
    store.add_workload(meta["namespace"], meta["name"], "q", doc["kind"], doc, 0, time.time())


def run_until(loop: ControlLoop, done, timeout: float = START_S) -> None:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while time.time() < deadline:
        loop.step()
        if done():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def state(store: Store, name: str) -> str:
    record = store.get_workload("team-a", name)
    return "Deleted" if record is None else record.state


def processes_of(directory: Path) -> list[str]:
    """Live processes whose environment names the cluster directory: every process a Ray pod starts
    (Ray's GCS, raylets, agents and workers, the entrypoint) inherits ``GPUQ_RAY_CLUSTER_DIR``."""
    marker = f"{rayjobs.CLUSTER_DIR_ENV}={directory}\0".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if marker in entry.joinpath("environ").read_bytes():
                found.append(f"{entry.name}: {entry.joinpath('cmdline').read_bytes()[:120]!r}")
        except OSError:
            continue
    return found


def assert_nothing_left(loop: ControlLoop, directory: Path) -> None:
    run_until(loop, lambda: not loop.executor.running(), timeout=15)
    deadline = time.time() + 10
    while processes_of(directory) and time.time() < deadline:
        time.sleep(0.2)
    assert processes_of(directory) == []


def test_a_rayjob_runs_its_entrypoint_on_the_clusters_gpus_and_leaves_no_ray_process(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, tmp = plane
    script = tmp / "driver.py"
    script.write_text(DRIVER)
    submit(store, rayjob("rj", f"{PY} {script}", cluster_spec(head_gpus=1, workers=1)))
    run_until(loop, lambda: state(store, "rj") in ("Succeeded", "Failed"))
    record = store.get_workload("team-a", "rj")
    assert record is not None
    log = (tmp / "work/logs/team-a/rj/submitter-0.log").read_text()
    assert record.state == "Succeeded", log
    results = [line.split(" ", 3)[1:] for line in log.splitlines() if line.startswith("RESULT ")]
    devices = {pod.pod_set: pod.devices for pod in store.pods_of(record.id)}
    # One task on each node, each seeing exactly its pod's placement GPU, which Ray also reports.
    assert len({node for node, _, _ in results}) == 2
    assert sorted(visible for _, visible, _ in results) == sorted([*devices["head"], *devices["gpu-workers"]])
    assert all(visible == ids for _, visible, ids in results)
    head_log = (tmp / "work/logs/team-a/rj/head-0.log").read_text()
    assert "--num-gpus=1" in head_log and "--include-dashboard=false" in head_log
    # The submitter completed the job; the cluster's pods were then stopped.
    states = {pod.pod_set: pod.state for pod in store.pods_of(record.id)}
    assert states == {"head": "Failed", "gpu-workers": "Failed", "submitter": "Succeeded"}
    assert_nothing_left(loop, tmp / "work/ray/team-a/rj")


def test_a_rayjob_whose_entrypoint_fails_fails(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, tmp = plane
    entrypoint = f"{PY} -c \"print('giving up'); raise SystemExit(3)\""
    submit(store, rayjob("bad", entrypoint, cluster_spec(head_gpus=1), submissionMode="HTTPMode"))
    run_until(loop, lambda: state(store, "bad") in ("Succeeded", "Failed"))
    record = store.get_workload("team-a", "bad")
    assert record is not None and record.state == "Failed"
    assert store.conditions(record.id)[-1].reason == "JobFailed" and "exited with 3" in record.message
    head_log = (tmp / "work/logs/team-a/bad/head-0.log").read_text()
    assert "giving up" in head_log and "the entrypoint exited with 3" in head_log
    assert_nothing_left(loop, tmp / "work/ray/team-a/bad")


def test_a_deleted_raycluster_leaves_no_process(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, tmp = plane
    submit(store, ray_source("RayCluster", "rc", cluster_spec(head_gpus=1, workers=1)))
    worker_log = tmp / "work/logs/team-a/rc/gpu-workers-0.log"
    run_until(loop, lambda: worker_log.exists() and "Ray runtime started" in worker_log.read_text())
    assert state(store, "rc") == "Running"
    directory = tmp / "work/ray/team-a/rc"
    assert len(processes_of(directory)) >= 6  # two launchers, two `ray start`s, the GCS, two raylets...
    store.delete_workload("team-a", "rc")
    assert_nothing_left(loop, directory)


def test_a_raycluster_whose_head_crashes_restarts_and_its_worker_rejoins(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, tmp = plane
    submit(store, ray_source("RayCluster", "rc", cluster_spec(head_gpus=1, workers=1)))
    logs = tmp / "work/logs/team-a/rc"

    def started(pod: str, times: int) -> bool:
        log = logs / f"{pod}.log"
        return log.exists() and log.read_text().count("Ray runtime started") >= times

    run_until(loop, lambda: started("head-0", 1) and started("gpu-workers-0", 1))
    directory = tmp / "work/ray/team-a/rc"
    (gcs,) = [line.split(":")[0] for line in processes_of(directory) if "gcs_server" in line]
    os.kill(int(gcs), signal.SIGKILL)
    run_until(loop, lambda: started("head-0", 2) and started("gpu-workers-0", 2))
    record = store.get_workload("team-a", "rc")
    assert record is not None and record.state == "Running"
    assert {pod.pod_set: pod.attempt for pod in store.pods_of(record.id)} == {"head": 1, "gpu-workers": 1}
    assert "the head this node joined is gone" in (logs / "gpu-workers-0.log").read_text()
    store.delete_workload("team-a", "rc")
    assert_nothing_left(loop, directory)


ENTRYPOINT_CASES = [
    pytest.param({}, (), 0, id="no entrypoint resources, no retry: KubeRay's defaults"),
    pytest.param(
        {"entrypointNumCpus": 2, "entrypointNumGpus": 0.5, "backoffLimit": 3},
        ("--entrypoint-num-cpus", "2", "--entrypoint-num-gpus", "0.5"),
        3,
        id="CPUs and GPUs reserved for the entrypoint; three retries",
    ),
    pytest.param(
        {"entrypointResources": '{"ssd": 1, "accel": 0.25}', "entrypointNumGpus": 0},
        ("--entrypoint-resources", '{"accel": 0.25, "ssd": 1}'),
        0,
        id="custom resources from KubeRay's JSON string; zero amounts are no reservation",
    ),
]


@pytest.mark.parametrize(("spec", "options", "retries"), ENTRYPOINT_CASES)
def test_entrypoint_resources_reach_the_launcher_and_backoff_limit_is_the_whole_jobs_retries(
    spec: dict[str, Any], options: tuple[str, ...], retries: int
) -> None:
    run_ = job_run(rayjob("rj", "python train.py", cluster_spec(1), **spec), workdir=WORK)
    command = run_.pod_set("submitter").container.command
    assert command[command.index("--nodes") + 2 :] == options
    assert run_.retries == retries
    assert run_.backoff_limit == 6  # the cluster's pods still restart on their own, as KubeRay's do
    parsed = rayjobs._parse(list(command[command.index("-m") + 2 :]))
    assert (parsed.entrypoint_num_cpus, parsed.entrypoint_num_gpus) == (
        spec.get("entrypointNumCpus", 0.0),
        spec.get("entrypointNumGpus", 0.0),
    )


RETRIED = """
import os, sys
marker = sys.argv[1]
if not os.path.exists(marker):
    open(marker, "w").write("ran")
    print("the first run fails", flush=True)
    sys.exit(3)
print("PLACED", os.environ.get("CUDA_VISIBLE_DEVICES", "(none)"), flush=True)
"""


def test_a_rayjob_retries_on_a_fresh_cluster_and_its_entrypoint_gets_the_gpu_it_reserved(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, tmp = plane
    script, marker = tmp / "retried.py", tmp / "first-run"
    script.write_text(RETRIED)
    cluster = cluster_spec(head_gpus=0, workers=1)  # the only GPU is the worker's
    doc = rayjob("rj", f"{PY} {script} {marker}", cluster, backoffLimit=1, entrypointNumGpus=1)
    submit(store, doc)
    run_until(loop, lambda: state(store, "rj") in ("Succeeded", "Failed"), timeout=2 * START_S)
    record = store.get_workload("team-a", "rj")
    assert record is not None
    log = (tmp / "work/logs/team-a/rj/submitter-0.log").read_text()
    assert record.state == "Succeeded", log
    assert log.count("reserving 1 GPU for the entrypoint") == 2 and "the first run fails" in log
    reasons = [c.reason for c in store.conditions(record.id)]
    assert reasons.count("Retrying") == 1  # requeued once: every pod started again, a new cluster
    worker = next(pod for pod in store.pods_of(record.id) if pod.pod_set == "gpu-workers")
    placed = [line.split()[1] for line in log.splitlines() if line.startswith("PLACED ")]
    assert placed == list(worker.devices)  # on the worker, with the GPU Ray reserved there
    assert_nothing_left(loop, tmp / "work/ray/team-a/rj")
