"""Fair share from usage history (``gpuq.dev/usage-half-life`` on a root cohort): the decayed
integral of each ClusterQueue's usage, the share it gives, and the tournament order it changes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction

import pytest

from builders import GPU, cluster_queue, config, workload
from core.test_fairshare import drive
from gpuq.core.flavors import Assignment
from gpuq.core.model import ClusterConfig, Cohort
from gpuq.core.nomination import Entry
from gpuq.core.state import AdmittedWorkload, ClusterState
from gpuq.core.usage_history import QueueHistory, decay, share
from gpuq.sim.scenario import with_usage_half_life

H = 3600.0
TAU = H / math.log(2)  # the decayed length of the whole past for a half-life of one hour


@dataclass(frozen=True)
class HistoryCase:
    name: str
    changes: tuple[tuple[float, int, int], ...]  # (time, sign, gpus)
    at: float
    want_gpu_seconds: float


HISTORY_CASES = [
    HistoryCase("nothing used", (), 5 * H, 0.0),
    HistoryCase(
        "one half-life of 4 GPUs from nothing holds half the full past", ((0, 1, 4),), H, 4 * TAU / 2
    ),
    HistoryCase("usage held for ever tends to the full past", ((0, 1, 4),), 60 * H, 4 * TAU),
    HistoryCase("released usage halves every half-life", ((0, 1, 4), (H, -1, 4)), 3 * H, 4 * TAU / 2 / 4),
    HistoryCase(
        "two holders add up",
        ((0, 1, 2), (0, 1, 2)),
        H,
        4 * TAU / 2,
    ),
    HistoryCase(
        "a change recorded late never rewinds the integral",
        ((2 * H, 1, 4), (H, -1, 4)),
        2 * H,
        0.0,
    ),
]


@pytest.mark.parametrize("c", HISTORY_CASES, ids=[c.name for c in HISTORY_CASES])
def test_decayed_usage(c: HistoryCase) -> None:
    history = QueueHistory(H)
    for at, sign, amount in c.changes:
        history.change({("f", GPU): amount}, sign, at)
    assert history.value(c.at).get(GPU, 0.0) == pytest.approx(c.want_gpu_seconds, abs=1e-6)


def test_decay_is_one_half_per_half_life() -> None:
    assert decay(0, H) == 1.0
    assert decay(H, H) == pytest.approx(0.5)
    assert decay(-5, H) == 1.0


@dataclass(frozen=True)
class ShareCase:
    name: str
    used: dict[str, float]
    nominal: dict[str, int]
    want: float
    weight: Fraction = Fraction(1)


SHARE_CASES = [
    ShareCase("no usage is a zero share", {}, {GPU: 4}, 0.0),
    ShareCase("its nominal quota all the time is a share of 1", {GPU: 4 * TAU}, {GPU: 4}, 1.0),
    ShareCase("the dominant resource counts", {GPU: 2 * TAU, "cpu": 4 * TAU}, {GPU: 4, "cpu": 4}, 1.0),
    ShareCase("a weight of 2 halves the share", {GPU: 4 * TAU}, {GPU: 4}, 0.5, Fraction(2)),
    ShareCase("usage without quota ranks last", {GPU: 1.0}, {GPU: 0}, math.inf),
    ShareCase("usage with weight 0 ranks last", {GPU: 1.0}, {GPU: 4}, math.inf, Fraction(0)),
]


@pytest.mark.parametrize("c", SHARE_CASES, ids=[c.name for c in SHARE_CASES])
def test_share(c: ShareCase) -> None:
    assert share(c.used, c.nominal, H, c.weight) == pytest.approx(c.want)


# ---------------------------------------------------------------- the tournament


def two_teams(half_life: float | None, weight_b: float = 1) -> ClusterConfig:
    return config(
        cluster_queue("night").cohort("all").flavor("f", gpu=4).build(),
        cluster_queue("day").cohort("all").flavor("f", gpu=4).weight(weight_b).build(),
        cohorts=(Cohort("all", usage_half_life_s=half_life),),
        fair_sharing=True,
    )


@dataclass(frozen=True)
class OrderCase:
    name: str
    config: ClusterConfig
    held: tuple[tuple[str, float, float], ...]  # (queue, from, to): 4 GPUs each
    now: float
    want: list[str]
    created: dict[str, float] = field(default_factory=lambda: {"from-night": 0.0, "from-day": 1.0})


ORDER_CASES = [
    OrderCase(
        "without a half-life Kueue's order: equal shares, the earlier workload first",
        two_teams(None),
        (("night", 0, 8 * H),),
        8 * H,
        ["from-night", "from-day"],
    ),
    OrderCase(
        "the team that used the cluster all night yields in the morning",
        two_teams(H),
        (("night", 0, 8 * H),),
        8 * H,
        ["from-day", "from-night"],
    ),
    OrderCase(
        "usage long past has decayed: Kueue's order again",
        two_teams(H),
        (("night", 0, H), ("day", 0, H)),
        40 * H,
        ["from-night", "from-day"],
    ),
    OrderCase(
        "recent usage weighs more than older usage of the same amount",
        two_teams(H),
        (("night", 0, H), ("day", 6 * H, 7 * H)),
        8 * H,
        ["from-night", "from-day"],
        {"from-night": 1.0, "from-day": 0.0},
    ),
    OrderCase(
        "a weight of 4 lets a team use more before it yields",
        two_teams(H, weight_b=4),
        (("night", 0, 8 * H), ("day", 0, 8 * H)),
        9 * H,
        ["from-day", "from-night"],
        {"from-night": 0.0, "from-day": 1.0},
    ),
]


@pytest.mark.parametrize("c", ORDER_CASES, ids=[c.name for c in ORDER_CASES])
def test_tournament_order(c: OrderCase) -> None:
    state = ClusterState(c.config)
    for i, (queue, start, end) in enumerate(c.held):
        held = workload(f"held-{i}").request(gpu=4).admitted(queue, {GPU: "f"}).build()
        state.reserve(AdmittedWorkload(held, queue, {("f", GPU): 4}, start))
        if end <= c.now:
            state.release(held.key, end)
    state.now = c.now
    entries = [
        Entry(
            workload(name).created(c.created[name]).request(gpu=1).build(),
            queue,
            Assignment(usage={("f", GPU): 1}),
        )
        for name, queue in (("from-night", "night"), ("from-day", "day"))
    ]
    assert drive(state, entries) == c.want


def test_a_queue_outside_any_half_life_tree_keeps_no_history() -> None:
    state = ClusterState(replace(two_teams(None)))
    assert state.history == {}
    assert set(ClusterState(two_teams(H)).history) == {"night", "day"}


@pytest.mark.parametrize(
    ("cohorts", "queue_cohort", "want"),
    [
        ((), "all", {"all": H}),
        ((Cohort("all"),), "all", {"all": H}),
        ((Cohort("team", parent="org"), Cohort("org")), "team", {"team": None, "org": H}),
    ],
    ids=["a cohort only named by its queues", "a root Cohort", "only the root of a nested tree"],
)
def test_scenario_half_life_reaches_every_root(
    cohorts: tuple[Cohort, ...], queue_cohort: str, want: dict[str, float | None]
) -> None:
    cfg = config(cluster_queue("q").cohort(queue_cohort).flavor("f", gpu=1).build(), cohorts=cohorts)
    got = with_usage_half_life(cfg, H)
    assert {n: c.usage_half_life_s for n, c in got.cohorts.items()} == want
    assert set(ClusterState(got).history) == {"q"}
