"""Charts of the HTML report as inline SVG drawn here, so the page needs no JavaScript at all.

Why not plotly.js: the whole bundle is 4.8 MB and its smallest build with bars and lines
(``plotly.js-basic-dist-min`` 4.1.1) still 1.19 MB, most of a page that should stay well under
1.5 MB, before any data. SVG costs only the marks, prints as vectors, and is a pure function of
its input: coordinates are rounded to 0.1 px, ids are fixed, and the same data gives the same bytes.

A chart is a ``<figure class="chart">`` holding one legend (every entry names a series) and a
grid of panels; each panel is one ``<svg>`` of fixed view box that scales with the page. Every
drawn series is an element of class ``mark``; a panel with nothing to draw says "no data".
All text is escaped here: callers pass plain strings.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Literal

Kind = Literal["step", "area", "bars"]
_LEFT, _RIGHT, _TOP, _BOTTOM = 58.0, 16.0, 30.0, 42.0
_MUTED, _GRID = "#52606d", "#e4e7eb"


@dataclass(frozen=True)
class Series:
    """One legend entry's marks in a panel: a stepped line (bin averages and CDFs are step
    functions), a layer of a stacked area (layers of a panel share their x values) or bars."""

    name: str
    xs: Sequence[float | None]
    ys: Sequence[float | None]
    colour: str
    kind: Kind = "step"
    dash: str = ""
    """An SVG stroke-dasharray; empty for a solid line."""
    width: float = 1.6
    light: bool = False
    """Bars: a pale fill with an outline, the second half of a pair (lent beside borrowed)."""
    bar_width: float = 0.0
    """Bars on a numeric x axis: their width in x units (centred on x)."""


@dataclass(frozen=True)
class Axis:
    """An axis' label and range; ``hi`` None takes the top of the data, rounded up to a tick."""

    label: str = ""
    lo: float = 0.0
    hi: float | None = None
    percent: bool = False


@dataclass(frozen=True)
class Panel:
    """One plot. With ``categories`` the x axis names them and bars group per category, one
    slot per series in order; each series' ys then hold one value per category."""

    title: str
    series: Sequence[Series]
    x: Axis
    y: Axis
    categories: Sequence[str] = ()


def chart(chart_id: str, panels: Sequence[Panel], *, height: float = 300, wide: bool = False) -> str:
    """The figure: legend, then the panels in a grid (``wide``: one panel a row, a wider view box).
    ``height`` is the view box height of each panel in px at its natural width."""
    width = 900.0 if wide else 560.0
    drawn = "".join(_panel(p, width, height, f"{chart_id}-{i}") for i, p in enumerate(panels))
    grid = "panels wide" if wide else "panels"
    return (
        f'<figure class="chart" id="{escape(chart_id)}">{_legend(panels)}'
        f'<div class="{grid}">{drawn}</div></figure>'
    )


# -- scales and ticks ----------------------------------------------------------------------------


def _tick_step(lo: float, hi: float, count: int) -> float:
    """About ``count`` steps from ``lo`` to ``hi``: 1, 2, 2.5 or 5 times a power of ten."""
    raw = (hi - lo) / count
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * power >= raw * (1 - 1e-9))


def ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values from ``lo`` to ``hi``, both included where they are round."""
    if not hi > lo:
        hi = lo + 1.0
    step = _tick_step(lo, hi, count)
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return [round(i * step, 10) for i in range(first, last + 1)]


def nice_top(value: float) -> float:
    """The smallest round tick at or above ``value`` (1 where there is nothing above zero)."""
    if not value > 0:
        return 1.0
    step = _tick_step(0.0, value, 5)
    return round(math.ceil(value / step - 1e-9) * step, 10)


def _tick_text(value: float, percent: bool) -> str:
    if percent:
        return f"{value * 100:.0f}%"
    return format(round(value, 9), ",.12g")


def _c(value: float) -> str:
    """A coordinate, 0.1 px: the same data always writes the same text."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _finite(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _stacked(series: Sequence[Series]) -> list[tuple[Series, list[float], list[float]]]:
    """Each area layer with its base and top per point, layers summed in the order given."""
    layers = []
    base: list[float] = []
    for s in series:
        if s.kind != "area":
            continue
        values = [v if v is not None and math.isfinite(v) else 0.0 for v in s.ys]
        base = base + [0.0] * (len(values) - len(base))
        top = [b + v for b, v in zip(base, values, strict=False)]
        layers.append((s, base[: len(values)], top))
        base = top + base[len(top) :]
    return layers


def data_top(series: Sequence[Series]) -> float:
    """The top of the marks of a panel's series: stacked areas summed, lines and bars as they are."""
    values = _finite(y for s in series if s.kind != "area" for y in s.ys)
    values += [t for _, _, top in _stacked(series) for t in top]
    return max(values, default=0.0)


def _y_top(panel: Panel) -> float:
    return panel.y.hi if panel.y.hi is not None else nice_top(data_top(panel.series))


