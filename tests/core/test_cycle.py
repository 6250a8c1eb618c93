"""The scheduling cycle (Kueue: pkg/scheduler/scheduler.go): heads, ordering, skipping and reservations."""

from __future__ import annotations

import pytest

from builders import (
    GPU,
    Case,
    case,
    cluster_queue,
    cohort,
    config,
    outcome_of,
    run_case,
    scheduler_with,
    workload,
)
from core.test_preemption import CASES as PREEMPTION_CASES
from gpuq.core.flavors import FlavorAssigner
from gpuq.core.model import ClusterConfig, PreemptionPolicy, Workload

LOWER = PreemptionPolicy.LOWER_PRIORITY
ANY = PreemptionPolicy.ANY
NO_LONGER_FITS = "Workload no longer fits after processing another workload"
NO_CANDIDATES = "and no workload can be preempted to free it"


def gpus(name: str, cq: str, n: int, prio: int = 0, created: float = 0.0) -> Workload:
    return workload(name).queue(cq).priority(prio).created(created).request(n, gpu=1).build()


def running(name: str, cq: str, n: int, prio: int = 0, at: float = 0.0, on: str = "f") -> Workload:
    return workload(name).queue(cq).priority(prio).request(n, gpu=1).admitted(cq, {"gpu": on}, at=at).build()


def pair(a: int = 4, b: int = 4) -> ClusterConfig:
    return config(
        cluster_queue("a").cohort("c").flavor("f", gpu=a).build(),
        cluster_queue("b").cohort("c").flavor("f", gpu=b).build(),
    )


SEPARATE = config(
    cluster_queue("a").flavor("f", gpu=4).build(), cluster_queue("b").flavor("f", gpu=4).build()
)
TWO_FLAVOR_PAIR = config(
    cluster_queue("a").cohort("c").flavor("f1", gpu=2).flavor("f2", gpu=2).build(),
    cluster_queue("b").cohort("c").flavor("f1", gpu=2).flavor("f2", gpu=2).build(),
)
STANDALONE = config(cluster_queue("s").flavor("f", gpu=6).preemption(within=LOWER).build())


def reserving(reclaim: PreemptionPolicy) -> ClusterConfig:
    return config(
        cluster_queue("a").cohort("c").flavor("f", gpu=4).preemption(reclaim=reclaim).build(),
        cluster_queue("b").cohort("c").flavor("f", gpu=4).build(),
    )


NESTED = config(
    cluster_queue("a").cohort("team").flavor("f", gpu=2).build(),
    cluster_queue("b").cohort("team").flavor("f", gpu=2).build(),
    cluster_queue("x").cohort("org").flavor("f", gpu=2).build(),
    cohorts=(cohort("org").build(), cohort("team").parent("org").build()),
)

OVERLAP = config(
    cluster_queue("a").cohort("c").flavor("f", gpu=4).preemption(reclaim=ANY).build(),
    cluster_queue("b").cohort("c").flavor("f", gpu=4).preemption(reclaim=ANY).build(),
    cluster_queue("x").cohort("c").flavor("f", gpu=0).build(),
)

