"""A server with a local Ray instance killed with ``kill -9`` leaves no Ray process once the next starts.

Real Ray, in two driver processes sharing one workdir, as two lives of ``gpuq serve --ray-address
local``: the first is SIGKILLed (Ray's fate-sharing takes most of its instance with it, not the
raylet's agents); the second, starting, reaps what is left of the first's session. About 20 s.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuq.run.executors.ray import SESSION_RECORD, _holding, _start_time, reap_dead_session

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60
DRIVER = """
import signal, sys, time
from pathlib import Path
from gpuq.run.executors.ray import RayExecutor

executor = RayExecutor(workdir=Path(sys.argv[1]), num_gpus=1, num_cpus=1)

def stop(*_):
    executor.close()
    sys.exit(0)

signal.signal(signal.SIGTERM, stop)
print("READY", flush=True)
while True:
    time.sleep(1)
"""


class Drivers:
    """Driver processes of this test, and every process of their Ray sessions, killed at the end."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.started: list[subprocess.Popen[str]] = []
        self.sessions: list[str] = []

    def start(self) -> tuple[subprocess.Popen[str], dict[str, object]]:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        process = subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(self.workdir)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self.started.append(process)
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)  # Ray starts in seconds
        line = process.stdout.readline() if ready else ""
        assert line.strip() == "READY", f"the driver did not start Ray (exit {process.poll()})"
        record: dict[str, object] = json.loads((self.workdir / SESSION_RECORD).read_text())
        self.sessions.append(str(record["session_dir"]))
        return process, record

    def close(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
                process.wait()
        for session in self.sessions:  # whatever this test's sessions left, by pid
            for pid in _holding(session):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def drivers(tmp_path: Path) -> Iterator[Drivers]:
    made = Drivers(tmp_path / "work")
    yield made
    made.close()


def alive(recorded: list[list[object]]) -> list[int]:
    return [int(str(pid)) for pid, start in recorded if _start_time(int(str(pid))) == start]


def test_the_next_start_reaps_what_a_killed_servers_ray_left(drivers: Drivers) -> None:
    first, record = drivers.start()
    session = str(record["session_dir"])
    processes = record["processes"]
    assert isinstance(processes, list) and alive(processes), "the recorded Ray processes run"
    assert _holding(session), "Ray's processes keep their session's logs open"
    first.kill()  # kill -9: no close, no ray.shutdown
    first.wait()
    deadline = time.monotonic() + 10
    while _start_time(first.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.0)  # Ray's fate-sharing has done what it does
    left = _holding(session) | set(alive(processes))

    second, second_record = drivers.start()
    assert second_record["session_dir"] != session
    assert _holding(session) == set() and alive(processes) == [], "nothing of the killed server's Ray is left"
    print(f"left by kill -9 before the next start: {len(left)} process(es); after it: 0")

    second.send_signal(signal.SIGTERM)  # a clean stop shuts its instance down and removes its record
    assert second.wait(30) == 0
    assert not (drivers.workdir / SESSION_RECORD).exists()
    deadline = time.monotonic() + 10
    while _holding(str(second_record["session_dir"])) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _holding(str(second_record["session_dir"])) == set(), "a clean stop leaves no Ray process"


def test_a_record_whose_driver_runs_is_left_alone(tmp_path: Path) -> None:
    """Another live server's instance (this test process stands for its driver) is not a leftover."""
    tmp_path.joinpath(SESSION_RECORD).write_text(
        json.dumps(
            {
                "driver": [os.getpid(), _start_time(os.getpid())],
                "session_dir": "/tmp/ray/session_x",
                "processes": [[os.getpid(), _start_time(os.getpid())]],
            }
        )
    )
    assert reap_dead_session(tmp_path) == []
    assert tmp_path.joinpath(SESSION_RECORD).exists()