@dataclass(frozen=True)
class _Frame:
    """Data to pixels for one panel."""

    x0: float
    x1: float
    y0: float
    y1: float
    px0: float
    px1: float
    py0: float
    py1: float

    def x(self, value: float) -> float:
        span = self.x1 - self.x0 or 1.0
        return self.px0 + (min(max(value, self.x0), self.x1) - self.x0) / span * (self.px1 - self.px0)

    def y(self, value: float) -> float:
        span = self.y1 - self.y0 or 1.0
        return self.py1 - (min(max(value, self.y0), self.y1) - self.y0) / span * (self.py1 - self.py0)


# -- marks ---------------------------------------------------------------------------------------


def _step_path(frame: _Frame, xs: Sequence[float | None], ys: Sequence[float | None]) -> str:
    """``M x y H x V y ...``: each value holds until the next x; a null breaks the line, and runs
    of one height collapse into one horizontal."""
    parts: list[str] = []
    last_y: str | None = None
    for x, y in zip(xs, ys, strict=False):
        if x is None or y is None or not (math.isfinite(x) and math.isfinite(y)):
            last_y = None
            continue
        px, py = _c(frame.x(x)), _c(frame.y(y))
        if last_y is None:
            parts.append(f"M{px} {py}")
        else:
            if parts[-1].startswith("H") and "V" not in parts[-1]:
                parts.pop()  # the same height since the last x: one horizontal goes further
            parts.append(f"H{px}V{py}" if py != last_y else f"H{px}")
        last_y = py
    return "".join(parts) if any(not part.startswith("M") for part in parts) else ""


def _area_path(frame: _Frame, xs: Sequence[float | None], base: list[float], top: list[float]) -> str:
    """A stacked layer as one closed outline: along its top, then back along its base."""
    points = [(x, b, t) for x, b, t in zip(xs, base, top, strict=False) if x is not None]
    if len(points) < 2:
        return ""
    up = _step_path(frame, [x for x, _, _ in points], [t for _, _, t in points])
    # Back along the base: leftwards, the base of the bin that ends at each x.
    mirrored = [(x, points[max(i - 1, 0)][1]) for i, (x, _, _) in reversed(list(enumerate(points)))]
    back = _step_path(frame, [x for x, _ in mirrored], [b for _, b in mirrored])
    return f"{up}L{back[1:]}Z" if up and back else ""


def _line_mark(frame: _Frame, s: Series) -> str:
    d = _step_path(frame, s.xs, s.ys)
    if not d:
        return ""
    dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
    return (
        f'<path class="mark" d="{d}" fill="none" stroke="{s.colour}" stroke-width="{s.width:g}"{dash}>'
        f"<title>{escape(s.name)}</title></path>"
    )


def _area_mark(frame: _Frame, s: Series, base: list[float], top: list[float]) -> str:
    d = _area_path(frame, s.xs, base, top)
    if not d:
        return ""
    return (
        f'<path class="mark" d="{d}" fill="{s.colour}" fill-opacity="0.8" stroke="#fff" '
        f'stroke-width="0.6"><title>{escape(s.name)}</title></path>'
    )


def _bar(x: float, y: float, w: float, h: float, s: Series, tip: str) -> str:
    fill = f'fill="{s.colour}" fill-opacity="0.3" stroke="{s.colour}"' if s.light else f'fill="{s.colour}"'
    return (
        f'<rect class="mark" x="{_c(x)}" y="{_c(y)}" width="{_c(w)}" height="{_c(h)}" {fill}>'
        f"<title>{escape(tip)}</title></rect>"
    )


def _numeric_bars(frame: _Frame, s: Series) -> str:
    out = []
    for x, y in zip(s.xs, s.ys, strict=False):
        if x is None or y is None or not y > 0:
            continue
        left, right = frame.x(x - s.bar_width / 2), frame.x(x + s.bar_width / 2)
        top = frame.y(y)
        out.append(_bar(left, top, max(right - left, 0.5), frame.y(0.0) - top, s, f"{s.name}: {y:g}"))
    return "".join(out)


def _category_bars(frame: _Frame, panel: Panel) -> str:
    bars = [s for s in panel.series if s.kind == "bars"]
    band = (frame.px1 - frame.px0) / max(len(panel.categories), 1)
    slot = band * 0.8 / max(len(bars), 1)
    out = []
    for i, name in enumerate(panel.categories):
        for j, s in enumerate(bars):
            y = s.ys[i] if i < len(s.ys) else None
            if y is None or not y > 0:
                continue
            left = frame.px0 + i * band + band * 0.1 + j * slot
            top = frame.y(y)
            tip = f"{s.name} · {name}: {y:,.1f}"
            out.append(_bar(left, top, max(slot - 1, 0.5), frame.y(0.0) - top, s, tip))
    return "".join(out)


# -- panel and legend ----------------------------------------------------------------------------


