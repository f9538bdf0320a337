"""The run page stays true while it is open: a decision made elsewhere takes the decision form
away, and the status, the nav's approvals badge and the counts in the headings follow the run
without a reload; a reload without JavaScript shows the same."""

from __future__ import annotations

from typing import Any

import pytest

from openrath_project.tenancy.models import Project, Tenant
from openrath_project.tenancy.services import project_create, tenant_create
from runs_app.interrupts import interrupt_resolve
from runs_app.models import Checkpoint, Run, RunEvent
from tests.browser.conftest import TIMEOUT_MS, log_in
from tests.browser.test_console import (
    PASSWORD,
    mark_page,
    member,
    still_same_page,
    waiting_run,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: The machine running the tests may be loaded: a live update gets this long.
LIVE_WAIT_MS = 30_000


@pytest.fixture
def shop(transactional_db: Any) -> tuple[Tenant, Project]:
    tenant = tenant_create(slug="shop")
    return tenant, project_create(tenant=tenant, slug="store")


def heading_counts(page: Any) -> dict[str, Any]:
    return {
        "events_heading": page.inner_text("#events-count"),
        "events_shown": page.locator("#events li[data-seq]").count(),
        "checkpoints_heading": page.inner_text("#checkpoints-count"),
        "checkpoint_rows": page.locator("#checkpoints tbody tr").count(),
    }


def expected_headings(run: Run) -> tuple[str, str]:
    events = RunEvent.objects.filter(run=run).count()
    checkpoints = Checkpoint.objects.filter(run=run).count()
    return f"({events} events)", f"({checkpoints})"


def test_a_decision_made_elsewhere_updates_the_open_run_page(
    browser_context, page, shop, browser_registry, playwright_browser, server
):
    tenant, project = shop
    username = member(tenant, "operator")
    run, interrupt = waiting_run(browser_registry, project, "browser_approval")
    log_in(page, username, PASSWORD)
    page.goto(f"/console/runs/{run.id}/")
    page.wait_for_function(
        "() => window.openrathLive && window.openrathLive.transport === 'websocket'"
    )

    # Waiting: the decision form, the badge and the counts as the server rendered them.
    card = page.locator(f"#run-approvals #interrupt-{interrupt.id}")
    assert card.locator("button[value=approve]").is_enabled()
    assert page.inner_text("#nav-pending") == "1"
    counts = heading_counts(page)
    assert counts["events_heading"] == f"({counts['events_shown']} events)"
    assert counts["checkpoints_heading"] == f"({counts['checkpoint_rows']})"
    mark_page(page)
    page.evaluate(
        """() => {
            window.__formDisabledSeen = false;
            new MutationObserver(() => {
                const button = document.querySelector('#run-approvals button[value=approve]');
                if (button && button.disabled) { window.__formDisabledSeen = true; }
            }).observe(document.body, {subtree: true, childList: true, attributes: true});
        }"""
    )

    # Another client decides (the service the API calls); the run goes on to the end.
    interrupt_resolve(
        interrupt=interrupt, decision="approve", response={"note": "from the API"}, actor="user:x"
    )
    page.wait_for_function(
        "() => document.getElementById('run-status').dataset.status === 'succeeded'",
        timeout=LIVE_WAIT_MS,
    )
    # No decision form is left to click, and none was clickable once the decision was made.
    page.wait_for_function(
        "() => document.querySelectorAll('#run-approvals form.resolve').length === 0",
        timeout=LIVE_WAIT_MS,
    )
    assert page.evaluate("window.__formDisabledSeen") is True
    assert "Waiting for a decision" not in page.inner_text("main")
    assert page.locator("#nav-pending").count() == 0
    finished = Run.objects.get(id=run.id)
    assert finished.status == "succeeded"
    events_heading, checkpoints_heading = expected_headings(finished)
    # The last re-read of the page may trail the last event by a moment.
    page.wait_for_function(
        "([events, checkpoints]) => "
        "document.getElementById('events-count').textContent === events && "
        "document.getElementById('checkpoints-count').textContent === checkpoints",
        arg=[events_heading, checkpoints_heading],
        timeout=LIVE_WAIT_MS,
    )
    counts = heading_counts(page)
    assert counts["events_shown"] == finished.event_seq
    assert counts["checkpoint_rows"] == finished.checkpoint_seq
    assert page.locator("#run-finished").inner_text() != "—"
    assert '"note": "from the API"' in page.inner_text("#run-data")
    assert still_same_page(page)

    # A reload without JavaScript: the server-rendered page says the same.
    static = playwright_browser.new_context(base_url=server.url, java_script_enabled=False)
    static.set_default_timeout(TIMEOUT_MS)
    try:
        plain = static.new_page()
        log_in(plain, username, PASSWORD)
        plain.goto(f"/console/runs/{run.id}/")
        assert plain.inner_text("#run-status") == "succeeded"
        assert plain.locator("#run-approvals form.resolve").count() == 0
        assert plain.locator("#nav-pending").count() == 0
        assert plain.inner_text("#events-count") == events_heading
        assert plain.inner_text("#checkpoints-count") == checkpoints_heading
        assert plain.locator("#events li[data-seq]").count() == finished.event_seq
    finally:
        static.close()


def test_after_a_reject_elsewhere_the_badge_counts_what_still_waits(
    browser_context, page, shop, browser_registry
):
    """The nav badge is the tenant's queue: another run still waiting keeps it at one."""
    tenant, project = shop
    username = member(tenant, "operator")
    first, interrupt = waiting_run(browser_registry, project, "browser_approval")
    log_in(page, username, PASSWORD)
    page.goto(f"/console/runs/{first.id}/")
    page.wait_for_function(
        "() => window.openrathLive && window.openrathLive.transport === 'websocket'"
    )
    mark_page(page)
    second, _ = waiting_run(browser_registry, project, "browser_approval")
    interrupt_resolve(interrupt=interrupt, decision="reject", reason="not now", actor="user:x")
    page.wait_for_function(
        "() => document.querySelectorAll('#run-approvals form.resolve').length === 0",
        timeout=LIVE_WAIT_MS,
    )
    page.wait_for_function(
        "() => (document.getElementById('nav-pending') || {}).textContent === '1'",
        timeout=LIVE_WAIT_MS,
    )
    assert still_same_page(page)
    assert Run.objects.get(id=second.id).status == "waiting"
