"""The memory API: permission matrix on every endpoint, shapes, filters, validation, limits."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory_app import services
from memory_app.models import MemoryEntry
from openrath_project.tenancy.models import ApiToken, AuditEvent
from openrath_project.tenancy.services import token_revoke
from tests.factories import ProjectFactory
from tests.memory_app.conftest import memory_state
from tests.support import error_of

pytestmark = pytest.mark.django_db
API = "/api/v1/memory/"
SECRET = "The staging password rotates monthly."


@pytest.fixture
def world(project, other_project, make_session):
    """Facts in acme/research (project, agent and session scope) and one in acme/ops."""
    session = make_session([("user", "hello")])
    remember = services.memory_remember
    return {
        "session": session,
        "fact": remember(project=project, text=SECRET, trust="trusted")[0],
        "agent_fact": remember(
            project=project, text="Writer: staging uses short titles.", scope="agent", agent="w"
        )[0],
        "session_fact": remember(
            project=project,
            text="Session: staging demo at noon.",
            scope="session",
            session=session,
        )[0],
        "elsewhere": remember(project=other_project, text="Ops: staging is on host b.")[0],
    }


def _endpoints(world, project):
    sid = str(world["session"].id)
    pid = str(project.id)
    return [
        ("get", f"{API}?project={pid}", None, "memory:read", 200),
        ("post", API, {"project": pid, "text": "A new fact."}, "memory:write", 201),
        (
            "post",
            API,
            {"project": pid, "text": "A session fact.", "scope": "session", "session": sid},
            "memory:write",
            201,
        ),
        ("post", f"{API}recall/", {"project": pid, "query": "staging"}, "memory:read", 200),
        (
            "post",
            f"{API}recall/",
            {"project": pid, "query": "staging", "scope": "session", "session": sid},
            "memory:read",
            200,
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
    who, world, project, make_token, client_for, other_tenant, other_project
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
        ProjectFactory(tenant=other_tenant, slug="research")
        raw = make_token(["*"], tenant=other_tenant)
    elif who == "other_project":
        raw = make_token(["*"], projects=[other_project])
    else:
        raw = make_token(["projects:read", "sessions:read", "sessions:write"])
    client = client_for(raw)
    expected = {
        "anonymous": (401, "not_authenticated"),
        "malformed": (401, "not_authenticated"),
        "expired": (401, "not_authenticated"),
        "revoked": (401, "not_authenticated"),
        "missing_grant": (403, "permission_denied"),
    }.get(who, (404, "not_found"))
    for method, path, body, grant, _ in _endpoints(world, project):
        before = memory_state()
        response = _call(client, method, path, body)
        assert response.status_code == expected[0], (who, method, path, response.content[:300])
        error = error_of(response)
        assert error["code"] == expected[1]
        if expected[0] == 403:
            assert error["details"] == {"required_grant": grant}
        assert memory_state() == before, (who, method, path)
        assert "staging" not in response.content.decode()


def test_denials_are_audited(world, project, make_token, client_for):
    client = client_for(make_token(["memory:read"]))
    response = client.post(API, {"project": str(project.id), "text": "x"}, format="json")
    assert response.status_code == 403
    event = AuditEvent.objects.get(action="memory.create")
    assert (event.outcome, event.status_code, event.details["error_code"]) == (
        "denied",
        403,
        "permission_denied",
    )


@pytest.mark.parametrize(("grant", "other"), [("memory:read", "memory:write")])
def test_each_grant_opens_only_its_operations(world, project, make_token, client_for, grant, other):
    for granted in (grant, other):
        client = client_for(make_token([granted]))
        for method, path, body, needed, status in _endpoints(world, project):
            before = memory_state()
            response = _call(client, method, path, body)
            if needed == granted:
                assert response.status_code == status, (granted, method, path)
            else:
                assert response.status_code == 403, (granted, method, path)
                assert error_of(response)["details"] == {"required_grant": needed}
                assert memory_state() == before


def test_other_tenants_see_none_of_our_memory(world, make_token, client_for, other_tenant):
    theirs = ProjectFactory(tenant=other_tenant, slug="research")
    client = client_for(make_token(["*"], tenant=other_tenant))
    assert client.get(API).json() == {"results": [], "next": None}
    # Their own "research" project: same slug, their memory only.
    recall = client.post(
        f"{API}recall/", {"project": "research", "query": "staging"}, format="json"
    )
    assert recall.status_code == 200
    assert recall.json() == {"results": []}
    created = client.post(API, {"project": "research", "text": SECRET}, format="json")
    assert created.status_code == 201  # a new fact in their project, not a duplicate of ours
    assert created.json()["project"] == str(theirs.id)
    assert created.json()["id"] != str(world["fact"].id)
    # Our session is invisible to them: 404 as if it did not exist.
    response = client.post(
        f"{API}recall/",
        {
            "project": "research",
            "query": "staging",
            "scope": "session",
            "session": str(world["session"].id),
        },
        format="json",
    )
    assert response.status_code == 404
    assert error_of(response)["details"] == {"session": str(world["session"].id)}


def test_project_restricted_token_sees_only_its_project(world, make_token, client_for, project):
    client = client_for(make_token(["memory:read"], projects=[project]))
    ids = {e["id"] for e in client.get(API).json()["results"]}
    assert ids == {str(world[k].id) for k in ("fact", "agent_fact", "session_fact")}
    response = client.post(f"{API}recall/", {"project": "ops", "query": "staging"}, format="json")
    assert response.status_code == 404
    assert error_of(response)["details"] == {"project": "ops"}


class TestShapes:
    def test_create_then_duplicate(self, make_token, client_for, project):
        client = client_for(make_token(["memory:write"]))
        body = {"project": "research", "text": "  Dana prefers email.  ", "metadata": {"k": "v"}}
        created = client.post(API, body, format="json")
        assert created.status_code == 201
        data = created.json()
        assert set(data) == {
            "id",
            "project",
            "scope",
            "agent",
            "session",
            "text",
            "metadata",
            "trust",
            "fingerprint",
            "source_session",
            "source_seq",
            "created_by",
            "created_at",
            "updated_at",
        }
        assert (
            data["project"],
            data["scope"],
            data["agent"],
            data["session"],
            data["text"],
            data["metadata"],
            data["trust"],
            data["source_session"],
            data["source_seq"],
        ) == (
            str(project.id),
            "project",
            "",
            None,
            "Dana prefers email.",
            {"k": "v"},
            "trusted",
            None,
            None,
        )
        assert data["created_by"].startswith("token:")
        event = AuditEvent.objects.get(action="memory.create")
        assert (event.outcome, event.object_type, event.object_id, event.project_id) == (
            "success",
            "memory",
            data["id"],
            project.id,
        )
        again = client.post(
            API, {"project": str(project.id), "text": "dana PREFERS email."}, format="json"
        )
        assert again.status_code == 200
        assert again.json() == data
        assert MemoryEntry.objects.count() == 1

    def test_untrusted_and_agent_scope(self, make_token, client_for, project):
        client = client_for(make_token(["memory:write"]))
        response = client.post(
            API,
            {
                "project": "research",
                "text": "Relayed from a tool.",
                "scope": "agent",
                "agent": "w",
                "trust": "untrusted",
            },
            format="json",
        )
        assert response.status_code == 201
        assert (response.json()["scope"], response.json()["agent"], response.json()["trust"]) == (
            "agent",
            "w",
            "untrusted",
        )

    def test_recall_returns_ranked_hits(self, world, make_token, client_for, project):
        client = client_for(make_token(["memory:read"]))
        response = client.post(
            f"{API}recall/",
            {
                "project": "research",
                "query": "staging password",
                "k": 2,
                "scope": "agent",
                "agent": "w",
            },
            format="json",
        )
        assert response.status_code == 200
        results = response.json()["results"]
        assert [r["id"] for r in results] == [str(world["fact"].id), str(world["agent_fact"].id)]
        first = results[0]
        assert set(first) == {
            "id",
            "text",
            "score",
            "scope",
            "agent",
            "session",
            "trust",
            "metadata",
            "created_at",
        }
        assert (
            first["text"],
            first["scope"],
            first["agent"],
            first["trust"],
            first["metadata"],
        ) == (SECRET, "project", "", "trusted", {})
        assert first["score"] > results[1]["score"] > 0
        assert not AuditEvent.objects.filter(outcome="denied").exists()
        assert AuditEvent.objects.get(action="memory.recall").details["results"] == 2

    def test_list_filters_and_pages(self, world, make_token, client_for, project):
        client = client_for(make_token(["memory:read"]))

        def ids(query):
            response = client.get(f"{API}?{query}")
            assert response.status_code == 200, response.content
            return [e["id"] for e in response.json()["results"]]

        w = {k: str(v.id) for k, v in world.items()}
        assert ids("") == [w["elsewhere"], w["session_fact"], w["agent_fact"], w["fact"]]
        assert ids("project=research") == [w["session_fact"], w["agent_fact"], w["fact"]]
        assert ids(f"project={project.id}&scope=agent") == [w["agent_fact"]]
        assert ids("agent=w") == [w["agent_fact"]]
        assert ids(f"session={w['session']}") == [w["session_fact"]]
        assert ids("trust=trusted") == [w["fact"]]
        assert ids("q=PASSWORD") == [w["fact"]]
        page = client.get(f"{API}?limit=3").json()
        assert [e["id"] for e in page["results"]] == ids("")[:3]
        rest = client.get(page["next"]).json()
        assert ([e["id"] for e in rest["results"]], rest["next"]) == ([w["fact"]], None)

    @pytest.mark.parametrize(
        ("query", "field"),
        [
            ("scope=global", "scope"),
            ("trust=maybe", "trust"),
            ("session=nope", "session"),
            ("limit=0", "limit"),
            ("cursor=garbage", "cursor"),
        ],
    )
    def test_bad_list_filters_are_400(self, world, make_token, client_for, query, field):
        response = client_for(make_token(["memory:read"])).get(f"{API}?{query}")
        assert response.status_code == 400
        error = error_of(response)
        assert (error["code"], list(error["details"])) == ("invalid", [field])


class TestValidation:
    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"text": "x", "colour": "red"}, "colour"),
            ({"text": ""}, "text"),
            ({"text": "   "}, "text"),
            ({}, "text"),
            ({"text": "x", "scope": "global"}, "scope"),
            ({"text": "x", "trust": "maybe"}, "trust"),
            ({"text": "x", "scope": "agent"}, "agent"),
            ({"text": "x", "agent": "w"}, "agent"),
            ({"text": "x", "scope": "session"}, "session"),
            ({"text": "x", "session": "not-a-uuid"}, "session"),
            ({"text": "x", "metadata": [1]}, "metadata"),
            ({"text": "x", "metadata": {"k": "nul\u0000"}}, "metadata"),
            ({"text": "nul\u0000"}, "text"),
            ({"text": "x", "agent": "a" * 201, "scope": "agent"}, "agent"),
        ],
    )
    def test_create_400_names_the_field(self, make_token, client_for, project, body, field):
        client = client_for(make_token(["memory:write"]))
        response = client.post(API, {"project": "research", **body}, format="json")
        assert response.status_code == 400, response.content
        error = error_of(response)
        assert (error["code"], list(error["details"])) == ("invalid", [field])
        assert field in error["message"]
        assert memory_state() == (0, 0, [])

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"query": "x", "k": 0}, "k"),
            ({"query": "x", "k": 51}, "k"),
            ({"query": "x", "scope": "all"}, "scope"),
            ({"query": "x", "scope": "agent"}, "agent"),
            ({"query": "x", "agent": "w"}, "agent"),
            ({"query": "x", "scope": "session"}, "session"),
            ({"query": "x", "session": "00000000-0000-0000-0000-000000000000"}, "session"),
            ({"query": "x", "extra": 1}, "extra"),
            ({"k": 3}, "query"),
        ],
    )
    def test_recall_400_names_the_field(self, make_token, client_for, project, body, field):
        client = client_for(make_token(["memory:read"]))
        response = client.post(f"{API}recall/", {"project": "research", **body}, format="json")
        assert response.status_code == 400, response.content
        assert list(error_of(response)["details"]) == [field]

    def test_oversized_text_query_and_metadata_are_413(self, make_token, client_for, project):
        client = client_for(make_token(["memory:read", "memory:write"]))
        for path, body, field in [
            (API, {"text": "x" * 8001}, "text"),
            (API, {"text": "x", "metadata": {"blob": "y" * 17_000}}, "metadata"),
            (f"{API}recall/", {"query": "x" * 4001}, "query"),
        ]:
            response = client.post(path, {"project": "research", **body}, format="json")
            assert response.status_code == 413, (field, response.content[:200])
            error = error_of(response)
            assert (error["code"], list(error["details"])) == ("payload_too_large", [field])
        assert memory_state() == (0, 0, [])
        at_limit = client.post(API, {"project": "research", "text": "x" * 8000}, format="json")
        assert at_limit.status_code == 201

    def test_sessions_are_resolved_in_scope_and_project(
        self, world, make_token, client_for, other_project, make_session
    ):
        client = client_for(make_token(["memory:write"]))
        elsewhere = make_session([("user", "ops")], project=other_project)
        before = memory_state()
        response = client.post(
            API,
            {"project": "research", "text": "x", "scope": "session", "session": str(elsewhere.id)},
            format="json",
        )
        assert response.status_code == 400
        assert error_of(response)["details"] == {"session": ["belongs to another project"]}
        restricted = client_for(make_token(["memory:write"], projects=[world["session"].project]))
        response = restricted.post(
            API,
            {"project": "research", "text": "x", "scope": "session", "session": str(elsewhere.id)},
            format="json",
        )
        assert response.status_code == 404
        assert error_of(response)["code"] == "not_found"
        assert memory_state() == before

    def test_malformed_json_is_400(self, make_token, client_for):
        client = client_for(make_token(["memory:write"]))
        response = client.post(API, "{not json", content_type="application/json")
        assert response.status_code == 400
        assert error_of(response)["code"] == "malformed_request"
