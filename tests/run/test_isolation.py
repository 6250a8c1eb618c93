"""Pods isolated from the server and from each other, with real processes through the LocalExecutor.

A team-b pod leaves a secret in its log and its directory; team-a pods then try to read the
server's database and context file (the admin token), team-b's log and files, the server's
environment and processes, and to run as root. Each attack runs in every isolation mode:
``bwrap`` (private view + a user per team), ``user`` (a user per team, no sandbox) and
``none`` (what every pod got before isolation existed: every attack succeeds).

Separately, a descendant that calls ``setsid`` must die with its pod, under each tracker
(a cgroup per pod, or the process tree), and the pod's exit is reported only once it is gone.

Users are bare uids mapped with ``--pod-user`` semantics (nothing is added to /etc/passwd);
the ``gpuq-<namespace>`` default is exercised end to end in tests/server/test_serve_isolation.py.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuq.run.executors import ExecutorError, LocalExecutor, PodExit, PodLaunch
from gpuq.run.proctrack import CgroupTracker
from gpuq.run.sandbox import Isolation, configure

WAIT_S = 15.0
UID_A, UID_B = 64101, 64102
IS_ROOT = os.geteuid() == 0
HAS_BWRAP = shutil.which("bwrap") is not None
NEEDS_ROOT = pytest.mark.skipif(not IS_ROOT, reason="a user per team needs the tests to run as root")
NEEDS_BWRAP = pytest.mark.skipif(
    not HAS_BWRAP, reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
)
MODES = [
    pytest.param("bwrap", marks=[NEEDS_ROOT, NEEDS_BWRAP], id="bwrap"),
    pytest.param("user", marks=[NEEDS_ROOT], id="user"),
    pytest.param("none", id="none"),
]
SERVER_SECRET = "server-secret-" + secrets.token_hex(4)


def _cgroups_available() -> bool:
    probe = Path(tempfile.gettempdir())
    tracker = CgroupTracker.create(probe)
    if tracker is None:
        return False
    tracker.close()
    return True


HAS_CGROUPS = _cgroups_available()


@dataclass
class World:
    """A server's state and workdir in a directory others may pass (``/tmp/gpuq-iso-*``, mode 0711)."""

    mode: str
    root: Path
    executor: LocalExecutor
    isolation: Isolation
    server_pid: int = 0  # a stand-in for the server's process, started with the admin token in its env

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def work(self) -> Path:
        return self.root / "workdir"

    def launch(self, key: str, command: list[str], env: dict[str, str] | None = None) -> PodLaunch:
        namespace, workload, pod = key.split("/")
        return PodLaunch(
            key=key,
            command=command,
            args=[],
            env=env or {},
            working_dir=None,
            image="",
            devices=(),
            log_path=str(self.work / "logs" / namespace / workload / f"{pod}.log"),
            resources={},
            namespace=namespace,
        )

    def run(self, pod: PodLaunch) -> tuple[PodExit, str]:
        """Run ``pod`` to its end: its exit and what it printed (the log less gpuq's start and exit lines)."""
        self.executor.start(pod)
        (exit_,) = wait_for_exits(self.executor)
        lines = Path(pod.log_path).read_text().splitlines()
        return exit_, "\n".join(line for line in lines if not line.startswith("--- "))


def wait_for_exits(executor: LocalExecutor, count: int = 1) -> list[PodExit]:
    exits: list[PodExit] = []
    deadline = time.monotonic() + WAIT_S
    while len(exits) < count and time.monotonic() < deadline:
        exits += executor.poll()
        time.sleep(0.01)
    assert len(exits) == count, f"still running: {executor.running()}"
    return exits


