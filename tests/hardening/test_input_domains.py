"""Every number the API takes has a documented domain, and JSON has limits (issue 14, items 4
and 8; docs/api.md, "Numbers and their domains" and "JSON limits").

Values outside are a 400 with the error body naming the field, and change nothing; the sums
the product keeps cannot overflow. Before: a chunk with ``cost_usd`` 1e12 made its session,
every list page with it and the console's sessions page a 500 for ever (SQLite); summed
``total_tokens`` past 2^63 made the project page a 503 for ever (SQLite); the same chunk was a
500 on PostgreSQL; deep JSON, lone surrogates, 1e999, 2^63 token counts, a 2^70 token budget,
a 10,000-digit integer in an import and ``after`` past 2^63 were 500s.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from memory_app.models import MemoryEntry
from memory_app.services import memory_remember
from openrath_project.errors import ValidationFailed
from openrath_project.jsonlimits import MAX_JSON_DEPTH, MAX_VALUE_DEPTH, json_problem, loads
from openrath_project.tenancy.models import Project
from runs_app import registration
from runs_app.models import Run
from runs_app.registry import WorkflowRegistry
from runs_app.services import run_create
from sessions_app.chunk_rules import (
    MAX_CHUNK_COST_USD,
    MAX_CHUNK_TOKENS,
    MAX_SESSION_COST_USD,
    MAX_SESSION_TOKENS,
    ChunkInvalid,
    make_draft,
)
from sessions_app.formats import EXPORT_FORMAT, EXPORT_VERSION, dumps
from sessions_app.models import Chunk, Session
from sessions_app.services import session_from_user_message
from tests.factories import MembershipFactory, UserFactory
from tests.runs_app.workflows import durable
from tests.support import error_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(make_token, client_for):
    return client_for(make_token(["*"]))


@pytest.fixture
def workflows(monkeypatch: pytest.MonkeyPatch) -> WorkflowRegistry:
    fresh = WorkflowRegistry()
    fresh.discover([durable.__name__])
    monkeypatch.setattr(registration, "workflows", lambda: fresh)
    return fresh


@pytest.fixture
def session_id(client, project: Project) -> str:
    response = client.post(
        "/api/v1/sessions/", {"project": project.slug, "user_message": "hi"}, format="json"
    )
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def _usage_of(session_id: str) -> dict[str, Any]:
    return Session.objects.get(id=session_id).usage


def _raw_post(client, path: str, text: str):
    """A body sent as written: the test client's own encoder cannot carry a lone surrogate."""
    return client.post(path, data=text.encode(), content_type="application/json")


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# --- Item 4: numbers with a domain ----------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "where"),
    [
        ({"cost_usd": 1e12}, "chunks[0].usage.cost_usd"),
        ({"cost_usd": MAX_CHUNK_COST_USD + 1}, "chunks[0].usage.cost_usd"),
        ({"cost_usd": -0.5}, "chunks[0].usage.cost_usd"),
        ({"cost_usd": True}, "chunks[0].usage.cost_usd"),
        ({"prompt_tokens": MAX_CHUNK_TOKENS + 1}, "chunks[0].usage.prompt_tokens"),
        ({"total_tokens": 2**62}, "chunks[0].usage.total_tokens"),
        ({"completion_tokens": 1.5}, "chunks[0].usage.completion_tokens"),
        ({"prompt_tokens": 2**63}, "$.chunks[0].usage.prompt_tokens"),
        ({"total_tokens": 2**70}, "$.chunks[0].usage.total_tokens"),
    ],
)
def test_chunk_usage_outside_its_domain_is_a_400_and_changes_nothing(
    client, session_id, usage, where
):
    before = _usage_of(session_id)
    chunk = {"role": "assistant", "content": {"text": "a"}, "usage": usage}
    response = client.post(
        f"/api/v1/sessions/{session_id}/chunks/", {"chunks": [chunk]}, format="json"
    )
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert (error["code"], list(error["details"])) == ("invalid", ["chunks"])
    assert where in error["message"]
    assert Chunk.objects.filter(session_id=session_id).count() == 1
    assert _usage_of(session_id) == before
    # The session, the tenant's list and its page stay readable.
    assert client.get(f"/api/v1/sessions/{session_id}/").status_code == 200
    assert client.get("/api/v1/sessions/").status_code == 200


