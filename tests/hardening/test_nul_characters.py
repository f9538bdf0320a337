"""The NUL character: valid JSON, stored by SQLite, refused by PostgreSQL's ``jsonb``/``text``
(fuzzing the production profile found the 500s). The API refuses it with a 400 on every
profile; what agents record (model text, tool arguments, tool output, which may be a binary
file's bytes) has it replaced by U+FFFD, so a step does not fail on it."""

from __future__ import annotations

from typing import Any

import pytest

from openrath_project.jsontext import nul_path, without_nul
from sessions_app.agents import Agent
from sessions_app.chunk_rules import ChunkInvalid, make_draft
from sessions_app.models import Chunk
from sessions_app.models import Session as SessionRow
from sessions_app.providers import make_provider
from sessions_app.tools import tool
from sessions_app.tools.dispatch import cap_output
from sessions_app.value import Session
from tests.support import error_of

pytestmark = pytest.mark.django_db


def test_nul_path_and_without_nul_reach_keys_lists_and_nesting():
    assert nul_path({"a": [1, {"b": "ok"}, "x\x00"]}) == "$.a[2]"
    assert nul_path({"a\x00": 1}) == "$ (a key)"
    assert nul_path({"a": ["fine", 2, None, 1.5]}) is None
    assert nul_path("\\u0000 as six characters") is None
    assert without_nul({"k\x00": ["a\x00b", 3]}) == {"k\ufffd": ["a\ufffdb", 3]}
    unchanged = {"a": ["b"]}
    assert without_nul("plain") == "plain"
    assert without_nul(unchanged) == unchanged


def test_a_chunk_draft_with_nul_names_where_it_is():
    with pytest.raises(ChunkInvalid) as caught:
        make_draft(role="user", content={"text": "ok", "parts": ["a", "b\x00"]})
    assert caught.value.field == "content.parts[1]"
    # Six literal characters are text, not NUL.
    assert make_draft(role="user", content={"text": "\\u0000"}).content == {"text": "\\u0000"}


@pytest.mark.parametrize(
    ("path", "body", "field", "where"),
    [
        ("/api/v1/sessions/", {"metadata": {"k": "a\x00b"}}, "metadata", "$.metadata.k"),
        ("/api/v1/sessions/", {"metadata": {"a\x00": 1}}, "metadata", "$.metadata (a key)"),
        ("/api/v1/sessions/", {"a\x00": 1}, "non_field_errors", "$ (a key)"),
        (
            "/api/v1/memory/",
            {"text": "ok", "metadata": {"x": ["\x00"]}},
            "metadata",
            "$.metadata.x[0]",
        ),
        ("/api/v1/runs/", {"workflow": "w", "state": {"x": "\x00"}}, "state", "$.state.x"),
    ],
)
def test_the_api_refuses_nul_with_a_400_naming_the_field_and_stores_nothing(
    path: str, body: dict[str, Any], field: str, where: str, project, make_token, client_for
):
    client = client_for(make_token(["sessions:write", "memory:write", "runs:write"]))
    sessions_before = SessionRow.objects.count()
    payload = {"project": project.slug, "user_message": "hi", "scope": "project", **body}
    response = client.post(path, payload, format="json")
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["code"] == "invalid"
    assert list(error["details"]) == [field]
    assert error["details"][field] == [f"must not contain the NUL character \\u0000 (at {where})"]
    assert SessionRow.objects.count() == sessions_before


def test_appending_a_chunk_with_nul_is_a_400_and_appends_nothing(project, make_token, client_for):
    client = client_for(make_token(["sessions:write", "sessions:read"]))
    created = client.post(
        "/api/v1/sessions/", {"project": project.slug, "user_message": "hi"}, format="json"
    )
    session_id = created.json()["id"]
    response = client.post(
        f"/api/v1/sessions/{session_id}/chunks/",
        {"chunks": [{"role": "user", "content": {"text": "a\x00b"}}]},
        format="json",
    )
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert (error["code"], list(error["details"])) == ("invalid", ["chunks"])
    assert "$.chunks[0].content.text" in error["message"]
    assert Chunk.objects.filter(session_id=session_id).count() == 1


def test_nul_from_the_model_and_from_tools_is_recorded_as_u_fffd(project):
    @tool
    def cat_binary(path: str) -> str:
        """Print a file.

        Args:
            path: Where the file is.
        """
        return "\x7fELF\x00\x00\x01"

    provider = make_provider(
        "scripted",
        turns=[
            {"tool_calls": [{"id": "c1", "name": "cat_binary", "arguments": {"path": "a\x00"}}]},
            {"text": "It is an ELF file\x00."},
        ],
    )
    session = Session.from_user_message("What is in /bin/true?", project=project)

    out = Agent("Look.", provider, tools=[cat_binary], name="reader")(session)

    # The agent's turn is in the session it returns (a fork of its input holding the turn).
    stored = [(row.kind, row.content) for row in out.chunks]
    assert stored[1:] == [
        ("tool_call", {"id": "c1", "name": "cat_binary", "arguments": {"path": "a\ufffd"}}),
        (
            "tool_result",
            {"tool_call_id": "c1", "name": "cat_binary", "output": "\x7fELF\ufffd\ufffd\x01"},
        ),
        ("message", {"text": "It is an ELF file\ufffd."}),
    ]


def test_a_truncated_tool_output_with_nul_is_capped_after_replacing_it():
    capped, truncated = cap_output({"bytes": "\x00" * 50}, max_chars=20)
    assert truncated is True
    assert "\x00" not in capped
    assert capped.startswith('{"bytes": "\ufffd')


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/projects/a%00b/",
        "/api/v1/sessions/?project=a%00b",
        "/api/v1/runs/?workflow=a%00b",
        "/api/v1/workflows/a%00b/",
        "/api/v1/sessions/a%00b/",
    ],
)
def test_nul_in_a_path_or_query_is_a_4xx(url, make_token, client_for):
    client = client_for(make_token(["projects:read", "sessions:read", "runs:read"]))
    response = client.get(url)
    assert response.status_code in (400, 404), response.content
    assert error_of(response)["code"] in ("invalid", "not_found")