CASES: list[Case] = [
    case(
        "one head per ClusterQueue per cycle",
        config(cluster_queue("a").flavor("f", gpu=8).build()),
        gpus("first", "a", 2, created=1),
        gpus("second", "a", 2, created=2),
        admitted={"first": "f"},
    ),
    case(
        "the heads of all ClusterQueues are admitted in the same cycle",
        SEPARATE,
        gpus("wa", "a", 4),
        gpus("wb", "b", 4),
        admitted={"wa": "f", "wb": "f"},
    ),
    case(
        "heads are nominated against the start-of-cycle snapshot; a later one that no longer fits is skipped",
        pair(),
        gpus("older", "a", 5, created=1),
        gpus("newer", "b", 5, created=2),
        admitted={"older": "f borrowing"},
        pending={"newer": NO_LONGER_FITS},
    ),
    case(
        "non-borrowing entries are admitted before borrowing ones in the same cycle",
        pair(),
        gpus("borrower", "a", 6, created=1),
        gpus("within-nominal", "b", 4, created=2),
        admitted={"within-nominal": "f"},
        pending={"borrower": NO_LONGER_FITS},
    ),
    case(
        "among entries that borrow alike the higher priority is processed first",
        pair(),
        gpus("older-low", "a", 5, prio=0, created=1),
        gpus("newer-high", "b", 5, prio=1, created=2),
        admitted={"newer-high": "f borrowing"},
        pending={"older-low": NO_LONGER_FITS},
    ),
    case(
        "hierarchical cohorts: borrowing from a nearer cohort is processed before borrowing from the root",
        NESTED,
        gpus("from-root", "x", 4, created=1),
        gpus("from-team", "a", 3, created=2),
        admitted={"from-team": "f borrowing"},
        pending={"from-root": NO_LONGER_FITS},
    ),
    case(
        "a skipped entry is not given another flavor in the same cycle",
        TWO_FLAVOR_PAIR,
        gpus("wa", "a", 3, created=1),
        gpus("wb", "b", 3, created=2),
        admitted={"wa": "f1 borrowing"},
        pending={"wb": NO_LONGER_FITS},
    ),
    case(
        "a skipped entry gets the next flavor in a later cycle",
        TWO_FLAVOR_PAIR,
        gpus("wa", "a", 3, created=1),
        gpus("wb", "b", 3, created=2),
        admitted={"wa": "f1 borrowing", "wb": "f2 borrowing"},
        cycles=None,
    ),
    case(
        "a NoFit head waits with its reason while the other heads proceed",
        SEPARATE,
        gpus("too-big", "a", 5),
        gpus("fits", "b", 4),
        admitted={"fits": "f"},
        pending={"too-big": "request > maximum capacity (5 > 4)"},
    ),
    case(
        "a preemptor is not admitted in the cycle that evicts for it",
        STANDALONE,
        running("low", "s", 6, prio=-1),
        gpus("in", "s", 6, prio=1),
        preempted={"low": "InClusterQueue"},
        pending={"in": "Waiting for preempted workloads to be evicted: default/low"},
    ),
    case(
        "the preemptor is admitted in a later cycle, once its victim's eviction completed",
        STANDALONE,
        running("low", "s", 6, prio=-1),
        gpus("in", "s", 6, prio=1),
        admitted={"in": "f"},
        preempted={"low": "InClusterQueue"},
        pending={"low": NO_CANDIDATES},
        cycles=None,
    ),
    case(
        "preempt without candidates reserves the capacity up to nominal so a later entry cannot take it",
        reserving(LOWER),
        running("b-high", "b", 6, prio=10),
        gpus("wa", "a", 4),
        gpus("wb", "b", 1),
        pending={"wa": NO_CANDIDATES, "wb": NO_LONGER_FITS},
    ),
    case(
        "preempt without candidates reserves the whole request while borrowing without a borrowingLimit",
        reserving(LOWER),
        running("a-high", "a", 2, prio=10),
        running("b-full", "b", 4, prio=10),
        gpus("wa", "a", 4, prio=1),
        gpus("wb", "b", 2),
        pending={"wa": NO_CANDIDATES, "wb": NO_LONGER_FITS},
    ),
    case(
        "preempt without candidates reserves nothing when reclaimWithinCohort=Any",
        reserving(ANY),
        running("a-high", "a", 2, prio=10),
        running("b-full", "b", 4, prio=10),
        gpus("wa", "a", 4, prio=1),
        gpus("wb", "b", 2),
        admitted={"wb": "f borrowing"},
        pending={"wa": NO_CANDIDATES},
    ),
    case(
        "the reservation while borrowing is capped at nominal plus borrowingLimit minus usage",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=(4, 1)).build(),
            cluster_queue("b").cohort("c").flavor("f", gpu=2).build(),
            cluster_queue("z").cohort("c").flavor("f", gpu=10).build(),
        ),
        running("a-high", "a", 2, prio=10),
        gpus("wa", "a", 4, prio=1),
        gpus("wb", "b", 11),
        admitted={"wb": "f borrowing"},
        pending={"wa": NO_CANDIDATES},
    ),
    case(
        "a preemptor whose targets overlap an earlier one's recomputes its targets in the same cycle",
        OVERLAP,
        running("x1", "x", 4, at=1),
        running("x2", "x", 4, at=2),
        gpus("wa", "a", 4, created=1),
        gpus("wb", "b", 4, created=2),
        preempted={"x2": "InCohortReclamation", "x1": "InCohortReclamation"},
        pending={
            "wa": "Waiting for preempted workloads to be evicted: default/x2",
            "wb": "Waiting for preempted workloads to be evicted: default/x1",
        },
    ),
    case(
        "two preemptors whose targets overlap are both admitted once the evictions complete",
        OVERLAP,
        running("x1", "x", 4, at=1),
        running("x2", "x", 4, at=2),
        gpus("wa", "a", 4, created=1),
        gpus("wb", "b", 4, created=2),
        admitted={"wa": "f", "wb": "f"},
        preempted={"x2": "InCohortReclamation", "x1": "InCohortReclamation"},
        pending={"x1": "4 more needed (0 available)", "x2": "4 more needed (0 available)"},
        cycles=None,
    ),
]


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_cycle(c: Case) -> None:
    assert run_case(c) == c.want


