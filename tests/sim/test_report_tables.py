"""The report's tables of who waited and why, deadlines and cost by window, and the cost trade-off
told by its parts (gpuq.sim.report_tables, gpuq.sim.tradeoffs), from hand-built metrics."""

from __future__ import annotations

from typing import Any

import pytest

from gpuq.sim.report import render_report
from gpuq.sim.report_tables import deadline_tables, waits_tables, window_cost_tables, window_text
from gpuq.sim.tradeoffs import trade_offs


def group(capacity: str, model: str, paid: float, idle: float) -> dict[str, Any]:
    return {
        "flavor": "",
        "pool": "",
        "capacity_type": capacity,
        "gpu_model": model,
        "paid": paid,
        "idle": idle,
    }


def variant(name: str, groups: list[dict[str, Any]], *, priced: bool = True) -> dict[str, Any]:
    total = sum(g["paid"] for g in groups)
    idle = sum(g["idle"] for g in groups)
    cost = {
        "total": total,
        "used": total - idle,
        "idle": idle,
        "by_team": {"a": total - idle},
        "by_group": groups,
    }
    return {
        "name": name,
        "cost": {"currency": "USD", "priced": priced, "total": total},
        "windows": {
            "arrival": {"start_s": 60.0, "end_s": 3660.0, "gpu_allocation": 0.5, "cost": cost},
            "drain": {"start_s": 3660.0, "end_s": 7260.0, "cost": {"total": 1.0, "used": 0.0, "idle": 1.0}},
        },
    }


BASE = variant("a", [group("on-demand", "H100", 1000.0, 100.0), group("reserved", "A100", 500.0, 200.0)])
COST_CASES = [
    (
        "more on-demand paid and less reserved idle: the change told by its parts",
        variant("b", [group("on-demand", "H100", 1410.0, 100.0), group("reserved", "A100", 500.0, 89.0)]),
        "cost total 1,500 → 1,910 USD over the arrival window "
        "(+410: on-demand H100 +410, reserved A100 idle −111)",
    ),
    (
        "the same bill with idle moved between capacity types",
        variant("b", [group("on-demand", "H100", 1000.0, 40.0), group("reserved", "A100", 500.0, 200.0)]),
        "cost total unchanged (1,500 USD over the arrival window), idle −60: on-demand H100 idle −60",
    ),
]


@pytest.mark.parametrize(("other", "clause"), [c[1:] for c in COST_CASES], ids=[c[0] for c in COST_CASES])
def test_a_cost_change_is_explained_by_capacity_type_and_gpu_model(
    other: dict[str, Any], clause: str
) -> None:
    assert trade_offs([BASE, other], [0.5, 0.5]) == [f"b against a: {clause}."]


def test_nothing_moved_nothing_is_said_of_cost() -> None:
    assert trade_offs([BASE, {**BASE, "name": "b"}], [0.5, 0.5]) == [
        "b against a: no wait, preemption, allocation or cost changed that much."
    ]


WAITS = {
    "name": "kueue",
    "waits": {
        "waited": 2,
        "by_cause": {"quota": 1, "preempted": 1},
        "longest": [
            {
                "workload": "team-a/<big>",
                "team": "team-a",
                "class": "big",
                "wait_s": 5400.0,
                "still_waiting": True,
                "requeued_wait_s": 0.0,
                "cause": "quota",
                "reason": "quota: nvidia.com/gpu in a100",
                "preempted_by": [],
                "messages": [
                    {
                        "since_s": 0.0,
                        "reason": "Pending",
                        "message": "insufficient unused quota, 8 more needed",
                    },
                    {
                        "since_s": 600.0,
                        "reason": "Pending",
                        "message": "insufficient unused quota, 4 more needed",
                    },
                ],
                "messages_total": 3,
            },
            {
                "workload": "team-b/small",
                "team": "team-b",
                "class": "small",
                "wait_s": 0.0,
                "requeued_wait_s": 120.0,
                "cause": "preempted",
                "reason": "preempted by team-a/<big>",
                "preempted_by": ["team-a/<big>"],
                "messages": [],
            },
        ],
    },
}


def test_the_longest_waits_table_shows_cause_preemptor_and_messages_escaped() -> None:
    html = waits_tables([WAITS])
    assert "2 workloads waited" in html and "1 preempted, 1 quota" in html  # most first, then by name
    assert "team-a/&lt;big&gt;" in html and "<big>" not in html
    assert "1h 30m" in html and "still waiting at the end" in html and "+ 2m 0s after evictions" in html
    assert "<b>+0s</b> Pending: insufficient unused quota, 8 more needed" in html
    assert "<b>+10m 0s</b> Pending: insufficient unused quota, 4 more needed" in html
    assert "3 messages" in html and "1 more" in html


def test_deadlines_per_team_and_variant_and_the_latest_missed() -> None:
    deadlines = {
        "teams": [{"name": "team-a", "declared": 3, "met": 1, "missed": 1, "unfinished": 1}],
        "missed": [{"workload": "team-a/x", "team": "team-a", "late_s": 3600.0, "status": "Succeeded"}],
    }
    html = deadline_tables([{"name": "kueue", "deadlines": deadlines}])
    assert '<td class="num">3</td><td class="num">1</td><td class="num">1</td><td class="num">1</td>' in html
    assert "team-a/x" in html and "1h 0m" in html


def test_the_window_is_stated_and_the_drain_apart() -> None:
    assert (
        window_text(BASE)
        == "arrival window 1m 0s – 1h 1m (1h 0m); drain after the last arrival 1h 1m – 2h 1m (1h 0m)"
    )
    html = window_cost_tables([BASE])
    assert "on-demand H100" in html and "1,000.00 USD" in html and "drain after the last arrival" in html


def test_without_prices_the_cost_tables_say_so() -> None:
    html = window_cost_tables([variant("a", [group("on-demand", "H100", 0.0, 0.0)], priced=False)])
    assert "No prices set" in html and "USD" not in html


def test_the_report_with_the_new_tables_is_a_pure_function_of_the_metrics() -> None:
    metrics = {"scenario": "s", "seed": 1, "variants": [BASE | WAITS | {"name": "a"}]}
    page = render_report(metrics)
    assert page == render_report(metrics)
    assert '<section id="who-waited">' in page and '<section id="window-cost">' in page
    assert '<section id="deadlines">' not in page  # no workload declares one
