"""Artifacts are reachable only through references the product itself recorded in the project
(issue 14, item 5). A token limited to project alpha that learnt the digest of one of beta's
artifacts cannot read its bytes: not by naming it in a run's state, not from a step that builds
a reference out of its input, not by appending an artifact chunk, not through an import."""

from __future__ import annotations

import json
from typing import Any

import pytest

from openrath_project import flow
from openrath_project.artifacts import artifact_put
from openrath_project.tenancy.models import Project
from runs_app import registration
from runs_app.models import Run
from runs_app.registry import WorkflowRegistry
from runs_app.services import run_create
from runs_app.state_delta import StateInvalid, check_json_state
from sessions_app import services as session_services
from sessions_app.chunk_rules import make_draft
from sessions_app.formats import EXPORT_FORMAT, EXPORT_VERSION, dumps
from sessions_app.models import Chunk, Session
from tests.factories import ProjectFactory
from tests.runs_app.conftest import drive
from tests.support import error_of

pytestmark = pytest.mark.django_db(transaction=True)

BETA_SECRET = b'"beta-only: the quarterly numbers"'


class ForgedReference(flow.Workflow):
    """A workflow that builds state from its input: here, a reference from plain fields."""

    name = "forged_reference"

    @flow.step(entry=True, effects="none")
    def build(self, state, ctx):
        ref = {"digest": state["digest"], "size": state["size"], "media_type": "application/json"}
        return {"copied": {"$artifact": ref}}


class Plain(flow.Workflow):
    name = "plain"

    @flow.step(entry=True, effects="none")
    def only(self, state, ctx):
        return {**state, "done": True}


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> WorkflowRegistry:
    fresh = WorkflowRegistry()
    fresh.discover([__name__])
    monkeypatch.setattr(registration, "workflows", lambda: fresh)
    return fresh


@pytest.fixture(autouse=True)
def _local_artifacts(local_storage: Any) -> None:
    """Artifacts in a temporary directory (the embedded profile's storage)."""


@pytest.fixture
def beta(tenant) -> dict[str, Any]:
    """Project beta of the same tenant, with an artifact the product recorded in a session."""
    project = ProjectFactory(tenant=tenant, slug="beta")
    ref = artifact_put(tenant_id=tenant.id, data=BETA_SECRET, media_type="application/json")
    session = session_services.session_create(
        project=project,
        title="beta's report",
        chunks=[
            make_draft(
                role="tool",
                kind="artifact",
                content={"digest": ref.digest, "media_type": "application/json"},
            )
        ],
    )
    return {"project": project, "digest": ref.digest, "size": ref.size, "session": session}


@pytest.fixture
def alpha_client(project: Project, make_token, client_for):
    """A token limited to project alpha (the ``project`` fixture), with every grant."""
    return client_for(make_token(["*"], projects=[project]))


def _forged(beta: dict[str, Any]) -> dict[str, Any]:
    return {
        "$artifact": {
            "digest": beta["digest"],
            "size": beta["size"],
            "media_type": "application/json",
        }
    }


def test_the_product_s_own_reference_still_serves_the_bytes(beta, make_token, client_for):
    reader = client_for(make_token(["sessions:read"], projects=[beta["project"]]))
    response = reader.get(f"/api/v1/sessions/{beta['session'].id}/artifacts/{beta['digest']}/")
    assert response.status_code == 200, response.content
    assert response.content == BETA_SECRET


def test_a_client_state_may_not_name_an_artifact(registry, project, beta, alpha_client):
    runs_before = Run.objects.count()
    response = alpha_client.post(
        "/api/v1/runs/",
        {"workflow": "plain", "project": project.slug, "state": {"nested": [_forged(beta)]}},
        format="json",
    )
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert (error["code"], list(error["details"])) == ("invalid", ["state"])
    assert error["details"]["state"] == [
        '"$artifact" is reserved for the references the product writes '
        "(at state.nested[0].$artifact)"
    ]
    assert Run.objects.count() == runs_before
    # A run of alpha's own cannot be pointed at beta's digest either.
    own = alpha_client.post(
        "/api/v1/runs/", {"workflow": "plain", "project": project.slug}, format="json"
    )
    assert own.status_code == 201, own.content
    read = alpha_client.get(f"/api/v1/runs/{own.json()['id']}/artifacts/{beta['digest']}/")
    assert read.status_code == 404
    assert BETA_SECRET not in read.content