def make_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="gpuq-iso-"))
    root.chmod(0o711)  # passable, as /var/lib is: the protection under test is the server's own modes
    state = root / "state"
    state.mkdir(mode=0o700)
    for name, text in (("gpuq.db", "DB-SECRET rows"), ("context.yaml", "token: ADMIN-SECRET-TOKEN\n")):
        descriptor = os.open(state / name, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
    return root


def make_isolation(mode: str, root: Path) -> Isolation:
    if mode == "none":
        return configure("none")
    return configure(
        "bwrap" if mode == "bwrap" else "user",
        users={"team-a": str(UID_A), "team-b": str(UID_B)},
        state=[root / "state"],
        workdir=root / "workdir",
        home=[Path.home()],
    )


@pytest.fixture(scope="module", params=MODES)
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    """One executor per mode; team-b's pod has already written its secrets."""
    mode: str = request.param
    root = make_root()
    os.environ["GPUQ_TEST_SERVER_SECRET"] = SERVER_SECRET
    os.environ["GPUQ_DATABASE"] = f"sqlite:///{root / 'state' / 'gpuq.db'}"
    isolation = make_isolation(mode, root)
    executor = LocalExecutor(root / "workdir", isolation=isolation)
    # /proc/<pid>/environ holds a process's environment as it started: a stand-in server started with it.
    server = subprocess.Popen(["sleep", "600"], env={**os.environ, "GPUQ_ADMIN_TOKEN": SERVER_SECRET})
    made = World(mode, root, executor, isolation, server.pid)
    try:
        writer = made.launch(
            "team-b/train/worker-0", ["/bin/sh", "-c", "echo TEAM-B-LOG-SECRET; echo TEAM-B-FILE > secret"]
        )
        exit_, _ = made.run(writer)
        assert exit_.exit_code == 0
        yield made
    finally:
        server.kill()
        server.wait()
        executor.close(grace_s=0.2)
        os.environ.pop("GPUQ_TEST_SERVER_SECRET", None)
        os.environ.pop("GPUQ_DATABASE", None)
        shutil.rmtree(root, ignore_errors=True)


TEAM_B_DIR = "workdir/pods/team-b/train_worker-0"
ATTACKS = {
    # name: (shell command, secret that must not appear, modes where it still succeeds)
    "read the server's database": ('cat "$ROOT/state/gpuq.db"', "DB-SECRET", {"none"}),
    "read the context file and its admin token": (
        'cat "$ROOT/state/context.yaml"',
        "ADMIN-SECRET-TOKEN",
        {"none"},
    ),
    "read another team's log": (
        'cat "$ROOT/workdir/logs/team-b/train/worker-0.log"',
        "TEAM-B-LOG-SECRET",
        {"none"},
    ),
    "read another team's pod directory": (f'cat "$ROOT/{TEAM_B_DIR}/secret"', "TEAM-B-FILE", {"none"}),
    "list the pods directory": ('ls "$ROOT/workdir/pods"', "team-b", {"none"}),
    "read the server's environment in /proc": (
        'cat "/proc/$SERVER_PID/environ"',
        SERVER_SECRET,
        {"none"},
    ),
    # Without a PID namespace a pod sees the server's process (its command line is world-readable:
    # pass the admin token by GPUQ_ADMIN_TOKEN, not --admin-token, where bwrap is missing).
    "see the server's process": (
        'test -d "/proc/$SERVER_PID" && echo SERVER-VISIBLE',
        "SERVER-VISIBLE",
        {"none", "user"},
    ),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_pod_cannot_reach_the_server_or_another_team(world: World, attack: str) -> None:
    script, secret, succeeds_in = ATTACKS[attack]
    key = f"team-a/attack-{list(ATTACKS).index(attack)}/worker-0"
    env = {"ROOT": str(world.root), "SERVER_PID": str(world.server_pid)}
    _exit, log = world.run(world.launch(key, ["/bin/sh", "-c", script], env))
    if world.mode in succeeds_in:
        assert secret in log, f"{attack} should still work in mode {world.mode}: {log}"
    else:
        assert secret not in log, f"{attack} succeeded in mode {world.mode}: {log}"


def test_a_pod_cannot_plant_a_file_in_another_teams_directory(world: World) -> None:
    script = f'echo planted > "$ROOT/{TEAM_B_DIR}/planted"; echo PLANT-EXIT $?'
    world.run(world.launch("team-a/plant/worker-0", ["/bin/sh", "-c", script], {"ROOT": str(world.root)}))
    planted = world.root / TEAM_B_DIR / "planted"
    assert planted.exists() == (world.mode == "none")


def test_the_pod_runs_as_its_teams_user_and_writes_only_its_own_directory(world: World) -> None:
    script = 'id -u; id -g; echo ok > "$HOME/mine" && echo HOME-WRITABLE'
    exit_, log = world.run(world.launch("team-a/whoami/worker-0", ["/bin/sh", "-c", script]))
    assert exit_.exit_code == 0, log
    lines = log.splitlines()
    own = world.work / "pods" / "team-a" / "whoami_worker-0"
    expected_uid = os.geteuid() if world.mode == "none" else UID_A
    assert lines[:2] == [str(expected_uid), str(expected_uid)]
    assert "HOME-WRITABLE" in lines
    assert (own / "mine").stat().st_uid == expected_uid
    for directory, mode, owner in (
        (world.work, 0o711, os.geteuid()),
        (world.work / "pods", 0o711, os.geteuid()),
        (world.work / "pods" / "team-a", 0o700, expected_uid),
        (own, 0o700, expected_uid),
        (world.work / "logs" / "team-a", 0o700, os.geteuid()),
    ):
        info = directory.stat()
        assert (stat.S_IMODE(info.st_mode), info.st_uid) == (mode, owner), directory
    log_file = Path(world.work / "logs" / "team-a" / "whoami" / "worker-0.log")
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600


def test_the_environment_is_the_pods_own_and_nothing_of_the_servers(world: World) -> None:
    pod = world.launch("team-a/env/worker-0", ["/usr/bin/env"], {"GPUQ_POD": "worker-0", "MY_VAR": "1"})
    exit_, log = world.run(pod)
    assert exit_.exit_code == 0, log
    env = dict(line.split("=", 1) for line in log.splitlines())
    assert set(env) == {
        "PATH",
        "HOME",
        "LANG",
        "PYTHONUNBUFFERED",
        "GPUQ_POD",
        "MY_VAR",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "NVIDIA_VISIBLE_DEVICES",
    }
    assert SERVER_SECRET not in log and "gpuq.db" not in log
    assert env["HOME"] == str(world.work / "pods" / "team-a" / "env_worker-0")
    assert env["HOME"] != str(Path.home())
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_the_pods_variables_never_reach_a_process_running_as_root(world: World) -> None:
    """``LD_PRELOAD`` of a library that is not there: the dynamic loader of every process started with it
    says so, once each. Only the pod's command (after the user switch) may, not the root wrappers."""
    pod = world.launch(
        "team-a/preload/worker-0", ["/usr/bin/id", "-u"], {"LD_PRELOAD": "/no/such/gpuq-lib.so"}
    )
    exit_, log = world.run(pod)
    assert exit_.exit_code == 0, log
    loaded = [line for line in log.splitlines() if "gpuq-lib.so" in line]
    if world.mode == "none":
        assert loaded  # everything runs as the server there anyway
    else:
        assert len(loaded) == 1, log  # id's own, as the team's user
        assert log.splitlines()[-1] == str(UID_A)


@NEEDS_ROOT
@NEEDS_BWRAP
def test_in_the_sandbox_the_system_is_read_only_and_tmp_is_private() -> None:
    root = make_root()
    try:
        (root / "shared").mkdir(mode=0o777)
        (root / "shared").chmod(0o777)
        isolation = configure(
            "bwrap",
            users={"team-a": str(UID_A)},
            state=[root / "state"],
            workdir=root / "workdir",
            shared=[root / "shared"],
        )
        executor = LocalExecutor(root / "workdir", isolation=isolation)
        outside = Path(tempfile.mkdtemp(prefix="gpuq-outside-"))
        outside.chmod(0o777)
        script = (
            "touch /usr/gpuq-planted 2>/dev/null || echo SYSTEM-READ-ONLY; "
            f"touch {outside}/x 2>/dev/null || echo TMP-PRIVATE; "
            "echo mine > /tmp/scratch && echo TMP-WRITABLE; "
            f"echo shared > {root}/shared/from-pod && echo SHARED-WRITABLE; "
            "echo mine > /dev/shm/x && echo SHM-WRITABLE; "
            "ls /proc | grep -c '^[0-9]' | sed 's/^/PROCESSES /'"
        )
        world = World("bwrap", root, executor, isolation)
        _exit, log = world.run(world.launch("team-a/view/worker-0", ["/bin/sh", "-c", script]))
        executor.close(grace_s=0.2)
        for expected in (
            "SYSTEM-READ-ONLY",
            "TMP-PRIVATE",
            "TMP-WRITABLE",
            "SHARED-WRITABLE",
            "SHM-WRITABLE",
        ):
            assert expected in log, log
        assert not (outside / "x").exists() and not Path("/tmp/scratch").exists()
        assert (root / "shared" / "from-pod").stat().st_uid == UID_A
        (processes,) = [line for line in log.splitlines() if line.startswith("PROCESSES ")]
        assert int(processes.split()[1]) <= 5  # bwrap's init, sh, ls, grep, sed: not the machine's
        shutil.rmtree(outside, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@NEEDS_ROOT
@NEEDS_BWRAP
def test_a_command_the_sandbox_hides_is_refused_before_anything_runs() -> None:
    root = make_root()
    try:
        tool = root / "state" / "tool.sh"
        tool.write_text("#!/bin/sh\necho ran\n")
        tool.chmod(0o755)
        isolation = configure(
            "bwrap", users={"team-a": str(UID_A)}, state=[root / "state"], workdir=root / "workdir"
        )
        executor = LocalExecutor(root / "workdir", isolation=isolation)
        world = World("bwrap", root, executor, isolation)
        with pytest.raises(ExecutorError, match="in a directory pods do not see"):
            executor.start(world.launch("team-a/hidden/worker-0", [str(tool)]))
        assert executor.running() == set()
        executor.close(grace_s=0.2)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- every process of a pod ends with it -----------------------------------------------------------------

TRACKERS = [
    pytest.param(
        "cgroup",
        marks=pytest.mark.skipif(not HAS_CGROUPS, reason="cgroup v2 groups cannot be created here"),
        id="cgroup",
    ),
    pytest.param("tree", id="tree"),
]


def marked_processes(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line contains ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry))
    return found


def wait_for_marker(marker: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not marked_processes(marker):
        assert time.monotonic() < deadline, f"the grandchild ({marker}) never started"
        time.sleep(0.01)


@pytest.fixture
def setsid_root() -> Iterator[Path]:
    root = make_root()
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _escaping_pod(world: World, key: str, marker: str, *, leader_waits: bool) -> PodLaunch:
    """A pod whose grandchild leaves its session (``setsid``) and ignores SIGTERM. Only the grandchild's
    command line holds ``marker`` (its sleep's duration, put together from two variables)."""
    whole, fraction = marker.split(".")
    grandchild = "trap '' TERM; exec sleep \\$WHOLE.\\$FRACTION"
    tail = "echo ready; sleep 30" if leader_waits else "echo ready"
    script = f'setsid /bin/sh -c "{grandchild}" & sleep 0.3; {tail}'
    return world.launch(key, ["/bin/sh", "-c", script], {"WHOLE": whole, "FRACTION": fraction})


@pytest.mark.parametrize("tracking", TRACKERS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ending", ["the pod exits", "the pod is terminated"])
def test_a_setsid_grandchild_dies_with_its_pod_before_the_exit_is_reported(
    setsid_root: Path, mode: str, tracking: str, ending: str
) -> None:
    isolation = make_isolation(mode, setsid_root)
    executor = LocalExecutor(setsid_root / "workdir", isolation=isolation, tracking=tracking)
    assert executor.tracking == ("cgroup" if tracking == "cgroup" else "process tree")
    world = World(mode, setsid_root, executor, isolation)
    marker = f"4242.{secrets.randbelow(10**6):06d}"
    terminate = ending == "the pod is terminated"
    pod = _escaping_pod(world, "team-a/escape/worker-0", marker, leader_waits=terminate)
    try:
        executor.start(pod)
        wait_for_marker(marker)
        if terminate:
            started = time.monotonic()
            executor.terminate(pod.key, 0.3)
            assert time.monotonic() - started < 0.2  # terminate does not wait
        exits: list[PodExit] = []
        deadline = time.monotonic() + WAIT_S
        while not exits and time.monotonic() < deadline:
            exits = executor.poll()
            if not exits:
                assert pod.key in executor.running()  # its GPUs are still held
            time.sleep(0.01)
        assert [e.key for e in exits] == [pod.key]
        assert marked_processes(marker) == [], "the setsid'd grandchild outlived its pod"
        expected = -signal.SIGTERM if terminate else 0
        assert exits[0].exit_code == expected
    finally:
        executor.close(grace_s=0.2)
        for pid in marked_processes(marker):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("tracking", TRACKERS)
@pytest.mark.parametrize("mode", MODES)
def test_close_kills_setsid_descendants_too(setsid_root: Path, mode: str, tracking: str) -> None:
    isolation = make_isolation(mode, setsid_root)
    executor = LocalExecutor(setsid_root / "workdir", isolation=isolation, tracking=tracking)
    world = World(mode, setsid_root, executor, isolation)
    marker = f"4343.{secrets.randbelow(10**6):06d}"
    try:
        executor.start(_escaping_pod(world, "team-a/closing/worker-0", marker, leader_waits=True))
        wait_for_marker(marker)
        executor.close(grace_s=0.2)
        assert marked_processes(marker) == []
        assert [e.key for e in executor.poll()] == ["team-a/closing/worker-0"]
    finally:
        for pid in marked_processes(marker):
            os.kill(pid, signal.SIGKILL)


CRASHING_SERVER = """
import os, sys, time
from pathlib import Path
from gpuq.run.executors import LocalExecutor
from run.test_isolation import World, _escaping_pod, make_isolation
root, mode, tracking, marker = Path(sys.argv[1]), sys.argv[2], sys.argv[3], os.environ["MARKER"]
isolation = make_isolation(mode, root)
executor = LocalExecutor(root / "workdir", isolation=isolation, tracking=tracking)
world = World(mode, root, executor, isolation)
pid = executor.start(_escaping_pod(world, "team-a/left/worker-0", marker, leader_waits=True))
print(pid, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("recovery", ["swept", "adopted"])
@pytest.mark.parametrize(
    ("mode", "tracking"),
    [
        pytest.param(
            "bwrap", "cgroup", marks=[NEEDS_ROOT, NEEDS_BWRAP, TRACKERS[0].marks[0]], id="bwrap-cgroup"
        ),
        pytest.param("bwrap", "tree", marks=[NEEDS_ROOT, NEEDS_BWRAP], id="bwrap-tree"),
        pytest.param("user", "cgroup", marks=[NEEDS_ROOT, TRACKERS[0].marks[0]], id="user-cgroup"),
        pytest.param("user", "tree", marks=[NEEDS_ROOT], id="user-tree"),
        pytest.param("none", "cgroup", marks=[TRACKERS[0].marks[0]], id="none-cgroup"),
        pytest.param("none", "tree", id="none-tree"),
    ],
)
def test_a_killed_servers_pods_die_whole_at_recovery(
    setsid_root: Path, mode: str, tracking: str, recovery: str
) -> None:
    """The server is SIGKILLed; its pod, setsid'd grandchild included, runs on until the next leader
    recovers. A new executor of the same workdir either adopts it (its very supervisor, by pid and start
    time) and then stops it whole like a pod it started, or, adopting nothing, sweeps it away whole."""
    marker = f"4646.{secrets.randbelow(10**6):06d}"
    tests = Path(__file__).resolve().parents[1]
    key = "team-a/left/worker-0"
    server = subprocess.Popen(  # the marker in its environment: only the grandchild's command line has it
        [sys.executable, "-c", CRASHING_SERVER, str(setsid_root), mode, tracking],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), *sys.path]), "MARKER": marker},
        stdout=subprocess.PIPE,
        text=True,
    )
    pid = 0
    try:
        assert server.stdout is not None
        pid = int(server.stdout.readline())
        wait_for_marker(marker)
        server.kill()
        server.wait()
        assert marked_processes(marker), "the pod outlives the killed server until recovery"
        isolation = make_isolation(mode, setsid_root)
        recovering = LocalExecutor(setsid_root / "workdir", isolation=isolation, tracking=tracking)
        assert recovering.probe(key, attempt=1, pid=pid).state == "lost"  # another attempt's record
        assert recovering.probe(key, attempt=0, pid=pid + 1).state == "lost"  # another process
        if recovery == "adopted":
            adopted = recovering.adopt(key, attempt=0, pid=pid)
            assert (adopted.state, adopted.pid) == ("running", pid)
            assert recovering.running() == {key} and recovering.sweep() == []
            assert marked_processes(marker), "an adopted pod runs on"
            recovering.terminate(key, 0.2)
            (exit_,) = wait_for_exits(recovering)
            assert exit_.exit_code == -signal.SIGTERM  # the command's own status; its grandchild was killed
            assert marked_processes(marker) == [], "the setsid'd grandchild outlived its adopted pod"
        else:
            assert recovering.sweep() == [key]
            assert marked_processes(marker) == []
            assert recovering.probe(key).state == "lost"  # its record went with it
        recovering.close(grace_s=0.2)
    finally:
        server.kill()
        server.wait()
        LocalExecutor(setsid_root / "workdir", tracking=tracking).sweep()  # what a failed test left
        for leftover in marked_processes(marker):
            os.kill(leftover, signal.SIGKILL)


def test_the_reaper_reports_the_commands_own_status(tmp_path: Path) -> None:
    executor = LocalExecutor(tmp_path / "workdir", tracking="tree")
    cases = {"exit 3": 3, "kill -KILL $$": -signal.SIGKILL, "exit 0": 0}
    for index, (script, code) in enumerate(cases.items()):
        pod = PodLaunch(
            key=f"ns/status-{index}/w-0",
            command=["/bin/sh", "-c", script],
            args=[],
            env={},
            working_dir=None,
            image="",
            devices=(),
            log_path=str(tmp_path / f"{index}.log"),
            resources={},
        )
        executor.start(pod)
        (exit_,) = wait_for_exits(executor)
        assert exit_.exit_code == code, (script, json.dumps(Path(pod.log_path).read_text()))
    executor.close(grace_s=0.2)


@pytest.mark.parametrize("grace_s", [10.0, 0.0], ids=["SIGTERM", "SIGKILL"])
def test_a_stop_sent_as_an_isolated_pod_starts_is_never_lost(
    world: World, grace_s: float, request: pytest.FixtureRequest
) -> None:
    """A stop right after ``start`` (a workload preempted in the step that admitted it) ends the pod
    whatever it had reached: no process yet, the supervisor, bwrap's init, the command."""
    if world.mode != "bwrap" and grace_s:
        # An open defect: without bwrap's PID namespace, a SIGTERM sent in the first milliseconds of a
        # pod is still lost now and then on a loaded 2-core machine (the pod then runs to its end).
        request.applymarker(pytest.mark.xfail(reason="SIGTERM race without a PID namespace", strict=False))
    keys = [f"team-a/stop-{int(grace_s)}-{i}/main-0" for i in range(8)]
    for i, key in enumerate(keys):
        script = "trap 'exit 143' TERM; sleep 0.5 & wait; echo RAN-TO-THE-END"
        world.executor.start(world.launch(key, ["/bin/sh", "-c", script]))
        time.sleep(0.01 * i)  # the stop finds the pod at another point of its start each time
        world.executor.terminate(key, grace_s)
    time.sleep(1.0)  # no poll until the commands would have ended: the stop itself must have reached them
    exits = wait_for_exits(world.executor, len(keys))
    assert all(e.exit_code != 0 for e in exits), sorted((e.key, e.exit_code) for e in exits)
