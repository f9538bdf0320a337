"""A bounded fuzzing pass (benchmarks/fuzz.py runs the long one): schemathesis, from the
committed OpenAPI document, against a real embedded server process."""

from __future__ import annotations

import tempfile

import pytest

from benchmarks import fuzz

pytestmark = pytest.mark.slow


def test_fuzzing_finds_nothing():
    server, base, tokens, env = fuzz.start_server(tempfile.mkdtemp(prefix="openrath-fuzz-"))
    try:
        result = fuzz.fuzz(base, tokens, examples=5, max_seconds=240, env=env)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert result["failures"] == []
    assert result["tried"] >= 300
    assert not any(status >= 500 for status in result["statuses"])
    assert {200, 201, 400, 403, 404} <= set(result["statuses"])


def test_hostile_inputs_are_400s_that_change_nothing():
    """The inputs of issue 14, item 8 the schema cannot generate (deep JSON in a body, an
    import and memory metadata, lone surrogates, 1e999, 2^63 token counts, a 2^70 budget, a
    10,000-digit integer, ``after`` past 2^63, forged artifact references), against a real
    embedded server (SQLite): each is a 400 with the error body and changes no row, and the
    session, the list and the project page answer afterwards. ``fuzz`` runs them too."""
    server, base, tokens, env = fuzz.start_server(tempfile.mkdtemp(prefix="openrath-hostile-"))
    try:
        failures = fuzz.probe_hostile(base, tokens["all"], env)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert failures == []
    assert len(fuzz.HOSTILE) == 16


@pytest.mark.postgres
@pytest.mark.redis
def test_fuzzing_the_production_profile_finds_nothing(tmp_path):
    """The same pass against the production profile (production-local: PostgreSQL with its
    roles, Redis, SeaweedFS, uvicorn, Celery). PostgreSQL refuses inputs SQLite takes (it found
    ISO offsets beyond 15:59 in the time filters), so both profiles are fuzzed."""
    from tests.s3 import require_weed

    require_weed()
    base, tokens, env, local = fuzz.start_production(tmp_path / "production")
    try:
        result = fuzz.fuzz(base, tokens, examples=3, max_seconds=240, env=env)
    finally:
        fuzz.stop_production(local)
    assert result["failures"] == []
    assert result["tried"] >= 250
    assert not any(status >= 500 for status in result["statuses"])
    assert {200, 201, 400, 403, 404} <= set(result["statuses"])


def test_every_operation_answers_what_the_document_says():
    """Issue 18 item 10: each operation called once with a valid request (a session with
    chunks, a run, a memory entry, a schedule, a webhook with a delivery; every path parameter
    filled with a real object of its kind), every response checked by schemathesis' status-code,
    content-type and response-schema conformance checks. The chunks append answered a bare
    array while the document said a page; random inputs rarely reached that 201."""
    server, base, tokens, env = fuzz.start_server(tempfile.mkdtemp(prefix="openrath-conform-"))
    try:
        walk = fuzz.conformance_walk(base, tokens["all"])
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert walk["failures"] == []
    for label in (
        "POST /api/v1/sessions/{id}/chunks/",
        "GET /api/v1/sessions/{id}/chunks/",
        "POST /api/v1/sessions/import/",
        "GET /api/v1/sessions/{id}/lineage/",
        "GET /api/v1/runs/{id}/events/",
        "GET /api/v1/interrupts/",
        "GET /api/v1/effects/",
        "GET /api/v1/runs/{id}/compare/{other}/",
        "GET /api/v1/schedules/{id}/next/",
        "PATCH /api/v1/schedules/{id}/",
        "GET /api/v1/webhooks/{id}/deliveries/{delivery_id}/",
        "POST /api/v1/webhooks/{id}/disable/",
        "DELETE /api/v1/webhooks/{id}/",
    ):
        assert label in walk["succeeded"], walk["succeeded"]
