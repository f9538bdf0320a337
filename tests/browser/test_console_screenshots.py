"""Every console page at 1400x900 in Chromium, as an operator sees it (issue 19, "Proof").

Each page is opened on real data (a finished fan-out run, a run waiting for approval, a session
with every chunk kind, its lineage, a branch compare, the effects, the approvals queue), must
load without a script error or a Content-Security-Policy violation, with an accessible name on
every control, and is photographed. The
pictures go to a temporary directory; with ``OPENRATH_CONSOLE_SCREENSHOTS=1`` they replace the
ones in ``docs/console/`` that ``docs/console.md`` shows.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from effects_app.models import EffectRecord
from openrath_project.tenancy.models import Project, Tenant
from openrath_project.tenancy.services import project_create, tenant_create
from runs_app.interrupts import interrupt_resolve
from runs_app.models import Run
from tests.browser.conftest import csp_violations, log_in, require_console_assets
from tests.browser.test_console import PASSWORD, member, wait_until, waiting_run
from tests.browser.test_console_build import UNLABELLED
from tests.browser.test_console_graphs import finished_fanout
from tests.console.test_session_kinds import rich_session
from tests.support import REPO

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

DOCS = REPO / "docs" / "console"
VIEWPORT = {"width": 1400, "height": 900}


@pytest.fixture
def acme(transactional_db: Any) -> tuple[Tenant, Project]:
    tenant = tenant_create(slug="acme")
    return tenant, project_create(tenant=tenant, slug="research")


def shots_dir(tmp_path: Path) -> Path:
    if os.environ.get("OPENRATH_CONSOLE_SCREENSHOTS_DIR"):
        return Path(os.environ["OPENRATH_CONSOLE_SCREENSHOTS_DIR"])
    if os.environ.get("OPENRATH_CONSOLE_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        return DOCS
    return tmp_path


def test_every_console_page_renders_cleanly_at_1400x900(
    browser_context, acme, browser_registry, tmp_path
):
    require_console_assets()
    tenant, project = acme
    fanout = finished_fanout(browser_registry, project)
    waiting, _interrupt = waiting_run(browser_registry, project, "browser_approval")
    applied, approval = waiting_run(
        browser_registry, project, "browser_publish", {"title": "Q3 results"}
    )
    interrupt_resolve(
        interrupt=approval,
        decision="approve",
        request_digest=approval.request_digest,
        actor="user:operator-user",
    )
    waiting_run(browser_registry, project, "browser_publish", {"title": "Q4 outlook"})
    wait_until(
        lambda: Run.objects.get(id=applied.id).status == "succeeded",
        timeout=60,
        what="the publishing run to succeed",
    )
    session = rich_session(project)
    branches = list(Run.objects.filter(parent=fanout).order_by("branch"))
    username = member(tenant, "operator")
    page = browser_context.new_page()
    page.set_viewport_size(VIEWPORT)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    log_in(page, username, PASSWORD)
    out = shots_dir(tmp_path)
    effect = EffectRecord.objects.filter(run=applied).first()
    assert effect is not None

    pages = {
        "overview": ("/console/", "h1"),
        "approvals": ("/console/approvals/", ".approval"),
        "run-waiting": (f"/console/runs/{waiting.id}/", "#plan-graph"),
        "run-fanout": (f"/console/runs/{fanout.id}/", "#waterfall"),
        "effects": ("/console/effects/", ".effect"),
        "runs": ("/console/runs/", "table"),
        "sessions": ("/console/sessions/", "table"),
        "session": (f"/console/sessions/{session.id}/", "#chunks"),
        "lineage": (f"/console/sessions/{fanout.session_id}/lineage/", "#lineage canvas"),
        "compare": (
            f"/console/sessions/compare/?a={branches[0].session_id}&b={branches[1].session_id}",
            "#compare",
        ),
    }
    for name, (url, ready) in pages.items():
        page.goto(url)
        page.locator(ready).first.wait_for(state="visible")
        if name == "lineage":
            page.wait_for_function(
                "() => window.openrathLineage && window.openrathLineage.cy.nodes().length > 3"
            )
        # OPENRATH_CONSOLE_SCREENSHOTS_FULL=1: the whole page (to look at), not the viewport.
        full = os.environ.get("OPENRATH_CONSOLE_SCREENSHOTS_FULL") == "1"
        page.screenshot(path=str(out / f"{name}.png"), full_page=full)
        if name == "run-fanout":
            # A branch step, clicked: its events in the branch run, checkpoint, delta, chunks.
            page.locator('#plan-graph g.node[data-node="market"] a').click()
            page.locator('.step-events[data-step="market"]').wait_for(state="visible")
            page.locator('.step-events[data-step="market"]').scroll_into_view_if_needed()
            page.screenshot(path=str(out / "run-step.png"), full_page=full)
        assert csp_violations(page) == [], name
        assert page.evaluate(UNLABELLED) == [], name  # every control has an accessible name
    assert errors == []
    assert {p.stem for p in out.glob("*.png")} >= {*pages, "run-step"}
