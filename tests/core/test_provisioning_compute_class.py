"""ComputeClass decisions: rule order, priorityScore tiers, stock-outs, whenUnsatisfiable, migration."""

from __future__ import annotations

import pytest

from gpuq.core.provisioning.compute_class import ComputeClassPolicy, Rule, choose, should_migrate
from gpuq.core.provisioning.options import GPU, MachineOption, PodGroup, PodShape, Stock
from gpuq.core.provisioning.presets import expand
from gpuq.core.provisioning.prices import PriceCatalogue, PriceEntry

H100 = "nvidia-h100-80gb"
A100 = "nvidia-a100-80gb"
L4 = "nvidia-l4"


def option(
    machine: str, capacity: str = "on-demand", zone: str = "z1", gpu: str = H100, count: int = 8
) -> MachineOption:
    return MachineOption(machine, zone, capacity, cores=96, memory_gb=1024, gpu_type=gpu, gpu_count=count)  # type: ignore[arg-type]


A3 = option("a3-highgpu-8g")
A3_SPOT = option("a3-highgpu-8g", "spot")
A3_SPOT_Z2 = option("a3-highgpu-8g", "spot", zone="z2")
A2 = option("a2-ultragpu-8g", gpu=A100)
A2_SPOT = option("a2-ultragpu-8g", "spot", gpu=A100)
G2 = option("g2-standard-48", gpu=L4, count=4)
OPTIONS = (A3, A3_SPOT, A3_SPOT_Z2, A2, A2_SPOT, G2)
PRICES = PriceCatalogue(
    {
        "a3-highgpu-8g": PriceEntry("a3-highgpu-8g", on_demand=88.0, spot=35.0),
        "a2-ultragpu-8g": PriceEntry("a2-ultragpu-8g", on_demand=40.0, spot=16.0),
        "g2-standard-48": PriceEntry("g2-standard-48", on_demand=4.0, spot=1.6),
    }
)
GANG = PodGroup("train", pods=2, shape=PodShape({GPU: 8}), all_or_nothing=True)
SMALL = PodGroup("serve", pods=1, shape=PodShape({GPU: 4}))


def policy(
    *rules: Rule, when: str = "DoNotScaleUp", migrate: bool = False, strategy: str | None = None
) -> ComputeClassPolicy:
    return ComputeClassPolicy("c", rules, when, migrate, strategy)  # type: ignore[arg-type]


def chosen(
    decision_policy: ComputeClassPolicy, group: PodGroup = GANG, stock: Stock | None = None
) -> tuple[str, str, str, int] | None:
    decision = choose(decision_policy, group, OPTIONS, stock or Stock(), PRICES)
    if decision.choice is None:
        return None
    o = decision.choice.option
    return (o.machine_type, o.capacity_type, o.zone, decision.choice.nodes)


CASES = [
    (
        "rules are tried top to bottom: the first satisfiable one wins",
        policy(Rule(machine_type="a3-highgpu-8g", spot=True), Rule(machine_type="a3-highgpu-8g")),
        Stock(),
        ("a3-highgpu-8g", "spot", "z1", 2),
    ),
    (
        "a stock-out of the first rule falls back to the next",
        policy(Rule(machine_type="a3-highgpu-8g", spot=True), Rule(machine_family="a2")),
        Stock({("a3-highgpu-8g", "z1", "spot"): 0, ("a3-highgpu-8g", "z2", "spot"): 1}),
        ("a2-ultragpu-8g", "on-demand", "z1", 2),
    ),
    (
        "a gang takes all its nodes from one zone that has them",
        policy(Rule(machine_type="a3-highgpu-8g", spot=True)),
        Stock({("a3-highgpu-8g", "z1", "spot"): 1, ("a3-highgpu-8g", "z2", "spot"): 2}),
        ("a3-highgpu-8g", "spot", "z2", 2),
    ),
    (
        "the highest priorityScore wins over written order",
        policy(
            Rule(machine_family="a2", priority_score=10),
            Rule(machine_family="a3", spot=True, priority_score=50),
        ),
        Stock(),
        ("a3-highgpu-8g", "spot", "z1", 2),
    ),
    (
        "rules sharing a priorityScore are one tier: the cheapest of equal fit wins",
        policy(Rule(machine_family="a3", priority_score=20), Rule(machine_family="a2", priority_score=20)),
        Stock(),
        ("a2-ultragpu-8g", "on-demand", "z1", 2),
    ),
    (
        "a lower tier is used only when the higher one is out of stock",
        policy(Rule(machine_family="a3", priority_score=30), Rule(machine_family="a2", priority_score=20)),
        Stock({("a3-highgpu-8g", "z1", "on-demand"): 1}),
        ("a2-ultragpu-8g", "on-demand", "z1", 2),
    ),
    (
        "reservations Specific takes only the named reservation",
        policy(Rule(reservation_affinity="Specific", reservations=("res-a",)), Rule(machine_family="a2")),
        Stock(),
        ("a2-ultragpu-8g", "on-demand", "z1", 2),
    ),
    (
        "zones restrict a rule",
        policy(Rule(machine_type="a3-highgpu-8g", spot=True, zones=("z2",))),
        Stock(),
        ("a3-highgpu-8g", "spot", "z2", 2),
    ),
    (
        "DoNotScaleUp leaves the group pending when no rule is satisfiable",
        policy(Rule(machine_type="a3-highgpu-8g", flex_start=True)),
        Stock(),
        None,
    ),
    (
        "ScaleUpAnyway provisions outside the rules, by fit then price",
        policy(Rule(machine_type="a3-highgpu-8g", flex_start=True), when="ScaleUpAnyway"),
        Stock(),
        ("a2-ultragpu-8g", "spot", "z1", 2),
    ),
]


