"""The console's webhooks pages: the secret shown once, the API's target rule, the delivery log
with its attempts and redelivery, grants (only ``projects:write`` — admins — change anything),
CSRF, audit under the API's action names, and another tenant's subscription as a 404."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from openrath_project.tenancy.models import AuditEvent
from runs_app.services import run_cancel
from tests.factories.runs import RunFactory
from tests.webhooks_app.conftest import Receiver
from webhooks_app import secrets, services
from webhooks_app.models import WebhookDelivery, WebhookSubscription

pytestmark = pytest.mark.django_db

PAGE = "/console/webhooks/"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    running.start()
    yield running
    running.release.set()
    running.stop()


@pytest.fixture
def allow_loopback(settings: Any) -> Any:
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    settings.WEBHOOK_TIMEOUT_SECONDS = 2.0
    settings.WEBHOOK_RETRY_BASE_SECONDS = 10.0
    settings.WEBHOOK_DISABLE_AFTER_FAILURES = 1000
    return settings


def form(project: Any, url: str, *kinds: str, **extra: str) -> dict[str, Any]:
    return {
        "project": str(project.id),
        "url": url,
        "event_types": list(kinds or ("run.cancelled",)),
        **extra,
    }


def subscribe(project: Any, url: str) -> tuple[WebhookSubscription, str]:
    return services.webhook_create(
        project=project, url=url, event_types=["run.cancelled"], created_by="test"
    )


def test_an_admin_subscribes_and_sees_the_secret_once(allow_loopback, login, project, receiver):
    admin = login("admin")
    made = admin.post(f"{PAGE}new/", form(project, receiver.url, description="ops hook"))
    assert made.status_code == 201
    assert made["Cache-Control"] == "no-store"
    html = made.content.decode()
    [secret] = re.findall(r'id="webhook-secret">(whsec_[A-Za-z0-9+/=]+)<', html)
    subscription = WebhookSubscription.objects.get()
    assert secrets.unseal(subscription.secret_ciphertext) == secret
    assert (subscription.url, subscription.event_types, subscription.description) == (
        receiver.url,
        ["run.cancelled"],
        "ops hook",
    )
    assert subscription.created_by == "user:admin-acme"

    listed = admin.get(PAGE).content.decode()
    assert receiver.url in listed
    assert secret not in listed  # never again
    detail = admin.get(f"{PAGE}{subscription.id}/").content.decode()
    assert secret not in detail
    assert f"…{secret[-4:]}" in detail

    run_cancel(run=RunFactory(project=project))
    assert services.deliver_due().succeeded == 1
    [got] = receiver.requests
    Webhook(secret).verify(got.body, got.headers)  # the secret shown is the one that signs

    audit = AuditEvent.objects.get(action="webhook.create")
    assert (audit.outcome, audit.object_type, audit.object_id) == (
        "success",
        "webhook",
        str(subscription.id),
    )
    assert (audit.project_id, audit.details["via"], audit.details["url"]) == (
        project.id,
        "console",
        receiver.url,
    )
    assert secret not in str(audit.details)


def test_the_target_rule_and_event_types_are_the_apis(settings, login, project):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False
    admin = login("admin")
    refused = admin.post(f"{PAGE}new/", form(project, "http://127.0.0.1:9/hook"))
    assert refused.status_code == 400
    html = refused.content.decode()
    assert 'data-code="webhook_target_refused"' in html
    assert "loopback" in html
    assert 'value="http://127.0.0.1:9/hook"' in html  # the form keeps what was typed
    no_types = admin.post(f"{PAGE}new/", {"project": str(project.id), "url": "http://1.1.1.1/"})
    assert no_types.status_code == 400
    assert "event_types must name at least one known event type" in no_types.content.decode()
    credentials = admin.post(f"{PAGE}new/", form(project, "https://user:pw@example.com/"))
    assert 'data-code="webhook_url_invalid"' in credentials.content.decode()
    # What the columns cannot hold is a 400 too (PostgreSQL refuses NUL; the URL is 2000 long).
    nul = admin.post(f"{PAGE}new/", form(project, "http://1.1.1.1/a\x00b"))
    assert nul.status_code == 400
    assert "NUL" in nul.content.decode()
    long_url = admin.post(f"{PAGE}new/", form(project, "http://1.1.1.1/" + "a" * 2000))
    assert long_url.status_code == 400
    assert "longer than 2000" in long_url.content.decode()
    long_text = admin.post(f"{PAGE}new/", form(project, "http://1.1.1.1/", description="d" * 301))
    assert long_text.status_code == 400
    assert WebhookSubscription.objects.count() == 0
    audit = AuditEvent.objects.filter(action="webhook.create").order_by("id")
    assert [(a.outcome, a.details["error_code"]) for a in audit] == [
        ("failure", "webhook_target_refused"),
        ("failure", "invalid"),
        ("failure", "webhook_url_invalid"),
        ("failure", "invalid"),
        ("failure", "invalid"),
        ("failure", "invalid"),
    ]


def test_the_delivery_log_shows_each_attempt_and_a_delivery_is_sent_again(
    allow_loopback, login, project, receiver
):
    subscription, _ = subscribe(project, receiver.url)
    receiver.mode = "error"
    run_cancel(run=RunFactory(project=project))
    assert services.deliver_due().failed == 1
    delivery = WebhookDelivery.objects.get()
    admin = login("admin")

    listed = admin.get(PAGE).content.decode()
    row = listed[listed.index(f'data-webhook="{subscription.id}"') :]
    assert ">failed</span>" in row[: row.index("</tr>")]  # the last delivery's status
    page = admin.get(f"{PAGE}{subscription.id}/").content.decode()
    assert delivery.webhook_id in page
    assert 'data-status="failed"' in page
    assert 'data-number="1"' in page
    assert '<span class="mono attempt-code">503</span>' in page
    assert "receiver unavailable" in page  # the response excerpt
    assert delivery.next_attempt_at.strftime("%Y-%m-%d %H:%M:%S") in page
    redeliver = f"{PAGE}{subscription.id}/deliveries/{delivery.id}/redeliver/"
    assert redeliver not in page  # an open delivery is already on its way
    still_open = admin.post(redeliver)
    assert still_open.status_code == 409
    assert 'data-code="delivery_open"' in still_open.content.decode()

    receiver.mode = "ok"
    WebhookDelivery.objects.filter(id=delivery.id).update(next_attempt_at=delivery.created_at)
    assert services.deliver_due().succeeded == 1
    page = admin.get(f"{PAGE}{subscription.id}/").content.decode()
    assert 'data-status="succeeded"' in page
    assert 'data-number="2"' in page
    assert redeliver in page
    assert admin.post(redeliver).status_code == 302
    delivery.refresh_from_db()
    assert (delivery.status, delivery.round_attempts) == ("pending", 0)
    assert services.deliver_due().succeeded == 1
    assert receiver.ids() == [delivery.webhook_id] * 3  # the same webhook-id every time

    audit = AuditEvent.objects.filter(action="webhook.redeliver").order_by("id")
    assert [(a.outcome, a.status_code, a.object_id) for a in audit] == [
        ("failure", 409, str(subscription.id)),
        ("success", 302, str(subscription.id)),
    ]
    assert audit.last().details["webhook_id"] == delivery.webhook_id


def test_an_admin_disables_with_a_reason_enables_and_deletes(allow_loopback, login, project):
    subscription, _ = subscribe(project, "http://127.0.0.1:9/hook")
    admin = login("admin")
    base = f"{PAGE}{subscription.id}/"
    assert admin.post(f"{base}disable/", {"reason": "receiver maintenance"}).status_code == 302
    subscription.refresh_from_db()
    assert (subscription.enabled, subscription.disabled_reason) == (False, "receiver maintenance")
    listed = admin.get(PAGE).content.decode()
    assert "receiver maintenance" in listed
    assert f"{base}enable/" in listed
    assert admin.post(f"{base}enable/").status_code == 302
    subscription.refresh_from_db()
    assert (subscription.enabled, subscription.disabled_reason) == (True, "")
    assert admin.post(f"{base}delete/").status_code == 302
    assert not WebhookSubscription.objects.exists()
    audit = AuditEvent.objects.filter(object_type="webhook").order_by("id")
    assert [(a.action, a.outcome, a.details["via"]) for a in audit] == [
        ("webhook.disable", "success", "console"),
        ("webhook.enable", "success", "console"),
        ("webhook.delete", "success", "console"),
    ]
    assert audit.first().details["reason"] == "receiver maintenance"


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_without_projects_write_the_page_is_read_only(allow_loopback, login, project, role):
    subscription, _ = subscribe(project, "http://127.0.0.1:9/hook")
    run_cancel(run=RunFactory(project=project))
    WebhookDelivery.objects.update(status="dead", next_attempt_at=None)
    delivery = WebhookDelivery.objects.get()
    client = login(role)
    listed = client.get(PAGE)
    assert listed.status_code == 200
    html = listed.content.decode()
    assert "http://127.0.0.1:9/hook" in html
    assert "webhook-create" not in html
    assert "/disable/" not in html
    detail = client.get(f"{PAGE}{subscription.id}/").content.decode()
    assert delivery.webhook_id in detail
    assert "/redeliver/" not in detail

    base = f"{PAGE}{subscription.id}/"
    posts = [
        (f"{PAGE}new/", form(project, "http://127.0.0.1:9/other")),
        (f"{base}disable/", {"reason": "no"}),
        (f"{base}enable/", {}),
        (f"{base}delete/", {}),
        (f"{base}deliveries/{delivery.id}/redeliver/", {}),
    ]
    for url, data in posts:
        assert client.post(url, data).status_code == 403, url
    assert WebhookSubscription.objects.get().enabled is True
    assert WebhookSubscription.objects.count() == 1
    assert WebhookDelivery.objects.get().status == "dead"
    denied = AuditEvent.objects.filter(outcome="denied").order_by("id")
    assert [a.action for a in denied] == [
        "webhook.create",
        "webhook.disable",
        "webhook.enable",
        "webhook.delete",
        "webhook.redeliver",
    ]


def test_csrf_is_enforced(allow_loopback, login, project):
    admin = login("admin", enforce_csrf_checks=True)
    refused = admin.post(f"{PAGE}new/", form(project, "http://127.0.0.1:9/hook"))
    assert refused.status_code == 403
    assert b"CSRF" in refused.content
    assert not WebhookSubscription.objects.exists()
    page = admin.get(PAGE)
    token = str(page.context["csrf_token"])
    made = admin.post(
        f"{PAGE}new/", {**form(project, "http://127.0.0.1:9/hook"), "csrfmiddlewaretoken": token}
    )
    assert made.status_code == 201
    assert WebhookSubscription.objects.count() == 1


def test_another_tenants_subscription_is_not_shown_and_is_a_404(
    allow_loopback, login, member, project, other_tenant, foreign_project
):
    subscription, _ = subscribe(project, "http://127.0.0.1:9/secret-hook")
    run_cancel(run=RunFactory(project=project))
    delivery = WebhookDelivery.objects.get()
    outsider = login(user=member("admin", tenant=other_tenant))
    assert "secret-hook" not in outsider.get(PAGE).content.decode()
    base = f"{PAGE}{subscription.id}/"
    assert outsider.get(base).status_code == 404
    for action in ("disable/", "enable/", "delete/", f"deliveries/{delivery.id}/redeliver/"):
        assert outsider.post(f"{base}{action}").status_code == 404, action
    # Nor can they subscribe in another tenant's project.
    theirs = outsider.post(f"{PAGE}new/", form(project, "http://127.0.0.1:9/mine"))
    assert theirs.status_code == 404
    assert WebhookSubscription.objects.count() == 1
    assert WebhookSubscription.objects.get().enabled is True
    # A delivery of one of their own subscriptions' ids under this one is a 404 too.
    own, _ = subscribe(foreign_project, "http://127.0.0.1:9/theirs")
    assert outsider.post(f"{PAGE}{own.id}/deliveries/{delivery.id}/redeliver/").status_code == 404
