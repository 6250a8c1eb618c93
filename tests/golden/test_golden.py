"""The bundled examples give the bytes recorded in outputs.json (``record.py`` rewrites them).

A change of these bytes is a change of behaviour: the commit that makes it says why.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402

NAMES = [*record.SIMULATIONS, *record.ADMITS]


@pytest.mark.parametrize("name", NAMES)
def test_example_output_is_the_recorded_one(name: str) -> None:
    done = subprocess.run(
        [sys.executable, str(HERE / "record.py"), "--only", name], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
