"""Celery app: ``celery -A openrath_project worker|beat``. Redis is the broker in production."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import beat_init, worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openrath_project.settings")

app = Celery("openrath")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _refuse_unmigrated_worker(**kwargs: Any) -> None:
    from openrath_project.startup import require_migrations_applied

    require_migrations_applied("the Celery worker")


@beat_init.connect
def _refuse_unmigrated_beat(**kwargs: Any) -> None:
    from openrath_project.startup import require_migrations_applied

    require_migrations_applied("Celery beat")