SNAPSHOT_CASES = [c for c in CASES + PREEMPTION_CASES if c.cycles == 1]


@pytest.mark.parametrize("c", SNAPSHOT_CASES, ids=[c.name for c in SNAPSHOT_CASES])
def test_plan_cycle_leaves_every_quota_node_usage_as_it_found_it(c: Case) -> None:
    scheduler = scheduler_with(c.config, c.workloads)
    tree = scheduler.state.tree
    nodes = {**tree.cluster_queues, **tree.cohorts}
    before = {name: {fr: v for fr, v in node.usage.items() if v} for name, node in nodes.items()}
    scheduler.plan_cycle(0.0)
    after = {name: {fr: v for fr, v in node.usage.items() if v} for name, node in nodes.items()}
    assert after == before


def test_a_skipped_workload_retries_every_flavor_on_its_next_attempt() -> None:
    """Kueue's setSkipped clears the flavor scan: wb, skipped at f1, tries f1 first again."""
    specs = {w.key: w for w in (gpus("wa", "a", 3, created=1), gpus("wb", "b", 3, created=2))}
    scheduler = scheduler_with(TWO_FLAVOR_PAIR, specs.values())
    result, entries = scheduler.plan_cycle()
    scheduler.apply(result, entries)
    assert outcome_of(specs, result.admitted, (), ()).admitted == {"wa": "f1 borrowing"}
    assert "default/wb" not in scheduler.last_tried
    scheduler.finish("default/wa")
    result, _ = scheduler.plan_cycle()
    assert outcome_of(specs, result.admitted, (), ()).admitted == {"wb": "f1 borrowing"}


@pytest.mark.parametrize(
    ("resume", "flavor", "last_tried"),
    [
        (None, "f1", 0),
        ([{GPU: 0}], "f2", -1),
        ([{GPU: -1}], "f1", 0),
    ],
    ids=[
        "a first attempt starts at the first flavor and records where it stopped",
        "a later attempt resumes after the last tried flavor; reaching the last one resets the scan",
        "a scan that reached the last flavor starts over",
    ],
)
def test_flavor_scan_progress(resume: list[dict[str, int]] | None, flavor: str, last_tried: int) -> None:
    scheduler = scheduler_with(TWO_FLAVOR_PAIR, [gpus("wa", "a", 3)])
    wl = scheduler.workloads["default/wa"]
    assignment = FlavorAssigner(scheduler.state, wl, "a").assign(resume=resume)
    assert assignment.pod_sets[0].flavors[GPU] == flavor
    assert assignment.last_tried == [{GPU: last_tried}]
