"""Fair sharing (Kueue: keps/1714-fair-sharing): dominant resource shares, the admission tournament and
fair-sharing preemption, mirroring Kueue's ``fair_sharing_test.go``, ``fair_sharing_iterator_test.go``,
``preemption_fair_test.go`` and the fair-sharing cases of ``scheduler_test.go``."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from fractions import Fraction

import pytest

from builders import (
    GPU,
    Case,
    case,
    cluster_queue,
    cohort,
    config,
    run_case,
    scheduler_with,
    workload,
)
from gpuq.core.fair_preemption import fair_targets
from gpuq.core.fairshare import dominant_share, order_entries, weight_of
from gpuq.core.flavors import Assignment
from gpuq.core.model import (
    ClusterConfig,
    ClusterQueue,
    Cohort,
    FairSharingStrategy,
    PreemptionPolicy,
    Workload,
)
from gpuq.core.nomination import Entry
from gpuq.core.preemption import Preemptor
from gpuq.core.state import ClusterState

S2A = FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE
S2B = FairSharingStrategy.LESS_THAN_INITIAL_SHARE
ANY = PreemptionPolicy.ANY
LOWER = PreemptionPolicy.LOWER_PRIORITY
NEVER = PreemptionPolicy.NEVER
IN_CQ = "InClusterQueue"
RECLAIM = "InCohortReclamation"
FAIR = "InCohortFairSharing"


def with_gates(cfg: ClusterConfig, **gates: bool) -> ClusterConfig:
    return replace(cfg, scheduler=replace(cfg.scheduler, feature_gates=gates))


def usage_snapshot(state: ClusterState) -> dict[tuple[str, str], dict[tuple[str, str], int]]:
    """Non-zero usage of every node of the quota tree."""
    nodes = [("cq", n) for n in state.tree.cluster_queues.values()]
    nodes += [("cohort", n) for n in state.tree.cohorts.values()]
    return {(kind, node.name): {fr: v for fr, v in node.usage.items() if v} for kind, node in nodes}


# ------------------------------------------------------------------------------ DRS


@dataclass(frozen=True)
class ShareCase:
    name: str
    config: ClusterConfig
    admitted: tuple[Workload, ...]
    node: str  # "cq:<name>" or "cohort:<name>"
    want_weighted: float
    want_resource: str
    extra: dict[tuple[str, str], int] = field(default_factory=dict)


def holding(name: str, cq: str, flavor: str = "f", **requests: float) -> Workload:
    return workload(name).request(**requests).admitted(cq, dict.fromkeys(requests, flavor)).build()


SHARE_CASES = [
    ShareCase(
        "a queue within its nominal quota has a zero share",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=4).build(),
            cluster_queue("b").cohort("c").flavor("f", gpu=4).build(),
        ),
        (holding("w", "a", gpu=4),),
        "cq:a",
        0.0,
        "",
    ),
    ShareCase(
        "the share is what the queue borrows per thousand of what its cohort can lend",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=4).build(),
            cluster_queue("b").cohort("c").flavor("f", gpu=4).build(),
        ),
        (holding("w", "a", gpu=6),),
        "cq:a",
        250.0,
        GPU,
    ),
    ShareCase(
        "a weight of two halves the share",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=4).weight(2).build(),
            cluster_queue("b").cohort("c").flavor("f", gpu=4).build(),
        ),
        (holding("w", "a", gpu=6),),
        "cq:a",
        125.0,
        GPU,
    ),
    ShareCase(
        "a borrowing queue of weight zero has an infinite share",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=4).weight(0).build(),
            cluster_queue("b").cohort("c").flavor("f", gpu=4).build(),
        ),
        (holding("w", "a", gpu=5),),
        "cq:a",
        math.inf,
        GPU,
    ),
    ShareCase(
        "the incoming workload's usage counts in the share",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=4).build(),
            cluster_queue("b").cohort("c").flavor("f", gpu=4).build(),
        ),
        (holding("w", "a", gpu=4),),
        "cq:a",
        500.0,
        GPU,
        {("f", GPU): 4},
    ),
    ShareCase(
        "a lending limit keeps the hidden quota out of what the cohort can lend",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=4).build(),
            cluster_queue("b").cohort("c").flavor("f", gpu=(12, None, 4)).build(),
        ),
        # the cohort holds 4 + 4 = 8; b keeps 8 of its 12 for itself
        (holding("w", "a", gpu=6),),
        "cq:a",
        250.0,
        GPU,
    ),
    ShareCase(
        "flavors of one resource are summed by resource name",
        config(
            cluster_queue("a").cohort("c").flavor("x", gpu=2).flavor("y", gpu=2).build(),
            cluster_queue("b").cohort("c").flavor("x", gpu=2).flavor("y", gpu=2).build(),
        ),
        (holding("wx", "a", "x", gpu=3), holding("wy", "a", "y", gpu=3)),
        "cq:a",
        250.0,  # (1 + 1) borrowed of (4 + 4) lendable
        GPU,
    ),
    ShareCase(
        "the dominant resource has the highest ratio",
        config(
            cluster_queue("a").cohort("c").flavor("f", gpu=4, cpu=10).build(),
            cluster_queue("b").cohort("c").flavor("f", gpu=4, cpu=10).build(),
        ),
        (holding("w", "a", gpu=5, cpu=15),),
        "cq:a",
        250.0,  # cpu 5/20 beats gpu 1/8
        "cpu",
    ),
    ShareCase(
        "a cohort's share is measured against its parent",
        config(
            cluster_queue("a").cohort("left").flavor("f", gpu=2).build(),
            cluster_queue("b").cohort("right").flavor("f", gpu=6).build(),
            cohorts=(cohort("left").parent("root").build(), cohort("right").parent("root").build()),
        ),
        (holding("w", "a", gpu=4),),
        "cohort:left",
        250.0,
        GPU,
    ),
]


@pytest.mark.parametrize("c", SHARE_CASES, ids=[c.name for c in SHARE_CASES])
def test_dominant_share(c: ShareCase) -> None:
    state = scheduler_with(c.config, c.admitted).state
    kind, name = c.node.split(":")
    node = state.tree.cluster_queues[name] if kind == "cq" else state.tree.cohorts[name]
    share = dominant_share(node, weight_of(state, node), c.extra)
    assert (share.weighted, share.resource) == (c.want_weighted, c.want_resource)


# ------------------------------------------------------------------- admission order


@dataclass(frozen=True)
class OrderCase:
    name: str
    config: ClusterConfig
    admitted: tuple[Workload, ...]
    pending: tuple[tuple[Workload, str, dict[tuple[str, str], int]], ...]  # workload, queue, usage
    want: list[str]


def head(name: str, priority: int = 0, created: float = 0.0) -> Workload:
    return workload(name).priority(priority).created(created).request(gpu=1).build()


def flat(*queues: ClusterQueue) -> ClusterConfig:
    return config(*queues, fair_sharing=True)


def gpus(n: int, flavor: str = "f") -> dict[tuple[str, str], int]:
    return {(flavor, GPU): n}


TWO = (
    cluster_queue("a").cohort("c").flavor("f", gpu=4).build(),
    cluster_queue("b").cohort("c").flavor("f", gpu=4).build(),
)

ORDER_CASES = [
    OrderCase(
        "the queue with the lower share after admission goes first",
        flat(*TWO),
        (holding("a0", "a", gpu=5),),
        ((head("wa"), "a", gpus(1)), (head("wb"), "b", gpus(1))),
        ["wb", "wa"],
    ),
    OrderCase(
        "the entry's own size counts: a big request ranks after a small one",
        flat(*TWO),
        (),
        ((head("wa", created=1), "a", gpus(7)), (head("wb", created=2), "b", gpus(5))),
        ["wb", "wa"],
    ),
    OrderCase(
        "a heavier weight goes first at equal usage",
        flat(TWO[0], replace(TWO[1], fair_weight=Fraction(2))),
        (holding("a0", "a", gpu=5), holding("b0", "b", gpu=5)),
        ((head("wa"), "a", gpus(1)), (head("wb"), "b", gpus(1))),
        ["wb", "wa"],
    ),
    OrderCase(
        "equal shares go by higher priority",
        flat(*TWO),
        (),
        (
            (head("wa", priority=1, created=2), "a", gpus(1)),
            (head("wb", priority=5, created=3), "b", gpus(1)),
        ),
        ["wb", "wa"],
    ),
    OrderCase(
        "equal shares and priorities go by creation time",
        flat(*TWO),
        (),
        ((head("wb", created=2), "b", gpus(1)), (head("wa", created=1), "a", gpus(1))),
        ["wa", "wb"],
    ),
    OrderCase(
        "the winner's usage counts before the next pick",
        # a and b share the left cohort: once wa is in, left borrows more, so c's entry beats wb
        config(
            cluster_queue("a").cohort("left").flavor("f", gpu=2).build(),
            cluster_queue("b").cohort("left").flavor("f", gpu=2).build(),
            cluster_queue("c").cohort("right").flavor("f", gpu=4).build(),
            cohorts=(cohort("left").parent("root").build(), cohort("right").parent("root").build()),
            fair_sharing=True,
        ),
        (holding("c0", "c", gpu=4),),
        (
            (head("wa", created=1), "a", gpus(3)),
            (head("wb", created=2), "b", gpus(3)),
            (head("wc", created=3), "c", gpus(1)),
        ),
        ["wa", "wc", "wb"],
    ),
    OrderCase(
        "hierarchical cohorts are compared at the root before their queues",
        config(
            cluster_queue("a").cohort("left").flavor("f", gpu=4).build(),
            cluster_queue("b").cohort("right").flavor("f", gpu=1).build(),
            cluster_queue("c").cohort("right").flavor("f", gpu=1).weight(0.5).build(),
            cohorts=(cohort("left").parent("root").build(), cohort("right").parent("root").build()),
            fair_sharing=True,
        ),
        (holding("a0", "a", gpu=6),),
        ((head("wa"), "a", gpus(1)), (head("wb"), "b", gpus(1)), (head("wc"), "c", gpus(2))),
        ["wb", "wc", "wa"],
    ),
    OrderCase(
        "an entry that needs no borrowing goes before a borrowing one of lower share",
        # a borrows heavily on flavor y but its entry fits its nominal quota on x
        flat(
            cluster_queue("a").cohort("c").flavor("x", gpu=2).flavor("y", gpu=0).build(),
            cluster_queue("b").cohort("c").flavor("x", gpu=0).flavor("y", gpu=6).build(),
        ),
        (holding("ay", "a", "y", gpu=4),),
        ((head("wa", created=2), "a", gpus(1, "x")), (head("wb", created=1), "b", gpus(1, "x"))),
        ["wa", "wb"],
    ),
    OrderCase(
        "without FairSharingPrioritizeNonBorrowing the lower share goes first",
        with_gates(
            flat(
                cluster_queue("a").cohort("c").flavor("x", gpu=2).flavor("y", gpu=0).build(),
                cluster_queue("b").cohort("c").flavor("x", gpu=0).flavor("y", gpu=6).build(),
            ),
            FairSharingPrioritizeNonBorrowing=False,
        ),
        (holding("ay", "a", "y", gpu=4),),
        ((head("wa", created=2), "a", gpus(1, "x")), (head("wb", created=1), "b", gpus(1, "x"))),
        ["wb", "wa"],
    ),
    OrderCase(
        "separate trees and queues without a cohort come in root-name order",
        config(
            cluster_queue("z").flavor("f", gpu=1).build(),
            cluster_queue("m1").cohort("m").flavor("f", gpu=1).build(),
            cluster_queue("a").flavor("f", gpu=1).build(),
            fair_sharing=True,
        ),
        (),
        ((head("wz"), "z", gpus(1)), (head("wm"), "m1", gpus(1)), (head("wa"), "a", gpus(1))),
        ["wa", "wm", "wz"],
    ),
]


def drive(state: ClusterState, entries: Iterable[Entry]) -> list[str]:
    """Consume the order as plan_cycle does: each pick's usage is added before the next pick."""
    added: list[Entry] = []
    try:
        for entry in order_entries(state, list(entries)):
            assert entry.assignment is not None
            state.tree.add(entry.cluster_queue, entry.assignment.usage)
            added.append(entry)
    finally:
        for entry in added:
            assert entry.assignment is not None
            state.tree.remove(entry.cluster_queue, entry.assignment.usage)
    return [e.workload.name for e in added]


