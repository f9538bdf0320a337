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

from openrath_project.asgi_handler import OneHopASGIHandler, RequestThreads
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
    # event loop's (the thread lent to the request by the handler's RequestThreads).
    assert len(THREADS["middleware"]) == 2
    for i in range(2):
        assert THREADS["started"][i] == THREADS["middleware"][i] == THREADS["finished"][i]
        assert THREADS["middleware"][i] != loop_threads[0]
    actions = list(
        AuditEvent.objects.filter(tenant=tenant).order_by("id").values_list("action", "outcome")
    )
    assert actions == [("session.create", "success"), ("session.append", "success")]


class BarrierMiddleware:
    """Holds each request until ``BARRIER`` has as many requests waiting as it has parties."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        THREADS.setdefault("middleware", []).append(threading.get_ident())
        if BARRIER is not None:
            BARRIER.wait()
        return self.get_response(request)


BARRIER: threading.Barrier | None = None


async def _healthz(handler: Any) -> int:
    return int((await _call(handler, "GET", "/healthz", "", None))["status"])


def test_requests_one_after_another_reuse_one_thread(settings: Any) -> None:
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.RecordThreadMiddleware"]
    handler = OneHopASGIHandler()
    THREADS.clear()

    async def scenario() -> list[int]:
        return [await _healthz(handler) for _ in range(3)]

    assert asyncio.run(scenario()) == [200, 200, 200]
    assert len(set(THREADS["middleware"])) == 1  # one thread, lent three times
    assert (handler.threads.made, handler.threads.reused) == (1, 2)


def test_concurrent_requests_each_get_a_thread_of_their_own(settings: Any) -> None:
    global BARRIER
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.BarrierMiddleware"]
    handler = OneHopASGIHandler()
    THREADS.clear()
    # Both requests must be inside the chain at once to pass the barrier: on one shared thread
    # the second would wait behind the first and the barrier would time out (a 500).
    BARRIER = threading.Barrier(2, timeout=20)

    async def scenario() -> list[int]:
        return list(await asyncio.gather(_healthz(handler), _healthz(handler)))

    try:
        assert asyncio.run(scenario()) == [200, 200]
    finally:
        BARRIER = None
    assert len(set(THREADS["middleware"])) == 2
    assert handler.threads.made == 2

    async def again() -> int:
        return await _healthz(handler)

    assert asyncio.run(again()) == 200  # both were given back: no third thread
    assert handler.threads.made == 2


def test_an_executor_still_running_a_call_is_not_lent_again() -> None:
    threads = RequestThreads(keep=4)
    executor = threads.take()
    release = threading.Event()
    running = executor.submit(release.wait, 20)
    threads.give_back(executor)  # as after a client disconnected while its view ran on
    other = threads.take()
    assert other is not executor  # a new one: the busy thread is not lent to a new request
    release.set()
    assert running.result(timeout=20) is True  # the abandoned call still ran to its end
    worker = next(iter(executor._threads))
    worker.join(timeout=20)
    assert not worker.is_alive()  # and then its thread ended (it was shut down, not kept)
    threads.give_back(other)
    assert threads.take() is other  # an idle one is kept and lent again


def test_at_most_keep_executors_stay_idle() -> None:
    threads = RequestThreads(keep=2)
    executors = [threads.take() for _ in range(3)]
    for executor in executors:
        executor.submit(int).result(timeout=20)  # each has started its thread
        threads.give_back(executor)
    assert [threads.take(), threads.take()] == [executors[1], executors[0]]  # latest first
    assert threads.take() not in executors  # the third was shut down when given back
    assert threads.made == 4
