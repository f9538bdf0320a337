"""The webhooks console page in a real browser against a real server: an admin subscribes a
receiver this test runs on 127.0.0.1 (allowed by ``WEBHOOK_ALLOW_PRIVATE_TARGETS``), copies the
secret shown once, sees the server's delivery arrive in the log, and sends it again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings
from standardwebhooks.webhooks import Webhook

from openrath_project.tenancy.services import user_join_tenant
from runs_app.models import Interrupt
from runs_app.services import run_create
from tests.browser.conftest import Server, log_in, wait_until
from tests.webhooks_app.conftest import Receiver
from webhooks_app.models import WebhookDelivery, WebhookSubscription

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PASSWORD = "a-long-browser-password"
DEFAULT_HASHER = "django.contrib.auth.hashers.PBKDF2PasswordHasher"
#: How long the server's embedded reconciler may take to deliver (it passes every 5 s or so):
#: generous, for a loaded machine; a wait ends as soon as the delivery arrives.
DELIVERY_SECONDS = 120


@pytest.fixture
def loopback_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server is started with this environment: it may call the receiver on 127.0.0.1."""
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE_TARGETS", "true")
    monkeypatch.setenv("WEBHOOK_TIMEOUT_SECONDS", "5")


@pytest.fixture
def server(loopback_allowed: None, server: Server) -> Server:
    return server


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    running.start()
    yield running
    running.release.set()
    running.stop()


def test_subscribe_see_a_delivery_arrive_and_redeliver_it(
    page, server, receiver, acme, browser_registry
):
    tenant, project = acme
    with override_settings(PASSWORD_HASHERS=[DEFAULT_HASHER]):
        user_join_tenant(tenant=tenant, username="admin-user", role="admin", password=PASSWORD)
    log_in(page, "admin-user", PASSWORD)

    page.click("#console-nav >> text=Webhooks")
    page.wait_for_url("**/console/webhooks/")
    page.fill("#webhook-create input[name=url]", receiver.url)
    page.fill("#webhook-create input[name=description]", "browser receiver")
    page.check("#webhook-create input[value='interrupt.created']")
    page.click("#webhook-create button[type=submit]")
    secret = page.text_content("#webhook-secret") or ""
    assert secret.startswith("whsec_")
    subscription = WebhookSubscription.objects.get()
    assert (subscription.url, subscription.event_types) == (receiver.url, ["interrupt.created"])
    page.goto("/console/webhooks/")
    assert page.locator("#webhook-secret").count() == 0
    assert secret not in page.content()  # shown once

    run, _ = run_create(
        project=project, workflow=browser_registry.get("browser_approval"), state={}
    )
    wait_until(
        lambda: Interrupt.objects.filter(run=run).exists(),
        timeout=DELIVERY_SECONDS,
        what="the run to ask its question",
    )
    [webhook_id] = wait_until(
        receiver.ids, timeout=DELIVERY_SECONDS, what="the server to deliver the event"
    )
    [got] = receiver.requests
    body = Webhook(secret).verify(got.body, got.headers)  # signed with the secret shown
    assert (body["type"], body["data"]["run"]) == ("interrupt.created", str(run.id))
    wait_until(
        lambda: WebhookDelivery.objects.filter(status="succeeded").exists(),
        timeout=30,
        what="the outcome to be written",
    )

    page.click(f"#webhooks a[href='/console/webhooks/{subscription.id}/']")
    delivery = page.locator("#deliveries tr.delivery[data-status=succeeded]")
    delivery.wait_for()
    assert webhook_id in (delivery.text_content() or "")
    first = page.locator("#deliveries tr.attempt[data-number='1']")
    assert "204" in (first.text_content() or "")
    assert " ms" in (first.text_content() or "")

    delivery.locator("button", has_text="Redeliver").click()
    page.wait_for_selector(".alert.success")
    assert "due again" in (page.text_content(".alert.success") or "")
    wait_until(lambda: len(receiver.ids()) == 2, timeout=DELIVERY_SECONDS, what="the redelivery")
    assert receiver.ids() == [webhook_id, webhook_id]  # the same webhook-id: receivers dedupe
    wait_until(
        lambda: WebhookDelivery.objects.filter(status="succeeded", attempts=2).exists(),
        timeout=30,
        what="the second outcome to be written",
    )
    page.reload()
    page.locator("#deliveries tr.attempt[data-number='2']").wait_for()
    assert page.locator("#deliveries tr.delivery[data-status=succeeded]").count() == 1