@pytest.mark.parametrize("c", ORDER_CASES, ids=[c.name for c in ORDER_CASES])
def test_order_entries(c: OrderCase) -> None:
    state = scheduler_with(c.config, c.admitted).state
    before = usage_snapshot(state)
    entries = [Entry(w, cq, Assignment(usage=dict(usage))) for w, cq, usage in c.pending]
    assert drive(state, entries) == c.want
    assert usage_snapshot(state) == before


# ------------------------------------------------------------------ preemption


@dataclass(frozen=True)
class PreemptCase:
    name: str
    config: ClusterConfig
    admitted: tuple[Workload, ...]
    incoming: Workload
    cq: str
    want: dict[str, str]  # victim name -> reason
    flavor: str = "default"


def cq3(name: str, cpu: float = 3, weight: float | Fraction = 1) -> ClusterQueue:
    """Kueue's baseCQs member: borrowWithinCohort is set, and ignored under fair sharing."""
    return (
        cluster_queue(name)
        .cohort("all")
        .flavor("default", cpu=cpu)
        .preemption(LOWER, ANY, borrow_within_cohort=LOWER, max_priority_threshold=-3)
        .weight(weight)
        .build()
    )


BASE = (
    cq3("a"),
    cq3("b"),
    cq3("c"),
    cluster_queue("preemptible").cohort("all").flavor("default", cpu=0).build(),
)


