"""Telling workers that a run is claimable: a hint, never the source of truth.

``on_commit(run_id)`` schedules :func:`send` after the current transaction commits. Where the
hint goes depends on ``OPENRATH_DISPATCH``:

* ``celery`` (production): the ``execute_run`` task on the broker, by name, with a short publish
  timeout; if the broker is down the hint is dropped (logged) and the database-claiming worker
  and the reconciler pick the run up anyway;
* ``local`` (embedded): wake the in-process worker threads;
* ``none``: nothing (tests drive workers themselves).

Duplicate hints are harmless: only the lease holder executes a run. This module is the lowest
layer of runs_app: it sends the task by name, so it imports nothing that executes a run.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

from django.conf import settings
from django.db import transaction

logger = logging.getLogger(__name__)

#: The Celery task that claims and executes one run (runs_app.tasks).
EXECUTE_RUN_TASK = "runs_app.tasks.execute_run"

_local_listeners: list[Callable[[uuid.UUID], None]] = []
_lock = threading.Lock()


def add_local_listener(listener: Callable[[uuid.UUID], None]) -> Callable[[], None]:
    with _lock:
        _local_listeners.append(listener)

    def remove() -> None:
        with _lock:
            if listener in _local_listeners:
                _local_listeners.remove(listener)

    return remove


def on_commit(run_id: uuid.UUID) -> None:
    transaction.on_commit(lambda: send(run_id))


def send(run_id: uuid.UUID) -> None:
    with _lock:
        listeners = list(_local_listeners)
    for listener in listeners:
        try:
            listener(run_id)
        except Exception:
            logger.exception("local dispatch listener failed")
    if settings.OPENRATH_DISPATCH != "celery":
        return
    try:
        from celery import current_app

        current_app.send_task(
            EXECUTE_RUN_TASK,
            args=[str(run_id)],
            retry=True,
            retry_policy={
                "max_retries": 1,
                "interval_start": 0,
                "interval_step": 0.2,
                "interval_max": 0.2,
            },
        )
    except Exception as exc:  # the broker is an accelerator: the database worker catches up
        logger.warning("could not dispatch run %s to the broker: %s", run_id, exc)