def _axes(frame: _Frame, panel: Panel) -> str:
    """Grid lines with tick labels, axis titles and, for categories, their names."""
    out = []
    for value in ticks(frame.y0, frame.y1):
        py = _c(frame.y(value))
        out.append(f'<path d="M{_c(frame.px0)} {py}H{_c(frame.px1)}" stroke="{_GRID}"/>')
        out.append(
            f'<text x="{_c(frame.px0 - 6)}" y="{py}" text-anchor="end" dy=".32em">'
            f"{_tick_text(value, panel.y.percent)}</text>"
        )
    base = _c(frame.py1)
    out.append(f'<path d="M{_c(frame.px0)} {base}H{_c(frame.px1)}" stroke="{_MUTED}"/>')
    if panel.categories:
        band = (frame.px1 - frame.px0) / len(panel.categories)
        turn = any(len(name) * 6.5 > band for name in panel.categories)
        for i, name in enumerate(panel.categories):
            px = frame.px0 + (i + 0.5) * band
            shown = name if len(name) <= 22 else name[:21] + "…"
            at = f'x="{_c(px)}" y="{_c(frame.py1 + 14)}" text-anchor="middle"'
            if turn:  # read upwards to the right, ending under the bars
                at = f'x="{_c(px + 4)}" y="{_c(frame.py1 + 10)}" text-anchor="end" '
                at += f'transform="rotate(-40 {_c(px + 4)} {_c(frame.py1 + 10)})"'
            out.append(f"<text {at}><title>{escape(name)}</title>{escape(shown)}</text>")
    else:
        for value in ticks(frame.x0, frame.x1, 6):
            at_x = _c(frame.x(value))
            out.append(f'<path d="M{at_x} {base}v4" stroke="{_MUTED}"/>')
            label = _tick_text(value, False)
            out.append(f'<text x="{at_x}" y="{_c(frame.py1 + 16)}" text-anchor="middle">{label}</text>')
    if panel.x.label:
        out.append(
            f'<text class="axis" x="{_c((frame.px0 + frame.px1) / 2)}" y="{_c(frame.py1 + 34)}" '
            f'text-anchor="middle">{escape(panel.x.label)}</text>'
        )
    if panel.y.label:
        mid = _c((frame.py0 + frame.py1) / 2)
        out.append(
            f'<text class="axis" x="12" y="{mid}" transform="rotate(-90 12 {mid})" '
            f'text-anchor="middle">{escape(panel.y.label)}</text>'
        )
    return "".join(out)


def _panel(panel: Panel, width: float, height: float, panel_id: str) -> str:
    bottom = _BOTTOM + (40 if panel.categories else 0)
    x_hi = panel.x.hi
    if x_hi is None:
        x_hi = nice_top(max(_finite(x for s in panel.series for x in s.xs), default=0.0))
    frame = _Frame(panel.x.lo, x_hi, panel.y.lo, _y_top(panel), _LEFT, width - _RIGHT, _TOP, height - bottom)
    marks = [_area_mark(frame, s, base, top) for s, base, top in _stacked(panel.series)]
    for s in panel.series:
        if s.kind == "step":
            marks.append(_line_mark(frame, s))
        elif s.kind == "bars" and not panel.categories:
            marks.append(_numeric_bars(frame, s))
    if panel.categories:
        marks.append(_category_bars(frame, panel))
    drawn = "".join(marks)
    if not drawn:
        drawn = (
            f'<text class="no-data" x="{_c((frame.px0 + frame.px1) / 2)}" '
            f'y="{_c((frame.py0 + frame.py1) / 2)}" text-anchor="middle">no data</text>'
        )
    title = escape(panel.title)
    return (
        f'<svg class="panel" id="{escape(panel_id)}" viewBox="0 0 {width:g} {height:g}" role="img" '
        f'aria-label="{title}"><text class="title" x="{_c(_LEFT)}" y="18">{title}</text>'
        f"{_axes(frame, panel)}{drawn}</svg>"
    )


def _key(s: Series) -> str:
    """A legend swatch drawn like the series: a line with its dash, or a filled box."""
    if s.kind == "step":
        dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        mark = f'<path d="M1 6H23" stroke="{s.colour}" stroke-width="{max(s.width, 2):g}"{dash}/>'
    else:
        fill = (
            f'fill="{s.colour}" fill-opacity="0.3" stroke="{s.colour}"' if s.light else f'fill="{s.colour}"'
        )
        mark = f'<rect x="4" y="1" width="16" height="10" {fill}/>'
    return f'<svg class="key" viewBox="0 0 24 12" width="24" height="12" aria-hidden="true">{mark}</svg>'


def _legend(panels: Sequence[Panel]) -> str:
    """One entry per distinct series (name, colour and dash), in the order they first appear."""
    seen: dict[tuple[str, str, str, bool], Series] = {}
    for panel in panels:
        for s in panel.series:  # a team's line and its area are one entry: the name and colour say it
            seen.setdefault((s.name, s.colour, s.dash, s.light), s)
    if not seen:
        return ""
    items = "".join(f"<li>{_key(s)}{escape(s.name)}</li>" for s in seen.values())
    return f'<ul class="legend">{items}</ul>'
