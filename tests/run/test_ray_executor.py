"""The Ray executor with real processes on one local Ray instance (2 CPUs, 2 virtual GPUs).

The behaviour tests of the local executor that concern a pod's process (env, logs, exit
codes, termination, no orphans) hold here too; the Ray-specific ones cover placement by
Ray (GPU ids in the log, infeasible and pending resources) and an actor that dies.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
import ray.util

from gpuq.run.executors import ExecutorError, PodLaunch
from gpuq.run.executors.ray import RayExecutor

from .test_local_executor import (
    DUMP_ENV,
    GRACE_S,
    IGNORE_TERM,
    TRAP_TERM,
    WITH_GRANDCHILD,
    wait_for_exits,
    wait_for_line,
    wait_until_dead,
)
from .test_local_executor import launch as local_launch

RAY_GPUS = 2


@pytest.fixture(scope="module")
def ray_instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayExecutor]:
    """One local Ray instance for the module, owned by this executor; the tests' executors share it."""
    owner = RayExecutor(workdir=tmp_path_factory.mktemp("ray-owner"), num_gpus=RAY_GPUS, num_cpus=2)
    yield owner
    owner.close()
    assert not ray.is_initialized()  # the executor that started Ray shut it down


@pytest.fixture
def executor(ray_instance: RayExecutor, tmp_path: Path) -> Iterator[RayExecutor]:
    running = RayExecutor(workdir=tmp_path / "work", start_timeout_s=10.0)
    yield running
    running.close(grace_s=0.2)
    wait_for_no_actors()


def launch(tmp_path: Path, script: str, *, gpus: float = 0.0, **fields: object) -> PodLaunch:
    pod = local_launch(tmp_path, script, **fields)
    return dataclasses.replace(pod, resources={"num_gpus": gpus} if gpus else {})


def pod_actors() -> list[str]:
    """The names of the live pod actors, of every executor (all use the "gpuq" namespace)."""
    return [name for name in ray.util.list_named_actors() if name.startswith("gpuq-pod:")]


def idle() -> bool:
    return not pod_actors() and ray.available_resources().get("GPU") == RAY_GPUS


def wait_for_no_actors() -> None:
    """Until every pod actor is gone and every GPU is Ray's again (a killed actor releases them later)."""
    deadline = time.monotonic() + 5.0
    while not idle() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pod_actors() == []
    assert ray.available_resources().get("GPU") == RAY_GPUS


