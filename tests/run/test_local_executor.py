"""The local executor with real processes: environment, logs, exit codes, termination, no orphans."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuq.run.executors import ExecutorError, LocalExecutor, PodExit, PodLaunch

GRACE_S = 0.3
WAIT_S = 10.0


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[LocalExecutor]:
    running = LocalExecutor(tmp_path / "work")
    yield running
    running.close(grace_s=0.2)


def launch(
    tmp_path: Path,
    script: str,
    *,
    key: str = "team-a/train/worker-0",
    env: dict[str, str] | None = None,
    devices: tuple[str, ...] = (),
    working_dir: str | None = None,
    command: list[str] | None = None,
) -> PodLaunch:
    return PodLaunch(
        key=key,
        command=command if command is not None else [sys.executable, "-c", textwrap.dedent(script)],
        args=[],
        env=env or {},
        working_dir=working_dir,
        image="python:3.11",
        devices=devices,
        log_path=str(tmp_path / "logs" / f"{key.replace('/', '_')}.log"),
        resources={},
    )


def wait_for_exits(executor: LocalExecutor, count: int = 1) -> list[PodExit]:
    exits: list[PodExit] = []
    deadline = time.monotonic() + WAIT_S
    while len(exits) < count and time.monotonic() < deadline:
        exits += executor.poll()
        time.sleep(0.01)
    assert len(exits) == count, f"still running: {executor.running()}"
    return exits


def wait_for_line(path: str, prefix: str) -> str:
    """The first log line starting with ``prefix``, once the pod has written it."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for line in Path(path).read_text().splitlines():
            if line.startswith(prefix):
                return line
        time.sleep(0.01)
    raise AssertionError(f"{prefix!r} never appeared in {path}")


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (PID 1 in a container may not reap orphans)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_until_dead(*pids: int) -> None:
    deadline = time.monotonic() + 2.0
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not [pid for pid in pids if alive(pid)]


DUMP_ENV = "import json, os; print('ENV ' + json.dumps(dict(os.environ)))"
TRAP_TERM = """
    import signal, sys, time
    def stop(*_):
        print('got SIGTERM', flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    print('ready', flush=True)
    time.sleep(30)
"""
IGNORE_TERM = """
    import signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print('ready', flush=True)
    time.sleep(30)
"""
# The leader exits on SIGTERM; its grandchild ignores SIGTERM and must still not survive the pod.
WITH_GRANDCHILD = f"""
    import signal, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", {textwrap.dedent(IGNORE_TERM)!r}])
    print(f'grandchild {{child.pid}}', flush=True)
    time.sleep(30)
"""


