"""Issue 18 item 13: the console's session page names the workflow that wrote the session, its
lineage edges and each chunk."""

from __future__ import annotations

import pytest

from sessions_app import context, services
from sessions_app.chunk_rules import make_draft

pytestmark = pytest.mark.django_db


def test_the_session_page_names_the_workflow(login, project):
    root = services.session_create(
        project=project,
        title="root",
        chunks=[make_draft(role="user", content={"text": "hello"})],
        metadata={},
        created_by="test",
    )
    with context.writing(workflow="outer/inner"):
        child = services.session_fork(session=root, title="branch", created_by="test")
        services.chunks_append(
            session=child, drafts=[make_draft(role="assistant", content={"text": "by the flow"})]
        )
    viewer = login("viewer")
    page = viewer.get(f"/console/sessions/{child.id}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<dt>workflow</dt><dd>outer/inner</dd>" in html
    assert 'by <span class="workflow">outer/inner</span>' in html  # the edge to its parent
    marker = '<span class="workflow" title="the workflow that wrote it">outer/inner</span>'
    assert html.count(marker) == 1  # the appended chunk; the root's chunk has none
    listing = viewer.get("/console/sessions/").content.decode()
    assert "<td>outer/inner</td>" in listing