def fs(
    *queues: ClusterQueue,
    cohorts: tuple[Cohort, ...] = (),
    strategies: tuple[FairSharingStrategy, ...] | None = None,
) -> ClusterConfig:
    return config(*queues, cohorts=cohorts, fair_sharing=True, strategies=strategies)


def on(cq: str, name: str, cpu: float = 1, priority: int = 0, flavor: str = "default") -> Workload:
    return workload(name).priority(priority).request(cpu=cpu).admitted(cq, {"cpu": flavor}).build()


def wls(*workloads: Workload) -> tuple[Workload, ...]:
    return workloads


def units(cq: str, *names: str) -> tuple[Workload, ...]:
    return tuple(on(cq, n) for n in names)


def incoming(cpu: float = 1, priority: int = 0) -> Workload:
    return workload("incoming").priority(priority).request(cpu=cpu).build()


def plain(
    name: str,
    cohort_name: str,
    cpu: float,
    weight: float | Fraction = 1,
    reclaim: PreemptionPolicy = NEVER,
    within: PreemptionPolicy = NEVER,
) -> ClusterQueue:
    return (
        cluster_queue(name)
        .cohort(cohort_name)
        .flavor("default", cpu=cpu)
        .preemption(within, reclaim)
        .weight(Fraction(weight))
        .build()
    )


