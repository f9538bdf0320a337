"""The schedules API: validation as the documented error body, scoping, grants, audit."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from openrath_project.tenancy.models import AuditEvent
from schedules_app.models import Schedule
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db

URL = "/api/v1/schedules/"


def body(**fields):
    values = {
        "project": "research",
        "workflow": "sched-tally",
        "kind": "cron",
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "input": {"n": 1},
    }
    values.update(fields)
    return {k: v for k, v in values.items() if v is not None}


@pytest.fixture
def writer(make_token, client_for, registry):
    return client_for(make_token(["runs:read", "runs:write"]))


def test_create_read_next_pause_resume_delete(writer, project):
    created = writer.post(URL, body(name="nightly", catchup="once", overlap="queue"), format="json")
    assert created.status_code == 201, created.content
    data = created.json()
    assert (data["kind"], data["cron"], data["timezone"], data["catchup"], data["overlap"]) == (
        "cron",
        "30 2 * * *",
        "Europe/Berlin",
        "once",
        "queue",
    )
    assert data["project"] == str(project.id)
    assert data["created_by"].startswith("token:")
    schedule_url = f"{URL}{data['id']}/"
    assert writer.get(schedule_url).json()["next_fire_at"] == data["next_fire_at"]

    upcoming = writer.get(f"{schedule_url}next/", {"count": 3}).json()
    assert upcoming["paused"] is False
    assert len(upcoming["times"]) == 3
    times = [datetime.fromisoformat(t.replace("Z", "+00:00")) for t in upcoming["times"]]
    assert times == sorted(times)
    for moment in times:  # 02:30 in Berlin is 00:30 or 01:30 UTC (no DST day in the next 3)
        assert (moment.astimezone(UTC).minute, moment.astimezone(UTC).hour in (0, 1)) == (30, True)

    paused = writer.post(f"{schedule_url}pause/")
    assert (paused.status_code, paused.json()["paused"]) == (200, True)
    resumed = writer.post(f"{schedule_url}resume/")
    assert (resumed.status_code, resumed.json()["paused"]) == (200, False)

    changed = writer.patch(schedule_url, {"cron": "0 * * * *", "timezone": "UTC"}, format="json")
    assert changed.status_code == 200, changed.content
    assert (changed.json()["cron"], changed.json()["timezone"]) == ("0 * * * *", "UTC")
    assert changed.json()["next_fire_at"].endswith(":00:00Z")

    fires = writer.get(f"{schedule_url}fires/")
    assert fires.json() == {"results": [], "next": None}

    listed = writer.get(URL, {"project": "research", "paused": "false"}).json()
    assert [s["id"] for s in listed["results"]] == [data["id"]]

    assert writer.delete(schedule_url).status_code == 204
    assert writer.get(schedule_url).status_code == 404
    assert Schedule.objects.count() == 0
    actions = list(
        AuditEvent.objects.filter(object_type="schedule", outcome="success")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert [a for a in actions if a.startswith("schedule.")] == [
        "schedule.create",
        "schedule.pause",
        "schedule.resume",
        "schedule.update",
        "schedule.delete",
    ]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron": "30 25 * * *"}, "cron"),
        ({"cron": "not a cron"}, "cron"),
        ({"timezone": "Europe/Atlantis"}, "timezone"),
        ({"input": {"n": "one"}}, "input.n"),
        ({"input": {}}, "input"),
        ({"kind": "interval", "cron": None, "interval_seconds": 3}, "interval_seconds"),
        ({"kind": "hourly"}, "kind"),
        ({"catchup": "maybe"}, "catchup"),
        ({"catchup_limit": 1000}, "catchup_limit"),
        ({"overlap": "merge"}, "overlap"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(writer, project, fields, field):
    response = writer.post(URL, body(**fields), format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    assert field in error["details"]
    assert Schedule.objects.count() == 0


def test_an_unknown_workflow_is_a_400(writer, project):
    response = writer.post(URL, body(workflow="no-such-flow"), format="json")
    assert (response.status_code, response.json()["error"]["code"]) == (400, "unknown_workflow")
    assert Schedule.objects.count() == 0


def test_the_project_is_fixed_at_creation(writer, project):
    made = writer.post(URL, body(), format="json").json()
    response = writer.patch(f"{URL}{made['id']}/", {"project": "ops"}, format="json")
    assert response.status_code == 400
    assert "project" in response.json()["error"]["details"]
    assert Schedule.objects.get(id=made["id"]).project_id == project.id


def test_permissions_matrix(make_token, client_for, registry, project, other_tenant):
    writer = client_for(make_token(["runs:read", "runs:write"]))
    made = writer.post(URL, body(), format="json").json()
    url = f"{URL}{made['id']}/"
    before = list(Schedule.objects.values_list("id", "paused", "cron", "updated_at"))

    anonymous = client_for(None)
    assert anonymous.get(URL).status_code == 401
    assert anonymous.post(f"{url}pause/").status_code == 401

    reader = client_for(make_token(["runs:read"]))
    assert reader.get(url).status_code == 200
    assert reader.post(URL, body(), format="json").status_code == 403
    assert reader.post(f"{url}pause/").status_code == 403
    assert reader.patch(url, {"cron": "* * * * *"}, format="json").status_code == 403
    assert reader.delete(url).status_code == 403

    no_grant = client_for(make_token(["sessions:read"]))
    assert no_grant.get(URL).status_code == 403
    assert no_grant.get(url).status_code == 403

    elsewhere = ProjectFactory(tenant=project.tenant, slug="elsewhere")
    limited = client_for(make_token(["runs:read", "runs:write"], projects=[elsewhere]))
    assert limited.get(url).status_code == 404
    assert limited.post(f"{url}pause/").status_code == 404
    assert limited.delete(url).status_code == 404
    assert limited.get(URL).json()["results"] == []
    assert (
        limited.post(URL, body(), format="json").status_code == 404
    )  # the project is out of scope

    foreign = client_for(make_token(["*"], tenant=other_tenant))
    assert foreign.get(url).status_code == 404
    assert foreign.get(f"{url}next/").status_code == 404
    assert foreign.post(f"{url}resume/").status_code == 404
    assert foreign.patch(url, {"cron": "* * * * *"}, format="json").status_code == 404
    assert foreign.delete(url).status_code == 404
    assert foreign.get(URL).json()["results"] == []

    after = list(Schedule.objects.values_list("id", "paused", "cron", "updated_at"))
    assert after == before
    denied = AuditEvent.objects.filter(action__startswith="schedule.", outcome="denied")
    assert sorted(denied.values_list("action", "status_code")) == [
        ("schedule.create", 403),
        ("schedule.delete", 403),
        ("schedule.pause", 401),
        ("schedule.pause", 403),
        ("schedule.update", 403),
    ]


def test_unknown_query_parameters_are_refused(writer, project):
    made = writer.post(URL, body(), format="json").json()
    response = writer.get(f"{URL}{made['id']}/next/", {"n": 3})
    assert response.status_code == 400
    assert "n" in response.json()["error"]["details"]
    too_many = writer.get(f"{URL}{made['id']}/next/", {"count": 1000})
    assert too_many.status_code == 400
