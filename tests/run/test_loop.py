"""The control loop end to end: a SQLite store, real processes, virtual GPUs."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.run.executors.local import LocalExecutor
from gpuq.run.gpus import local_node, virtual_devices
from gpuq.run.loop import ControlLoop
from gpuq.run.store import Store

CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: low}
value: 10
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: shared}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: shared}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: team-b}
spec: {clusterQueue: shared}
"""


def job(
    name: str, namespace: str, script: str, *, gpus: int = 1, priority: str | None = None, **spec: Any
) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": "q"}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    annotations = spec.pop("annotations", {})
    grace = spec.pop("grace", 30)
    container = {
        "name": "main",
        "image": "python:3.11",
        "command": [sys.executable, "-c", script],
        "resources": {"requests": {"nvidia.com/gpu": gpus}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": {
            **spec,
            "template": {"spec": {"containers": [container], "terminationGracePeriodSeconds": grace}},
        },
    }


def make_plane(tmp_path: Path, config: str) -> tuple[Store, ControlLoop]:
    """A store with ``config`` applied and a loop over one node of 2 virtual A100s."""
    store = Store(f"sqlite:///{tmp_path / 'gpuq.db'}")
    store.migrate()
    for document in yaml.safe_load_all(config):
        store.apply_object(document)
    node = local_node(virtual_devices(2, "A100-80GB"), name="box", cpu_milli=16_000, memory_bytes=64 << 30)
    loop = ControlLoop(
        store, LocalExecutor(tmp_path / "work"), [node], workdir=tmp_path / "work", restart_backoff_s=0
    )
    return store, loop


@pytest.fixture
def plane(tmp_path: Path):  # type: ignore[no-untyped-def]
    store, loop = make_plane(tmp_path, CONFIG)
    yield store, loop, tmp_path
    loop.close()
    store.close()


def submit(store: Store, doc: dict[str, Any], at: float | None = None) -> int:
    meta = doc["metadata"]
    return store.add_workload(meta["namespace"], meta["name"], "q", doc["kind"], doc, 0, at or time.time())