def test_usage_at_the_chunk_bounds_is_stored_and_read_back(client, session_id):
    usage = {
        "prompt_tokens": MAX_CHUNK_TOKENS,
        "completion_tokens": 0,
        "total_tokens": MAX_CHUNK_TOKENS,
        "cost_usd": MAX_CHUNK_COST_USD,
    }
    chunk = {"role": "assistant", "content": {"text": "a"}, "usage": usage}
    response = client.post(
        f"/api/v1/sessions/{session_id}/chunks/", {"chunks": [chunk]}, format="json"
    )
    assert response.status_code == 201, response.content
    assert client.get(f"/api/v1/sessions/{session_id}/").json()["usage"] == {
        "prompt_tokens": MAX_CHUNK_TOKENS,
        "completion_tokens": 0,
        "total_tokens": MAX_CHUNK_TOKENS,
        "cost_usd": float(MAX_CHUNK_COST_USD),
    }


def test_a_session_s_totals_cannot_pass_their_domain(client, session_id, tenant):
    """The database constraint keeps the totals readable: an append that would pass them is
    a 400 naming usage, and nothing is appended."""
    Session.objects.filter(id=session_id).update(
        usage_total_tokens=MAX_SESSION_TOKENS - 10,
        usage_cost_usd=Decimal(MAX_SESSION_COST_USD) - Decimal(1),
    )
    before = _usage_of(session_id)
    for usage in ({"total_tokens": 11}, {"cost_usd": 2}):
        chunk = {"role": "assistant", "content": {"text": "a"}, "usage": usage}
        response = client.post(
            f"/api/v1/sessions/{session_id}/chunks/", {"chunks": [chunk]}, format="json"
        )
        assert response.status_code == 400, response.content
        error = error_of(response)
        assert error["code"] == "invalid"
        assert error["details"] == {"usage": ["the session's totals would pass their limits"]}
        assert Chunk.objects.filter(session_id=session_id).count() == 1
        assert _usage_of(session_id) == before
    # Up to the bound is fine.
    chunk = {"role": "assistant", "content": {"text": "a"}, "usage": {"total_tokens": 10}}
    response = client.post(
        f"/api/v1/sessions/{session_id}/chunks/", {"chunks": [chunk]}, format="json"
    )
    assert response.status_code == 201, response.content
    assert _usage_of(session_id)["total_tokens"] == MAX_SESSION_TOKENS


def test_project_usage_is_exact_past_2_to_the_63(client, tenant, project):
    """9300 sessions at their most sum to about 9.3e18 tokens (past 2^63) and 9.3e13 USD (past
    what the decimal column holds): the project page still answers, exactly."""
    count = 9300
    Session.objects.bulk_create(
        [
            Session(
                tenant=tenant,
                project=project,
                usage_prompt_tokens=MAX_SESSION_TOKENS,
                usage_completion_tokens=1,
                usage_total_tokens=MAX_SESSION_TOKENS,
                usage_cost_usd=Decimal(MAX_SESSION_COST_USD),
            )
            for _ in range(count)
        ],
        batch_size=500,
    )
    response = client.get(f"/api/v1/projects/{project.slug}/")
    assert response.status_code == 200, response.content
    usage = response.json()["usage"]
    assert count * MAX_SESSION_TOKENS > 2**63
    assert usage == {
        "prompt_tokens": count * MAX_SESSION_TOKENS,
        "completion_tokens": count,
        "total_tokens": count * MAX_SESSION_TOKENS,
        "cost_usd": float(count * MAX_SESSION_COST_USD),
        "sessions": count,
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('"token_budget": 1180591620717411303424', "token_budget"),  # 2^70
        (f'"token_budget": {MAX_SESSION_TOKENS + 1}', "token_budget"),
        ('"token_budget": 0', "token_budget"),
        ('"cost_budget_usd": "100000000000"', "cost_budget_usd"),
        ('"cost_budget_usd": 1e999', "cost_budget_usd"),
        ('"priority": 9223372036854775808', "priority"),
        ('"priority": 101', "priority"),
        ('"deadline": "9999-12-31T23:00:00-05:00"', "deadline"),
        ('"state": {"n": 18446744073709551616}', "state"),
        ('"state": {"n": -9223372036854775809}', "state"),
        ('"state": {"n": [1e999]}', "state"),
    ],
)
def test_run_numbers_outside_their_domain_are_a_400(client, project, body, field):
    runs_before = Run.objects.count()
    text = f'{{"workflow": "linear", "project": "{project.slug}", {body}}}'
    response = _raw_post(client, "/api/v1/runs/", text)
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert (error["code"], list(error["details"])) == ("invalid", [field])
    assert Run.objects.count() == runs_before


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("chunks/?after=9223372036854775807", "after"),
        ("chunks/?after=99999999999999999999999", "after"),
        ("chunks/?after=2147483648", "after"),
        ("chunks/?limit=9223372036854775807", "limit"),
    ],
)
def test_chunk_page_parameters_have_a_domain(client, session_id, path, field):
    response = client.get(f"/api/v1/sessions/{session_id}/{path}")
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert (error["code"], list(error["details"])) == ("invalid", [field])
    assert client.get(f"/api/v1/sessions/{session_id}/chunks/?after=2147483647").json() == {
        "results": [],
        "next": None,
    }


