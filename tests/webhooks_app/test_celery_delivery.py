"""Deliveries off the reconciler's pass: with Celery (``OPENRATH_DISPATCH=celery``) the
reconciler leaves them to the delivery task on the ``webhooks`` queue, which beat sends every few
seconds; without Celery (embedded threads, database workers) the reconciler delivers them.

The production-profile test starts a real Celery worker (with embedded beat) that consumes the
``webhooks`` queue only, on the test database and the test Redis: the event reaches the receiver
on 127.0.0.1 although no reconcile task runs anywhere.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from standardwebhooks.webhooks import Webhook

from runs_app import reconciler
from runs_app.services import run_cancel
from tests.factories.runs import RunFactory
from tests.support import REPO, require_postgres, require_redis
from webhooks_app import DELIVERY_QUEUE, services
from webhooks_app.models import WebhookAttempt, WebhookDelivery

#: The key the signing secrets are sealed with, the same in this process and the worker.
SEAL_KEY = "webhook-celery-test-" + "k" * 40


def _subscribe_and_cancel(project: Any, url: str) -> tuple[str, WebhookDelivery]:
    _, secret = services.webhook_create(
        project=project, url=url, event_types=["run.cancelled"], created_by="test"
    )
    run_cancel(run=RunFactory(project=project), reason="not needed")
    return secret, WebhookDelivery.objects.get()


@pytest.mark.django_db
@pytest.mark.parametrize("dispatch", ["local", "none"])
def test_without_celery_the_reconciler_delivers(webhook_settings, receiver, project, dispatch):
    webhook_settings.OPENRATH_DISPATCH = dispatch
    assert services.delivers_in_reconciler()
    _, delivery = _subscribe_and_cancel(project, receiver.url)
    assert reconciler.reconcile().webhooks_delivered == 1
    assert receiver.ids() == [delivery.webhook_id]


@pytest.mark.django_db
def test_with_celery_the_reconciler_leaves_deliveries_to_the_task(
    webhook_settings, receiver, project
):
    webhook_settings.OPENRATH_DISPATCH = "celery"
    assert not services.delivers_in_reconciler()
    receiver.mode = "hang"  # a receiver that never answers cannot hold up the pass
    _, delivery = _subscribe_and_cancel(project, receiver.url)
    assert reconciler.reconcile().webhooks_delivered == 0
    assert receiver.requests == []
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("pending", 0)


def _worker_env(tmp: Path, redis_url: str) -> dict[str, str]:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    database_url = (
        f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENRATH_", "DATABASE_", "REDIS_", "S3_", "WEBHOOK_"))
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
            "PYTHONPATH": str(REPO),
            "OPENRATH_PROFILE": "production",
            "OPENRATH_DISPATCH": "celery",
            "OPENRATH_DATA_DIR": str(tmp / "data"),
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "SECRET_KEY": "celery-webhooks-test-" + "abcdefghijklmnopqrstuvwxyz0123456789",
            "ALLOWED_HOSTS": "127.0.0.1",
            # Never reached: the test stores no artifact.
            "S3_BUCKET": "artifacts",
            "S3_ACCESS_KEY_ID": "id",
            "S3_SECRET_ACCESS_KEY": "secret",
            "S3_ENDPOINT_URL": "http://127.0.0.1:9",
            "WEBHOOK_ALLOW_PRIVATE_TARGETS": "true",
            "WEBHOOK_SECRET_KEY": SEAL_KEY,
            "WEBHOOK_TIMEOUT_SECONDS": "5",
            "LOG_LEVEL": "INFO",
        }
    )
    return env


def _start_worker(tmp: Path, redis_url: str) -> subprocess.Popen[bytes]:
    log = open(tmp / "worker.log", "wb")  # noqa: SIM115 - closed with the process
    args = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "openrath_project",
        "worker",
        "-Q",
        DELIVERY_QUEUE,  # not the default queue: no reconcile task runs in this test
        "--pool",
        "prefork",
        "--concurrency",
        "1",
        "--loglevel",
        "INFO",
        "-n",
        "webhooks-test@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-B",
        "--schedule",
        str(tmp / "beat-schedule"),
    ]
    return subprocess.Popen(
        args,
        cwd=REPO,
        env=_worker_env(tmp, redis_url),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_production_a_delivery_goes_through_the_webhooks_queue(
    transactional_db, webhook_settings, receiver, project, tmp_path
):
    require_postgres()
    redis_url = require_redis()
    webhook_settings.WEBHOOK_SECRET_KEY = SEAL_KEY
    secret, delivery = _subscribe_and_cancel(project, receiver.url)
    worker = _start_worker(tmp_path, redis_url)
    try:
        deadline = time.monotonic() + 120  # start-up on a loaded machine, then beat's first send
        while not receiver.ids() and time.monotonic() < deadline:
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-4000:]
            time.sleep(0.2)
        delivered = receiver.ids()
        assert delivered == [delivery.webhook_id], (tmp_path / "worker.log").read_text()[-4000:]
        [got] = receiver.requests
        body = Webhook(secret).verify(got.body, got.headers)
        assert body["type"] == "run.cancelled"
        deadline = time.monotonic() + 30  # the outcome is written after the POST returns
        while time.monotonic() < deadline:
            delivery.refresh_from_db()
            if delivery.status != "pending":
                break
            time.sleep(0.2)
        assert (delivery.status, delivery.attempts, delivery.last_status_code) == (
            "succeeded",
            1,
            204,
        )
        [attempt] = WebhookAttempt.objects.filter(delivery=delivery)
        assert (attempt.number, attempt.succeeded) == (1, True)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.wait(timeout=10)
    log = (tmp_path / "worker.log").read_text()
    assert "Task webhooks_app.tasks.deliver[" in log  # the task ran it, in the worker
    assert "Task runs_app.tasks.reconcile[" not in log  # and no reconciler pass did
