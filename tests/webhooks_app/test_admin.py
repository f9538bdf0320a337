"""The webhooks admin: pages open, the secret's ciphertext is never shown, and the actions call
the services and audit each row."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client

from openrath_project.tenancy.models import AuditEvent
from runs_app.services import run_cancel
from tests.factories.runs import RunFactory
from webhooks_app import services
from webhooks_app.models import WebhookDelivery, WebhookSubscription

pytestmark = pytest.mark.django_db

ADMIN = f"/{settings.ADMIN_PATH}"


@pytest.fixture
def superuser_client(django_user_model) -> Client:
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789")
    client = Client()
    client.force_login(user)
    return client


def _action(client: Client, model: str, action: str, ids: list):
    return client.post(
        f"{ADMIN}{model}/", {"action": action, "_selected_action": [str(i) for i in ids]}
    )


def test_pages_and_actions(webhook_settings, receiver, superuser_client, project):
    subscription, secret = services.webhook_create(
        project=project, url=receiver.url, event_types=["run.cancelled"]
    )
    run_cancel(run=RunFactory(project=project))
    receiver.mode = "error"
    services.deliver_due()
    delivery = WebhookDelivery.objects.get()
    for path in (
        "webhooks_app/webhooksubscription/",
        f"webhooks_app/webhooksubscription/{subscription.id}/change/",
        "webhooks_app/webhookdelivery/",
        f"webhooks_app/webhookdelivery/{delivery.id}/change/",
        "webhooks_app/webhookattempt/",
    ):
        page = superuser_client.get(f"{ADMIN}{path}")
        assert page.status_code == 200, path
        assert subscription.secret_ciphertext not in page.content.decode(), path
        assert secret not in page.content.decode(), path

    disabled = _action(
        superuser_client, "webhooks_app/webhooksubscription", "disable_webhooks", [subscription.id]
    )
    assert disabled.status_code == 302
    subscription.refresh_from_db()
    assert (subscription.enabled, subscription.disabled_reason) == (False, "disabled in the admin")
    _action(
        superuser_client, "webhooks_app/webhooksubscription", "enable_webhooks", [subscription.id]
    )
    subscription.refresh_from_db()
    assert subscription.enabled is True

    receiver.mode = "ok"
    assert services.deliver_due().succeeded == 1
    _action(superuser_client, "webhooks_app/webhookdelivery", "redeliver", [delivery.id])
    delivery.refresh_from_db()
    assert delivery.status == "pending"
    rows = AuditEvent.objects.filter(action__startswith="webhook.").order_by("id")
    assert [(r.action, r.outcome, r.object_id) for r in rows] == [
        ("webhook.disable", "success", str(subscription.id)),
        ("webhook.enable", "success", str(subscription.id)),
        ("webhook.redeliver", "success", str(delivery.id)),
    ]
    assert WebhookSubscription.objects.count() == 1
