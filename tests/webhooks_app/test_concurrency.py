"""Two delivery loops at once (two reconcilers) on PostgreSQL: ``SKIP LOCKED`` hands each due
delivery to one of them, so every event is POSTed once."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from runs_app.services import run_cancel
from tests.factories.runs import RunFactory
from tests.support import require_postgres
from webhooks_app import services
from webhooks_app.models import WebhookAttempt, WebhookDelivery

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_loops_share_the_due_deliveries(webhook_settings, receiver, project):
    require_postgres()
    services.webhook_create(project=project, url=receiver.url, event_types=["run.cancelled"])
    for _ in range(20):
        run_cancel(run=RunFactory(project=project))
    assert WebhookDelivery.objects.count() == 20
    start = threading.Barrier(2)
    ticks: list[services.DeliveryTick] = []
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            start.wait(timeout=30)
            ticks.append(services.deliver_due(batch=2))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=loop) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert sum(t.succeeded for t in ticks) == 20
    received = receiver.ids()
    assert len(received) == 20
    assert len(set(received)) == 20
    assert set(WebhookDelivery.objects.values_list("attempts", flat=True)) == {1}
    assert WebhookAttempt.objects.count() == 20
