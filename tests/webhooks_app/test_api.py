"""The webhooks API: the secret shown once, target rules as the documented error body, the
delivery log and redelivery, scoping, grants and audit."""

from __future__ import annotations

import pytest
from standardwebhooks.webhooks import Webhook

from openrath_project.tenancy.models import AuditEvent
from runs_app.services import run_cancel
from tests.factories import ProjectFactory
from tests.factories.runs import RunFactory
from webhooks_app import services
from webhooks_app.models import WebhookDelivery, WebhookSubscription

pytestmark = pytest.mark.django_db

URL = "/api/v1/webhooks/"


@pytest.fixture
def writer(make_token, client_for):
    return client_for(make_token(["projects:read", "projects:write"]))


def body(receiver, **fields):
    return {"project": "research", "url": receiver.url, "event_types": ["run.cancelled"], **fields}


def test_create_shows_the_secret_once_and_it_signs(webhook_settings, receiver, writer, project):
    created = writer.post(URL, body(receiver, description="ops"), format="json")
    assert created.status_code == 201, created.content
    data = created.json()
    secret = data["secret"]
    assert secret.startswith("whsec_")
    assert data["secret_hint"] == secret[-4:]
    assert (data["project"], data["event_types"], data["enabled"]) == (
        str(project.id),
        ["run.cancelled"],
        True,
    )
    assert data["created_by"].startswith("token:")
    read = writer.get(f"{URL}{data['id']}/").json()
    assert "secret" not in read
    assert secret not in WebhookSubscription.objects.get().secret_ciphertext

    run_cancel(run=RunFactory(project=project))
    assert services.deliver_due().succeeded == 1
    [got] = receiver.requests
    Webhook(secret).verify(got.body, got.headers)

    audit = AuditEvent.objects.get(action="webhook.create")
    assert (audit.outcome, audit.object_id) == ("success", data["id"])
    assert secret not in str(audit.details)


def test_refused_targets_and_bad_types_are_the_documented_error(settings, writer, project):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False
    refused = writer.post(
        URL,
        {"project": "research", "url": "http://127.0.0.1:9/x", "event_types": ["run.failed"]},
        format="json",
    )
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "code": "webhook_target_refused",
        "message": "127.0.0.1 is refused: 127.0.0.1 is a loopback address",
        "details": {"url": "http://127.0.0.1:9/x"},
    }
    for url in ("ftp://example.com/x", "http://user:pw@example.com/x"):
        bad = writer.post(
            URL, {"project": "research", "url": url, "event_types": ["run.failed"]}, format="json"
        )
        assert bad.status_code == 400
        assert bad.json()["error"]["code"] == "webhook_url_invalid"
    unknown = writer.post(
        URL,
        {"project": "research", "url": "https://example.com/", "event_types": ["run.exploded"]},
        format="json",
    )
    assert unknown.status_code == 400
    assert "event_types" in unknown.json()["error"]["details"]
    assert WebhookSubscription.objects.count() == 0


def test_delivery_log_redelivery_and_enable(webhook_settings, receiver, writer, project):
    made = writer.post(URL, body(receiver), format="json").json()
    url = f"{URL}{made['id']}/"
    run_cancel(run=RunFactory(project=project))
    receiver.mode = "error"
    services.deliver_due()

    log = writer.get(f"{url}deliveries/").json()["results"]
    assert [(d["event_type"], d["status"], d["attempts"], d["last_status_code"]) for d in log] == [
        ("run.cancelled", "failed", 1, 503)
    ]
    delivery_url = f"{url}deliveries/{log[0]['id']}/"
    detail = writer.get(delivery_url).json()
    assert [(a["number"], a["succeeded"], a["status_code"]) for a in detail["attempt_log"]] == [
        (1, False, 503)
    ]
    assert detail["attempt_log"][0]["response_excerpt"] == '{"detail": "receiver unavailable"}'
    assert writer.get(f"{url}deliveries/", {"status": "succeeded"}).json()["results"] == []

    open_one = writer.post(f"{delivery_url}redeliver/")
    assert open_one.status_code == 409
    assert open_one.json()["error"]["code"] == "delivery_open"

    disabled = writer.post(f"{url}disable/", {"reason": "receiver migration"}, format="json")
    assert (disabled.json()["enabled"], disabled.json()["disabled_reason"]) == (
        False,
        "receiver migration",
    )
    receiver.mode = "ok"
    enabled = writer.post(f"{url}enable/").json()
    assert (enabled["enabled"], enabled["disabled_reason"]) == (True, "")
    assert services.deliver_due().succeeded == 1

    again = writer.post(f"{delivery_url}redeliver/")
    assert again.status_code == 202
    assert again.json()["status"] == "pending"
    assert services.deliver_due().succeeded == 1
    assert len(receiver.ids()) == 3
    assert len(set(receiver.ids())) == 1
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"webhook.redeliver", "webhook.enable", "webhook.disable"} <= actions


def test_update_and_delete(webhook_settings, receiver, writer, project):
    made = writer.post(URL, body(receiver), format="json").json()
    url = f"{URL}{made['id']}/"
    changed = writer.patch(url, {"event_types": ["run.failed", "run.waiting"]}, format="json")
    assert changed.status_code == 200
    assert changed.json()["event_types"] == ["run.failed", "run.waiting"]
    assert writer.delete(url).status_code == 204
    assert WebhookSubscription.objects.count() == 0


def test_permissions_matrix(
    webhook_settings, receiver, make_token, client_for, writer, project, other_tenant
):
    made = writer.post(URL, body(receiver), format="json").json()
    url = f"{URL}{made['id']}/"
    run_cancel(run=RunFactory(project=project))
    delivery = WebhookDelivery.objects.get()
    redeliver = f"{url}deliveries/{delivery.id}/redeliver/"
    before = list(WebhookSubscription.objects.values_list("id", "enabled", "url", "updated_at"))

    anonymous = client_for(None)
    assert anonymous.get(URL).status_code == 401

    reader = client_for(make_token(["projects:read"]))
    assert reader.get(url).status_code == 200
    assert reader.get(f"{url}deliveries/").status_code == 200
    assert reader.post(URL, body(receiver), format="json").status_code == 403
    assert reader.post(f"{url}disable/").status_code == 403
    assert reader.post(redeliver).status_code == 403
    assert reader.delete(url).status_code == 403

    no_grant = client_for(make_token(["runs:read"]))
    assert no_grant.get(URL).status_code == 403

    elsewhere = ProjectFactory(tenant=project.tenant, slug="elsewhere")
    limited = client_for(make_token(["projects:read", "projects:write"], projects=[elsewhere]))
    assert limited.get(url).status_code == 404
    assert limited.get(URL).json()["results"] == []

    foreign = client_for(make_token(["*"], tenant=other_tenant))
    assert foreign.get(url).status_code == 404
    assert foreign.get(f"{url}deliveries/").status_code == 404
    assert foreign.post(redeliver).status_code == 404
    assert foreign.post(f"{url}disable/").status_code == 404
    assert foreign.delete(url).status_code == 404
    assert foreign.get(URL).json()["results"] == []

    after = list(WebhookSubscription.objects.values_list("id", "enabled", "url", "updated_at"))
    assert after == before
    assert WebhookDelivery.objects.get().status == "pending"
    denied = AuditEvent.objects.filter(action__startswith="webhook.", outcome="denied")
    assert sorted(denied.values_list("action", "status_code")) == [
        ("webhook.create", 403),
        ("webhook.delete", 403),
        ("webhook.disable", 403),
        ("webhook.redeliver", 403),
    ]
