"""Telling workers that a run is claimable: a hint, never the source of truth.

``on_commit(run_id)`` schedules the hint for after the current transaction commits. Where the
hint goes depends on ``OPENRATH_DISPATCH``:

* ``celery`` (production): the ``execute_run`` task on the broker, by name, with a short publish
  timeout; if the broker is down the hint is dropped (logged) and the database-claiming worker
  and the reconciler pick the run up anyway;
* ``local`` (embedded): wake the in-process worker threads;
* ``none``: nothing (tests drive workers themselves).

With ``celery`` a committed transaction's hints are published by one sender thread per
process, not on the thread that committed: a request answers without waiting for the broker's
round trip. A hint lost on the way (the broker down, the process ended before its sender
published it) is what the reconciler already repairs: every pass re-sends each claimable
queued run never dispatched by it, or not for 30 s (``runs_app.reconciler``), and the
database-claiming worker claims without hints. The sender runs each hint in the context of the
code that scheduled it, so Celery's trace instrumentation still parents the publish span under
the request's.

Duplicate hints are harmless: only the lease holder executes a run. This module is the lowest
layer of runs_app: it sends the task by name, so it imports nothing that executes a run.
"""

from __future__ import annotations

import contextvars
import logging
import os
import queue
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction

if TYPE_CHECKING:
    from celery import Celery

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
    """Hint ``run_id`` once the current transaction commits (the broker's publish on this
    process's sender thread, see the module docstring)."""
    transaction.on_commit(lambda: hint(run_id))


def hint(run_id: uuid.UUID) -> None:
    """Wake the local listeners now and queue the broker's publish for the sender thread."""
    _notify_local(run_id)
    if settings.OPENRATH_DISPATCH == "celery":
        from celery import current_app

        # Celery's current app is per thread: the sender publishes with this thread's.
        _sender().put(contextvars.copy_context(), current_app._get_current_object(), run_id)


def send(run_id: uuid.UUID) -> None:
    """Hint ``run_id`` on this thread (the reconciler's re-sends)."""
    _notify_local(run_id)
    if settings.OPENRATH_DISPATCH == "celery":
        _publish(run_id)


def _notify_local(run_id: uuid.UUID) -> None:
    with _lock:
        listeners = list(_local_listeners)
    for listener in listeners:
        try:
            listener(run_id)
        except Exception:
            logger.exception("local dispatch listener failed")


def _publish(run_id: uuid.UUID, app: Celery | None = None) -> None:
    try:
        if app is None:
            from celery import current_app

            app = current_app
        app.send_task(
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


class _Sender:
    """One daemon thread that publishes the queued hints in order, each in the context (trace,
    log fields) of the code that queued it. A hint still queued when the process ends is lost,
    which the reconciler repairs (module docstring)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._queue: queue.SimpleQueue[tuple[contextvars.Context, Celery, uuid.UUID]] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._loop, name="openrath-dispatch", daemon=True)
        self._thread.start()

    def put(self, context: contextvars.Context, app: Celery, run_id: uuid.UUID) -> None:
        self._queue.put((context, app, run_id))

    def _loop(self) -> None:
        while True:
            context, app, run_id = self._queue.get()
            try:
                context.run(_publish, run_id, app)
            except Exception:  # _publish logs the broker's errors; this keeps the thread alive
                logger.exception("dispatching run %s failed", run_id)


_sender_instance: _Sender | None = None


def _sender() -> _Sender:
    """This process's sender, started on first use (again in a forked child: the parent's
    thread does not exist there)."""
    global _sender_instance
    current = _sender_instance
    if current is None or current.pid != os.getpid():
        with _lock:
            current = _sender_instance
            if current is None or current.pid != os.getpid():
                current = _sender_instance = _Sender()
    return current
