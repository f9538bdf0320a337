"""The audit log: append-only, scoped, filterable."""

from __future__ import annotations

import pytest

from openrath_project.tenancy.models import AuditEvent
from openrath_project.tenancy.services import audit_record
from tests.support import error_of

pytestmark = pytest.mark.django_db
URL = "/api/v1/audit/"


def test_append_only_in_the_orm(tenant):
    event = audit_record(actor="system", action="x", outcome="success", tenant=tenant)
    event.action = "y"
    with pytest.raises(TypeError, match="append-only"):
        event.save()
    with pytest.raises(TypeError, match="append-only"):
        event.delete()
    with pytest.raises(TypeError, match="append-only"):
        AuditEvent.objects.filter(pk=event.pk).update(action="z")
    with pytest.raises(TypeError, match="append-only"):
        AuditEvent.objects.all().delete()
    assert AuditEvent.objects.get(pk=event.pk).action == "x"
    with pytest.raises(ValueError, match="outcome"):
        audit_record(actor="system", action="x", outcome="maybe")


def test_audit_endpoint_is_scoped_and_filterable(
    tenant, other_tenant, project, other_project, make_token, client_for
):
    audit_record(actor="system", action="a.one", outcome="success", tenant=tenant, project=project)
    audit_record(
        actor="system", action="a.two", outcome="failure", tenant=tenant, project=other_project
    )
    audit_record(actor="system", action="a.three", outcome="denied", tenant=tenant)
    audit_record(actor="system", action="a.foreign", outcome="success", tenant=other_tenant)
    client = client_for(make_token(["audit:read"]))
    actions = [e["action"] for e in client.get(URL).json()["results"]]
    assert actions == ["a.three", "a.two", "a.one"]
    assert [e["action"] for e in client.get(URL, {"outcome": "failure"}).json()["results"]] == [
        "a.two"
    ]
    assert [
        e["action"] for e in client.get(URL, {"project": str(project.id)}).json()["results"]
    ] == ["a.one"]
    restricted = client_for(make_token(["audit:read"], projects=[project]))
    assert [e["action"] for e in restricted.get(URL).json()["results"]] == ["a.one"]
    response = client_for(make_token(["projects:read"])).get(URL)
    assert response.status_code == 403
    assert error_of(response)["details"] == {"required_grant": "audit:read"}
    bad = client.get(URL, {"outcome": "sideways"})
    assert bad.status_code == 400
    assert "outcome" in error_of(bad)["details"]
