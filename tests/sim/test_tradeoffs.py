"""The trade-off sentences: computed from the variants' metrics, told only when a change matters."""

from __future__ import annotations

from typing import Any

import pytest

from gpuq.sim.metrics import series_mean
from gpuq.sim.tradeoffs import human_duration, trade_offs

H = 3600.0


def variant(
    name: str,
    teams: dict[str, tuple[float, float]],
    *,
    preemptions: int = 0,
    lost: float = 0.0,
    cost: float = 100.0,
) -> dict[str, Any]:
    """A metrics block with per-team (wait p90, max wait) in seconds."""
    return {
        "name": name,
        "teams": [{"name": t, "wait_s": {"p90": p90, "max": top}} for t, (p90, top) in teams.items()],
        "workloads": {"preemptions": preemptions},
        "overall": {"lost_gpu_hours": lost},
        "cost": {"total": cost, "currency": "USD"},
    }


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (45, "45 s"),
        (89, "89 s"),
        (90, "2 min"),
        (64 * 60, "64 min"),
        (4 * H, "4.0 h"),
        (72 * H, "3.0 d"),
    ],
)
def test_durations_read_in_the_unit_a_person_says(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_both_sides_of_a_change_read_in_the_larger_one_s_unit() -> None:
    assert (human_duration(66 * 60, 4 * H), human_duration(4 * H, 4 * H)) == ("1.1 h", "4.0 h")


@pytest.mark.parametrize(
    ("base", "other", "sentence"),
    [
        (
            variant("fcfs", {"recsys": (4 * H, 6.2 * H), "llm": (3.9 * H, 6.8 * H)}),
            variant(
                "kueue", {"recsys": (1.1 * H, 1.4 * H), "llm": (8 * H, 12.3 * H)}, preemptions=14, lost=11.2
            ),
            "kueue against fcfs: waits fell for recsys (p90 4.0 h → 1.1 h, max 6.2 h → 1.4 h); "
            "rose for llm (p90 3.9 h → 8.0 h, max 6.8 h → 12.3 h); 14 preemptions lost 11.2 GPU-hours.",
        ),
        (  # 30 s and 5 % moves are noise: not told
            variant("a", {"t": (600.0, 1200.0)}),
            variant("b", {"t": (630.0, 1250.0)}, cost=100.5),
            "b against a: no wait, preemption, allocation or cost changed that much.",
        ),
        (  # only slower: one clause; cost by more than one percent; preemptions against the baseline's
            variant("a", {"t": (0.0, 60.0)}, preemptions=2, lost=1.0),
            variant("b", {"t": (900.0, 1800.0)}, preemptions=5, lost=3.5, cost=150.0),
            "b against a: waits rose for t (p90 0 min → 15 min, max 1 min → 30 min); "
            "5 preemptions lost 3.5 GPU-hours (a: 2, 1.0); cost total 100 → 150 USD.",
        ),
    ],
    ids=["holiday-rush", "noise", "slower-costlier"],
)
def test_sentences_tell_what_changed_for_whom(base: Any, other: Any, sentence: str) -> None:
    assert trade_offs([base, other]) == [sentence]


def test_one_sentence_per_variant_after_the_baseline_and_none_alone() -> None:
    a, b, c = (variant(n, {"t": (60.0 * i, 120.0 * i)}) for i, n in ((1, "a"), (10, "b"), (20, "c")))
    assert trade_offs([a]) == []
    told = trade_offs([a, b, c])
    assert [s.split(":")[0] for s in told] == ["b against a", "c against a"]


def test_allocation_is_told_in_points_when_it_moved() -> None:
    a, b = variant("a", {}), variant("b", {})
    assert "mean GPU allocation 66.3 % → 64.2 %" in trade_offs([a, b], [0.663, 0.642])[0]
    assert "mean GPU allocation" not in trade_offs([a, b], [0.663, 0.668])[0]


def test_the_series_mean_weighs_the_last_partial_bin_by_the_time_it_covers() -> None:
    metrics = {"span_s": 150.0, "series": {"bin_s": 100.0, "t_s": [0.0, 100.0], "gpu_allocation": [1.0, 0.0]}}
    assert series_mean(metrics, "gpu_allocation") == pytest.approx(100 / 150)
    assert series_mean({"series": {}}, "gpu_allocation") is None


def test_a_share_of_no_gpus_is_undefined_not_zero() -> None:
    metrics = {
        "gpus_total": 0,
        "span_s": 10.0,
        "series": {"bin_s": 10.0, "t_s": [0.0], "gpu_allocation": [0.0]},
    }
    assert series_mean(metrics, "gpu_allocation") is None
