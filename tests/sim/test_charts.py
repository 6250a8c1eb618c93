"""The report's SVG charts: round ticks, compact exact step paths, one axis per quantity across
variants, no duplicate panel, named legends, and a glossary that defines each term once."""

from __future__ import annotations

import copy
import re
from html import unescape
from typing import Any

import pytest

from gpuq.sim.charts import Axis, Panel, Series, chart, nice_top, ticks
from gpuq.sim.report import render_report

try:
    from report_sample import sample_metrics
except ImportError:  # tests/sim became a package
    from sim.report_sample import sample_metrics


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        pytest.param(0.0, 48.0, [0.0, 10.0, 20.0, 30.0, 40.0], id="GPUs: steps of ten"),
        pytest.param(0.0, 1.0, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0], id="a share: fifths, without float noise"),
        pytest.param(0.0, 12.5, [0.0, 2.5, 5.0, 7.5, 10.0, 12.5], id="steps of two and a half"),
        pytest.param(
            5.0, 5.0, [5.0, 5.2, 5.4, 5.6, 5.8, 6.0], id="an empty range is widened, not divided by zero"
        ),
    ],
)
def test_ticks_are_round(lo: float, hi: float, expected: list[float]) -> None:
    assert ticks(lo, hi) == expected


@pytest.mark.parametrize(
    ("value", "top"),
    [
        pytest.param(48.0, 50.0, id="the capacity line is under the top, not clipped at 40"),
        pytest.param(40.0, 40.0, id="a round value is its own top"),
        pytest.param(0.0, 1.0, id="nothing drawn: a unit axis"),
        pytest.param(2613.0, 3000.0, id="large values"),
    ],
)
def test_the_top_of_an_axis_is_the_first_round_value_at_or_above_the_data(value: float, top: float) -> None:
    assert nice_top(value) == top


def paths(svg: str) -> list[str]:
    return re.findall(r'<path class="mark" d="([^"]*)"', svg)


# A 560 x 300 panel plots x 0..4 on px 58..544 (121.5 px a unit) and y 0..1 on px 258..30.
@pytest.mark.parametrize(
    ("ys", "expected"),
    [
        pytest.param(
            [1.0, 1.0, 1.0, 1.0, 0.0], ["M58 30H544V258"], id="a run of one height is one horizontal"
        ),
        pytest.param(
            [0.0, 1.0, None, 1.0, 1.0], ["M58 258H179.5V30M422.5 30H544"], id="a null breaks the line"
        ),
        pytest.param(
            [None, 0.5, None, 0.5, None], [], id="points alone draw nothing: the panel says no data"
        ),
    ],
)
def test_step_lines_hold_each_value_until_the_next_x(ys: list[float | None], expected: list[str]) -> None:
    line = Series("s", [0.0, 1.0, 2.0, 3.0, 4.0], ys, "#000")
    svg = chart("fig-t", [Panel("t", [line], Axis(hi=4.0), Axis(hi=1.0))])
    assert paths(svg) == expected
    assert ("no data" in svg) == (not expected)


def test_stacked_layers_sit_on_each_other() -> None:
    layers = [Series(n, [0.0, 1.0, 2.0], [1.0, 1.0, 1.0], "#000", "area") for n in ("a", "b")]
    svg = chart("fig-t", [Panel("t", layers, Axis(hi=2.0), Axis(hi=2.0))])
    # the second layer's outline runs along y=1 (its base), which is the first layer's top
    first, second = paths(svg)
    assert first.startswith("M58 144H544") and second.startswith("M58 30H544") and "L544 144" in second


def panel_x_ticks(html: str, figure: str) -> list[tuple[str, ...]]:
    """Per panel of a chart, the x tick labels (the texts under the plot, in order)."""
    body = html[html.index(f'id="{figure}"') :]
    body = body[: body.index("</figure>")]
    panels = re.findall(r'<svg class="panel".*?</svg>', body)
    return [
        tuple(re.findall(r'<text x="[\d.]+" y="[\d.]+" text-anchor="middle">([\d,.]+)</text>', p))
        for p in panels
    ]


def shorter_second_variant() -> dict[str, Any]:
    """Two variants, the second's series half as long: the charts must still share one time axis."""
    metrics = sample_metrics(("fcfs", "kueue"))
    series = metrics["variants"][1]["series"]
    half = len(series["t_s"]) // 2
    for key in ("t_s", "gpu_allocation", "gpu_occupancy", "fragmentation"):
        series[key] = series[key][:half]
    for key in ("pending", "running_gpus"):
        series[key] = {team: values[:half] for team, values in series[key].items()}
    return metrics


@pytest.mark.parametrize("figure", ["fig-queues", "fig-utilisation"])
def test_every_variant_has_the_same_time_axis(figure: str) -> None:
    labelled = panel_x_ticks(render_report(shorter_second_variant()), figure)
    assert len(labelled) >= 2 and len(set(labelled)) == 1, labelled
    assert labelled[0][-1] == "40", "the longer run (48 h) sets the end: the shorter alone ends at 20"


def panel_titles(html: str) -> list[str]:
    return [unescape(t) for t in re.findall(r'<svg class="panel"[^>]* aria-label="([^"]*)"', html)]


def same_occupancy() -> dict[str, Any]:
    metrics = sample_metrics(("fcfs", "kueue"))
    for variant in metrics["variants"]:
        variant["series"]["gpu_occupancy"] = copy.copy(variant["series"]["gpu_allocation"])
    return metrics


@pytest.mark.parametrize(
    ("metrics", "occupancy_drawn"),
    [
        pytest.param(sample_metrics(("fcfs", "kueue")), True, id="occupancy differs: its own panel"),
        pytest.param(same_occupancy(), False, id="occupancy is allocation: one panel and a sentence why"),
    ],
)
def test_occupancy_is_drawn_only_where_it_differs_from_allocation(
    metrics: dict[str, Any], occupancy_drawn: bool
) -> None:
    html = render_report(metrics)
    titles = [t for t in panel_titles(html) if t.startswith(("GPU allocation", "GPU occupancy"))]
    assert len(titles) == (2 if occupancy_drawn else 1)
    assert ("GPU occupancy is not drawn: it is the same series as GPU allocation" in html) != occupancy_drawn


def test_every_legend_entry_names_something() -> None:
    html = render_report(sample_metrics(("fcfs", "kueue")))
    names = [
        n
        for legend in re.findall(r'<ul class="legend">(.*?)</ul>', html)
        for n in re.findall(r"</svg>(.*?)</li>", legend)
    ]
    assert names and all(n.strip() and not re.fullmatch(r"trace \d+", n) for n in names)


GLOSSARY = [
    "JCT",
    "slowdown",
    "Jain's index",
    "fragmentation",
    "GPU allocation",
    "GPU occupancy",
    "time to admission (quota reservation)",
    "wait (until the pods run)",
]


def test_the_glossary_defines_each_term_once() -> None:
    html = render_report(sample_metrics(("fcfs",)))
    terms = [unescape(t) for t in re.findall(r"<dt>(.*?)</dt>", html)]
    assert [t for t in GLOSSARY if terms.count(t) != 1] == []
    assert len(terms) == len(set(terms))


def test_print_keeps_charts_and_tables_whole_and_tables_scroll_on_screen() -> None:
    html = render_report(sample_metrics(("fcfs",)))
    screen, _, printed = html.partition("@media print")
    assert re.search(r"table \{\{?[^}]*overflow-x: auto", screen)
    assert all(rule in printed for rule in ("break-inside: avoid", "svg.panel", "table", "@page"))
