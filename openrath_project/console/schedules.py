"""Console pages of schedules: the list with next fire times; create, pause, resume, delete.

Thin callers of ``schedules_app``'s selectors and services, like the other console pages:
a viewer's POST is a 403 that changes nothing; every action is audited by the middleware.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.contrib import messages
from django.db.models import OuterRef, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from openrath_project.api.audit import audit_note
from openrath_project.console.access import Console, console_page
from openrath_project.console.schema_form import optional_int, parse_json
from openrath_project.console.views import ActionError, _base, _filtered
from openrath_project.errors import DomainError
from openrath_project.tenancy.selectors import project_get
from runs_app import registration
from schedules_app import selectors, services
from schedules_app.models import Schedule, ScheduleFire
from schedules_app.timing import CATCHUP_POLICIES, OVERLAP_POLICIES

#: Schedules listed on the page (the API pages through the rest).
SCHEDULES_SHOWN = 200
#: Next fire times shown per schedule.
NEXT_SHOWN = 3


@dataclass
class ScheduleRow:
    schedule: Schedule
    upcoming: list[datetime]
    last_fire: ScheduleFire | None


def _last_fires(listed: list[Schedule]) -> dict[object, ScheduleFire]:
    """The latest fire of each listed schedule, in two queries whatever their number."""
    latest = (
        # scope: the schedules were listed for the principal
        ScheduleFire.objects.unscoped()
        .filter(schedule_id=OuterRef("pk"))
        .order_by("-tick")
        .values("id")[:1]
    )
    ids = (
        # scope: the same schedules, read in scope above
        Schedule.objects.unscoped()
        .filter(id__in=[s.id for s in listed])
        .annotate(last_fire=Subquery(latest))
        .values_list("last_fire", flat=True)
    )
    # scope: ids of the listed schedules' own fires
    fires = ScheduleFire.objects.unscoped().filter(id__in=[i for i in ids if i is not None])
    return {fire.schedule_id: fire for fire in fires}


def _page(
    request: HttpRequest,
    console: Console,
    *,
    error: ActionError | None = None,
    form: dict[str, str] | None = None,
    status: int = 200,
) -> HttpResponse:
    listed = list(
        _filtered(selectors.schedule_list(principal=console.principal), console)
        .select_related("project")
        .order_by("-created_at", "-id")[:SCHEDULES_SHOWN]
    )
    last = _last_fires(listed)
    rows = [
        ScheduleRow(
            schedule=s,
            upcoming=selectors.schedule_upcoming(s, count=NEXT_SHOWN),
            last_fire=last.get(s.id),
        )
        for s in listed
    ]
    return render(
        request,
        "console/schedules.html",
        _base(
            console,
            rows=rows,
            can_change=console.principal.has_grant("runs:write"),
            shown=SCHEDULES_SHOWN,
            workflows=sorted(e.name for e in registration.workflows().all()),
            catchup_policies=CATCHUP_POLICIES,
            overlap_policies=OVERLAP_POLICIES,
            error=error,
            form=form or {"timezone": "UTC", "input": "{}", "kind": "cron"},
        ),
        status=status,
    )


@require_GET
@console_page()
def schedules(request: HttpRequest, console: Console) -> HttpResponse:
    return _page(request, console)


@require_POST
@console_page(grant="runs:write", action="schedule.create", object_type="schedule")
def schedule_create_view(request: HttpRequest, console: Console) -> HttpResponse:
    form = {name: request.POST.get(name, "").strip() for name in _FORM_FIELDS}
    try:
        project = project_get(principal=console.principal, ref=form["project"])
        audit_note(request, project=project)
        kind = form["kind"]
        schedule = services.schedule_create(
            project=project,
            workflow=form["workflow"],
            kind=kind,
            cron=form["cron"] if kind == "cron" else "",
            interval_seconds=(
                optional_int(form["interval_seconds"], "interval_seconds")
                if kind == "interval"
                else None
            ),
            timezone_name=form["timezone"] or "UTC",
            input=parse_json(form["input"] or "{}", field="input"),
            catchup=form["catchup"] or "skip",
            catchup_limit=optional_int(form["catchup_limit"], "catchup_limit") or 10,
            overlap=form["overlap"] or "skip",
            name=form["name"],
            created_by=console.principal.actor,
        )
    except DomainError as exc:
        audit_note(request, details={"error_code": exc.code, "via": "console"})
        return _page(request, console, error=ActionError.of(exc), form=form, status=exc.status_code)
    audit_note(request, object_id=schedule.id, details={"via": "console"})
    when = schedule.next_fire_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    messages.success(request, f"Created {schedule}: first fire {when}.")
    return redirect("console:schedules")


_FORM_FIELDS = (
    "project",
    "name",
    "workflow",
    "kind",
    "cron",
    "interval_seconds",
    "timezone",
    "input",
    "catchup",
    "catchup_limit",
    "overlap",
)


@require_POST
@console_page(grant="runs:write", action="schedule.pause", object_type="schedule")
def schedule_pause_view(
    request: HttpRequest, console: Console, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = selectors.schedule_get(principal=console.principal, schedule_id=schedule_id)
    audit_note(request, object_id=schedule.id, project=schedule.project)
    _, changed = services.schedule_pause(schedule=schedule)
    audit_note(request, details={"changed": changed, "via": "console"})
    messages.success(request, f"Paused {schedule}." if changed else f"{schedule} was paused.")
    return redirect("console:schedules")


@require_POST
@console_page(grant="runs:write", action="schedule.resume", object_type="schedule")
def schedule_resume_view(
    request: HttpRequest, console: Console, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = selectors.schedule_get(principal=console.principal, schedule_id=schedule_id)
    audit_note(request, object_id=schedule.id, project=schedule.project)
    resumed, changed = services.schedule_resume(schedule=schedule)
    audit_note(request, details={"changed": changed, "via": "console"})
    when = resumed.next_fire_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    messages.success(
        request, f"Resumed {schedule}: next fire {when}." if changed else f"{schedule} runs."
    )
    return redirect("console:schedules")


@require_POST
@console_page(grant="runs:write", action="schedule.delete", object_type="schedule")
def schedule_delete_view(
    request: HttpRequest, console: Console, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = selectors.schedule_get(principal=console.principal, schedule_id=schedule_id)
    audit_note(request, object_id=schedule.id, project=schedule.project)
    services.schedule_delete(schedule=schedule)
    audit_note(request, details={"via": "console"})
    messages.success(request, f"Deleted {schedule} (the runs it started stay).")
    return redirect("console:schedules")