def test_the_pod_sees_its_own_devices_and_env_and_nothing_of_the_servers(
    executor: LocalExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    monkeypatch.setenv("GPUQ_SERVER_SECRET", "must-not-leak")
    pod = launch(
        tmp_path, DUMP_ENV, env={"GPUQ_POD": "worker-0", "CUDA_VISIBLE_DEVICES": "5"}, devices=("2", "3")
    )
    executor.start(pod)
    assert wait_for_exits(executor)[0].exit_code == 0
    env = json.loads(wait_for_line(pod.log_path, "ENV ").removeprefix("ENV "))
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"  # placement's devices beat both the server's and the pod's
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["GPUQ_POD"] == "worker-0"
    assert env["PYTHONUNBUFFERED"] == "1"
    expected = {"PATH", "HOME", "LANG", "PYTHONUNBUFFERED", "GPUQ_POD"}
    expected |= {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES"}
    assert set(env) - {"LC_CTYPE"} == expected  # LC_CTYPE: Python's own locale coercion, if any


def test_a_pod_without_devices_sees_no_gpu_not_all_of_them(
    executor: LocalExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    pod = launch(tmp_path, DUMP_ENV)
    executor.start(pod)
    wait_for_exits(executor)
    env = json.loads(wait_for_line(pod.log_path, "ENV ").removeprefix("ENV "))
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_stdout_and_stderr_are_appended_to_the_log_between_a_header_and_the_exit(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    pod = launch(tmp_path, "import sys; print('to stdout'); print('to stderr', file=sys.stderr)")
    Path(pod.log_path).parent.mkdir(parents=True)
    Path(pod.log_path).write_text("earlier attempt\n")
    executor.start(pod)
    wait_for_exits(executor)
    lines = Path(pod.log_path).read_text().splitlines()
    assert lines[0] == "earlier attempt"
    assert lines[1].startswith("--- ") and f" start {pod.key}: {sys.executable} -c " in lines[1]
    assert lines[1].endswith("(image python:3.11)")
    assert sorted(lines[2:4]) == ["to stderr", "to stdout"]
    assert lines[4].startswith("--- ") and lines[4].endswith(f"exit {pod.key}: code 0")


def test_the_default_working_directory_is_the_pods_own_under_the_workdir(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    pod = launch(tmp_path, "import os; print('CWD ' + os.getcwd())")
    executor.start(pod)
    wait_for_exits(executor)
    cwd = wait_for_line(pod.log_path, "CWD ").removeprefix("CWD ")
    assert Path(cwd) == tmp_path / "work" / "pods" / "team-a" / "train_worker-0"


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
    executor: LocalExecutor, tmp_path: Path, script: str, exit_code: int
) -> None:
    pod = launch(tmp_path, script)
    before = time.time()
    pid = executor.start(pod)
    assert pid > 0 and executor.running() == {pod.key}
    [exit_] = wait_for_exits(executor)
    assert (exit_.key, exit_.exit_code) == (pod.key, exit_code)
    assert before <= exit_.time <= time.time()
    assert executor.running() == set()
    assert executor.poll() == []


def test_a_pod_that_traps_sigterm_ends_cleanly_within_its_grace(
    executor: LocalExecutor, tmp_path: Path
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
    executor: LocalExecutor, tmp_path: Path
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


def test_terminate_reaches_the_whole_process_group(executor: LocalExecutor, tmp_path: Path) -> None:
    pod = launch(tmp_path, WITH_GRANDCHILD)
    pid = executor.start(pod)
    grandchild = int(wait_for_line(pod.log_path, "grandchild ").split()[1])
    wait_for_line(pod.log_path, "ready")  # the grandchild ignores SIGTERM from here on
    executor.terminate(pod.key, GRACE_S)
    [exit_] = wait_for_exits(executor)
    assert exit_.exit_code == -signal.SIGTERM
    wait_until_dead(pid, grandchild)


def test_what_a_pod_leaves_behind_dies_with_it(executor: LocalExecutor, tmp_path: Path) -> None:
    script = f"""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", {textwrap.dedent(IGNORE_TERM)!r}])
        print(f'grandchild {{child.pid}}', flush=True)
    """
    pod = launch(tmp_path, script)
    executor.start(pod)
    grandchild = int(wait_for_line(pod.log_path, "grandchild ").split()[1])
    assert wait_for_exits(executor)[0].exit_code == 0
    wait_until_dead(grandchild)


def test_close_leaves_no_process_behind(tmp_path: Path) -> None:
    executor = LocalExecutor(tmp_path / "work")
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
    wait_until_dead(*pids, grandchild)
    assert {(e.key, e.exit_code) for e in executor.poll()} == {
        ("ns/a/w-0", 0),
        ("ns/b/w-0", -signal.SIGKILL),
        ("ns/c/w-0", -signal.SIGTERM),
    }
    with pytest.raises(ExecutorError, match="closed"):
        executor.start(launch(tmp_path, "pass", key="ns/d/w-0"))


@pytest.mark.parametrize(
    ("command", "working_dir", "message"),
    [
        pytest.param(
            ["no-such-command-gpuq"], None, "command 'no-such-command-gpuq' not found", id="unknown"
        ),
        pytest.param(
            ["./missing.sh"], None, "command './missing.sh' is not an executable file", id="no file"
        ),
        pytest.param([], None, "no command to run", id="empty"),
        pytest.param(["true"], "/no/such/dir", "working directory /no/such/dir does not exist", id="bad cwd"),
    ],
)
def test_a_pod_that_cannot_start_is_refused_and_nothing_runs(
    executor: LocalExecutor, tmp_path: Path, command: list[str], working_dir: str | None, message: str
) -> None:
    pod = launch(tmp_path, "", command=command, working_dir=working_dir)
    with pytest.raises(ExecutorError, match=message):
        executor.start(pod)
    assert executor.running() == set()
    assert executor.poll() == []


def test_a_key_runs_once_and_unknown_keys_are_ignored_by_terminate(
    executor: LocalExecutor, tmp_path: Path
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


def test_a_device_id_that_would_widen_the_gpu_list_is_refused(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    with pytest.raises(ExecutorError, match="not a device id: '0,1'"):
        executor.start(launch(tmp_path, "pass", devices=("0,1",)))
    assert executor.running() == set()