def test_fork_at_and_event_after_have_a_domain(client, session_id, workflows, project):
    sessions_before = Session.objects.count()
    for at in (2**31, 2**62):
        response = client.post(f"/api/v1/sessions/{session_id}/fork/", {"at": at}, format="json")
        assert response.status_code == 400, response.content
        assert list(error_of(response)["details"]) == ["at"]
    assert Session.objects.count() == sessions_before
    run, _ = run_create(project=project, workflow=workflows.get("linear"))
    for path in ("events", "checkpoints"):
        response = client.get(f"/api/v1/runs/{run.id}/{path}/?after=9223372036854775807")
        assert response.status_code == 400, response.content
        assert list(error_of(response)["details"]) == ["after"]


def test_a_poisoned_cost_never_reaches_the_console(client, session_id, tenant):
    """The console's sessions pages answer after the attempt (they were 500s on SQLite)."""
    chunk = {"role": "assistant", "content": {"text": "a"}, "usage": {"cost_usd": 1e12}}
    client.post(f"/api/v1/sessions/{session_id}/chunks/", {"chunks": [chunk]}, format="json")
    user = UserFactory(username="viewer-domains")
    user.save()
    MembershipFactory(user=user, tenant=tenant, role="viewer")
    console = Client()
    console.force_login(user)
    assert console.get("/console/sessions/").status_code == 200
    assert console.get(f"/console/sessions/{session_id}/").status_code == 200
    # The console passes ?after= to the chunk selector, which keeps it in range (SQLite: 500).
    page = console.get(f"/console/sessions/{session_id}/?after=9223372036854775808")
    assert page.status_code == 200


# --- Item 8: JSON limits --------------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1000, 5000, 100_000])
def test_deep_json_in_any_body_is_a_400_naming_the_field(client, project, depth):
    sessions_before = Session.objects.count()
    text = f'{{"project": "{project.slug}", "metadata": {{"deep": {_nested(depth)}}}}}'
    response = _raw_post(client, "/api/v1/sessions/", text)
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["code"] == "invalid"
    assert error["details"] == {
        "metadata": [f"is nested more than {MAX_JSON_DEPTH} levels deep (at $.metadata)"]
    }
    assert Session.objects.count() == sessions_before


def test_values_deeper_than_the_value_limit_are_refused_where_they_are_stored(client, project):
    """Documents may nest 100 levels, stored values 64 (so a value fits in any body or export
    line around it): session metadata, chunk content, run state and memory metadata."""
    deep = json.loads(_nested(MAX_VALUE_DEPTH))  # 64 levels, 65 with the value around it
    chunk = {"role": "user", "content": {"text": "", "d": deep}}
    cases = [
        ("/api/v1/sessions/", {"metadata": {"d": deep}}, "metadata"),
        ("/api/v1/sessions/", {"chunks": [chunk]}, "chunks"),
        ("/api/v1/memory/", {"text": "fact", "metadata": {"d": deep}}, "metadata"),
        ("/api/v1/runs/", {"workflow": "linear", "state": {"d": deep}}, "state"),
    ]
    for path, body, field in cases:
        response = client.post(path, {"project": project.slug, **body}, format="json")
        assert response.status_code == 400, (path, response.content)
        error = error_of(response)
        assert (error["code"], list(error["details"])) == ("invalid", [field])
        assert f"nested more than {MAX_VALUE_DEPTH} levels deep" in error["message"]
    assert MemoryEntry.objects.count() == 0
    assert Session.objects.count() == 0
    assert Run.objects.count() == 0


