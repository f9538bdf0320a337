"""The reconciler: what no worker is there to do. Requeue runs whose lease expired (or fail a
run whose workers kept dying), time out runs past their deadline, expire interrupts past theirs,
and dispatch claimable runs the broker may not know about.

Every worker loop and beat's ``reconcile`` task run it every few seconds; it is safe to run
anywhere, any number of times (each change is a fenced transition that a concurrent pass or a
renewed lease turns into a no-op). It sits above :mod:`runs_app.interrupts` (it expires them)
and below the workers that call it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from openrath_project import metrics
from openrath_project.errors import Conflict
from retention_app.services import retention_due
from runs_app import dispatch
from runs_app.interrupts import interrupts_expire
from runs_app.models import Run, WorkflowPlan
from runs_app.services.leases import StaleLease
from runs_app.services.runs import RunChanges, concurrent_input_repair, run_transition
from runs_app.transitions import TERMINAL
from schedules_app.services import fire_due
from webhooks_app.services import deliver_due, delivers_in_reconciler

#: A step may be re-run after its worker died at most this many times (beyond its retries).
MAX_CRASH_ATTEMPTS = 3


@dataclass
class Reconciled:
    """What one :func:`reconcile` pass did, by kind."""

    expired_leases: int = 0
    expired_interrupts: int = 0
    timed_out: int = 0
    dispatched: int = 0
    failed_crashes: int = 0
    schedules_started: int = 0
    webhooks_delivered: int = 0
    retention_passes: int = 0
    #: Concurrent input: waiting runs released late and stop requests honoured late.
    inputs_repaired: int = 0


def reconcile(*, now: datetime | None = None, dispatch_limit: int = 500) -> Reconciled:
    """Requeue runs whose lease expired, time out runs past their deadline, and dispatch
    claimable runs the broker may not know about. Safe to run anywhere, any number of times."""
    now = now or timezone.now()
    result = Reconciled()
    for run in Run.objects.filter(status="running", lease_expires_at__lt=now).only(
        "id", "attempt", "fencing_token", "next_nodes", "plan_id"
    )[:1000]:
        attempt = run.attempt + 1
        try:
            if attempt > _max_attempts(run) + MAX_CRASH_ATTEMPTS:
                run_transition(
                    run_id=run.id,
                    to="failed",
                    event="run.failed",
                    token=run.fencing_token,
                    lease_expired_before=now,
                    data={"reason": "worker lost too many times", "attempt": run.attempt},
                    changes=RunChanges(
                        error={
                            "type": "WorkerLost",
                            "message": f"the worker died {run.attempt} times",
                        }
                    ),
                )
                result.failed_crashes += 1
                metrics.lease_expired(action="failed")
            else:
                run_transition(
                    run_id=run.id,
                    to="queued",
                    event="lease.expired",
                    token=run.fencing_token,
                    lease_expired_before=now,
                    data={"attempt": run.attempt, "next_attempt": attempt},
                    changes=RunChanges(attempt=attempt),
                )
                result.expired_leases += 1
                metrics.lease_expired(action="requeued")
        except (StaleLease, Conflict):
            continue  # renewed or finished meanwhile
    for run in Run.objects.filter(deadline__lt=now).exclude(status__in=TERMINAL).only("id")[:1000]:
        try:
            run_transition(
                run_id=run.id,
                to="timed_out",
                event="run.timed_out",
                expect=["queued", "waiting", "needs_review"],
                data={"reason": "deadline passed"},
                changes=RunChanges(
                    error={"type": "DeadlineExceeded", "message": "deadline passed"}
                ),
            )
            result.timed_out += 1
        except Conflict:
            continue  # running: its worker's watchdog stops it
    result.expired_interrupts = interrupts_expire(now=now)
    # A waiting (enqueued) run whose predecessor ended without releasing it, and a run asked
    # to stop that is no longer executing (docs/concurrent-input.md).
    result.inputs_repaired = concurrent_input_repair()
    due = list(
        Run.objects.filter(status="queued")
        .filter(Q(wake_at__isnull=True) | Q(wake_at__lte=now))
        .filter(Q(dispatched_at__isnull=True) | Q(dispatched_at__lt=now - timedelta(seconds=30)))
        .order_by("-priority", "created_at")
        .values_list("id", flat=True)[:dispatch_limit]
    )
    if due:
        Run.objects.filter(id__in=due).update(dispatched_at=now)
        for run_id in due:
            dispatch.send(run_id)
        result.dispatched = len(due)
    # Due schedule ticks (each at most once, however many reconcilers run); their runs are
    # dispatched on commit like any other. Never at a later "now" than the clock's: a caller
    # moving time forward to expire leases must not fire tomorrow's ticks today.
    result.schedules_started = fire_due(now=min(now, timezone.now())).started
    # Due webhook deliveries (bounded by WEBHOOK_TICK_LIMIT / WEBHOOK_TICK_SECONDS; no lock held),
    # only without Celery: with it they run on their own queue (webhooks_app.tasks.deliver).
    if delivers_in_reconciler():
        result.webhooks_delivered = deliver_due(now=now).succeeded
    # Due retention passes (bounded by RETENTION_TICK_SECONDS; each policy claimed once), at
    # the clock's time for the same reason as schedules.
    result.retention_passes = retention_due(now=min(now, timezone.now())).passes
    return result


def _max_attempts(run: Run) -> int:
    """The declared attempts of the step the run would run next (1 when the plan has no such
    step)."""
    plan = WorkflowPlan.objects.filter(hash=run.plan_id).values_list("definition", flat=True)
    definition = plan.first() or {}
    nodes = {n["id"]: n for n in definition.get("nodes", [])}
    node = nodes.get(run.next_nodes[0]) if run.next_nodes else None
    return int(node["retry"]["max_attempts"]) if node else 1
