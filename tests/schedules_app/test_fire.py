"""Firing schedules: each tick once, catch-up and overlap policies, pause, failures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from openrath_project.errors import ValidationFailed
from runs_app import services as run_services
from runs_app.models import Run
from schedules_app import services
from schedules_app.models import Schedule, ScheduleFire
from tests.schedules_app.conftest import T0

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)


def fires(schedule: Schedule) -> list[tuple[str, str]]:
    """(tick as UTC iso, outcome), oldest first."""
    return [
        (f.tick.isoformat(), f.outcome)
        for f in ScheduleFire.objects.filter(schedule=schedule).order_by("tick")
    ]


def schedule_runs(schedule: Schedule) -> list[Run]:
    return list(Run.objects.filter(created_by=f"schedule:{schedule.id}").order_by("created_at"))


def test_a_due_tick_starts_one_run_and_advances_the_schedule(make_schedule):
    schedule = make_schedule(input={"n": 41}, priority=5)
    assert schedule.next_fire_at == T0 + MINUTE
    assert services.fire_due(now=T0 + timedelta(seconds=30)).started == 0  # not due yet

    fired = services.fire_due(now=T0 + MINUTE + timedelta(seconds=2))
    assert (fired.started, fired.skipped, fired.missed, fired.duplicates) == (1, 0, 0, 0)
    [run] = schedule_runs(schedule)
    assert (run.workflow, run.status, run.input, run.priority) == (
        "sched-tally",
        "queued",
        {"n": 41},
        5,
    )
    fire = ScheduleFire.objects.get(schedule=schedule)
    assert (fire.tick, fire.outcome, fire.run_id) == (T0 + MINUTE, "started", run.id)
    schedule.refresh_from_db()
    assert schedule.next_fire_at == T0 + 2 * MINUTE
    assert schedule.last_fired_at == T0 + MINUTE + timedelta(seconds=2)

    # The same moment again (a second reconciler pass): nothing more.
    again = services.fire_due(now=T0 + MINUTE + timedelta(seconds=3))
    assert (again.started, again.duplicates) == (0, 0)
    assert len(schedule_runs(schedule)) == 1


def test_a_tick_fired_already_is_refused_by_the_unique_row(make_schedule):
    schedule = make_schedule(overlap="allow")
    services.fire_due(now=T0 + MINUTE)
    # Put the schedule back as if another reconciler had not seen the first fire commit.
    Schedule.objects.filter(id=schedule.id).update(next_fire_at=T0 + MINUTE)
    fired = services.fire_due(now=T0 + MINUTE + timedelta(seconds=1))
    assert (fired.started, fired.duplicates) == (0, 1)
    assert len(schedule_runs(schedule)) == 1
    assert fires(schedule) == [((T0 + MINUTE).isoformat(), "started")]


def test_catchup_skip_lets_missed_ticks_go(make_schedule):
    schedule = make_schedule(catchup="skip", overlap="allow")
    # Down from 12:01 to 12:10:30: 12:10 is 30 s old (on time), 12:01..12:09 are missed.
    fired = services.fire_due(now=T0 + 10 * MINUTE + timedelta(seconds=30))
    assert (fired.started, fired.missed) == (1, 9)
    assert fires(schedule) == [((T0 + 10 * MINUTE).isoformat(), "started")]
    schedule.refresh_from_db()
    assert (schedule.missed_ticks, schedule.next_fire_at) == (9, T0 + 11 * MINUTE)
    # A tick seen later than the grace (60 s) is missed too: an hourly schedule down 65 min.
    hourly = make_schedule(catchup="skip", cron="0 * * * *")
    late = services.fire_due(now=T0 + 65 * MINUTE)
    # 13:00 (5 min late) for the hourly one; 12:11..13:04 for the minutely one, whose 13:05 fired
    assert (late.started, late.missed) == (1, 1 + 54)
    assert fires(hourly) == []
    hourly.refresh_from_db()
    assert (hourly.missed_ticks, hourly.next_fire_at) == (1, T0 + 120 * MINUTE)


def test_catchup_once_fires_one_run_for_the_whole_downtime(make_schedule):
    schedule = make_schedule(catchup="once", overlap="allow")
    fired = services.fire_due(now=T0 + 3 * 60 * MINUTE)
    assert (fired.started, fired.missed) == (1, 179)
    assert fires(schedule) == [((T0 + 180 * MINUTE).isoformat(), "started")]


def test_catchup_all_fires_each_missed_tick_up_to_the_bound(make_schedule):
    schedule = make_schedule(catchup="all", catchup_limit=4, overlap="allow")
    fired = services.fire_due(now=T0 + 10 * MINUTE + timedelta(seconds=5))
    assert (fired.started, fired.missed) == (4, 6)
    assert fires(schedule) == [((T0 + i * MINUTE).isoformat(), "started") for i in (7, 8, 9, 10)]
    assert len(schedule_runs(schedule)) == 4
    small = make_schedule(catchup="all", catchup_limit=10, overlap="allow")
    assert services.fire_due(now=T0 + 3 * MINUTE).started == 3
    assert len(fires(small)) == 3


def test_overlap_skip_skips_while_the_previous_run_is_active(make_schedule):
    schedule = make_schedule(overlap="skip")
    services.fire_due(now=T0 + MINUTE)
    [first] = schedule_runs(schedule)
    fired = services.fire_due(now=T0 + 2 * MINUTE)
    assert (fired.started, fired.skipped) == (0, 1)
    skipped = ScheduleFire.objects.get(schedule=schedule, tick=T0 + 2 * MINUTE)
    assert skipped.detail == {"reason": "overlap", "active_run": str(first.id)}
    run_services.run_cancel(run=first, reason="done with it")
    assert services.fire_due(now=T0 + 3 * MINUTE).started == 1
    assert [o for _, o in fires(schedule)] == ["started", "skipped", "started"]


def test_overlap_queue_starts_the_queued_tick_when_the_previous_run_ends(make_schedule):
    schedule = make_schedule(overlap="queue")
    services.fire_due(now=T0 + MINUTE)
    [first] = schedule_runs(schedule)
    fired = services.fire_due(now=T0 + 2 * MINUTE)
    assert (fired.started, fired.queued) == (0, 1)
    queued = ScheduleFire.objects.get(schedule=schedule, tick=T0 + 2 * MINUTE)
    assert (queued.outcome, queued.run_id, queued.detail) == (
        "queued",
        None,
        {"behind": str(first.id)},
    )
    # Still active: the queued tick waits.
    assert services.fire_due(now=T0 + 2 * MINUTE + timedelta(seconds=5)).started == 0

    run_services.run_cancel(run=first, reason="finished")
    released = services.fire_due(now=T0 + 2 * MINUTE + timedelta(seconds=10))
    assert released.started == 1
    queued.refresh_from_db()
    assert queued.outcome == "started"
    second = Run.objects.get(id=queued.run_id)
    assert second.status == "queued"
    assert [r.id for r in schedule_runs(schedule)] == [first.id, second.id]


def test_overlap_queue_is_bounded(make_schedule):
    schedule = make_schedule(overlap="queue", catchup="all", catchup_limit=20)
    services.fire_due(now=T0 + MINUTE)
    fired = services.fire_due(now=T0 + 13 * MINUTE)
    assert (fired.started, fired.queued, fired.skipped) == (0, services.MAX_QUEUED_FIRES, 2)
    full = ScheduleFire.objects.filter(schedule=schedule, detail__reason="queue_full")
    assert full.count() == 2


def test_overlap_cancel_previous_cancels_the_active_run_and_starts_the_next(make_schedule):
    schedule = make_schedule(overlap="cancel_previous")
    services.fire_due(now=T0 + MINUTE)
    [first] = schedule_runs(schedule)
    assert services.fire_due(now=T0 + 2 * MINUTE).started == 1
    first.refresh_from_db()
    assert first.status == "cancelled"
    second = ScheduleFire.objects.get(schedule=schedule, tick=T0 + 2 * MINUTE)
    assert second.detail == {"cancelled": [str(first.id)]}
    assert Run.objects.get(id=second.run_id).status == "queued"


def test_overlap_allow_starts_alongside(make_schedule):
    schedule = make_schedule(overlap="allow")
    services.fire_due(now=T0 + MINUTE)
    services.fire_due(now=T0 + 2 * MINUTE)
    assert [r.status for r in schedule_runs(schedule)] == ["queued", "queued"]


def test_a_paused_schedule_fires_nothing_and_resumes_from_the_next_tick(make_schedule):
    schedule = make_schedule(overlap="allow")
    schedule, changed = services.schedule_pause(schedule=schedule)
    assert (schedule.paused, changed) == (True, True)
    assert services.schedule_pause(schedule=schedule)[1] is False
    assert services.fire_due(now=T0 + 30 * MINUTE).started == 0
    schedule, changed = services.schedule_resume(
        schedule=schedule, now=T0 + 30 * MINUTE + timedelta(seconds=10)
    )
    assert (schedule.paused, changed, schedule.next_fire_at) == (False, True, T0 + 31 * MINUTE)
    fired = services.fire_due(now=T0 + 31 * MINUTE)
    assert (fired.started, fired.missed) == (1, 0)
    assert fires(schedule) == [((T0 + 31 * MINUTE).isoformat(), "started")]


def test_a_tick_whose_run_cannot_be_created_is_recorded_failed(make_schedule):
    schedule = make_schedule()
    Schedule.objects.filter(id=schedule.id).update(workflow="gone")  # the code changed
    fired = services.fire_due(now=T0 + MINUTE)
    assert (fired.started, fired.failed) == (0, 1)
    fire = ScheduleFire.objects.get(schedule=schedule)
    assert fire.outcome == "failed"
    assert fire.detail["error"]["code"] == "unknown_workflow"
    assert Run.objects.count() == 0
    schedule.refresh_from_db()
    assert schedule.next_fire_at == T0 + 2 * MINUTE  # the tick is spent, the next one comes


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron": "0 25 * * *"}, "cron"),
        ({"timezone_name": "Europe/Atlantis"}, "timezone"),
        ({"input": {"n": -1}}, "input.n"),
        ({"input": {}}, "input"),
        ({"workflow": "nope"}, None),
        ({"kind": "interval", "cron": "", "interval_seconds": 5}, "interval_seconds"),
        ({"catchup": "sometimes"}, "catchup"),
        ({"overlap": "merge"}, "overlap"),
        ({"catchup_limit": 0}, "catchup_limit"),
        ({"priority": 101}, "priority"),
    ],
)
def test_bad_definitions_are_refused_and_nothing_is_stored(make_schedule, fields, field):
    with pytest.raises(ValidationFailed) as caught:
        make_schedule(**fields)
    if field is not None:
        assert field in caught.value.details
    else:
        assert caught.value.code == "unknown_workflow"
    assert Schedule.objects.count() == 0


def test_an_update_revalidates_and_recomputes_the_next_tick(make_schedule):
    schedule = make_schedule()
    changed = services.schedule_update(
        schedule=schedule,
        changes={"kind": "interval", "interval_seconds": 600, "start_at": T0},
        now=T0 + timedelta(seconds=90),
    )
    assert (changed.kind, changed.cron, changed.next_fire_at) == ("interval", "", T0 + 10 * MINUTE)
    with pytest.raises(ValidationFailed):
        services.schedule_update(schedule=schedule, changes={"timezone": "Nowhere/Else"})
    with pytest.raises(ValidationFailed) as caught:
        services.schedule_update(schedule=schedule, changes={"project": "x"})
    assert caught.value.details == {"project": ["cannot be changed"]}
    schedule.refresh_from_db()
    assert (schedule.timezone, schedule.interval_seconds) == ("UTC", 600)


def test_deleting_keeps_the_runs_it_started(make_schedule):
    schedule = make_schedule(overlap="allow")
    services.fire_due(now=T0 + MINUTE)
    services.schedule_delete(schedule=schedule)
    assert ScheduleFire.objects.count() == 0
    assert Run.objects.filter(created_by=f"schedule:{schedule.id}").count() == 1


def test_a_berlin_0230_schedule_fires_once_on_each_dst_day(make_schedule):
    spring_eve = datetime(2026, 3, 28, 12, tzinfo=UTC)
    schedule = make_schedule(
        cron="30 2 * * *", timezone_name="Europe/Berlin", overlap="allow", now=spring_eve
    )
    # 02:30 does not exist on 29 March: it fires at 03:00 CEST = 01:00 UTC.
    assert schedule.next_fire_at == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert services.fire_due(now=datetime(2026, 3, 29, 0, 59, tzinfo=UTC)).started == 0
    assert services.fire_due(now=datetime(2026, 3, 29, 1, 0, 2, tzinfo=UTC)).started == 1
    schedule.refresh_from_db()
    assert schedule.next_fire_at == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)
    services.schedule_delete(schedule=schedule)

    fall_eve = datetime(2026, 10, 24, 12, tzinfo=UTC)
    autumn = make_schedule(
        cron="30 2 * * *", timezone_name="Europe/Berlin", overlap="allow", now=fall_eve
    )
    # 02:30 happens twice on 25 October: it fires at the first (CEST, 00:30 UTC) only.
    assert autumn.next_fire_at == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert services.fire_due(now=datetime(2026, 10, 25, 0, 30, 1, tzinfo=UTC)).started == 1
    # The second 02:30 (CET, 01:30 UTC) passes without a tick.
    assert services.fire_due(now=datetime(2026, 10, 25, 1, 30, 1, tzinfo=UTC)).started == 0
    autumn.refresh_from_db()
    assert autumn.next_fire_at == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)
    assert [t for t, _ in fires(autumn)] == ["2026-10-25T00:30:00+00:00"]
