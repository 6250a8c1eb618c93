"""The simulation report: one offline HTML file, escaped, deterministic, and robust to empty metrics.

The tests render few documents and cache them by the variants they hold.
"""

from __future__ import annotations

import copy
import html as html_lib
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gpuq.sim.report import render_report, write_report

try:
    from report_sample import sample_metrics
except ImportError:  # tests/sim became a package
    from sim.report_sample import sample_metrics

SECTIONS = ["summary", "teams", "admission", "cohorts", "utilisation", "queues", "waits", "glossary"]
TEAMS = {"ml-research", "nlp", "vision"}


@cache
def report(variants: tuple[str, ...]) -> str:
    return render_report(sample_metrics(variants))


def figure_strings(html: str, key: str) -> set[str]:
    """Every value of the attribute ``key`` in the charts' SVG, unescaped (``aria-label``: panel titles)."""
    return {html_lib.unescape(raw) for raw in re.findall(rf'<svg class="panel"[^>]* {key}="([^"]*)"', html)}


def trace_names(html: str) -> set[str]:
    """The names the chart legends show, unescaped."""
    legends = re.findall(r'<ul class="legend">(.*?)</ul>', html)
    return {html_lib.unescape(name) for legend in legends for name in re.findall(r"</svg>(.*?)</li>", legend)}


def series_names(variant: str) -> set[str]:
    """A variant's own legend entries: its line in the utilisation panels, its bars in the cohorts'."""
    return {variant, f"{variant} · borrowed", f"{variant} · lent"}


CASES = [
    pytest.param(("fcfs",), series_names("fcfs"), id="one variant without compare"),
    pytest.param(("fcfs", "kueue"), series_names("fcfs") | series_names("kueue"), id="two variants compared"),
]


@pytest.mark.parametrize(("variants", "variant_traces"), CASES)
def test_document_opens_offline_without_any_script(variants: tuple[str, ...], variant_traces: Any) -> None:
    html = report(variants)
    assert "<script" not in html, "charts are SVG drawn by the report: the page runs no code"
    assert re.findall(r"https?://|<link|cdn\.plot\.ly|@import|url\(", html) == []


@pytest.mark.parametrize(("variants", "variant_traces"), CASES)
def test_document_has_every_section_and_named_trace(variants: tuple[str, ...], variant_traces: Any) -> None:
    html = report(variants)
    assert re.findall(r'<section id="([a-z]+)">', html) == SECTIONS
    assert trace_names(html) == variant_traces | TEAMS | {"GPU capacity", "all workloads"}
    assert re.findall(r'<figure class="chart" id="(fig-[a-z]+)"', html) == [
        "fig-cohorts",
        "fig-utilisation",
        "fig-queues",
        "fig-waits",
    ]


def test_one_variant_reads_without_comparison_wording() -> None:
    html = report(("fcfs",))
    assert "side by side" not in html
    assert "<th>variant</th>" not in html
    assert "1 variant ·" in html
    assert "pending workloads per team" in figure_strings(html, "aria-label"), "titles name no variant"


def test_compared_variants_stand_side_by_side_with_changes_from_the_first() -> None:
    html = report(("fcfs", "kueue"))
    assert "Variants side by side; the small figures are the change from <b>fcfs</b>." in html
    assert re.search(r"<thead><tr><th></th><th [^>]*>fcfs</th><th [^>]*>kueue</th></tr></thead>", html)
    assert "2 variants compared" in html
    assert '<span class="delta">' in html
    assert "kueue · pending workloads per team" in figure_strings(html, "aria-label")


def test_same_metrics_give_the_same_bytes_whatever_the_mapping_order() -> None:
    metrics = sample_metrics(("fcfs", "kueue"))
    shuffled = copy.deepcopy(metrics)
    for variant in shuffled["variants"]:
        for key in ("pending", "running_gpus"):
            variant["series"][key] = dict(reversed(variant["series"][key].items()))
        variant["wait_cdf"] = dict(reversed(variant["wait_cdf"].items()))
        variant["teams"].reverse()
    html = render_report(metrics)
    assert html == report(("fcfs", "kueue"))
    assert render_report(shuffled) == html


