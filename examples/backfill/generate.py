"""Writes queues.yaml of the backfill example from ../philly-week/queues.yaml.

    .venv/bin/python examples/backfill/generate.py

The same ClusterQueues (one per Philly virtual cluster, a fifth of its quota) made StrictFIFO
and standalone: no cohort, so a VC's jobs run in its own quota in submission order, as Philly's
scheduler and the Helios simulator run them (the queue of the VCs missing from Philly's list, which
could only borrow, gets one machine's 8 GPUs). That is where backfill matters: a large job at a
queue's head blocks everything behind it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "philly-week" / "queues.yaml"


def main() -> None:
    documents = list(yaml.safe_load_all(SOURCE.read_text()))
    for document in documents:
        if document.get("kind") == "ClusterQueue":
            spec = document["spec"]
            spec.pop("cohortName", None)
            spec.pop("preemption", None)
            spec["queueingStrategy"] = "StrictFIFO"
            if document["metadata"]["name"] == "vc-unlisted":  # it could only borrow: one machine
                spec["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 8
    header = "# Philly-week's ClusterQueues, StrictFIFO and without a cohort (written by generate.py).\n"
    text = header + yaml.safe_dump_all(documents, sort_keys=False, explicit_start=False)
    (HERE / "queues.yaml").write_text(text)


if __name__ == "__main__":
    main()
