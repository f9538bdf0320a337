"""Celery tasks: thin, id-based, safe to run twice (only the lease holder executes)."""

from __future__ import annotations

import logging
import uuid

from celery import shared_task

from runs_app import dispatch, heartbeats, reconciler
from runs_app.executor import run_one
from runs_app.registration import workflows
from runs_app.worker import worker_name

logger = logging.getLogger(__name__)


@shared_task(name=dispatch.EXECUTE_RUN_TASK, acks_late=True, ignore_result=True)
def execute_run(run_id: str) -> str:
    """Execute the next claimable run in the fair order (``runs_app.services.leases``): the
    message says that a run became claimable and names it, but which run a worker takes is the
    claim's choice, as for the database worker, so a tenant with a deep backlog does not get
    every worker because its messages came first. Each queued run was sent one message, and
    each message claims at most one run, so every run is claimed; a message that finds nothing
    claimable (a duplicate delivery, or every queued run's tenant or project at its running
    limit) is a no-op, and the reconciler sends the runs still queued again."""
    uuid.UUID(run_id)  # a malformed message fails here, as before
    outcome = run_one(worker_name("celery"), registry=workflows(), process_mode=True)
    return outcome.status if outcome is not None else "not-claimable"


@shared_task(name="runs_app.tasks.reconcile", ignore_result=True)
def reconcile() -> dict[str, int]:
    """Requeue expired leases, time out past deadlines, dispatch claimable runs."""
    # Beat sends this every 5 s: the Celery worker executing it is consuming the queue.
    heartbeats.record(worker_name("celery"))
    result = reconciler.reconcile()
    return {
        "expired_leases": result.expired_leases,
        "timed_out": result.timed_out,
        "dispatched": result.dispatched,
        "failed_crashes": result.failed_crashes,
    }
