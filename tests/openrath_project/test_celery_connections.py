"""A Celery worker keeps its database connection from one task to the next.

Celery's Django fixup closes every connection before and after every task unless
``CELERY_DB_REUSE_MAX`` is set; then each run a Celery worker executed opened a new PostgreSQL
backend and prepared its claim and step statements again. The settings set it, and
``openrath_project.celery`` closes obsolete or broken connections at a task's boundaries, as
Django does around a request.
"""

from __future__ import annotations

import time

import pytest
from celery import signals
from celery.fixups.django import DjangoWorkerFixup
from django.db import connection

from openrath_project.celery import app
from runs_app.tasks import execute_run
from tests.support import require_postgres


def _task_boundaries(fixup: DjangoWorkerFixup, sender: object) -> None:
    """What a worker does around one task: the fixup's handlers and every connected receiver."""
    fixup.on_task_prerun(sender=sender)
    signals.task_prerun.send(sender=sender, task_id="t", task=sender, args=(), kwargs={})
    fixup.on_task_postrun(sender=sender)
    signals.task_postrun.send(sender=sender, task_id="t", task=sender, args=(), kwargs={})


class _EagerTask:
    """A task run eagerly inside its caller (``apply()``, ``task_always_eager``)."""

    class request:  # noqa: N801 - Celery's attribute
        is_eager = True


@pytest.fixture(autouse=True)
def persistent_connections():
    """A worker's connections as in production (the test settings close them at once)."""
    connection.close()
    saved = connection.settings_dict["CONN_MAX_AGE"]
    connection.settings_dict["CONN_MAX_AGE"] = 300
    yield
    connection.close()
    connection.settings_dict["CONN_MAX_AGE"] = saved


def _open_connection() -> object:
    connection.ensure_connection()
    return connection.connection


@pytest.mark.django_db(transaction=True)
def test_tasks_reuse_the_connection():
    fixup = DjangoWorkerFixup(app)
    assert fixup.db_reuse_max, "settings.CELERY_DB_REUSE_MAX does not reach Celery's fixup"
    opened = _open_connection()
    for _ in range(5):
        _task_boundaries(fixup, execute_run)
        with connection.cursor() as cursor:  # the task's own query
            cursor.execute("SELECT 1")
    assert connection.connection is opened

    # Without the setting the fixup closes it around every task (what this test guards).
    fixup.db_reuse_max = None
    _task_boundaries(fixup, execute_run)
    assert connection.connection is None


@pytest.mark.django_db(transaction=True)
def test_an_obsolete_connection_is_closed_at_a_task_boundary():
    fixup = DjangoWorkerFixup(app)
    _open_connection()
    connection.close_at = time.monotonic() - 1  # past CONN_MAX_AGE
    _task_boundaries(fixup, execute_run)
    assert connection.connection is None
    with connection.cursor() as cursor:  # the next task opens a fresh one
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


@pytest.mark.django_db(transaction=True)
def test_a_broken_connection_is_closed_at_a_task_boundary():
    require_postgres()  # Django's SQLite backend reports every connection usable
    fixup = DjangoWorkerFixup(app)
    _open_connection()
    connection.errors_occurred = True
    connection.connection.close()  # as if the server went away during the task
    _task_boundaries(fixup, execute_run)
    assert connection.connection is None


@pytest.mark.django_db(transaction=True)
def test_an_eager_task_leaves_its_callers_connection_alone():
    eager = _EagerTask()
    opened = _open_connection()
    connection.close_at = time.monotonic() - 1  # obsolete, but the caller is using it
    signals.task_prerun.send(sender=eager, task_id="t", task=eager, args=(), kwargs={})
    signals.task_postrun.send(sender=eager, task_id="t", task=eager, args=(), kwargs={})
    assert connection.connection is opened
