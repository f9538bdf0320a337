"""The outbox hook: the run event log calls :func:`record_run_event` inside the transaction
that appends an event, so a webhook delivery exists exactly when the event committed.

It sits below the runs app (it takes the run as a duck-typed :class:`RunLike`, importing nothing
of runs_app) and costs nothing for the events no webhook type is made from.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from django.utils import timezone

from openrath_project.ids import uuid7
from webhooks_app.models import WebhookDelivery, WebhookSubscription

#: The run events webhook types are made from, and the types each one makes.
RUN_EVENT_TYPES: dict[str, tuple[str, ...]] = {
    "run.succeeded": ("run.succeeded",),
    "run.failed": ("run.failed",),
    "run.cancelled": ("run.cancelled",),
    "run.timed_out": ("run.timed_out",),
    "run.waiting": ("run.waiting", "interrupt.created"),
    "run.needs_review": ("run.needs_review", "effect.needs_review"),
}


class RunLike(Protocol):
    id: uuid.UUID
    tenant_id: Any
    project_id: Any
    workflow: str
    status: str


def _types_of(event: str, data: dict[str, Any]) -> tuple[str, ...]:
    made = RUN_EVENT_TYPES.get(event, ())
    return tuple(
        kind
        for kind in made
        if (kind != "interrupt.created" or "interrupt" in data)
        and (kind != "effect.needs_review" or "effect" in data)
    )


def _payload(
    run: RunLike, kind: str, event: str, seq: int, step: str, data: dict[str, Any]
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "run": str(run.id),
        "project": str(run.project_id),
        "workflow": run.workflow,
        "status": run.status,
        "event": {"type": event, "seq": seq, "step": step, "data": data},
    }
    if kind == "interrupt.created":
        body["interrupt"] = {
            "id": data.get("interrupt"),
            "kind": data.get("kind"),
            "title": data.get("title"),
        }
    elif kind == "effect.needs_review":
        body["effect"] = {"id": data.get("effect"), "reason": data.get("reason", "")}
    return {"type": kind, "timestamp": timezone.now().isoformat(), "data": body}


def record_run_event(
    run: RunLike, event: str, seq: int, *, step: str = "", data: dict[str, Any] | None = None
) -> int:
    """Enqueue a delivery per enabled subscription of the run's project that wants a webhook
    type made from this event; returns how many. Call it inside the event's transaction (the
    run row locked): the rows commit or roll back with the event. Insert-once per
    (subscription, event), so a retried transaction enqueues nothing twice."""
    kinds = _types_of(event, data or {})
    if not kinds:
        return 0
    subscriptions = list(
        WebhookSubscription.objects.unscoped()
        .filter(project_id=run.project_id, enabled=True)
        .only("id", "event_types")
    )
    now = timezone.now()
    rows = [
        WebhookDelivery(
            id=(delivery_id := uuid7()),
            tenant_id=run.tenant_id,
            project_id=run.project_id,
            subscription_id=subscription.id,
            webhook_id=f"msg_{delivery_id.hex}",
            source_key=f"{run.id}:{seq}:{kind}",
            event_type=kind,
            payload=_payload(run, kind, event, seq, step, data or {}),
            status="pending",
            next_attempt_at=now,
        )
        for kind in kinds
        for subscription in subscriptions
        if kind in subscription.event_types
    ]
    if rows:
        WebhookDelivery.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)