PREEMPT_CASES = [
    PreemptCase(
        "reclaim nominal from user using the most",
        fs(*BASE),
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3", "b4", "b5") + units("c", "c1"),
        incoming(),
        "c",
        {"b1": RECLAIM},
    ),
    PreemptCase(
        "can reclaim from queue using less, "
        "if taking the latest workload from user using the most isn't enough",
        fs(*BASE),
        (on("a", "a1", 3), on("a", "a2", 1), on("b", "b1", 2), on("b", "b2", 3)),
        incoming(3),
        "c",
        {"a1": RECLAIM},
    ),
    PreemptCase(
        "reclaim borrowable quota from user using the most",
        fs(*BASE),
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3", "b4", "b5") + units("c", "c1"),
        incoming(),
        "a",
        {"b1": FAIR},
    ),
    PreemptCase(
        "preempt one from each CQ borrowing",
        fs(*BASE),
        wls(on("a", "a1", 0.5), on("a", "a2", 0.5), on("a", "a3", 3))
        + wls(on("b", "b1", 0.5), on("b", "b2", 0.5), on("b", "b3", 3)),
        incoming(2),
        "c",
        {"a1": RECLAIM, "b1": RECLAIM},
    ),
    PreemptCase(
        "can't preempt when everyone under nominal",
        fs(*BASE),
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3") + units("c", "c1", "c2", "c3"),
        incoming(),
        "c",
        {},
    ),
    PreemptCase(
        "can't preempt when it would switch the imbalance",
        fs(*BASE),
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3", "b4", "b5"),
        incoming(2),
        "a",
        {},
    ),
    PreemptCase(
        "can preempt lower priority workloads from same CQ",
        fs(*BASE),
        wls(on("a", "a1_low", priority=-1), on("a", "a2_low", priority=-1))
        + units("a", "a3", "a4")
        + units("b", "b1", "b2", "b3", "b4", "b5"),
        incoming(2),
        "a",
        {"a1_low": IN_CQ, "a2_low": IN_CQ},
    ),
    PreemptCase(
        "can preempt a combination of same CQ and highest user",
        fs(*BASE),
        wls(on("a", "a_low", priority=-1))
        + units("a", "a2", "a3")
        + units("b", "b1", "b2", "b3", "b4", "b5", "b6"),
        incoming(2),
        "a",
        {"a_low": IN_CQ, "b1": FAIR},
    ),
    PreemptCase(
        "preempt huge workload if there is no other option, as long as the target CQ gets a lower share",
        fs(*BASE),
        (on("b", "b1", 9),),
        incoming(2),
        "a",
        {"b1": RECLAIM},
    ),
    PreemptCase(
        "can't preempt huge workload if the incoming is also huge",
        fs(*BASE),
        (on("a", "a1", 2), on("b", "b1", 7)),
        incoming(5),
        "a",
        {},
    ),
    PreemptCase(
        "can't preempt 2 smaller workloads if the incoming is huge",
        fs(*BASE),
        (on("b", "b1", 2), on("b", "b2", 2), on("b", "b3", 3)),
        incoming(6),
        "a",
        {},
    ),
    PreemptCase(
        "preempt from target and others even if over nominal",
        fs(*BASE),
        (on("a", "a1_low", 2, -1), on("a", "a2_low", 1, -1), on("b", "b1", 3), on("b", "b2", 3)),
        incoming(4),
        "a",
        {"a1_low": IN_CQ, "b1": FAIR},
    ),
    PreemptCase(
        "prefer to preempt workloads that don't make the target CQ have the biggest share",
        fs(*BASE),
        (on("b", "b1", 2), on("b", "b2", 1), on("b", "b3", 2), on("c", "c1", 1)),
        incoming(3.5),
        "a",
        {"b2": FAIR},
    ),
    PreemptCase(
        "preempt from different cluster queues if the end result has a smaller max share",
        fs(*BASE),
        (on("b", "b1", 2), on("b", "b2", 2.5), on("c", "c1", 2), on("c", "c2", 2.5)),
        incoming(3.5),
        "a",
        {"b1": FAIR, "c1": FAIR},
    ),
    PreemptCase(
        "no ping-pong: the preempted workload cannot preempt back",
        # the state right after the case above, with b1 coming back
        fs(*BASE),
        (on("a", "a1", 3.5), on("b", "b2", 2.5), on("c", "c2", 2.5)),
        incoming(2),
        "b",
        {},
    ),
    PreemptCase(
        "cannot preempt if it would make the candidate CQ go under nominal after preempting one element",
        fs(*BASE),
        (on("b", "b1", 3), on("b", "b2", 3), on("c", "c1", 3)),
        incoming(4),
        "a",
        {},
    ),
    PreemptCase(
        "workloads under priority threshold not capriciously preempted",
        fs(*BASE),
        units("a", "a1", "a2", "a3")
        + units("b", "b1", "b2", "b3")
        + tuple(on("preemptible", f"preemptible{i}", priority=-3) for i in (1, 2, 3)),
        incoming(2),
        "a",
        {},
    ),
    PreemptCase(
        "S2-b alone preempts lower priority first, even if big",
        fs(*BASE, strategies=(S2B,)),
        (on("a", "a1", 3), on("b", "b_low", 5, 0), on("b", "b_high", 1, 1)),
        incoming(1),
        "a",
        {"b_low": FAIR},
    ),
    PreemptCase(
        "S2-a alone preempts the workload that doesn't transfer the imbalance, even if high priority",
        fs(*BASE, strategies=(S2A,)),
        (on("a", "a1", 3), on("b", "b_low", 5, 0), on("b", "b_high", 1, 1)),
        incoming(1),
        "a",
        {"b_high": FAIR},
    ),
    PreemptCase(
        "S2-a alone refuses a preemption that would reverse the imbalance",
        fs(*BASE, strategies=(S2A,)),
        (on("a", "a1", 3), on("b", "b1", 6)),
        incoming(1),
        "a",
        {},
    ),
    PreemptCase(
        "S2-b after S2-a takes the refused workload from the retry list",
        fs(*BASE, strategies=(S2A, S2B)),
        (on("a", "a1", 3), on("b", "b1", 6)),
        incoming(1),
        "a",
        {"b1": FAIR},
    ),
    PreemptCase(
        "CQ with higher weight can preempt more",
        fs(
            plain("a", "all", 3, 2, ANY, LOWER),
            plain("b", "all", 3, 1, ANY, LOWER),
            plain("c", "all", 3, 1, ANY, LOWER),
        ),
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3", "b4", "b5", "b6"),
        incoming(2),
        "a",
        {"b1": FAIR, "b2": FAIR},
    ),
    PreemptCase(
        "can preempt anything borrowing from CQ with 0 weight",
        fs(
            plain("a", "all", 3, 1, ANY, LOWER),
            plain("b", "all", 3, 0, ANY, LOWER),
            plain("c", "all", 3, 1, ANY, LOWER),
        ),
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3", "b4", "b5", "b6"),
        incoming(3),
        "a",
        {"b1": FAIR, "b2": FAIR, "b3": FAIR},
    ),
    PreemptCase(
        "can't preempt nominal from CQ with 0 weight",
        fs(plain("a", "all", 3, 1, ANY, LOWER), plain("b", "all", 3, 0, ANY, LOWER)),
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3"),
        incoming(),
        "a",
        {},
    ),
    PreemptCase(
        "can't preempt nominal from Cohort with 0 weight",
        fs(
            plain("left-cq", "root", 0, 1, ANY),
            plain("right-cq", "right-cohort", 0, 0, ANY),
            cohorts=(cohort("right-cohort").parent("root").weight(0).flavor("default", cpu=1).build(),),
        ),
        (on("right-cq", "right-1"),),
        workload("left-1").request(cpu=1).build(),
        "left-cq",
        {},
    ),
    PreemptCase(
        "can preempt within cluster queue when no cohort",
        fs(cluster_queue("a").flavor("default", cpu=1).preemption(LOWER).build()),
        (on("a", "a1"),),
        incoming(priority=1000),
        "a",
        {"a1": IN_CQ},
    ),
    PreemptCase(
        "a zero-weight preemptor that would borrow can't beat a finite share",
        fs(plain("a", "all", 3, 0, ANY, LOWER), plain("b", "all", 3, 1, ANY, LOWER)),
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2"),
        incoming(),
        "a",
        {},
    ),
    PreemptCase(
        "hierarchical preemption",
        # ROOT(5) > LEFT(5, w2) > a(1, w2), b(1); ROOT > c(1); ROOT > RIGHT(5) > d(1), e(1, w0.99)
        fs(
            plain("a", "LEFT", 1, 2, ANY),
            plain("b", "LEFT", 1),
            plain("c", "ROOT", 1),
            plain("d", "RIGHT", 1),
            plain("e", "RIGHT", 1, Fraction("0.99")),
            cohorts=(
                cohort("ROOT").flavor("default", cpu=5).build(),
                cohort("LEFT").parent("ROOT").weight(2).flavor("default", cpu=5).build(),
                cohort("RIGHT").parent("ROOT").flavor("default", cpu=5).build(),
            ),
        ),
        tuple(on(q, f"{q}{p}", priority=p) for q in "bcde" for p in range(1, 6)),
        incoming(5),
        "a",
        {"b1": FAIR, "b2": FAIR, "c1": FAIR, "c2": FAIR, "e1": FAIR},
    ),
    PreemptCase(
        "borrowing cq in non-borrowing cohort is protected",
        fs(
            plain("a", "ROOT", 5, 10, ANY, LOWER),
            cluster_queue("b").cohort("RIGHT").weight(Fraction("0.1")).build(),
            cohorts=(
                cohort("ROOT").build(),
                cohort("RIGHT").parent("ROOT").weight(Fraction("0.1")).flavor("default", cpu=1).build(),
            ),
        ),
        wls(*(on("a", f"a{i}", priority=-1) for i in (1, 2, 3)), on("b", "b1", priority=-1)),
        incoming(5),
        "a",
        {"a1": IN_CQ, "a2": IN_CQ, "a3": IN_CQ},
    ),
    PreemptCase(
        "forced to preempt within clusterqueue because borrowing workload too important",
        fs(
            plain("a", "ROOT", 5, 10, LOWER, LOWER),
            cluster_queue("b").cohort("RIGHT").weight(Fraction("0.1")).build(),
            cohorts=(
                cohort("ROOT").build(),
                cohort("RIGHT").parent("ROOT").weight(Fraction("0.1")).flavor("default", cpu=3).build(),
            ),
        ),
        wls(*(on("a", f"a{i}", priority=-1) for i in (1, 2, 3)), on("b", "b1", 4, 100)),
        incoming(4),
        "a",
        {"a1": IN_CQ, "a2": IN_CQ, "a3": IN_CQ},
    ),
    PreemptCase(
        "deep preemption compares the almost-LCA cohorts",
        fs(
            plain("a", "AAA", 0, 1, ANY),
            plain("b", "BBB", 0),
            cohorts=(
                cohort("ROOT").build(),
                cohort("A").parent("ROOT").weight(Fraction("1.01")).build(),
                cohort("AA").parent("A").build(),
                cohort("AAA").parent("AA").build(),
                cohort("B").parent("ROOT").weight(Fraction("0.99")).build(),
                cohort("BB").parent("B").build(),
                cohort("BBB").parent("BB").build(),
                cohort("C").parent("ROOT").build(),
                cohort("CC").parent("C").build(),
                cohort("CCC").parent("CC").build(),
                cohort("CCCC").parent("CCC").flavor("default", cpu=1).build(),
            ),
        ),
        (on("b", "b1"),),
        incoming(),
        "a",
        {"b1": FAIR},
    ),
    PreemptCase(
        "cq with zero weight can reclaim nominal quota",
        fs(plain("a", "ROOT", 1, 0, ANY), plain("b", "ROOT", 0)),
        (on("b", "b1"),),
        incoming(),
        "a",
        {"b1": RECLAIM},
    ),
    PreemptCase(
        "cohort with zero weight can reclaim nominal quota",
        fs(
            plain("a", "A", 0, 0, ANY),
            plain("b", "ROOT", 0),
            cohorts=(cohort("A").parent("ROOT").weight(0).flavor("default", cpu=1).build(),),
        ),
        (on("b", "b1"),),
        incoming(),
        "a",
        {"b1": FAIR},
    ),
    PreemptCase(
        "nominal first: workload fitting within nominal can preempt despite high aggregate DRS",
        fs(
            cluster_queue("a")
            .cohort("all")
            .flavor("premium", cpu=3)
            .flavor("cheap", cpu=0)
            .preemption(reclaim=ANY)
            .build(),
            cluster_queue("b").cohort("all").flavor("premium", cpu=0).flavor("cheap", cpu=6).build(),
        ),
        wls(
            on("a", "a_prem1", flavor="premium"),
            on("a", "a_prem2", flavor="premium"),
            *(on("a", f"a_cheap{i}", flavor="cheap") for i in range(1, 6)),
            on("b", "b_prem1", flavor="premium"),
        ),
        incoming(),
        "a",
        {"b_prem1": RECLAIM},
        flavor="premium",
    ),
    PreemptCase(
        "without FairSharingPreemptWithinNominal reclaiming nominal quota goes through the share test",
        with_gates(fs(*BASE), FairSharingPreemptWithinNominal=False),
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3", "b4", "b5") + units("c", "c1"),
        incoming(),
        "c",
        {"b1": FAIR},
    ),
]