def run_until(loop: ControlLoop, done, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while time.time() < deadline:
        loop.step()
        if done():
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def state(store: Store, namespace: str, name: str) -> str:
    record = store.get_workload(namespace, name)
    assert record is not None
    return record.state


def test_two_teams_run_on_distinct_gpus(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, tmp = plane
    out = tmp / "out"
    out.mkdir()
    script = (
        f"import os; name = os.environ['GPUQ_WORKLOAD'].replace('/', '_'); "
        f"open('{out}/' + name, 'w').write(os.environ['CUDA_VISIBLE_DEVICES'])"
    )
    submit(store, job("a", "team-a", script))
    submit(store, job("b", "team-b", script))
    run_until(loop, lambda: state(store, "team-a", "a") == state(store, "team-b", "b") == "Succeeded")
    devices = {(out / "team-a_a").read_text(), (out / "team-b_b").read_text()}
    assert devices == {"0", "1"}
    conditions = [c.type for c in store.conditions(store.get_workload("team-a", "a").id)]  # type: ignore[union-attr]
    assert conditions[:2] == ["Admitted", "PodsReady"] and conditions[-1] == "Finished"


def test_a_high_priority_job_preempts_and_the_victim_resumes_from_its_checkpoint(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, tmp = plane
    victim_script = """
import os, signal, sys, time
path = os.path.join(os.environ['GPUQ_CHECKPOINT_DIR'], 'step')
step = int(open(path).read()) if os.path.exists(path) else 0
def stop(*_):
    open(path, 'w').write(str(step)); sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while step < 40:
    step += 1
    time.sleep(0.02)
    if step == 10 and not os.path.exists(path + '.started'):
        open(path + '.started', 'w').write('1')
        time.sleep(30)   # wait here to be preempted
open(os.path.join(os.environ['GPUQ_CHECKPOINT_DIR'], 'done'), 'w').write(str(step))
"""
    submit(
        store,
        job(
            "long",
            "team-a",
            victim_script,
            gpus=2,
            priority="low",
            annotations={"gpuq.dev/checkpoint": "true"},
            grace=5,
        ),
    )
    run_until(loop, lambda: (tmp / "work/checkpoints/team-a/long/step.started").exists())
    submit(store, job("urgent", "team-b", "print('urgent')", gpus=2, priority="high"))
    run_until(loop, lambda: state(store, "team-b", "urgent") == "Succeeded")
    run_until(loop, lambda: state(store, "team-a", "long") in ("Running", "Succeeded"))
    urgent = store.get_workload("team-b", "urgent")
    resumed = loop.tracked.get("team-a/long")
    if resumed is not None:  # running again: its run counts from its second start (a resumed Job's startTime)
        assert urgent is not None and urgent.started_at is not None
        assert resumed.started_at is not None and resumed.started_at >= urgent.started_at
    run_until(loop, lambda: state(store, "team-a", "long") == "Succeeded")
    reasons = [c.reason for c in store.conditions(store.get_workload("team-a", "long").id)]  # type: ignore[union-attr]
    assert "Preempted" in reasons
    # Resumed from step 10, not from 0: the checkpoint survived the preemption.
    assert (tmp / "work/checkpoints/team-a/long/done").read_text() == "40"
    assert int((tmp / "work/checkpoints/team-a/long/step").read_text()) >= 10


def test_failed_pods_restart_until_the_backoff_limit(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, _ = plane
    flaky = "import os, sys; sys.exit(0 if os.environ['GPUQ_ATTEMPT'] == '2' else 1)"
    submit(store, job("flaky", "team-a", flaky, backoffLimit=3))
    submit(store, job("broken", "team-b", "import sys; sys.exit(2)", backoffLimit=1))
    run_until(
        loop,
        lambda: (
            state(store, "team-a", "flaky") == "Succeeded" and state(store, "team-b", "broken") == "Failed"
        ),
    )
    broken = store.get_workload("team-b", "broken")
    assert broken is not None and "backoffLimit 1" in broken.message


def test_active_deadline_fails_a_job_that_runs_too_long(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, _ = plane
    submit(store, job("slow", "team-a", "import time; time.sleep(30)", activeDeadlineSeconds=1))
    run_until(loop, lambda: state(store, "team-a", "slow") == "Failed")
    record = store.get_workload("team-a", "slow")
    assert record is not None and "activeDeadlineSeconds" in record.message
    run_until(loop, lambda: not loop.executor.running(), timeout=5)  # the process was killed
    assert [p.state for p in store.pods_of(record.id)] == ["Failed"]


def test_a_restarted_loop_takes_back_what_was_running_and_it_runs_once(plane) -> None:  # type: ignore[no-untyped-def]
    """As after ``kill -9`` of the server: the old loop's process is still running; the new loop on the
    same store and workdir takes it back (the very process: its pid and start time) instead of killing
    and rerunning it, and it runs to the end exactly once. (This test used to assert the opposite: that
    the process was killed and the job rerun, the defect docs/serve.md "Recovery" describes.)"""
    store, first, tmp = plane
    marker, go = tmp / "runs", tmp / "go"
    script = (
        f"import os, time; open({str(marker)!r}, 'a').write(str(os.getpid()) + '\\n')\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.02)"
    )
    submit(store, job("long", "team-a", script))
    run_until(first, lambda: marker.exists())
    (old_pid,) = [int(line) for line in marker.read_text().split()]
    second = ControlLoop(
        store, LocalExecutor(tmp / "work"), first.nodes, workdir=tmp / "work", restart_backoff_s=0
    )
    try:
        second.step()
        assert alive(old_pid) and second.executor.running() == {"team-a/long/main-0"}
        go.touch()
        run_until(second, lambda: state(store, "team-a", "long") == "Succeeded")
    finally:
        second.close()
    assert [int(line) for line in marker.read_text().split()] == [old_pid]  # it ran once
    reasons = [c.reason for c in store.conditions(store.get_workload("team-a", "long").id)]  # type: ignore[union-attr]
    assert "ControlPlaneRestarted" not in reasons and reasons[-1] == "JobFinished"


WAIT_FOR_PODS_READY = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta1",
    "kind": "Configuration",
    "metadata": {"name": "config"},
    "waitForPodsReady": {"enable": True, "timeout": "1s", "requeuingStrategy": {"backoffBaseSeconds": 1}},
}


def test_pods_that_never_get_a_node_are_evicted_after_the_ready_timeout(plane) -> None:  # type: ignore[no-untyped-def]
    """Quota 4 on a node of two GPUs: a second 2-GPU job is admitted on quota while the first holds
    both GPUs, its pods find no node, it is evicted after the 1 s timeout, waits out the backoff,
    and runs once the GPUs are free."""
    store, loop, _ = plane
    store.apply_object(WAIT_FOR_PODS_READY)
    quota = store.get_object("ClusterQueue", "shared")
    assert quota is not None
    manifest = quota.manifest
    manifest["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 4
    store.apply_object(manifest)
    submit(store, job("holder", "team-a", "import time; time.sleep(3)", gpus=2))
    run_until(loop, lambda: state(store, "team-a", "holder") == "Running")
    submit(store, job("waiter", "team-b", "print('ran')", gpus=2))
    run_until(loop, lambda: state(store, "team-b", "waiter") == "Succeeded", timeout=30)
    reasons = [c.reason for c in store.conditions(store.get_workload("team-b", "waiter").id)]  # type: ignore[union-attr]
    assert "PodsReadyTimeout" in reasons


def alive(pid: int) -> bool:
    """Running and not a zombie (the old loop's process is this test's child, never reaped here)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


def test_a_configuration_change_keeps_running_pods_on_their_gpus(plane) -> None:  # type: ignore[no-untyped-def]
    """The queue is reconfigured while a job runs on GPU 1's neighbour: the engine is rebuilt, the running
    pod keeps its device, and the next job gets the other GPU, never the same one twice."""
    store, loop, tmp = plane
    out = tmp / "out"
    out.mkdir()
    script = (
        "import os, time; name = os.environ['GPUQ_WORKLOAD'].replace('/', '_'); "
        f"open({str(out)!r} + '/' + name, 'w').write(os.environ['CUDA_VISIBLE_DEVICES']); time.sleep(1.5)"
    )
    submit(store, job("first", "team-a", script))
    run_until(loop, lambda: (out / "team-a_first").exists())
    queue = store.get_object("ClusterQueue", "shared")
    assert queue is not None
    manifest = queue.manifest
    manifest["spec"]["queueingStrategy"] = "StrictFIFO"
    store.apply_object(manifest)
    submit(store, job("second", "team-b", script))
    run_until(
        loop,
        lambda: (
            state(store, "team-b", "second") == "Succeeded" and state(store, "team-a", "first") == "Succeeded"
        ),
    )
    assert {(out / "team-a_first").read_text(), (out / "team-b_second").read_text()} == {"0", "1"}


def test_a_killed_pod_process_is_restarted(plane) -> None:  # type: ignore[no-untyped-def]
    """``kill -9`` of a job's process (not the server's): the pod fails with -9 and is retried."""
    store, loop, tmp = plane
    pid_file = tmp / "pid"
    script = (
        "import os, time\n"
        "if os.environ['GPUQ_ATTEMPT'] == '0':\n"
        f"    open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)\n"
    )
    submit(store, job("victim", "team-a", script, backoffLimit=2))
    run_until(loop, lambda: pid_file.exists() and pid_file.read_text() != "")
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    run_until(loop, lambda: state(store, "team-a", "victim") == "Succeeded")
    record = store.get_workload("team-a", "victim")
    assert record is not None
    (pod,) = store.pods_of(record.id)
    assert pod.attempt == 1 and pod.exit_code == 0
    events = [e.reason for e in store.events(kind="Workload", namespace="team-a", name="victim")]
    assert events == ["Admitted", "Started", "BackOff", "Restarted", "JobFinished"]


def test_a_job_without_a_queue_label_runs_in_the_namespace_default_local_queue(plane) -> None:  # type: ignore[no-untyped-def]
    """Kueue's LocalQueueDefaulting: an unlabelled Job in a namespace with a LocalQueue `default`."""
    store, loop, _ = plane
    store.apply_object(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": "team-a"},
            "spec": {"clusterQueue": "shared"},
        }
    )
    doc = job("plain", "team-a", "pass")
    del doc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    store.add_workload("team-a", "plain", "", "Job", doc, 0, time.time())
    run_until(loop, lambda: state(store, "team-a", "plain") == "Succeeded")


TWO_QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: low}
value: 10
""" + "".join(
    f"""---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {team}}}
