"""The FGD paper's packing experiment for every policy over seeds: allocation, fragmentation, wall time.

Run from the repository root::

    .venv/bin/python bench/pack.py [--seeds 42..51] [--tune 1.3] [--policies fgd,bestfit]
        [--pods PATH] [--nodes PATH] [--json]

Each (policy, seed) is one ``gpuq pack`` run (``gpuq.pack.experiment.run_pack``)
on the openb lists. Per policy it prints the mean over seeds of the GPU
allocation ratio at 100 % and at the tune limit (130 %) of arrived GPU
demand, the mean fragmentation ratio at 100 %, the mean failed pods, and the
mean and max wall time of one run (reading the CSVs excluded). The figures
compare with the paper's Fig. 9a (allocation) and 7b (fragmentation ratio);
the benchmark never asserts on them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

_SRC = Path(__file__).resolve().parent.parent / "src"
if str(_SRC) not in sys.path:  # runnable without an editable install
    sys.path.insert(0, str(_SRC))

from gpuq.core.placement.policies import POLICIES  # noqa: E402
from gpuq.pack.experiment import PackResult, run_pack  # noqa: E402
from gpuq.pack.openb import read_nodes, read_pods  # noqa: E402

OPENB = (Path(__file__).resolve().parents[1] / "data/traces/openb")
FULL_PCT = 100


def parse_seeds(text: str) -> list[int]:
    """``42..51`` (inclusive) or ``42,45,47``."""
    if ".." in text:
        low, high = text.split("..", 1)
        return list(range(int(low), int(high) + 1))
    return [int(seed) for seed in text.split(",") if seed.strip()]


def at(result: PackResult, pct: int) -> tuple[float, float]:
    """(allocation %, fragmentation ratio %) at ``pct`` % arrived (the last point if beyond)."""
    point = next((p for p in result.points if p.arrived_pct == pct), result.points[-1])
    return point.alloc_pct, point.frag_ratio_pct


def run_policy(args: argparse.Namespace, policy: str, nodes: Any, pods: Any) -> dict[str, Any]:
    allocs_full, allocs_last, ratios_full, failed, walls = [], [], [], [], []
    for seed in args.seeds:
        started = time.perf_counter()
        result = run_pack(nodes, pods, policy, args.tune, seed)
        walls.append(time.perf_counter() - started)
        allocs_full.append(at(result, FULL_PCT)[0])
        ratios_full.append(at(result, FULL_PCT)[1])
        allocs_last.append(result.points[-1].alloc_pct)
        failed.append(result.failed)
        if args.progress:
            print(f"  {policy} seed {seed}: {walls[-1]:.2f} s", file=sys.stderr, flush=True)
    return {
        "policy": policy,
        "alloc_pct_at_100": round(statistics.fmean(allocs_full), 2),
        "alloc_pct_at_limit": round(statistics.fmean(allocs_last), 2),
        "frag_ratio_pct_at_100": round(statistics.fmean(ratios_full), 2),
        "failed_pods": round(statistics.fmean(failed), 1),
        "wall_s_mean": round(statistics.fmean(walls), 3),
        "wall_s_max": round(max(walls), 3),
    }


def report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    limit = round(args.tune * 100)
    print(f"gpuq pack over seeds {args.seeds[0]}..{args.seeds[-1]} ({len(args.seeds)} runs per policy)")
    print(f"pods: {args.pods}\nnodes: {args.nodes}\n")
    header = (
        f"{'policy':<15} {'alloc@100%':>10} {f'alloc@{limit}%':>10} {'frag@100%':>10} "
        f"{'failed':>8} {'wall s':>7} {'max s':>6}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['policy']:<15} {row['alloc_pct_at_100']:>10.2f} {row['alloc_pct_at_limit']:>10.2f} "
            f"{row['frag_ratio_pct_at_100']:>10.2f} {row['failed_pods']:>8.1f} "
            f"{row['wall_s_mean']:>7.2f} {row['wall_s_max']:>6.2f}"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=parse_seeds, default=parse_seeds("42..51"), help="42..51 or 42,43")
    p.add_argument("--tune", type=float, default=1.3)
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated policy names")
    p.add_argument("--pods", type=Path, default=OPENB / "openb_pod_list_default.csv")
    p.add_argument("--nodes", type=Path, default=OPENB / "openb_node_list_gpu_node.csv")
    p.add_argument("--progress", action="store_true", help="a line on stderr per run")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    nodes, pods = read_nodes(args.nodes), read_pods(args.pods)
    rows = [run_policy(args, policy, nodes, pods) for policy in args.policies.split(",")]
    if args.json:
        parameters = {
            "seeds": args.seeds,
            "tune": args.tune,
            "pods": str(args.pods),
            "nodes": str(args.nodes),
        }
        print(json.dumps({"parameters": parameters, "policies": rows}, indent=2))
    else:
        report(args, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
