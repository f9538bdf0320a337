"""The console's retention page: a dry run that changes nothing, apply and create for admins,
refusals for everyone else, scope."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from openrath_project.tenancy.models import AuditEvent
from retention_app import services
from retention_app.models import RetentionPass, RetentionPolicy
from runs_app.models import Run
from tests.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.retention_app.conftest import World

pytestmark = pytest.mark.django_db


def login(tenant: Any, role: str) -> Client:
    user = UserFactory(username=f"{role}-{tenant.slug}")
    user.save()
    MembershipFactory(user=user, tenant=tenant, role=role)
    client = Client()
    client.force_login(user)
    return client


def _old_run(project: Any) -> Run:
    run = World(project).run()
    long_ago = timezone.now() - timedelta(days=90)
    Run.objects.unscoped().filter(id=run.id).update(created_at=long_ago, finished_at=long_ago)
    return run


def test_an_admin_previews_then_applies(tenant, project) -> None:
    run = _old_run(project)
    policy = services.policy_create(project=project, created_by="t", runs_max_age_seconds=86400)
    admin = login(tenant, "admin")
    page = admin.get("/console/retention/").content.decode()
    assert "research" in page
    assert f"/console/retention/{policy.id}/apply/" in page
    preview = admin.get(f"/console/retention/{policy.id}/preview/").content.decode()
    assert 'id="retention-report"' in preview
    assert 'data-kind="runs"><td>runs</td><td class="mono">1</td>' in preview
    assert Run.objects.unscoped().filter(id=run.id).exists()
    applied = admin.post(f"/console/retention/{policy.id}/apply/")
    assert applied.status_code == 302
    assert not Run.objects.unscoped().filter(id=run.id).exists()
    assert RetentionPass.objects.unscoped().get().trigger == "console"
    follow = admin.get("/console/retention/").content.decode()
    assert "console: 5 checkpoints, 5 events, 1 runs" in follow
    actions = list(
        AuditEvent.objects.filter(action__startswith="retention.")
        .order_by("id")
        .values_list("action", "outcome")
    )
    assert actions == [("retention.pass", "success"), ("retention.apply", "success")]


def test_an_admin_creates_a_policy_and_bad_input_is_shown(tenant, project) -> None:
    admin = login(tenant, "admin")
    bad = admin.post(
        "/console/retention/new/", {"project": str(project.id), "artifacts_grace_seconds": "60"}
    )
    assert bad.status_code == 400
    assert "artifacts_grace_seconds" in bad.content.decode()
    assert not RetentionPolicy.objects.unscoped().exists()
    made = admin.post(
        "/console/retention/new/", {"project": str(project.id), "runs_keep_last": "100"}
    )
    assert made.status_code == 302
    assert RetentionPolicy.objects.unscoped().get().runs_keep_last == 100


def test_an_operator_may_preview_but_not_apply(tenant, project) -> None:
    run = _old_run(project)
    policy = services.policy_create(project=project, created_by="t", runs_max_age_seconds=86400)
    operator = login(tenant, "operator")
    page = operator.get("/console/retention/").content.decode()
    assert "/apply/" not in page
    assert "Dry run" in page
    assert operator.get(f"/console/retention/{policy.id}/preview/").status_code == 200
    assert operator.post(f"/console/retention/{policy.id}/apply/").status_code == 403
    assert operator.post(f"/console/retention/{policy.id}/delete/").status_code == 403
    assert Run.objects.unscoped().filter(id=run.id).exists()
    assert RetentionPolicy.objects.unscoped().filter(id=policy.id).exists()
    denied = AuditEvent.objects.filter(action__startswith="retention.", outcome="denied")
    assert sorted(denied.values_list("action", flat=True)) == [
        "retention.apply",
        "retention.delete",
    ]


def test_another_tenants_policy_is_not_shown_and_is_a_404(other_tenant, project) -> None:
    policy = services.policy_create(project=project, created_by="t", runs_keep_last=1)
    ProjectFactory(tenant=other_tenant, slug="theirs")
    outsider = login(other_tenant, "admin")
    assert f'data-policy="{policy.id}"' not in outsider.get("/console/retention/").content.decode()
    assert outsider.get(f"/console/retention/{policy.id}/preview/").status_code == 404
    assert outsider.post(f"/console/retention/{policy.id}/apply/").status_code == 404
    assert outsider.post(f"/console/retention/{policy.id}/delete/").status_code == 404
    assert RetentionPolicy.objects.unscoped().filter(id=policy.id).exists()
