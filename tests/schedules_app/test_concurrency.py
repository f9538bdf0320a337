"""Several reconcilers at once on a real PostgreSQL fire each schedule tick exactly once."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection, transaction

from runs_app.models import Run
from schedules_app import services
from schedules_app.models import Schedule, ScheduleFire
from tests.schedules_app.conftest import T0
from tests.support import require_postgres

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

RECONCILERS = 4
SCHEDULES = 12
MINUTE = timedelta(minutes=1)


def race(count: int, work: Callable[[int], object]) -> list[object]:
    """Run ``work(i)`` on ``count`` threads released together; their results, or raise."""
    barrier = threading.Barrier(count)
    results: list[object] = [None] * count
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait(timeout=60)
            results[index] = work(index)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    assert not errors, errors
    assert not any(thread.is_alive() for thread in threads)
    return results


def test_reconcilers_running_at_once_fire_each_tick_once(make_schedule):
    require_postgres()
    schedules = [make_schedule(overlap="allow", catchup="all") for _ in range(SCHEDULES)]
    # Three passes, each with every reconciler at the same instant: ticks 12:01, 12:02, 12:03+04.
    for now in (T0 + MINUTE, T0 + 2 * MINUTE, T0 + 4 * MINUTE + timedelta(seconds=1)):
        outcomes = race(RECONCILERS, lambda _i, now=now: services.fire_due(now=now))
        assert all(isinstance(o, services.Fired) and not o.errors for o in outcomes)
    expected_ticks = [T0 + i * MINUTE for i in (1, 2, 3, 4)]
    for schedule in schedules:
        rows = list(ScheduleFire.objects.filter(schedule=schedule).order_by("tick"))
        assert [r.tick for r in rows] == expected_ticks
        assert {r.outcome for r in rows} == {"started"}
        runs = Run.objects.filter(created_by=f"schedule:{schedule.id}")
        assert sorted(r.id for r in runs) == sorted(r.run_id for r in rows)
    assert Run.objects.count() == SCHEDULES * len(expected_ticks)


def test_the_unique_row_alone_refuses_a_second_fire_of_a_tick(make_schedule):
    """Bypass the row lock: two transactions fire the same tick at once. The second insert
    waits on the first's unique index entry and then fails; it starts no run."""
    require_postgres()
    schedule = make_schedule(overlap="allow")
    tick = T0 + MINUTE

    def fire_directly(_index: int) -> services.Fired:
        result = services.Fired()
        row = Schedule.objects.select_related("project").get(id=schedule.id)
        with transaction.atomic():
            services._fire_tick(row, tick, tick, result)
        return result

    outcomes = race(RECONCILERS, fire_directly)
    totals = Counter()
    for outcome in outcomes:
        assert isinstance(outcome, services.Fired)
        totals.update(started=outcome.started, duplicates=outcome.duplicates)
    assert totals == Counter(started=1, duplicates=RECONCILERS - 1)
    assert ScheduleFire.objects.filter(schedule=schedule).count() == 1
    assert Run.objects.count() == 1
