"""``flow.RemoteClient`` / ``flow.AsyncRemoteClient`` against a real uvicorn server: OpenRath's
method names over ``/api/v1``, pages followed, error bodies as the runtime's exceptions, and
streams that resume after a dropped connection without losing or repeating an item."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.db import connection

from openrath_project import flow
from openrath_project.client import remote
from openrath_project.errors import NotAuthenticated, NotFound, PermissionDenied, ValidationFailed
from openrath_project.runtime.models import (
    ApprovalDecisionKind,
    ConflictError,
    UnsupportedOperation,
)
from runs_app.executor import run_one
from runs_app.models import Interrupt, Run, RunEvent
from tests.runs_app import conftest as runs_fixtures
from tests.streaming import conftest as stream_fixtures
from tests.streaming.conftest import append_texts
from tests.streaming.sse_support import TIMEOUT, CuttableProxy, uvicorn_server

pytestmark = pytest.mark.django_db(transaction=True)

# The fixtures of the runs and streaming suites, reused here.
registry = runs_fixtures.registry
session_with = stream_fixtures.session_with


@pytest.fixture
def server():
    with uvicorn_server() as base:
        yield base


@pytest.fixture
def worker(registry):
    """Executes queued runs on a thread while the test talks to the server."""
    stop = threading.Event()

    def work() -> None:
        try:
            while not stop.is_set():
                if run_one("client-worker", registry=registry) is None:
                    stop.wait(0.02)
        finally:
            connection.close()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=TIMEOUT)


def test_flow_exports_the_clients_without_configuring_a_local_database():
    assert flow.RemoteClient is remote.RemoteClient
    assert flow.AsyncRemoteClient is remote.AsyncRemoteClient


def test_submit_wait_approve_with_the_digest_and_stream_every_event(
    server, registry, worker, project, make_token
):
    raw = make_token()
    with flow.RemoteClient(server, token=raw, timeout=TIMEOUT) as client:
        assert {w["name"] for w in client.list_assistants()} >= {"approval", "linear"}
        run = client.create_run(assistant_id="approval", state={"report": "Q3"})
        assert run["status"] == "queued"
        assert run["project"] == str(project.id)  # the only project the token sees

        waiting = client.wait_for_run(run["id"], until={"waiting"})
        assert waiting["status"] == "waiting"
        (pending,) = client.list_interrupts(run_id=run["id"])
        assert pending["status"] == "pending"
        assert pending["request"]["report"] == "Q3"

        with pytest.raises(ConflictError) as stale:
            client.decide_interrupt(
                pending["id"], kind="approve", request_digest="0" * 64, payload={"note": "x"}
            )
        assert stale.value.code == "digest_mismatch"
        assert stale.value.status == 409
        assert Interrupt.objects.get(id=pending["id"]).status == "pending"  # nothing changed

        decided = client.decide_interrupt(
            pending["id"],
            kind=ApprovalDecisionKind.APPROVE,
            request_digest=pending["request_digest"],
            reason="looks right",
            payload={"note": "ship it"},
        )
        assert decided["status"] == "resolved"
        assert decided["decision"] == "approve"
        with pytest.raises(ConflictError):  # a second decision
            client.decide_interrupt(
                pending["id"],
                kind="reject",
                request_digest=pending["request_digest"],
            )

        finished = client.wait_for_run(run["id"])
        assert finished["status"] == "succeeded"
        assert finished["state"]["note"] == "ship it"

        streamed = [m for m in client.stream_events(run["id"]) if m["type"] == "event"]
        listed = client.events(run["id"])
    stored = list(RunEvent.objects.filter(run_id=run["id"]).order_by("seq"))
    assert [m["event"]["seq"] for m in streamed] == [e.seq for e in stored]
    assert [e["seq"] for e in listed] == [e.seq for e in stored]
    assert [e["type"] for e in listed] == [e.type for e in stored]


def test_list_methods_follow_pages(server, registry, project, make_token, monkeypatch):
    raw = make_token()
    monkeypatch.setattr(remote, "PAGE_LIMIT", 2)  # several pages with a handful of rows
    with flow.RemoteClient(server, token=raw, project=project.slug) as client:
        ids = [client.create_run(assistant_id="linear")["id"] for _ in range(5)]
        run_one("pager", registry=registry)  # one run has more events than a page
        first = client.list_runs(limit=2)
        second = client.list_runs(limit=2, after=first["next"])
        third = client.list_runs(limit=2, after=second["next"])
        events = client.events(ids[0])
        later = client.events(ids[0], after=2)
    paged = [r["id"] for r in first["items"] + second["items"] + third["items"]]
    assert paged == sorted(ids, reverse=True)  # newest first, each once
    assert third["next"] is None
    stored = [e.seq for e in RunEvent.objects.filter(run_id=ids[0]).order_by("seq")]
    assert len(stored) > 2
    assert [e["seq"] for e in events] == stored
    assert [e["seq"] for e in later] == stored[2:]


def test_error_bodies_become_the_runtime_exceptions(server, registry, project, make_token):
    raw = make_token()
    reader = make_token(["runs:read"])
    with flow.RemoteClient(server, token=raw, project=project.slug) as client:
        first = client.create_run(assistant_id="linear", idempotency_key="k1")
        again = client.create_run(assistant_id="linear", idempotency_key="k1")
        assert again["id"] == first["id"]
        with pytest.raises(ConflictError) as conflict:
            client.create_run(assistant_id="linear", idempotency_key="k1", state={"x": 1})
        assert conflict.value.request_id
        with pytest.raises(ValidationFailed) as invalid:
            client.create_run(assistant_id="no-such-workflow")
        assert invalid.value.status == 400

        with pytest.raises(NotFound):
            client.get_run("01a232d5-5777-702e-a453-28130f59691e")
        with pytest.raises(UnsupportedOperation):
            client.create_assistant(assistant_id="a", template_id="t")
        with pytest.raises(UnsupportedOperation):
            client.create_feedback(first["id"], key="quality", score=1.0)
    assert Run.objects.count() == 1  # the refused calls created nothing

    with flow.RemoteClient(server, token=reader, project=project.slug) as client:
        with pytest.raises(PermissionDenied) as denied:
            client.cancel_run(first["id"])
        assert denied.value.details == {"required_grant": "runs:cancel"}
    with (
        flow.RemoteClient(server, token="ort_bad_token") as client,
        pytest.raises(NotAuthenticated),
    ):
        client.get_run(first["id"])
    assert Run.objects.get(id=first["id"]).status == "queued"


def test_another_tenants_run_is_not_found_and_its_stream_too(
    server, registry, project, make_token, foreign_project, other_tenant
):
    mine = make_token()
    theirs = make_token(tenant=other_tenant)
    with flow.RemoteClient(server, token=theirs, project=foreign_project.slug) as client:
        run = client.create_run(assistant_id="linear")
    with flow.RemoteClient(server, token=mine, project=project.slug) as client:
        with pytest.raises(NotFound):
            client.get_run(run["id"])
        with pytest.raises(NotFound):
            list(client.stream_events(run["id"]))
        with pytest.raises(NotFound):
            client.cancel_run(run["id"])
    assert Run.objects.get(id=run["id"]).status == "queued"


def test_a_session_stream_resumes_after_a_dropped_connection_exactly_once(
    server, session_with, make_token
):
    session = session_with(3)
    raw = make_token(["sessions:read"])
    proxy = CuttableProxy(server)
    try:
        with flow.RemoteClient(proxy.url, token=raw, timeout=TIMEOUT) as client:
            stream = client.stream_session(str(session.id))
            seen = [next(stream)["chunk"]["seq"] for _ in range(3)]
            proxy.hold()
            proxy.cut()
            # Written while the client is disconnected (its reconnection waits at the proxy).
            append_texts(session.id, ["while", "away"])
            threading.Timer(0.5, proxy.release).start()
            seen += [next(stream)["chunk"]["seq"] for _ in range(2)]
            append_texts(session.id, ["back"])
            seen.append(next(stream)["chunk"]["seq"])
            stream.close()
    finally:
        proxy.close()
    assert seen == [0, 1, 2, 3, 4, 5]
    assert proxy.accepted >= 2


def test_the_async_client_submits_waits_and_streams(server, registry, worker, project, make_token):
    raw = make_token()

    async def scenario():
        async with flow.AsyncRemoteClient(server, token=raw, project=project.slug) as client:
            run = await client.create_run(assistant_id="linear", state={"who": "async"})
            done = await client.wait_for_run(run["id"])
            messages = [m async for m in client.stream_events(run["id"], follow=False)]
            (listed,) = (await client.list_runs(limit=1))["items"]
            return run, done, messages, listed

    run, done, messages, listed = asyncio.run(scenario())
    assert done["status"] == "succeeded"
    assert done["state"]["steps"] == ["one", "two", "three"]
    assert listed["id"] == run["id"]
    stored = [e.seq for e in RunEvent.objects.filter(run_id=run["id"]).order_by("seq")]
    assert [m["event"]["seq"] for m in messages if m["type"] == "event"] == stored
    assert messages[-1] == {
        "type": "run",
        "run": {"id": run["id"], "status": "succeeded", "next_nodes": [], "error": None},
    }


def test_create_run_passes_the_concurrent_input_policy(
    server, registry, project, make_token, session_with
):
    thread = session_with(2)
    with flow.RemoteClient(server, token=make_token(), project=project.slug) as client:
        first = client.create_run(assistant_id="linear", session_id=str(thread.id))
        with pytest.raises(ConflictError) as busy:
            client.create_run(
                assistant_id="linear", session_id=str(thread.id), input_policy="reject"
            )
        assert busy.value.code == "session_busy"
        queued = client.create_run(
            assistant_id="linear", session_id=str(thread.id), input_policy="enqueue"
        )
        assert queued["input_policy"] == "enqueue"
        assert queued["after_run"] == first["id"]
        with pytest.raises(ValidationFailed):
            client.create_run(
                assistant_id="linear", session_id=str(thread.id), input_policy="later"
            )
    assert Run.objects.count() == 2  # the refused calls created nothing
