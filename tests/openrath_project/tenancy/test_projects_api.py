"""The projects endpoint as the permission matrix every scoped endpoint follows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from openrath_project.tenancy.models import ApiToken, AuditEvent, Project
from openrath_project.tenancy.services import token_revoke
from tests.support import error_of

URL = "/api/v1/projects/"
NEW = {"slug": "new-one", "name": "New one"}

pytestmark = pytest.mark.django_db


def _state() -> tuple[list[tuple[str, str]], int]:
    return sorted(Project.objects.values_list("tenant__slug", "slug")), ApiToken.objects.count()


@pytest.fixture
def world(project: Any, other_project: Any, foreign_project: Any) -> None:
    """acme/research, acme/ops and globex/research exist."""


@pytest.mark.usefixtures("world")
class TestMatrix:
    def test_anonymous_is_401_and_changes_nothing(self, client_for):
        before = _state()
        for response in (client_for(None).get(URL), client_for(None).post(URL, NEW, format="json")):
            assert response.status_code == 401
            assert error_of(response)["code"] == "not_authenticated"
            assert response["WWW-Authenticate"].startswith("Bearer")
        assert _state() == before

    @pytest.mark.parametrize(
        "raw",
        ["garbage", "ort_abcdefghij_" + "x" * 43, "Bearer-less"],
        ids=["malformed", "unknown", "odd"],
    )
    def test_bad_token_is_401(self, client_for, raw):
        before = _state()
        response = client_for(raw).post(URL, NEW, format="json")
        assert response.status_code == 401
        assert error_of(response)["code"] == "not_authenticated"
        assert _state() == before

    def test_expired_token_is_401(self, client_for, make_token):
        raw = make_token(["projects:read", "projects:write"], expires_in=timedelta(seconds=30))
        ApiToken.objects.update(
            expires_at=timezone.now() - timedelta(seconds=1),
            created_at=timezone.now() - timedelta(minutes=1),
        )
        before = _state()
        response = client_for(raw).post(URL, NEW, format="json")
        assert response.status_code == 401
        assert error_of(response) == {
            "code": "not_authenticated",
            "message": "token expired",
            "details": {},
        }
        assert client_for(raw).get(URL).status_code == 401
        assert _state() == before

    def test_revoked_token_is_401(self, client_for, make_token):
        raw = make_token(["projects:read", "projects:write"])
        token_revoke(prefix=raw)
        before = _state()
        response = client_for(raw).post(URL, NEW, format="json")
        assert response.status_code == 401
        assert error_of(response)["message"] == "token revoked"
        assert _state() == before

    def test_other_tenant_sees_nothing_of_ours(self, client_for, make_token, other_tenant, project):
        raw = make_token(["projects:read", "projects:write"], tenant=other_tenant)
        client = client_for(raw)
        listed = client.get(URL)
        assert listed.status_code == 200
        assert [p["slug"] for p in listed.json()["results"]] == ["research"]
        assert listed.json()["results"][0]["id"] != str(project.id)
        for ref in (str(project.id),):
            response = client.get(f"{URL}{ref}/")
            assert response.status_code == 404
            assert error_of(response)["code"] == "not_found"

    def test_project_restricted_token(self, client_for, make_token, project, other_project):
        raw = make_token(["projects:read", "projects:write"], projects=[project])
        client = client_for(raw)
        assert [p["slug"] for p in client.get(URL).json()["results"]] == ["research"]
        assert client.get(f"{URL}research/").status_code == 200
        hidden = client.get(f"{URL}{other_project.id}/")
        assert hidden.status_code == 404
        assert client.get(f"{URL}ops/").status_code == 404
        before = _state()
        response = client.post(URL, NEW, format="json")
        assert response.status_code == 403
        assert error_of(response)["code"] == "permission_denied"
        assert _state() == before

    def test_missing_grant_is_403(self, client_for, make_token):
        client = client_for(make_token(["sessions:read"]))
        reader = client_for(make_token(["projects:read"]))
        before = _state()
        for response in (client.get(URL), client.post(URL, NEW, format="json")):
            assert response.status_code == 403
            error = error_of(response)
            assert error["code"] == "permission_denied"
            assert error["details"]["required_grant"] in {"projects:read", "projects:write"}
        response = reader.post(URL, NEW, format="json")
        assert response.status_code == 403
        assert error_of(response)["details"] == {"required_grant": "projects:write"}
        assert _state() == before

    def test_allowed(self, client_for, make_token, tenant):
        client = client_for(make_token(["projects:read", "projects:write"]))
        created = client.post(URL, NEW, format="json")
        assert created.status_code == 201
        body = created.json()
        assert set(body) == {"id", "slug", "name", "max_running_runs", "created_at"}
        assert body["slug"] == "new-one"
        assert Project.objects.get(id=body["id"]).tenant == tenant
        assert client.get(f"{URL}new-one/").json()["id"] == body["id"]
        assert client.get(f"{URL}{body['id']}/").json()["slug"] == "new-one"
        slugs = [p["slug"] for p in client.get(URL).json()["results"]]
        assert slugs == ["new-one", "ops", "research"]


class TestValidation:
    def test_duplicate_slug_is_409(self, client_for, make_token, project):
        client = client_for(make_token(["projects:write"]))
        before = _state()
        response = client.post(URL, {"slug": "research"}, format="json")
        assert response.status_code == 409
        assert error_of(response)["code"] == "conflict"
        assert _state() == before

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"slug": "Bad Slug"}, "slug"),
            ({}, "slug"),
            ({"slug": "ok", "colour": "red"}, "colour"),
            ({"slug": "ok", "name": ""}, "name"),
        ],
    )
    def test_bad_input_names_the_field(self, client_for, make_token, body, field):
        client = client_for(make_token(["projects:write"]))
        before = _state()
        response = client.post(URL, body, format="json")
        assert response.status_code == 400
        error = error_of(response)
        assert error["code"] == "invalid"
        assert field in error["details"]
        assert field in error["message"]
        assert _state() == before

    def test_malformed_json_is_400(self, client_for, make_token):
        client = client_for(make_token(["projects:write"]))
        response = client.post(URL, data="{not json", content_type="application/json")
        assert response.status_code == 400
        assert error_of(response)["code"] == "malformed_request"

    def test_pagination_shape_and_limit(self, client_for, make_token, tenant):
        from tests.factories import ProjectFactory

        for i in range(5):
            ProjectFactory(tenant=tenant, slug=f"p{i}")
        client = client_for(make_token(["projects:read"]))
        first = client.get(URL, {"limit": 2}).json()
        assert set(first) == {"results", "next"}
        assert [p["slug"] for p in first["results"]] == ["p0", "p1"]
        seen = [p["slug"] for p in first["results"]]
        nxt = first["next"]
        while nxt:
            page = client.get(nxt).json()
            seen += [p["slug"] for p in page["results"]]
            nxt = page["next"]
        assert seen == ["p0", "p1", "p2", "p3", "p4"]
        for bad in ("0", "abc", "100000"):
            response = client.get(URL, {"limit": bad})
            assert response.status_code == 400
            assert "limit" in error_of(response)["details"]
        response = client.get(URL, {"cursor": "not-a-cursor"})
        assert response.status_code == 400


def test_denials_and_writes_are_audited(client_for, make_token, tenant, project):
    writer = make_token(["projects:read", "projects:write"])
    client_for(writer).post(URL, NEW, format="json")
    client_for(writer).post(URL, {"slug": "new-one"}, format="json")  # duplicate: failure
    client_for(make_token(["projects:read"])).post(URL, NEW, format="json")  # denied 403
    client_for(None).post(URL, NEW, format="json")  # denied 401, anonymous
    client_for(writer).get(URL)  # reads are not audited
    rows = list(
        AuditEvent.objects.order_by("id").values(
            "action", "outcome", "status_code", "tenant__slug", "object_type"
        )
    )
    assert rows == [
        {
            "action": "project.create",
            "outcome": "success",
            "status_code": 201,
            "tenant__slug": "acme",
            "object_type": "project",
        },
        {
            "action": "project.create",
            "outcome": "failure",
            "status_code": 409,
            "tenant__slug": "acme",
            "object_type": "project",
        },
        {
            "action": "project.create",
            "outcome": "denied",
            "status_code": 403,
            "tenant__slug": "acme",
            "object_type": "project",
        },
        {
            "action": "project.create",
            "outcome": "denied",
            "status_code": 401,
            "tenant__slug": None,
            "object_type": "project",
        },
    ]
    success = AuditEvent.objects.order_by("id").first()
    assert success is not None
    assert success.project == Project.objects.get(slug="new-one")
    assert success.actor == f"token:{writer.split('_')[1]}"
    assert success.request_id
