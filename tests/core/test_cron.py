"""Cron schedules give the next run time as Kubernetes' CronJob controller computes it."""

from __future__ import annotations

import calendar
import zoneinfo

import pytest

from gpuq.core.cron import CronError, parse

SATURDAY_NOON = calendar.timegm((2024, 1, 6, 12, 0, 0))


def at(*parts: int) -> float:
    return float(calendar.timegm((*parts, 0)[:6]))


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        pytest.param("* * * * *", at(2024, 1, 6, 12, 1, 0), id="every minute is the next minute"),
        pytest.param("@hourly", at(2024, 1, 6, 13, 0, 0), id="a macro stands for its five fields"),
        pytest.param(
            "*/15 9-17 * * MON-FRI", at(2024, 1, 8, 9, 0, 0), id="weekday names and steps skip the weekend"
        ),
        pytest.param("0 0 29 2 *", at(2024, 2, 29, 0, 0, 0), id="the 29th of February of a leap year"),
        pytest.param("0 0 13 * 5", at(2024, 1, 12, 0, 0, 0), id="restricted day and weekday match either"),
        pytest.param("30 12 * * 7", at(2024, 1, 7, 12, 30, 0), id="7 is Sunday"),
    ],
)
def test_next_run_after_a_time(schedule: str, expected: float) -> None:
    assert parse(schedule).next_after(SATURDAY_NOON) == expected


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        pytest.param("* * * *", "expected 5 fields", id="four fields"),
        pytest.param("0 24 * * *", "hour: '24' is outside 0-23", id="an hour out of range"),
        pytest.param("@every 5m", "unknown macro", id="@every is not a CronJob schedule"),
        pytest.param("TZ=UTC 0 * * * *", "time zone", id="a time zone prefix"),
        pytest.param("*/0 * * * *", "step must be positive", id="a zero step"),
    ],
)
def test_bad_schedules_name_the_field(schedule: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        parse(schedule)


PARIS = zoneinfo.ZoneInfo("Europe/Paris")
ZONED = [
    pytest.param(
        "0 2 * * *",
        at(2024, 6, 1, 12, 0, 0),
        at(2024, 6, 2, 0, 0, 0),
        id="02:00 in Paris in summer is 00:00 UTC",
    ),
    pytest.param(
        "0 2 * * *",
        at(2024, 1, 1, 12, 0, 0),
        at(2024, 1, 2, 1, 0, 0),
        id="02:00 in Paris in winter is 01:00 UTC",
    ),
    pytest.param(
        "30 2 * * *",
        at(2024, 3, 30, 12, 0, 0),
        at(2024, 4, 1, 0, 30, 0),
        id="02:30 that the spring change skips does not run that day (robfig/cron)",
    ),
    pytest.param(
        "30 2 * * *",
        at(2024, 10, 27, 0, 40, 0),
        at(2024, 10, 27, 1, 30, 0),
        id="02:30 that the autumn change repeats runs again at its second instant (robfig/cron)",
    ),
]


@pytest.mark.parametrize(("schedule", "after", "expected"), ZONED)
def test_a_time_zone_reads_the_fields_on_its_wall_clock(schedule: str, after: float, expected: float) -> None:
    assert parse(schedule).next_after(after, PARIS) == expected
