"""The retention API: CRUD, dry runs, apply, pass log; validation as the documented error body,
scoping, grants, audit."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from openrath_project.tenancy.models import AuditEvent
from retention_app.models import RetentionPass, RetentionPolicy
from runs_app.models import Run
from tests.factories import ProjectFactory
from tests.retention_app.conftest import World

pytestmark = pytest.mark.django_db

URL = "/api/v1/retention/"


@pytest.fixture
def writer(make_token, client_for):
    return client_for(make_token(["projects:read", "projects:write"]))


def test_create_preview_apply_and_read_the_log(writer, project):
    world = World(project)
    old, young = world.run(), world.run()
    long_ago = timezone.now() - timedelta(days=90)
    Run.objects.unscoped().filter(id=old.id).update(created_at=long_ago, finished_at=long_ago)
    Run.objects.unscoped().filter(id=young.id).update(
        created_at=timezone.now(), finished_at=timezone.now()
    )
    created = writer.post(
        URL, {"project": "research", "runs_max_age_seconds": 30 * 86400}, format="json"
    )
    assert created.status_code == 201, created.content
    data = created.json()
    assert data["project"] == str(project.id)
    assert data["runs_max_age_seconds"] == 2592000
    assert data["sessions_keep_last"] is None
    assert data["enabled"] is True
    url = f"{URL}{data['id']}/"

    preview = writer.get(f"{url}preview/").json()
    assert preview["dry_run"] is True
    assert preview["removed"]["runs"]["count"] == 1
    assert preview["removed"]["checkpoints"]["count"] == 5
    assert preview["sample"]["runs"] == [str(old.id)]
    assert Run.objects.unscoped().filter(id=old.id).exists()

    applied = writer.post(f"{url}apply/").json()
    assert (applied["dry_run"], applied["complete"]) == (False, True)
    assert applied["removed"]["runs"]["count"] == 1
    assert not Run.objects.unscoped().filter(id=old.id).exists()
    assert Run.objects.unscoped().filter(id=young.id).exists()

    log = writer.get(f"{url}passes/").json()["results"]
    assert [(p["trigger"], p["removed"]["runs"], p["complete"]) for p in log] == [("api", 1, True)]
    assert log[0]["actor"].startswith("token:")

    changed = writer.patch(url, {"runs_keep_last": 10, "enabled": False}, format="json")
    assert changed.status_code == 200
    assert (changed.json()["runs_keep_last"], changed.json()["enabled"]) == (10, False)
    assert writer.delete(url).status_code == 204
    assert writer.get(url).status_code == 404
    actions = sorted(
        AuditEvent.objects.filter(action__startswith="retention.").values_list("action", "outcome")
    )
    assert actions == [
        ("retention.apply", "success"),
        ("retention.create", "success"),
        ("retention.delete", "success"),
        ("retention.pass", "success"),
        ("retention.update", "success"),
    ]


def test_a_draft_preview_stores_nothing(writer, project):
    World(project).session(chunks=3)
    response = writer.post(
        f"{URL}preview/", {"project": "research", "sessions_keep_last": 0}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["removed"]["chunks"]["count"] == 3
    assert not RetentionPolicy.objects.unscoped().exists()


def test_one_policy_per_project(writer, project):
    assert writer.post(URL, {"project": "research"}, format="json").status_code == 201
    again = writer.post(URL, {"project": "research"}, format="json")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"runs_keep_last": -1}, "runs_keep_last"),
        ({"events_keep_last": 0}, "events_keep_last"),
        ({"artifacts_grace_seconds": 60}, "artifacts_grace_seconds"),
        ({"interval_seconds": 5}, "interval_seconds"),
        ({"runs_max_age_seconds": "soon"}, "runs_max_age_seconds"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(writer, project, fields, field):
    response = writer.post(URL, {"project": "research", **fields}, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["details"]
    assert not RetentionPolicy.objects.unscoped().exists()


def test_permissions_matrix(make_token, client_for, project, other_tenant):
    writer = client_for(make_token(["projects:read", "projects:write"]))
    made = writer.post(URL, {"project": "research", "runs_keep_last": 5}, format="json").json()
    url = f"{URL}{made['id']}/"
    World(project).run()
    before = list(RetentionPolicy.objects.values_list("id", "runs_keep_last", "updated_at"))
    runs_before = Run.objects.unscoped().count()

    anonymous = client_for(None)
    assert anonymous.get(URL).status_code == 401
    assert anonymous.post(f"{url}apply/").status_code == 401

    reader = client_for(make_token(["projects:read"]))
    assert reader.get(url).status_code == 200
    assert reader.get(f"{url}preview/").status_code == 200
    assert reader.post(URL, {"project": "research"}, format="json").status_code == 403
    assert reader.post(f"{url}apply/").status_code == 403
    assert reader.patch(url, {"runs_keep_last": 0}, format="json").status_code == 403
    assert reader.delete(url).status_code == 403

    no_grant = client_for(make_token(["runs:read"]))
    assert no_grant.get(URL).status_code == 403
    assert no_grant.get(url).status_code == 403

    elsewhere = ProjectFactory(tenant=project.tenant, slug="elsewhere")
    limited = client_for(make_token(["projects:read", "projects:write"], projects=[elsewhere]))
    assert limited.get(url).status_code == 404
    assert limited.get(f"{url}preview/").status_code == 404
    assert limited.post(f"{url}apply/").status_code == 404
    assert limited.delete(url).status_code == 404
    assert limited.get(URL).json()["results"] == []
    assert limited.post(f"{URL}preview/", {"project": "research"}, format="json").status_code == 404

    foreign = client_for(make_token(["*"], tenant=other_tenant))
    assert foreign.get(url).status_code == 404
    assert foreign.post(f"{url}apply/").status_code == 404
    assert foreign.patch(url, {"runs_keep_last": 0}, format="json").status_code == 404
    assert foreign.delete(url).status_code == 404
    assert foreign.get(URL).json()["results"] == []

    after = list(RetentionPolicy.objects.values_list("id", "runs_keep_last", "updated_at"))
    assert after == before
    assert Run.objects.unscoped().count() == runs_before
    assert not RetentionPass.objects.unscoped().exists()
    denied = AuditEvent.objects.filter(action__startswith="retention.", outcome="denied")
    assert sorted(denied.values_list("action", "status_code")) == [
        ("retention.apply", 401),
        ("retention.apply", 403),
        ("retention.create", 403),
        ("retention.delete", 403),
        ("retention.update", 403),
    ]
