"""The tick arithmetic without a database: cron in a zone (DST days), intervals, catch-up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from openrath_project.errors import ValidationFailed
from schedules_app.timing import Timing, check_cron, check_timezone, plan_firing

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def daily_0230(zone: str, start: datetime) -> Timing:
    return Timing(kind="cron", cron="30 2 * * *", timezone=zone, start=start).check()


def test_a_daily_0230_on_the_spring_forward_day_fires_once_at_0300_local():
    # Europe/Berlin, 29 March 2026: 02:00 CET becomes 03:00 CEST; 02:30 does not exist.
    timing = daily_0230("Europe/Berlin", utc(2026, 3, 27))
    ticks = timing.upcoming(utc(2026, 3, 27, 12), 3)
    assert [t.astimezone(BERLIN).isoformat() for t in ticks] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]
    assert ticks == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]


def test_a_daily_0230_on_the_fall_back_day_fires_once_at_its_first_occurrence():
    # Europe/Berlin, 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
    timing = daily_0230("Europe/Berlin", utc(2026, 10, 23))
    ticks = timing.upcoming(utc(2026, 10, 24, 12), 2)
    assert [t.astimezone(BERLIN).isoformat() for t in ticks] == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]
    # Looking again from between the two 02:30s finds no second one that day.
    assert timing.next_after(utc(2026, 10, 25, 0, 45)) == utc(2026, 10, 26, 1, 30)


def test_the_same_rules_hold_in_new_york():
    # 8 March 2026: 02:00 EST becomes 03:00 EDT; 1 November: 02:00 EDT becomes 01:00 EST, so
    # there the repeated hour is 01:00-02:00 and a 01:30 schedule meets it.
    spring = daily_0230("America/New_York", utc(2026, 3, 1)).next_after(utc(2026, 3, 8, 5))
    assert spring.astimezone(NEW_YORK).isoformat() == "2026-03-08T03:00:00-04:00"
    timing = Timing(
        kind="cron", cron="30 1 * * *", timezone="America/New_York", start=utc(2026, 10, 1)
    ).check()
    ticks = timing.upcoming(utc(2026, 10, 31, 12), 2)
    assert [t.astimezone(NEW_YORK).isoformat() for t in ticks] == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
    ]


def test_an_every_half_hour_expression_fires_in_both_copies_of_the_repeated_hour():
    timing = Timing(
        kind="cron", cron="*/30 * * * *", timezone="Europe/Berlin", start=utc(2026, 10, 1)
    ).check()
    ticks = timing.upcoming(utc(2026, 10, 24, 23, 45), 5)
    assert ticks == [utc(2026, 10, 25, 0, 0) + timedelta(minutes=30 * i) for i in range(5)]


def test_interval_ticks_are_start_plus_multiples_whatever_the_zone():
    start = utc(2026, 1, 1, 0, 0, 5)
    timing = Timing(
        kind="interval", interval_seconds=90, timezone="Europe/Berlin", start=start
    ).check()
    assert timing.next_after(utc(2025, 12, 31)) == start
    assert timing.next_after(start) == start + timedelta(seconds=90)
    assert timing.upcoming(start + timedelta(seconds=100), 2) == [
        start + timedelta(seconds=180),
        start + timedelta(seconds=270),
    ]
    # Across a DST change the gaps stay 90 s of real time.
    cross = Timing(kind="interval", interval_seconds=3600, start=utc(2026, 3, 29, 0)).check()
    assert cross.upcoming(utc(2026, 3, 29, 0), 2) == [utc(2026, 3, 29, 1), utc(2026, 3, 29, 2)]


def test_no_cron_tick_before_the_start():
    timing = Timing(kind="cron", cron="0 * * * *", start=utc(2026, 5, 1, 10, 0)).check()
    assert timing.next_after(utc(2026, 5, 1, 7, 10)) == utc(2026, 5, 1, 10, 0)


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("61 * * * *", "Bad minute"),
        ("* * *", "five fields"),
        ("0 0 * * * *", "five fields"),  # cronsim's seconds form
        ("", "five-field"),
        ("0 0 30 2 *", "Bad day-of-month"),  # 30 February never comes
    ],
)
def test_bad_cron_expressions_are_refused_naming_the_reason(expression, reason):
    with pytest.raises(ValidationFailed) as caught:
        check_cron(expression)
    assert reason in caught.value.message
    assert list(caught.value.details) == ["cron"]


@pytest.mark.parametrize("name", ["Mars/Olympus", "../etc/passwd", "", "x" * 65])
def test_unknown_time_zones_are_refused(name):
    with pytest.raises(ValidationFailed) as caught:
        check_timezone(name)
    assert caught.value.details == {"timezone": ["unknown time zone"]}


def test_interval_bounds_and_kind_fields_are_checked():
    start = utc(2026, 1, 1)
    with pytest.raises(ValidationFailed) as caught:
        Timing(kind="interval", interval_seconds=9, start=start).check()
    assert caught.value.details == {"interval_seconds": ["out of range"]}
    with pytest.raises(ValidationFailed) as caught:
        Timing(kind="cron", cron="* * * * *", interval_seconds=60, start=start).check()
    assert caught.value.details == {"interval_seconds": ["not allowed with kind cron"]}
    with pytest.raises(ValidationFailed) as caught:
        Timing(kind="weekly", start=start).check()
    assert caught.value.details == {"kind": ["unknown kind"]}


MINUTELY = Timing(kind="cron", cron="* * * * *", start=utc(2026, 1, 1)).check()


def test_catchup_skip_fires_an_on_time_tick_and_lets_old_ones_go():
    on_time = plan_firing(
        MINUTELY,
        due_since=utc(2026, 1, 1, 12),
        now=utc(2026, 1, 1, 12, 0, 4),
        catchup="skip",
        catchup_limit=10,
    )
    assert on_time.ticks == [utc(2026, 1, 1, 12)]
    assert on_time.missed == 0
    assert on_time.next_fire_at == utc(2026, 1, 1, 12, 1)
    late = plan_firing(
        MINUTELY,
        due_since=utc(2026, 1, 1, 12),
        now=utc(2026, 1, 1, 14, 30, 30),
        catchup="skip",
        catchup_limit=10,
    )
    # 14:30 is 30 s old: within the grace, so it fires; the 150 before it are let go.
    assert late.ticks == [utc(2026, 1, 1, 14, 30)]
    assert late.missed == 150
    # 14:31 seen 59 s late is still on time.
    stale = plan_firing(
        MINUTELY,
        due_since=utc(2026, 1, 1, 12),
        now=utc(2026, 1, 1, 14, 31, 59),
        catchup="skip",
        catchup_limit=10,
    )
    assert stale.ticks == [utc(2026, 1, 1, 14, 31)]
    hourly = Timing(kind="cron", cron="0 * * * *", start=utc(2026, 1, 1)).check()
    gone = plan_firing(
        hourly,
        due_since=utc(2026, 1, 1, 12),
        now=utc(2026, 1, 1, 14, 5),
        catchup="skip",
        catchup_limit=10,
    )
    assert gone.ticks == []
    assert gone.missed == 3
    assert gone.next_fire_at == utc(2026, 1, 1, 15)


def test_catchup_once_fires_the_latest_tick_for_all_the_missed():
    firing = plan_firing(
        MINUTELY,
        due_since=utc(2026, 1, 1, 12),
        now=utc(2026, 1, 1, 13, 0, 59),
        catchup="once",
        catchup_limit=10,
    )
    assert firing.ticks == [utc(2026, 1, 1, 13)]
    assert firing.missed == 60


def test_catchup_all_fires_the_latest_ticks_up_to_the_bound_oldest_first():
    firing = plan_firing(
        MINUTELY,
        due_since=utc(2026, 1, 1, 12),
        now=utc(2026, 1, 1, 12, 30, 1),
        catchup="all",
        catchup_limit=5,
    )
    assert firing.ticks == [utc(2026, 1, 1, 12, 26 + i) for i in range(5)]
    assert firing.missed == 26
    few = plan_firing(
        MINUTELY,
        due_since=utc(2026, 1, 1, 12),
        now=utc(2026, 1, 1, 12, 2, 1),
        catchup="all",
        catchup_limit=5,
    )
    assert few.ticks == [utc(2026, 1, 1, 12), utc(2026, 1, 1, 12, 1), utc(2026, 1, 1, 12, 2)]
    assert few.missed == 0
