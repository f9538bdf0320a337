"""Webhooks: per-project subscriptions to run, interrupt and effect events, signed per the
Standard Webhooks convention and delivered from an outbox.

An outbox row (:class:`webhooks_app.models.WebhookDelivery`) is written by
:func:`webhooks_app.outbox.record_run_event` inside the transaction that appends the run event,
so a rolled-back change sends nothing and a committed one is never lost. The reconciler delivers
due rows (:func:`webhooks_app.services.deliver_due`): claimed with ``SKIP LOCKED`` in bounded
batches, POSTed with no lock or transaction open, retried with exponential backoff and jitter as
durable timers (``next_attempt_at``), each attempt logged. Target rules (no loopback, private,
link-local or multicast addresses unless the operator allows them) live in
:mod:`webhooks_app.targets`, plain Python.
"""