def test_the_pod_sees_its_own_devices_and_env_and_nothing_of_the_servers(
    executor: RayExecutor, tmp_path: Path
) -> None:
    pod = launch(
        tmp_path,
        DUMP_ENV,
        gpus=2,
        env={"GPUQ_POD": "worker-0", "CUDA_VISIBLE_DEVICES": "5"},
        devices=("2", "3"),
    )
    executor.start(pod)
    assert wait_for_exits(executor)[0].exit_code == 0
    env = json.loads(wait_for_line(pod.log_path, "ENV ").removeprefix("ENV "))
    # Placement's devices beat the pod's and the ones Ray gave its actor (Ray has only GPUs 0 and 1).
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["GPUQ_POD"] == "worker-0"
    expected = {"PATH", "HOME", "LANG", "PYTHONUNBUFFERED", "GPUQ_POD"}
    expected |= {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES"}
    assert set(env) - {"LC_CTYPE"} == expected  # nothing of Ray's worker environment (RAY_*) leaks


def test_the_log_records_rays_gpu_ids_then_the_start_the_output_and_the_exit(
    executor: RayExecutor, tmp_path: Path
) -> None:
    pod = launch(tmp_path, "import sys; print('to stdout'); print('to stderr', file=sys.stderr)", gpus=1)
    pod = dataclasses.replace(pod, devices=("1",))
    Path(pod.log_path).parent.mkdir(parents=True)
    Path(pod.log_path).write_text("earlier attempt\n")
    executor.start(pod)
    wait_for_exits(executor)
    lines = Path(pod.log_path).read_text().splitlines()
    assert lines[0] == "earlier attempt"
    assert re.fullmatch(
        r"--- \S+ ray actor gpuq-pod:team-a/train/worker-0:\S+ on node \w+, Ray GPU ids \[[01]\]; "
        r"the pod's CUDA_VISIBLE_DEVICES is placement's: 1",
        lines[1],
    )
    assert f" start {pod.key}: {sys.executable} -c " in lines[2] and lines[2].endswith("(image python:3.11)")
    assert sorted(lines[3:5]) == ["to stderr", "to stdout"]
    assert lines[5].startswith("--- ") and lines[5].endswith(f"exit {pod.key}: code 0")


@pytest.mark.parametrize(
    ("script", "exit_code"),
    [
        pytest.param("pass", 0, id="success is 0"),
        pytest.param("raise SystemExit(3)", 3, id="an exit status is kept"),
        pytest.param(
            "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -9, id="a signal is negative"
        ),
    ],
)
def test_exit_codes_are_reported_once_by_poll(
    executor: RayExecutor, tmp_path: Path, script: str, exit_code: int
) -> None:
    pod = launch(tmp_path, script, gpus=1)
    before = time.time()
    pid = executor.start(pod)
    assert pid is not None and pid > 0 and executor.running() == {pod.key}
    [exit_] = wait_for_exits(executor)
    assert (exit_.key, exit_.exit_code) == (pod.key, exit_code)
    assert before <= exit_.time <= time.time()
    assert executor.running() == set()
    assert executor.poll() == []
    wait_for_no_actors()  # the finished pod's actor is gone, and its GPU is Ray's again


def test_a_pod_that_traps_sigterm_ends_cleanly_within_its_grace(
    executor: RayExecutor, tmp_path: Path
) -> None:
    pod = launch(tmp_path, TRAP_TERM)
    executor.start(pod)
    wait_for_line(pod.log_path, "ready")
    started = time.monotonic()
    executor.terminate(pod.key, grace_s=5.0)
    assert executor.running() == {pod.key}  # terminate does not wait
    [exit_] = wait_for_exits(executor)
    assert exit_.exit_code == 0 and time.monotonic() - started < 5.0
    assert wait_for_line(pod.log_path, "got SIGTERM")


def test_a_pod_that_ignores_sigterm_is_killed_once_the_grace_has_passed(
    executor: RayExecutor, tmp_path: Path
) -> None:
    pod = launch(tmp_path, IGNORE_TERM)
    executor.start(pod)
    wait_for_line(pod.log_path, "ready")
    started = time.monotonic()
    executor.terminate(pod.key, GRACE_S)
    executor.terminate(pod.key, 10.0)  # repeating never postpones the kill
    assert time.monotonic() - started < GRACE_S  # non-blocking
    [exit_] = wait_for_exits(executor)
    assert exit_.exit_code == -signal.SIGKILL
    assert time.monotonic() - started >= GRACE_S


def test_close_leaves_no_process_behind(ray_instance: RayExecutor, tmp_path: Path) -> None:
    executor = RayExecutor(workdir=tmp_path / "work")
    pods = [
        launch(tmp_path, TRAP_TERM, key="ns/a/w-0"),
        launch(tmp_path, IGNORE_TERM, key="ns/b/w-0"),
        launch(tmp_path, WITH_GRANDCHILD, key="ns/c/w-0"),
    ]
    pids = [executor.start(pod) for pod in pods]
    for pod in pods:
        wait_for_line(pod.log_path, "grandchild " if pod.key == "ns/c/w-0" else "ready")
    grandchild = int(wait_for_line(pods[2].log_path, "grandchild ").split()[1])
    wait_for_line(pods[2].log_path, "ready")
    started = time.monotonic()
    executor.close(grace_s=GRACE_S)
    assert time.monotonic() - started < GRACE_S + 1.5
    assert executor.running() == set()
    wait_until_dead(*[pid for pid in pids if pid is not None], grandchild)
    assert {(e.key, e.exit_code) for e in executor.poll()} == {
        ("ns/a/w-0", 0),
        ("ns/b/w-0", -signal.SIGKILL),
        ("ns/c/w-0", -signal.SIGTERM),
    }
    wait_for_no_actors()
    assert ray.is_initialized()  # it did not start Ray, so it leaves it up
    with pytest.raises(ExecutorError, match="closed"):
        executor.start(launch(tmp_path, "pass", key="ns/d/w-0"))


@pytest.mark.parametrize(
    ("command", "working_dir", "message"),
    [
        pytest.param(
            ["no-such-command-gpuq"], None, "command 'no-such-command-gpuq' not found", id="unknown"
        ),
        pytest.param([], None, "no command to run", id="empty"),
        pytest.param(
            ["./missing.sh"], None, "command './missing.sh' is not an executable file", id="no file (actor)"
        ),
        pytest.param(
            ["true"], "/no/such/dir", "working directory /no/such/dir does not exist", id="bad cwd (actor)"
        ),
    ],
)
def test_a_pod_that_cannot_start_is_refused_and_nothing_runs(
    executor: RayExecutor, tmp_path: Path, command: list[str], working_dir: str | None, message: str
) -> None:
    pod = launch(tmp_path, "", command=command, working_dir=working_dir)
    with pytest.raises(ExecutorError, match=message):
        executor.start(pod)
    assert executor.running() == set()
    assert executor.poll() == []
    wait_for_no_actors()


def test_an_unknown_command_is_refused_before_any_actor_exists(
    executor: RayExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    created: list[object] = []
    monkeypatch.setattr(executor, "_create", lambda *args: created.append(args))
    with pytest.raises(ExecutorError, match="not found on PATH"):
        executor.start(launch(tmp_path, "", command=["no-such-command-gpuq"]))
    assert created == []


def test_a_key_runs_once_and_unknown_keys_are_ignored_by_terminate(
    executor: RayExecutor, tmp_path: Path
) -> None:
    pod = launch(tmp_path, IGNORE_TERM)
    executor.start(pod)
    with pytest.raises(ExecutorError, match="already running"):
        executor.start(pod)
    executor.terminate("ns/unknown/w-0", 0.0)
    executor.terminate(pod.key, 0.0)
    assert wait_for_exits(executor)[0].exit_code == -signal.SIGKILL
    executor.terminate(pod.key, 0.0)  # after its exit: still a no-op
    assert executor.poll() == []


def test_a_device_id_that_would_widen_the_gpu_list_is_refused(executor: RayExecutor, tmp_path: Path) -> None:
    with pytest.raises(ExecutorError, match="not a device id: '0,1'"):
        executor.start(launch(tmp_path, "pass", devices=("0,1",)))
    assert executor.running() == set()


def test_resources_no_node_has_are_refused_at_once(executor: RayExecutor, tmp_path: Path) -> None:
    pod = dataclasses.replace(launch(tmp_path, "pass"), resources={"num_gpus": 3.0, "ssd": 1.0})
    started = time.monotonic()
    with pytest.raises(ExecutorError, match="no node of the Ray cluster has 3 GPU, 1 ssd in all"):
        executor.start(pod)
    assert time.monotonic() - started < 1.0
    assert pod_actors() == []


def test_a_pod_ray_cannot_place_yet_is_refused_after_the_start_timeout_and_never_runs_later(
    ray_instance: RayExecutor, executor: RayExecutor, tmp_path: Path
) -> None:
    holder = launch(tmp_path, IGNORE_TERM, key="ns/holder/w-0", gpus=2)
    executor.start(holder)
    impatient = RayExecutor(workdir=tmp_path / "work", start_timeout_s=0.5)
    late = launch(tmp_path, "print('ran')", key="ns/late/w-0", gpus=1)
    started = time.monotonic()
    with pytest.raises(
        ExecutorError, match=r"Ray did not place the pod within 0.5s \(needs 1 GPU; free now: "
    ):
        impatient.start(late)
    assert time.monotonic() - started >= 0.5  # it waited out its timeout before refusing
    assert impatient.running() == set()
    executor.terminate(holder.key, 0.0)
    wait_for_exits(executor)
    wait_for_no_actors()  # the pending actor was cancelled: it does not start once GPUs are free
    time.sleep(0.3)
    assert not Path(late.log_path).exists()
    impatient.close()


def test_a_pod_whose_actor_dies_is_reported_killed_and_its_processes_do_not_outlive_it(
    executor: RayExecutor, tmp_path: Path
) -> None:
    # The pod's parent is its supervisor (gpuq.run.proctrack), whose parent is the actor.
    script = (
        "import os, time; stat = open(f'/proc/{os.getppid()}/stat').read(); "
        "print(f\"actor {stat.rsplit(')', 1)[1].split()[1]}\", flush=True); time.sleep(30)"
    )
    pod = launch(tmp_path, script)
    pid = executor.start(pod)
    assert pid is not None
    actor_pid = int(wait_for_line(pod.log_path, "actor ").split()[1])
    os.kill(actor_pid, signal.SIGKILL)  # as when Ray's worker crashes or its node is lost
    [exit_] = wait_for_exits(executor)
    assert exit_.exit_code == -signal.SIGKILL
    assert f"{pod.key}: its Ray actor died (" in Path(pod.log_path).read_text()
    wait_until_dead(pid)


def test_a_pod_whose_worker_dies_is_killed_by_its_tether_without_the_executor(
    executor: RayExecutor, tmp_path: Path
) -> None:
    """Nothing polls here, so the executor never hears of the death: the pod's tether alone kills
    the pod, its command included (Ray itself kills only the worker's children, the supervisor)."""
    script = (
        "import os, time; stat = open(f'/proc/{os.getppid()}/stat').read(); "
        "print(f\"actor {stat.rsplit(')', 1)[1].split()[1]} me {os.getpid()}\", flush=True); time.sleep(30)"
    )
    pod = launch(tmp_path, script)
    executor.start(pod)
    _, actor_pid, _, command_pid = wait_for_line(pod.log_path, "actor ").split()
    os.kill(int(actor_pid), signal.SIGKILL)
    wait_until_dead(int(command_pid))
