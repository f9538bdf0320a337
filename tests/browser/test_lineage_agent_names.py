"""Agent names are data: the lineage page keys its colours by them in a ``Map``, so names that
are also properties of every JavaScript object (``__proto__``, ``constructor``) render like any
other (issue 14, item 12: a plain object as the map broke the page)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import override_settings

from openrath_project.tenancy.services import project_create, tenant_create, user_join_tenant
from sessions_app import services as session_services
from sessions_app.chunk_rules import make_draft
from sessions_app.models import Session
from tests.browser.conftest import log_in, require_console_assets

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PASSWORD = "a-long-browser-password"
DEFAULT_HASHER = "django.contrib.auth.hashers.PBKDF2PasswordHasher"
AGENTS = ["__proto__", "constructor", "hasOwnProperty", "toString", "researcher"]


def test_agents_named_like_object_properties_render(browser_context, page, transactional_db):
    require_console_assets()
    tenant = tenant_create(slug="acme")
    project = project_create(tenant=tenant, slug="web")
    with override_settings(PASSWORD_HASHERS=[DEFAULT_HASHER]):
        user_join_tenant(tenant=tenant, username="viewer-user", role="viewer", password=PASSWORD)
    root = session_services.session_from_user_message(project=project, text="start")
    forks = [session_services.session_fork(session=root, title=name) for name in AGENTS]
    for fork, name in zip(forks, AGENTS, strict=True):
        Session.objects.filter(id=fork.id).update(agent=name)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    log_in(page, "viewer-user", PASSWORD)
    page.goto(f"/console/sessions/{root.id}/lineage/")
    page.wait_for_function("window.openrathLineage && window.openrathLineage.cy.nodes().length > 0")

    nodes: list[dict[str, Any]] = page.evaluate(
        """() => window.openrathLineage.cy.nodes().map(node => ({
            id: node.id(), agent: node.data('agent'), color: node.data('color')}))"""
    )
    assert sorted(node["agent"] for node in nodes) == sorted(["(no agent)", *AGENTS])
    colors = {node["agent"]: node["color"] for node in nodes}
    assert all(isinstance(c, str) and re.fullmatch(r"#[0-9a-f]{6}", c) for c in colors.values())
    assert len(set(colors.values())) == len(colors)  # one colour per agent
    legend = page.locator("#legend-agents .legend-agent").evaluate_all(
        "items => items.map(item => [item.dataset.agent, item.textContent])"
    )
    assert legend == [[name, name] for name in sorted(["(no agent)", *AGENTS])]
    swatches = page.locator("#legend-agents .legend-agent .swatch").evaluate_all(
        "items => items.map(item => item.style.background)"
    )
    assert all(swatch.startswith("rgb(") for swatch in swatches), swatches
    assert errors == []


def test_chunk_agents_named_like_object_properties_colour_their_sessions(
    browser_context, page, transactional_db
):
    """The colour comes from the agents of a session's own chunks (issue 19): ``__proto__``
    writing most of a session's chunks makes it that session's agent, named in its label."""
    require_console_assets()
    tenant = tenant_create(slug="acme")
    project = project_create(tenant=tenant, slug="web")
    with override_settings(PASSWORD_HASHERS=[DEFAULT_HASHER]):
        user_join_tenant(tenant=tenant, username="viewer-user", role="viewer", password=PASSWORD)
    root = session_services.session_from_user_message(project=project, text="start")
    fork = session_services.session_fork(session=root, title="proto branch")
    session_services.chunks_append(
        session=fork,
        drafts=[
            make_draft(role="assistant", content={"text": text}, agent=agent)
            for text, agent in (("a", "__proto__"), ("b", "__proto__"), ("c", "constructor"))
        ],
    )
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    log_in(page, "viewer-user", PASSWORD)
    page.goto(f"/console/sessions/{root.id}/lineage/")
    page.wait_for_function("() => window.openrathLineage.cy.nodes().length === 2")
    node = page.evaluate(
        f"""() => {{ const n = window.openrathLineage.cy.getElementById('{fork.id}');
            return {{agent: n.data('agent'), agents: n.data('agents'),
                     label: n.data('label')}}; }}"""
    )
    assert node["agent"] == "__proto__"
    assert node["agents"] == ["__proto__", "constructor"]
    assert "__proto__ +1" in node["label"]
    legend = page.locator("#legend-agents .legend-agent").evaluate_all(
        "items => items.map(item => item.dataset.agent)"
    )
    assert legend == ["(no agent)", "__proto__", "constructor"]
    assert errors == []
