"""A fired tick's run actually runs: the worker loop (what the embedded profile's thread and
``run_worker`` execute) reconciles, the reconciler fires the schedule, the worker runs the run."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from runs_app import worker as worker_module
from runs_app.models import Run
from runs_app.worker import Worker
from schedules_app import services
from schedules_app.models import ScheduleFire

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_worker_loop_fires_a_due_schedule_and_runs_its_run(project, registry, monkeypatch):
    monkeypatch.setattr(worker_module, "workflows", lambda: registry)
    # Created 20 s ago with a 10 s interval: the tick of 10 s ago is due (within the grace).
    created = timezone.now() - timedelta(seconds=20)
    schedule = services.schedule_create(
        project=project,
        workflow="sched-tally",
        kind="interval",
        interval_seconds=10,
        input={"n": 1},
        now=created,
    )
    worker = Worker(name="schedules-test", poll_seconds=0.05, reconcile_every=0.2)
    thread = threading.Thread(target=worker.loop, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 120  # generous: only bounds a run that never settles
        run = None
        while time.monotonic() < deadline:
            runs = Run.objects.filter(created_by=f"schedule:{schedule.id}")
            run = runs.order_by("created_at").first()
            if run is not None and run.status == "succeeded":
                break
            time.sleep(0.05)
    finally:
        worker.stop()
        thread.join(timeout=60)
    assert run is not None
    assert run.status == "succeeded"
    assert run.output == {"n": 2}
    first = ScheduleFire.objects.filter(schedule=schedule).order_by("tick").first()
    assert first is not None
    assert (first.outcome, first.run_id) == ("started", run.id)
