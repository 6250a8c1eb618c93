"""The trade-off in words: what changed between variants, and for whom, from the metrics alone.

A platform lead reads two columns of figures and has to find the story: which teams waited less,
which waited more, what the preemptions cost. :func:`trade_offs` writes it as a few sentences, one
per variant after the first (the baseline), computed from the variants' ``metrics.json`` blocks and
never written per example. A change is told only when it matters: a wait quantile that moved by at
least :data:`MIN_WAIT_CHANGE_S` and by :data:`MIN_RELATIVE` of the larger value, a share of GPU
allocation that moved by a percentage point, a cost by one percent.

Cost and the mean allocation are over the arrival window (first to last arrival) where the metrics
carry one (``windows``); a change of cost is explained by its parts, per capacity type and GPU
model: what was paid for them (``on-demand H100-80GB +410``) or, where that did not move, what of
it stood idle (``reserved A100-80GB idle −111``), the largest :data:`COST_PARTS` first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuq.sim.metrics import finite_number, headline_cost

MIN_WAIT_CHANGE_S = 60.0
MIN_RELATIVE = 0.10
MIN_ALLOCATION_POINTS = 0.01
MIN_COST_RELATIVE = 0.01
COST_PARTS = 3

Metrics = Mapping[str, Any]


_UNITS = ((90.0, 1.0, "s", 0), (90 * 60.0, 60.0, "min", 0), (48 * 3600.0, 3600.0, "h", 1))


def human_duration(seconds: float, scale: float | None = None) -> str:
    """``45 s``, ``12 min``, ``4.0 h``, ``2.5 d``: the unit a person would say for ``scale`` (default
    ``seconds`` itself), so that both sides of a change read in one unit (``4.0 h → 1.1 h``)."""
    size = seconds if scale is None else scale
    for below, unit_s, unit, digits in _UNITS:
        if size < below:
            return f"{seconds / unit_s:.{digits}f} {unit}"
    return f"{seconds / 86400:.1f} d"


def _wait(stats: Mapping[str, Any], quantile: str) -> float | None:
    return finite_number((stats.get("wait_s") or {}).get(quantile))


def _moved(old: float | None, new: float | None) -> bool:
    if old is None or new is None:
        return False
    change = abs(new - old)
    return change >= MIN_WAIT_CHANGE_S and change >= MIN_RELATIVE * max(old, new)


def _team_change(team: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[float, str] | None:
    """``(signed change, "team (p90 a → b, max c → d)")`` when the team's waits moved."""
    parts, direction = [], 0.0
    for quantile, label in (("p90", "p90"), ("max", "max")):
        before, after = _wait(old, quantile), _wait(new, quantile)
        if _moved(before, after):
            assert before is not None and after is not None
            scale = max(before, after)
            parts.append(f"{label} {human_duration(before, scale)} → {human_duration(after, scale)}")
            direction = direction or (after - before)
    if not parts:
        return None
    return direction, f"{team} (" + ", ".join(parts) + ")"


def _teams(base: Metrics, variant: Metrics) -> list[str]:
    before = {str(t.get("name")): t for t in base.get("teams") or []}
    after = {str(t.get("name")): t for t in variant.get("teams") or []}
    changes = [
        change
        for name in sorted(before.keys() & after.keys())
        if (change := _team_change(name, before[name], after[name])) is not None
    ]
    faster = [text for delta, text in sorted(changes) if delta < 0]
    slower = [text for delta, text in sorted(changes, reverse=True) if delta > 0]
    out = []
    if faster:
        out.append("waits fell for " + ", ".join(faster))
    if slower:
        out.append(("rose for " if faster else "waits rose for ") + ", ".join(slower))
    return out


def _preemptions(base: Metrics, variant: Metrics) -> str | None:
    count = int(finite_number((variant.get("workloads") or {}).get("preemptions")) or 0)
    lost = finite_number((variant.get("overall") or {}).get("lost_gpu_hours")) or 0.0
    base_count = int(finite_number((base.get("workloads") or {}).get("preemptions")) or 0)
    base_lost = finite_number((base.get("overall") or {}).get("lost_gpu_hours")) or 0.0
    if count == base_count and abs(lost - base_lost) < 0.05:
        return None
    noun = "preemption" if count == 1 else "preemptions"
    text = f"{count} {noun} lost {lost:.1f} GPU-hours"
    return f"{text} ({_name(base)}: {base_count}, {base_lost:.1f})" if base_count or base_lost else text


