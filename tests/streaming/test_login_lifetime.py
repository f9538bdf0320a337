"""A console login's streams end with the login: at logout (``test_limits.py``) and when the
login expires (``SESSION_COOKIE_AGE``, ``OPENRATH_CONSOLE_SESSION_SECONDS``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.contrib.sessions.models import Session as LoginSession
from django.test import Client
from django.utils import timezone

from openrath_project.tenancy.models import AuditEvent
from tests.factories import MembershipFactory, UserFactory
from tests.streaming.conftest import TIMEOUT, in_thread, open_stream, receive_until_ready

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_expired_console_login_loses_its_open_stream_at_the_next_recheck(
    session_with, tenant, settings
):
    settings.OPENRATH_WS_RECHECK_SECONDS = 0.2
    session = session_with(1)
    user = UserFactory(username="ada")
    user.save()  # the factory does not save the password: the login's hash must match
    MembershipFactory(user=user, tenant=tenant, role="viewer")
    client = Client()
    client.force_login(user)
    key = client.cookies["sessionid"].value
    browser = [(b"origin", b"http://localhost"), (b"cookie", f"sessionid={key}".encode())]

    def expire() -> None:
        LoginSession.objects.filter(session_key=key).update(
            expire_date=timezone.now() - timedelta(seconds=1)
        )

    async def scenario():
        communicator, accepted, _ = await open_stream(
            f"/ws/sessions/{session.id}/", headers=browser
        )
        assert accepted
        await receive_until_ready(communicator)
        await in_thread(expire)  # the row stays; only its expiry passed
        closed = await communicator.receive_output(timeout=TIMEOUT)
        await communicator.disconnect()
        return closed

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4401}
    assert LoginSession.objects.filter(session_key=key).exists()
    rows = list(AuditEvent.objects.filter(action="ws.recheck"))
    assert [(r.actor, r.status_code, r.details["reason"]) for r in rows] == [
        ("user:ada", 401, "login expired")
    ]
