"""The sessions API: permission matrix on every endpoint, validation, query counts."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from openrath_project.tenancy.models import ApiToken
from openrath_project.tenancy.services import token_revoke
from sessions_app import services
from sessions_app.models import Chunk, LineageEdge, Session
from tests.sessions_app.conftest import msg
from tests.support import error_of

pytestmark = pytest.mark.django_db
API = "/api/v1/sessions/"


def _state():
    return (Session.objects.count(), Chunk.objects.count(), LineageEdge.objects.count())


@pytest.fixture
def world(project, other_project, make_session):
    """Two sessions in acme/research, one in acme/ops."""
    first = make_session(["hello", "world"])
    second = services.session_fork(session=first)
    services.chunks_append(session=second, drafts=[msg("branch", "assistant")])
    elsewhere = make_session(["ops"], project=other_project)
    return {"first": first, "second": second, "elsewhere": elsewhere}


def _endpoints(world):
    s, s2 = world["first"].id, world["second"].id
    export_text = "".join(
        __import__("sessions_app.transfer", fromlist=["export_graph"]).export_graph(world["first"])
    )
    return [
        ("get", f"{API}{s}/", None, "sessions:read", 200),
        ("get", f"{API}{s}/chunks/", None, "sessions:read", 200),
        (
            "post",
            f"{API}{s}/chunks/",
            {"chunks": [{"role": "user", "content": {"text": "x"}}]},
            "sessions:write",
            201,
        ),
        ("post", f"{API}{s}/fork/", {}, "sessions:write", 201),
        ("post", f"{API}{s}/detach/", {}, "sessions:write", 201),
        ("post", f"{API}merge/", {"sessions": [str(s), str(s2)]}, "sessions:write", 201),
        ("get", f"{API}{s}/lineage/", None, "sessions:read", 200),
        ("get", f"{API}{s}/export/", None, "sessions:read", 200),
        ("post", API, {"project": "research", "user_message": "hi"}, "sessions:write", 201),
        (
            "post",
            f"{API}import/",
            {"project": "research", "files": [{"name": "a.jsonl", "content": export_text}]},
            "sessions:write",
            201,
        ),
    ]


def _call(client, method, path, body):
    if body is None:
        return getattr(client, method)(path)
    return getattr(client, method)(path, body, format="json")


@pytest.mark.parametrize(
    "who",
    [
        "anonymous",
        "malformed",
        "expired",
        "revoked",
        "other_tenant",
        "other_project",
        "missing_grant",
    ],
)
def test_every_endpoint_refuses_and_changes_nothing(
    who, world, make_token, client_for, other_tenant, other_project
):
    if who == "anonymous":
        raw = None
    elif who == "malformed":
        raw = "ort_nope"
    elif who == "expired":
        raw = make_token(["*"], expires_in=timedelta(seconds=60))
        ApiToken.objects.update(
            created_at=timezone.now() - timedelta(hours=1),
            expires_at=timezone.now() - timedelta(minutes=1),
        )
    elif who == "revoked":
        raw = make_token(["*"])
        token_revoke(prefix=raw)
    elif who == "other_tenant":
        from tests.factories import ProjectFactory

        ProjectFactory(tenant=other_tenant, slug="research")
        raw = make_token(["*"], tenant=other_tenant)
    elif who == "other_project":
        raw = make_token(["*"], projects=[other_project])
    else:
        raw = make_token(["projects:read", "runs:read"])
    client = client_for(raw)
    for method, path, body, grant, _ in _endpoints(world):
        before = _state()
        response = _call(client, method, path, body)
        expected = {
            "anonymous": 401,
            "malformed": 401,
            "expired": 401,
            "revoked": 401,
            "missing_grant": 403,
        }.get(who, 404)
        if who == "other_tenant" and path == f"{API}import/":
            expected = 201  # their own project "research": allowed, and it is theirs
        if who == "other_tenant" and path == API:
            expected = 201
        assert response.status_code == expected, (who, method, path, response.content[:300])
        if expected >= 400:
            error = error_of(response)
            if expected == 403:
                assert error["details"] == {"required_grant": grant}
            assert _state() == before, (who, method, path)
            assert str(world["first"].id) not in response.content.decode() or expected == 404


def test_other_tenant_writes_stay_in_their_tenant(world, make_token, client_for, other_tenant):
    from tests.factories import ProjectFactory

    theirs = ProjectFactory(tenant=other_tenant, slug="research")
    client = client_for(make_token(["*"], tenant=other_tenant))
    created = client.post(API, {"project": "research", "user_message": "hi"}, format="json")
    assert created.json()["project"] == str(theirs.id)
    listed = client.get(API).json()["results"]
    assert [s["id"] for s in listed] == [created.json()["id"]]


def test_allowed_principal_reaches_every_endpoint(world, make_token, client_for):
    client = client_for(make_token(["sessions:read", "sessions:write"]))
    for method, path, body, _, status in _endpoints(world):
        response = _call(client, method, path, body)
        assert response.status_code == status, (method, path, response.content[:300])


def test_project_restricted_token_sees_only_its_project(world, make_token, client_for, project):
    client = client_for(make_token(["sessions:read"], projects=[project]))
    ids = {s["id"] for s in client.get(API).json()["results"]}
    assert ids == {str(world["first"].id), str(world["second"].id)}
    assert client.get(f"{API}{world['elsewhere'].id}/").status_code == 404


def test_cross_tenant_fork_and_merge_are_404_and_change_nothing(
    world, make_token, client_for, other_tenant
):
    from tests.factories import ProjectFactory

    foreign = services.session_create(
        project=ProjectFactory(tenant=other_tenant, slug="x"), chunks=[msg("theirs")]
    )
    client = client_for(make_token(["sessions:read", "sessions:write"]))
    before = _state()
    response = client.post(f"{API}{foreign.id}/fork/", {}, format="json")
    assert response.status_code == 404
    response = client.post(
        f"{API}merge/", {"sessions": [str(world["first"].id), str(foreign.id)]}, format="json"
    )
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"
    assert _state() == before


class TestShapes:
    def test_create_and_read(self, make_token, client_for, project):
        client = client_for(make_token(["sessions:read", "sessions:write"]))
        created = client.post(
            API,
            {"project": str(project.id), "user_message": "Plan a trip", "metadata": {"k": "v"}},
            format="json",
        )
        assert created.status_code == 201
        body = created.json()
        assert {
            "id",
            "project",
            "title",
            "op",
            "parents",
            "length",
            "usage",
            "placement",
            "metadata",
            "created_at",
        } <= set(body)
        assert (
            body["project"],
            body["title"],
            body["op"],
            body["parents"],
            body["length"],
            body["metadata"],
        ) == (str(project.id), "Plan a trip", "create", [], 1, {"k": "v"})
        page = client.get(f"{API}{body['id']}/chunks/").json()
        assert page["next"] is None
        (chunk,) = page["results"]
        assert {
            "seq",
            "role",
            "kind",
            "content",
            "agent",
            "run",
            "step",
            "tool_call_id",
            "trust",
            "usage",
            "created_at",
        } <= set(chunk)
        assert (chunk["seq"], chunk["role"], chunk["kind"], chunk["content"], chunk["trust"]) == (
            0,
            "user",
            "message",
            {"text": "Plan a trip"},
            "trusted",
        )

    def test_append_fork_merge_lineage(self, make_token, client_for, project):
        client = client_for(make_token(["sessions:read", "sessions:write"]))
        sid = client.post(API, {"project": "research", "user_message": "q"}, format="json").json()[
            "id"
        ]
        appended = client.post(
            f"{API}{sid}/chunks/",
            {
                "chunks": [
                    {
                        "role": "assistant",
                        "kind": "tool_call",
                        "content": {"id": "c1", "name": "search", "arguments": {"q": "x"}},
                        "agent": "a1",
                    },
                    {
                        "role": "tool",
                        "kind": "tool_result",
                        "content": {"tool_call_id": "c1", "name": "search", "output": ["r"]},
                    },
                ]
            },
            format="json",
        )
        assert appended.status_code == 201
        stored = appended.json()
        assert [(c["seq"], c["tool_call_id"], c["trust"], c["agent"]) for c in stored] == [
            (1, "c1", "trusted", "a1"),
            (2, "c1", "untrusted", ""),
        ]
        left = client.post(f"{API}{sid}/fork/", {"title": "left"}, format="json").json()
        right = client.post(f"{API}{sid}/fork/", {"at": 1}, format="json").json()
        assert (left["parents"], left["length"], right["length"]) == ([sid], 3, 1)
        client.post(
            f"{API}{right['id']}/chunks/",
            {"chunks": [{"role": "assistant", "content": {"text": "r"}}]},
            format="json",
        )
        merged = client.post(
            f"{API}merge/", {"sessions": [left["id"], right["id"]]}, format="json"
        ).json()
        assert merged["parents"] == [left["id"], right["id"]]
        assert merged["length"] == 1 + 2 + 1
        graph = client.get(f"{API}{sid}/lineage/").json()
        assert {n["id"] for n in graph["nodes"]} == {sid, left["id"], right["id"], merged["id"]}
        assert sorted(
            (e["parent"], e["child"], e["op"], e["at"]) for e in graph["edges"]
        ) == sorted(
            [
                (sid, left["id"], "fork", 3),
                (sid, right["id"], "fork", 1),
                (left["id"], merged["id"], "merge", 3),
                (right["id"], merged["id"], "merge", 2),
            ]
        )
        ancestors = client.get(f"{API}{merged['id']}/lineage/", {"direction": "ancestors"}).json()
        assert len(ancestors["nodes"]) == 4
        descendants = client.get(f"{API}{left['id']}/lineage/", {"direction": "descendants"}).json()
        assert {n["id"] for n in descendants["nodes"]} == {left["id"], merged["id"]}
        paged = client.get(f"{API}{sid}/lineage/", {"limit": 3}).json()
        assert len(paged["nodes"]) == 3
        rest = client.get(paged["next"]).json()
        assert len(rest["nodes"]) == 1
        assert rest["next"] is None
        assert len(paged["edges"]) + len(rest["edges"]) == 4

    def test_chunk_pages(self, make_token, client_for, make_session):
        session = make_session([f"m{i}" for i in range(7)])
        client = client_for(make_token(["sessions:read"]))
        first = client.get(f"{API}{session.id}/chunks/", {"limit": 3}).json()
        assert [c["seq"] for c in first["results"]] == [0, 1, 2]
        second = client.get(first["next"]).json()
        assert [c["seq"] for c in second["results"]] == [3, 4, 5]
        third = client.get(second["next"]).json()
        assert ([c["seq"] for c in third["results"]], third["next"]) == ([6], None)
        after = client.get(f"{API}{session.id}/chunks/", {"after": 4}).json()
        assert [c["seq"] for c in after["results"]] == [5, 6]

    def test_list_filters(self, make_token, client_for, project, other_project, make_session):
        from sessions_app import context

        a = make_session(["a"])
        with context.writing(agent="researcher"):
            b = services.session_fork(session=a)
        make_session(["c"], project=other_project)
        client = client_for(make_token(["sessions:read"]))

        def ids(**params):
            return {s["id"] for s in client.get(API, params).json()["results"]}

        assert ids(project="research") == {str(a.id), str(b.id)}
        assert ids(op="fork") == {str(b.id)}
        assert ids(agent="researcher") == {str(b.id)}
        assert ids(created_after=(timezone.now() + timedelta(hours=1)).isoformat()) == set()
        assert client.get(API, {"project": "nope"}).status_code == 404
        assert client.get(API, {"op": "explode"}).status_code == 400

    def test_export_is_jsonl(self, make_token, client_for, make_session):
        session = make_session(["a"])
        response = client_for(make_token(["sessions:read"])).get(f"{API}{session.id}/export/")
        assert response["Content-Type"].startswith("application/jsonl")
        lines = [json.loads(line) for line in response.content.decode().splitlines()]
        assert [line["type"] for line in lines] == ["header", "session", "chunk", "trailer"]


class TestValidation:
    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"chunks": [{"role": "robot", "content": {"text": "x"}}]}, "chunks"),
            (
                {"chunks": [{"role": "user", "kind": "tool_call", "content": {"text": "x"}}]},
                "chunks",
            ),
            ({"chunks": [{"role": "user", "content": {"words": "x"}}]}, "chunks"),
            ({"chunks": []}, "chunks"),
            ({"chunks": [{"role": "user", "content": {"text": "x"}, "colour": 1}]}, "chunks"),
            ({"chunk": []}, "chunk"),
        ],
    )
    def test_bad_chunks(self, make_token, client_for, make_session, body, field):
        session = make_session(["a"])
        client = client_for(make_token(["sessions:write"]))
        before = _state()
        response = client.post(f"{API}{session.id}/chunks/", body, format="json")
        assert response.status_code == 400
        error = error_of(response)
        assert field in error["details"]
        assert field in error["message"]
        assert _state() == before

    def test_oversized_chunk_is_413(self, make_token, client_for, make_session, settings):
        settings.OPENRATH_MAX_CHUNK_BYTES = 1000
        session = make_session(["a"])
        before = _state()
        response = client_for(make_token(["sessions:write"])).post(
            f"{API}{session.id}/chunks/",
            {"chunks": [{"role": "user", "content": {"text": "y" * 5000}}]},
            format="json",
        )
        assert response.status_code == 413
        assert error_of(response)["code"] == "payload_too_large"
        assert _state() == before

    def test_other_bad_input(self, make_token, client_for, make_session):
        session = make_session(["a", "b"])
        client = client_for(make_token(["sessions:read", "sessions:write"]))
        before = _state()
        cases = [
            ("post", f"{API}{session.id}/fork/", {"at": 9}, "at"),
            ("post", f"{API}{session.id}/fork/", {"at": -1}, "at"),
            ("post", f"{API}merge/", {"sessions": [str(session.id)]}, "sessions"),
            (
                "post",
                f"{API}merge/",
                {"sessions": [str(session.id)] * 2, "strategy": "summary"},
                "sessions",
            ),
            (
                "post",
                API,
                {"project": "research", "user_message": "x", "chunks": []},
                "user_message",
            ),
            (
                "post",
                f"{API}import/",
                {"project": "research", "files": [{"name": "x.jsonl", "content": "{oops\n"}]},
                "files",
            ),
            ("get", f"{API}{session.id}/chunks/?limit=100000", None, "limit"),
            ("get", f"{API}{session.id}/chunks/?after=abc", None, "after"),
            ("get", f"{API}{session.id}/lineage/?direction=sideways", None, "direction"),
        ]
        for method, path, body, field in cases:
            response = _call(client, method, path, body)
            assert response.status_code == 400, (path, body, response.content)
            assert field in error_of(response)["details"], (path, response.json())
        assert _state() == before
        summary = client.post(
            f"{API}merge/",
            {"sessions": [str(session.id), str(make_session(["z"]).id)], "strategy": "summary"},
            format="json",
        )
        assert summary.status_code == 400
        assert "summarizer" in error_of(summary)["message"]
        assert client.get(f"{API}not-a-uuid/").status_code == 404

    def test_busy_session_is_409(self, make_token, client_for, make_session):
        import uuid

        session = make_session(["a"])
        services.session_claim_writer(session=session, run_id=uuid.uuid4(), token=1)
        response = client_for(make_token(["sessions:write"])).post(
            f"{API}{session.id}/chunks/",
            {"chunks": [{"role": "user", "content": {"text": "x"}}]},
            format="json",
        )
        assert response.status_code == 409
        assert error_of(response)["code"] == "session_busy"


def _deep(make_session, depth):
    current = make_session([f"r{i}" for i in range(5)])
    for level in range(depth):
        current = services.session_fork(session=current)
        services.chunks_append(session=current, drafts=[msg(f"d{level}")])
    return current


def test_query_counts_do_not_grow_with_fork_depth(make_token, client_for, make_session):
    client = client_for(make_token(["sessions:read"]))
    client.get(API)  # the first use of a token records last_used_at: keep it out of the counts
    counts = {}
    for depth in (1, 50):
        session = _deep(make_session, depth)
        with CaptureQueriesContext(connection) as chunks_q:
            response = client.get(f"{API}{session.id}/chunks/", {"limit": 50})
        assert response.status_code == 200
        assert len(response.json()["results"]) == min(50, 5 + depth)
        with CaptureQueriesContext(connection) as lineage_q:
            response = client.get(f"{API}{session.id}/lineage/")
        assert len(response.json()["nodes"]) == depth + 1
        counts[depth] = (len(chunks_q), len(lineage_q))
    assert counts[1] == counts[50], counts
