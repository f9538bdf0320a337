"""Time travel in a real browser: an operator clicks "fork from here" on a finished run's
checkpoint, lands on the new run (executed by the server's workers), and opens the branch
compare page from it. With ``OPENRATH_CONSOLE_SCREENSHOTS=1`` the compare page's picture
replaces ``docs/console/run-compare.png``."""

from __future__ import annotations

import re
from typing import Any

import pytest

from openrath_project.tenancy.models import Project, Tenant
from openrath_project.tenancy.services import project_create, tenant_create
from runs_app.interrupts import interrupt_resolve
from runs_app.models import Run, RunFork
from tests.browser.conftest import csp_violations, log_in
from tests.browser.test_console import PASSWORD, member, wait_until, waiting_run
from tests.browser.test_console_build import UNLABELLED
from tests.browser.test_console_screenshots import VIEWPORT, shots_dir

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def acme(transactional_db: Any) -> tuple[Tenant, Project]:
    tenant = tenant_create(slug="acme")
    return tenant, project_create(tenant=tenant, slug="web")


def test_fork_from_here_and_compare(browser_context, page, acme, browser_registry, tmp_path):
    tenant, project = acme
    username = member(tenant, "operator")
    run, interrupt = waiting_run(
        browser_registry, project, "browser_approval", {"deploy_seconds": 0}
    )
    interrupt_resolve(
        interrupt=interrupt,
        decision="approve",
        response={"note": "ship it"},
        request_digest=interrupt.request_digest,
        actor="user:operator-user",
    )
    wait_until(
        lambda: Run.objects.get(id=run.id).status == "succeeded", timeout=120, what="the run"
    )
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_viewport_size(VIEWPORT)
    log_in(page, username, PASSWORD)

    # Checkpoint 2 (after "deploy", next "announce"): fork from here with a new note.
    page.goto(f"/console/runs/{run.id}/")
    row = page.locator('#checkpoints tr[data-seq="2"]')
    row.locator("details.fork summary").click()
    row.locator("textarea[name=state_patch]").fill('{"note": "forked in the browser"}')
    row.locator("input[name=reason]").fill("announce it differently")
    row.get_by_role("button", name="Fork a new run from checkpoint 2").click()
    page.wait_for_url(re.compile(r".*/console/runs/(?!" + str(run.id) + r")[0-9a-f-]{36}/$"))

    fork = RunFork.objects.get(parent=run)
    assert page.url.endswith(f"/console/runs/{fork.child_id}/")
    assert (fork.checkpoint_seq, fork.reason, fork.state_patch) == (
        2,
        "announce it differently",
        {"note": "forked in the browser"},
    )
    forked_from = page.locator("#forked-from").inner_text()
    assert "at checkpoint 2 by user:operator-user: announce it differently" in forked_from
    # The server's workers run the fork's remaining step; the page follows it live.
    page.locator("#run-status").filter(has_text="succeeded").wait_for()

    page.locator("#compare-parent").click()
    page.locator("#run-compare").wait_for(state="visible")
    assert page.inner_text("#compare-checkpoint") == "2"
    side_a = page.locator('.compare-side[data-side="a"]').inner_text()
    side_b = page.locator('.compare-side[data-side="b"]').inner_text()
    assert "Deployed 2.0: ship it" in side_a
    assert "Deployed 2.0: forked in the browser" in side_b
    assert "forked in the browser" in page.locator("#state-diff").inner_text()
    page.screenshot(path=str(shots_dir(tmp_path) / "run-compare.png"))
    assert csp_violations(page) == []
    assert page.evaluate(UNLABELLED) == []

    # The lineage graph marks the fork's working session as a run fork.
    child = Run.objects.get(id=fork.child_id)
    page.goto(f"/console/sessions/{child.session_id}/lineage/")
    page.wait_for_function(
        "() => window.openrathLineage && window.openrathLineage.cy.nodes().length > 1"
    )
    node = page.evaluate(
        "(id) => { const n = window.openrathLineage.cy.getElementById(id);"
        " return {label: n.data('label'), fork: n.hasClass('run-fork')}; }",
        str(child.session_id),
    )
    assert node["fork"] is True
    assert node["label"].endswith("run fork @2 · " + str(child.session_len))
    assert csp_violations(page) == []
    assert errors == []
