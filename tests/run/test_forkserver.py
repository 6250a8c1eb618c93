"""Pods forked by the executor's forkserver, with real processes: the same records, reaping and isolation
as a supervisor per interpreter, starts from many threads at once, and no single point of failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gpuq.run import forkserver
from gpuq.run.executors import ExecutorError, LocalExecutor, PodExit, PodLaunch
from gpuq.run.podrecords import PodRecords
from gpuq.run.proctrack import EXIT_FILE, LEADER_FILE, CgroupTracker, identity

WAIT_S = 30.0
HAS_CGROUPS = CgroupTracker.create(Path("/tmp")) is not None
TRACKING = [
    pytest.param(
        "cgroup", marks=pytest.mark.skipif(not HAS_CGROUPS, reason="no cgroup v2 here"), id="cgroup"
    ),
    pytest.param("tree", id="tree"),
]
PATHS = [pytest.param(True, id="forkserver"), pytest.param(False, id="interpreter-per-pod")]


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[LocalExecutor]:
    running = LocalExecutor(tmp_path / "work", forkserver=True)
    yield running
    running.close(grace_s=0.2)


def launch(tmp_path: Path, command: list[str], *, key: str = "team-a/job/worker-0") -> PodLaunch:
    return PodLaunch(
        key=key,
        command=command,
        args=[],
        env={},
        working_dir=None,
        image="",
        devices=(),
        log_path=str(tmp_path / "logs" / f"{key.replace('/', '_')}.log"),
        resources={},
    )


def gated(gate: Path, code: int = 0) -> list[str]:
    """A pod that runs until ``gate`` exists, then exits with ``code``."""
    return ["/bin/sh", "-c", f'while [ ! -e "{gate}" ]; do sleep 0.02; done; exit {code}']


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def wait_for_exits(executor: LocalExecutor, count: int = 1) -> list[PodExit]:
    exits: list[PodExit] = []
    deadline = time.monotonic() + WAIT_S
    while len(exits) < count and time.monotonic() < deadline:
        exits += executor.poll()
        time.sleep(0.005)
    assert len(exits) == count, f"still running: {executor.running()}"
    return exits


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def alive(pid: int) -> bool:
    found = identity(pid)
    return found is not None


# -- the forkserver's life -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "forked"),
    [(True, [True, True, True]), (None, [False, True, True]), (False, [False, False, False])],
    ids=["forkserver=True", "default", "forkserver=False"],
)
def test_the_forkserver_starts_lazily_and_forks_every_supervisor_after(
    tmp_path: Path, option: bool | None, forked: list[bool]
) -> None:
    running = LocalExecutor(tmp_path / "work", forkserver=option)
    try:
        assert running.forkserver_pid is None  # nothing started: no forkserver
        found = []
        for i in range(3):
            pid = running.start(launch(tmp_path, gated(tmp_path / "go"), key=f"team-a/job-{i}/w"))
            found.append(parent(pid) != os.getpid())
            if found[-1]:
                assert parent(pid) == running.forkserver_pid
        assert found == forked
        server = running.forkserver_pid
        (tmp_path / "go").touch()
        assert {e.exit_code for e in wait_for_exits(running, 3)} == {0}
        assert running.forkserver_pid == server  # one forkserver for every pod
    finally:
        running.close(grace_s=0.2)
    assert running.forkserver_pid is None


def test_a_killed_forkserver_leaves_its_pods_running_and_is_started_again(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    pid = executor.start(launch(tmp_path, gated(tmp_path / "go", code=4)))
    first = executor.forkserver_pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: executor.forkserver_pid is None, "the forkserver to be gone")
    assert alive(pid) and executor.poll() == []  # the pod runs on, nothing is reported
    (tmp_path / "go").touch()
    (exit_,) = wait_for_exits(executor)  # found through its record: exit.json
    assert (exit_.key, exit_.exit_code) == ("team-a/job/worker-0", 4)
    again = executor.start(launch(tmp_path, ["/bin/sh", "-c", "exit 5"], key="team-a/job/worker-1"))
    assert executor.forkserver_pid not in (None, first)
    assert parent(again) == executor.forkserver_pid
    assert [e.exit_code for e in wait_for_exits(executor)] == [5]


def test_pods_start_with_an_interpreter_each_when_the_forkserver_cannot_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forkserver, "FORKSERVER", "import sys; sys.exit(3)")
    running = LocalExecutor(tmp_path / "work", forkserver=True)
    try:
        pid = running.start(launch(tmp_path, gated(tmp_path / "go", code=6)))
        assert running.forkserver_pid is None
        assert parent(pid) == os.getpid()  # a child of this process, as before
        (tmp_path / "go").touch()
        assert [e.exit_code for e in wait_for_exits(running)] == [6]
    finally:
        running.close(grace_s=0.2)


def test_a_killed_server_leaves_its_pods_to_the_next_executor(tmp_path: Path) -> None:
    """``kill -9`` of a server (a child process here): its forkserver exits, its pods run on, are adopted."""
    work, gate = tmp_path / "work", tmp_path / "go"
    command = ["/bin/sh", "-c", f"touch {tmp_path / 'started'}; " + gated(gate, code=7)[2]]
    script = textwrap.dedent(
        f"""
        import json, os, signal, sys
        from pathlib import Path
        from gpuq.run.executors import LocalExecutor, PodLaunch
        executor = LocalExecutor(Path({str(work)!r}), forkserver=True)
        pod = PodLaunch(key="team-a/job/worker-0", command={command!r}, args=[], env={{}},
                        working_dir=None, image="", devices=(), log_path={str(tmp_path / "pod.log")!r},
                        resources={{}})
        pid = executor.start(pod)
        while not os.path.exists({str(tmp_path / "started")!r}):
            pass
        print(json.dumps({{"pod": pid, "forkserver": executor.forkserver_pid}}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    server = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert server.returncode == -signal.SIGKILL, server.stderr
    pids = json.loads(server.stdout)
    wait_for(lambda: not alive(pids["forkserver"]), "the forkserver to exit with its server")
    assert alive(pids["pod"])
    after = LocalExecutor(work)
    try:
        probe = after.adopt("team-a/job/worker-0")
        assert (probe.state, probe.pid) == ("running", pids["pod"])
        gate.touch()
        assert [(e.key, e.exit_code) for e in wait_for_exits(after)] == [("team-a/job/worker-0", 7)]
    finally:
        after.close(grace_s=0.2)


# -- what a pod gets -------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_forkserver", PATHS)
def test_the_supervisor_records_its_identity_and_the_exit(tmp_path: Path, use_forkserver: bool) -> None:
    running = LocalExecutor(tmp_path / "work", forkserver=use_forkserver)
    try:
        pod = launch(tmp_path, gated(tmp_path / "go", code=3))
        pid = running.start(pod)
        record = PodRecords(tmp_path / "work").path(pod.key)
        wait_for(lambda: (record / LEADER_FILE).exists(), "leader.json")
        leader = json.loads((record / LEADER_FILE).read_text())
        me = identity(pid)
        assert me is not None
        assert leader == {"pid": pid, "start": me.start, "boot": me.boot}
        assert not (record / EXIT_FILE).exists()
        (tmp_path / "go").touch()
        wait_for(lambda: (record / EXIT_FILE).exists(), "exit.json")
        recorded = json.loads((record / EXIT_FILE).read_text())
        assert recorded["code"] == 3 and abs(recorded["time"] - time.time()) < WAIT_S
        assert [e.exit_code for e in wait_for_exits(running)] == [3]
        assert {p.name for p in record.iterdir()} == {"intent.json", LEADER_FILE, EXIT_FILE}  # no temporaries
    finally:
        running.close(grace_s=0.2)


STATUSES = [
    # (command, the exit the executor reports)
    (["/bin/true"], 0),
    (["/bin/sh", "-c", "exit 42"], 42),
    (["/bin/sh", "-c", "kill -TERM $$"], -signal.SIGTERM),
    (["/bin/sh", "-c", "kill -KILL $$"], -signal.SIGKILL),
    (["/nonexistent/command"], None),  # refused before anything runs
]


@pytest.mark.parametrize("use_forkserver", PATHS)
@pytest.mark.parametrize(("command", "expected"), STATUSES, ids=[" ".join(c[0]) for c in STATUSES])
def test_the_commands_status_is_reported_alike_on_both_paths(
    tmp_path: Path, use_forkserver: bool, command: list[str], expected: int | None
) -> None:
    running = LocalExecutor(tmp_path / "work", forkserver=use_forkserver)
    try:
        if expected is None:
            with pytest.raises(ExecutorError, match="not an executable file"):
                running.start(launch(tmp_path, command))
            assert running.running() == set()
            return
        running.start(launch(tmp_path, command))
        assert [e.exit_code for e in wait_for_exits(running)] == [expected]
    finally:
        running.close(grace_s=0.2)


LOCALES = [
    # (the pod's environment, LC_CTYPE its command must see: a fresh interpreter's coercion undone)
    pytest.param({"LANG": "C", "ONLY": "mine"}, None, id="LC_CTYPE unset"),
    pytest.param({"LC_CTYPE": "C", "ONLY": "mine"}, "C", id="LC_CTYPE=C"),
]


@pytest.mark.parametrize("use_forkserver", PATHS)
@pytest.mark.parametrize(("env", "lc_ctype"), LOCALES)
def test_the_environment_working_directory_umask_and_stdin_are_the_pods(
    tmp_path: Path, use_forkserver: bool, env: dict[str, str], lc_ctype: str | None
) -> None:
    running = LocalExecutor(tmp_path / "work", forkserver=use_forkserver)
    cwd, out = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    script = 'env > "$1.env"; pwd > "$1.cwd"; umask > "$1.umask"; cat > "$1.stdin"'
    pod = replace(launch(tmp_path, ["/bin/sh", "-c", script, "sh", str(out)]), env=env, working_dir=str(cwd))
    try:
        running.start(pod)
        assert [e.exit_code for e in wait_for_exits(running)] == [0]
    finally:
        running.close(grace_s=0.2)
    seen = dict(line.split("=", 1) for line in Path(f"{out}.env").read_text().splitlines() if "=" in line)
    assert seen.get("LC_CTYPE") == lc_ctype
    assert seen["ONLY"] == "mine" and "GPUQ_TEST_SERVER_ONLY" not in seen
    assert Path(f"{out}.cwd").read_text().strip() == str(cwd)
    assert int(Path(f"{out}.umask").read_text(), 8) == forkserver.current_umask()
    assert Path(f"{out}.stdin").read_text() == ""


def test_a_start_the_forkserver_refuses_is_an_error_and_it_serves_on() -> None:
    server = forkserver.Forkserver()
    log = os.open(os.devnull, os.O_WRONLY)
    try:
        with pytest.raises(OSError, match="No such file or directory"):
            server.spawn(
                argv=["/bin/true"],
                env={},
                cwd="/nonexistent",
                umask=0o22,
                record="/",
                group="",
                log=log,
                stdin=None,
            )
        assert server.running()
    finally:
        os.close(log)
        server.release()
    assert not server.running()


ORPHANS = {
    # name: shell code that leaves a process behind and writes its pid to $1
    "a background child": 'sleep 300 & echo $! > "$1"',
    "a setsid grandchild": 'setsid sh -c \'echo $$ > "$1"; exec sleep 300\' sh "$1" &',
    "a double fork": '(sleep 300 & echo $! > "$1") &',
}


@pytest.mark.parametrize("tracking", TRACKING)
@pytest.mark.parametrize("orphan", list(ORPHANS))
def test_what_a_pod_leaves_behind_dies_before_its_exit_is_reported(
    tmp_path: Path, tracking: str, orphan: str
) -> None:
    running = LocalExecutor(tmp_path / "work", tracking=tracking, forkserver=True)
    pidfile = tmp_path / "orphan.pid"
    try:
        running.start(
            launch(tmp_path, ["/bin/sh", "-c", ORPHANS[orphan] + "\nsleep 0.2; exit 0", "sh", str(pidfile)])
        )
        assert [e.exit_code for e in wait_for_exits(running)] == [0]
        left = int(pidfile.read_text().split()[0])
        assert not alive(left), f"{orphan} ({left}) outlived its pod"
    finally:
        running.close(grace_s=0.2)


# -- several threads -------------------------------------------------------------------------------------


def test_200_pods_started_from_8_threads_are_each_reported_once(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    keys = [f"team-a/job-{i}/worker-0" for i in range(200)]
    errors: list[Exception] = []
    exits: list[PodExit] = []

    def starter(mine: list[str]) -> None:
        for key in mine:
            try:
                executor.start(launch(tmp_path, ["/bin/sh", "-c", "exit 0"], key=key))
            except Exception as error:  # collected and asserted below
                errors.append(error)

    threads = [threading.Thread(target=starter, args=(keys[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 120
    while (any(t.is_alive() for t in threads) or executor.running()) and time.monotonic() < deadline:
        exits += executor.poll()  # the loop polls while the starters run
        time.sleep(0.005)
    for thread in threads:
        thread.join()
    exits += executor.poll()
    assert errors == []
    counts = Counter(e.key for e in exits)
    assert set(counts) == set(keys) and set(counts.values()) == {1}
    assert {e.exit_code for e in exits} == {0}


@pytest.mark.parametrize("use_forkserver", PATHS)
def test_the_same_key_started_at_once_from_8_threads_runs_once(tmp_path: Path, use_forkserver: bool) -> None:
    running = LocalExecutor(tmp_path / "work", forkserver=use_forkserver)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def starter() -> None:
        barrier.wait()
        try:
            running.start(launch(tmp_path, gated(tmp_path / "go")))
            outcomes.append("started")
        except ExecutorError as error:
            outcomes.append(str(error))

    try:
        threads = [threading.Thread(target=starter) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert outcomes.count("started") == 1
        assert all("already running" in o for o in outcomes if o != "started")
        with pytest.raises(ExecutorError, match="already running"):
            running.start(launch(tmp_path, gated(tmp_path / "go")))
        (tmp_path / "go").touch()
        assert len(wait_for_exits(running)) == 1
        running.start(launch(tmp_path, ["/bin/true"]))  # reported: the key may start again
        assert len(wait_for_exits(running)) == 1
    finally:
        running.close(grace_s=0.2)


def test_poll_running_and_terminate_do_not_wait_for_a_start_in_progress(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    """A start blocked in opening its log (a FIFO nobody reads yet) holds no lock the others need."""
    other = executor.start(launch(tmp_path, ["/bin/sh", "-c", "sleep 300"], key="team-a/other/w"))
    fifo = tmp_path / "logs" / "blocked.log"
    fifo.parent.mkdir(exist_ok=True)
    os.mkfifo(fifo)
    blocked = launch(tmp_path, ["/bin/true"], key="team-a/blocked/w")
    blocked = replace(blocked, log_path=str(fifo))
    outcome: list[object] = []
    starter = threading.Thread(target=lambda: outcome.append(executor.start(blocked)))
    starter.start()
    time.sleep(0.2)
    assert starter.is_alive()  # blocked in open()
    began = time.monotonic()
    assert executor.running() == {"team-a/other/w"}
    assert executor.poll() == []
    executor.terminate("team-a/other/w", 0.0)
    with pytest.raises(ExecutorError, match="already running"):
        executor.start(blocked)
    assert time.monotonic() - began < 2.0
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets the start go on
    try:
        starter.join(WAIT_S)
        assert outcome and isinstance(outcome[0], int)
        exits = {e.key: e.exit_code for e in wait_for_exits(executor, 2)}
        assert exits == {"team-a/other/w": -signal.SIGKILL, "team-a/blocked/w": 0}
        assert not alive(other)
    finally:
        os.close(reader)


@pytest.mark.parametrize("use_forkserver", PATHS)
@pytest.mark.parametrize("tracking", TRACKING)
def test_a_stop_sent_as_the_pod_starts_is_never_lost(
    tmp_path: Path, use_forkserver: bool, tracking: str
) -> None:
    """SIGTERM at once after ``start`` returns (a preemption in the step that admitted it): the command
    never runs to its end, whether the signal found it running, not yet in its cgroup, or not yet forked."""
    running = LocalExecutor(tmp_path / "work", tracking=tracking, forkserver=use_forkserver)
    try:
        markers = [tmp_path / f"done-{i}" for i in range(5)]
        for i, marker in enumerate(markers):
            running.start(
                launch(tmp_path, ["/bin/sh", "-c", f"sleep 3; touch {marker}"], key=f"team-a/j{i}/main-0")
            )
            running.terminate(f"team-a/j{i}/main-0", 10.0)
        exits = wait_for_exits(running, len(markers))
        assert all(e.exit_code != 0 for e in exits), exits
        time.sleep(3.5)
        assert not any(m.exists() for m in markers)
    finally:
        running.close(grace_s=0.2)
