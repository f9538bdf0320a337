"""Celery app: ``celery -A openrath_project worker|beat``. Redis is the broker in production."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import beat_init, worker_init, worker_process_init

from openrath_project.celery_metrics import install_metrics_option

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openrath_project.settings")

app = Celery("openrath")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
install_metrics_option(app)  # worker --metrics-port


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
