"""Writes nodes.yaml and queues.yaml of the Philly replay from the trace staged in data/traces/philly.

    .venv/bin/python examples/philly/generate.py

Nodes: the official machine list as NodePools (gpuq.sim.traces.nodes).
Queues: one ClusterQueue per virtual cluster with the GPUs the Helios
simulator gives it (nodes in philly_vc_nodes.csv × 8), all in one cohort so
idle VC quota can be lent; the trace's four VCs missing from that list share
a queue with no quota of its own (it can only borrow). Namespaces and
LocalQueues are named as the Philly importer derives them (vc-<id>).
"""

from __future__ import annotations

import csv
from pathlib import Path

import yaml

from gpuq.sim.traces.nodes import philly_pools

HERE = Path(__file__).resolve().parent
TRACES = HERE.parents[1] / "data" / "traces" / "philly"  # the staged copy, with its README and license
UNLISTED = ("23dbec", "51b7ef", "795a4c", "925e2b")


def queue(name: str, gpus: int) -> list[dict[str, object]]:
    quota: dict[str, object] = {"name": "nvidia.com/gpu", "nominalQuota": gpus}
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "cohortName": "philly",
                "namespaceSelector": {},
                "queueingStrategy": "BestEffortFIFO",
                "preemption": {"reclaimWithinCohort": "Any"},
                "resourceGroups": [
                    {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "philly", "resources": [quota]}]}
                ],
            },
        }
    ]


def local_queue(namespace: str, cluster_queue: str) -> dict[str, object]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": namespace, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }


def main() -> None:
    pools = philly_pools(TRACES / "cluster_machine_list.csv")
    header = "# Philly's machine list as NodePools (written by generate.py; CPU and memory assumed).\n"
    (HERE / "nodes.yaml").write_text(header + yaml.safe_dump_all(pools.manifests, sort_keys=False))
    docs: list[dict[str, object]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "philly"}}
    ]
    with (TRACES / "philly_vc_nodes.csv").open() as handle:
        for row in csv.DictReader(handle):
            name = f"vc-{row['vc']}"
            docs += queue(name, 8 * int(row["node num"]))
            docs.append(local_queue(name, name))
    docs += queue("vc-unlisted", 0)
    docs += [local_queue(f"vc-{vc}", "vc-unlisted") for vc in UNLISTED]
    header = "# One ClusterQueue per Philly virtual cluster (written by generate.py).\n"
    (HERE / "queues.yaml").write_text(header + yaml.safe_dump_all(docs, sort_keys=False))


if __name__ == "__main__":
    main()
