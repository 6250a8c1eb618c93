"""The self-contained HTML report of a simulation, rendered from its metrics dictionary.

The report is one file a person can attach to an issue, open offline or print: its charts are
inline SVG drawn by :mod:`gpuq.sim.charts`, so it holds no script, and no CDN, font or stylesheet
is fetched. Every user string (scenario, variant, team and queue names) is HTML-escaped, in charts
too. Output is a pure function of the metrics (schema ``gpuq.dev/v1alpha1/SimulationMetrics``):
chart ids are fixed, mappings are walked in sorted order and no clock is read, so the same metrics
give the same bytes. A glossary at the end defines each term the tables and charts use, once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from gpuq.sim.charts import Axis, Panel, Series, chart, data_top, nice_top
from gpuq.sim.metrics import headline_cost, headline_mean
from gpuq.sim.serving.report import services_table
from gpuq.sim.tradeoffs import trade_offs

_DASH = "–"
# Tableau 10: distinct in print and for the common colour-vision deficiencies.
_PALETTE: tuple[str, ...] = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2")
_PALETTE += ("#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
# Tableau 20's light halves: teams 11 to 20 get a colour of their own, not a repeat.
_TEAM_PALETTE = (*_PALETTE, "#a0cbe8", "#ffbe7d", "#8cd17d", "#ff9d9a", "#86bcb6")
_TEAM_PALETTE += ("#f1ce63", "#d4a6c8", "#fabfd2", "#d7b5a6", "#79706e")
_MUTED = "#52606d"
_FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif'
_CSS = f"""
body {{ font-family: {_FONT}; margin: 0 auto; max-width: 1320px; padding: 1.5rem; color: #1f2933;
  line-height: 1.4; }}
