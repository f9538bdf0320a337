"""Console access: login, logout, the tenant switcher, roles, and scoping (404 outside it)."""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings
from django.test import Client

from openrath_project.api.permissions import SESSION_TENANT_KEY
from openrath_project.console.access import SESSION_PROJECT_KEY
from openrath_project.tenancy.models import AuditEvent
from runs_app.models import Interrupt, Run
from sessions_app.services import session_from_user_message
from tests.console.conftest import PASSWORD
from tests.factories import MembershipFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db

PAGES = [
    "/console/",
    "/console/approvals/",
    "/console/effects/",
    "/console/runs/",
    "/console/sessions/",
]


@pytest.mark.parametrize("path", PAGES)
def test_every_page_needs_a_login(path):
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/console/login/?next={path}"


def test_object_pages_and_actions_need_a_login(waiting):
    run, interrupt = waiting()
    anonymous = Client()
    for path in (
        f"/console/runs/{run.id}/",
        f"/console/sessions/{run.session_id}/",
        f"/console/sessions/{run.session_id}/lineage/",
    ):
        response = anonymous.get(path)
        assert (response.status_code, response["Location"]) == (
            302,
            f"/console/login/?next={path}",
        )
    response = anonymous.post(
        f"/console/approvals/{interrupt.id}/resolve/",
        {"decision": "approve", "request_digest": interrupt.request_digest},
    )
    # An action without a login is refused (401, audited as denied), not redirected.
    assert response.status_code == 401
    assert 'href="/console/login/"' in response.content.decode()
    assert Interrupt.objects.get(id=interrupt.id).status == "pending"
    event = AuditEvent.objects.get()
    assert (event.action, event.outcome, event.actor, event.status_code) == (
        "interrupt.resolve",
        "denied",
        "anonymous",
        401,
    )
    assert anonymous.post("/console/switch/", {"tenant": "acme"}).status_code == 401


def test_login_with_the_password_then_logout(member):
    user = member("operator", username="olivia")
    client = Client()
    page = client.get("/console/login/")
    assert page.status_code == 200
    assert 'name="csrfmiddlewaretoken"' in page.content.decode()
    response = client.post("/console/login/", {"username": "olivia", "password": PASSWORD})
    assert (response.status_code, response["Location"]) == (302, "/console/")
    overview = client.get("/console/")
    assert overview.status_code == 200
    assert '<strong id="role">operator</strong>' in overview.content.decode()
    login_event = AuditEvent.objects.filter(action="console.login").get()
    assert (login_event.outcome, login_event.actor, login_event.status_code) == (
        "success",
        f"user:{user.username}",
        302,
    )
    response = client.post("/console/logout/")
    assert (response.status_code, response["Location"]) == (302, "/console/login/")
    assert client.get("/console/").status_code == 302
    assert AuditEvent.objects.filter(action="console.logout", outcome="success").count() == 1


def test_a_wrong_password_is_refused_and_audited(member):
    member("operator", username="olivia")
    response = Client().post("/console/login/", {"username": "olivia", "password": "nope"})
    assert response.status_code == 401
    assert "didn't match" in response.content.decode()
    event = AuditEvent.objects.filter(action="console.login").get()
    assert (event.outcome, event.actor, event.details["username"]) == (
        "denied",
        "anonymous",
        "olivia",
    )


def test_a_login_without_a_tenant_sees_a_403_page():
    user = UserFactory(username="nobody")
    user.save()
    client = Client()
    client.force_login(user)
    response = client.get("/console/")
    assert response.status_code == 403
    assert "not a member of any tenant" in response.content.decode()


