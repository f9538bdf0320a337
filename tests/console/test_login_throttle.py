"""Console and admin logins are throttled (django-axes): after the configured number of
failures the account is locked, the right password included, with a clear 429 page; every
failed attempt is audited under the tenants of the user it named.

Axes keeps its counts in the database, so each test starts from none (the test's transaction
is rolled back): throttling stays on in the whole suite."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client

from openrath_project.tenancy.models import AuditEvent
from tests.console.conftest import PASSWORD
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db

ADMIN = f"/{settings.ADMIN_PATH}"
LOGINS = {"console": "/console/login/", "admin": f"{ADMIN}login/"}


def _logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def _failed_rows() -> list[tuple]:
    return list(
        AuditEvent.objects.filter(action="login.failed")
        .order_by("id")
        .values_list("tenant__slug", "outcome", "status_code", "details")
    )


@pytest.mark.parametrize("via", ["console", "admin"])
def test_repeated_failures_lock_the_account_even_for_the_right_password(member, via):
    user = member("admin", username="olivia")
    user.is_staff = True
    user.save()
    url = LOGINS[via]
    client = Client()
    answers = [
        client.post(url, {"username": "olivia", "password": f"wrong-{i}"}).status_code
        for i in range(settings.AXES_FAILURE_LIMIT)
    ]
    # The form again for each failure (the console says 401), then the lockout page.
    refused = 401 if via == "console" else 200
    assert answers == [refused] * (settings.AXES_FAILURE_LIMIT - 1) + [429]
    locked = client.post(url, {"username": "olivia", "password": PASSWORD})
    assert locked.status_code == 429
    assert locked["Retry-After"] == str(15 * 60)
    assert "Too many failed logins" in locked.content.decode()
    assert "Try again in 15 minutes." in locked.content.decode()
    assert not _logged_in(client)
    # Another client (another address) is refused too: the account is locked, not the client.
    other = Client(REMOTE_ADDR="10.9.8.7")
    assert other.post(url, {"username": "olivia", "password": PASSWORD}).status_code == 429
    assert not _logged_in(other)
    limit = settings.AXES_FAILURE_LIMIT
    failure = {"username": "olivia", "via": via, "locked_out": False}
    lockout = {"username": "olivia", "via": via, "locked_out": True}
    assert _failed_rows() == [
        *[("acme", "denied", 401, failure)] * (limit - 1),
        *[("acme", "denied", 429, lockout)] * 3,
    ]
    assert set(
        AuditEvent.objects.filter(action="login.failed").values_list("object_id", flat=True)
    ) == {str(user.pk)}


def test_a_success_resets_the_count(member):
    member("operator", username="olivia")
    client = Client()
    for _ in range(2):
        for i in range(settings.AXES_FAILURE_LIMIT - 1):
            client.post("/console/login/", {"username": "olivia", "password": f"wrong-{i}"})
        response = client.post("/console/login/", {"username": "olivia", "password": PASSWORD})
        assert (response.status_code, response["Location"]) == (302, "/console/")
        client.post("/console/logout/")


def test_the_limit_and_lockout_are_settings(member, settings):
    settings.AXES_FAILURE_LIMIT = 2
    member("operator", username="olivia")
    client = Client()
    assert (
        client.post("/console/login/", {"username": "olivia", "password": "x"}).status_code == 401
    )
    assert (
        client.post("/console/login/", {"username": "olivia", "password": "y"}).status_code == 429
    )
    settings.AXES_ENABLED = False
    response = client.post("/console/login/", {"username": "olivia", "password": PASSWORD})
    assert response.status_code == 302


def test_failures_are_audited_in_every_tenant_of_the_user_and_nowhere_else(
    member, other_tenant, make_token, client_for
):
    user = member("operator", username="olivia")
    MembershipFactory(user=user, tenant=other_tenant, role="viewer")
    Client().post("/console/login/", {"username": "olivia", "password": "wrong"})
    Client().post("/console/login/", {"username": "nobody", "password": "wrong"})
    details = {"username": "olivia", "via": "console", "locked_out": False}
    assert sorted(_failed_rows()) == [
        ("acme", "denied", 401, details),
        ("globex", "denied", 401, details),
    ]
    # The tenant reads it in its audit log (the tenant-less row of the request is not its own).
    listed = client_for(make_token(["audit:read"])).get("/api/v1/audit/").json()["results"]
    assert [(e["action"], e["outcome"], e["details"]) for e in listed] == [
        ("login.failed", "denied", details)
    ]
    # An unknown name is counted too (and locked), but no tenant hears of it.
    assert AuditEvent.objects.filter(action="console.login", tenant=None).count() == 2
