"""Run hints with Celery: published after the commit by the process's sender thread, on the
committing thread's Celery app and in its context, and a hint the broker never got is re-sent by
the reconciler (runs_app.dispatch). Against a real Redis broker."""

from __future__ import annotations

import contextvars
import threading
import uuid
from typing import Any

import pytest
from celery import Celery, current_app
from celery.signals import before_task_publish
from django.db import transaction
from django.test import override_settings

from runs_app import dispatch, reconciler
from runs_app.models import Run
from runs_app.services import run_create
from tests.support import require_redis

REQUEST_MARK: contextvars.ContextVar[str] = contextvars.ContextVar("request_mark", default="")


@pytest.fixture
def broker_app():
    """A Celery app on the test Redis, current on this thread for the test."""
    url = require_redis()
    app = Celery(f"dispatch-test-{uuid.uuid4().hex[:8]}", broker=url, set_as_current=False)
    app.conf.task_default_queue = f"dispatch-test-{uuid.uuid4().hex[:8]}"
    previous = current_app._get_current_object()
    app.set_current()
    try:
        yield app
    finally:
        previous.set_current()
        with app.connection_for_write() as connection:
            connection.default_channel.queue_delete(app.conf.task_default_queue)
        app.close()


def _published(app: Celery, count: int) -> list[dict[str, Any]]:
    """The next ``count`` task messages on the app's queue (waiting up to 10 s for each)."""
    got = []
    with app.connection_for_read() as connection:
        queue = connection.SimpleQueue(app.conf.task_default_queue, no_ack=True)
        try:
            for _ in range(count):
                message = queue.get(timeout=10)
                got.append({"task": message.headers["task"], "args": message.headers["argsrepr"]})
        finally:
            queue.close()
    return got


@pytest.fixture
def publishes():
    """(thread name, REQUEST_MARK, run id) of each execute_run publish."""
    seen: list[tuple[str, str, str]] = []
    done = threading.Event()

    def record(sender: str, headers: dict[str, Any], **kwargs: Any) -> None:
        if sender == dispatch.EXECUTE_RUN_TASK:
            seen.append((threading.current_thread().name, REQUEST_MARK.get(), headers["argsrepr"]))
            done.set()

    before_task_publish.connect(record, weak=False)
    try:
        yield seen, done
    finally:
        before_task_publish.disconnect(record)


@override_settings(OPENRATH_DISPATCH="celery")
@pytest.mark.django_db(transaction=True)
def test_a_committed_hint_is_published_by_the_sender_thread_in_the_committer_context(
    broker_app, publishes
):
    seen, done = publishes
    run_id = uuid.uuid4()
    token = REQUEST_MARK.set("request-1")
    try:
        with transaction.atomic():
            dispatch.on_commit(run_id)
            assert seen == []  # nothing before the commit
        committer = threading.current_thread().name
    finally:
        REQUEST_MARK.reset(token)
    assert done.wait(10)
    ((thread, mark, args),) = seen
    assert thread == "openrath-dispatch" != committer
    assert mark == "request-1"
    assert args == repr([str(run_id)])
    assert _published(broker_app, 1) == [
        {"task": dispatch.EXECUTE_RUN_TASK, "args": repr([str(run_id)])}
    ]


@override_settings(OPENRATH_DISPATCH="celery")
@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transaction_sends_no_hint(broker_app, publishes):
    seen, done = publishes

    def hint_then_fail() -> None:
        with transaction.atomic():
            dispatch.on_commit(uuid.uuid4())
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        hint_then_fail()
    dispatch.on_commit(uuid.uuid4())  # a later hint, so the sender has had its turn
    assert done.wait(10)
    assert len(seen) == 1


@override_settings(OPENRATH_DISPATCH="celery")
@pytest.mark.django_db(transaction=True)
def test_a_hint_the_broker_never_got_is_sent_again_by_the_reconciler(
    broker_app, publishes, project, registry
):
    """The run's hint is lost (its app's broker does not answer): the run stays queued and
    undispatched, and the next reconciler pass publishes it."""
    seen, done = publishes
    down = Celery("dispatch-test-down", broker="redis://127.0.0.1:1/0", set_as_current=False)
    down.conf.broker_connection_timeout = 0.5
    down.set_current()
    try:
        run, created = run_create(project=project, workflow=registry.get("linear"))
        assert created
        assert done.wait(10)  # the sender tried, on the app that was current
    finally:
        broker_app.set_current()
        down.close()
    stored = Run.objects.get(id=run.id)
    assert (stored.status, stored.dispatched_at) == ("queued", None)
    seen.clear()
    done.clear()
    result = reconciler.reconcile()
    assert result.dispatched >= 1
    assert (threading.current_thread().name, "", repr([str(run.id)])) in seen
    assert Run.objects.get(id=run.id).dispatched_at is not None
    messages = _published(broker_app, result.dispatched)
    assert {"task": dispatch.EXECUTE_RUN_TASK, "args": repr([str(run.id)])} in messages
