"""The cost and provisioning sections of the HTML report (:mod:`gpuq.sim.report`).

Shown only when a variant's metrics carry ``cost_attribution`` or ``provisioning`` (a Scenario
with ``spec.provisioning``), so reports of other scenarios do not change:

- **Cost**: the bill per namespace, ClusterQueue, pool and capacity type beside what nobody used
  (idle), idle GPU-hours (provisioned but unallocated per pool; allocated but unused per
  namespace) and idle alerts, spot money saved against the GPU-hours interruptions lost, and the
  checkpoints' overhead; one column per variant.
- **Provisioning timeline**: per variant, nodes in service per pool (stacked) beside nodes per
  capacity type, ProvisioningRequests waiting, and fallbacks and spot interruptions per bin.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gpuq.sim.report import _DASH, _PALETTE, Metrics, _empty, _figure, _fmt, _line, _name, _num, _titles

_Rows = list[tuple[str, str, Callable[[Metrics], float | None]]]


def _get(*path: str) -> Callable[[Metrics], float | None]:
    def get(variant: Metrics) -> float | None:
        node: Any = variant
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        return _num(node)

    return get


def _keys(variants: Sequence[Metrics], *path: str) -> list[str]:
    """The union of the keys of the mapping at ``path`` over the variants, sorted."""
    names: set[str] = set()
    for variant in variants:
        node: Any = variant
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping):
            names |= {str(k) for k in node}
    return sorted(names)


def _cost_rows(variants: Sequence[Metrics]) -> list[tuple[str, _Rows]]:
    """Groups of (label, format, getter) rows, in the order the table shows them."""
    ca = ("cost_attribution",)
    spot = ("provisioning", "spot")
    groups: list[tuple[str, _Rows]] = [
        (
            "bill",
            [("total", "money", _get(*ca, "total")), ("idle (no pod paid)", "money", _get(*ca, "idle"))],
        ),
    ]
    for block, title in (
        ("by_namespace", "per namespace"),
        ("by_cluster_queue", "per ClusterQueue"),
        ("by_pool", "per pool"),
        ("by_capacity_type", "per capacity type"),
    ):
        rows: _Rows = [(escape(k), "money", _get(*ca, block, k)) for k in _keys(variants, *ca, block)]
        groups.append((title, rows))
    idle = (*ca, "idle_gpu_hours")
    alerts = (*ca, "idle_alerts")
    groups.append(
        (
            "idle GPU-hours",
            [
                ("provisioned, unallocated", "num", _get(*idle, "provisioned_unallocated")),
                *(
                    (f"unallocated · {escape(k)}", "num", _get(*idle, "unallocated_by_pool", k))
                    for k in _keys(variants, *idle, "unallocated_by_pool")
                ),
                ("allocated, unused", "num", _get(*idle, "allocated_unused")),
                *(
                    (
                        f"allocated, unused · {escape(k)}",
                        "num",
                        _get(*idle, "allocated_unused_by_namespace", k),
                    )
                    for k in _keys(variants, *idle, "allocated_unused_by_namespace")
                ),
            ],
        )
    )
    groups.append(
        (
            "idle alerts",
            [
                ("threshold", "dur", _get(*alerts, "threshold_s")),
                ("GPUs idle past it", "int", _get(*alerts, "count")),
                ("their idle GPU-hours", "num", _get(*alerts, "idle_gpu_hours")),
                *(
                    (f"GPUs · {escape(k)}", "int", _get(*alerts, "by_pool", k, "count"))
                    for k in _keys(variants, *alerts, "by_pool")
                ),
                *(
                    (
                        f"allocated, unused · {escape(k)}",
                        "int",
                        _get(*alerts, "allocated_unused_by_namespace", k, "count"),
                    )
                    for k in _keys(variants, *alerts, "allocated_unused_by_namespace")
                ),
            ],
        )
    )
    groups.append(
        (
            "spot and checkpoints",
            [
                ("spot node-hours", "num", _get(*spot, "node_hours")),
                ("spot saved vs on-demand", "money", _get(*spot, "saved")),
                ("spot interruptions", "int", _get(*spot, "interruptions")),
                ("GPU-hours lost to them", "num", _get(*spot, "lost_gpu_hours")),
                ("checkpoint overhead GPU-hours", "num", _get(*spot, "checkpoint_overhead_gpu_hours")),
            ],
        )
    )
    return groups


def cost_tables(variants: Sequence[Metrics]) -> str:
    """The cost section: one table, a column per variant, grouped rows."""
    shown = [v for v in variants if v.get("cost_attribution")]
    if not shown:
        return _empty("No variant simulates provisioning: no cost attribution.")
    head = "".join(f"<th>{escape(_name(v))}</th>" for v in variants)
    body = []
    for title, rows in _cost_rows(variants):
        if not rows:
            continue
        body.append(f'<tr><th colspan="{len(variants) + 1}">{escape(title)}</th></tr>')
        for label, kind, get in rows:
            cells = "".join(
                f'<td class="num">{_fmt(kind, get(v), v) if v.get("cost_attribution") else _DASH}</td>'
                for v in variants
            )
            body.append(f"<tr><td>{label}</td>{cells}</tr>")
    intro = (
        "<p>The bill is every node's price for its time in service; each workload pays its GPUs' "
        "share of it while it holds them, and what nobody paid is idle (namespaces + idle = bill).</p>"
    )
    return f"{intro}<table><thead><tr><th></th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _bins(timeline: Mapping[str, Any], values: Sequence[Any]) -> tuple[list[float], list[float | None]]:
    """Bin values against bin starts in hours, closed at the end of the last bin."""
    width = _num(timeline.get("bin_s")) or 0.0
    ys = [_num(v) for v in values]
    if not ys or width <= 0:
        return [], []
    xs = [i * width / 3600 for i in range(len(ys) + 1)]
    return xs, [*ys, ys[-1]]


def timeline_figure(variants: Sequence[Metrics]) -> str:
    """Per variant: nodes per pool (stacked) | nodes per capacity type, requests waiting, and the
    fallbacks and spot interruptions of each bin (bars)."""
    shown = [v for v in variants if (v.get("provisioning") or {}).get("timeline")]
    if not shown:
        return _empty("No variant simulates provisioning: no timeline.")
    rows = len(shown)
    titles = _titles(shown, "nodes in service per pool (stacked)", "capacity types, requests and events")
    spacing = {"horizontal_spacing": 0.07, "vertical_spacing": 0.12 / rows}
    fig = make_subplots(rows=rows, cols=2, shared_xaxes=True, subplot_titles=titles, **spacing)
    pools = _keys(shown, "provisioning", "timeline", "nodes_by_pool")
    colours = {name: _PALETTE[i % 10] for i, name in enumerate(pools)}
    kinds = _keys(shown, "provisioning", "timeline", "nodes_by_capacity_type")
    dashes = ("solid", "dash", "dot", "dashdot", "longdash")
    for row, variant in enumerate(shown, start=1):
        timeline = variant["provisioning"]["timeline"]
        first = row == 1
        for pool, values in sorted((timeline.get("nodes_by_pool") or {}).items()):
            trace = _line(*_bins(timeline, values), escape(pool), line_color=colours.get(pool))
            fig.add_trace(
                trace.update(legendgroup=f"pool-{pool}", showlegend=first, stackgroup=f"p{row}"),
                row=row,
                col=1,
            )
        for kind, values in sorted((timeline.get("nodes_by_capacity_type") or {}).items()):
            dash = dashes[kinds.index(kind) % len(dashes)]
            xs, ys = _bins(timeline, values)
            trace = _line(xs, ys, f"nodes · {escape(kind)}", line_color="#1f2933", line_dash=dash)
            fig.add_trace(trace.update(legendgroup=f"kind-{kind}", showlegend=first), row=row, col=2)
        waiting = timeline.get("requests_waiting") or []
        if any(_num(v) for v in waiting):
            trace = _line(*_bins(timeline, waiting), "requests waiting", line_color="#e15759")
            fig.add_trace(trace.update(legendgroup="waiting", showlegend=True), row=row, col=2)
        width = (_num(timeline.get("bin_s")) or 0.0) / 3600
        for key, label, colour in (
            ("fallbacks", "fallbacks", "#f28e2b"),
            ("spot_interruptions", "spot interruptions", "#b07aa1"),
        ):
            counts = [_num(c) or 0.0 for c in timeline.get(key) or []]
            if not any(counts):
                continue
            xs = [(i + 0.5) * width for i in range(len(counts))]
            bar = go.Bar(x=xs, y=counts, name=label, marker_color=colour, width=width, opacity=0.7)
            fig.add_trace(bar.update(legendgroup=key, showlegend=True), row=row, col=2)
    fig.update_yaxes(title_text="nodes", col=1)
    fig.update_yaxes(title_text="nodes / requests / events", col=2)
    fig.update_xaxes(title_text="simulated time (h)", row=rows)
    return _figure(fig, "fig-provisioning", 120 + 300 * rows, barmode="overlay")
