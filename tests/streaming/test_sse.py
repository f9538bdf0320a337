"""Server-Sent Events (``GET /api/v1/{sessions,runs}/<id>/stream/``) against a real uvicorn
server: exactly-once delivery across a forced disconnect (with what was written while the client
was away), ``Last-Event-ID`` / ``after``, the run stream's end, keep-alives, re-checks,
refusals (401 / 403 / 404 / 400 / 429) and the Redis channel layer."""

from __future__ import annotations

import threading
import uuid

import httpx2
import pytest
from django.db import connection

from openrath_project.tenancy.services import token_revoke
from runs_app import services as run_services
from runs_app.executor import run_one
from runs_app.models import Run, RunEvent
from sessions_app.streaming import token_delta
from tests.streaming.conftest import append_texts
from tests.streaming.sse_support import (
    TIMEOUT,
    CuttableProxy,
    Event,
    bearer,
    events_of,
    read_until,
    uvicorn_server,
)
from tests.support import require_redis

pytestmark = pytest.mark.django_db(transaction=True)

SSE = {"Accept": "text/event-stream"}


@pytest.fixture
def server():
    with uvicorn_server() as base:
        yield base


@pytest.fixture
def http(server):
    with httpx2.Client(base_url=server, timeout=TIMEOUT) as client:
        yield client


def chunk_seqs(items) -> list[int]:
    return [e.data["chunk"]["seq"] for e in items if isinstance(e, Event) and e.event == "chunk"]


def is_chunk(seq: int):
    return lambda e: e.event == "chunk" and e.data["chunk"]["seq"] == seq


# --- delivery -------------------------------------------------------------------------------


