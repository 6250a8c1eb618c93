"""The self-contained HTML report of a simulation, rendered from its metrics dictionary.

The report is one file a person can attach to an issue and open offline: plotly.js is inlined
once in the head, and no CDN, font or stylesheet is fetched. Every user string (scenario, variant,
team and queue names) is HTML-escaped, in figures too, whose legends read a subset of HTML.
Output is a pure function of the metrics (schema ``gpuq.dev/v1alpha1/SimulationMetrics``): figure
div ids are fixed, mappings are walked in sorted order and no clock is read, so the same metrics
give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from gpuq.sim.metrics import headline_cost, headline_mean
from gpuq.sim.serving.report import services_table
from gpuq.sim.tradeoffs import trade_offs

_DASH = "–"
# Tableau 10: distinct in print and for the common colour-vision deficiencies.
_PALETTE: tuple[str, ...] = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2")
_PALETTE += ("#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
_CONFIG = {"displaylogo": False, "responsive": True}
_FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif'
_CSS = f"""
body {{ font-family: {_FONT}; margin: 0 auto; max-width: 1320px; padding: 1.5rem; color: #1f2933; }}
h1 {{ font-size: 1.6rem; margin-bottom: .3rem; }}
h2 {{ border-bottom: 1px solid #d9e2ec; padding-bottom: .2rem; }}
nav a {{ margin-right: 1rem; }} .meta {{ color: #52606d; }} .empty {{ color: #7b8794; font-style: italic; }}
table {{ border-collapse: collapse; font-variant-numeric: tabular-nums; margin: .5rem 0 1rem; }}
th, td {{ border: 1px solid #d9e2ec; padding: .3rem .7rem; vertical-align: top; }}
th {{ background: #f0f4f8; text-align: left; }} td.num {{ text-align: right; white-space: nowrap; }}
tbody tr:nth-child(even) td {{ background: #f8fafc; }}
.delta {{ color: #7b8794; font-size: .85em; margin-left: .4em; }}
.muted {{ color: #7b8794; }}
.note {{ background: #fffbea; border-left: 3px solid #f0b429; padding: .4rem .8rem; }}
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


def _figure(fig: go.Figure, div_id: str, height_px: int, **layout: Any) -> str:
    """The figure as a div with a fixed id (plotly draws a random one by default) and no plotly.js."""
    margin = {"l": 60, "r": 30, "t": 50, "b": 50}
    fig.update_layout(template="plotly_white", height=height_px, font_family=_FONT, margin=margin)
    fig.update_layout({"hovermode": "x unified"} | layout)
    size = {"default_height": f"{height_px}px", "default_width": "100%"}
    return str(fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_CONFIG, **size))


def _line(xs: Sequence[float | None], ys: Sequence[float | None], name: str, **style: Any) -> go.Scatter:
    """A stepped line (series are bin averages, CDFs step functions); ``line_*`` keywords style it."""
    line = {"shape": "hv", "width": 1.5} | {k[5:]: style.pop(k) for k in list(style) if k.startswith("line_")}
    return go.Scatter(x=list(xs), y=list(ys), name=name, mode="lines", line=line, **style)


def _steps(series: Mapping[str, Any], values: Any) -> tuple[list[float], list[float | None]]:
    """Bin averages against bin starts in hours, closed at the end of the last bin."""
    pairs = [(t, _num(v)) for t, v in zip(map(_num, series.get("t_s") or []), values or [], strict=False)]
    xs, ys = [t / 3600 for t, _ in pairs if t is not None], [v for t, v in pairs if t is not None]
    if not xs:
        return [], []
    return [*xs, xs[-1] + (_num(series.get("bin_s")) or 0.0) / 3600], [*ys, ys[-1]]


def _no_data(fig: go.Figure, row: int, col: int) -> None:
    """Say so in a panel of a variant that has nothing to draw, rather than leave it blank."""
    # Placed on the page, not on the panel's axes: plotly.js leaves axes without traces unplaced.
    panel = fig.get_subplot(row, col)
    x, y = (sum(panel.xaxis.domain) / 2, sum(panel.yaxis.domain) / 2)
    fig.add_annotation(
        text="no data", showarrow=False, font_color="#7b8794", x=x, y=y, xref="paper", yref="paper"
    )


def _has_series(variants: Sequence[Metrics]) -> bool:
    return any((v.get("series") or {}).get("t_s") for v in variants)


def _titles(variants: Sequence[Metrics], *parts: str) -> list[str]:
    """Subplot titles, one per variant and part; the variant's name only when there are several."""
    if len(variants) == 1:
        return list(parts)
    return [f"{escape(_name(v))} · {part}" if part else escape(_name(v)) for v in variants for part in parts]


def _cohorts_figure(variants: Sequence[Metrics]) -> str:
    """Borrowed and lent GPU-hours per cohort and per ClusterQueue in one, bars grouped by variant."""
    cohorts = sorted({_name(c) for v in variants for c in v.get("cohorts") or []})
    queues = sorted({_name(q) for v in variants for q in v.get("cluster_queues") or [] if q.get("cohort")})
    if not cohorts:
        return _empty("No ClusterQueue is in a cohort: nothing is borrowed or lent.")
    widths = [len(cohorts), max(len(queues), 1)]
    titles = ("per cohort", "per ClusterQueue")
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, column_widths=widths, horizontal_spacing=0.08)
    for i, variant in enumerate(variants):
        for col, key, names in ((1, "cohorts", cohorts), (2, "cluster_queues", queues)):
            items = {_name(item): item for item in variant.get(key) or []}
            for part, pattern in (("borrowed", ""), ("lent", "/")):
                ys = [_at(f"{part}_gpu_hours")(items.get(n, {})) for n in names]
                marker = {"color": _PALETTE[i % 10], "pattern": {"shape": pattern}}
                name, group = f"{escape(_name(variant))} · {part}", f"{i}-{part}"
                bar = go.Bar(x=[escape(n) for n in names], y=ys, name=name, marker=marker, offsetgroup=group)
                fig.add_trace(bar.update(legendgroup=group, showlegend=col == 1), row=1, col=col)
    fig.update_yaxes(title_text="GPU-hours", col=1)
    return _figure(fig, "fig-cohorts", 420, barmode="group", hovermode="closest")


_UTILISATION = (
    ("gpu_allocation", "gpu allocation", "GPU allocation (share of capacity held by running pods)"),
    ("gpu_occupancy", "gpu occupancy", "GPU occupancy (share of GPUs with a pod)"),
    ("fragmentation", "fragmentation", "fragmentation (share of free GPUs on partly used nodes)"),
)


def _utilisation_figure(variants: Sequence[Metrics]) -> str:
    """Allocation, occupancy and fragmentation over time, one line per variant in each panel."""
    if not _has_series(variants):
        return _empty("No time series: nothing was simulated.")
    titles = [title for *_, title in _UTILISATION]
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07, subplot_titles=titles)
    for i, variant in enumerate(variants):
        series = variant.get("series") or {}
        for row, (key, label, _) in enumerate(_UTILISATION, start=1):
            name = f"{escape(_name(variant))} · {label}"
            trace = _line(*_steps(series, series.get(key)), name, line_color=_PALETTE[i % 10])
            fig.add_trace(trace.update(legendgroup=str(i)), row=row, col=1)
    # Shares of the whole on a whole axis; fragmentation stays zoomed, it is rarely above a third.
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02])
    fig.update_yaxes(autorange=True, rangemode="tozero", row=3)
    fig.update_xaxes(title_text="simulated time (h)", row=3, col=1)
    return _figure(fig, "fig-utilisation", 760)


def _team_colours(variants: Sequence[Metrics]) -> dict[str, str]:
    """One colour per team in every figure, given by the team's rank in name order."""
    names: set[str] = {_name(t) for v in variants for t in v.get("teams") or []}
    for v in variants:
        series = v.get("series") or {}
        names |= {*(series.get("pending") or {}), *(series.get("running_gpus") or {})}
        names |= set(v.get("wait_cdf") or {}) - {"all"}
    return {name: _PALETTE[i % 10] for i, name in enumerate(sorted(names))}


def _queues_figure(variants: Sequence[Metrics]) -> str:
    """Per variant, pending workloads per team (lines) beside the GPUs each team holds (stacked)."""
    if not _has_series(variants):
        return _empty("No time series: nothing was simulated.")
    colours, rows = _team_colours(variants), len(variants)
    titles = _titles(variants, "pending workloads per team", "GPUs held per team (stacked)")
    spacing = {"horizontal_spacing": 0.07, "vertical_spacing": 0.12 / rows}
    fig = make_subplots(rows=rows, cols=2, shared_xaxes=True, subplot_titles=titles, **spacing)
    for row, variant in enumerate(variants, start=1):
        series = variant.get("series") or {}
        for col in (1, 2) if not series.get("t_s") else ():
            _no_data(fig, row, col)
        for col, key in ((1, "pending"), (2, "running_gpus")):
            for team, values in sorted((series.get(key) or {}).items()):
                trace = _line(*_steps(series, values), escape(team), line_color=colours.get(team))
                stack = f"gpus-{row}" if col == 2 else None
                trace.update(legendgroup=team, showlegend=row == 1 and col == 1, stackgroup=stack)
                fig.add_trace(trace, row=row, col=col)
        capacity = _num(variant.get("gpus_total"))
        xs, _ = _steps(series, series.get("t_s"))
        if capacity is not None and xs:
            trace = _line(xs, [capacity] * len(xs), "GPU capacity", line_color="#52606d", line_dash="dot")
            fig.add_trace(trace.update(legendgroup="capacity", showlegend=row == 1), row=row, col=2)
    fig.update_xaxes(title_text="simulated time (h)", row=rows)
    return _figure(fig, "fig-queues", 120 + 300 * rows)


def _waits_figure(variants: Sequence[Metrics]) -> str:
    """Per variant, the CDF of each team's wait and of all workloads', in one unit of time."""
    cdfs = [{k: c for k, c in (v.get("wait_cdf") or {}).items() if isinstance(c, Mapping)} for v in variants]
    waits = [w for per in cdfs for c in per.values() for w in map(_num, c.get("wait_s") or [])]
    top = max((w for w in waits if w is not None), default=None)
    if top is None:
        return _empty("No workload was admitted: there are no waits.")
    unit, per_unit = ("h", 3600.0) if top >= 7200 else ("min", 60.0) if top >= 120 else ("s", 1.0)
    colours, cols = _team_colours(variants), min(len(variants), 3)
    rows = math.ceil(len(variants) / cols)
    spacing = {"horizontal_spacing": 0.05, "vertical_spacing": 0.15 / rows}
    fig = make_subplots(
        rows=rows, cols=cols, shared_yaxes=True, subplot_titles=_titles(variants, ""), **spacing
    )
    for i, per in enumerate(cdfs):
        if not per:
            _no_data(fig, i // cols + 1, i % cols + 1)
        # "all" last, drawn over the teams, thick and dark.
        for team, cdf in sorted(per.items(), key=lambda kv: (kv[0] == "all", kv[0])):
            xs = [w / per_unit if w is not None else None for w in map(_num, cdf.get("wait_s") or [])]
            ys = [_num(f) for f in cdf.get("fraction") or []]
            style = {"line_color": "#1f2933", "line_width": 2.5} if team == "all" else {}
            name = "all workloads" if team == "all" else escape(team)
            trace = _line(xs, ys, name, **({"line_color": colours.get(team)} | style))
            fig.add_trace(
                trace.update(legendgroup=team, showlegend=i == 0), row=i // cols + 1, col=i % cols + 1
            )
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02])
    fig.update_yaxes(title_text="share of workloads admitted", col=1)
    fig.update_xaxes(title_text=f"wait ({unit})", rangemode="tozero")
    return _figure(fig, "fig-waits", 80 + 380 * rows, hovermode="closest")


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


def _document(metrics: Metrics, variants: Sequence[Metrics], body: str) -> str:
    """The page: header, contents, sections, and plotly.js inlined once in the head."""
    scenario = escape(str(metrics.get("scenario") or "unnamed scenario"))
    described = "".join(
        f"<li><b>{escape(_name(v))}</b>{': ' if v.get('description') else ''}"
        f"{escape(str(v.get('description') or ''))}</li>"
        for v in variants
    )
    noun = "variants compared" if len(variants) > 1 else "variant"
    nav = "".join(f'<a href="#{section_id}">{link}</a>' for section_id, _, link, _ in _sections(variants))
    # plotly.js holds no "</script", but the report must not depend on that staying true.
    plotly_js = get_plotlyjs().replace("</script", "<\\/script")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpuq simulation · {scenario}</title>
<style>{_CSS}</style>
<script>{plotly_js}</script>
</head>
<body>
<header>
<h1>gpuq simulation · {scenario}</h1>
<p class="meta">seed {escape(str(metrics.get("seed")))} · {len(variants)} {noun} ·
{escape(str(metrics.get("schema") or ""))}</p>
<ul>{described}</ul>
<nav>{nav}</nav>
</header>
<main>
{body}
</main>
</body>
</html>
"""
