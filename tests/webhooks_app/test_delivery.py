"""Webhook delivery end to end against a receiver on 127.0.0.1: the outbox is written with the
event (and not for a rolled-back one), signatures verify, a receiver that was down gets every
event exactly once by webhook id, redirects are not followed, private targets need the
setting, sustained failure disables the subscription, and a delivery can be sent again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from openrath_project.errors import ValidationFailed
from openrath_project.tenancy.models import AuditEvent
from runs_app.models import Run
from runs_app.services import run_cancel, run_transition
from tests.factories.runs import RunFactory
from webhooks_app import services, targets
from webhooks_app.models import WebhookAttempt, WebhookDelivery, WebhookSubscription
from webhooks_app.outbox import record_run_event
from webhooks_app.secrets import new_secret

pytestmark = pytest.mark.django_db


def subscribe(project, url, types=("run.cancelled", "run.failed")):
    return services.webhook_create(
        project=project, url=url, event_types=list(types), created_by="test"
    )


def later(hours: float):
    return timezone.now() + timedelta(hours=hours)


def test_a_cancelled_run_is_delivered_signed(webhook_settings, receiver, project):
    subscription, secret = subscribe(project, receiver.url)
    run = RunFactory(project=project)
    run_cancel(run=run, reason="not needed")

    delivery = WebhookDelivery.objects.get()
    assert (delivery.event_type, delivery.status, delivery.attempts) == (
        "run.cancelled",
        "pending",
        0,
    )
    tick = services.deliver_due()
    assert (tick.succeeded, tick.failed, tick.dead) == (1, 0, 0)

    [got] = receiver.requests
    assert got.headers["webhook-id"] == delivery.webhook_id
    assert got.headers["content-type"] == "application/json"
    body = Webhook(secret).verify(got.body, got.headers)  # raises on a bad signature
    assert body["type"] == "run.cancelled"
    assert body["data"]["run"] == str(run.id)
    assert body["data"]["status"] == "cancelled"
    assert body["data"]["event"]["type"] == "run.cancelled"
    with pytest.raises(WebhookVerificationError, match="signature"):
        Webhook(new_secret()).verify(got.body, got.headers)  # another secret does not verify
    assert subscription.secret_hint == secret[-4:]

    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("succeeded", 1, 204)
    assert delivery.next_attempt_at is None
    assert delivery.delivered_at is not None
    [attempt] = WebhookAttempt.objects.filter(delivery=delivery)
    assert (attempt.number, attempt.succeeded, attempt.status_code) == (1, True, 204)
    assert services.deliver_due().attempted == 0


def test_a_rolled_back_transaction_sends_nothing(webhook_settings, receiver, project):
    subscribe(project, receiver.url)
    run = RunFactory(project=project)
    inside = []

    def cancel_then_abandon() -> None:
        with transaction.atomic():
            run_cancel(run=run)
            inside.append(WebhookDelivery.objects.count())  # written with the event
            raise RuntimeError("the change is abandoned")

    with pytest.raises(RuntimeError, match="abandoned"):
        cancel_then_abandon()
    assert inside == [1]

    run.refresh_from_db()
    assert run.status == "queued"
    assert WebhookDelivery.objects.count() == 0
    assert services.deliver_due(now=later(48)).attempted == 0
    assert receiver.requests == []


def test_only_wanted_types_of_enabled_subscriptions_are_enqueued(
    webhook_settings, receiver, project, other_project
):
    wants_failed, _ = subscribe(project, receiver.url, types=["run.failed"])
    wants_cancelled, _ = subscribe(project, receiver.url, types=["run.cancelled"])
    elsewhere, _ = subscribe(other_project, receiver.url, types=["run.cancelled"])
    off, _ = subscribe(project, receiver.url, types=["run.cancelled"])
    services.webhook_disable(subscription=off, reason="maintenance")

    run_cancel(run=RunFactory(project=project))
    assert list(WebhookDelivery.objects.values_list("subscription_id", flat=True)) == [
        wants_cancelled.id
    ]
    assert {wants_failed.id, elsewhere.id}.isdisjoint(
        WebhookDelivery.objects.values_list("subscription_id", flat=True)
    )


def test_a_receiver_down_for_a_while_gets_every_event_exactly_once(
    webhook_settings, receiver, project
):
    subscribe(project, receiver.url)
    receiver.stop()  # connections refused from now on
    runs = [RunFactory(project=project) for _ in range(4)]
    for run in runs:
        run_cancel(run=run)
    failing = RunFactory(project=project, status="running")
    run_transition(run_id=failing.id, to="failed", event="run.failed", token=1)
    expected = set(WebhookDelivery.objects.values_list("webhook_id", flat=True))
    assert len(expected) == 5

    for hours in (0, 1, 2):  # three rounds while it is down: each attempt fails and is logged
        tick = services.deliver_due(now=later(hours))
        assert (tick.succeeded, tick.failed) == (0, 5)
    assert WebhookAttempt.objects.filter(succeeded=False).count() == 15
    assert all(
        "ConnectError" in error for error in WebhookAttempt.objects.values_list("error", flat=True)
    )
    assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {"failed"}
    # The durable timer: nothing is due again right away.
    assert services.deliver_due().attempted == 0

    receiver.start()  # back, on the same port
    tick = services.deliver_due(now=later(24))
    assert (tick.succeeded, tick.failed) == (5, 0)
    assert services.deliver_due(now=later(48)).attempted == 0

    received = receiver.ids()
    assert sorted(received) == sorted(expected)  # every event, each once
    assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {"succeeded"}
    assert set(WebhookDelivery.objects.values_list("attempts", flat=True)) == {4}
    types = sorted(r.json()["type"] for r in receiver.requests)
    assert types == ["run.cancelled"] * 4 + ["run.failed"]


def test_a_response_lost_to_a_timeout_is_sent_again_with_the_same_id(
    webhook_settings, receiver, project
):
    webhook_settings.WEBHOOK_TIMEOUT_SECONDS = 0.5
    subscribe(project, receiver.url)
    run_cancel(run=RunFactory(project=project))
    receiver.mode = "hang"  # it gets the request but answers only after the sender gave up
    tick = services.deliver_due()
    assert (tick.succeeded, tick.failed) == (0, 1)
    assert WebhookAttempt.objects.get().error.startswith("timed out")
    receiver.release.set()
    receiver.mode = "ok"
    assert services.deliver_due(now=later(1)).succeeded == 1

    received = receiver.ids()
    assert len(received) == 2
    assert len(set(received)) == 1  # a receiver deduplicating by webhook-id processes it once
    assert received[0] == WebhookDelivery.objects.get().webhook_id


def test_redirects_are_not_followed(webhook_settings, receiver, project):
    subscribe(project, receiver.url)
    run_cancel(run=RunFactory(project=project))
    receiver.mode = "redirect"
    assert services.deliver_due().failed == 1
    assert receiver.ids("/elsewhere") == []
    attempt = WebhookAttempt.objects.get()
    assert attempt.status_code == 302
    assert attempt.error == f"redirect not followed (to http://127.0.0.1:{receiver.port}/elsewhere)"
    assert WebhookDelivery.objects.get().status == "failed"


def test_private_targets_are_refused_without_the_setting(settings, receiver, project):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False
    for url in (
        receiver.url,
        "http://10.1.2.3/h",
        "http://169.254.169.254/latest",
        "http://[::1]/",
    ):
        with pytest.raises(ValidationFailed) as refused:
            subscribe(project, url)
        assert refused.value.code == "webhook_target_refused"
    assert WebhookSubscription.objects.count() == 0

    settings.WEBHOOK_ALLOWED_CIDRS = ["127.0.0.0/8"]  # an operator's allow-list
    subscribe(project, receiver.url)
    assert WebhookSubscription.objects.count() == 1


def test_a_target_that_became_private_is_refused_at_delivery(webhook_settings, receiver, project):
    subscribe(project, receiver.url)
    run_cancel(run=RunFactory(project=project))
    webhook_settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False  # the operator withdrew the exception
    assert services.deliver_due().failed == 1
    assert receiver.requests == []
    assert WebhookAttempt.objects.get().error == (
        "target refused: 127.0.0.1 is refused: 127.0.0.1 is a loopback address"
    )


def test_sustained_failure_disables_the_subscription(webhook_settings, receiver, project):
    webhook_settings.WEBHOOK_DISABLE_AFTER_FAILURES = 3
    webhook_settings.WEBHOOK_DISABLE_AFTER_SECONDS = 0.0
    subscription, _ = subscribe(project, receiver.url)
    run_cancel(run=RunFactory(project=project))
    receiver.mode = "error"
    disabled_at = None
    for hours in range(5):
        tick = services.deliver_due(now=later(hours))
        if tick.disabled:
            disabled_at = hours
            break
    assert disabled_at == 2  # the third failure in a row
    subscription.refresh_from_db()
    assert (subscription.enabled, subscription.consecutive_failures) == (False, 3)
    assert subscription.disabled_reason == "disabled after 3 failed attempts in a row"
    attempt = WebhookAttempt.objects.order_by("number").last()
    assert (attempt.status_code, attempt.response_excerpt) == (
        503,
        '{"detail": "receiver unavailable"}',
    )
    audit = AuditEvent.objects.get(action="webhook.auto_disable")
    assert (audit.actor, audit.object_id) == ("system:webhooks", str(subscription.id))
    # Disabled: the delivery waits, nothing is sent.
    receiver.mode = "ok"
    assert services.deliver_due(now=later(30)).attempted == 0
    # Enabled again: it goes out.
    services.webhook_enable(subscription=subscription)
    assert services.deliver_due(now=later(30)).succeeded == 1
    subscription.refresh_from_db()
    assert (subscription.enabled, subscription.consecutive_failures) == (True, 0)


def test_a_delivery_given_up_can_be_redelivered(webhook_settings, receiver, project):
    webhook_settings.WEBHOOK_MAX_ATTEMPTS = 2
    subscribe(project, receiver.url)
    run_cancel(run=RunFactory(project=project))
    receiver.mode = "error"
    assert services.deliver_due(now=later(0)).failed == 1
    assert services.deliver_due(now=later(1)).dead == 1
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.next_attempt_at) == ("dead", None)
    assert services.deliver_due(now=later(10)).attempted == 0

    receiver.mode = "ok"
    services.delivery_redeliver(delivery=delivery)
    assert services.deliver_due().succeeded == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("succeeded", 3)
    assert len(set(receiver.ids())) == 1  # the same webhook-id every time


def test_waiting_and_review_events_make_interrupt_and_effect_webhooks(
    webhook_settings, receiver, project
):
    subscribe(project, receiver.url, types=["interrupt.created", "effect.needs_review"])
    run = RunFactory(project=project, status="running")
    record_run_event(run, "run.waiting", 7, step="ask", data={"interrupt": "i-1", "kind": "x"})
    record_run_event(run, "run.needs_review", 8, data={"reason": "r", "effect": "e-1"})
    record_run_event(run, "run.needs_review", 9, data={"reason": "plan drift"})  # no effect
    record_run_event(run, "run.waiting", 7, data={"interrupt": "i-1"})  # the same event again
    kinds = dict(WebhookDelivery.objects.values_list("event_type", "payload"))
    assert sorted(kinds) == ["effect.needs_review", "interrupt.created"]
    assert kinds["interrupt.created"]["data"]["interrupt"] == {
        "id": "i-1",
        "kind": "x",
        "title": None,
    }
    assert kinds["effect.needs_review"]["data"]["effect"] == {"id": "e-1", "reason": "r"}
    assert Run.objects.filter(id=run.id).exists()


def test_the_connection_goes_to_the_address_that_was_checked(
    webhook_settings, receiver, project, monkeypatch
):
    lookups: list[str] = []

    def resolver(host, port):
        lookups.append(host)
        return ["127.0.0.1"]

    monkeypatch.setattr(targets, "system_resolver", resolver)
    subscribe(project, f"http://hooks.test:{receiver.port}/hook")
    run_cancel(run=RunFactory(project=project))
    lookups.clear()
    assert services.deliver_due().succeeded == 1
    assert lookups == ["hooks.test"]  # one lookup per attempt: the address checked is used
    [got] = receiver.requests
    assert got.headers["host"] == f"hooks.test:{receiver.port}"
