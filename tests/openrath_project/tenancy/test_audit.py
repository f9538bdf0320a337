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


@pytest.mark.parametrize("url", [URL, "/api/v1/sessions/", "/api/v1/runs/"])
def test_time_filters_take_any_iso_offset_and_refuse_instants_outside_utc(
    url, tenant, make_token, client_for
):
    """ISO 8601 allows offsets up to 24 hours, PostgreSQL only up to 15:59 (fuzzing found the
    500): values are converted to UTC first; an instant that does not exist in UTC is a 400."""
    audit_record(actor="system", action="a.now", outcome="success", tenant=tenant)
    client = client_for(make_token(["audit:read", "sessions:read", "runs:read"]))
    far_future = client.get(url, {"created_before": "5325-05-05T14:39:21.82883+21:23"})
    assert far_future.status_code == 200, far_future.content
    far_past = client.get(url, {"created_after": "0104-08-10T12:51:45-17:43"})
    assert far_past.status_code == 200, far_past.content
    future_only = client.get(url, {"created_after": "5022-06-01T05:11:24.7-21:23"})
    assert (future_only.status_code, future_only.json()["results"]) == (200, [])
    if url == URL:
        assert [e["action"] for e in far_future.json()["results"]] == ["a.now"]
    for value in ("0001-01-01T00:30:00+17:00", "9999-12-31T23:30:00-16:00"):
        outside = client.get(url, {"created_before": value})
        assert outside.status_code == 400, (value, outside.content)
        error = error_of(outside)
        assert error["code"] == "invalid"
        assert "created_before" in error["details"]
