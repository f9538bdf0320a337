"""Secret canaries: a provider key and an API token used through a whole run appear in no
chunk, event, checkpoint, audit row, log line, export or error body."""

from __future__ import annotations

import logging
import secrets

import pytest
from django.db import connection

from runs_app.registry import WorkflowRegistry
from tests.runs_app.conftest import drive
from tests.sessions_app.providers.fake_openai import FakeOpenAI, Reply, chunk

pytestmark = pytest.mark.django_db(transaction=True)


def _database_text() -> str:
    parts = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")  # noqa: S608
            parts.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(parts)


def test_canaries_never_leak(monkeypatch, tmp_path, project, make_token, client_for, caplog):
    from runs_app import registration
    from tests.hardening import canary_workflows

    caplog.set_level(logging.DEBUG)
    key = f"sk-canary-{secrets.token_hex(16)}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    (tmp_path / "providers.json").write_text("{}")
    monkeypatch.setenv("OPENRATH_PROVIDER_CONFIG", str(tmp_path / "providers.json"))
    registry = WorkflowRegistry()
    registry.discover([canary_workflows.__name__])
    monkeypatch.setattr(registration, "workflows", lambda: registry)
    raw = make_token(["*"])
    client = client_for(raw)
    responses = []
    with FakeOpenAI() as api:
        api.replies.append(
            Reply(
                sse=[
                    chunk({"role": "assistant", "content": "Hello there."}),
                    chunk({}, finish_reason="stop"),
                    chunk(None, usage=(5, 3)),
                ]
            )
        )
        api.replies.append(
            Reply(
                status=400,
                body={
                    "error": {
                        "message": f"Incorrect API key provided: {key}",
                        "type": "invalid_request_error",
                    }
                },
            )
        )
        created = client.post(
            "/api/v1/runs/",
            {
                "workflow": "canary",
                "project": "research",
                "user_message": "hi",
                "state": {"base_url": api.base_url},
            },
            format="json",
        )
        assert created.status_code == 201
        run_id = created.json()["id"]
        done = drive(registry, run_id)
        assert api.requests[0].headers["authorization"] == f"Bearer {key}"  # the key was used
    assert done.status == "failed"
    assert "[redacted]" in done.error["message"]
    responses.append(client.get(f"/api/v1/runs/{run_id}/"))
    responses.append(client.get(f"/api/v1/runs/{run_id}/events/"))
    responses.append(client.get(f"/api/v1/runs/{run_id}/checkpoints/"))
    responses.append(client.get(f"/api/v1/sessions/{done.session_id}/chunks/"))
    responses.append(client.get(f"/api/v1/sessions/{done.session_id}/export/"))
    responses.append(client.get("/api/v1/audit/"))
    responses.append(
        client.post("/api/v1/runs/", {"workflow": "nope", "project": "research"}, format="json")
    )
    responses.append(client.post("/api/v1/projects/", {"slug": "Bad Slug"}, format="json"))
    responses.append(client_for(raw + "x").get("/api/v1/runs/"))
    assert [r.status_code for r in responses] == [200, 200, 200, 200, 200, 200, 400, 400, 401]
    secret = raw.split("_", 2)[2]
    stored = _database_text()
    bodies = "\n".join(r.content.decode() for r in responses)
    logs = caplog.text
    for canary in (key, raw, secret):
        assert canary not in stored
        assert canary not in bodies
        assert canary not in logs
    assert "Hello there." in stored  # the scan sees what the run wrote
