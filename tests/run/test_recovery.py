"""A restarted control loop takes back its pods instead of running them twice (docs/serve.md, "Recovery").

The first loop is abandoned without ``close``, as after ``kill -9`` of the server: its pods' processes
run on. A second loop on the same store and workdir then probes every pod the store names, adopts the
workloads whose pods are all the very processes recorded (running, or gone with their exit recorded by
their supervisor) and requeues the others. Every job writes a line to a marks file when it starts and
when it ends, so a rerun shows. Loop cases run on SQLite and PostgreSQL; executor cases need no store.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuq.run.executors.base import PodExit, PodLaunch
from gpuq.run.executors.local import LocalExecutor
from gpuq.run.gpus import local_node, virtual_devices
from gpuq.run.loop import ControlLoop
from gpuq.run.podrecords import Intent, PodRecords
from gpuq.run.proctrack import ABANDONED_CODE, LEADER_FILE, CgroupTracker, supervisor_argv
from gpuq.run.store import Store
from run.test_loop import CONFIG

WAIT_S = 30.0
HAS_CGROUPS = CgroupTracker.create(Path("/tmp")) is not None
TRACKING = [
    pytest.param(
        "cgroup", marks=pytest.mark.skipif(not HAS_CGROUPS, reason="no cgroup v2 here"), id="cgroup"
    ),
    pytest.param("tree", id="tree"),
]

# A pod of the test job: it marks its start, waits for its gate file when its attempt is gated, marks its
# end with the code it exits with. Argument: the directory of marks and gates.
POD = r"""
import json, os, sys, time
root = sys.argv[1]
pod, attempt = os.environ["GPUQ_POD"], os.environ["GPUQ_ATTEMPT"]
plan = json.load(open(os.path.join(root, "plan.json")))
def mark(text):
    with open(os.path.join(root, "marks"), "a") as handle:
        handle.write(text + "\n")
mark(f"start {pod} {attempt}")
gate = os.path.join(root, f"go-{pod}-{attempt}")
if f"{pod} {attempt}" in plan["gated"]:
    while not os.path.exists(gate):
        time.sleep(0.02)
