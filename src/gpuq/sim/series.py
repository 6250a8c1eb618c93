"""Piecewise-constant quantities over simulated time, binned into time-weighted averages.

A quantity changes at discrete instants; between them it is constant. Only the
change points are kept while the simulation runs (the last one overwritten when
several changes share an instant), and :func:`binned` averages them over fixed
bins at the end, when the simulated span is known.
"""

from __future__ import annotations

from collections.abc import Sequence


class StepSeries:
    """Change points of one quantity; its value before the first point is ``initial``."""

    __slots__ = ("initial", "times", "value", "values")

    def __init__(self, initial: float = 0.0) -> None:
        self.initial = initial
        self.value = initial
        self.times: list[float] = []
        self.values: list[float] = []

    def set(self, time: float, value: float) -> None:
        if value == self.value:
            return
        self.value = value
        if self.times and self.times[-1] == time:
            self.values[-1] = value
        else:
            self.times.append(time)
            self.values.append(value)

    def add(self, time: float, delta: float) -> None:
        self.set(time, self.value + delta)

    def integral(self, end: float) -> float:
        """∫ value dt from 0 to ``end``."""
        return sum(binned(self, end, 1)) * end if end > 0 else 0.0


def binned(series: StepSeries, end: float, bins: int) -> list[float]:
    """Time-weighted average of the series over ``bins`` equal bins covering [0, end)."""
    if bins <= 0 or end <= 0:
        return []
    width = end / bins
    area = [0.0] * bins
    value, start = series.initial, 0.0
    for time, new in zip([*series.times, end], [*series.values, series.value], strict=True):
        _spread(area, width, start, min(time, end), value)
        if time >= end:
            break
        value, start = new, time
    return [a / width for a in area]


def _spread(area: list[float], width: float, start: float, stop: float, value: float) -> None:
    """Add ``value`` × overlap to every bin [start, stop) touches."""
    if stop <= start or value == 0:
        return
    first = min(int(start / width), len(area) - 1)
    last = min(int(stop / width), len(area) - 1)
    if first == last:
        area[first] += value * (stop - start)
        return
    area[first] += value * ((first + 1) * width - start)
    for index in range(first + 1, last):
        area[index] += value * width
    area[last] += value * (stop - last * width)


def ratio(numerator: Sequence[float], denominator: Sequence[float]) -> list[float]:
    """Element-wise ratio, 0 where the denominator is 0."""
    return [n / d if d else 0.0 for n, d in zip(numerator, denominator, strict=True)]
