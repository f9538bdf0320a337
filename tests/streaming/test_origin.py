"""A browser's WebSocket handshake must come from the site itself: Django's CSRF origin rules
(scheme, host and port against the handshake's own Host, ``ALLOWED_HOSTS`` and
``CSRF_TRUSTED_ORIGINS``), so another port of the same host cannot use a console login."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing.websocket import WebsocketCommunicator
from django.test import Client

from openrath_project.asgi import application
from openrath_project.tenancy.models import AuditEvent
from openrath_project.ws.auth import origin_verified
from tests.factories import MembershipFactory, UserFactory
from tests.streaming.conftest import TIMEOUT, receive_until_ready

pytestmark = pytest.mark.django_db(transaction=True)


def _cookie(tenant: Any) -> bytes:
    user = UserFactory(username="ada")
    user.save()  # the login's session hash must match the stored password
    MembershipFactory(user=user, tenant=tenant, role="viewer")
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def handshake(
    path: str, headers: list[tuple[bytes, bytes]], *, scheme: str = "ws"
) -> tuple[bool, Any]:
    """Open the stream through the real application; ``(accepted, close code)``."""

    async def scenario() -> tuple[bool, Any]:
        communicator = WebsocketCommunicator(application, path, headers=headers)
        communicator.scope["scheme"] = scheme
        communicator.scope["server"] = ("10.0.0.5", 8000)
        accepted, detail = await communicator.connect(timeout=TIMEOUT)
        if accepted:
            messages = await receive_until_ready(communicator)
            assert messages[-1]["type"] == "ready"
        await communicator.disconnect()
        return accepted, detail

    return async_to_sync(scenario)()


@pytest.fixture
def stream(session_with: Any, tenant: Any) -> tuple[str, bytes]:
    session = session_with(1)
    return f"/ws/sessions/{session.id}/", _cookie(tenant)


def test_another_port_of_the_same_host_is_refused(stream):
    path, cookie = stream
    wrong_port = [(b"host", b"localhost:8000"), (b"origin", b"http://localhost:9000")]
    accepted, code = handshake(path, [*wrong_port, (b"cookie", cookie)])
    assert (accepted, code) == (False, 1000)  # denied before anything runs
    right = [(b"host", b"localhost:8000"), (b"origin", b"http://localhost:8000")]
    assert handshake(path, [*right, (b"cookie", cookie)]) == (True, None)
    # The refusal ran nothing: no authentication, no audit row.
    assert not AuditEvent.objects.filter(action__startswith="ws.").exists()


def test_the_scheme_must_match_the_handshake(stream):
    path, cookie = stream
    host = (b"host", b"console.example.com")
    https = (b"origin", b"https://console.example.com")
    http = (b"origin", b"http://console.example.com")
    with_settings = {"ALLOWED_HOSTS": ["console.example.com"]}
    from django.test import override_settings

    with override_settings(**with_settings):
        assert handshake(path, [host, https, (b"cookie", cookie)], scheme="wss") == (True, None)
        assert handshake(path, [host, http, (b"cookie", cookie)], scheme="wss")[0] is False
        assert handshake(path, [host, https, (b"cookie", cookie)], scheme="ws")[0] is False
        # Behind a TLS proxy: SECURE_PROXY_SSL_HEADER says the handshake was https.
        with override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")):
            proxied = [host, https, (b"x-forwarded-proto", b"https"), (b"cookie", cookie)]
            assert handshake(path, proxied, scheme="ws") == (True, None)


def test_a_host_outside_allowed_hosts_is_refused_even_with_a_matching_origin(stream):
    path, cookie = stream
    forged = [(b"host", b"evil.example:8000"), (b"origin", b"http://evil.example:8000")]
    assert handshake(path, [*forged, (b"cookie", cookie)])[0] is False


def test_csrf_trusted_origins_admit_exact_and_wildcard_entries_port_included(settings, stream):
    path, cookie = stream
    settings.CSRF_TRUSTED_ORIGINS = ["https://console.example.com", "https://*.ops.example.com"]
    internal = (b"host", b"localhost:8000")  # the proxy rewrote Host
    for origin, accepted in [
        (b"https://console.example.com", True),
        (b"https://console.example.com:8443", False),
        (b"http://console.example.com", False),
        (b"https://eu.ops.example.com", True),
        (b"https://eu.ops.example.com:444", False),
        (b"https://ops.example.com.evil.example", False),
        (b"null", False),
    ]:
        result = handshake(path, [internal, (b"origin", origin), (b"cookie", cookie)])
        assert result[0] is accepted, origin


@pytest.mark.parametrize(
    ("headers", "verified"),
    [
        # No Host and no server address (in-process harnesses only): the default port.
        ([(b"origin", b"http://localhost")], True),
        ([(b"origin", b"http://localhost:9000")], False),
        ([(b"origin", b"http://localhost:80")], False),
        ([(b"origin", b"http://evil.example")], False),
        ([(b"origin", b"http://localhost:notaport")], False),
        ([(b"host", b"localhost"), (b"origin", b"http://localhost")], True),
        ([(b"host", b"localhost"), (b"origin", b"http://localhost:8000")], False),
        ([(b"host", b"LOCALHOST:8000"), (b"origin", b"http://localhost:8000")], False),
        ([(b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000")], True),
        ([], False),
    ],
)
def test_origin_verified_follows_djangos_csrf_rules(headers, verified):
    scope = {"type": "websocket", "path": "/ws/x/", "headers": headers, "scheme": "ws"}
    assert origin_verified(scope) is verified