spec:
  namespaceSelector: {{}}
  preemption: {{withinClusterQueue: LowerPriority}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{{name: nvidia.com/gpu, nominalQuota: 2}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: q, namespace: {team}}}
spec: {{clusterQueue: {team}}}
"""
    for team in ("team-a", "team-b")
)


def test_a_victim_in_its_grace_period_stalls_no_other_queue_and_its_grace_is_capped(tmp_path: Path) -> None:
    """team-a's victim ignores SIGTERM and asks for 600 s of grace: team-b's job that fits idle GPUs
    runs meanwhile, and the operator's 5 s cap ends the eviction long before 600 s."""
    store = Store(f"sqlite:///{tmp_path / 'gpuq.db'}")
    store.migrate()
    for document in yaml.safe_load_all(TWO_QUEUES):
        store.apply_object(document)
    node = local_node(virtual_devices(4, "A100-80GB"), name="box", cpu_milli=16_000, memory_bytes=64 << 30)
    loop = ControlLoop(
        store, LocalExecutor(tmp_path / "work"), [node], workdir=tmp_path / "work", max_grace_s=5
    )
    try:
        ready = tmp_path / "ignoring"
        stubborn = (
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            f"open({str(ready)!r}, 'w').close(); time.sleep(120)"
        )
        submit(store, job("stubborn", "team-a", stubborn, gpus=2, priority="low", grace=600))
        run_until(loop, ready.exists)
        submit(store, job("urgent", "team-a", "print('urgent')", gpus=2, priority="high"))
        run_until(loop, lambda: "team-a/stubborn" in loop.life.evicting if loop.life else False)
        submit(store, job("other", "team-b", "print('other')", gpus=1))
        run_until(loop, lambda: state(store, "team-b", "other") == "Succeeded", timeout=10)
        run_until(loop, lambda: state(store, "team-a", "urgent") == "Succeeded", timeout=30)
        other = store.get_workload("team-b", "other")
        victim = store.get_workload("team-a", "stubborn")
        assert other is not None and victim is not None and other.finished_at is not None
        preempted = next(c.time for c in store.conditions(victim.id) if c.type == "Evicted")
        requeued = next(c.time for c in store.conditions(victim.id) if c.type == "Requeued")
        assert other.finished_at < requeued  # team-b ran while team-a's victim was stopping
        assert requeued - preempted < 30  # the 600 s grace was capped
        events = [e.reason for e in store.events("Workload", "team-a", "stubborn")]
        assert events[:5] == ["Admitted", "Started", "Preempted", "Evicted", "Requeued"], events
        assert [e.reason for e in store.events("Workload", "team-b", "other")] == [
            "Admitted",
            "Started",
            "JobFinished",
        ]
    finally:
        loop.close()
        store.close()


def test_a_pod_that_cannot_start_fails_its_workload_with_the_reason_and_frees_the_quota(plane) -> None:  # type: ignore[no-untyped-def]
    store, loop, _ = plane
    broken = job("broken", "team-a", "pass", gpus=2)
    broken["spec"]["template"]["spec"]["containers"][0]["command"] = ["/no/such/command"]
    submit(store, broken)
    submit(store, job("next", "team-b", "pass", gpus=2))
    run_until(loop, lambda: state(store, "team-b", "next") == "Succeeded")
    record = store.get_workload("team-a", "broken")
    assert record is not None and record.state == "Failed"
    assert "cannot start" in record.message and "/no/such/command" in record.message