def test_the_switcher_changes_tenant_and_project(member, tenant, project, other_tenant):
    user = member("viewer", username="vera")
    MembershipFactory(user=user, tenant=other_tenant, role="operator")
    other_project = ProjectFactory(tenant=other_tenant, slug="billing")
    client = Client()
    client.force_login(user)
    assert '<strong id="role">viewer</strong>' in client.get("/console/").content.decode()

    response = client.post("/console/switch/", {"tenant": "globex", "next": "/console/runs/"})
    assert (response.status_code, response["Location"]) == (302, "/console/")
    assert client.session[SESSION_TENANT_KEY] == "globex"
    assert SESSION_PROJECT_KEY not in client.session
    assert '<strong id="role">operator</strong>' in client.get("/console/").content.decode()

    # A project of the chosen tenant narrows the lists; one of another tenant is ignored.
    client.post("/console/switch/", {"tenant": "globex", "project": str(other_project.id)})
    assert client.session[SESSION_PROJECT_KEY] == str(other_project.id)
    client.post("/console/switch/", {"tenant": "globex", "project": str(project.id)})
    assert SESSION_PROJECT_KEY not in client.session

    event = AuditEvent.objects.filter(action="console.switch").order_by("id").first()
    assert (event.outcome, event.tenant.slug, event.details["tenant"]) == (
        "success",
        "globex",
        "globex",
    )


def test_the_switcher_refuses_a_tenant_the_user_is_not_in(member, other_tenant):
    user = member("operator")
    client = Client()
    client.force_login(user)
    response = client.post("/console/switch/", {"tenant": "globex"})
    assert response.status_code == 404
    assert SESSION_TENANT_KEY not in client.session


def test_a_stale_tenant_in_the_session_falls_back_to_a_membership(member, tenant):
    client = Client()
    client.force_login(member("viewer"))
    session = client.session
    session[SESSION_TENANT_KEY] = "gone"
    session.save()
    response = client.get("/console/")
    assert response.status_code == 200
    assert SESSION_TENANT_KEY not in client.session


def test_another_tenants_objects_are_404(
    login, member, waiting, needs_review, other_tenant, foreign_project
):
    foreign_run, foreign_interrupt = waiting(project=foreign_project)
    foreign_effect_run, foreign_effect = needs_review(project=foreign_project)
    foreign_session = session_from_user_message(project=foreign_project, text="secret")
    client = login("operator")
    for path in (
        f"/console/runs/{foreign_run.id}/",
        f"/console/sessions/{foreign_session.id}/",
        f"/console/sessions/{foreign_session.id}/lineage/",
        f"/console/runs/{uuid.uuid4()}/",
    ):
        response = client.get(path)
        assert response.status_code == 404, path
        assert "not found" in response.content.decode()
    for path, data in (
        (
            f"/console/approvals/{foreign_interrupt.id}/resolve/",
            {"decision": "approve", "request_digest": foreign_interrupt.request_digest},
        ),
        (
            f"/console/effects/{foreign_effect.id}/resolve/",
            {"outcome": "not_applied", "request_digest": foreign_effect.request_digest},
        ),
        (f"/console/runs/{foreign_run.id}/cancel/", {"reason": "no"}),
        (f"/console/runs/{foreign_effect_run.id}/resume/", {"reason": "no"}),
    ):
        response = client.post(path, data)
        assert response.status_code == 404, path
    assert Interrupt.objects.get(id=foreign_interrupt.id).status == "pending"
    foreign_effect.refresh_from_db()
    assert foreign_effect.status == "needs_review"
    assert Run.objects.get(id=foreign_run.id).status == "waiting"
    assert Run.objects.get(id=foreign_effect_run.id).status == "needs_review"
    # The lists do not show them either.
    for path in ("/console/approvals/", "/console/effects/", "/console/runs/"):
        body = client.get(path).content.decode()
        assert str(foreign_run.id) not in body
        assert str(foreign_interrupt.id) not in body
        assert str(foreign_effect.id) not in body


def test_the_admin_link_is_only_for_staff(login, member):
    body = login("operator").get("/console/").content.decode()
    assert f'href="/{settings.ADMIN_PATH}"' not in body
    staff = member("admin", username="stan")
    staff.is_staff = True
    staff.save()
    assert f'href="/{settings.ADMIN_PATH}"' in login(user=staff).get("/console/").content.decode()
