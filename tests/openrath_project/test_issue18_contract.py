"""Issue 18, the API contract: the chunks append as documented (item 10), a raw JSONL import
(11), ``?status=`` and unknown query parameters (12), the workflow that wrote a session, edge
and chunk (13), a summary on every operation and no streaming warning under ASGI (14)."""

from __future__ import annotations

import json
import uuid
import warnings

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from effects_app.models import EffectRecord
from runs_app import services as run_services
from runs_app.models import Interrupt
from runs_app.registry import WorkflowRegistry
from sessions_app import context, services, transfer
from sessions_app.chunk_rules import make_draft
from sessions_app.models import Chunk, LineageEdge, Session
from tests.openrath_project import observability_workflows
from tests.support import REPO, error_of

pytestmark = pytest.mark.django_db

DOCUMENT = json.loads((REPO / "deploy" / "openapi-v1.json").read_text())


@pytest.fixture
def api(make_token, client_for):
    return client_for(make_token(["*"]))


def _session(project, text: str = "hello") -> Session:
    return services.session_create(
        project=project,
        title="t",
        chunks=[make_draft(role="user", content={"text": text})],
        metadata={},
        created_by="test",
    )


# --- item 10 ---------------------------------------------------------------------------------


def test_chunks_append_is_documented_as_the_bare_array_it_returns(api, project):
    session = _session(project)
    response = api.post(
        f"/api/v1/sessions/{session.id}/chunks/",
        {"chunks": [{"role": "assistant", "content": {"text": "hi"}}]},
        format="json",
    )
    assert response.status_code == 201
    body = response.json()
    assert isinstance(body, list)
    assert [(c["seq"], c["content"]) for c in body] == [(1, {"text": "hi"})]
    operation = DOCUMENT["paths"]["/api/v1/sessions/{id}/chunks/"]
    created = operation["post"]["responses"]["201"]["content"]["application/json"]["schema"]
    assert created == {"type": "array", "items": {"$ref": "#/components/schemas/ChunkOut"}}
    page = operation["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert page == {"$ref": "#/components/schemas/PaginatedChunkOutList"}
    # The chunk page reads after/limit only: the list filters and the cursor are not its own.
    assert [p["name"] for p in operation["get"]["parameters"] if p["in"] == "query"] == [
        "after",
        "limit",
    ]


# --- item 11 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("media_type", ["application/jsonl", "application/x-ndjson"])
def test_import_takes_the_raw_jsonl_its_export_returns(api, project, other_project, media_type):
    root = _session(project, "the root")
    services.session_fork(session=root, title="branch", created_by="test")
    exported = api.get(f"/api/v1/sessions/{root.id}/export/")
    assert exported.status_code == 200
    assert exported["Content-Type"].startswith("application/jsonl")
    before = Session.objects.filter(project=other_project).count()
    response = api.generic(
        "POST",
        f"/api/v1/sessions/import/?project={other_project.slug}",
        exported.content,
        content_type=media_type,
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert len(body["sessions"]) == 2
    assert str(root.id) in body["mapping"]
    assert Session.objects.filter(project=other_project).count() == before + 2
    copy = Session.objects.get(id=body["mapping"][str(root.id)])
    assert [c.content for c in Chunk.objects.filter(session=copy)] == [{"text": "the root"}]


def test_raw_jsonl_import_needs_a_project_and_changes_nothing_without_one(api, project):
    exported = api.get(f"/api/v1/sessions/{_session(project).id}/export/").content
    before = Session.objects.count()
    response = api.generic(
        "POST", "/api/v1/sessions/import/", exported, content_type="application/jsonl"
    )
    assert response.status_code == 400
    assert error_of(response)["details"] == {"project": ["This field is required."]}
    assert Session.objects.count() == before


def test_raw_jsonl_import_keeps_the_depth_and_body_limits(api, project, settings):
    header = json.dumps(
        {"type": "header", "format": "openrath-django/sessions", "version": 1, "root": "x"}
    )
    deep = "[" * 150 + "]" * 150
    body = f'{header}\n{{"type": "session", "id": "s", "metadata": {deep}}}\n'
    before = Session.objects.count()
    response = api.generic(
        "POST",
        f"/api/v1/sessions/import/?project={project.slug}",
        body.encode(),
        content_type="application/jsonl",
    )
    assert response.status_code == 400
    assert "100 levels" in error_of(response)["message"]
    settings.OPENRATH_MAX_REQUEST_BYTES = 1000
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    big = (header + "\n" + "x" * 2000).encode()
    response = api.generic(
        "POST",
        f"/api/v1/sessions/import/?project={project.slug}",
        big,
        content_type="application/jsonl",
    )
    assert response.status_code == 413
    assert Session.objects.count() == before


# --- item 12 ---------------------------------------------------------------------------------


@pytest.fixture
def run(project, monkeypatch):
    fresh = WorkflowRegistry()
    fresh.discover([observability_workflows.__name__])
    created, _ = run_services.run_create(project=project, workflow=fresh.get("observed"), state={})
    return created


def test_interrupts_and_effects_filter_by_status_and_the_state_alias(api, project, run):
    for sequence, status in enumerate(("pending", "resolved")):
        Interrupt.objects.create(
            tenant=project.tenant,
            project=project,
            run=run,
            step="first",
            checkpoint_seq=0,
            sequence=sequence,
            kind="approval",
            request_digest=str(sequence) * 64,
            status=status,
        )
    for index, status in enumerate(("needs_review", "succeeded")):
        EffectRecord.objects.create(
            tenant=project.tenant,
            project=project,
            run=run,
            step="first",
            key=f"k{index}",
            idempotency_key=uuid.uuid4().hex,
            request_digest="2" * 64,
            status=status,
        )
    for query in ("status=pending", "state=pending"):
        body = api.get(f"/api/v1/interrupts/?{query}").json()
        assert [i["status"] for i in body["results"]] == ["pending"]
    for query in ("status=needs_review", "state=needs_review"):
        body = api.get(f"/api/v1/effects/?{query}").json()
        assert [e["status"] for e in body["results"]] == ["needs_review"]
    assert len(api.get("/api/v1/interrupts/").json()["results"]) == 2


LIST_ENDPOINTS = [
    "/api/v1/projects/",
    "/api/v1/sessions/",
    "/api/v1/runs/",
    "/api/v1/interrupts/",
    "/api/v1/effects/",
    "/api/v1/memory/",
    "/api/v1/audit/",
    "/api/v1/workflows/",
]


@pytest.mark.parametrize("path", LIST_ENDPOINTS)
def test_an_unknown_query_parameter_is_a_400_naming_it(api, path):
    documented = "" if path == "/api/v1/workflows/" else "&limit=5"  # not paged
    response = api.get(f"{path}?stauts=pending{documented}")
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid"
    assert error["details"] == {"stauts": ["unknown query parameter"]}
    assert "stauts" in error["message"]


@pytest.mark.parametrize("path", [p for p in LIST_ENDPOINTS if p != "/api/v1/workflows/"])
def test_every_documented_list_parameter_is_accepted(api, path):
    operation = DOCUMENT["paths"][path]["get"]
    names = [p["name"] for p in operation["parameters"] if p["in"] == "query"]
    assert {"cursor", "limit"} <= set(names)
    response = api.get(f"{path}?limit=5&cursor=")
    assert response.status_code in (200, 400)
    if response.status_code == 400:  # an empty cursor is not a cursor: named, not "unknown"
        assert error_of(response)["details"] != {"cursor": ["unknown query parameter"]}


def test_unknown_parameters_of_other_get_actions(api, project, run):
    session = _session(project)
    assert api.get(f"/api/v1/sessions/{session.id}/chunks/?after=-1&limit=2").status_code == 200
    response = api.get(f"/api/v1/sessions/{session.id}/chunks/?cursor=abc")
    assert response.status_code == 400
    assert error_of(response)["details"] == {"cursor": ["unknown query parameter"]}
    assert api.get(f"/api/v1/runs/{run.id}/events/?after=0&limit=5").status_code == 200
    response = api.get(f"/api/v1/runs/{run.id}/events/?status=queued")
    assert response.status_code == 400
    assert error_of(response)["details"] == {"status": ["unknown query parameter"]}


def test_an_unknown_parameter_does_not_outrank_authentication(client_for):
    response = client_for(None).get("/api/v1/sessions/?nonsense=1")
    assert response.status_code == 401


# --- item 13 ---------------------------------------------------------------------------------


def test_sessions_edges_and_chunks_say_which_workflow_wrote_them(api, project):
    root = _session(project)
    with context.writing(workflow="outer/inner", agent="writer"):
        child = services.session_fork(session=root, title="branch", created_by="test")
        services.chunks_append(
            session=child, drafts=[make_draft(role="assistant", content={"text": "by the flow"})]
        )
    assert Chunk.objects.get(session=child).workflow == "outer/inner"
    assert LineageEdge.objects.get(child=child).workflow == "outer/inner"

    session = api.get(f"/api/v1/sessions/{child.id}/").json()
    assert session["workflow"] == "outer/inner"
    chunks = api.get(f"/api/v1/sessions/{child.id}/chunks/").json()["results"]
    assert [(c["content"]["text"], c["workflow"]) for c in chunks] == [
        ("hello", ""),
        ("by the flow", "outer/inner"),
    ]
    lineage = api.get(f"/api/v1/sessions/{child.id}/lineage/").json()
    assert [e["workflow"] for e in lineage["edges"]] == ["outer/inner"]

    records = [json.loads(line) for line in "".join(transfer.export_graph(root)).splitlines()]
    assert {r["workflow"] for r in records if r["type"] == "edge"} == {"outer/inner"}
    assert [r["workflow"] for r in records if r["type"] == "chunk"] == ["", "outer/inner"]
    assert {r["workflow"] for r in records if r["type"] == "session"} == {"", "outer/inner"}

    for name in ("SessionOut", "ChunkOut", "LineageEdgeOut"):
        assert "workflow" in DOCUMENT["components"]["schemas"][name]["properties"], name


def test_the_import_keeps_the_workflow_and_takes_older_exports_without_it(project):
    root = _session(project)
    with context.writing(workflow="flow"):
        services.session_fork(session=root, title="branch", created_by="test")
    text = "".join(transfer.export_graph(root))
    result = transfer.import_files(project=project, files=[("a.jsonl", text)])
    copies = sorted(result.sessions, key=lambda s: s.provenance["original_id"])
    assert sorted(s.workflow for s in copies) == ["", "flow"]
    assert {e.workflow for e in LineageEdge.objects.filter(child__in=copies)} == {"flow"}

    older = []
    for line in text.splitlines():
        record = json.loads(line)
        record.pop("workflow", None)
        older.append(json.dumps(record))
    result = transfer.import_files(project=project, files=[("old.jsonl", "\n".join(older) + "\n")])
    assert len(result.sessions) == 2
    assert {s.workflow for s in result.sessions} == {""}


# --- item 14 ---------------------------------------------------------------------------------


def test_every_operation_has_a_summary():
    missing = [
        f"{method.upper()} {path}"
        for path, operations in DOCUMENT["paths"].items()
        for method, operation in operations.items()
        if not operation.get("summary")
    ]
    assert missing == []


def test_static_files_stream_under_asgi_without_the_synchronous_iterator_warning(settings):
    from django.contrib.staticfiles import finders

    assert finders.find("console/live.js")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        response = async_to_sync(AsyncClient().get)(f"{settings.STATIC_URL}console/live.js")
        assert response.status_code == 200
        content = b"".join(async_to_sync(_collect)(response))
    assert b"function" in content
    assert [str(w.message) for w in caught if "synchronous iterators" in str(w.message)] == []


async def _collect(response):
    return [part async for part in response]
