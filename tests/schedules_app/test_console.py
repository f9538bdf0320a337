"""The console's schedules page: next fire times, pause / resume buttons, roles and scope."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from openrath_project.tenancy.models import AuditEvent
from runs_app.models import Run
from schedules_app import services
from schedules_app.models import Schedule
from tests.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.schedules_app.conftest import T0

pytestmark = pytest.mark.django_db


def login(tenant: Any, role: str) -> Client:
    user = UserFactory(username=f"{role}-{tenant.slug}")
    user.save()  # the factory sets the password without saving it
    MembershipFactory(user=user, tenant=tenant, role=role)
    client = Client()
    client.force_login(user)
    return client


def test_the_page_lists_next_fire_times_and_an_operator_pauses_and_resumes(tenant, make_schedule):
    schedule = make_schedule(name="nightly", cron="30 2 * * *", timezone_name="Europe/Berlin")
    operator = login(tenant, "operator")
    page = operator.get("/console/schedules/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "nightly" in html
    assert "30 2 * * *" in html
    assert "Europe/Berlin" in html
    first = schedule.next_fire_at.strftime("%Y-%m-%d %H:%M")
    assert first in html
    assert f"/console/schedules/{schedule.id}/pause/" in html

    paused = operator.post(f"/console/schedules/{schedule.id}/pause/")
    assert paused.status_code == 302
    schedule.refresh_from_db()
    assert schedule.paused
    assert (
        f"/console/schedules/{schedule.id}/resume/"
        in operator.get("/console/schedules/").content.decode()
    )
    assert operator.post(f"/console/schedules/{schedule.id}/resume/").status_code == 302
    schedule.refresh_from_db()
    assert not schedule.paused
    audit = AuditEvent.objects.filter(object_type="schedule").order_by("id")
    assert [(a.action, a.outcome) for a in audit] == [
        ("schedule.pause", "success"),
        ("schedule.resume", "success"),
    ]


def test_a_viewer_sees_no_buttons_and_cannot_pause(tenant, make_schedule):
    schedule = make_schedule(name="nightly")
    viewer = login(tenant, "viewer")
    page = viewer.get("/console/schedules/").content.decode()
    assert "nightly" in page
    assert "/pause/" not in page
    refused = viewer.post(f"/console/schedules/{schedule.id}/pause/")
    assert refused.status_code == 403
    schedule.refresh_from_db()
    assert not schedule.paused
    assert AuditEvent.objects.filter(action="schedule.pause", outcome="denied").count() == 1


def test_another_tenants_schedule_is_not_shown_and_is_a_404(other_tenant, make_schedule):
    schedule = make_schedule(name="secret-nightly")
    ProjectFactory(tenant=other_tenant, slug="theirs")
    outsider = login(other_tenant, "admin")
    assert "secret-nightly" not in outsider.get("/console/schedules/").content.decode()
    assert outsider.post(f"/console/schedules/{schedule.id}/pause/").status_code == 404
    assert Schedule.objects.get(id=schedule.id).paused is False


def test_admin_actions_pause_resume_and_delete_through_the_services(
    django_user_model, make_schedule
):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789")
    admin = Client()
    admin.force_login(user)
    schedule = make_schedule(overlap="allow")
    services.fire_due(now=T0.replace(minute=1))
    url = f"/{settings.ADMIN_PATH}schedules_app/schedule/"
    assert admin.get(url).status_code == 200

    def act(action: str) -> int:
        response = admin.post(url, {"action": action, "_selected_action": [str(schedule.id)]})
        return response.status_code

    assert act("pause_schedules") == 302
    assert Schedule.objects.get(id=schedule.id).paused is True
    assert act("resume_schedules") == 302
    assert Schedule.objects.get(id=schedule.id).paused is False
    assert act("delete_schedules") == 302
    assert not Schedule.objects.filter(id=schedule.id).exists()
    assert Run.objects.filter(created_by=f"schedule:{schedule.id}").count() == 1
    audit = AuditEvent.objects.filter(object_type="schedule").order_by("id")
    assert [(a.action, a.outcome, a.details["via"]) for a in audit] == [
        ("schedule.pause", "success", "admin"),
        ("schedule.resume", "success", "admin"),
        ("schedule.delete", "success", "admin"),
    ]
    assert admin.get(f"/{settings.ADMIN_PATH}schedules_app/schedulefire/").status_code == 200


def test_an_operator_creates_and_deletes_a_schedule_and_bad_input_is_shown(
    tenant, project, registry
):
    operator = login(tenant, "operator")
    form = {
        "project": str(project.id),
        "name": "hourly tally",
        "workflow": "sched-tally",
        "kind": "cron",
        "cron": "0 * * * *",
        "timezone": "Europe/Berlin",
        "input": '{"n": 3}',
        "catchup": "once",
        "overlap": "queue",
    }
    bad = operator.post("/console/schedules/new/", {**form, "cron": "0 24 * * *"})
    assert bad.status_code == 400
    assert "Bad hour" in bad.content.decode()
    assert Schedule.objects.count() == 0
    not_json = operator.post("/console/schedules/new/", {**form, "input": "{n: 3}"})
    assert not_json.status_code == 400
    assert Schedule.objects.count() == 0

    made = operator.post("/console/schedules/new/", form)
    assert made.status_code == 302
    schedule = Schedule.objects.get()
    assert (schedule.cron, schedule.timezone, schedule.input, schedule.overlap) == (
        "0 * * * *",
        "Europe/Berlin",
        {"n": 3},
        "queue",
    )
    assert schedule.created_by == "user:operator-acme"
    assert operator.post(f"/console/schedules/{schedule.id}/delete/").status_code == 302
    assert Schedule.objects.count() == 0
    audit = AuditEvent.objects.filter(object_type="schedule").order_by("id")
    assert [(a.action, a.outcome) for a in audit] == [
        ("schedule.create", "failure"),
        ("schedule.create", "failure"),
        ("schedule.create", "success"),
        ("schedule.delete", "success"),
    ]


def test_a_viewer_cannot_create_or_delete(tenant, project, make_schedule):
    schedule = make_schedule()
    viewer = login(tenant, "viewer")
    assert "schedule-create" not in viewer.get("/console/schedules/").content.decode()
    refused = viewer.post(
        "/console/schedules/new/",
        {
            "project": str(project.id),
            "workflow": "sched-tally",
            "kind": "cron",
            "cron": "* * * * *",
        },
    )
    assert refused.status_code == 403
    assert viewer.post(f"/console/schedules/{schedule.id}/delete/").status_code == 403
    assert list(Schedule.objects.values_list("id", flat=True)) == [schedule.id]
