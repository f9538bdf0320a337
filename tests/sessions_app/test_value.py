"""``flow.Session``: the user-facing value, backed by the database."""

from __future__ import annotations

import subprocess
import sys

import pytest

from openrath_project import flow
from openrath_project.errors import NotFound, ValidationFailed
from sessions_app import context
from sessions_app.models import Session as Row
from tests.support import REPO

pytestmark = pytest.mark.django_db


def test_import_needs_no_configured_django():
    code = "from openrath_project import flow; print(sorted(flow.__all__)[:1])"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_the_session_value(project):
    session = flow.Session.from_user_message("Compare two databases", project="acme/research")
    assert session.length == 1
    assert session.chunks[0].text == "Compare two databases"
    session.append(
        "Postgres is a safe default.",
        role="assistant",
        agent="analyst",
        usage={"prompt_tokens": 5, "completion_tokens": 6},
    )
    session.append(
        role="assistant",
        kind="tool_call",
        content={"id": "t1", "name": "bench", "arguments": {"n": 3}},
    )
    assert [c.role for c in session.chunks] == ["user", "assistant", "assistant"]
    assert session.chunks[-1].tool_call_id == "t1"
    assert session.chunks[1:2][0].agent == "analyst"
    assert session.usage["total_tokens"] == 11
    assert session.text() == "Postgres is a safe default."
    branch = session.fork(title="what about sqlite")
    branch.append("SQLite for one machine.", role="assistant")
    assert len(session) == 3
    assert len(branch) == 4
    merged = flow.Session.merge(session, branch)
    assert [c.text for c in merged.chunks][-1] == "SQLite for one machine."
    lineage = merged.lineage("ancestors")
    assert {n.id for n in lineage.nodes} == {session.id, branch.id, merged.id}
    placed = branch.to("local", spec="/tmp/ws")
    assert placed is branch
    assert Row.objects.get(id=branch.id).placement == {"backend": "local", "spec": "/tmp/ws"}
    detached = branch.detach()
    assert detached.op == "detach"
    assert len(detached) == 4
    assert flow.Session.load(str(merged.id)) == merged
    with pytest.raises(IndexError):
        session.chunks[10]


def test_project_resolution(project, other_project, other_tenant):
    from tests.factories import ProjectFactory

    assert flow.Session.from_user_message("x", project=project).project == project
    assert (
        flow.Session.from_user_message("x", project=str(other_project.id)).project == other_project
    )
    assert flow.Session.from_user_message("x", project="ops").project == other_project
    ProjectFactory(tenant=other_tenant, slug="ops")
    with pytest.raises(ValidationFailed, match="several tenants"):
        flow.Session.from_user_message("x", project="ops")
    with pytest.raises(NotFound):
        flow.Session.from_user_message("x", project="acme/nope")
    with pytest.raises(ValidationFailed, match="say which project"):
        flow.Session.from_user_message("x")
    with context.writing(project=project):
        assert flow.Session.from_user_message("x").project == project
