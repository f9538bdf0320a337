"""The Celery task of webhook deliveries: one :func:`webhooks_app.services.deliver_due` pass.

Beat sends it every ``DELIVER_EVERY_SECONDS`` to its own queue (``webhooks``), so deliveries
never run inside the reconciler's pass where there is Celery: a slow or hanging receiver holds
up a webhooks worker, not the requeueing of expired leases. Passes may overlap (several
workers, or a pass longer than the interval): each claims with ``SKIP LOCKED``.
"""

from __future__ import annotations

from celery import shared_task

from webhooks_app import DELIVER_TASK, DELIVERY_QUEUE
from webhooks_app.services import deliver_due


@shared_task(name=DELIVER_TASK, queue=DELIVERY_QUEUE, ignore_result=True)
def deliver() -> dict[str, int]:
    """Attempt the due deliveries (bounded by ``WEBHOOK_TICK_LIMIT`` / ``WEBHOOK_TICK_SECONDS``)."""
    tick = deliver_due()
    return {
        "succeeded": tick.succeeded,
        "failed": tick.failed,
        "dead": tick.dead,
        "disabled": len(tick.disabled),
    }
