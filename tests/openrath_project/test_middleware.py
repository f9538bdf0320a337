"""Request ids, the body size limit and JSON errors outside DRF views."""

from __future__ import annotations

import pytest
from django.test import override_settings

from openrath_project.tenancy.models import AuditEvent, Project
from tests.support import error_of

pytestmark = pytest.mark.django_db


def test_request_id_is_echoed_or_made(client):
    given = client.get("/healthz", HTTP_X_REQUEST_ID="abc-123")
    assert given["X-Request-ID"] == "abc-123"
    made = client.get("/healthz")
    assert len(made["X-Request-ID"]) == 32
    hostile = client.get("/healthz", HTTP_X_REQUEST_ID="x" * 500)
    assert hostile["X-Request-ID"] != "x" * 500


@override_settings(OPENRATH_MAX_REQUEST_BYTES=1000)
def test_large_body_is_413_and_changes_nothing(make_token, client_for):
    client = client_for(make_token(["projects:write"]))
    response = client.post(
        "/api/v1/projects/",
        {"slug": "ok", "name": "x" * 2000},
        format="json",
        HTTP_X_REQUEST_ID="big-1",
    )
    assert response.status_code == 413
    error = error_of(response)
    assert error["code"] == "payload_too_large"
    assert error["details"] == {"limit_bytes": 1000}
    assert not Project.objects.filter(slug="ok").exists()
    audit = AuditEvent.objects.get(request_id="big-1")
    assert (audit.action, audit.outcome, audit.status_code) == ("request.too_large", "failure", 413)


def test_unknown_api_route_is_json_404(client):
    response = client.get("/api/v1/nothing-here/")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_wrong_method_is_405_with_error_body(make_token, client_for):
    response = client_for(make_token(["audit:read"])).delete("/api/v1/audit/")
    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"


def test_request_id_reaches_the_audit_row(make_token, client_for):
    client_for(make_token(["projects:write"])).post(
        "/api/v1/projects/", {"slug": "traced"}, format="json", HTTP_X_REQUEST_ID="trace-42"
    )
    assert AuditEvent.objects.get(request_id="trace-42").action == "project.create"


def test_an_admin_write_refused_with_a_login_redirect_is_audited_as_denied(client, project):
    url = f"/admin/tenancy/project/{project.id}/change/"
    response = client.post(url, {"name": "renamed"})
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    project.refresh_from_db()
    assert project.name != "renamed"
    event = AuditEvent.objects.order_by("-id").first()
    assert event is not None
    assert (event.actor, event.outcome, event.status_code) == ("anonymous", "denied", 302)


def test_database_unavailable_is_503_and_its_audit_row_is_logged_not_awaited(
    make_token, client_for, monkeypatch, caplog
):
    """A write refused because the database is gone changed nothing; the audit middleware
    logs it instead of waiting for the pool a second time (which doubled the client's wait)."""
    from django.db import OperationalError

    from openrath_project.tenancy import services

    def unavailable(**kwargs):
        raise OperationalError("couldn't get a connection after 10.00 sec")

    monkeypatch.setattr(services, "project_create", unavailable)
    client = client_for(make_token(["projects:write"]))
    with caplog.at_level("WARNING", logger="openrath_project.middleware"):
        response = client.post(
            "/api/v1/projects/", {"slug": "gone"}, format="json", HTTP_X_REQUEST_ID="db-down-1"
        )
    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert error_of(response)["code"] == "database_unavailable"
    assert not AuditEvent.objects.filter(request_id="db-down-1").exists()
    assert not Project.objects.filter(slug="gone").exists()
    (logged,) = [r for r in caplog.records if "audit event not written" in r.getMessage()]
    assert "project.create" in logged.getMessage()
    assert "POST /api/v1/projects/" in logged.getMessage()
