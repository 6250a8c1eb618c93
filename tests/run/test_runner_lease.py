"""The runner and the lease: a leader frozen in the middle of a step wakes up fenced off and steps down.

A stand-in loop writes through the runner's store as the control loop does; it can be
frozen inside a step, and the runner's lease thread with it (as SIGSTOP freezes the whole
process between deciding and writing). Meanwhile its lease expires and a second replica
takes over. When the first wakes up, its write raises ``LeaseLost`` and writes nothing;
the runner closes the loop and stays a follower.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import cast

import pytest

from gpuq.run.loop import ControlLoop
from gpuq.run.store import LeaderElector, LeaseLost, Store
from gpuq.server.runner import LoopRunner

THAW = threading.Event()
THAW.set()


class FreezableElector(LeaderElector):
    """The runner's elector, whose campaigns wait while the process is "frozen"."""

    def try_acquire(self) -> bool:
        THAW.wait(30)
        return super().try_acquire()


class FreezableLoop:
    """Writes one event per step; frozen on demand half way through a step, before its write."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.config_problem = ""
        self.scheduler = None
        self.services = None
        self.freeze = threading.Event()
        self.frozen = threading.Event()
        self.closed = False

    def step(self) -> None:
        if self.freeze.is_set():
            self.frozen.set()
            THAW.wait(30)
            self.store.add_event(
                "Normal", "AfterWake", "Node", "", "box", "written after waking", time.time()
            )
            return
        self.store.add_event("Normal", "Tick", "Node", "", "box", "a step", time.time())

    busy = backlog = False  # nothing starting or running, nothing left to read: the runner's interval

    def wake_with(self, callback: object) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_leader_frozen_mid_step_writes_nothing_after_a_takeover_and_steps_down(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gpuq.server.runner.LeaderElector", FreezableElector)
    url = store.url.render_as_string(hide_password=False)
    loops: list[FreezableLoop] = []

    def make_loop(runner_store: Store) -> ControlLoop:
        loops.append(FreezableLoop(runner_store))
        return cast(ControlLoop, loops[-1])

    runner = LoopRunner(url, "a", make_loop, lease_s=0.6, interval_s=0.02)
    other = Store(url)
    try:
        runner.start()
        wait_for(lambda: runner.status()["leader"] and bool(store.events()), 10, "the first to lead and step")
        assert runner.status()["fencingToken"] == 1
        loop = loops[0]
        THAW.clear()  # SIGSTOP: the lease thread stops renewing, the loop stops half way through a step
        loop.freeze.set()
        assert loop.frozen.wait(10)
        # Frozen: no renewal. The lease runs out and a second replica takes over.
        follower = LeaderElector(other, "b", lease_s=60.0)
        wait_for(follower.try_acquire, 5, "the second replica to take over")
        assert follower.token == 2
        ticks = len(store.events())
        version = store.resource_version()
        THAW.set()  # SIGCONT
        wait_for(lambda: loop.closed, 10, "the woken leader to close its loop")
        assert not runner.status()["leader"]
        assert (
            "fenced off" in runner.status()["lastError"]
            and "held by 'b' with token 2" in (runner.status()["lastError"])
        )
        assert [e.reason for e in store.events()].count("AfterWake") == 0, "the woken leader wrote nothing"
        assert len(store.events()) == ticks and store.resource_version() == version
        time.sleep(0.5)
        assert not runner.status()["leader"] and len(loops) == 1, "it stays a follower while b leads"
        assert follower.renew()
        follower.release()
        wait_for(lambda: runner.status()["leader"], 5, "the first to lead again once b released")
        assert runner.status()["fencingToken"] == 3 and len(loops) == 2
    finally:
        THAW.set()
        runner.stop()
        other.close()


class OnceFencedLoop:
    """Its first step finds the lease lapsed (as a step that outlived it does); later steps pass."""

    fenced = 0

    def __init__(self) -> None:
        self.config_problem, self.scheduler, self.services = "", None, None

    busy = backlog = False

    def wake_with(self, callback: object) -> None:
        pass

    def step(self) -> None:
        if OnceFencedLoop.fenced == 0:
            OnceFencedLoop.fenced += 1
            raise LeaseLost("lease 'gpuq-leader' expired 0.0s ago; nothing was written")

    def close(self) -> None:
        pass


def test_a_sole_replica_fenced_off_leads_again_under_a_new_token(store: Store) -> None:
    """Nobody took the lapsed lease: the replica that stepped down must not keep renewing the tenure it
    left (it would never lead under it again, and nobody else could take it)."""
    url = store.url.render_as_string(hide_password=False)
    OnceFencedLoop.fenced = 0
    runner = LoopRunner(
        url, "solo", lambda _s: cast(ControlLoop, OnceFencedLoop()), lease_s=1.0, interval_s=0.02
    )
    runner.start()
    try:
        wait_for(lambda: OnceFencedLoop.fenced == 1, 10, "the fenced step")
        wait_for(
            lambda: runner.status()["leader"] and (runner.status()["fencingToken"] or 0) >= 2,
            10,
            "a new tenure",
        )
    finally:
        runner.stop()
