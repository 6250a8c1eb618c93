"""Parameter sweeps in parallel: ``gpuq simulate --compare`` end to end, ``--jobs 1`` against ``--jobs N``.

Runs the real command as a subprocess (start-up, reading, every variant, writing the outputs) from
the repository root with this checkout's sources first on the path, and prints the wall time of each
run, the speed-up over ``--jobs 1`` and whether the outputs (metrics.json, workloads.csv,
report.html) are the same bytes. With ``--ray-address`` it times a run on that Ray cluster too.
Usage:

    .venv/bin/python bench/sweeps.py [--examples symbol-retail philly] [--jobs 2] [--reps 1]
        [--ray-address HOST:PORT]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {
    "symbol-retail": "examples/symbol-retail",
    "capacity": "examples/symbol-retail/capacity/capacity.scenario",
    "serving": "examples/serving",
    "philly": "examples/philly",
}
OUTPUTS = ("metrics.json", "workloads.csv", "report.html")


def run(example: str, out: Path, extra: list[str]) -> float:
    """Wall seconds of one ``gpuq simulate -f EXAMPLE --compare`` writing to ``out``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "gpuq.cli", "simulate", "-f", example, "--compare", "-q"]
    started = time.perf_counter()
    done = subprocess.run(
        [*command, "--out-dir", str(out), *extra], cwd=ROOT, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    return wall


def same_bytes(first: Path, second: Path) -> bool:
    return all((first / name).read_bytes() == (second / name).read_bytes() for name in OUTPUTS)


def spin(loops: int) -> float:
    """Pure-Python work, the yardstick of what the machine gives a second process now."""
    total = 0
    for value in range(loops):
        total += value * value
    return float(total % 7)


def machine_parallelism(workers: int, loops: int = 10_000_000) -> float:
    """How much faster ``workers`` copies of :func:`spin` run in processes than one after another:
    ``workers`` on an idle machine with that many free cores, less where others share them."""
    from concurrent.futures import ProcessPoolExecutor

    started = time.perf_counter()
    for _ in range(workers):
        spin(loops)
    serial = time.perf_counter() - started
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(spin, [1] * workers))  # started before the clock
        started = time.perf_counter()
        list(pool.map(spin, [loops] * workers))
        parallel = time.perf_counter() - started
    return serial / parallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", nargs="+", default=list(EXAMPLES), choices=list(EXAMPLES))
    parser.add_argument("--jobs", type=int, default=2, help="the parallel run's --jobs [2]")
    parser.add_argument(
        "--reps", type=int, default=1, help="runs of each, interleaved; the best is printed [1]"
    )
    parser.add_argument("--ray-address", help="also time --ray-address ADDR (an existing cluster)")
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} CPUs; {args.jobs} processes of pure Python run "
        f"{machine_parallelism(args.jobs):.2f}× as fast as one after another (the ceiling here)"
    )
    print(
        f"{'example':<15} {'variants':>8} {'jobs 1':>8} {f'jobs {args.jobs}':>8} {'speed-up':>8}  same bytes"
    )
    with tempfile.TemporaryDirectory() as temp:
        for name in args.examples:
            example = EXAMPLES[name]
            modes: list[tuple[str, list[str]]] = [("1", ["--jobs", "1"]), ("n", ["--jobs", str(args.jobs)])]
            if args.ray_address:
                modes.append(("ray", ["--ray-address", args.ray_address]))
            best: dict[str, float] = {}
            for _ in range(args.reps):  # interleaved, so a change of the machine's load hits both
                for label, extra in modes:
                    wall = run(example, Path(temp) / name / label, extra)
                    best[label] = min(wall, best.get(label, wall))
            same = all(same_bytes(Path(temp) / name / "1", Path(temp) / name / m) for m, _ in modes[1:])
            variants = _variants(Path(temp) / name / "1")
            line = (
                f"{name:<15} {variants:>8} {best['1']:>7.1f}s {best['n']:>7.1f}s "
                f"{best['1'] / best['n']:>7.2f}×  {'yes' if same else 'NO'}"
            )
            if "ray" in best:
                line += f"  (ray {best['ray']:.1f}s)"
            print(line, flush=True)


def _variants(out: Path) -> int:
    import json

    return len(json.loads((out / "metrics.json").read_text())["variants"])


if __name__ == "__main__":
    main()
