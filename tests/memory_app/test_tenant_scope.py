"""A recall filters by the tenant as well as the project, and a project's memory cannot be
handed to another tenant by moving the project (the red-team's path to it)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from memory_app import services
from memory_app.selectors import recall
from openrath_project.tenancy.fixed_columns import FixedColumnChanged
from openrath_project.tenancy.models import Project

pytestmark = pytest.mark.django_db


def test_recall_returns_only_the_tenants_entries(project, other_tenant):
    entry, _ = services.memory_remember(project=project, text="The launch is on Monday.")
    query = {"project_id": project.id, "query": "when is the launch", "k": 5}
    assert [hit.id for hit in recall(tenant_id=project.tenant_id, **query)] == [entry.id]
    assert recall(tenant_id=other_tenant.id, **query) == []


def test_a_moved_project_would_not_carry_its_memory(project, other_tenant, make_token, client_for):
    services.memory_remember(project=project, text="The launch is on Monday.")
    project.tenant = other_tenant
    with pytest.raises(FixedColumnChanged):
        project.save()
    with pytest.raises(IntegrityError), transaction.atomic():
        Project.objects.filter(pk=project.pk).update(tenant=other_tenant)
    theirs = client_for(make_token(["memory:read"], tenant=other_tenant))
    response = theirs.post(
        "/api/v1/memory/recall/", {"project": str(project.id), "query": "launch"}, format="json"
    )
    assert response.status_code == 404
    assert "Monday" not in response.content.decode()
