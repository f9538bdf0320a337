"""Every kind of page works under the Content-Security-Policy in a real browser: the console
(live run and session pages over the WebSocket, the lineage graph), the admin and the Swagger UI
API docs, with no violation reported (the ``browser_context`` fixture also fails any test of the
suite on a violation)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from tests.browser.conftest import csp_violations, log_in, require_console_assets
from tests.browser.test_console import PASSWORD, _lineage, member, waiting_run

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def visit(page: Any, path: str) -> Any:
    response = page.goto(path)
    assert response is not None, path
    assert response.status == 200, path
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy, policy
    assert "unsafe" not in policy, policy
    return response


def test_console_admin_and_docs_pages_run_under_the_policy(
    browser_context, page, acme, browser_registry
):
    require_console_assets()
    tenant, project = acme
    username = member(tenant, "admin")
    get_user_model().objects.filter(username=username).update(is_staff=True, is_superuser=True)
    run, _ = waiting_run(browser_registry, project, "browser_approval")
    root = _lineage(project)[0]
    log_in(page, username, PASSWORD)
    seen: dict[str, list[str]] = {}

    for path in ("/console/", "/console/approvals/", "/console/effects/", "/console/runs/"):
        visit(page, path)
        seen[path] = csp_violations(page)

    # Live pages: their script opens the WebSocket back to the same origin (connect-src).
    visit(page, f"/console/runs/{run.id}/")
    page.wait_for_function(
        "() => window.openrathLive && window.openrathLive.transport === 'websocket'"
    )
    seen["run"] = csp_violations(page)
    visit(page, f"/console/sessions/{run.session_id}/")
    page.wait_for_function(
        "() => window.openrathLive && window.openrathLive.transport === 'websocket'"
    )
    seen["session"] = csp_violations(page)

    # The lineage graph: Cytoscape.js draws on a canvas and styles through the CSSOM.
    visit(page, f"/console/sessions/{root.id}/lineage/")
    page.wait_for_function(
        "() => window.openrathLineage && window.openrathLineage.cy.nodes().length === 5"
    )
    seen["lineage"] = csp_violations(page)

    # The admin: its pages and its change form's scripts.
    for path in (
        "/admin/",
        "/admin/tenancy/project/",
        f"/admin/tenancy/project/{project.id}/change/",
    ):
        visit(page, path)
        assert page.locator("#content").count() == 1, path
        seen[path] = csp_violations(page)
    assert page.locator("input[name=name]").input_value() == project.name

    # The API docs: Swagger UI renders the schema, its init script loaded from ?script=.
    visit(page, "/api/v1/docs/")
    page.wait_for_selector(".swagger-ui .info .title")
    assert "OpenRath on Django API" in page.inner_text(".swagger-ui .info .title")
    page.wait_for_function("() => document.querySelectorAll('.opblock').length >= 30")
    seen["docs"] = csp_violations(page)

    assert {where: found for where, found in seen.items() if found} == {}
