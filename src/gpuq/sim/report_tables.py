"""The report's answers to who waited, why, and what it cost (:mod:`gpuq.sim.report` sections).

- **Who waited and why** (:func:`waits_tables`): per variant, how many workloads waited per cause,
  and the longest waits with their cause and the distinct pending messages each held, with when
  each began (the ``waits`` block, :mod:`gpuq.sim.waits`).
- **Deadlines** (:func:`deadline_tables`): per team and variant, met, missed, not yet finished;
  shown only when a workload declares a deadline.
- **Cost over the arrival window** (:func:`window_cost_tables`): the window stated, then per team
  and per group of nodes (flavor, pool, capacity type, GPU model) paid, used and idle, with the
  drain after the last arrival beside it (the ``windows`` block, :mod:`gpuq.sim.windows`).

Pure functions of the metrics: mappings walked in sorted order, every user string escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from gpuq.sim.report import _DASH, PRICES_HINT, Metrics, _duration, _empty, _fmt, _name, _num, priced

CAUSES = {
    "quota": "quota",
    "behind": "behind the head of its queue",
    "queued": "queued",
    "preempted": "preempted",
    "preempting": "its victims being evicted",
    "topology": "topology",
    "provisioning": "capacity being provisioned",
    "no-node": "no node with room",
    "evicted": "evicted",
    "inadmissible": "inadmissible",
    "other": "other",
}


_LIST = ' style="margin: 0; padding-left: 1.1em"'  # a list inside a table cell, without the page's margins


_MESSAGES_HEAD = '<span style="display: inline-block; min-width: 26em">pending messages</span>'


def _table(head: Sequence[str], rows: Sequence[str]) -> str:
    cells = "".join(f"<th>{h}</th>" for h in head)
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _variant_heading(variants: Sequence[Metrics], variant: Metrics) -> str:
    return f"<h3>{escape(_name(variant))}</h3>" if len(variants) > 1 else ""


# -- who waited and why --------------------------------------------------------------------------


def waits_tables(variants: Sequence[Metrics]) -> str:
    """Per variant: workloads that waited per cause, then the longest waits (module docstring)."""
    parts = [_variant_waits(variants, v) for v in variants if isinstance(v.get("waits"), Mapping)]
    return "\n".join(parts) or _empty("No variant recorded why workloads waited.")


def _variant_waits(variants: Sequence[Metrics], variant: Metrics) -> str:
    block: Mapping[str, Any] = variant["waits"]
    waited = int(_num(block.get("waited")) or 0)
    heading = _variant_heading(variants, variant)
    if not waited:
        return heading + _empty("No workload waited.")
    counts = block.get("by_cause") or {}
    told = ", ".join(
        f"{int(counts[kind])} {escape(CAUSES.get(kind, kind))}"
        for kind in sorted(counts, key=lambda k: (-counts[k], k))
    )
    longest = [r for r in block.get("longest") or [] if isinstance(r, Mapping)]
    intro = (
        f"<p>{waited} workload{'s' if waited != 1 else ''} waited for their pods to run; by the cause "
        f"that held longest: {told}. The {len(longest)} longest waits:</p>"
    )
    head = ("workload", "team", "class", "wait", "why it waited", "preempted by", _MESSAGES_HEAD)
    return heading + intro + _table(head, [_wait_row(r) for r in longest])


def _wait_row(row: Mapping[str, Any]) -> str:
    wait = _num(row.get("wait_s"))
    shown = _duration(wait) if wait is not None else _DASH
    if row.get("still_waiting"):
        shown += '<br><span class="muted">still waiting at the end</span>'
    requeued = _num(row.get("requeued_wait_s"))
    if requeued:
        shown += f'<br><span class="muted">+ {_duration(requeued)} after evictions</span>'
    by = ", ".join(escape(str(b)) for b in row.get("preempted_by") or []) or _DASH
    cells = [
        f"<td>{escape(str(row.get('workload') or '?'))}</td>",
        f"<td>{escape(str(row.get('team') or ''))}</td>",
        f"<td>{escape(str(row.get('class') or ''))}</td>",
        f'<td class="num" style="white-space: normal; min-width: 6em">{shown}</td>',
        f"<td>{escape(str(row.get('reason') or _DASH))}</td>",
        f"<td>{by}</td>",
        f"<td>{_messages(row)}</td>",
    ]
    return f"<tr>{''.join(cells)}</tr>"


def _messages(row: Mapping[str, Any]) -> str:
    """The distinct messages, each with when it began after submission; folded past the first."""
    messages = [m for m in row.get("messages") or [] if isinstance(m, Mapping)]
    if not messages:
        return _DASH
    items = [
        f"<li><b>+{_duration(max(_num(m.get('since_s')) or 0.0, 0.0))}</b> "
        f"{escape(str(m.get('reason') or ''))}: {escape(str(m.get('message') or ''))}</li>"
        for m in messages
    ]
    total = int(_num(row.get("messages_total")) or len(messages))
    more = f'<li class="muted">{total - len(messages)} more</li>' if total > len(messages) else ""
    if len(items) == 1:
        return f"<ul{_LIST}>{items[0]}</ul>"
    folded = f"<details><summary>{total} messages</summary><ol{_LIST}>{''.join(items)}{more}</ol></details>"
    return f"<ul{_LIST}>{items[0]}</ul>{folded}"


# -- deadlines -----------------------------------------------------------------------------------


def deadline_tables(variants: Sequence[Metrics]) -> str:
    """Per team and variant: deadlines declared, met, missed, not yet finished; then the latest."""
    per_variant = [{_name(t): t for t in (v.get("deadlines") or {}).get("teams") or []} for v in variants]
    teams = sorted({name for teams in per_variant for name in teams})
    if not teams:
        return _empty("No workload declares a deadline (gpuq.dev/deadline, gpuq.dev/deadline-after).")
    compare = len(variants) > 1
    head = ["team", *(["variant"] if compare else []), "declared", "met", "missed", "not yet finished"]
    rows = []
    for team in teams:
        for i, (variant, by_team) in enumerate(zip(variants, per_variant, strict=True)):
            row = by_team.get(team, {})
            first = f'<th rowspan="{len(variants)}">{escape(team)}</th>' if i == 0 else ""
            label = f"<td>{escape(_name(variant))}</td>" if compare else ""
            cells = "".join(
                f'<td class="num">{_fmt("int", _num(row.get(k)), variant) if row else _DASH}</td>'
                for k in ("declared", "met", "missed", "unfinished")
            )
            rows.append(f"<tr>{first}{label}{cells}</tr>")
    out = _table(head, rows)
    for variant in variants:
        missed = [m for m in (variant.get("deadlines") or {}).get("missed") or [] if isinstance(m, Mapping)]
        if missed:
            late = "".join(
                f"<tr><td>{escape(str(m.get('workload')))}</td><td>{escape(str(m.get('team')))}</td>"
                f'<td class="num">{_duration(_num(m.get("late_s")) or 0.0)}</td>'
                f"<td>{escape(str(m.get('status')))}</td></tr>"
                for m in missed
            )
            out += f"<p>Missed deadlines in <b>{escape(_name(variant))}</b>, latest first:</p>"
            out += _table(("workload", "team", "late by", "state at the end"), [late])
    return out


# -- cost over the arrival window ----------------------------------------------------------------

_PARTS = (("arrival", "arrival window"), ("drain", "drain after the last arrival"))


def window_text(variant: Metrics) -> str:
    """``arrival window 9m 9s – 11h 46m (11h 37m); drain 11h 46m – 19h 20m``: times since the start."""
    windows = variant.get("windows") or {}
    said = []
    for part, label in _PARTS:
        block = windows.get(part) or {}
        start, end = _num(block.get("start_s")), _num(block.get("end_s"))
        if start is None or end is None:
            continue
        said.append(
            f"{label} {_duration(start)} {_DASH} {_duration(end)} ({_duration(max(end - start, 0.0))})"
        )
    return "; ".join(said)


def window_cost_tables(variants: Sequence[Metrics]) -> str:
    """The window stated per variant, then cost per team and per group of nodes, window and drain."""
    shown = [v for v in variants if isinstance(v.get("windows"), Mapping)]
    if not shown:
        return _empty("The metrics hold no arrival window.")
    stated = "".join(f"<li><b>{escape(_name(v))}</b>: {window_text(v)}</li>" for v in shown)
    intro = (
        "<p>Figures over the trace window, from the first to the last arrival, with the drain after "
        f"the last arrival apart (times since the start of the run):</p><ul>{stated}</ul>"
    )
    if not any(priced(v) for v in shown):
        return intro + f'<p class="note">{escape(PRICES_HINT)}</p>'
    return intro + _team_costs(shown) + _group_costs(shown)


def _team_costs(variants: Sequence[Metrics]) -> str:
    """Per team, the priced GPU share its pods held, in the window and in the drain."""
    teams = sorted({t for v in variants for p, _ in _PARTS for t in _cost(v, p).get("by_team") or {}})
    head = ["team", *(f"{escape(_name(v))}: {label}" for v in variants for _, label in _PARTS)]
    rows = []
    for team in teams:
        cells = "".join(
            f'<td class="num">{_fmt("money", _num((_cost(v, p).get("by_team") or {}).get(team)), v)}</td>'
            for v in variants
            for p, _ in _PARTS
        )
        rows.append(f"<tr><th>{escape(team)}</th>{cells}</tr>")
    for key, label in (
        ("used", "used (all teams)"),
        ("idle", "idle (paid, no pod)"),
        ("total", "total paid"),
    ):
        cells = "".join(
            f'<td class="num">{_fmt("money", _num(_cost(v, p).get(key)), v)}</td>'
            for v in variants
            for p, _ in _PARTS
        )
        rows.append(f"<tr><th>{label}</th>{cells}</tr>")
    return "<h3>Cost per team</h3>" + _table(head, rows)


def group_label(group: Mapping[str, Any]) -> str:
    """``on-demand H100-80GB (pool h100-ondemand, flavor h100)``: what a finance reader calls it."""
    kind = str(group.get("capacity_type") or "unpriced capacity type")
    model = str(group.get("gpu_model") or "no GPU")
    where = [f"{k} {group[k]}" for k in ("pool", "flavor") if group.get(k)]
    return f"{kind} {model}" + (f" ({', '.join(where)})" if where else "")


def _group_costs(variants: Sequence[Metrics]) -> str:
    """Per variant, one row per group of nodes: what was paid, what pods used, what stood idle."""
    head = (
        "nodes (capacity type, GPU model)",
        "part",
        "paid",
        "used",
        "idle",
        "GPU-hours in service",
        "GPU-hours held",
    )
    out = ["<h3>Cost per capacity type, pool and flavor: used and idle</h3>"]
    for variant in variants:
        rows = []
        for part, label in _PARTS:
            for group in _cost(variant, part).get("by_group") or []:
                if not isinstance(group, Mapping):
                    continue
                money = "".join(
                    f'<td class="num">{_fmt("money", _num(group.get(k)), variant)}</td>'
                    for k in ("paid", "used", "idle")
                )
                hours = "".join(
                    f'<td class="num">{_fmt("num", _num(group.get(k)), variant)}</td>'
                    for k in ("gpu_hours", "allocated_gpu_hours")
                )
                rows.append(f"<tr><td>{escape(group_label(group))}</td><td>{label}</td>{money}{hours}</tr>")
        if rows:
            out.append(_variant_heading(variants, variant) + _table(head, rows))
    return "".join(out)


def _cost(variant: Metrics, part: str) -> Mapping[str, Any]:
    block = ((variant.get("windows") or {}).get(part) or {}).get("cost")
    return block if isinstance(block, Mapping) else {}
