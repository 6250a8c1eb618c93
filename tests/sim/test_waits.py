"""Who waited and why, and deadlines, on runs small enough to compute by hand (gpuq.sim.waits)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest

from gpuq.sim.metrics import workload_class, workloads_csv
from gpuq.sim.simulator import SimSettings
from gpuq.sim.waits import Cause, classify, deadline_table, wait_table

try:
    from sim_cluster import cluster, job, simulate
except ImportError:  # tests/sim became a package
    from sim.sim_cluster import cluster, job, simulate

QUOTA_MESSAGE = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu, "
    "4 more needed, and no workload can be preempted to free it"
)

CLASSIFIED = [
    (
        "a quota shortage names the resource and every flavor tried",
        "Pending",
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
        "a100, 4 more needed, and no workload can be preempted to free it; insufficient unused quota for "
        "nvidia.com/gpu in flavor h100, 2 more needed (6 available)",
        Cause("quota", "quota: nvidia.com/gpu in a100, h100"),
    ),
    (
        "a request above the maximum capacity is a quota cause too",
        "Pending",
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor std, request > "
        "maximum capacity (64 > 32)",
        Cause("quota", "quota: cpu in std"),
    ),
    (
        "an eviction by preemption names the preemptor",
        "Preempted",
        "Preempted by team-b/b1 (InCohortReclamation)",
        Cause("preempted", "preempted by team-b/b1"),
    ),
    (
        "a ProvisioningRequest not Ready is capacity being provisioned",
        "QuotaReserved",
        "Quota reserved in ClusterQueue cq, waiting for admission checks: dws-prov",
        Cause("provisioning", "capacity being provisioned (admission checks dws-prov)"),
    ),
    (
        "no topology domain fits",
        "Pending",
        "couldn't assign flavors to pod set main: topology dc doesn't allow to fit any of 4 pod(s)",
        Cause(
            "topology",
            "topology: couldn't assign flavors to pod set main: topology dc doesn't allow "
            "to fit any of 4 pod(s)",
        ),
    ),
    (
        "a preemptor waits for its victims",
        "Pending",
        "Waiting for preempted workloads to be evicted: team-a/a1",
        Cause("preempting", "waiting for preempted workloads to be evicted: team-a/a1"),
    ),
    (
        "quota taken in the same cycle",
        "Pending",
        "Workload no longer fits after processing another workload",
        Cause("quota", "quota: taken by another workload admitted in the same cycle"),
    ),
]


@pytest.mark.parametrize(
    ("reason", "message", "cause"), [c[1:] for c in CLASSIFIED], ids=[c[0] for c in CLASSIFIED]
)
def test_a_recorded_message_is_sorted_into_its_cause(reason: str, message: str, cause: Cause) -> None:
    assert classify(reason, message) == cause


# (name, cluster options, jobs, workload -> (wait_s, requeued_wait_s, cause kind, reason, preempted by,
# first messages as (since_s, reason, message)))
RUNS: list[tuple[str, dict[str, Any], list[Any], dict[str, tuple[Any, ...]]]] = [
    (
        "a workload short of quota waits for quota in its flavor until the first one finishes",
        {"quota": (8, 0)},
        [job("a1", "team-a", 0, 100, 4), job("a2", "team-a", 10, 50, 4), job("a3", "team-a", 20, 10, 4)],
        {
            "team-a/a3": (
                40.0,
                0.0,
                "quota",
                "quota: nvidia.com/gpu in gpu",
                [],
                [(0.0, "Pending", QUOTA_MESSAGE)],
            ),
        },
    ),
    (
        "behind the head of a StrictFIFO queue: the head it queued behind is named",
        {"quota": (8, 0), "strategy": "StrictFIFO"},
        [job("a1", "team-a", 0, 100, 8), job("a2", "team-a", 10, 50, 7), job("a3", "team-a", 20, 10, 1)],
        {
            "team-a/a2": (90.0, 0.0, "quota", "quota: nvidia.com/gpu in gpu", [], None),
            "team-a/a3": (80.0, 0.0, "behind", "behind team-a/a2, the head of its ClusterQueue", [], []),
        },
    ),
    (
        "a borrower preempted by the lender's reclaim waits again, named by its preemptor",
        {"quota": (4, 4), "reclaim": "Any"},
        [job("a1", "team-a", 0, 100, 8), job("b1", "team-b", 10, 50, 4)],
        {
            "team-a/a1": (
                0.0,
                50.0,
                "preempted",
                "preempted by team-b/b1",
                ["team-b/b1"],
                [
                    (10.0, "Preempted", "Preempted by team-b/b1 (InCohortReclamation)"),
                    (10.0, "Pending", "Workload no longer fits after processing another workload"),
                    (
                        10.0,
                        "Pending",
                        "couldn't assign flavors to pod set main: insufficient unused quota for "
                        "nvidia.com/gpu in flavor gpu, 4 more needed (4 available)",
                    ),
                ],
            ),
        },
    ),
    (
        "quota reserved but no node with room: its pods wait for a node",
        {"quota": (16, 0)},
        [job("a1", "team-a", 0, 100, 8), job("a2", "team-a", 10, 50, 8)],
        {
            "team-a/a2": (
                90.0,
                0.0,
                "no-node",
                "no node with room: no node fits the pod",
                [],
                [(0.0, "Unschedulable", "no node fits the pod")],
            )
        },
    ),
]


@pytest.mark.parametrize(("options", "jobs", "expected"), [r[1:] for r in RUNS], ids=[r[0] for r in RUNS])
def test_the_longest_waits_say_why_from_what_the_engine_recorded(
    tmp_path: Path, options: dict[str, Any], jobs: list[Any], expected: dict[str, tuple[Any, ...]]
) -> None:
    result = simulate(cluster(tmp_path, **options), jobs)
    table = wait_table(result.runs.values(), result.span_s, workload_class)
    rows = {row["workload"]: row for row in table["longest"]}
    assert set(rows) == set(expected)
    for key, (wait, requeued, kind, reason, by, messages) in expected.items():
        row = rows[key]
        got = (row["wait_s"], row["requeued_wait_s"], row["cause"], row["preempted_by"])
        assert got == (wait, requeued, kind, by)
        if reason is not None:
            assert row["reason"] == reason
        if messages is not None:
            assert [(m["since_s"], m["reason"], m["message"]) for m in row["messages"]] == messages
    assert table["waited"] == len(expected)


def test_the_reason_column_is_filled_for_every_workload_that_waited(tmp_path: Path) -> None:
    jobs = [job("a1", "team-a", 0, 100, 8), job("a2", "team-a", 10, 50, 7), job("a3", "team-a", 20, 10, 1)]
    result = simulate(cluster(tmp_path, (8, 0), strategy="StrictFIFO"), jobs)
    rows = csv.DictReader(io.StringIO(workloads_csv(result.runs.values(), end_s=result.span_s)))
    assert {row["name"]: row["reason"] for row in rows} == {
        "a1": "",
        "a2": "quota: nvidia.com/gpu in gpu",
        "a3": "behind team-a/a2, the head of its ClusterQueue",
    }


DEADLINES = [
    (
        "met, missed late, missed unfinished past it, and not yet finished when the run stops",
        [
            job("a1", "team-a", 0, 100, 8, deadline_s=150.0),
            job("a2", "team-a", 10, 100, 8, deadline_s=150.0),
            job("a3", "team-a", 20, 100, 8, deadline_s=1000.0),
            job("a4", "team-a", 30, 10, 8, deadline_s=240.0),
        ],
        {"name": "team-a", "declared": 4, "met": 1, "missed": 2, "unfinished": 1},
        [("team-a/a2", 50.0, "Succeeded"), ("team-a/a4", 10.0, "Pending")],
    ),
]


@pytest.mark.parametrize(
    ("jobs", "team", "missed"), [d[1:] for d in DEADLINES], ids=[d[0] for d in DEADLINES]
)
def test_deadlines_are_met_missed_or_not_yet_finished_per_team(
    tmp_path: Path, jobs: list[Any], team: dict[str, Any], missed: list[tuple[str, float, str]]
) -> None:
    result = simulate(cluster(tmp_path, (8, 0)), jobs, SimSettings(horizon_s=250.0))
    table = deadline_table(list(result.runs.values()), result.span_s)
    assert table is not None
    assert table["teams"] == [team]
    assert [(m["workload"], m["late_s"], m["status"]) for m in table["missed"]] == missed


def test_no_deadline_declared_no_deadline_block(tmp_path: Path) -> None:
    result = simulate(cluster(tmp_path), [job("a1", "team-a", 0, 100, 8)])
    assert deadline_table(list(result.runs.values()), result.span_s) is None