def test_memory_metadata_500_deep_is_a_400(client, project):
    text = (
        f'{{"project": "{project.slug}", "text": "a fact", "metadata": {{"deep": {_nested(500)}}}}}'
    )
    response = _raw_post(client, "/api/v1/memory/", text)
    assert response.status_code == 400, response.content
    assert list(error_of(response)["details"]) == ["metadata"]
    assert MemoryEntry.objects.count() == 0


def _chunk(content: str, usage: str = "") -> str:
    extra = f', "usage": {usage}' if usage else ""
    return f'{{"chunks": [{{"role": "user", "content": {content}{extra}}}]}}'


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (_chunk('{"text": "a\\udfff"}'), "$.chunks[0].content.text"),
        (_chunk('{"text": "\\udfff\\ud800"}'), "$.chunks[0].content.text"),
        (_chunk('{"text": "", "\\ud800k": 1}'), "$.chunks[0].content (a key)"),
        (_chunk('{"text": "", "n": 1e999}'), "$.chunks[0].content.n"),
        (_chunk('{"text": "", "n": -1e999}'), "$.chunks[0].content.n"),
        (_chunk('{"text": "", "n": 18446744073709551616}'), "$.chunks[0].content.n"),
        (
            _chunk('{"text": "a"}', '{"prompt_tokens": 9223372036854775808}'),
            "$.chunks[0].usage.prompt_tokens",
        ),
    ],
)
def test_unstorable_values_in_chunks_are_a_400_naming_where(client, session_id, body, where):
    response = _raw_post(client, f"/api/v1/sessions/{session_id}/chunks/", body)
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert (error["code"], list(error["details"])) == ("invalid", ["chunks"])
    assert f"(at {where})" in error["details"]["chunks"][0]
    assert Chunk.objects.filter(session_id=session_id).count() == 1


def test_a_paired_surrogate_escape_is_text_and_stored(client, session_id):
    response = _raw_post(
        client,
        f"/api/v1/sessions/{session_id}/chunks/",
        '{"chunks": [{"role": "user", "content": {"text": "\\ud83d\\ude00 ok"}}]}',
    )
    assert response.status_code == 201, response.content
    assert response.json()[0]["content"] == {"text": "\U0001f600 ok"}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ('{"metadata": {"n": NaN}}', "malformed_request"),
        ('{"metadata": {"n": Infinity}}', "malformed_request"),
        ('{"metadata": {"n": 1' + "0" * 10_000 + "}}", "malformed_request"),
        ('{"metadata": {"n": 1e999}}', "invalid"),
        ('{"metadata": {"k\\udfff": 1}}', "invalid"),
    ],
)
def test_numbers_and_text_json_cannot_hold_are_a_400(client, project, body, code):
    text = body.replace("{", f'{{"project": "{project.slug}", ', 1)
    response = _raw_post(client, "/api/v1/sessions/", text)
    assert response.status_code == 400, response.content
    assert error_of(response)["code"] == code
    assert Session.objects.count() == 0


def _import(client, project: Project, content: str):
    return client.post(
        "/api/v1/sessions/import/",
        {"project": project.slug, "files": [{"name": "x.jsonl", "content": content}]},
        format="json",
    )


def _export(*middle: str) -> str:
    header = dumps({"type": "header", "format": EXPORT_FORMAT, "version": EXPORT_VERSION})
    trailer = dumps({"type": "trailer", "sessions": 1, "edges": 0, "chunks": 0})
    return header + "".join(middle) + trailer


def _session_line(**fields: Any) -> str:
    return dumps({"type": "session", "id": "s1", "op": "create", **fields})


