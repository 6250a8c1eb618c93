"""Record or check the golden outputs of every bundled example (the lifecycle redesign's proof).

    python tests/golden/record.py            # check: rerun everything, compare with outputs.json
    python tests/golden/record.py --record   # write outputs.json (and the metrics documents) anew
    python tests/golden/record.py --only symbol-retail

Each run is the command a user types; what is compared is the sha256 of every file it writes
that should be deterministic (``metrics.json``, ``workloads.csv``, ``gpuq admit -o json``).
The metrics documents are kept beside the hashes so a difference can be read, not only seen.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(os.environ.get("GPUQ_GOLDEN_ROOT", Path(__file__).resolve().parents[2]))
HERE = Path(__file__).resolve().parent
GPUQ_CMD = [sys.executable, "-c", "from gpuq.cli import app; app()"]

SIMULATIONS: dict[str, list[str]] = {
    "symbol-retail": ["-f", "examples/symbol-retail", "--compare"],
    "symbol-retail-capacity": ["-f", "examples/symbol-retail/capacity/capacity.scenario", "--compare"],
    "serving": ["-f", "examples/serving", "--compare"],
    "kueue-perf-baseline": ["-f", "examples/kueue-perf-baseline"],
    "philly-week": ["-f", "examples/philly-week"],
    "admission-fair-sharing": ["-f", "examples/admission-fair-sharing", "--compare"],
}
ADMITS: dict[str, list[str]] = {
    "gpu-estate-admit": ["-f", "examples/gpu-estate"],
    "symbol-retail-admit": ["-f", "examples/symbol-retail"],
}
DETERMINISTIC = ("metrics.json", "workloads.csv")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_simulation(name: str, args: list[str], out: Path) -> dict[str, str]:
    subprocess.run([*GPUQ_CMD, "simulate", *args, "--out-dir", str(out), "-q"], cwd=ROOT, check=True)
    hashes = {}
    for path in sorted(out.rglob("*")):
        if path.name in DETERMINISTIC:
            hashes[str(path.relative_to(out))] = sha(path)
    return hashes


def run_admit(name: str, args: list[str], out: Path) -> dict[str, str]:
    done = subprocess.run(
        [*GPUQ_CMD, "admit", *args, "-o", "json"], cwd=ROOT, check=True, capture_output=True
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "admit.json").write_bytes(done.stdout)
    return {"admit.json": hashlib.sha256(done.stdout).hexdigest()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--keep", type=Path, help="keep the outputs in this folder")
    options = parser.parse_args()
    golden_file = HERE / "outputs.json"
    golden = json.loads(golden_file.read_text()) if golden_file.exists() else {}
    runs = [("simulate", n, a) for n, a in SIMULATIONS.items()] + [("admit", n, a) for n, a in ADMITS.items()]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        base = options.keep or Path(tmp)
        for verb, name, args in runs:
            if options.only and name not in options.only:
                continue
            out = base / name
            start = time.perf_counter()
            hashes = (run_simulation if verb == "simulate" else run_admit)(name, args, out)
            took = time.perf_counter() - start
            if options.record:
                golden[name] = hashes
                keep = HERE / "metrics" / name
                for rel in hashes:
                    if rel.endswith(".json"):
                        target = keep / rel
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes((out / rel).read_bytes())
                print(f"{name}: recorded {len(hashes)} files ({took:.1f} s)")
                continue
            expected = golden.get(name, {})
            diff = sorted(k for k in expected.keys() | hashes.keys() if expected.get(k) != hashes.get(k))
            failed += bool(diff)
            print(f"{name}: {'DIFFERS: ' + ', '.join(diff) if diff else 'same'} ({took:.1f} s)")
    if options.record:
        golden_file.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
