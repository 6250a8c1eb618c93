"""The report in a real browser: headless Chromium opens it, and every chart must have drawn marks,
nothing may be logged to the console, and at 900 px nothing may push the page wider than the window.

A probe script appended to a copy of the page measures what the browser laid out and writes it
into the DOM, which ``--dump-dom`` prints after the scripts ran; ``--enable-logging=stderr``
prints every console message (errors and uncaught exceptions included) as a ``CONSOLE`` line.
The probe itself proves the check can fail: a page with a script error and a page with an empty
chart are caught. Skipped, saying why, where ``chromium`` is not on PATH.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from gpuq.sim.report import render_report

try:
    from report_sample import sample_metrics
except ImportError:  # tests/sim became a package
    from sim.report_sample import sample_metrics

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not on PATH (Debian: apt-get install -y chromium)"
)
ROOT = Path(__file__).resolve().parents[2]

PROBE = """<script>
(() => {
  const drawn = (m) => { const b = m.getBBox(); return b.width > 0 || b.height > 0; };
  const charts = [...document.querySelectorAll("figure.chart")].map((f) => ({
    id: f.id, marks: [...f.querySelectorAll(".mark")].filter(drawn).length,
  }));
  const probe = document.createElement("pre");
  probe.id = "probe";
  probe.textContent = JSON.stringify({charts, page_width: document.documentElement.scrollWidth});
  document.body.append(probe);
})();
</script>
"""


@dataclass(frozen=True)
class Look:
    """What the browser made of a page: each chart's drawn marks, the page's width, the console."""

    marks: dict[str, int]
    page_width: int
    console: list[str]


def look(page: str, folder: Path, width_px: int) -> Look:
    path = folder / f"page-{width_px}.html"
    path.write_text(page.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
            f"--user-data-dir={folder / 'profile'}",
            f"--window-size={width_px},2000",
            "--dump-dom",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.DOTALL)
    probe: dict[str, Any] = json.loads(unescape(found.group(1))) if found else {"charts": [], "page_width": 0}
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return Look({c["id"]: c["marks"] for c in probe["charts"]}, probe["page_width"], console)


@cache
def holiday_rush_report() -> str:
    """The README's example, simulated as a user runs it (about five seconds)."""
    command = [
        sys.executable,
        "-c",
        "from gpuq.cli import app; app()",
        "simulate",
        "-f",
        "examples/symbol-retail",
    ]
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([*command, "--compare", "--out-dir", out, "-q"], cwd=ROOT, check=True)
        return (Path(out) / "report.html").read_text(encoding="utf-8")


def sample_report() -> str:
    return render_report(sample_metrics(("fcfs", "kueue")))


HOLIDAY_CHARTS = {"fig-cohorts", "fig-utilisation", "fig-queues", "fig-waits"}

PAGES = [
    pytest.param(holiday_rush_report, 1400, id="the holiday rush at 1400 px"),
    pytest.param(holiday_rush_report, 900, id="the holiday rush at 900 px"),
    pytest.param(sample_report, 900, id="the three-team sample at 900 px"),
]


@pytest.mark.parametrize(("page", "width_px"), PAGES)
def test_every_chart_draws_marks_and_nothing_is_logged(page: Any, width_px: int, tmp_path: Path) -> None:
    seen = look(page(), tmp_path, width_px)
    assert seen.console == []
    assert set(seen.marks) == HOLIDAY_CHARTS
    assert [chart for chart, marks in seen.marks.items() if marks == 0] == []
    assert seen.page_width <= width_px, "a table or chart is wider than the window"


BROKEN = [
    pytest.param(
        "<script>null.x;</script>",
        "Uncaught TypeError",
        {"fig-utilisation": 1},
        id="a script error is caught",
    ),
    pytest.param(
        "", "", {"fig-utilisation": 0}, id="a chart whose marks have nothing to draw is caught as empty"
    ),
]


@pytest.mark.parametrize(("script", "logged", "marks"), BROKEN)
def test_the_probe_sees_script_errors_and_empty_charts(
    script: str, logged: str, marks: dict[str, int], tmp_path: Path
) -> None:
    mark = '<path class="mark" d="M0 0H10"/>' if marks["fig-utilisation"] else '<path class="mark" d=""/>'
    chart = f'<figure class="chart" id="fig-utilisation"><svg viewBox="0 0 10 10">{mark}</svg></figure>'
    page = f"<!DOCTYPE html><html><body>{chart}{script}</body></html>"
    seen = look(page, tmp_path, 900)
    assert seen.marks == marks
    assert [line for line in seen.console if logged not in line] == [] and bool(seen.console) == bool(logged)
