"""Pod start and finish throughput of the local executor: `/bin/true` pods from several threads.

Starts `--pods` `/bin/true` pods through `LocalExecutor.start` from `--threads` threads (the
control loop starts pods from a small pool) while the main thread polls, as the loop does, until
every pod has exited. Isolation is what `gpuq serve` sets up by default on this machine
(`configure("auto")`: a user per namespace with setpriv when root, bwrap where it works);
`--no-isolation` runs pods as the caller. `--per-pod-interpreter` starts every pod with a fresh
`python -I` supervisor (the fallback) instead of the executor's forkserver. It prints pods
started/s, pods finished/s and the CPU seconds of this process and of all its children (the
forkserver, supervisors, wrappers and commands), and exits 1 unless every pod exited 0 exactly once.

    .venv/bin/python bench/pods.py                         # 2,000 pods, 8 threads, default isolation
    .venv/bin/python bench/pods.py --no-isolation
    .venv/bin/python bench/pods.py --per-pod-interpreter   # the one-interpreter-per-pod path
"""

from __future__ import annotations

import argparse
import inspect
import json
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from gpuq.run.executors import ExecutorError, LocalExecutor, PodExit, PodLaunch
from gpuq.run.sandbox import Isolation, configure

NAMESPACE = "bench"


def isolation_for(root: Path) -> Isolation:
    """As ``gpuq serve``'s ``_isolation`` would on this machine: the state directory, the workdir and the
    home hidden, a ``gpuq-<namespace>`` user (created at the first pod) when root."""
    isolation = configure("auto", state=[root / "state"], workdir=root / "work", home=[Path.home()])
    for warning in isolation.warnings:
        print(f"isolation: {warning}", file=sys.stderr)
    return isolation


def launch(root: Path, index: int) -> PodLaunch:
    return PodLaunch(
        key=f"{NAMESPACE}/job-{index}/worker-0",
        command=["/bin/true"],
        args=[],
        env={},
        working_dir=None,
        image="",
        devices=(),
        log_path=str(root / "work" / "logs" / NAMESPACE / f"job-{index}.log"),
        resources={},
        namespace=NAMESPACE,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--no-isolation", action="store_true", help="pods run as the caller, unwrapped")
    parser.add_argument("--per-pod-interpreter", action="store_true", help="no forkserver: python -I per pod")
    parser.add_argument("--tracking", default="auto", choices=("auto", "cgroup", "tree"))
    parser.add_argument("--json", action="store_true", help="the figures as one JSON object")
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="gpuq-bench-pods-", dir="/var/tmp"))
    root.chmod(0o711)  # pods' users must pass it, as /var/lib/gpuq
    (root / "state").mkdir(mode=0o700)
    options: dict[str, object] = {"tracking": args.tracking}
    if not args.no_isolation:
        options["isolation"] = isolation_for(root)
    if "forkserver" in inspect.signature(LocalExecutor).parameters:
        options["forkserver"] = not args.per_pod_interpreter
    elif not args.per_pod_interpreter:
        print("this LocalExecutor has no forkserver: every pod gets its own interpreter", file=sys.stderr)
    executor = LocalExecutor(root / "work", **options)  # type: ignore[arg-type]
    # The first pod creates the namespace's user (useradd) and the forkserver: not part of the rate.
    executor.start(launch(root, -1))
    exits: list[PodExit] = []
    while not exits:
        exits += executor.poll()
        time.sleep(0.001)
    exits.clear()

    errors: list[str] = []
    started_at: list[float] = []
    lock = threading.Lock()

    def starter(indexes: range) -> None:
        for index in indexes:
            try:
                executor.start(launch(root, index))
            except ExecutorError as error:
                with lock:
                    errors.append(str(error))
        with lock:
            started_at.append(time.perf_counter())

    before_self = resource.getrusage(resource.RUSAGE_SELF)
    before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    share = -(-args.pods // args.threads)
    threads = [
        threading.Thread(target=starter, args=(range(i * share, min((i + 1) * share, args.pods)),))
        for i in range(args.threads)
    ]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + max(60.0, args.pods / 10)
    while (len(exits) + len(errors) < args.pods or any(t.is_alive() for t in threads)) and (
        time.monotonic() < deadline
    ):
        exits += executor.poll()
        time.sleep(0.002)
    finished = time.perf_counter()
    for thread in threads:
        thread.join()
    executor.close(grace_s=0.5)  # the forkserver is reaped: its children's CPU time is counted
    exits += executor.poll()
    after_self = resource.getrusage(resource.RUSAGE_SELF)
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(root, ignore_errors=True)

    counts = Counter(exit_.key for exit_ in exits)
    expected = {launch(root, i).key for i in range(args.pods)}
    bad = [e for e in exits if e.exit_code != 0]
    problems = [
        *errors[:5],
        *(f"{key}: reported {n} times" for key, n in counts.items() if n != 1),
        *(f"{key}: never reported" for key in sorted(expected - set(counts))[:5]),
        *(f"{e.key}: exit {e.exit_code}" for e in bad[:5]),
    ]
    figures = {
        "pods": args.pods,
        "threads": args.threads,
        "isolation": "none" if args.no_isolation else options["isolation"].describe(),  # type: ignore[union-attr]
        "path": "per-pod interpreter" if args.per_pod_interpreter else "forkserver",
        "tracking": executor.tracking,
        "started_per_s": round(args.pods / (max(started_at) - t0), 1) if started_at else 0.0,
        "finished_per_s": round(args.pods / (finished - t0), 1),
        "wall_s": round(finished - t0, 3),
        "server_cpu_s": round(
            after_self.ru_utime + after_self.ru_stime - before_self.ru_utime - before_self.ru_stime, 2
        ),
        "children_cpu_s": round(
            after_children.ru_utime
            + after_children.ru_stime
            - before_children.ru_utime
            - before_children.ru_stime,
            2,
        ),
        "exited_0_once": not problems,
    }
    if args.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name:>16}: {value}")
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
