"""The retention console page in a real browser against a real server: an admin creates a
policy for a project with an old finished run, reads the dry run (nothing changes), applies
it, and sees the pass in the log."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from openrath_project.tenancy.services import user_join_tenant
from retention_app.models import RetentionPass, RetentionPolicy
from runs_app.models import Run
from tests.browser.conftest import log_in
from tests.retention_app.conftest import World

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PASSWORD = "a-long-browser-password"
DEFAULT_HASHER = "django.contrib.auth.hashers.PBKDF2PasswordHasher"


def test_create_a_policy_dry_run_it_and_apply_it(page, server, acme) -> None:
    tenant, project = acme
    with override_settings(PASSWORD_HASHERS=[DEFAULT_HASHER]):
        user_join_tenant(tenant=tenant, username="admin-user", role="admin", password=PASSWORD)
    old = World(project).run()
    long_ago = timezone.now() - timedelta(days=90)
    Run.objects.unscoped().filter(id=old.id).update(created_at=long_ago, finished_at=long_ago)
    log_in(page, "admin-user", PASSWORD)

    page.click("#console-nav >> text=Retention")
    page.wait_for_url("**/console/retention/")
    page.fill("#retention-create input[name=runs_max_age_seconds]", str(30 * 86400))
    page.click("#retention-create button[type=submit]")
    page.wait_for_selector(".alert.success")
    policy = RetentionPolicy.objects.unscoped().get()
    assert policy.runs_max_age_seconds == 30 * 86400

    row = page.locator(f"#retention-policies tr[data-policy='{policy.id}']")
    row.locator("a", has_text="Dry run").click()
    report = page.locator("#retention-report")
    report.wait_for()
    assert (page.text_content("#retention-report tr[data-kind=runs] td.mono") or "") == "1"
    assert Run.objects.unscoped().filter(id=old.id).exists()  # a dry run changes nothing

    page.locator(
        f"#retention-policies tr[data-policy='{policy.id}'] button", has_text="Apply now"
    ).click()
    page.wait_for_selector(".alert.success")
    assert "removed" in (page.text_content(".alert.success") or "")
    assert not Run.objects.unscoped().filter(id=old.id).exists()
    assert RetentionPass.objects.unscoped().filter(trigger="console").count() >= 1
    log = page.text_content(f"#retention-policies tr[data-policy='{policy.id}']") or ""
    assert "console" in log
