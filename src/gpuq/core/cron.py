"""Cron schedules as Kubernetes' CronJob controller reads them (``robfig/cron`` standard parser).

A schedule is five space-separated fields, minute hour day-of-month month day-of-week, each
``*``, a number, a range ``a-b``, a step ``*/n`` or ``a-b/n``, or a comma list of those; months
and weekdays also take three-letter names (``JAN``, ``MON``), and ``7`` is Sunday as ``0`` is.
The macros ``@yearly`` (``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``) and
``@hourly`` stand for their five-field forms. As in cron (and ``robfig/cron``), when both
day-of-month and day-of-week are restricted a day matches either. Times are UTC seconds since
the epoch; ``CRON_TZ=``/``TZ=`` prefixes and ``@every`` are refused (the CronJob API refuses
``TZ`` in the schedule too). A CronJob's ``spec.timeZone`` is a ``tzinfo`` given to
:meth:`Schedule.next_after`: the fields are then read on that zone's wall clock, as the CronJob
controller does (``robfig/cron`` with a location): a wall time that a change to daylight-saving
time skips does not run that day ("jobs scheduled during daylight-savings leap-ahead transitions
will not be run", robfig/cron's doc), and one that the change back repeats runs at both instants.
"""

from __future__ import annotations

import calendar
import datetime
from dataclasses import dataclass

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_NAMES = {
    3: {m.upper(): i for i, m in enumerate(calendar.month_abbr) if m},
    4: {d.upper(): (i + 1) % 7 for i, d in enumerate(calendar.day_abbr)},
}
_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_FIELD_NAMES = ("minute", "hour", "day of month", "month", "day of week")
_SEARCH_YEARS = 5
_EPOCH = datetime.datetime(1970, 1, 1)
_LARGEST_CHANGE_S = 3 * 3600  # larger than any zone's change of offset (2 h at most)


class CronError(ValueError):
    """A schedule that is not a standard cron expression; the message says which field."""


@dataclass(frozen=True)
class Schedule:
    """The allowed values of each field; ``*_any`` say the day fields were ``*`` (or ``?``)."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    days_any: bool
    weekdays_any: bool

    def next_after(self, t_s: float, zone: datetime.tzinfo | None = None) -> float | None:
        """The first scheduled time strictly after ``t_s`` (UTC seconds), None within 5 years; with
        ``zone``, the fields are matched on that zone's wall clock (the module doc)."""
        if zone is None:
            return self._next_after_utc(t_s)
        wall = datetime.datetime.fromtimestamp(t_s, zone).replace(tzinfo=None)
        # from a little before: a wall time the change back repeats can come after t_s again
        after = (wall - _EPOCH).total_seconds() - _LARGEST_CHANGE_S
        while True:
            found = self._next_after_utc(after)
            if found is None:
                return None
            naive = _EPOCH + datetime.timedelta(seconds=found)
            for fold in (0, 1):  # a wall time repeated by a change back: both of its instants
                at = naive.replace(tzinfo=zone, fold=fold).timestamp()
                if datetime.datetime.fromtimestamp(at, zone).replace(tzinfo=None) != naive:
                    break  # a wall time the change forward skips: it never comes, it does not run
                if at > t_s:
                    return at
            after = found

    def _next_after_utc(self, t_s: float) -> float | None:
        minute = int(t_s // 60) + 1
        limit = minute + _SEARCH_YEARS * 366 * 24 * 60
        while minute < limit:
            year, month, day, hour, mins, weekday = _fields(minute * 60)
            if month not in self.months:
                minute = _start_of_next_month(year, month) // 60
            elif not self._day_matches(day, weekday):
                minute = (minute // 1440 + 1) * 1440
            elif hour not in self.hours:
                minute = (minute // 60 + 1) * 60
            elif mins not in self.minutes:
                minute += 1
            else:
                return float(minute * 60)
        return None

    def _day_matches(self, day: int, weekday: int) -> bool:
        in_days, in_weekdays = day in self.days, weekday in self.weekdays
        if self.days_any or self.weekdays_any:
            return in_days and in_weekdays
        return in_days or in_weekdays


def parse(text: str) -> Schedule:
    """Parse a schedule; raises :class:`CronError` naming the field that is wrong."""
    expression = MACROS.get(text.strip().lower(), text) if text.strip().startswith("@") else text
    if expression.strip().startswith("@"):
        raise CronError(f"unknown macro {text.strip()!r}; expected one of {', '.join(MACROS)}")
    if expression.strip().upper().startswith(("TZ=", "CRON_TZ=")):
        raise CronError("a time zone in the schedule is not supported (the CronJob API refuses it too)")
    parts = expression.split()
    if len(parts) != 5:
        raise CronError(f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(parts)}")
    values = [_field(part, index) for index, part in enumerate(parts)]
    weekdays = frozenset(v % 7 for v in values[4])
    return Schedule(
        frozenset(values[0]), frozenset(values[1]), frozenset(values[2]), frozenset(values[3]),
        weekdays, parts[2] in ("*", "?"), parts[4] in ("*", "?"),
    )  # fmt: skip


def _field(text: str, index: int) -> set[int]:
    low, high = _BOUNDS[index]
    out: set[int] = set()
    for item in text.split(","):
        body, _, step_text = item.partition("/")
        step = _number(step_text, index) if step_text else 1
        if step < 1:
            raise CronError(f"{_FIELD_NAMES[index]}: step must be positive in {item!r}")
        if body in ("*", "?"):
            first, last = low, high
        elif "-" in body:
            start, _, end = body.partition("-")
            first, last = _number(start, index), _number(end, index)
        else:
            first = _number(body, index)
            last = high if step_text else first
        if not low <= first <= last <= high:
            raise CronError(f"{_FIELD_NAMES[index]}: {item!r} is outside {low}-{high}")
        out.update(range(first, last + 1, step))
    return out


def _number(text: str, index: int) -> int:
    named = _NAMES.get(index, {}).get(text.upper())
    if named is not None:
        return named
    if not text.isdigit():
        raise CronError(f"{_FIELD_NAMES[index]}: {text!r} is not a number")
    return int(text)


def _fields(t_s: int) -> tuple[int, int, int, int, int, int]:
    """(year, month, day, hour, minute, weekday with Sunday 0) of UTC seconds ``t_s``."""
    days, rest = divmod(t_s, 86400)
    year, month, day = _civil(days)
    return year, month, day, rest // 3600, rest % 3600 // 60, (days + 4) % 7


def _civil(days: int) -> tuple[int, int, int]:
    """Howard Hinnant's ``civil_from_days``: the date of a day number (0 is 1970-01-01)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (1 if month <= 2 else 0), month, day


def _start_of_next_month(year: int, month: int) -> int:
    year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return calendar.timegm((year, month, 1, 0, 0, 0, 0, 0, 0))