def test_a_step_that_builds_a_reference_fails_and_reads_nothing(
    registry, project, beta, alpha_client
):
    run, _ = run_create(
        project=project,
        workflow=registry.get("forged_reference"),
        state={"digest": beta["digest"], "size": beta["size"]},
    )
    done = drive(registry, run.id)
    assert done.status == "failed"
    assert '"$artifact" is reserved' in done.error["message"]
    assert done.output is None
    read = alpha_client.get(f"/api/v1/runs/{run.id}/artifacts/{beta['digest']}/")
    assert read.status_code == 404
    assert BETA_SECRET not in read.content


def test_check_json_state_reserves_the_key_at_any_depth_for_steps_too():
    with pytest.raises(StateInvalid) as caught:
        check_json_state({"a": {"b": [{"$artifact": {}}]}}, where="the state step 'x' returned")
    # A TypeError as well: the executor fails the step (not retried as a storage outage).
    assert isinstance(caught.value, TypeError)
    assert str(caught.value) == (
        "the state step 'x' returned: \"$artifact\" is reserved for the references the product "
        "writes (at state.a.b[0].$artifact)"
    )
    assert check_json_state({"artifact": {"digest": "x"}}) == {"artifact": {"digest": "x"}}


@pytest.mark.parametrize(
    ("chunk", "field"),
    [
        ({"role": "tool", "kind": "artifact", "content": {"digest": "<beta>"}}, "kind"),
        (
            {
                "role": "tool",
                "kind": "tool_result",
                "content": {
                    "tool_call_id": "c1",
                    "name": "cat",
                    "output": "…",
                    "artifact": {"digest": "<beta>", "media_type": "application/json"},
                },
            },
            "content.artifact",
        ),
    ],
)
def test_a_client_may_not_append_an_artifact_reference(project, beta, alpha_client, chunk, field):
    own = alpha_client.post(
        "/api/v1/sessions/", {"project": project.slug, "user_message": "hi"}, format="json"
    )
    session_id = own.json()["id"]
    body = json.loads(json.dumps(chunk).replace("<beta>", beta["digest"]))
    chunks_before = Chunk.objects.count()

    response = alpha_client.post(
        f"/api/v1/sessions/{session_id}/chunks/", {"chunks": [body]}, format="json"
    )
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert (error["code"], list(error["details"])) == ("invalid", ["chunks"])
    assert list(error["details"]["chunks"]["0"]) == [field]
    created = alpha_client.post(
        "/api/v1/sessions/", {"project": project.slug, "chunks": [body]}, format="json"
    )
    assert created.status_code == 400, created.content
    assert list(error_of(created)["details"]["chunks"]["0"]) == [field]
    assert Chunk.objects.count() == chunks_before
    assert Session.objects.filter(project=project).count() == 1

    read = alpha_client.get(f"/api/v1/sessions/{session_id}/artifacts/{beta['digest']}/")
    assert read.status_code == 404
    assert BETA_SECRET not in read.content


def test_an_imported_reference_is_history_and_reads_nothing(project, beta, alpha_client):
    records = [
        {"type": "header", "format": EXPORT_FORMAT, "version": EXPORT_VERSION},
        {"type": "session", "id": "s1", "op": "create", "own_len": 1},
        {
            "type": "chunk",
            "session": "s1",
            "seq": 0,
            "role": "tool",
            "kind": "artifact",
            "content": {"digest": beta["digest"], "media_type": "application/json"},
        },
        {"type": "trailer", "sessions": 1, "edges": 0, "chunks": 1},
    ]
    response = alpha_client.post(
        "/api/v1/sessions/import/",
        {
            "project": project.slug,
            "files": [{"name": "x.jsonl", "content": "".join(dumps(r) for r in records)}],
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    imported = response.json()["mapping"]["s1"]
    # The chunk is kept as it was recorded (an import is a historical record) ...
    assert Chunk.objects.get(session_id=imported).content["digest"] == beta["digest"]
    # ... but it is not the product's reference in alpha: beta's bytes stay out of reach,
    # also through a fork of the imported session.
    read = alpha_client.get(f"/api/v1/sessions/{imported}/artifacts/{beta['digest']}/")
    assert read.status_code == 404
    assert BETA_SECRET not in read.content
    fork = alpha_client.post(f"/api/v1/sessions/{imported}/fork/", {}, format="json")
    assert fork.status_code == 201, fork.content
    read = alpha_client.get(f"/api/v1/sessions/{fork.json()['id']}/artifacts/{beta['digest']}/")
    assert read.status_code == 404
