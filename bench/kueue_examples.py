"""Print what gpuq makes of Kueue v0.19.2's 77 documentation examples: file | kinds | pod sets | result.

Run: ``.venv/bin/python bench/kueue_examples.py`` (from the repository root). The table of examples
and their setup files is ``tests/api/kueue_examples.py``, shared with the test that asserts it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "api"))

from kueue_examples import EXAMPLES, IGNORED, Example, Outcome, evaluate, setup_files


def pod_sets(outcome: Outcome) -> str:
    return "; ".join(
        " + ".join(f"{name}x{count}" + (f" (min {low})" if low is not None else "") for name, count, low in w)
        for w in outcome.workloads
    )


def result(example: Example, outcome: Outcome) -> tuple[str, bool]:
    """The result column and whether the file loads as Kueue's documentation means it to."""
    if outcome.errors or (outcome.alone_errors and not example.setup):
        first = (outcome.errors or outcome.alone_errors)[0].split(": ", 1)[-1]
        return f"error: {first[:90]}", False
    if outcome.ignored and not outcome.kinds:
        return IGNORED, True
    if example.setup and outcome.workloads:
        alone = "alone and " if not outcome.alone_errors else ""
        return f"loads {alone}with setup {' + '.join(setup_files(example.setup))}", True
    return "loads alone", True


def main() -> None:
    print("| file | kinds | pod sets gpuq builds | result |")
    print("| --- | --- | --- | --- |")
    loaded = 0
    for example in EXAMPLES:
        outcome = evaluate(example)
        text, ok = result(example, outcome)
        loaded += ok
        kinds = ", ".join(outcome.kinds) or "-"
        print(f"| {example.file} | {kinds} | {pod_sets(outcome) or '-'} | {text} |")
    print(f"\n{loaded} of {len(EXAMPLES)} load")


if __name__ == "__main__":
    main()
