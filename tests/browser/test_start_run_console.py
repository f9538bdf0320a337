"""Starting a run from the session page in a real browser against a real server: while the
session's run waits for an approval, ``reject`` is refused on the page (409, nothing written)
and ``enqueue`` queues a run behind it, shown on the new run's page."""

from __future__ import annotations

import pytest
from django.test import override_settings

from openrath_project.tenancy.services import user_join_tenant
from runs_app.models import Run
from runs_app.services import run_create
from sessions_app import services as session_services
from sessions_app.chunk_rules import make_draft
from tests.browser.conftest import log_in, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PASSWORD = "a-long-browser-password"
DEFAULT_HASHER = "django.contrib.auth.hashers.PBKDF2PasswordHasher"
#: The server's embedded worker executes the runs: generous for a loaded machine.
WAIT_SECONDS = 120


def test_reject_then_enqueue_on_a_busy_session(page, server, acme, browser_registry):
    tenant, project = acme
    with override_settings(PASSWORD_HASHERS=[DEFAULT_HASHER]):
        user_join_tenant(
            tenant=tenant, username="operator-user", role="operator", password=PASSWORD
        )
    session = session_services.session_create(
        project=project, title="chat", chunks=[make_draft(role="user", content={"text": "hi"})]
    )
    first, _ = run_create(
        project=project,
        workflow=browser_registry.get("browser_approval"),
        state={},
        session=session,
    )
    wait_until(
        lambda: Run.objects.get(id=first.id).status == "waiting",
        timeout=WAIT_SECONDS,
        what="the first run to wait",
    )
    log_in(page, "operator-user", PASSWORD)

    page.goto(f"/console/sessions/{session.id}/")
    page.click("#start-run summary")
    page.select_option("#start-run select[name=workflow]", "browser_approval")
    page.select_option("#start-run select[name=input_policy]", "reject")
    page.click("#start-run button[type=submit]")
    alert = page.locator("#start-run .action-error")
    alert.wait_for()
    assert alert.get_attribute("data-code") == "session_busy"
    assert alert.get_attribute("data-status") == "409"
    assert Run.objects.count() == 1

    page.select_option("#start-run select[name=input_policy]", "enqueue")
    page.click("#start-run button[type=submit]")
    page.wait_for_selector(".alert.success")
    assert "starts when run" in (page.text_content(".alert.success") or "")
    second = Run.objects.exclude(id=first.id).get()
    assert page.url.endswith(f"/console/runs/{second.id}/")
    assert (second.input_policy, second.after_run_id) == ("enqueue", first.id)
