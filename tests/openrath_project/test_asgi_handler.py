"""The one-hop ASGI handler: the middleware chain and the view run synchronously on the
request's own thread, where ``request_started`` and ``request_finished`` (which returns the
database connection) run too."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, cast

import pytest
from asgiref.testing import ApplicationCommunicator
from django.core.signals import request_finished, request_started

from openrath_project.asgi_handler import OneHopASGIHandler
from openrath_project.tenancy.models import AuditEvent, Tenant
from openrath_project.tenancy.services import token_create
from tests.factories import ProjectFactory, TenantFactory

THREADS: dict[str, list[int]] = {}


class RecordThreadMiddleware:
    """Records the thread each request's middleware runs on."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        THREADS.setdefault("middleware", []).append(threading.get_ident())
        return self.get_response(request)


def _record(name: str) -> Any:
    def receiver(**kwargs: Any) -> None:
        THREADS.setdefault(name, []).append(threading.get_ident())

    return receiver


async def _call(handler: Any, method: str, path: str, token: str, body: Any) -> dict[str, Any]:
    raw = json.dumps(body).encode() if body is not None else b""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(raw)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    communicator = ApplicationCommunicator(handler, scope)
    await communicator.send_input({"type": "http.request", "body": raw, "more_body": False})
    start = await communicator.receive_output(30)
    body_message = await communicator.receive_output(30)
    await communicator.wait(30)
    return {
        "status": start["status"],
        "headers": dict(start["headers"]),
        "body": json.loads(body_message["body"] or b"null"),
    }


@pytest.mark.django_db(transaction=True)
def test_one_hop_serves_a_write_on_one_thread_and_audits_it(settings: Any) -> None:
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.RecordThreadMiddleware"]
    tenant = cast(Tenant, TenantFactory(slug="onehop"))
    ProjectFactory(tenant=tenant, slug="p")
    _, raw = token_create(tenant=tenant, grants=["sessions:write", "sessions:read"], name="t")
    handler = OneHopASGIHandler()
    chain = handler._middleware_chain  # type: ignore[attr-defined]
    assert not asyncio.iscoroutinefunction(chain)  # loaded synchronous
    started, finished = _record("started"), _record("finished")
    request_started.connect(started)
    request_finished.connect(finished)
    THREADS.clear()
    loop_threads: list[int] = []

    async def scenario() -> list[dict[str, Any]]:
        loop_threads.append(threading.get_ident())
        created = await _call(
            handler, "POST", "/api/v1/sessions/", raw, {"project": "p", "user_message": "hi"}
        )
        appended = await _call(
            handler,
            "POST",
            f"/api/v1/sessions/{created['body']['id']}/chunks/",
            raw,
            {"chunks": [{"role": "user", "content": {"text": "more"}}]},
        )
        return [created, appended]

    try:
        created, appended = asyncio.run(scenario())
    finally:
        request_started.disconnect(started)
        request_finished.disconnect(finished)
    assert created["status"] == 201
    assert appended["status"] == 201
    assert [c["seq"] for c in appended["body"]] == [1]
    assert b"X-Request-ID" in appended["headers"]
    # Per request: middleware, request_started and request_finished on one thread, not the
    # event loop's (each request gets its own thread from ThreadSensitiveContext).
    assert len(THREADS["middleware"]) == 2
    for i in range(2):
        assert THREADS["started"][i] == THREADS["middleware"][i] == THREADS["finished"][i]
        assert THREADS["middleware"][i] != loop_threads[0]
    actions = list(
        AuditEvent.objects.filter(tenant=tenant).order_by("id").values_list("action", "outcome")
    )
    assert actions == [("session.create", "success"), ("session.append", "success")]
