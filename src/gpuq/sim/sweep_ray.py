"""A Scenario's variants as Ray tasks on an existing cluster (``gpuq simulate --ray-address``).

Each task is :func:`gpuq.sim.sweeps.run_variant` on a variant the caller prepared, so the cluster's
nodes need gpuq installed (the same version) but none of the user's files. Ray is imported here
only, and this module only when ``--ray-address`` is given: ``gpuq`` starts without it.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator, Sequence
from typing import Any

from gpuq.sim.sweeps import Progress, SweepError, VariantJob, VariantOutcome, run_variant

OPTION = "--ray-address"
PROBE_TIMEOUT_S = 5.0  # Ray itself retries an unreachable address for minutes before it gives up
NAMESPACE = "gpuq-sweeps"


class RaySweepError(SweepError):
    """The cluster cannot be used or a task failed on it; the message is one line naming the option."""


def run_on_ray(
    jobs: Sequence[VariantJob], address: str, limit: int | None, progress: Progress | None
) -> Iterator[VariantOutcome]:
    """Run ``jobs`` as Ray tasks on the cluster at ``address``, at most ``limit`` at once (None: all);
    outcomes in variant order. Connects unless this process already is; disconnects if it connected."""
    owns = _connect(address)
    import ray

    try:
        task: Any = ray.remote(num_cpus=1, max_retries=0)(run_variant)
        yield from _gather(ray, task, jobs, limit or len(jobs), progress, address)
    finally:
        if owns:
            ray.shutdown()


def check_address(address: str) -> tuple[str, int] | None:
    """The ``(host, port)`` an address names (None for ``auto``); RaySweepError when it names none."""
    if address == "auto":
        return None
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RaySweepError(f"{OPTION} {address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
    return host.strip("[]"), int(port)


def _connect(address: str) -> bool:
    """``ray.init`` on the cluster; False (nothing done) when this process is connected already."""
    endpoint = check_address(address)
    if endpoint is not None:
        _probe(address, *endpoint)
    try:
        import ray
    except ImportError as error:  # pragma: no cover - Ray is a dependency
        raise RaySweepError(f"{OPTION}: Ray is not installed ({error})") from error
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, namespace=NAMESPACE, logging_level=logging.ERROR, log_to_driver=False)
    except Exception as error:  # Ray raises ConnectionError, ValueError, RuntimeError, its own
        raise RaySweepError(f"{OPTION} {address}: cannot connect: {_first_line(error)}") from error
    return True


def _probe(address: str, host: str, port: int) -> None:
    """Fail fast, in one line, where nothing listens at the address."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as error:
        raise RaySweepError(
            f"{OPTION} {address}: no Ray cluster answers there ({_first_line(error)})"
        ) from error


def _gather(
    ray: Any, task: Any, jobs: Sequence[VariantJob], limit: int, progress: Progress | None, address: str
) -> Iterator[VariantOutcome]:
    """Keep ``limit`` tasks in flight; yield outcomes in the jobs' order as they are complete."""
    waiting = list(jobs)
    running: dict[Any, VariantJob] = {}
    done: dict[int, VariantOutcome] = {}
    for order in range(len(jobs)):
        while order not in done:
            while waiting and len(running) < limit:
                submitted = waiting.pop(0)
                running[task.remote(submitted)] = submitted
                if progress is not None:
                    progress(submitted.index, "total", 1.0)
            ready, _ = ray.wait(list(running), num_returns=1)
            for ref in ready:
                finished = running.pop(ref)
                done[jobs.index(finished)] = _result(ray, ref, finished, address)
                if progress is not None:
                    progress(finished.index, "at", 1.0)
        yield done.pop(order)


def _result(ray: Any, ref: Any, job: VariantJob, address: str) -> VariantOutcome:
    from ray.exceptions import RayError

    name = job.plan.variants[job.index].name
    try:
        outcome: VariantOutcome = ray.get(ref)
    except RayError as error:
        raise RaySweepError(
            f"{OPTION} {address}: variant {name} failed on the cluster: {_last_line(error)}"
        ) from error
    return outcome


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def _last_line(error: BaseException) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(error).__name__