code = plan["codes"].get(f"{pod} {attempt}", 0)
mark(f"end {pod} {attempt} {code}")
sys.exit(code)
"""


def recovery_job(root: Path, *, pods: int = 1, backoff_limit: int = 6) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "python:3.11",
        "command": [sys.executable, "-c", POD, str(root)],
        "resources": {"requests": {"nvidia.com/gpu": 1}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "job", "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": backoff_limit,
            "template": {"spec": {"containers": [container], "terminationGracePeriodSeconds": 1}},
        },
    }


def alive(pid: int) -> bool:
    """Running and not a zombie (the abandoned loop's processes are this test's unreaped children)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def wait(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


# -- while no loop runs ----------------------------------------------------------------------------------


def finish(root: Path, pids: dict[str, int], pods: list[str]) -> None:
    """The gated pods are let go and end (their supervisors record the exits) before a loop runs again."""
    for gate in pods:
        (root / f"go-{gate.replace(' ', '-')}").touch()
    for gate in pods:
        pid = pids[gate.split()[0]]
        wait(lambda pid=pid: not alive(pid), f"pod {gate} to end")  # type: ignore[misc]


def kill(root: Path, pids: dict[str, int], pods: list[str]) -> None:
    """SIGKILL the pods' whole process groups, supervisor first among them: nothing records an exit."""
    for gate in pods:
        pid = pids[gate.split()[0]]
        os.killpg(pid, signal.SIGKILL)
        wait(lambda pid=pid: not alive(pid), f"pod {gate} to die")  # type: ignore[misc]
        (root / f"go-{gate.replace(' ', '-')}").touch()  # the rerun runs through


def forget(root: Path, pids: dict[str, int], pods: list[str]) -> None:
    """As ``kill``, and the pods' record directories are gone too."""
    kill(root, pids, pods)
    for gate in pods:
        shutil.rmtree(PodRecords(root / "work").path(f"team-a/job/{gate.split()[0]}"))


def nothing(root: Path, pids: dict[str, int], pods: list[str]) -> None:
    """The pods run on; they are let go once the second loop has taken them back."""


@dataclass(frozen=True)
class Case:
    id: str
    gated: tuple[str, ...]  # "<pod> <attempt>" that wait for their gate: the first loop stops during them
    meanwhile: Callable[[Path, dict[str, int], list[str]], None]  # what happens to them while no loop runs
    state: str  # the workload's end
    marks: list[str]  # every line the pods wrote, in order per pod
    codes: dict[str, int] = field(default_factory=dict)  # "<pod> <attempt>" -> exit code (else 0)
    pods: int = 1
    backoff_limit: int = 6
    requeued: int = 0  # ControlPlaneRestarted evictions
    adopted: bool = True  # an Adopted event


CASES = [
    Case(
        "a running pod is taken back and finishes once",
        gated=("main-0 0",),
        meanwhile=nothing,
        state="Succeeded",
        marks=["start main-0 0", "end main-0 0 0"],
    ),
    Case(
        "a pod that exits 0 while no loop runs is Succeeded, not rerun",
        gated=("main-0 0",),
        meanwhile=finish,
        state="Succeeded",
        marks=["start main-0 0", "end main-0 0 0"],
    ),
    Case(
        "a pod that exits 1 while no loop runs is restarted within its backoffLimit",
        gated=("main-0 0",),
        codes={"main-0 0": 1},
        meanwhile=finish,
        state="Succeeded",
        marks=["start main-0 0", "end main-0 0 1", "start main-0 1", "end main-0 1 0"],
        backoff_limit=1,
    ),
    Case(
        "a failure while no loop runs counts with the failures before it against backoffLimit",
        gated=("main-0 1",),
        codes={"main-0 0": 1, "main-0 1": 1},
        meanwhile=finish,
        state="Failed",
        marks=["start main-0 0", "end main-0 0 1", "start main-0 1", "end main-0 1 1"],
        backoff_limit=1,
    ),
    Case(
        "a pod gone without a record is lost: requeued, it runs once more",
        gated=("main-0 0",),
        meanwhile=forget,
        state="Succeeded",
        marks=["start main-0 0", "start main-0 0", "end main-0 0 0"],
        requeued=1,
        adopted=False,
    ),
    Case(
        "a pod killed whole (no exit recorded) is lost: requeued, it runs once more",
        gated=("main-0 0",),
        meanwhile=kill,
        state="Succeeded",
        marks=["start main-0 0", "start main-0 0", "end main-0 0 0"],
        requeued=1,
        adopted=False,
    ),
    Case(
        "a pod that succeeded before the restart still counts: its running partner completes the job",
        gated=("main-1 0",),
        meanwhile=nothing,
        state="Succeeded",
        marks=["start main-0 0", "end main-0 0 0", "start main-1 0", "end main-1 0 0"],
        pods=2,
    ),
    Case(
        "pods of one workload go together: one lost, its running partner is killed and both rerun",
        gated=("main-0 0", "main-1 0"),
        meanwhile=lambda root, pids, pods: forget(root, pids, pods[:1]),
        state="Succeeded",
        marks=[
            *("start main-0 0", "start main-0 0", "end main-0 0 0"),
            *("start main-1 0", "start main-1 0", "end main-1 0 0"),
        ],
        pods=2,
        requeued=1,
        adopted=False,
    ),
]


@pytest.fixture
def recovery_store(store: Store) -> Store:
    for document in yaml.safe_load_all(CONFIG):
        store.apply_object(document)
    return store


def make_loop(store: Store, root: Path) -> ControlLoop:
    node = local_node(virtual_devices(2, "A100-80GB"), name="box", cpu_milli=16_000, memory_bytes=64 << 30)
    return ControlLoop(
        store, LocalExecutor(root / "work"), [node], workdir=root / "work", restart_backoff_s=0
    )


def run_until(loop: ControlLoop, done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        loop.step()
        if done():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def marks(root: Path) -> list[str]:
    path = root / "marks"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_restarted_loop_takes_back_its_pods(recovery_store: Store, tmp_path: Path, case: Case) -> None:
    store, root = recovery_store, tmp_path
    (root / "plan.json").write_text(json.dumps({"gated": list(case.gated), "codes": case.codes}))
    job = recovery_job(root, pods=case.pods, backoff_limit=case.backoff_limit)
    store.add_workload("team-a", "job", "q", "Job", job, 0, time.time())
    first = make_loop(store, root)
    second: ControlLoop | None = None
    try:
        run_until(first, lambda: all(f"start {g}" in marks(root) for g in case.gated), "the gated pods")
        record = store.get_workload("team-a", "job")
        assert record is not None and record.state == "Running"
        pids = {row.name: row.pid for row in store.pods_of(record.id) if row.pid}
        # The first loop is abandoned here, as after kill -9: no close, its pods run on.
        case.meanwhile(root, pids, list(case.gated))  # type: ignore[arg-type]
        second = make_loop(store, root)
        second.step()
        for gate in case.gated:  # pods taken back running are let go now
            (root / f"go-{gate.replace(' ', '-')}").touch()
        run_until(second, lambda: store.get_workload("team-a", "job").state == case.state, case.state)  # type: ignore[union-attr]
        run_until(second, lambda: not second.executor.running(), "the pods to be gone")  # type: ignore[union-attr]
        for pod in {line.split()[1] for line in case.marks}:
            assert [m for m in marks(root) if m.split()[1] == pod] == [
                m for m in case.marks if m.split()[1] == pod
            ]
        reasons = [c.reason for c in store.conditions(record.id)]
        assert reasons.count("ControlPlaneRestarted") == case.requeued, reasons
        assert reasons.count("PodsReady") == 1 + case.requeued, reasons
        assert [c.type for c in store.conditions(record.id)].count("Finished") == 1
        events = [e.reason for e in store.events(kind="Workload", namespace="team-a", name="job")]
        assert ("Adopted" in events) == case.adopted, events
        assert not [pid for pid in pids.values() if alive(pid)], "a first loop's process outlived recovery"
        second.step()  # the records of the exits handed out last go at the next poll
        assert PodRecords(root / "work").all() == []
    finally:
        if second is not None:
            second.close()
        first.close()


def test_a_pod_that_succeeded_while_no_loop_ran_keeps_its_exit_time(
    recovery_store: Store, tmp_path: Path
) -> None:
    """The exit read back is the supervisor's, with the time it recorded: the pod row's finish is when the
    pod ended, before the second loop started, and the workload finished once."""
    store, root = recovery_store, tmp_path
    (root / "plan.json").write_text(json.dumps({"gated": ["main-0 0"], "codes": {}}))
    store.add_workload("team-a", "job", "q", "Job", recovery_job(root), 0, time.time())
    first = make_loop(store, root)
    second = None
    try:
        run_until(first, lambda: "start main-0 0" in marks(root), "the pod")
        record = store.get_workload("team-a", "job")
        assert record is not None
        (row,) = store.pods_of(record.id)
        assert row.pid is not None
        finish(root, {"main-0": row.pid}, ["main-0 0"])
        ended = time.time()
        second = make_loop(store, root)
        run_until(second, lambda: store.get_workload("team-a", "job").state == "Succeeded", "success")  # type: ignore[union-attr]
        (row,) = store.pods_of(record.id)
        assert row.state == "Succeeded" and row.exit_code == 0 and row.pid is not None
        assert row.finished_at is not None and row.finished_at <= ended
    finally:
        if second is not None:
            second.close()
        first.close()


# -- the executor alone -----------------------------------------------------------------------------------


def launch(root: Path, name: str, script: str, attempt: int = 0) -> PodLaunch:
    return PodLaunch(
        key=f"ns/{name}/w-0",
        command=["/bin/sh", "-c", script],
        args=[],
        env={},
        working_dir=None,
        image="",
        devices=(),
        log_path=str(root / "logs" / f"{name}.log"),
        resources={},
        attempt=attempt,
    )


def exits_of(executor: LocalExecutor, count: int = 1) -> list[PodExit]:
    found: list[PodExit] = []
    deadline = time.monotonic() + WAIT_S
    while len(found) < count and time.monotonic() < deadline:
        found += executor.poll()
        time.sleep(0.01)
    assert len(found) == count, f"still running: {executor.running()}"
    return found


@pytest.fixture
def executors(tmp_path: Path) -> Iterator[Callable[[str], LocalExecutor]]:
    """Makes executors of one workdir (``tracking``: ``cgroup`` or ``tree``); closes them at the end."""
    made: list[LocalExecutor] = []

    def make(tracking: str) -> LocalExecutor:
        made.append(LocalExecutor(tmp_path / "work", tracking=tracking))
        return made[-1]

    yield make
    for executor in reversed(made):
        executor.close(grace_s=0.2)


PROBES = [
    # (what the pod does, what happens before the next executor probes, probe state, exit code)
    ("sleep 30", "nothing", "running", None),
    ("exit 0", "it ends", "exited", 0),
    ("exit 3", "it ends", "exited", 3),
    ("kill -TERM $$", "it ends", "exited", -signal.SIGTERM),
    ("sleep 30", "its group is SIGKILLed", "lost", None),
    ("sleep 30", "its record is removed", "lost", None),
]


@pytest.mark.parametrize("tracking", TRACKING)
@pytest.mark.parametrize(("script", "meanwhile", "state", "code"), PROBES)
def test_probe_tells_running_exited_and_lost_pods_apart(
    executors: Callable[[str], LocalExecutor],
    tmp_path: Path,
    tracking: str,
    script: str,
    meanwhile: str,
    state: str,
    code: int | None,
) -> None:
    first = executors(tracking)
    pod = launch(tmp_path, "probed", script)
    pid = first.start(pod)
    record = PodRecords(tmp_path / "work").path(pod.key)
    wait(lambda: (record / LEADER_FILE).exists(), "the supervisor to record itself")
    if meanwhile == "it ends":
        wait(lambda: not alive(pid), "the pod to end")
    elif meanwhile == "its group is SIGKILLed":
        os.killpg(pid, signal.SIGKILL)
        wait(lambda: not alive(pid), "the pod to die")
    elif meanwhile == "its record is removed":
        shutil.rmtree(record)
    second = executors(tracking)  # the first one is abandoned: it never polls again
    found = second.probe(pod.key, attempt=0, pid=pid)
    assert (found.state, found.exit_code) == (state, code)
    assert second.probe(pod.key, attempt=1).state == "lost"  # another attempt's record
    assert second.probe(pod.key, pid=pid + 1).state == "lost"  # another process
    taken = second.adopt(pod.key, attempt=0, pid=pid)
    assert taken.state == state
    if state == "running":
        assert second.running() == {pod.key}
        second.terminate(pod.key, 0.2)
        (exit_,) = exits_of(second)
        assert exit_.exit_code == -signal.SIGTERM and not alive(pid)
    elif state == "exited":
        (exit_,) = second.poll()
        assert (exit_.key, exit_.exit_code) == (pod.key, code)
        assert second.poll() == []  # reported once, and its record is removed now
        assert second.probe(pod.key).state == "lost"
    else:
        assert second.running() == set() and second.poll() == []
        second.sweep()
        assert PodRecords(tmp_path / "work").all() == []


def test_a_pod_recorded_but_not_yet_running_is_abandoned_and_never_runs(tmp_path: Path) -> None:
    """Record first, then start: a leader that finds a pod's intent but no supervisor identity marks it
    abandoned; a supervisor that starts after that (the crashed server's Popen racing the takeover) runs
    nothing. The link that records either is exclusive, so exactly one of them wins."""
    records = PodRecords(tmp_path / "work")
    key = "ns/late/w-0"
    record = records.create(Intent(key, 0, "token", None, None))
    executor = LocalExecutor(tmp_path / "work", tracking="tree")
    try:
        assert executor.probe(key).state == "lost"
        ran = tmp_path / "ran"
        late = subprocess.run(
            [*supervisor_argv(record, None), "/bin/sh", "-c", f"touch {ran}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert late.returncode == ABANDONED_CODE and "abandoned" in late.stderr
        assert not ran.exists()
        assert executor.sweep() == [key] and records.all() == []
    finally:
        executor.close(grace_s=0.2)


def test_close_forgets_the_pods_it_stops_but_not_an_exit_nobody_read(tmp_path: Path) -> None:
    """A server stopped cleanly kills its pods: their records go, so the next leader requeues them (the
    control plane stopped them, they did not fail). A pod that had ended by itself keeps its record."""
    first = LocalExecutor(tmp_path / "work")
    ended = launch(tmp_path, "ended", "exit 0")
    stopped = launch(tmp_path, "stopped", "sleep 30")
    ended_pid = first.start(ended)
    first.start(stopped)
    wait(lambda: not alive(ended_pid), "the first pod to end")
    first.close(grace_s=0.2)
    second = LocalExecutor(tmp_path / "work")
    try:
        assert second.probe(ended.key).state == "exited"
        assert second.probe(stopped.key).state == "lost"
    finally:
        second.close(grace_s=0.2)


def test_a_leader_whose_pods_were_taken_back_by_the_next_one_stops_none_of_them(tmp_path: Path) -> None:
    """A leader frozen past its lease wakes up after the next one adopted its pods: its terminate and its
    close leave them to their new owner, which still stops them like its own."""
    old = LocalExecutor(tmp_path / "work")
    pod = launch(tmp_path, "adopted", "sleep 30")
    pid = old.start(pod)
    record = PodRecords(tmp_path / "work").path(pod.key)
    wait(lambda: (record / LEADER_FILE).exists(), "the supervisor to record itself")
    new = LocalExecutor(tmp_path / "work")
    try:
        assert new.adopt(pod.key, attempt=0, pid=pid).state == "running"
        old.terminate(pod.key, 0.0)
        old.close(grace_s=0.2)
        assert alive(pid) and old.poll() == []
        new.terminate(pod.key, 0.2)
        (exit_,) = exits_of(new)
        assert exit_.exit_code == -signal.SIGTERM and not alive(pid)
    finally:
        new.close(grace_s=0.2)


def test_a_configuration_change_keeps_the_pods_that_already_ended(
    recovery_store: Store, tmp_path: Path
) -> None:
    """The engine is rebuilt (a queue reconfigured) while one pod of a two-pod job has succeeded and the
    other runs: the rebuilt lifecycle takes the job back with the success it had seen, so the job
    completes when the second pod does (it waited for ever for the first pod's exit)."""
    store, root = recovery_store, tmp_path
    (root / "plan.json").write_text(json.dumps({"gated": ["main-1 0"], "codes": {}}))
    store.add_workload("team-a", "job", "q", "Job", recovery_job(root, pods=2), 0, time.time())
    loop = make_loop(store, root)
    try:
        run_until(loop, lambda: "end main-0 0 0" in marks(root) and "start main-1 0" in marks(root), "pods")
        record = store.get_workload("team-a", "job")
        assert record is not None
        run_until(loop, lambda: "Succeeded" in [p.state for p in store.pods_of(record.id)], "main-0's exit")
        queue = store.get_object("ClusterQueue", "shared")
        assert queue is not None
        manifest = queue.manifest
        manifest["spec"]["queueingStrategy"] = "StrictFIFO"
        store.apply_object(manifest)
        loop.step()
        (root / "go-main-1-0").touch()
        run_until(loop, lambda: store.get_workload("team-a", "job").state == "Succeeded", "success")  # type: ignore[union-attr]
        assert marks(root).count("start main-0 0") == 1 and marks(root).count("start main-1 0") == 1
    finally:
        loop.close()
