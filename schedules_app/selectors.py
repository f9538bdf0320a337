"""Scoped reads of schedules, their fire log and their next fire times."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from openrath_project.errors import NotFound
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import parse_uuid
from schedules_app.models import Schedule, ScheduleFire
from schedules_app.services import timing_of

#: Most fire times one ``next`` request lists.
MAX_UPCOMING = 100


def schedule_list(*, principal: Principal) -> QuerySet[Schedule]:
    """Schedules in the principal's tenant and projects."""
    return Schedule.objects.for_principal(principal)


def schedule_get(*, principal: Principal, schedule_id: object) -> Schedule:
    """A schedule in scope, or 404 (another tenant's is indistinguishable from a missing one)."""
    as_uuid = parse_uuid(schedule_id)
    schedule = (
        schedule_list(principal=principal).select_related("project").filter(id=as_uuid).first()
        if as_uuid
        else None
    )
    if schedule is None:
        raise NotFound("schedule not found", details={"schedule": str(schedule_id)})
    return schedule


def fire_list(*, schedule: Schedule) -> QuerySet[ScheduleFire]:
    """The fire log of a schedule read in scope, latest tick first."""
    # scope: the schedule was read through schedule_get
    return ScheduleFire.objects.unscoped().filter(schedule_id=schedule.id).order_by("-tick")


def schedule_upcoming(
    schedule: Schedule, *, count: int = 5, after: datetime | None = None
) -> list[datetime]:
    """The schedule's next ``count`` fire times (from its pending ``next_fire_at`` on; a paused
    schedule would resume from the first tick after now)."""
    now = after or timezone.now()
    count = max(1, min(count, MAX_UPCOMING))
    timing = timing_of(schedule)
    if schedule.paused:
        return timing.upcoming(now, count)
    first = schedule.next_fire_at
    return [first, *timing.upcoming(first, count - 1)]
