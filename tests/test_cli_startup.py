"""Start-up: the ``gpuq`` command imports no heavy library until a verb that needs it runs.

Timings are for benchmarks (the closing notes report them); this checks the cause instead: which
modules a bare ``import gpuq.cli`` (what ``gpuq --help`` costs) and ``gpuq validate`` load.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("sqlalchemy", "fastapi", "uvicorn", "ray", "plotly", "httpx", "psycopg", "pynvml")
EXAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "configs" / "fair-sharing.yaml")
ENGINE = (
    "gpuq.api.loader",
    "gpuq.sim.simulator",
    "gpuq.run.store",
    "gpuq.server.app",
    "gpuq.forecast.forecast",
)


def _modules_after(code: str) -> set[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    ("code", "absent"),
    [
        ("import gpuq.cli", (*HEAVY, *ENGINE)),
        (
            "from typer.testing import CliRunner\nfrom gpuq.cli import app\n"
            f"CliRunner().invoke(app, ['validate', '-f', {EXAMPLE!r}])",
            (*HEAVY, "gpuq.sim.simulator", "gpuq.run.store", "gpuq.server.app", "gpuq.forecast.forecast"),
        ),
    ],
    ids=["help", "validate"],
)
def test_a_verb_imports_only_what_it_uses(code: str, absent: tuple[str, ...]) -> None:
    loaded = _modules_after(code)
    assert sorted(m for m in absent if m in loaded) == []