_SESSION = '{"type": "session", "id": "s1", "op": "create", '


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            _SESSION + '"metadata": ' + _nested(1000) + "}\n",
            "x.jsonl:2: is nested more than 100 levels deep (at $.metadata)",
        ),
        (
            _SESSION + '"n": 1' + "0" * 10_000 + "}\n",
            "x.jsonl:2: invalid JSON: Exceeds the limit (4300 digits)",
        ),
        (_SESSION + '"n": 1e999}\n', "x.jsonl:2: must be a finite number"),
        (
            _SESSION + '"title": "\\udfff"}\n',
            "x.jsonl:2: must not contain the unpaired surrogate \\udfff",
        ),
        (
            _session_line(usage={"total_tokens": 2**62}),
            f"x.jsonl:2: usage.total_tokens must be an integer between 0 and {MAX_SESSION_TOKENS}",
        ),
        (
            _session_line(usage={"cost_usd": 1e12}),
            f"x.jsonl:2: usage.cost_usd must be a number between 0 and {MAX_SESSION_COST_USD}",
        ),
        (
            _session_line(own_len="many"),
            "x.jsonl:2: own_len must be an integer between 0 and 2147483647",
        ),
        (
            _session_line(base_len=2**40),
            "x.jsonl:2: base_len must be an integer between 0 and 2147483647",
        ),
    ],
)
def test_an_import_outside_the_domain_is_a_400_naming_the_line(client, project, line, message):
    response = _import(client, project, _export(line))
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["code"] == "invalid"
    assert list(error["details"]) == ["files"]
    assert message in error["details"]["files"][0]
    assert Session.objects.count() == 0


def test_a_v1_log_with_unbounded_usage_is_a_400(client, project):
    lines = [
        {"record_type": "header", "schema_version": 1, "id": "v1a"},
        {"record_type": "trailer", "cumulative_usage": {"prompt_tokens": "12", "total_tokens": 1}},
    ]
    response = _import(client, project, "".join(dumps(r) for r in lines))
    assert response.status_code == 400, response.content
    assert (
        "x.jsonl:2: cumulative_usage.prompt_tokens must be an integer"
        in (error_of(response)["details"]["files"][0])
    )
    assert Session.objects.count() == 0


# --- The rules without a server -------------------------------------------------------------


def test_json_problem_walks_without_recursion_and_in_document_order():
    deep: Any = []
    for _ in range(200_000):
        deep = [deep]
    problem = json_problem({"a": 1, "b": deep}, max_depth=MAX_JSON_DEPTH)
    assert problem is not None
    assert (problem.path, problem.field) == ("$.b", "b")
    first = json_problem({"a": ["\x00", "\udfff"], "b": float("inf")})
    assert first is not None
    assert (first.path, first.message) == ("$.a[0]", "must not contain the NUL character \\u0000")
    assert json_problem({"a": [1, 2.5, True, None, "é", {"k": -(2**63)}]}) is None
    assert loads('{"a": [1]}') == {"a": [1]}


def test_chunk_drafts_from_code_are_held_to_the_same_domain():
    for content, field in (
        ({"text": "a\udfff"}, "content.text"),
        ({"text": "", "n": float("nan")}, "content.n"),
        ({"text": "", "n": 2**64}, "content.n"),
        ({"text": "", "d": json.loads(_nested(MAX_VALUE_DEPTH))}, "content.d"),
    ):
        with pytest.raises(ChunkInvalid) as caught:
            make_draft(role="user", content=content)
        assert caught.value.field == field
    # Braces in text are not nesting, and long digit runs in text are not numbers.
    text = "{[" * 500 + "1" * 40
    assert make_draft(role="user", content={"text": text}).content == {"text": text}


def test_memory_numbers_from_code_have_a_domain(project):
    source = session_from_user_message(project=project, text="where it came from")
    with pytest.raises(ValidationFailed) as caught:
        memory_remember(project=project, text="a fact", source_session=source, source_seq=2**40)
    assert caught.value.details == {"source_seq": ["must be at most 2147483647"]}
    with pytest.raises(ValidationFailed) as caught:
        memory_remember(project=project, text="a fact \udfff")
    assert caught.value.details == {
        "text": ["must not contain the unpaired surrogate \\udfff (not Unicode text)"]
    }
    assert MemoryEntry.objects.count() == 0