def _allocation(base: float | None, variant: float | None) -> str | None:
    if base is None or variant is None or abs(variant - base) < MIN_ALLOCATION_POINTS:
        return None
    return f"mean GPU allocation {100 * base:.1f} % → {100 * variant:.1f} %"


def _cost(base: Metrics, variant: Metrics) -> str | None:
    old, new = (headline_cost(m, "total") for m in (base, variant))
    currency = str((variant.get("cost") or {}).get("currency") or "")
    if old is None or new is None or not (old or new):
        return None
    least = MIN_COST_RELATIVE * max(old, new)
    windowed = all(isinstance(m.get("windows"), Mapping) for m in (base, variant))
    if abs(new - old) >= least:
        text = f"cost total {old:,.0f} → {new:,.0f} {currency}".rstrip()
        if not windowed:
            return text
        parts = _cost_parts(base, variant, least)
        return text + " over the arrival window" + (f" ({_signed(new - old)}: {parts})" if parts else "")
    if not windowed:
        return None
    idle_old, idle_new = (headline_cost(m, "idle") or 0.0 for m in (base, variant))
    if abs(idle_new - idle_old) < least:
        return None
    parts = _cost_parts(base, variant, least)
    return (
        f"cost total unchanged ({f'{new:,.0f} {currency}'.rstrip()} over the arrival window), "
        f"idle {_signed(idle_new - idle_old)}" + (f": {parts}" if parts else "")
    )


def _signed(amount: float) -> str:
    """``+410``, ``−111`` (a minus sign, as a finance reader writes it)."""
    return f"{amount:+,.0f}".replace("-", "−")


def _groups(variant: Metrics) -> dict[str, tuple[float, float]]:
    """Per ``capacity type GPU model``, (paid, idle) over the arrival window."""
    cost = ((variant.get("windows") or {}).get("arrival") or {}).get("cost") or {}
    out: dict[str, tuple[float, float]] = {}
    for group in cost.get("by_group") or []:
        if not isinstance(group, Mapping):
            continue
        label = " ".join(str(group.get(k) or "") for k in ("capacity_type", "gpu_model")).strip()
        label = label or "unlabelled"
        paid, idle = out.get(label, (0.0, 0.0))
        out[label] = (
            paid + (finite_number(group.get("paid")) or 0.0),
            idle + (finite_number(group.get("idle")) or 0.0),
        )
    return out


def _cost_parts(base: Metrics, variant: Metrics, least: float) -> str:
    """The largest changes per capacity type and GPU model: paid, else idle (module docstring)."""
    before, after = _groups(base), _groups(variant)
    changes = []
    for label in sorted(before.keys() | after.keys()):
        paid_old, idle_old = before.get(label, (0.0, 0.0))
        paid_new, idle_new = after.get(label, (0.0, 0.0))
        if abs(paid_new - paid_old) >= least:
            changes.append((paid_new - paid_old, f"{label} {_signed(paid_new - paid_old)}"))
        elif abs(idle_new - idle_old) >= least:
            changes.append((idle_new - idle_old, f"{label} idle {_signed(idle_new - idle_old)}"))
    changes.sort(key=lambda c: (-abs(c[0]), c[1]))
    return ", ".join(text for _, text in changes[:COST_PARTS])


def _name(metrics: Metrics) -> str:
    return str(metrics.get("name") or "?")


def trade_offs(variants: Sequence[Metrics], allocation: Sequence[float | None] = ()) -> list[str]:
    """One sentence per variant after the first, against the first; ``allocation`` is each variant's
    mean GPU allocation (0..1) when the caller has it. A variant that changed nothing that matters
    says so."""
    if len(variants) < 2:
        return []
    base = variants[0]
    sentences = []
    for index, variant in enumerate(variants[1:], start=1):
        clauses = _teams(base, variant)
        clauses += [
            c
            for c in (
                _preemptions(base, variant),
                _allocation(*_pair(allocation, index)),
                _cost(base, variant),
            )
            if c
        ]
        head = f"{_name(variant)} against {_name(base)}: "
        body = "; ".join(clauses) if clauses else "no wait, preemption, allocation or cost changed that much"
        sentences.append(head + body + ".")
    return sentences


def _pair(values: Sequence[float | None], index: int) -> tuple[float | None, float | None]:
    if len(values) <= index:
        return None, None
    return values[0], values[index]
