"""The per-principal connection limit (4429) and the periodic re-check of open streams."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.contrib.sessions.models import Session as LoginSession
from django.test import Client
from django.utils import timezone

from openrath_project.tenancy.models import ApiToken, AuditEvent
from openrath_project.tenancy.services import token_revoke
from openrath_project.ws.limits import memory_limiter
from sessions_app import streaming
from tests.factories import MembershipFactory, UserFactory
from tests.streaming.conftest import (
    TIMEOUT,
    append_texts,
    bearer,
    chunk_texts,
    in_thread,
    open_stream,
    receive_n,
    receive_until_ready,
    refused_with,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_beyond_the_limit_is_4429_until_a_stream_closes(session_with, make_token, settings):
    settings.OPENRATH_MAX_WS_PER_PRINCIPAL = 2
    session = session_with(1)
    raw = make_token(["sessions:read"], name="limited")
    other = make_token(["sessions:read"], name="other")
    path = f"/ws/sessions/{session.id}/"

    async def scenario():
        open_ones = []
        for _ in range(2):
            communicator, accepted, _ = await open_stream(path, headers=bearer(raw))
            assert accepted
            await receive_until_ready(communicator)
            open_ones.append(communicator)
        third = await refused_with(path, headers=bearer(raw))
        # Another principal has its own allowance.
        elsewhere, accepted_elsewhere, _ = await open_stream(path, headers=bearer(other))
        await elsewhere.disconnect()
        await open_ones.pop().disconnect()
        again, accepted_again, _ = await open_stream(path, headers=bearer(raw))
        await again.disconnect()
        await open_ones.pop().disconnect()
        return third, accepted_elsewhere, accepted_again

    third, accepted_elsewhere, accepted_again = async_to_sync(scenario)()
    assert third == 4429
    assert accepted_elsewhere is True
    assert accepted_again is True
    rows = list(AuditEvent.objects.filter(action="ws.connect"))
    assert [(r.status_code, r.outcome, r.details["reason"]) for r in rows] == [
        (429, "denied", "connection limit")
    ]
    token = ApiToken.objects.get(name="limited")
    assert memory_limiter().count(f"{token.tenant_id}:token:{token.prefix}") == 0


def test_a_revoked_token_loses_its_open_stream_at_the_next_recheck(
    session_with, make_token, settings
):
    settings.OPENRATH_WS_RECHECK_SECONDS = 0.2
    session = session_with(1)
    raw = make_token(["sessions:read"])

    async def scenario():
        communicator, _, _ = await open_stream(f"/ws/sessions/{session.id}/", headers=bearer(raw))
        await receive_until_ready(communicator)
        await in_thread(lambda: token_revoke(prefix=raw))
        closed = await communicator.receive_output(timeout=TIMEOUT)
        await communicator.disconnect()
        return closed

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4401}
    rows = list(AuditEvent.objects.filter(action="ws.recheck"))
    assert [(r.status_code, r.outcome, r.object_id, r.details["reason"]) for r in rows] == [
        (401, "denied", str(session.id), "token revoked")
    ]


def test_an_expired_token_or_a_lost_grant_closes_the_stream(session_with, make_token, settings):
    settings.OPENRATH_WS_RECHECK_SECONDS = 0.2
    session = session_with(1)
    expiring = make_token(["sessions:read"], name="expiring")
    narrowed = make_token(["sessions:read"], name="narrowed")

    async def closed_after(raw: str, change) -> dict:
        communicator, _, _ = await open_stream(f"/ws/sessions/{session.id}/", headers=bearer(raw))
        await receive_until_ready(communicator)
        await in_thread(change)
        closed = await communicator.receive_output(timeout=TIMEOUT)
        await communicator.disconnect()
        return closed

    def expire() -> None:
        ApiToken.objects.filter(name="expiring").update(expires_at=timezone.now())

    def narrow() -> None:
        ApiToken.objects.filter(name="narrowed").update(grants=["runs:read"])

    assert async_to_sync(closed_after)(expiring, expire)["code"] == 4401
    assert async_to_sync(closed_after)(narrowed, narrow)["code"] == 4403


def test_the_recheck_repairs_a_lost_hint(session_with, make_token, settings, hints):
    settings.OPENRATH_WS_RECHECK_SECONDS = 0.2
    session = session_with(1)
    raw = make_token(["sessions:read"])

    async def scenario():
        communicator, _, _ = await open_stream(f"/ws/sessions/{session.id}/", headers=bearer(raw))
        await receive_until_ready(communicator)
        streaming._listeners.remove(hints)
        try:
            await in_thread(lambda: append_texts(session.id, ["unannounced"]))
        finally:
            streaming.subscribe(hints)
        got = await receive_n(communicator, 1)
        assert await communicator.receive_nothing(timeout=0.5)
        await communicator.disconnect()
        return got

    got = async_to_sync(scenario)()
    assert chunk_texts(got) == ["unannounced"]


def test_logging_out_of_the_console_closes_its_streams(session_with, tenant, settings):
    settings.OPENRATH_WS_RECHECK_SECONDS = 0.2
    session = session_with(1)
    user = UserFactory(username="ada")
    user.save()  # the factory does not save the password: the login's hash must match
    MembershipFactory(user=user, tenant=tenant, role="viewer")
    client = Client()
    client.force_login(user)
    browser = [
        (b"origin", b"http://localhost"),
        (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
    ]

    async def scenario():
        communicator, accepted, _ = await open_stream(
            f"/ws/sessions/{session.id}/", headers=browser
        )
        assert accepted
        await receive_until_ready(communicator)
        await in_thread(lambda: LoginSession.objects.all().delete())  # as a logout does
        closed = await communicator.receive_output(timeout=TIMEOUT)
        await communicator.disconnect()
        return closed

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4401}
    rows = list(AuditEvent.objects.filter(action="ws.recheck"))
    assert [(r.actor, r.status_code, r.details["reason"]) for r in rows] == [
        ("user:ada", 401, "logged out")
    ]
