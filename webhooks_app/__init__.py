"""Webhooks: per-project subscriptions to run, interrupt and effect events, signed per the
Standard Webhooks convention and delivered from an outbox.

An outbox row (:class:`webhooks_app.models.WebhookDelivery`) is written by
:func:`webhooks_app.outbox.record_run_event` inside the transaction that appends the run event,
so a rolled-back change sends nothing and a committed one is never lost. Due rows are delivered
by :func:`webhooks_app.services.deliver_due` (the Celery task :data:`DELIVER_TASK` on the
:data:`DELIVERY_QUEUE` queue with Celery, the reconciler's pass without it): claimed with
``SKIP LOCKED`` in bounded batches, POSTed with no lock or transaction open, retried with
exponential backoff and jitter as durable timers (``next_attempt_at``), each attempt logged.
Target rules (no loopback, private, link-local or multicast addresses unless the operator
allows them) live in :mod:`webhooks_app.targets`, plain Python.
"""

#: The Celery queue of webhook deliveries: beat sends :data:`DELIVER_TASK` to it every few
#: seconds, and a worker started with ``-Q webhooks`` (or ``-Q celery,webhooks``) consumes it.
DELIVERY_QUEUE = "webhooks"
#: The name of the Celery task that runs one delivery pass (``webhooks_app.tasks.deliver``).
DELIVER_TASK = "webhooks_app.tasks.deliver"
#: Seconds between two delivery passes that beat sends.
DELIVER_EVERY_SECONDS = 2.0
