"""Celery app: ``celery -A openrath_project worker|beat``. Redis is the broker in production."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import beat_init, task_postrun, task_prerun, worker_init, worker_process_init
from django.db import close_old_connections

from openrath_project.celery_metrics import install_metrics_option

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openrath_project.settings")

app = Celery("openrath")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
install_metrics_option(app)  # worker --metrics-port


@worker_init.connect
def _install_redis_acks(**kwargs: Any) -> None:
    # Before the consumer opens its channel: kombu's Redis channels get acks that free the
    # prefetch slot even when Redis fails (openrath_project/celery_transport.py; without it a
    # worker that lost its slots to failed acks during a partition from Redis never consumed
    # again). A kombu whose internals changed is refused rather than run unfixed.
    from openrath_project.celery_transport import install

    try:
        install()
    except RuntimeError as exc:
        raise SystemExit(f"the Celery worker cannot start: {exc}") from None


@task_prerun.connect
@task_postrun.connect
def _close_old_connections(sender: Any = None, **kwargs: Any) -> None:
    # A task is to a worker what a request is to the web tier: at its boundaries, close the
    # connections past CONN_MAX_AGE or broken (an error, a failed health check), as Django does
    # around a request, and keep the others (settings.CELERY_DB_REUSE_MAX: Celery's own fixup
    # no longer closes them all around every task). Not for a task run eagerly inside its
    # caller, whose transaction may be open (the fixup skips those too).
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    close_old_connections()


@worker_init.connect
def _refuse_unmigrated_worker(**kwargs: Any) -> None:
    from openrath_project.startup import require_migrations_applied, require_workflow_modules

    require_workflow_modules("the Celery worker")  # it could execute none of their runs
    require_migrations_applied("the Celery worker")


@worker_init.connect
@worker_process_init.connect
def _install_stream_publisher(**kwargs: Any) -> None:
    # Committed chunks and run events become WebSocket hints (Redis layer only: an in-memory
    # layer in a worker reaches no consumer). Idempotent; a prefork child starts its own thread.
    from openrath_project.publisher import install_publisher

    install_publisher(shared_layer_only=True)


@worker_process_init.connect
def _start_tracing(**kwargs: Any) -> None:
    # Each prefork child: a no-op when the parent set tracing up (the SDK's export thread is
    # restarted after the fork); off unless OTEL_EXPORTER_OTLP_ENDPOINT is set.
    from openrath_project.tracing_setup import configure_tracing

    configure_tracing("celery-worker")


@beat_init.connect
def _refuse_unmigrated_beat(**kwargs: Any) -> None:
    from openrath_project.startup import require_migrations_applied

    require_migrations_applied("Celery beat")


@app.on_after_configure.connect
def _schedule_webhook_deliveries(sender: Celery, source: Any, **kwargs: Any) -> None:
    # Webhook deliveries run on their own queue, sent by beat every few seconds (not inside the
    # reconcile task: a slow receiver must not lengthen its pass). A worker started without -Q
    # consumes the default queue and this one; -Q webhooks / -Q celery split them between
    # workers (docs/operations.md, "Webhooks"). A pass that waited longer than five intervals
    # is dropped (the next one does its work).
    from kombu import Exchange, Queue

    from webhooks_app import DELIVER_EVERY_SECONDS, DELIVER_TASK, DELIVERY_QUEUE

    if not source.get("task_queues"):
        default = source.get("task_default_queue") or "celery"
        source["task_queues"] = tuple(
            Queue(name, Exchange(name), routing_key=name) for name in (default, DELIVERY_QUEUE)
        )
    source["beat_schedule"] = {
        **(source.get("beat_schedule") or {}),
        "openrath-webhooks": {
            "task": DELIVER_TASK,
            "schedule": DELIVER_EVERY_SECONDS,
            "options": {"queue": DELIVERY_QUEUE, "expires": 5 * DELIVER_EVERY_SECONDS},
        },
    }
