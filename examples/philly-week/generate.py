"""Writes the Philly week used to measure forecast accuracy (docs/forecast.md) from the staged trace.

    .venv/bin/python examples/philly-week/generate.py

A contended week: the jobs submitted in [2017-10-02, 2017-10-09) from Sia's Philly job
table, sorted by time, on a fifth of Philly (the two machine pools cut 321 -> 64 and
231 -> 46 nodes) with every virtual cluster's quota divided by 5 (integer division), so
that queues run thousands deep. Writes oct-week.csv (Philly format), nodes.yaml and
queues.yaml next to this file; scenario.yaml names them.
"""

from __future__ import annotations

import csv
import io
import lzma
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
PHILLY = HERE.parent / "philly"
TRACE = HERE.parents[1] / "data" / "traces" / "philly" / "philly_jobs_sia.csv.xz"
WEEK = ("2017-10-02", "2017-10-09")
NODES = {321: 64, 231: 46}
SHARE = 5


def week_rows() -> list[dict[str, str]]:
    with lzma.open(TRACE, "rt") as handle:
        rows = [row for row in csv.DictReader(handle) if WEEK[0] <= row["timestamp"] < WEEK[1]]
    rows.sort(key=lambda row: row["timestamp"])
    return rows


def main() -> None:
    rows = week_rows()
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    (HERE / "oct-week.csv").write_text(out.getvalue())
    nodes = (PHILLY / "nodes.yaml").read_text()
    for before, after in NODES.items():
        nodes = nodes.replace(f"count: {before}\n", f"count: {after}\n")
    nodes = nodes.replace("written by generate.py", "a fifth, by philly-week/generate.py")
    (HERE / "nodes.yaml").write_text(nodes)
    queues = re.sub(
        r"nominalQuota: (\d+)",
        lambda match: f"nominalQuota: {int(match.group(1)) // SHARE}",
        (PHILLY / "queues.yaml").read_text(),
    )
    queues = queues.replace("written by generate.py", "quotas / 5, by philly-week/generate.py")
    (HERE / "queues.yaml").write_text(queues)
    print(f"{len(rows):,} jobs written to {HERE / 'oct-week.csv'}")


if __name__ == "__main__":
    main()