def test_a_session_stream_backfills_then_sends_each_new_chunk_once_with_its_seq_as_id(
    http, session_with, make_token
):
    session = session_with(3)
    raw = make_token(["sessions:read"])
    with http.stream(
        "GET", f"/api/v1/sessions/{session.id}/stream/", headers={**bearer(raw), **SSE}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert "no-cache" in response.headers["cache-control"]
        assert response.headers["x-accel-buffering"] == "no"
        stream = events_of(response)
        backfill = read_until(stream, lambda e: e.event == "ready")
        assert chunk_seqs(backfill) == [0, 1, 2]
        assert [e.id for e in backfill] == ["0", "1", "2", None]
        assert backfill[-1].data == {"type": "ready", "after": 2}
        assert [e.data["chunk"]["content"]["text"] for e in backfill[:3]] == ["c0", "c1", "c2"]

        append_texts(session.id, [f"live{i}" for i in range(5)])
        live = read_until(stream, is_chunk(7))
    assert chunk_seqs(live) == [3, 4, 5, 6, 7]
    assert [e.data["chunk"]["content"]["text"] for e in live] == [f"live{i}" for i in range(5)]


def test_a_forced_disconnect_loses_and_repeats_nothing_including_chunks_written_meanwhile(
    server, session_with, make_token
):
    session = session_with(2)
    raw = make_token(["sessions:read"])
    proxy = CuttableProxy(server)
    received: list[int] = []
    path = f"/api/v1/sessions/{session.id}/stream/"
    try:
        with httpx2.Client(base_url=proxy.url, timeout=TIMEOUT) as client:
            with client.stream("GET", path, headers={**bearer(raw), **SSE}) as response:
                stream = events_of(response)
                first = read_until(stream, lambda e: e.event == "ready")
                append_texts(session.id, ["a", "b"])
                first += read_until(stream, is_chunk(3))
                received += chunk_seqs(first)
                last_id = next(e.id for e in reversed(first) if isinstance(e, Event) and e.id)
                proxy.hold()
                proxy.cut()
                with pytest.raises(httpx2.TransportError):
                    for _ in stream:  # the rest of the body never comes
                        pass
            # Written while the client is away: only the backfill of the next connection has it.
            append_texts(session.id, ["c", "d", "e"])
            proxy.release()
            with client.stream(
                "GET",
                f"{path}?after=0",  # the URL the client first used; Last-Event-ID wins over it
                headers={**bearer(raw), **SSE, "Last-Event-ID": last_id},
            ) as response:
                stream = events_of(response)
                second = read_until(stream, lambda e: e.event == "ready")
                append_texts(session.id, ["f"])
                second += read_until(stream, is_chunk(7))
                received += chunk_seqs(second)
    finally:
        proxy.close()
    assert last_id == "3"
    assert received == list(range(8))
    assert proxy.accepted == 2


def test_after_sets_the_start_and_follow_false_ends_after_what_is_committed(
    http, session_with, make_token
):
    session = session_with(6)
    raw = make_token(["sessions:read"])
    response = http.get(
        f"/api/v1/sessions/{session.id}/stream/",
        params={"after": 3, "follow": "false"},
        headers={**bearer(raw), **SSE},
    )
    assert response.status_code == 200
    items = list(events_of(httpx2.Response(200, content=response.content)))
    assert chunk_seqs(items) == [4, 5]
    assert items[-1].event == "ready"


def test_token_deltas_are_forwarded_between_chunks(http, session_with, make_token, hints):
    session = session_with(1)
    raw = make_token(["sessions:read"])
    with http.stream(
        "GET", f"/api/v1/sessions/{session.id}/stream/", headers={**bearer(raw), **SSE}
    ) as response:
        stream = events_of(response)
        read_until(stream, lambda e: e.event == "ready")
        token_delta(session.id, agent="writer", delta="Hel", turn="t1")
        got = read_until(stream, lambda e: e.event == "delta")
    assert got[-1].data == {"type": "delta", "agent": "writer", "turn": "t1", "delta": "Hel"}
    assert got[-1].id is None  # not stored, never replayed: no position to resume from


def test_an_idle_stream_sends_keepalive_comments(http, session_with, make_token, settings):
    settings.OPENRATH_SSE_KEEPALIVE_SECONDS = 0.2
    session = session_with(1)
    raw = make_token(["sessions:read"])
    with http.stream(
        "GET", f"/api/v1/sessions/{session.id}/stream/", headers={**bearer(raw), **SSE}
    ) as response:
        stream = events_of(response)
        read_until(stream, lambda e: e.event == "ready")
        comments = []
        for item in stream:
            assert isinstance(item, str), item
            comments.append(item)
            if len(comments) == 2:
                break
    assert comments == [": keep-alive", ": keep-alive"]


# --- the run stream -------------------------------------------------------------------------


def _drive_in_background(registry, run_id: uuid.UUID) -> threading.Thread:
    def work() -> None:
        try:
            while Run.objects.get(id=run_id).status not in ("succeeded", "failed"):
                if run_one("sse-worker", registry=registry) is None:
                    threading.Event().wait(0.02)
        finally:
            connection.close()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_the_run_stream_sends_every_event_in_order_and_ends_when_the_run_ends(
    http, registry, project, make_token
):
    raw = make_token(["runs:read"])
    run, _ = run_services.run_create(
        project=project, workflow=registry.get("linear"), state={"who": "sse"}
    )
    with http.stream(
        "GET", f"/api/v1/runs/{run.id}/stream/", headers={**bearer(raw), **SSE}
    ) as response:
        assert response.status_code == 200
        stream = events_of(response)
        first = read_until(stream, lambda e: e.event == "ready")
        worker = _drive_in_background(registry, run.id)
        rest = list(stream)  # ends on its own: the run ends
    worker.join(timeout=TIMEOUT)
    items = [e for e in first + rest if isinstance(e, Event)]
    events = [e for e in items if e.event == "event"]
    stored = list(RunEvent.objects.filter(run=run).order_by("seq"))
    assert [e.data["event"]["seq"] for e in events] == [r.seq for r in stored]
    assert [e.data["event"]["type"] for e in events] == [r.type for r in stored]
    assert [e.id for e in events] == [str(r.seq) for r in stored]
    statuses = [e.data["run"]["status"] for e in items if e.event == "run"]
    assert statuses[0] == "queued"
    assert statuses[-1] == "succeeded"
    assert items[-1].event == "run"  # nothing after the end


def test_a_finished_run_streams_its_events_and_ends_at_once(http, registry, project, make_token):
    raw = make_token(["runs:read"])
    run, _ = run_services.run_create(project=project, workflow=registry.get("linear"))
    worker = _drive_in_background(registry, run.id)
    worker.join(timeout=TIMEOUT)
    count = RunEvent.objects.filter(run=run).count()
    response = http.get(
        f"/api/v1/runs/{run.id}/stream/", headers={**bearer(raw), "Last-Event-ID": "2"}
    )
    items = list(events_of(httpx2.Response(200, content=response.content)))
    seqs = [e.data["event"]["seq"] for e in items if e.event == "event"]
    assert seqs == list(range(3, count + 1))
    assert [e.event for e in items[-2:]] == ["run", "ready"]
    assert items[-2].data["run"]["status"] == "succeeded"


# --- refusals -------------------------------------------------------------------------------


def test_refusals_answer_the_error_body_before_any_event(
    http, session_with, make_token, foreign_project, other_project, tenant
):
    mine = session_with(2)
    foreign = session_with(2, project=foreign_project)
    elsewhere = session_with(1, project=other_project)
    reader = make_token(["sessions:read"])
    no_grant = make_token(["runs:read"])
    restricted = make_token(["sessions:read"], projects=[mine.project])

    def get(path: str, headers: dict[str, str]) -> httpx2.Response:
        return http.get(path, headers={**SSE, **headers})

    missing = get(f"/api/v1/sessions/{uuid.uuid4()}/stream/", bearer(reader))
    cross_tenant = get(f"/api/v1/sessions/{foreign.id}/stream/", bearer(reader))
    other = get(f"/api/v1/sessions/{elsewhere.id}/stream/", bearer(restricted))
    assert missing.status_code == cross_tenant.status_code == other.status_code == 404
    # The same body as for a missing session: it names only the id the caller sent.
    for response, asked in ((missing, None), (cross_tenant, foreign.id), (other, elsewhere.id)):
        body = response.json()
        assert body["error"]["code"] == "not_found"
        assert body["error"]["message"] == "session not found"
        if asked is not None:
            assert body["error"]["details"] == {"session": str(asked)}
        assert response.headers["content-type"] == "application/json"
        assert "event:" not in response.text

    anonymous = get(f"/api/v1/sessions/{mine.id}/stream/", {})
    bad = get(f"/api/v1/sessions/{mine.id}/stream/", bearer("ort_nope_nope"))
    assert anonymous.status_code == bad.status_code == 401
    assert bad.headers["www-authenticate"] == 'Bearer realm="openrath"'
    assert bad.json()["error"]["code"] == "not_authenticated"

    forbidden = get(f"/api/v1/sessions/{mine.id}/stream/", bearer(no_grant))
    assert forbidden.status_code == 403
    assert forbidden.json()["error"]["details"] == {"required_grant": "sessions:read"}

    for query, field in (("after=x", "after"), ("after=-2", "after"), ("follow=maybe", "follow")):
        invalid = get(f"/api/v1/sessions/{mine.id}/stream/?{query}", bearer(reader))
        assert invalid.status_code == 400, query
        assert list(invalid.json()["error"]["details"]) == [field]
    header = get(f"/api/v1/sessions/{mine.id}/stream/", {**bearer(reader), "Last-Event-ID": "z"})
    assert header.status_code == 400
    assert list(header.json()["error"]["details"]) == ["Last-Event-ID"]
    unknown = get(f"/api/v1/sessions/{mine.id}/stream/?cursor=1", bearer(reader))
    assert unknown.status_code == 400

    run_reader = make_token(["sessions:read"])
    run = Run.objects.filter(tenant=tenant).first()
    assert run is None  # no run exists: the run stream's 404 is for a missing one
    assert get(f"/api/v1/runs/{uuid.uuid4()}/stream/", bearer(run_reader)).status_code == 403


def test_the_stream_limit_counts_open_streams_and_frees_the_slot_on_disconnect(
    server, session_with, make_token, settings
):
    settings.OPENRATH_MAX_WS_PER_PRINCIPAL = 1
    session = session_with(1)
    raw = make_token(["sessions:read"])
    other = make_token(["sessions:read"], name="other")
    path = f"/api/v1/sessions/{session.id}/stream/"
    with httpx2.Client(base_url=server, timeout=TIMEOUT) as client:
        with client.stream("GET", path, headers={**bearer(raw), **SSE}) as held:
            # Kept referenced: a dropped reader closes the response, and so the stream.
            reader = events_of(held)
            read_until(reader, lambda e: e.event == "ready")
            with client.stream("GET", path, headers={**bearer(raw), **SSE}) as refused:
                assert refused.status_code == 429
                refused.read()
            assert refused.json()["error"]["code"] == "rate_limited"
            assert int(refused.headers["retry-after"]) >= 1
            # Another principal has its own count.
            with client.stream("GET", path, headers={**bearer(other), **SSE}) as second:
                assert second.status_code == 200
        # The server notices the client left and frees the slot: a new stream is accepted.
        deadline = threading.Event()
        for _ in range(int(TIMEOUT / 0.1)):
            again = client.get(f"{path}?follow=false", headers={**bearer(raw), **SSE})
            if again.status_code == 200:
                break
            deadline.wait(0.1)
        assert again.status_code == 200


def test_a_revoked_token_ends_an_open_stream_with_an_error_event(
    http, session_with, make_token, settings
):
    settings.OPENRATH_WS_RECHECK_SECONDS = 0.3
    session = session_with(1)
    raw = make_token(["sessions:read"])
    with http.stream(
        "GET", f"/api/v1/sessions/{session.id}/stream/", headers={**bearer(raw), **SSE}
    ) as response:
        stream = events_of(response)
        read_until(stream, lambda e: e.event == "ready")
        token_revoke(prefix=raw)
        rest = [e for e in stream if isinstance(e, Event)]
    assert [e.event for e in rest] == ["error"]
    assert rest[0].data["status"] == 401
    assert rest[0].data["error"]["code"] == "not_authenticated"


# --- the Redis channel layer ----------------------------------------------------------------


@pytest.fixture
def redis_layer(settings):
    """channels_redis on the test Redis (own prefix), and ``REDIS_URL`` so the stream limit is
    counted in Redis: the production profile's wiring."""
    url = require_redis()
    prefix = f"openrath-sse-{uuid.uuid4().hex[:12]}"
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [url], "prefix": prefix, "capacity": 1500, "expiry": 30},
        }
    }
    settings.REDIS_URL = url
    return url


