"""Who may open a stream: tokens (header, subprotocol), console logins, grants, scope, audit.

A refusal closes before accept with 4401 / 4403 / 4404, says nothing about the object (an
out-of-scope object is refused exactly like a missing one) and writes a denied audit row.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.testing.websocket import WebsocketCommunicator
from django.test import Client
from django.utils import timezone
from prometheus_client import REGISTRY

from openrath_project.asgi import application
from openrath_project.tenancy.models import ApiToken, AuditEvent
from openrath_project.tenancy.services import token_revoke
from runs_app import services as run_services
from tests.factories import MembershipFactory, UserFactory
from tests.streaming.conftest import (
    TIMEOUT,
    bearer,
    open_stream,
    receive_until_ready,
    refused_with,
)

pytestmark = pytest.mark.django_db(transaction=True)


def denials() -> list[tuple[str, str, int | None, str, str]]:
    return [
        (a.action, a.actor, a.status_code, a.object_type, a.outcome)
        for a in AuditEvent.objects.filter(action__startswith="ws.").order_by("id")
    ]


def open_sockets(stream: str) -> float:
    value = REGISTRY.get_sample_value("openrath_websocket_connections", {"stream": stream})
    return value or 0.0


def test_token_in_the_authorization_header_opens_the_stream(session_with, make_token):
    session = session_with(2)
    raw = make_token(["sessions:read"])
    before = open_sockets("sessions")

    async def scenario():
        communicator, accepted, subprotocol = await open_stream(
            f"/ws/sessions/{session.id}/", headers=bearer(raw)
        )
        assert (accepted, subprotocol) == (True, None)
        messages = await receive_until_ready(communicator)
        during = open_sockets("sessions")
        await communicator.disconnect()
        return messages, during

    messages, during = async_to_sync(scenario)()
    assert [m["type"] for m in messages] == ["chunk", "chunk", "ready"]
    assert messages[-1] == {"type": "ready", "after": 1}
    assert denials() == []
    assert (during - before, open_sockets("sessions") - before) == (1.0, 0.0)


def test_token_as_a_subprotocol_selects_openrath_v1(session_with, make_token):
    session = session_with(1)
    raw = make_token(["sessions:read"])

    async def scenario():
        communicator, accepted, subprotocol = await open_stream(
            f"/ws/sessions/{session.id}/",
            subprotocols=["openrath.v1", f"openrath.bearer.{raw}"],
        )
        messages = await receive_until_ready(communicator) if accepted else []
        await communicator.disconnect()
        return accepted, subprotocol, messages

    accepted, subprotocol, messages = async_to_sync(scenario)()
    assert (accepted, subprotocol) == (True, "openrath.v1")
    assert [m["type"] for m in messages] == ["chunk", "ready"]


def test_no_credentials_is_4401_and_audited(session_with):
    session = session_with(1)
    code = async_to_sync(refused_with)(f"/ws/sessions/{session.id}/")
    assert code == 4401
    assert denials() == [("ws.connect", "anonymous", 401, "session", "denied")]
    row = AuditEvent.objects.get(action="ws.connect")
    assert row.tenant_id is None
    assert row.object_id == str(session.id)
    assert row.details["transport"] == "websocket"


def test_a_token_in_the_query_string_is_ignored(session_with, make_token):
    session = session_with(1)
    raw = make_token(["sessions:read"])
    for name in ("token", "access_token", "bearer"):
        code = async_to_sync(refused_with)(f"/ws/sessions/{session.id}/?{name}={raw}")
        assert code == 4401
    assert [d[2] for d in denials()] == [401, 401, 401]


def test_revoked_and_expired_tokens_are_4401(session_with, make_token, tenant):
    session = session_with(1)
    revoked = make_token(["sessions:read"], name="revoked")
    token_revoke(prefix=revoked)
    expired = make_token(["sessions:read"], name="expired")
    an_hour_ago = timezone.now() - timedelta(hours=1)
    ApiToken.objects.filter(name="expired").update(
        created_at=an_hour_ago - timedelta(hours=1), expires_at=an_hour_ago
    )
    malformed = "ort_nope"
    for raw in (revoked, expired, malformed):
        code = async_to_sync(refused_with)(f"/ws/sessions/{session.id}/", headers=bearer(raw))
        assert code == 4401
    rows = list(AuditEvent.objects.filter(action="ws.connect").order_by("id"))
    assert [(r.status_code, r.outcome) for r in rows] == [(401, "denied")] * 3
    # A known token's denial is attributed to its tenant; a malformed one to nobody.
    assert [r.tenant_id for r in rows] == [tenant.id, tenant.id, None]
    assert [r.actor.split(":")[0] for r in rows] == ["token", "token", "anonymous"]
    assert [r.details["reason"] for r in rows] == [
        "token revoked",
        "token expired",
        "malformed bearer token",
    ]


def test_missing_grant_is_4403(session_with, make_token, registry, project):
    session = session_with(1)
    runs_only = make_token(["runs:read"])
    sessions_only = make_token(["sessions:read"])
    run, _ = run_services.run_create(project=project, workflow=registry.get("linear"), state={})
    assert (
        async_to_sync(refused_with)(f"/ws/sessions/{session.id}/", headers=bearer(runs_only))
        == 4403
    )
    assert async_to_sync(refused_with)(f"/ws/runs/{run.id}/", headers=bearer(sessions_only)) == 4403
    assert [(d[0], d[2], d[3]) for d in denials()] == [
        ("ws.connect", 403, "session"),
        ("ws.connect", 403, "run"),
    ]


def test_other_tenant_and_unknown_objects_are_the_same_4404(
    session_with, make_token, other_tenant, foreign_project, registry
):
    foreign = session_with(3, project=foreign_project)
    foreign_run, _ = run_services.run_create(
        project=foreign_project, workflow=registry.get("linear"), state={}
    )
    raw = make_token(["sessions:read", "runs:read"])
    paths = [
        f"/ws/sessions/{foreign.id}/",
        f"/ws/sessions/{uuid.uuid4()}/",
        f"/ws/runs/{foreign_run.id}/",
        f"/ws/runs/{uuid.uuid4()}/",
    ]
    codes = [async_to_sync(refused_with)(path, headers=bearer(raw)) for path in paths]
    assert codes == [4404, 4404, 4404, 4404]
    rows = list(AuditEvent.objects.filter(action="ws.connect").order_by("id"))
    assert [(r.status_code, r.object_type) for r in rows] == [
        (404, "session"),
        (404, "session"),
        (404, "run"),
        (404, "run"),
    ]
    # Denials are recorded in the caller's tenant, never the object's.
    assert {r.tenant.slug for r in rows} == {"acme"}


def test_project_restricted_token_cannot_stream_another_project(
    session_with, make_token, project, other_project
):
    mine = session_with(1, project=project)
    theirs = session_with(1, project=other_project)
    raw = make_token(["sessions:read"], projects=[project])

    async def scenario():
        communicator, accepted, _ = await open_stream(
            f"/ws/sessions/{mine.id}/", headers=bearer(raw)
        )
        assert accepted
        await receive_until_ready(communicator)
        await communicator.disconnect()
        return await refused_with(f"/ws/sessions/{theirs.id}/", headers=bearer(raw))

    assert async_to_sync(scenario)() == 4404
    assert [(d[0], d[2]) for d in denials()] == [("ws.connect", 404)]


def test_the_http_denial_response_carries_the_status_and_no_object_detail(
    session_with, make_token, foreign_project
):
    """Behind a server with the ASGI denial-response extension (uvicorn), a refusal is a plain
    HTTP answer: out of scope and missing are byte-for-byte the same."""
    foreign = session_with(2, project=foreign_project)
    raw = make_token(["sessions:read"])

    async def scenario():
        results = []
        for path, headers in (
            (f"/ws/sessions/{foreign.id}/", bearer(raw)),
            (f"/ws/sessions/{uuid.uuid4()}/", bearer(raw)),
            (f"/ws/sessions/{foreign.id}/", []),
        ):
            communicator = WebsocketCommunicator(application, path, headers=headers)
            communicator.scope["extensions"] = {"websocket.http.response": {}}
            await communicator.send_input({"type": "websocket.connect"})
            start = await communicator.receive_output(timeout=TIMEOUT)
            body = await communicator.receive_output(timeout=TIMEOUT)
            await communicator.send_input({"type": "websocket.disconnect", "code": 1006})
            await communicator.wait(timeout=TIMEOUT)
            results.append((start, body))
        return results

    results = async_to_sync(scenario)()
    (start_a, body_a), (start_b, body_b), (start_c, body_c) = results
    assert start_a["type"] == "websocket.http.response.start"
    assert start_a["status"] == start_b["status"] == 404
    assert body_a == body_b
    assert json.loads(body_a["body"]) == {
        "error": {"code": "not_found", "message": "not found", "details": {}}
    }
    assert str(foreign.id).encode() not in body_a["body"]
    assert start_c["status"] == 401
    assert (b"www-authenticate", b'Bearer realm="openrath"') in start_c["headers"]
    assert json.loads(body_c["body"])["error"]["code"] == "not_authenticated"


# --- console logins (session cookie) ------------------------------------------------------------


def _cookie_for(user, tenant_slug: str | None = None) -> bytes:
    # The factory sets the password without saving it; the login's session hash must match the
    # stored user, or channels' auth drops the session.
    user.save()
    client = Client()
    client.force_login(user)
    if tenant_slug is not None:
        session = client.session
        session["openrath_tenant"] = tenant_slug
        session.save()
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def test_console_login_streams_with_an_allowed_origin(session_with, tenant, other_tenant):
    session = session_with(2)
    user = UserFactory(username="ada")
    MembershipFactory(user=user, tenant=tenant, role="viewer")
    cookie = _cookie_for(user)
    browser = [(b"origin", b"http://localhost"), (b"cookie", cookie)]

    async def scenario():
        communicator, accepted, detail = await open_stream(
            f"/ws/sessions/{session.id}/", headers=browser
        )
        assert accepted, detail
        messages = await receive_until_ready(communicator)
        await communicator.disconnect()
        return messages

    assert [m["type"] for m in async_to_sync(scenario)()] == ["chunk", "chunk", "ready"]


def test_console_login_in_a_tenant_it_does_not_belong_to_is_4403(
    session_with, tenant, other_tenant
):
    session = session_with(1)
    user = UserFactory(username="bob")
    MembershipFactory(user=user, tenant=tenant, role="viewer")
    cookie = _cookie_for(user, tenant_slug=other_tenant.slug)
    code = async_to_sync(refused_with)(
        f"/ws/sessions/{session.id}/",
        headers=[(b"origin", b"http://localhost"), (b"cookie", cookie)],
    )
    assert code == 4403
    assert denials() == [("ws.connect", "user:bob", 403, "session", "denied")]


def test_console_cookie_from_another_site_or_without_origin_is_refused(session_with, tenant):
    session = session_with(1)
    user = UserFactory(username="eve-target")
    MembershipFactory(user=user, tenant=tenant, role="admin")
    cookie = _cookie_for(user)
    # Another site's page: the origin check refuses the handshake before anything runs.
    evil = async_to_sync(refused_with)(
        f"/ws/sessions/{session.id}/",
        headers=[(b"origin", b"https://evil.example"), (b"cookie", cookie)],
    )
    assert evil == 1000  # channels' WebsocketDenier
    # No Origin: not a browser, so the cookie is not honoured (tokens only).
    bare = async_to_sync(refused_with)(f"/ws/sessions/{session.id}/", headers=[(b"cookie", cookie)])
    assert bare == 4401
    assert denials() == [("ws.connect", "anonymous", 401, "session", "denied")]


def test_bad_after_is_4400_and_not_an_access_denial(session_with, make_token):
    session = session_with(1)
    raw = make_token(["sessions:read"])
    for after in ("x", "-2"):
        code = async_to_sync(refused_with)(
            f"/ws/sessions/{session.id}/?after={after}", headers=bearer(raw)
        )
        assert code == 4400
    assert denials() == []