h1 {{ font-size: 1.6rem; margin-bottom: .3rem; }}
h2 {{ border-bottom: 1px solid #d9e2ec; padding-bottom: .2rem; margin-top: 2rem; }}
nav a {{ margin-right: 1rem; white-space: nowrap; }} .meta {{ color: #52606d; }}
.empty {{ color: #7b8794; font-style: italic; }}
table {{ border-collapse: collapse; font-variant-numeric: tabular-nums; margin: .5rem 0 1rem;
  display: block; max-width: 100%; overflow-x: auto; }}
th, td {{ border: 1px solid #d9e2ec; padding: .3rem .6rem; vertical-align: top; }}
th {{ background: #f0f4f8; text-align: left; }}
td.num {{ text-align: right; white-space: nowrap; }}
tbody tr:nth-child(even) td {{ background: #f8fafc; }}
.delta {{ color: #7b8794; font-size: .85em; margin-left: .4em; }}
.muted {{ color: #7b8794; }}
.note {{ background: #fffbea; border-left: 3px solid #f0b429; padding: .4rem .8rem; }}
figure.chart {{ margin: .5rem 0 1.5rem; }}
.legend {{ list-style: none; padding: 0; margin: 0 0 .5rem; display: flex; flex-wrap: wrap; gap: .2rem 1.1rem;
  font-size: .9rem; }}
.legend li {{ display: inline-flex; align-items: center; gap: .35rem; }}
.panels {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 520px), 1fr));
  gap: .8rem 2rem; }}
.panels.wide {{ grid-template-columns: minmax(0, 1100px); }}
svg.panel {{ width: 100%; max-width: 720px; height: auto; display: block; font: 12px {_FONT}; }}
.panels.wide svg.panel {{ max-width: none; }}
svg.panel text {{ fill: #52606d; }}
svg.panel text.title {{ fill: #1f2933; font-weight: 600; font-size: 13px; }}
svg.panel text.no-data {{ fill: #7b8794; font-style: italic; font-size: 14px; }}
.chart-note {{ color: #52606d; }}
dl.glossary {{ display: grid; grid-template-columns: minmax(8rem, max-content) minmax(0, 60rem);
  gap: .4rem 1.2rem; }}
dl.glossary dt {{ font-weight: 600; }} dl.glossary dd {{ margin: 0; }}
@media (max-width: 700px) {{ dl.glossary {{ grid-template-columns: 1fr; }} }}
@media print {{
  @page {{ margin: 12mm; }}
  body {{ max-width: none; padding: 0; font-size: 10pt; }}
  nav {{ display: none; }}
  h2, .legend, .chart-note {{ break-after: avoid; page-break-after: avoid; }}
  table, tr, .legend, svg.panel, .note, .tradeoffs, .chart-note, dl.glossary dt, dl.glossary dd {{
    break-inside: avoid; page-break-inside: avoid; }}
  table {{ display: table; overflow: visible; font-size: 8.5pt; }}
  .panels, .panels.wide {{ grid-template-columns: minmax(0, 1fr); gap: 4mm; }}
  svg.panel {{ max-width: none; max-height: 115mm; }}
}}
"""

Metrics = Mapping[str, Any]
_Getter = Callable[[Metrics], float | None]


def render_report(metrics: Metrics) -> str:
    """One HTML document of the run's variants: a summary, per-team and cohort tables and figures."""
    variants = [v for v in metrics.get("variants") or [] if isinstance(v, Mapping)]
    sections = (
        f'<section id="{section_id}">\n<h2>{title}</h2>\n{render(variants)}\n</section>'
        for section_id, title, _, render in _sections(variants)
    )
    return _document(metrics, variants, "\n".join(sections))


def write_report(metrics: Metrics, path: Path) -> None:
    """Write :func:`render_report` to ``path`` as UTF-8; the parent folder must exist."""
    path.write_text(render_report(metrics), encoding="utf-8")


# -- values and formats --------------------------------------------------------------------------


def _num(value: Any) -> float | None:
    """A JSON number as a finite float; None for null (undefined in the schema) and anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _at(*path: str) -> _Getter:
    """A getter of the number at ``path`` in a variant; None where any step is missing."""

    def get(variant: Metrics) -> float | None:
        node: Any = variant
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        return _num(node)

    return get


def _headline_mean(key: str, part: str = "arrival") -> _Getter:
    """A 0..1 mean over the arrival window or the drain (:func:`gpuq.sim.metrics.headline_mean`)."""
    return lambda variant: headline_mean(variant, key, part)


def _headline_cost(key: str, part: str = "arrival") -> _Getter:
    """A cost over the arrival window or the drain (:func:`gpuq.sim.metrics.headline_cost`)."""
    return lambda variant: headline_cost(variant, key, part)


def _duration(seconds: float) -> str:
    """``45s``, ``12m 5s``, ``3h 12m``, ``2d 4h``: two units at most, as a person reads a wait."""
    if seconds < 59.5:
        return f"{seconds:.1f}s" if seconds < 10 and seconds != int(seconds) else f"{seconds:.0f}s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h"
    return f"{hours}h {minutes}m" if hours else f"{minutes}m {secs}s"


_NO_PRICES = (
    '<span class="muted" title="no node has a price: see docs/provisioning.md#prices">no prices set</span>'
)
PRICES_HINT = (
    "No prices set: no node of this run has a price, so no cost is computed. Give NodePools "
    "spec.price (per node-hour), or spec.machineType for the bundled catalogue "
    "(src/gpuq/core/provisioning/data/prices.yaml), or a PriceCatalogue: see docs/provisioning.md#prices."
)


def priced(variant: Metrics) -> bool:
    """Whether a variant's costs mean anything (older metrics without the flag: assume so)."""
    return bool((variant.get("cost") or {}).get("priced", True))


def _fmt(kind: str, value: float | None, variant: Metrics) -> str:
    """A value of ``kind`` as the tables show it; a dash where the metric is undefined."""
    if kind == "money" and not priced(variant):
        return _NO_PRICES
    if value is None:
        return _DASH
    currency = escape(str((variant.get("cost") or {}).get("currency") or ""))
    formats: dict[str, Callable[[float], str]] = {
        "int": lambda v: f"{round(v):,}",
        "num": lambda v: f"{v:,.1f}",
        "dur": _duration,
        "pct": lambda v: f"{v * 100:.1f}%",
        "ratio": lambda v: f"{v:.2f}×",
        "jain": lambda v: f"{v:.3f}",
        "money": lambda v: f"{v:,.2f} {currency}".rstrip(),
    }
    return formats[kind](value)


def _delta(kind: str, value: float | None, base: float | None) -> str:
    """The change from the baseline variant: points for shares, relative change for the rest."""
    if value is None or base is None or value == base:
        return ""
    if kind == "pct":
        text = f"{(value - base) * 100:+.1f} pt"
    elif kind == "jain":
        text = f"{value - base:+.3f}"
    elif base != 0:
        text = f"{(value - base) / abs(base):+.0%}"
    else:
        return ""
    return f'<span class="delta">{text}</span>'


def _name(item: Mapping[str, Any], fallback: str = "?") -> str:
    return str(item.get("name") or fallback)


# -- tables --------------------------------------------------------------------------------------

_SUMMARY_ROWS: tuple[tuple[str, str, _Getter], ...] = (
    ("simulated time", "dur", _at("span_s")),
    ("GPU capacity", "num", _at("gpus_total")),
    ("submitted", "int", _at("workloads", "submitted")),
    ("finished", "int", _at("workloads", "finished")),
    ("failed", "int", _at("workloads", "failed")),
    ("pending at end", "int", _at("workloads", "pending_at_end")),
    ("preemptions", "int", _at("workloads", "preemptions")),
    ("GPU-hours used", "num", _at("overall", "gpu_hours")),
    ("lost GPU-hours", "num", _at("overall", "lost_gpu_hours")),
    *((f"wait {q}", "dur", _at("overall", "wait_s", q)) for q in ("p50", "p90", "p99", "max")),
    *((f"JCT {q}", "dur", _at("overall", "jct_s", q)) for q in ("p50", "p90")),
    *((f"slowdown {q}", "ratio", _at("overall", "slowdown", q)) for q in ("p50", "p90")),
    ("arrival window (first to last arrival)", "dur", _at("windows", "arrival", "duration_s")),
    ("mean GPU allocation", "pct", _headline_mean("gpu_allocation")),
    ("mean GPU occupancy", "pct", _headline_mean("gpu_occupancy")),
    ("mean fragmentation", "pct", _headline_mean("fragmentation")),
    ("Jain fairness", "jain", _at("fairness", "jain")),
    *((f"cost {part}", "money", _headline_cost(part)) for part in ("used", "idle", "total")),
    ("drain after the last arrival", "dur", _at("windows", "drain", "duration_s")),
    ("drain: mean GPU allocation", "pct", _headline_mean("gpu_allocation", "drain")),
    ("drain: cost total", "money", _headline_cost("total", "drain")),
)
_WINDOW_NOTE = (
    "Means and cost are over the arrival window, from the first to the last arrival; the drain "
    "after the last arrival, while the queues empty, is given apart."
)


def _summary_table(variants: Sequence[Metrics]) -> str:
    """One column per variant; after the first, each cell also shows its change from the first."""
    if not variants:
        return _empty("The metrics hold no variant.")
    head = "".join(
        f'<th title="{escape(str(v.get("description") or ""))}">{escape(_name(v))}</th>' for v in variants
    )
    rows = []
    for label, kind, get in _SUMMARY_ROWS:
        base = get(variants[0])
        cells = "".join(
            f'<td class="num">{_fmt(kind, get(v), v)}{_delta(kind, get(v), base) if i else ""}</td>'
            for i, v in enumerate(variants)
        )
        rows.append(f"<tr><th>{label}</th>{cells}</tr>")
    intro = "" if any(priced(v) for v in variants) else f'<p class="note">{escape(PRICES_HINT)}</p>'
    if any(isinstance(v.get("windows"), Mapping) for v in variants):
        intro += f"<p>{escape(_WINDOW_NOTE)}</p>"
    if len(variants) > 1:
        allocation = [headline_mean(v, "gpu_allocation") for v in variants]
        told = "".join(f"<li>{escape(sentence)}</li>" for sentence in trade_offs(variants, allocation))
        baseline = escape(_name(variants[0]))
        intro += (
            f'<ul class="tradeoffs">{told}</ul>'
            f"<p>Variants side by side; the small figures are the change from <b>{baseline}</b>.</p>"
        )
    return f"{intro}<table><thead><tr><th></th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


_TEAM_COLUMNS: tuple[tuple[str, str, _Getter], ...] = (
    ("wait p50", "dur", _at("wait_s", "p50")),
    ("wait p90", "dur", _at("wait_s", "p90")),
    ("JCT p50", "dur", _at("jct_s", "p50")),
    ("GPU-hours", "num", _at("gpu_hours")),
    ("share of GPU-hours", "pct", _at("gpu_hours_share")),
    ("quota share", "pct", _at("quota_share")),
    ("cost", "money", _at("cost")),
    ("preempted", "int", _at("preempted")),
)


def _teams_table(variants: Sequence[Metrics]) -> str:
    """One row per team and variant, teams by name; a team a variant lacks shows dashes."""
    by_variant = [{_name(t): t for t in v.get("teams") or []} for v in variants]
    teams = sorted({name for teams in by_variant for name in teams})
    if not teams:
        return _empty("No team submitted a workload.")
    compare = len(variants) > 1
    head = "<th>team</th>" + ("<th>variant</th>" if compare else "")
    head += "".join(f"<th>{label}</th>" for label, _, _ in _TEAM_COLUMNS)
    rows = []
    for team in teams:
        for i, (variant, stats) in enumerate(zip(variants, by_variant, strict=True)):
            row = stats.get(team, {})
            first = f'<th rowspan="{len(variants)}">{escape(team)}</th>' if i == 0 else ""
            label = f"<td>{escape(_name(variant))}</td>" if compare else ""
            cells = "".join(
                f'<td class="num">{_fmt(kind, get(row), variant) if row else _DASH}</td>'
                for _, kind, get in _TEAM_COLUMNS
            )
            rows.append(f"<tr>{first}{label}{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


_NO_QUOTA = '<span title="first come, first served: no workload reserves quota">n/a</span>'


def _classes_table(variants: Sequence[Metrics]) -> str:
    """Quota held over time per resource, and per workload class the wait until its pods run (every
    variant alike) and the time to quota reservation (what Kueue's scheduler performance checker
    reports; n/a for a variant without quotas), one column per variant."""
    resources = sorted({r for v in variants for r in (v.get("quota_utilisation") or {})})
    classes = sorted({_name(c) for v in variants for c in v.get("classes") or []})
    if not resources and not classes:
        return _empty("No quota and no workload classes.")
    head = "".join(f"<th>{escape(_name(v))}</th>" for v in variants)

    def quota_cell(v: Metrics, value: float | None) -> str:
        shown = _NO_QUOTA if v.get("quota_utilisation") is None and "quota_utilisation" in v else None
        return f'<td class="num">{shown or _fmt("pct", value, v)}</td>'

    rows = [
        f"<tr><th>quota held: {escape(resource)}</th>"
        + "".join(quota_cell(v, _at("quota_utilisation", resource)(v)) for v in variants)
        + "</tr>"
        for resource in resources
    ]
    by_variant = [{_name(c): c for c in v.get("classes") or []} for v in variants]
    measures = (("wait_s", "wait until its pods run"), ("time_to_admission_s", "time to quota reservation"))
    for name in classes:
        for key, what in measures:
            for label, stat in (("mean", "mean"), ("p90", "p90")):
                cells = []
                for v, by in zip(variants, by_variant, strict=True):
                    entry = by.get(name, {})
                    if key in entry and entry[key] is None:
                        cells.append(f'<td class="num">{_NO_QUOTA}</td>')
                    else:
                        cells.append(f'<td class="num">{_fmt("dur", _at(key, stat)(entry), v)}</td>')
                rows.append(f"<tr><th>{escape(name)}: {what}, {label}</th>{''.join(cells)}</tr>")
    return f"<table><thead><tr><th></th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


# -- figures -------------------------------------------------------------------------------------


def time_scale(end_s: float) -> tuple[str, float]:
    """The unit of a simulated-time axis that ends at ``end_s``: hours up to four days, then days."""
    return ("days", 86400.0) if end_s > 96 * 3600 else ("h", 3600.0)


def _series_end_s(variant: Metrics) -> float:
    """Where a variant's series end: the end of its last bin."""
    series = variant.get("series") or {}
    starts = [t for t in map(_num, series.get("t_s") or []) if t is not None]
    return max(starts, default=0.0) + ((_num(series.get("bin_s")) or 0.0) if starts else 0.0)


def _time_axis(variants: Sequence[Metrics], label: bool = True) -> tuple[Axis, float]:
    """One simulated-time axis for every variant (the longest run sets its end), and seconds per unit."""
    end_s = max((_series_end_s(v) for v in variants), default=0.0)
    unit, per_s = time_scale(end_s)
    return Axis(f"simulated time ({unit})" if label else "", hi=end_s / per_s if end_s else None), per_s


def _steps(
    series: Mapping[str, Any], values: Any, per_s: float = 3600.0
) -> tuple[list[float | None], list[float | None]]:
    """Bin averages against bin starts in units of ``per_s`` seconds, closed at the end of the last bin."""
    pairs = [(t, _num(v)) for t, v in zip(map(_num, series.get("t_s") or []), values or [], strict=False)]
    xs: list[float | None] = [t / per_s for t, _ in pairs if t is not None]
    ys = [v for t, v in pairs if t is not None]
    if not xs:
        return [], []
    end = (xs[-1] or 0.0) + (_num(series.get("bin_s")) or 0.0) / per_s
    return [*xs, end], [*ys, ys[-1]]


def _has_series(variants: Sequence[Metrics]) -> bool:
    return any((v.get("series") or {}).get("t_s") for v in variants)


def _titles(variants: Sequence[Metrics], *parts: str) -> list[str]:
    """Panel titles, one per variant and part; the variant's name only when there are several."""
    if len(variants) == 1:
        return list(parts)
    return [f"{_name(v)} · {part}" if part else _name(v) for v in variants for part in parts]


def _cohorts_figure(variants: Sequence[Metrics]) -> str:
    """Borrowed and lent GPU-hours per cohort and per ClusterQueue, bars grouped by variant."""
    cohorts = sorted({_name(c) for v in variants for c in v.get("cohorts") or []})
    queues = sorted({_name(q) for v in variants for q in v.get("cluster_queues") or [] if q.get("cohort")})
    if not cohorts:
        return _empty("No ClusterQueue is in a cohort: nothing is borrowed or lent.")
    panels = []
    parts = (("per cohort", "cohorts", cohorts), ("per ClusterQueue", "cluster_queues", queues))
    for title, key, names in parts:
        bars = []
        for i, variant in enumerate(variants):
            items = {_name(item): item for item in variant.get(key) or []}
            for part in ("borrowed", "lent"):
                ys = [_at(f"{part}_gpu_hours")(items.get(n, {})) for n in names]
                name, colour = f"{_name(variant)} · {part}", _PALETTE[i % 10]
                if any(y is not None for y in ys):  # a variant without cohorts has no bars to hold a slot
                    bars.append(Series(name, [], ys, colour, "bars", light=part == "lent"))
        panels.append(Panel(title, bars, Axis(), Axis("GPU-hours"), categories=names))
    apart = [_name(v) for v in variants if not v.get("cohorts")]
    note = (
        f'<p class="chart-note">Not drawn: {escape(", ".join(apart))}, with no ClusterQueue in a cohort.</p>'
        if apart
        else ""
    )
    return note + chart("fig-cohorts", panels, height=320)


_UTILISATION = (
    ("gpu_allocation", "GPU allocation (share of capacity held by running pods)"),
    ("gpu_occupancy", "GPU occupancy (share of GPUs with a pod)"),
    ("fragmentation", "fragmentation (share of free GPUs on partly used nodes)"),
)


def _occupancy_is_allocation(variants: Sequence[Metrics]) -> bool:
    """Whether every variant's occupancy series is its allocation series, bin for bin."""
    return all(
        (v.get("series") or {}).get("gpu_occupancy") == (v.get("series") or {}).get("gpu_allocation")
        for v in variants
    )


def _utilisation_figure(variants: Sequence[Metrics]) -> str:
    """Allocation, occupancy and fragmentation over time, one line per variant in each panel; one
    panel for allocation and occupancy where they are the same series (drawing both says nothing)."""
    if not _has_series(variants):
        return _empty("No time series: nothing was simulated.")
    same = _occupancy_is_allocation(variants)
    shown = [(key, title) for key, title in _UTILISATION if not (same and key == "gpu_occupancy")]
    time_axis, per_s = _time_axis(variants)
    panels = []
    for row, (key, title) in enumerate(shown, start=1):
        lines = [
            Series(_name(v), *_steps(series, series.get(key), per_s), _PALETTE[i % 10])
            for i, v in enumerate(variants)
            for series in [v.get("series") or {}]
        ]
        # Shares of the whole on a whole axis; fragmentation stays zoomed, it is rarely above a third.
        y_axis = Axis(percent=True, hi=1.0)
        x_axis = time_axis if row == len(shown) else Axis(hi=time_axis.hi)
        if key == "fragmentation":
            y_axis = Axis(percent=True, hi=min(1.0, nice_top(data_top(lines))))
        panels.append(Panel(title, lines, x_axis, y_axis))
    note = ""
    if same:
        note = (
            '<p class="chart-note">GPU occupancy is not drawn: it is the same series as GPU allocation '
            "in every variant here. The two differ only where pods hold a fraction of a GPU (MIG slices, "
            "time-slicing); see the glossary.</p>"
        )
    return note + chart("fig-utilisation", panels, height=220, wide=True)


def _team_colours(variants: Sequence[Metrics]) -> dict[str, str]:
    """One colour per team in every figure, given by the team's rank in name order."""
    names: set[str] = {_name(t) for v in variants for t in v.get("teams") or []}
    for v in variants:
        series = v.get("series") or {}
        names |= {*(series.get("pending") or {}), *(series.get("running_gpus") or {})}
        names |= set(v.get("wait_cdf") or {}) - {"all"}
    return {name: _TEAM_PALETTE[i % len(_TEAM_PALETTE)] for i, name in enumerate(sorted(names))}


def _capacity(variant: Metrics, per_s: float) -> tuple[list[float | None], list[float | None]]:
    """GPUs in service over time: the series where the run has one (autoscaled pools), else the total."""
    series = variant.get("series") or {}
    if series.get("gpu_capacity"):
        return _steps(series, series["gpu_capacity"], per_s)
    capacity = _num(variant.get("gpus_total"))
    xs, _ = _steps(series, series.get("t_s"), per_s)
    return (xs, [capacity] * len(xs)) if capacity is not None else ([], [])


def _queues_figure(variants: Sequence[Metrics]) -> str:
    """Per variant, pending workloads per team (lines) beside the GPUs each team holds (stacked);
    each column has one y range for every variant, so heights compare across variants."""
    if not _has_series(variants):
        return _empty("No time series: nothing was simulated.")
    colours = _team_colours(variants)
    time_axis, per_s = _time_axis(variants)
    pending_rows, held_rows = [], []
    for variant in variants:
        series = variant.get("series") or {}
        pending_rows.append(
            [
                Series(team, *_steps(series, values, per_s), colours.get(team, _MUTED))
                for team, values in sorted((series.get("pending") or {}).items())
            ]
        )
        held = [
            Series(team, *_steps(series, values, per_s), colours.get(team, _MUTED), "area")
            for team, values in sorted((series.get("running_gpus") or {}).items())
        ]
        capacity = _capacity(variant, per_s)
        if capacity[0]:
            held.append(Series("GPU capacity", *capacity, "#1f2933", dash="4 3", width=1.4))
        held_rows.append(held)
    pending_top = max((data_top(row) for row in pending_rows), default=0.0)
    held_top = max((data_top(row) for row in held_rows), default=0.0)
    titles = _titles(variants, "pending workloads per team", "GPUs held per team (stacked)")
    panels = []
    for i, (pending, held) in enumerate(zip(pending_rows, held_rows, strict=True)):
        panels.append(Panel(titles[2 * i], pending, time_axis, Axis("workloads", hi=nice_top(pending_top))))
        panels.append(Panel(titles[2 * i + 1], held, time_axis, Axis("GPUs", hi=nice_top(held_top))))
    return chart("fig-queues", panels, height=300)


def _waits_figure(variants: Sequence[Metrics]) -> str:
    """Per variant, the CDF of each team's wait and of all workloads', on one wait axis for all."""
    cdfs = [{k: c for k, c in (v.get("wait_cdf") or {}).items() if isinstance(c, Mapping)} for v in variants]
    waits = [w for per in cdfs for c in per.values() for w in map(_num, c.get("wait_s") or [])]
    top = max((w for w in waits if w is not None), default=None)
    if top is None:
        return _empty("No workload was admitted: there are no waits.")
    unit, per_unit = ("h", 3600.0) if top >= 7200 else ("min", 60.0) if top >= 120 else ("s", 1.0)
    x_hi = nice_top(top / per_unit)
    colours = _team_colours(variants)
    panels = []
    for title, per in zip(_titles(variants, "wait until the pods run, per team"), cdfs, strict=True):
        lines = []
        # "all" last, drawn over the teams, thick and dark.
        for team, cdf in sorted(per.items(), key=lambda kv: (kv[0] == "all", kv[0])):
            xs = [w / per_unit if w is not None else None for w in map(_num, cdf.get("wait_s") or [])]
            ys = [_num(f) for f in cdf.get("fraction") or []]
            if xs and ys:  # held at its last share to the axis' end: nobody waited longer
                xs, ys = [*xs, x_hi], [*ys[: len(xs)], ys[min(len(xs), len(ys)) - 1]]
            if team == "all":
                lines.append(Series("all workloads", xs, ys, "#1f2933", width=2.6))
            else:
                lines.append(Series(team, xs, ys, colours.get(team, _MUTED)))
        y_axis = Axis("share of workloads", percent=True, hi=1.0)
        panels.append(Panel(title, lines, Axis(f"wait ({unit})", hi=x_hi), y_axis))
    note = '<p class="chart-note">No workload waited: every curve rises at 0.</p>' if top == 0 else ""
    return note + chart("fig-waits", panels, height=320)


# -- document ------------------------------------------------------------------------------------


def _empty(text: str) -> str:
    return f'<p class="empty">{escape(text)}</p>'


def _cost_tables(variants: Sequence[Metrics]) -> str:
    from gpuq.sim.provisioning.report_html import cost_tables  # it builds on this module's helpers

    return cost_tables(variants)


def _waits_tables(variants: Sequence[Metrics]) -> str:
    from gpuq.sim.report_tables import waits_tables  # it builds on this module's helpers

    return waits_tables(variants)


def _deadline_tables(variants: Sequence[Metrics]) -> str:
    from gpuq.sim.report_tables import deadline_tables

    return deadline_tables(variants)


def _window_cost_tables(variants: Sequence[Metrics]) -> str:
    from gpuq.sim.report_tables import window_cost_tables

    return window_cost_tables(variants)


def _provisioning_figure(variants: Sequence[Metrics]) -> str:
    from gpuq.sim.provisioning.report_html import timeline_figure

    return timeline_figure(variants)


# (id, heading, contents link, renderer): the page's sections in order.
_SECTIONS: tuple[tuple[str, str, str, Callable[[Sequence[Metrics]], str]], ...] = (
    ("summary", "Summary", "Summary", _summary_table),
    ("teams", "Teams", "Teams", _teams_table),
    ("who-waited", "Who waited and why", "Who waited", _waits_tables),
    ("deadlines", "Deadlines", "Deadlines", _deadline_tables),
    ("window-cost", "Cost per team and capacity type, over the arrival window", "Cost", _window_cost_tables),
    ("admission", "Quota held, waits and admission per workload class", "Classes", _classes_table),
    ("cohorts", "Borrowing in cohorts", "Cohorts", _cohorts_figure),
    ("utilisation", "Utilisation over time", "Utilisation", _utilisation_figure),
    ("queues", "Queues and GPUs held per team", "Queues", _queues_figure),
    ("waits", "Wait distributions", "Waits", _waits_figure),
    ("serving", "Serving: per service", "Serving", services_table),
    ("cost", "Cost, idle capacity and spot", "Cost", _cost_tables),
    ("provisioning", "Provisioning timeline", "Provisioning", _provisioning_figure),
)
_SHOWN_WHEN = {
    "serving": "serving",
    "cost": "cost_attribution",
    "provisioning": "provisioning",
    "who-waited": "waits",
    "deadlines": "deadlines",
    "window-cost": "windows",
}
"""Sections shown only when some variant's metrics carry this key (other reports stay as they were)."""


def _sections(
    variants: Sequence[Metrics],
) -> tuple[tuple[str, str, str, Callable[[Sequence[Metrics]], str]], ...]:
    """The sections shown: serving, cost and provisioning only when a variant has them."""
    return tuple(
        s for s in _SECTIONS if s[0] not in _SHOWN_WHEN or any(v.get(_SHOWN_WHEN[s[0]]) for v in variants)
    )


_GLOSSARY: tuple[tuple[str, str], ...] = (
    (
        "wait (until the pods run)",
        "From submission until every pod of the workload first had a node: admitted and placed. "
        "The wait of every table and of the wait distributions.",
    ),
    (
        "time to admission (quota reservation)",
        "From submission until Kueue first reserved quota for the workload, as Kueue's scheduler "
        "performance checker measures it; n/a where nothing reserves quota (first come, first served). "
        "It can be shorter than the wait: after the reservation the pods may still wait for nodes.",
    ),
    ("JCT", "Job completion time: from submission to the end of the workload, the wait included."),
    ("slowdown", "JCT ÷ the workload's own run time: 1× is a workload that never waited."),
    ("p50, p90, p99", "Quantiles: half, 90 % and 99 % of the workloads had at most this value."),
    ("GPU-hours lost", "GPU time whose work was thrown away by evictions (since the last checkpoint)."),
    (
        "GPU allocation",
        "The share of the GPU capacity held by running pods, fractions counted as fractions "
        "(a MIG slice or a time-sliced share is part of a GPU).",
    ),
    (
        "GPU occupancy",
        "The share of GPUs with at least one pod on them, whatever part the pods hold. It equals "
        "allocation when every pod holds whole GPUs, and is higher where fractions leave GPUs partly used.",
    ),
    (
        "fragmentation",
        "The share of the free GPUs that sit on partly used nodes: free, but out of reach of a "
        "workload that needs whole nodes.",
    ),
    (
        "borrowed, lent",
        "GPU-hours a ClusterQueue ran above its nominal quota on its cohort's unused quota, and "
        "GPU-hours of its own unused quota that others in the cohort ran on.",
    ),
    (
        "Jain's index",
        "Jain's fairness index over the teams of x = share of GPU-hours ÷ quota share: "
        "(Σx)² ÷ (n·Σx²). 1 when every team got its share; 1/n when one team got everything.",
    ),
)


def _glossary() -> str:
    terms = "".join(f"<dt>{escape(term)}</dt><dd>{escape(text)}</dd>" for term, text in _GLOSSARY)
    return f'<section id="glossary">\n<h2>Terms</h2>\n<dl class="glossary">{terms}</dl>\n</section>'


def _document(metrics: Metrics, variants: Sequence[Metrics], body: str) -> str:
    """The page: header, contents, sections and the glossary; no script."""
    scenario = escape(str(metrics.get("scenario") or "unnamed scenario"))
    described = "".join(
        f"<li><b>{escape(_name(v))}</b>{': ' if v.get('description') else ''}"
        f"{escape(str(v.get('description') or ''))}</li>"
        for v in variants
    )
    noun = "variants compared" if len(variants) > 1 else "variant"
    nav = "".join(f'<a href="#{section_id}">{link}</a>' for section_id, _, link, _ in _sections(variants))
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpuq simulation · {scenario}</title>
<style>{_CSS}</style>
</head>
<body>
<header>
<h1>gpuq simulation · {scenario}</h1>
<p class="meta">seed {escape(str(metrics.get("seed")))} · {len(variants)} {noun} ·
{escape(str(metrics.get("schema") or ""))}</p>
<ul>{described}</ul>
<nav>{nav}<a href="#glossary">Terms</a></nav>
</header>
<main>
{body}
{_glossary()}
</main>
</body>
</html>
"""
