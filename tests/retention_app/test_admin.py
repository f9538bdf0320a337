"""The retention admin: pages open; apply and delete are actions that call the services and
audit each row."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from openrath_project.tenancy.models import AuditEvent
from retention_app import services
from retention_app.models import RetentionPass, RetentionPolicy
from runs_app.models import Run
from tests.retention_app.conftest import World

pytestmark = pytest.mark.django_db

ADMIN = f"/{settings.ADMIN_PATH}"


@pytest.fixture
def superuser_client(django_user_model) -> Client:
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789")
    client = Client()
    client.force_login(user)
    return client


def test_pages_and_actions(superuser_client, project) -> None:
    run = World(project).run()
    long_ago = timezone.now() - timedelta(days=90)
    Run.objects.unscoped().filter(id=run.id).update(created_at=long_ago, finished_at=long_ago)
    policy = services.policy_create(project=project, created_by="t", runs_max_age_seconds=86400)
    for path in (
        "retention_app/retentionpolicy/",
        f"retention_app/retentionpolicy/{policy.id}/change/",
        "retention_app/retentionpass/",
    ):
        assert superuser_client.get(f"{ADMIN}{path}").status_code == 200, path
    applied = superuser_client.post(
        f"{ADMIN}retention_app/retentionpolicy/",
        {"action": "apply_policies", "_selected_action": [str(policy.id)]},
    )
    assert applied.status_code == 302
    assert not Run.objects.unscoped().filter(id=run.id).exists()
    assert RetentionPass.objects.unscoped().get().removed["runs"] == 1
    page = superuser_client.get(f"{ADMIN}retention_app/retentionpass/")
    assert page.status_code == 200
    deleted = superuser_client.post(
        f"{ADMIN}retention_app/retentionpolicy/",
        {"action": "delete_policies", "_selected_action": [str(policy.id)]},
    )
    assert deleted.status_code == 302
    assert not RetentionPolicy.objects.unscoped().exists()
    audit = AuditEvent.objects.filter(action__in=["retention.apply", "retention.delete"])
    assert sorted(audit.values_list("action", "outcome")) == [
        ("retention.apply", "success"),
        ("retention.delete", "success"),
    ]