def preemptor_for(c: PreemptCase) -> Preemptor:
    fr = (c.flavor, "cpu")
    amount = sum(ps.requests.get("cpu", 0) * ps.count for ps in c.incoming.pod_sets)
    return Preemptor(c.incoming, c.cq, {fr: amount}, frozenset({fr}))


@pytest.mark.parametrize("c", PREEMPT_CASES, ids=[c.name for c in PREEMPT_CASES])
def test_fair_targets(c: PreemptCase) -> None:
    state = scheduler_with(c.config, c.admitted).state
    before = usage_snapshot(state)
    targets = fair_targets(state, preemptor_for(c), c.config.scheduler.fair_sharing)
    assert {t.victim.workload.name: t.reason for t in targets} == c.want
    assert usage_snapshot(state) == before, "the state was modified"


# ------------------------------------------------------------------ end to end (run_cycles)

END_TO_END = [
    case(
        "with fair sharing the queue with the lower share is admitted when only one fits",
        flat(*TWO),
        holding("a0", "a", gpu=5),
        holding("b0", "b", gpu=2),
        workload("wa").queue("a").created(1).request(gpu=1).build(),
        workload("wb").queue("b").created(2).request(gpu=1).build(),
        admitted={"wb": "f"},
        pending={"wa": "no longer fits"},
    ),
    case(
        "a queue reclaiming its nominal quota preempts the heaviest borrower, then is admitted",
        fs(*BASE),
        *units("a", "a1", "a2", "a3"),
        *units("b", "b1", "b2", "b3", "b4", "b5"),
        *units("c", "c1"),
        workload("c_incoming").queue("c").request(cpu=1).build(),
        admitted={"c_incoming": "default"},
        preempted={"b1": RECLAIM},
        pending={"b1": "no workload can be preempted"},
        cycles=None,
    ),
    case(
        "workloads reclaimed from a borrower do not preempt back once requeued",
        fs(*BASE),
        *units("b", *(f"b{i}" for i in range(1, 10))),
        workload("a1").queue("a").request(cpu=1).build(),
        workload("a2").queue("a").created(1).request(cpu=1).build(),
        workload("a3").queue("a").created(2).request(cpu=1).build(),
        admitted={"a1": "default", "a2": "default", "a3": "default"},
        preempted={"b1": RECLAIM, "b2": RECLAIM, "b3": RECLAIM},
        pending={
            "b1": "no workload can be preempted",
            "b2": "same shape as default/b1",
            "b3": "same shape as default/b1",
        },
        cycles=None,
    ),
]

PREEMPTOR_AT_NOMINAL = case(
    "a borrowing queue preempts from the queue with the highest share (InCohortFairSharing)",
    fs(*BASE),
    *units("a", "a1", "a2", "a3"),
    *units("b", "b1", "b2", "b3", "b4", "b5"),
    *units("c", "c1"),
    workload("a_incoming").queue("a").request(cpu=1).build(),
    preempted={"b1": FAIR},
    pending={"a_incoming": "Waiting for preempted workloads"},
)
END_TO_END_PARAMS = [pytest.param(c, id=c.name) for c in [*END_TO_END, PREEMPTOR_AT_NOMINAL]]


@pytest.mark.parametrize("c", END_TO_END_PARAMS)
def test_end_to_end(c: Case) -> None:
    assert run_case(c) == c.want
