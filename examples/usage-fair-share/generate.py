"""Writes queues.yaml of the usage-fair-share example from ../philly-week/queues.yaml.

    .venv/bin/python examples/usage-fair-share/generate.py

The same ClusterQueues (one per Philly virtual cluster, a fifth of its quota, BestEffortFIFO, all in
the cohort ``philly`` where they borrow idle quota; without preemption, so that the order of
admission is what differs) with Kueue's fair sharing on, and
the cohort as an object so that a variant can give it ``gpuq.dev/usage-half-life``.
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
            document["spec"].pop("preemption", None)  # fair sharing orders admission; nothing is preempted
    configuration = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]},
    }
    cohort = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "philly"}, "spec": {}}
    header = (
        "# Philly-week's ClusterQueues in the cohort philly with Kueue's fair sharing on "
        "(written by generate.py).\n"
    )
    text = header + yaml.safe_dump_all([configuration, cohort, *documents], sort_keys=False)
    (HERE / "queues.yaml").write_text(text)


if __name__ == "__main__":
    main()
