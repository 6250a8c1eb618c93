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

from gpuq.sim.charts import Axis, Panel, Series, chart, data_top, nice_top
from gpuq.sim.report import (
    _DASH,
    _PALETTE,
    Metrics,
    _empty,
    _fmt,
    _name,
    _num,
    _titles,
    time_scale,
)

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


def _bins(
    timeline: Mapping[str, Any], values: Sequence[Any], per_s: float
) -> tuple[list[float | None], list[float | None]]:
    """Bin values against bin starts in units of ``per_s`` seconds, closed at the end of the last bin."""
    width = _num(timeline.get("bin_s")) or 0.0
    ys = [_num(v) for v in values]
    if not ys or width <= 0:
        return [], []
    xs: list[float | None] = [i * width / per_s for i in range(len(ys) + 1)]
    return xs, [*ys, ys[-1]]


def _timeline_end_s(timeline: Mapping[str, Any]) -> float:
    """Where a timeline ends: its bin width times its longest list of bins."""
    lengths = [len(v) for v in timeline.values() if isinstance(v, list)]
    lengths += [len(v) for m in timeline.values() if isinstance(m, Mapping) for v in m.values()]
    return (_num(timeline.get("bin_s")) or 0.0) * max(lengths, default=0)


def _events(timeline: Mapping[str, Any], per_s: float) -> list[Series]:
    """Fallbacks and spot interruptions per bin, as bars across their bin."""
    width = (_num(timeline.get("bin_s")) or 0.0) / per_s
    bars = []
    for key, label, colour in (
        ("fallbacks", "fallbacks", "#f28e2b"),
        ("spot_interruptions", "spot interruptions", "#b07aa1"),
    ):
        counts: list[float | None] = [_num(c) or 0.0 for c in timeline.get(key) or []]
        if any(counts):
            xs: list[float | None] = [(i + 0.5) * width for i in range(len(counts))]
            bars.append(Series(label, xs, counts, colour, "bars", bar_width=width))
    return bars


def timeline_figure(variants: Sequence[Metrics]) -> str:
    """Per variant: nodes per pool (stacked) | nodes per capacity type, requests waiting, and the
    fallbacks and spot interruptions of each bin (bars); one time axis and, per column, one y
    range for every variant."""
    shown = [v for v in variants if (v.get("provisioning") or {}).get("timeline")]
    if not shown:
        return _empty("No variant simulates provisioning: no timeline.")
    end_s = max(_timeline_end_s(v["provisioning"]["timeline"]) for v in shown)
    unit, per_s = time_scale(end_s)
    time_axis = Axis(f"simulated time ({unit})", hi=end_s / per_s if end_s else None)
    pools = _keys(shown, "provisioning", "timeline", "nodes_by_pool")
    colours = {name: _PALETTE[i % 10] for i, name in enumerate(pools)}
    kinds = _keys(shown, "provisioning", "timeline", "nodes_by_capacity_type")
    dashes = ("", "6 3", "2 2", "6 2 2 2", "10 3")
    rows = []
    for variant in shown:
        timeline = variant["provisioning"]["timeline"]
        stacked = [
            Series(pool, *_bins(timeline, values, per_s), colours.get(pool, "#52606d"), "area")
            for pool, values in sorted((timeline.get("nodes_by_pool") or {}).items())
        ]
        lines = [
            Series(
                f"nodes · {kind}",
                *_bins(timeline, values, per_s),
                "#1f2933",
                dash=dashes[kinds.index(kind) % 5],
            )
            for kind, values in sorted((timeline.get("nodes_by_capacity_type") or {}).items())
        ]
        waiting = timeline.get("requests_waiting") or []
        if any(_num(v) for v in waiting):
            lines.append(Series("requests waiting", *_bins(timeline, waiting, per_s), "#e15759"))
        rows.append((stacked, lines + _events(timeline, per_s)))
    left_top = nice_top(max((data_top(left) for left, _ in rows), default=0.0))
    right_top = nice_top(max((data_top(right) for _, right in rows), default=0.0))
    titles = _titles(shown, "nodes in service per pool (stacked)", "capacity types, requests and events")
    panels = []
    for i, (left, right) in enumerate(rows):
        panels.append(Panel(titles[2 * i], left, time_axis, Axis("nodes", hi=left_top)))
        right_axis = Axis("nodes / requests / events", hi=right_top)
        panels.append(Panel(titles[2 * i + 1], right, time_axis, right_axis))
    return chart("fig-provisioning", panels, height=300)