@pytest.mark.parametrize(("name", "class_policy", "stock", "expected"), CASES, ids=[c[0] for c in CASES])
def test_choose(name: str, class_policy: ComputeClassPolicy, stock: Stock, expected: object) -> None:
    assert chosen(class_policy, stock=stock) == expected


def test_best_fit_before_price_for_a_small_group() -> None:
    any_gpu = policy(Rule(priority_score=5), Rule(machine_family="g2", priority_score=5))
    assert chosen(any_gpu, SMALL) == ("g2-standard-48", "on-demand", "z1", 1)


def test_a_non_gang_group_takes_what_is_in_stock_and_says_so() -> None:
    group = PodGroup("batch", pods=3, shape=PodShape({GPU: 8}))
    decision = choose(
        policy(Rule(machine_family="a2")),
        group,
        OPTIONS,
        Stock({("a2-ultragpu-8g", "z1", "on-demand"): 2}),
        PRICES,
    )
    assert decision.choice is not None and (decision.choice.nodes, decision.choice.pods_placed) == (2, 2)
    assert "2 of 3 pods" in decision.reason


def test_every_decision_says_why_each_rule_failed() -> None:
    decision = choose(
        policy(Rule(machine_type="a3-highgpu-8g", spot=True), Rule(machine_type="n2-standard-8")),
        GANG,
        OPTIONS,
        Stock({("a3-highgpu-8g", "z1", "spot"): 0, ("a3-highgpu-8g", "z2", "spot"): 0}),
        PRICES,
    )
    assert decision.choice is None
    assert [o.status for o in decision.outcomes] == ["stock-out", "no-match"]
    assert "0 of 2 nodes in stock" in decision.reason and "DoNotScaleUp" in decision.reason


MIGRATION = [
    ("migrates back when the preferred rule has stock again", True, 1, Stock(), (True, 0)),
    (
        "stays when the preferred rule is still out of stock",
        True,
        1,
        Stock({("a3-highgpu-8g", "z1", "spot"): 0, ("a3-highgpu-8g", "z2", "spot"): 0}),
        (False, None),
    ),
    ("never migrates with activeMigration off", False, 1, Stock(), (False, None)),
    ("never migrates from the best rule", True, 0, Stock(), (False, None)),
]


@pytest.mark.parametrize(
    ("name", "enabled", "current", "stock", "expected"), MIGRATION, ids=[c[0] for c in MIGRATION]
)
def test_should_migrate(
    name: str, enabled: bool, current: int, stock: Stock, expected: tuple[bool, int | None]
) -> None:
    rules = policy(Rule(machine_type="a3-highgpu-8g", spot=True), Rule(machine_family="a2"), migrate=enabled)
    decision = should_migrate(rules, current, GANG, OPTIONS, stock, PRICES)
    assert (decision.migrate, decision.target.rule_index if decision.target else None) == expected
    assert decision.reason


PRESETS = [
    (
        "obtainability",
        [
            "a2-ultragpu-8g/spot",
            "a3-highgpu-8g/spot",
            "g2-standard-48/on-demand",
            "a2-ultragpu-8g/on-demand",
            "a3-highgpu-8g/on-demand",
        ],
    ),
    (
        "cost",
        [
            "g2-standard-48/on-demand",
            "a2-ultragpu-8g/spot",
            "a3-highgpu-8g/spot",
            "a2-ultragpu-8g/on-demand",
            "a3-highgpu-8g/on-demand",
        ],
    ),
    ("performance", ["a3-highgpu-8g/on-demand", "a2-ultragpu-8g/on-demand", "g2-standard-48/on-demand"]),
]


@pytest.mark.parametrize(("strategy", "expected"), PRESETS, ids=[p[0] for p in PRESETS])
def test_presets_expand_to_ordered_rules(strategy: str, expected: list[str]) -> None:
    rules = expand(strategy, OPTIONS, PRICES)  # type: ignore[arg-type]
    assert [f"{r.machine_type}/{'spot' if r.spot else 'on-demand'}" for r in rules] == expected


def test_cost_strategy_breaks_ties_by_price_first() -> None:
    tie = policy(
        Rule(machine_family="a3", spot=True, priority_score=9),
        Rule(machine_family="a2", priority_score=9),
        strategy="cost",
    )
    assert chosen(tie) == ("a3-highgpu-8g", "spot", "z1", 2)  # 2 x $35 beats 2 x $40
