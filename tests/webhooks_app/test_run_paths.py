"""A run that succeeds through the executor enqueues its ``run.succeeded`` webhook on both step
commit paths: the composed PostgreSQL statement (the trigger of migration 0002 writes the row)
and the portable ORM transaction (webhooks_app.outbox); the two payloads are the same."""

from __future__ import annotations

from typing import Any

import pytest

from runs_app import services as run_services
from runs_app.executor import execute_claim
from runs_app.registry import WorkflowRegistry
from runs_app.services import composed
from tests.schedules_app.workflows import Tally
from tests.support import require_postgres
from webhooks_app import services
from webhooks_app.models import WebhookDelivery

pytestmark = pytest.mark.django_db


def finish_one_run(project: Any) -> WebhookDelivery:
    registry = WorkflowRegistry()
    registered = registry.register(Tally)
    run, _ = run_services.run_create(project=project, workflow=registered, state={"n": 1})
    claim = run_services.lease_claim(worker="webhook-test", run_id=run.id)
    assert claim is not None
    assert execute_claim(claim, registry=registry).status == "succeeded"
    return WebhookDelivery.objects.get(source_key__startswith=f"{run.id}:")


def comparable(payload: dict[str, Any]) -> dict[str, Any]:
    data = dict(payload["data"])
    data.pop("run")
    return {"type": payload["type"], "data": data}


def test_the_composed_and_the_orm_commit_enqueue_the_same_webhook(
    webhook_settings, receiver, project, monkeypatch
):
    services.webhook_create(project=project, url=receiver.url, event_types=["run.succeeded"])
    paths = {}
    if composed.composed_sql():
        paths["composed"] = finish_one_run(project)
    monkeypatch.setattr(composed, "composed_sql", lambda: False)
    paths["orm"] = finish_one_run(project)
    if "composed" not in paths:
        require_postgres()  # the SQLite pass checks the ORM path only
        return
    sql, orm = (paths["composed"], paths["orm"])
    assert comparable(sql.payload) == comparable(orm.payload)
    assert sql.payload["data"]["status"] == "succeeded"
    assert sql.webhook_id.startswith("msg_")
    assert len(sql.webhook_id) == 36
    assert services.deliver_due().succeeded == 2
    assert sorted(receiver.ids()) == sorted([sql.webhook_id, orm.webhook_id])


def test_the_orm_commit_enqueues_run_succeeded(webhook_settings, receiver, project, monkeypatch):
    services.webhook_create(project=project, url=receiver.url, event_types=["run.succeeded"])
    monkeypatch.setattr(composed, "composed_sql", lambda: False)
    delivery = finish_one_run(project)
    assert delivery.payload["data"]["event"]["type"] == "run.succeeded"
    assert services.deliver_due().succeeded == 1
    assert receiver.requests[0].json()["data"]["workflow"] == "sched-tally"
