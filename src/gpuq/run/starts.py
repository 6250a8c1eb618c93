"""Pod starts outside the control loop's step: the lifecycle's ``StartPods`` as a queue of work.

Starting a process (a sandbox, a supervisor, a Ray actor that waits for room) takes milliseconds to
seconds; done inside the decision step, a slow start stalled admission for every queue. The loop
hands each launch to :class:`PodStarts` once the step's writes (the pod rows naming the attempt) are
committed; a few threads start them concurrently, and the loop collects the outcomes at its next step
as events (pod running, or could not start). ``on_done`` wakes the loop when one arrives.

``threads=0`` starts each launch at once on the caller's thread (deterministic drivers such as a
test on a fake clock, and executors that are not safe to call concurrently); the loop then collects
the outcomes in the same step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gpuq.run.executors.base import Executor, ExecutorError, PodLaunch

DEFAULT_START_THREADS = 8


@dataclass(frozen=True)
class StartOutcome:
    """One launch's outcome: its pid (None where the executor has none) or the reason it did not start."""

    key: str
    attempt: int
    pid: int | None
    error: str  # "" when it started
    at: float  # when the start returned

    @property
    def started(self) -> bool:
        return not self.error


class PodStarts:
    """Starts launches on ``threads`` threads; :meth:`done` hands their outcomes back, each once."""

    def __init__(
        self,
        executor: Executor,
        *,
        threads: int = DEFAULT_START_THREADS,
        clock: Callable[[], float] = time.time,
        on_done: Callable[[], None] | None = None,
    ) -> None:
        self._executor = executor
        self._clock = clock
        self.on_done = on_done
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="gpuq-start") if threads > 0 else None
        self._lock = threading.Lock()
        self._outcomes: list[StartOutcome] = []
        self._in_flight = 0

    @property
    def inline(self) -> bool:
        """Starts run on the caller's thread (``threads=0``)."""
        return self._pool is None

    @property
    def in_flight(self) -> int:
        """Launches submitted whose outcome has not been collected yet."""
        with self._lock:
            return self._in_flight

    def submit(self, launch: PodLaunch) -> None:
        with self._lock:
            self._in_flight += 1
        if self._pool is None:
            self._start(launch)
        else:
            self._pool.submit(self._start, launch)

    def done(self) -> list[StartOutcome]:
        """Outcomes since the last call, in the order the starts returned."""
        with self._lock:
            outcomes, self._outcomes = self._outcomes, []
            self._in_flight -= len(outcomes)
            return outcomes

    def close(self) -> None:
        """Wait for the starts in flight (each returns promptly or times out in its executor)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=False)

    def _start(self, launch: PodLaunch) -> None:
        try:
            pid, error = self._executor.start(launch), ""
        except ExecutorError as failure:
            pid, error = None, str(failure) or type(failure).__name__
        except Exception as failure:  # any executor failure is this pod's, not the loop's
            pid, error = None, f"{type(failure).__name__}: {failure}"
        outcome = StartOutcome(launch.key, launch.attempt, pid, error, self._clock())
        with self._lock:
            self._outcomes.append(outcome)
        if self.on_done is not None:
            self.on_done()
