"""The control loop beside the API: leader election, and ``ControlLoop.step()`` only while leader.

One background thread with a store of its own:

1. campaign (``LeaderElector.try_acquire``; a leader renews) every ``lease_s / 3``;
2. on winning, build a fresh loop (executor included): its first step recovers what a
   previous leader left running (``ControlLoop._recover`` kills leftovers and requeues);
3. while leader, step every ``interval_s``; an exception in a step is logged and the
   next step runs (adapter failures are the next reconcile's business);
4. on losing leadership, close the loop (its pods are terminated: the new leader
   requeues them); on :meth:`LoopRunner.stop`, close it and release the lease so a
   follower takes over at its next try.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpuq.run.loop import ControlLoop
from gpuq.run.store import LeaderElector, Store

_log = logging.getLogger("gpuq.serve")
MakeLoop = Callable[[Store], ControlLoop]


class LoopRunner:
    """Runs leader election and the loop on a daemon thread; :meth:`status` is safe from any thread."""

    def __init__(
        self,
        url: str,
        identity: str,
        make_loop: MakeLoop,
        *,
        lease_s: float = 5.0,
        interval_s: float = 0.2,
    ) -> None:
        self.url, self.identity, self.lease_s, self.interval_s = url, identity, lease_s, interval_s
        self._make_loop = make_loop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuq-loop", daemon=True)
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {
            "identity": identity,
            "leader": False,
            "leaderSince": None,
            "steps": 0,
            "lastStepAt": None,
            "lastError": "",
            "configProblem": "",
        }

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop stepping, terminate the pods, release leadership; waits for the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._state)

    def _update(self, **fields: Any) -> None:
        with self._lock:
            self._state.update(fields)

    def _run(self) -> None:
        store = Store(self.url)
        elector = LeaderElector(store, self.identity, self.lease_s)
        loop: ControlLoop | None = None
        next_campaign = 0.0
        try:
            while not self._stop.is_set():
                leading = elector.is_leader
                if time.monotonic() >= next_campaign:
                    leading = self._campaign(elector)
                    next_campaign = time.monotonic() + elector.renew_interval_s
                if leading:
                    loop = loop or self._lead(store)
                    self._step(loop)
                elif loop is not None:
                    _log.warning("%s lost leadership; stopping its pods", self.identity)
                    self._close(loop)
                    loop = None
                    self._update(leader=False, leaderSince=None)
                self._stop.wait(self.interval_s)
        finally:
            if loop is not None:
                self._close(loop)
            try:
                elector.release()
            except Exception:  # the store may be gone; the lease then expires on its own
                _log.exception("could not release the leader lease")
            self._update(leader=False)
            store.close()

    def _campaign(self, elector: LeaderElector) -> bool:
        try:
            return elector.try_acquire()
        except Exception as error:
            self._error(f"leader election failed: {error}")
            return False

    def _lead(self, store: Store) -> ControlLoop:
        _log.warning("%s is the leader; running the control loop", self.identity)
        self._update(leader=True, leaderSince=time.time())
        return self._make_loop(store)

    def _step(self, loop: ControlLoop) -> None:
        try:
            loop.step()
        except Exception as error:
            self._error(f"control loop step failed: {error}")
            return
        with self._lock:
            self._state["steps"] += 1
            self._state["lastStepAt"] = time.time()
            self._state["configProblem"] = loop.config_problem

    def _close(self, loop: ControlLoop) -> None:
        try:
            loop.close()
        except Exception:
            _log.exception("closing the control loop failed")

    def _error(self, message: str) -> None:
        """Record and log an error; the same message again is not logged again."""
        with self._lock:
            repeated = self._state["lastError"] == message
            self._state["lastError"] = message
        if not repeated:
            _log.error("%s", message)