@pytest.mark.redis
def test_over_redis_live_chunks_arrive_once_and_the_limit_is_counted_in_redis(
    redis_layer, server, session_with, make_token, settings
):
    settings.OPENRATH_MAX_WS_PER_PRINCIPAL = 1
    session = session_with(2)
    raw = make_token(["sessions:read"])
    path = f"/api/v1/sessions/{session.id}/stream/"
    with (
        httpx2.Client(base_url=server, timeout=TIMEOUT) as client,
        client.stream("GET", path, headers={**bearer(raw), **SSE}) as response,
    ):
        stream = events_of(response)
        got = read_until(stream, lambda e: e.event == "ready")
        append_texts(session.id, [f"r{i}" for i in range(20)])
        got += read_until(stream, is_chunk(21))
        with client.stream("GET", path, headers={**bearer(raw), **SSE}) as refused:
            assert refused.status_code == 429
    assert chunk_seqs(got) == list(range(22))


def test_head_answers_the_headers_without_holding_a_stream(
    http, session_with, make_token, settings
):
    settings.OPENRATH_MAX_WS_PER_PRINCIPAL = 1
    session = session_with(2)
    raw = make_token(["sessions:read"])
    path = f"/api/v1/sessions/{session.id}/stream/"
    for _ in range(3):  # each one frees its slot: a held one would make the next a 429
        response = http.head(path, headers={**bearer(raw), **SSE})
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert response.content == b""