def test_write_report_writes_the_rendered_document(tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    write_report(sample_metrics(("fcfs",)), path)
    assert path.read_text(encoding="utf-8") == report(("fcfs",))


HOSTILE = "<script>x</script>"


def hostile_metrics() -> dict[str, Any]:
    """Every user string of the sample replaced by markup that must never reach the page raw."""
    metrics = sample_metrics(("fcfs",))
    metrics["scenario"] = "<img src=x onerror=alert(1)>"
    variant = metrics["variants"][0]
    variant["name"], variant["description"] = "a<b>&c", '"quoted" <i>'
    variant["cost"]["currency"] = "<u>EUR</u>"
    variant["teams"][0]["name"] = HOSTILE
    variant["cluster_queues"][0]["name"] = "<em>cq</em>"
    variant["cohorts"][0]["name"] = "<em>cohort</em>"
    series = variant["series"]
    for mapping in (series["pending"], series["running_gpus"], variant["wait_cdf"]):
        mapping[HOSTILE] = mapping.pop("ml-research")
    return metrics


def test_user_strings_are_escaped_in_tables_and_figures() -> None:
    html = render_report(hostile_metrics())
    for raw in (HOSTILE, "<img src=x", "a<b>&c", "<i>", "<u>EUR</u>", "<em>"):
        assert raw not in html, raw
    assert "&lt;script&gt;x&lt;/script&gt;" in html
    assert "<title>gpuq simulation · &lt;img src=x onerror=alert(1)&gt;</title>" in html
    assert "&lt;u&gt;EUR&lt;/u&gt;" in html
    # the legends show the names as written, escaped once in the page
    assert {HOSTILE, "a<b>&c", "a<b>&c · borrowed"} <= trace_names(html)


def empty_variant(name: str) -> dict[str, Any]:
    """A variant that submitted nothing: zero counts, null quantiles, empty series and CDFs."""
    q = {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    stats = {"wait_s": q, "jct_s": q, "slowdown": q, "gpu_hours": 0.0, "lost_gpu_hours": 0.0}
    stats |= dict.fromkeys(("submitted", "admitted", "finished", "failed", "preempted", "pending_at_end"), 0)
    return {
        "name": name,
        "description": "",
        "span_s": 0.0,
        "events": 0,
        "scheduling_passes": 0,
        "gpus_total": 8.0,
        "workloads": {"submitted": 0, "finished": 0, "failed": 0, "pending_at_end": 0, "preemptions": 0},
        "overall": stats,
        "teams": [],
        "cluster_queues": [],
        "cohorts": [],
        "cost": {"currency": "USD", "used": 0.0, "idle": 0.0, "total": 0.0},
        "fairness": {"jain": None},
        "series": {"bin_s": 300.0, "t_s": [], "gpu_allocation": [], "gpu_occupancy": [], "fragmentation": []},
        "wait_cdf": {},
    }


def with_variants(*variants: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": "gpuq.dev/v1alpha1/SimulationMetrics",
        "scenario": "edge",
        "seed": 1,
        "variants": [*variants],
    }


def ragged_series() -> dict[str, Any]:
    """Series of unequal lengths with nulls inside, and a CDF with a null point."""
    variant = sample_metrics(("fcfs",))["variants"][0]
    series = variant["series"]
    series["gpu_allocation"] = [*series["gpu_allocation"][:10], None]
    series["fragmentation"] = []
    series["pending"] = {"nlp": [None, 1.0]}
    variant["wait_cdf"] = {"all": {"wait_s": [0.0, None, 30.0], "fraction": [0.0, 0.5, 1.0]}}
    variant["teams"][1]["wait_s"]["p50"] = None
    return with_variants(variant)


EDGE_CASES = [
    pytest.param(with_variants(), ["The metrics hold no variant.", "No time series"], id="no variant at all"),
    pytest.param(
        with_variants(empty_variant("idle")),
        ["No team submitted a workload.", "No ClusterQueue is in a cohort", "there are no waits", "Jain"],
        id="a variant with zero workloads",
    ),
    pytest.param(
        with_variants(sample_metrics(("busy",))["variants"][0], empty_variant("idle")),
        ["idle", "busy", "<td>idle</td>", "no data"],
        id="a busy variant compared with an idle one",
    ),
    pytest.param(
        ragged_series(), ["fig-utilisation", "fig-waits", "nlp"], id="ragged series and null points"
    ),
]


@pytest.mark.parametrize(("metrics", "expected"), EDGE_CASES)
def test_degenerate_metrics_render_every_section(metrics: dict[str, Any], expected: list[str]) -> None:
    html = render_report(metrics)
    assert re.findall(r'<section id="([a-z]+)">', html) == SECTIONS
    missing = [text for text in expected if text not in html and text not in trace_names(html)]
    assert missing == []


def test_quota_held_and_time_to_admission_per_class_are_tabled() -> None:
    variant = {
        "name": "baseline",
        "quota_utilisation": {"cpu": 0.5},
        "classes": [
            {
                "name": "small",
                "count": 2,
                "wait_s": {"count": 2, "mean": 100.0, "p90": 160.0},
                "time_to_admission_s": {"count": 2, "mean": 90.0, "p90": 150.0},
            }
        ],
    }
    page = render_report({"scenario": "s", "seed": 1, "variants": [variant]})
    assert "quota held: cpu" in page and "50.0%" in page
    assert "small: time to quota reservation, mean" in page and "1m 30s" in page and "2m 30s" in page
    assert "small: wait until its pods run, mean" in page and "1m 40s" in page and "2m 40s" in page


def test_a_variant_without_quotas_shows_n_a_not_zero_for_quota_and_reservation() -> None:
    kueue = {
        "name": "kueue",
        "queueing": "kueue",
        "quota_utilisation": {"cpu": 0.5},
        "classes": [{"name": "small", "wait_s": {"mean": 60.0}, "time_to_admission_s": {"mean": 60.0}}],
    }
    fcfs = {
        "name": "fcfs",
        "queueing": "fcfs",
        "quota_utilisation": None,
        "classes": [{"name": "small", "wait_s": {"mean": 7200.0}, "time_to_admission_s": None}],
    }
    page = render_report({"scenario": "s", "seed": 1, "variants": [fcfs, kueue]})
    table = page[page.index('<section id="admission">') : page.index('<section id="cohorts">')]
    assert table.count(">n/a</span>") == 3  # quota held: cpu, reservation mean and p90
    assert "2h 0m" in table and ">0.0%<" not in table


def test_without_prices_costs_say_so_and_point_to_the_catalogue() -> None:
    unpriced = {"name": "a", "cost": {"currency": "USD", "priced": False, "used": 0.0, "total": 0.0}}
    page = render_report({"scenario": "s", "seed": 1, "variants": [unpriced]})
    summary = page[page.index('<section id="summary">') : page.index('<section id="teams">')]
    # cost used, idle and total over the arrival window, and the drain's total
    assert summary.count(">no prices set</span>") == 4 and "0.00 USD" not in summary
    assert "docs/provisioning.md#prices" in summary
    priced = {"name": "b", "cost": {"currency": "USD", "priced": True, "used": 1.0, "total": 2.0}}
    page = render_report({"scenario": "s", "seed": 1, "variants": [priced]})
    assert "no prices set" not in page and "2.00 USD" in page
