"""gpuq on a real two-node Ray cluster on this machine: discovery, placement kept, a node lost.

The module starts a head (``ray start --head``) and a worker (``ray start --address``, node IP
127.0.0.2), 2 virtual GPUs each, in a temp dir of its own, and at the end kills exactly the
processes of that cluster (those holding a file of its temp dir, as the executor reaps a dead
local instance), never ``ray stop``. The GCS's health check is shortened (Ray's
``RAY_health_check_*`` settings) so that a killed raylet is declared dead in about a second, and
token authentication is this process's (see ``_ray_start``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml

from gpuq.run.executors import ExecutorError, PodLaunch
from gpuq.run.executors.ray import RayExecutor, _holding
from gpuq.run.loop import ControlLoop
from gpuq.run.store import Store

from .test_loop import run_until, state, submit

GPUS_PER_NODE = 2
WORKER_IP = "127.0.0.2"
CLUSTER_ENV = {
    # The GCS's health check of raylets: every 0.3 s, dead after 3 misses.
    "RAY_health_check_initial_delay_ms": "300",
    "RAY_health_check_period_ms": "300",
    "RAY_health_check_timeout_ms": "300",
    "RAY_health_check_failure_threshold": "3",
}
CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: shared}
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
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: shared}
"""


@dataclass
class Cluster:
    address: str
    temp: Path

    def raylet(self, ip: str) -> int:
        """The pid of the raylet of the node at ``ip``."""
        for pid in _holding(str(self.temp)):
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if argv[0].endswith(b"/raylet") and f"--node_ip_address={ip}".encode() in argv:
                    return pid
        raise AssertionError(f"no raylet for {ip} under {self.temp}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ray_start(temp: Path, *role: str) -> None:
    command = [
        str(Path(sys.executable).with_name("ray")),
        "start",
        *role,
        f"--temp-dir={temp}",
        f"--num-gpus={GPUS_PER_NODE}",
        "--num-cpus=1",
        "--object-store-memory=80000000",
        f"--dashboard-agent-listen-port={_free_port()}",
        "--disable-usage-stats",
    ]
    # Ray 2.60 turns token authentication on for `ray start --head` when ~/.ray/auth_token exists (a
    # local ray.init() writes one) but not for the worker joining it, and a local ray.init() earlier in
    # this process set RAY_AUTH_MODE=token here (so this driver's own server wants the token): the
    # cluster gets this process's mode, the token from the default path, or no authentication.
    env = os.environ | CLUSTER_ENV | {"RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A head and a worker at 127.0.0.2 (label zone=b); every process of the cluster killed at the end."""
    temp = Path(tempfile.mkdtemp(prefix="gpuq-mn-", dir="/tmp"))  # Ray's socket paths must stay short
    port = _free_port()
    try:
        head = ("--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--include-dashboard=false")
        _ray_start(temp, *head)
        _ray_start(temp, f"--address=127.0.0.1:{port}", f"--node-ip-address={WORKER_IP}", "--labels=zone=b")
        yield Cluster(f"127.0.0.1:{port}", temp)
    finally:
        for _ in range(3):
            victims = _holding(str(temp)) - {os.getpid()}
            for pid in victims:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if not victims:
                break
            time.sleep(0.5)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def driver(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayExecutor]:
    """This process connected to the cluster for the module (the loops' executors share it)."""
    owner = RayExecutor(cluster.address, workdir=tmp_path_factory.mktemp("ray-owner"))
    deadline = time.monotonic() + 30
    while len(owner.nodes()) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    yield owner
    owner.close()
    assert not ray.is_initialized()


@pytest.fixture
def plane(driver: RayExecutor, tmp_path: Path) -> Iterator[tuple[Store, ControlLoop, RayExecutor]]:
    store = Store(f"sqlite:///{tmp_path / 'gpuq.db'}")
    store.migrate()
    for document in yaml.safe_load_all(CONFIG):
        store.apply_object(document)
    executor = RayExecutor(workdir=tmp_path / "work", start_timeout_s=15.0)
    loop = ControlLoop(store, executor, executor.nodes(), workdir=tmp_path / "work", restart_backoff_s=0)
    yield store, loop, executor
    loop.close()
    store.close()


def job(name: str, script: str, *, gpus: int = 1, pods: int = 1, **template: Any) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "python:3.11",
        "command": [sys.executable, "-c", script],
        "resources": {"requests": {"nvidia.com/gpu": gpus}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {"spec": {"containers": [container], "terminationGracePeriodSeconds": 1, **template}},
        },
    }


def ray_node_ids() -> dict[str, str]:
    """Ray's node ids of the cluster, by gpuq name (alive nodes)."""
    from gpuq.run.executors.ray_nodes import ray_nodes

    return {node.name: node.node_id for node in ray_nodes(ray.nodes()) if node.alive}  # type: ignore[no-untyped-call]


def running(pid: int) -> bool:
    """Whether the process runs (a zombie waiting to be reaped by init does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def actor_node(log: Path) -> str:
    """The Ray node id prefix the pod's actor ran on, from the executor's line in the pod's log."""
    found = re.search(r"ray actor \S+ on node (\w+),", log.read_text())
    assert found, log.read_text()
    return found.group(1)


def test_each_ray_node_is_a_gpuq_node_with_its_gpus_and_labels(driver: RayExecutor) -> None:
    nodes = {node.name: node for node in driver.nodes()}
    assert len(nodes) == 2
    assert all(node.gpu_count == GPUS_PER_NODE for node in nodes.values())
    assert all(node.allocatable["nvidia.com/gpu"] == GPUS_PER_NODE for node in nodes.values())
    assert nodes[WORKER_IP].labels["zone"] == "b"  # the Ray node's label, for nodeSelector and topology


def test_serve_on_the_cluster_places_on_its_nodes(
    cluster: Cluster, driver: RayExecutor, tmp_path: Path
) -> None:
    """`gpuq serve --ray-address ADDR`: the API's nodes and each term's loop are the cluster's."""
    from gpuq.commands.serve import _loop_factory, _ray_nodes
    from gpuq.run.gpus import local_node

    here = local_node((), name="serve-host", cpu_milli=2000, memory_bytes=1 << 30)
    assert len(driver.nodes()) == 2
    assert {node.name for node in _ray_nodes(cluster.address)} == {n.name for n in driver.nodes()}
    store = Store(f"sqlite:///{tmp_path / 'gpuq.db'}")
    store.migrate()
    loop = _loop_factory(here, (), tmp_path / "work", "binpack", cluster.address)(store)
    try:
        assert {node.name for node in loop.nodes} == {n.name for n in driver.nodes()}
        assert "serve-host" not in {node.name for node in loop.nodes}
    finally:
        loop.close()
        store.close()


REFUSED = [
    pytest.param("nowhere", 1.0, r"node nowhere is not a node of the Ray cluster \(alive: ", id="unknown"),
    pytest.param(WORKER_IP, 3.0, rf"node {WORKER_IP} has not 3 GPU in all \(it has ", id="too small a node"),
]


def bound_pod(tmp_path: Path, node: str, gpus: float) -> PodLaunch:
    """A pod that placement bound to ``node``, asking Ray for ``gpus``."""
    return PodLaunch(
        key="team-a/bound/main-0",
        command=[sys.executable, "-c", "pass"],
        args=[],
        env={},
        working_dir=None,
        image="python:3.11",
        devices=(),
        log_path=str(tmp_path / "bound.log"),
        resources={"num_gpus": gpus},
        node=node,
    )


@pytest.mark.parametrize(("node", "gpus", "words"), REFUSED)
def test_a_pod_bound_to_a_node_ray_cannot_run_it_on_is_refused_naming_the_node(
    driver: RayExecutor, tmp_path: Path, node: str, gpus: float, words: str
) -> None:
    with pytest.raises(ExecutorError, match=words):
        driver.start(bound_pod(tmp_path, node, gpus))
    assert driver.running() == set()


def test_a_gang_lands_on_both_nodes_exactly_where_placement_bound_it(
    plane: tuple[Store, ControlLoop, RayExecutor], tmp_path: Path
) -> None:
    store, loop, _ = plane
    submit(store, job("gang", "import time; time.sleep(0.5)", pods=4))
    run_until(loop, lambda: state(store, "team-a", "gang") == "Succeeded", timeout=180)
    record = store.get_workload("team-a", "gang")
    assert record is not None
    pods = store.pods_of(record.id)
    ids = ray_node_ids()
    assert sorted(pod.node for pod in pods) == sorted([*ids] * 2)  # 4 GPUs: both nodes full
    for pod in pods:
        assert pod.log_path is not None
        assert ids[pod.node or ""].startswith(actor_node(Path(pod.log_path))), pod.name


# The pod: note its start (node, pid), wait for the go file, note its end. A second start that ended
# too, or a first one still running, would show in the notes and in the processes.
NOTING = """
import os, sys, time
notes, go = sys.argv[1], sys.argv[2]
with open(notes, "a") as out:
    out.write(f"start {os.environ['GPUQ_NODE']} {os.getpid()}\\n")
while not os.path.exists(go):
    time.sleep(0.05)
with open(notes, "a") as out:
    out.write(f"done {os.environ['GPUQ_NODE']} {os.getpid()}\\n")
"""


def test_a_lost_node_evicts_its_workload_which_runs_once_on_the_survivor(
    cluster: Cluster, plane: tuple[Store, ControlLoop, RayExecutor], tmp_path: Path
) -> None:
    store, loop, executor = plane
    head = next(name for name in ray_node_ids() if name != WORKER_IP)
    notes, go, release = tmp_path / "notes", tmp_path / "go", tmp_path / "release"
    # The head's GPUs are taken first, so that the job's pod can only go to the worker.
    filler = f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.05)"
    submit(store, job("filler", filler, gpus=2, nodeSelector={"kubernetes.io/hostname": head}))
    run_until(loop, lambda: state(store, "team-a", "filler") == "Running", timeout=90)
    noting = job("noting", NOTING)
    noting["spec"]["template"]["spec"]["containers"][0]["args"] = [str(notes), str(go)]
    submit(store, noting)
    run_until(loop, lambda: notes.exists() and notes.read_text().startswith("start"), timeout=90)
    _, node, pid = notes.read_text().split()
    assert node == WORKER_IP

    os.kill(cluster.raylet(WORKER_IP), signal.SIGKILL)
    record = store.get_workload("team-a", "noting")
    assert record is not None
    evicted = lambda: any(c.reason == "NodeFailures" for c in store.conditions(record.id))  # noqa: E731
    run_until(loop, evicted, timeout=90)
    assert not running(int(pid))  # the dead node's pod runs nowhere
    go.touch()
    release.touch()
    run_until(loop, lambda: state(store, "team-a", "noting") == "Succeeded", timeout=135)
    lines = notes.read_text().split("\n")
    starts = [line.split()[1] for line in lines if line.startswith("start")]
    dones = [line.split()[1] for line in lines if line.startswith("done")]
    assert (starts, dones) == ([WORKER_IP, head], [head])  # ran again on the survivor, finished once
    assert state(store, "team-a", "filler") == "Succeeded"
    reasons = [(c.type, c.reason) for c in store.conditions(record.id)]
    assert ("Evicted", "NodeFailures") in reasons or ("Requeued", "NodeFailures") in reasons
    assert reasons[-1] == ("Finished", "JobFinished"), reasons
    with pytest.raises(ExecutorError, match=rf"node {WORKER_IP} \(Ray node \w+\) is dead: "):
        executor.start(bound_pod(tmp_path, WORKER_IP, 1.0))  # nothing starts on a dead node
