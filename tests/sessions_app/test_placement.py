"""Placement is the operator's decision (issue 14, item 2): imports drop the file's placement and
policy, a run on an imported session works in no client-chosen directory, and ``session.to()``
keeps relative and default workspaces under the session's own tenant/project root."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from django.conf import settings

from openrath_project import flow
from openrath_project.errors import ValidationFailed
from runs_app import registration
from runs_app import services as run_services
from runs_app.registry import WorkflowRegistry
from sessions_app import services
from sessions_app.models import Session
from sessions_app.sandbox import LocalSandbox, sandbox_for
from sessions_app.tools import ToolPolicy
from sessions_app.transfer import export_graph
from tests.runs_app.conftest import drive
from tests.sessions_app import placement_workflows
from tests.sessions_app.conftest import msg

pytestmark = pytest.mark.django_db(transaction=True)


def _hostile_export(project, make_session, victim: Path) -> str:
    """An export whose session claims a placement on ``victim`` with a policy lifting caps."""
    session = make_session(["hello"])
    text = "".join(export_graph(session))
    records = [json.loads(line) for line in text.splitlines()]
    for record in records:
        if record["type"] == "session":
            record["placement"] = {
                "backend": "local",
                "spec": str(victim),
                "policy": {"max_output_bytes": 10**12, "command_timeout_seconds": 10**6},
            }
    return "".join(json.dumps(record) + "\n" for record in records)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Another tenant's workspace, say: a directory the importer must never reach."""
    path = tmp_path / "victim"
    path.mkdir()
    (path / "db.sqlite3").write_text("precious")
    return path


def _tree(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): p.read_text() for p in sorted(path.rglob("*")) if p.is_file()}


def test_api_import_drops_a_hostile_placement(
    project, make_session, victim, make_token, client_for
):
    content = _hostile_export(project, make_session, victim)
    client = client_for(make_token(["sessions:read", "sessions:write"]))

    response = client.post(
        "/api/v1/sessions/import/",
        {"project": "research", "files": [{"name": "evil.jsonl", "content": content}]},
        format="json",
    )

    assert response.status_code == 201, response.content
    (imported_id,) = [s["id"] for s in response.json()["sessions"]]
    imported = Session.objects.get(id=imported_id)
    assert imported.placement == {}
    assert imported.provenance["placement_dropped"] is True
    shown = client.get(f"/api/v1/sessions/{imported_id}/").json()
    assert shown["placement"] == {}
    assert _tree(victim) == {"db.sqlite3": "precious"}


def test_a_run_on_an_imported_session_does_not_touch_the_claimed_path(
    project, make_session, victim, monkeypatch, tmp_path
):
    fresh = WorkflowRegistry()
    fresh.discover([placement_workflows.__name__])
    monkeypatch.setattr(registration, "workflows", lambda: fresh)
    export = tmp_path / "evil.jsonl"
    export.write_text(_hostile_export(project, make_session, victim))
    (session,) = flow.Session.import_jsonl(export, project=project)

    run, _ = run_services.run_create(
        project=project, workflow=fresh.get("tools_on_session"), session=session._row
    )
    done = drive(fresh, run.id)

    assert done.status == "succeeded", done.error
    assert done.state["placement"] == {}
    assert done.state["errors"] == [
        "NoSandbox: session has no sandbox: call session.to('local', spec=...)",
        "NoSandbox: session has no sandbox: call session.to('local', spec=...)",
    ]
    assert Session.objects.get(id=done.session_id).placement == {}
    assert _tree(victim) == {"db.sqlite3": "precious"}


def test_relative_and_default_workspaces_are_per_tenant_and_project(
    project, foreign_project, other_project
):
    mine = flow.Session(services.session_create(project=project, chunks=[msg("a")]))
    theirs = flow.Session(services.session_create(project=foreign_project, chunks=[msg("b")]))
    sibling = flow.Session(services.session_create(project=other_project, chunks=[msg("c")]))
    workspaces = Path(settings.DATA_DIR) / "workspaces"

    for session in (mine, theirs, sibling):
        session.to("local", spec="notes")
    roots = {
        session.id: Path(sandbox_for(session.placement).root) for session in (mine, theirs, sibling)
    }

    for session, project_row in (
        (mine, project),
        (theirs, foreign_project),
        (sibling, other_project),
    ):
        expected = workspaces / str(project_row.tenant_id) / str(project_row.id) / "notes"
        assert session.placement == {"backend": "local", "spec": str(expected)}
        assert roots[session.id] == Path(os.path.realpath(expected))
    assert len(set(roots.values())) == 3

    mine.to("local")
    own = workspaces / str(project.tenant_id) / str(project.id) / str(mine.id)
    assert mine.placement == {"backend": "local", "spec": str(own)}
    assert Session.objects.get(id=mine.id).placement == mine.placement


@pytest.mark.parametrize(
    ("backend", "spec", "field"),
    [
        ("local", "../../other-tenant/ws", "spec"),
        ("local", "a/../../b", "spec"),
        ("docker", "/srv", "backend"),
        ("", "/srv", "backend"),
    ],
)
def test_bad_placements_are_refused_and_change_nothing(project, backend, spec, field):
    row = services.session_create(project=project, chunks=[msg("a")])
    session = flow.Session(row)
    session.to("local", spec="/tmp/kept")

    with pytest.raises(ValidationFailed) as caught:
        session.to(backend, spec=spec)

    assert list(caught.value.details) == [field]
    assert Session.objects.get(id=row.id).placement == {"backend": "local", "spec": "/tmp/kept"}


def test_the_policy_is_set_by_the_placing_code(project, tmp_path):
    session = flow.Session(services.session_create(project=project, chunks=[msg("a")]))
    policy = ToolPolicy(
        allowed_tools=frozenset({"read_file", "run_shell"}),
        command_allow=("ls",),
        max_calls=3,
        network=True,
        max_memory_bytes=512 * 1024**2,
    )

    session.to("local", spec=str(tmp_path / "ws"), policy=policy)

    stored = Session.objects.get(id=session.id).placement
    assert stored["policy"] == policy.as_json()
    sandbox = sandbox_for(stored)
    assert isinstance(sandbox, LocalSandbox)
    assert sandbox.policy == policy
    with pytest.raises(ValidationFailed) as caught:
        session.to("local", spec=str(tmp_path / "ws"), policy={"max_cals": 1})
    assert list(caught.value.details) == ["policy"]
    assert Session.objects.get(id=session.id).placement == stored


def test_forks_keep_the_operator_placement(project, tmp_path):
    session = flow.Session(services.session_create(project=project, chunks=[msg("a")]))
    session.to("local", spec=str(tmp_path / "ws"))
    child = session.fork()
    assert child.placement == {"backend": "local", "spec": str(tmp_path / "ws")}
