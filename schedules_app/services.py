"""Schedule writes: create, change, pause, resume, delete, and :func:`fire_due` (the reconciler's).

At most once per tick: firing a tick inserts its :class:`ScheduleFire` row, unique per
(schedule, tick), in the same transaction (a savepoint) as the run it starts. A second
reconciler firing the same tick meets the constraint and starts nothing; a rolled-back run
leaves no fire row, so the tick is not lost either. Due schedules are picked with
``SELECT ... FOR UPDATE SKIP LOCKED`` (on PostgreSQL), so concurrent reconcilers share the
batch instead of queueing behind each other; the row lock lasts one short transaction (the
schedule's due ticks and their runs), never across a reconciler pass.

Locking: the schedule row first, then (cancel_previous) the previous run's row through
``run_cancel``; the API's writes lock the schedule row only.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from openrath_project.errors import Conflict, DomainError, ValidationFailed
from openrath_project.tenancy.models import Project
from runs_app import registration
from runs_app import services as run_services
from runs_app.models import Run
from runs_app.plan import check_input
from runs_app.state_delta import check_json_state
from runs_app.transitions import ACTIVE
from schedules_app.models import Schedule, ScheduleFire
from schedules_app.timing import (
    CATCHUP_POLICIES,
    MAX_CATCHUP_LIMIT,
    OVERLAP_POLICIES,
    Timing,
    plan_firing,
)

logger = logging.getLogger(__name__)

#: Most ticks an ``overlap=queue`` schedule keeps waiting behind its active run; a tick beyond
#: is recorded ``skipped`` (reason ``queue_full``).
MAX_QUEUED_FIRES = 10
#: How many of a schedule's latest runs an overlap check looks at.
RECENT_RUNS = 20
#: Fields a PATCH may change (the project is fixed at creation).
CHANGEABLE = frozenset(
    {
        "name",
        "workflow",
        "input",
        "user_message",
        "priority",
        "kind",
        "cron",
        "interval_seconds",
        "timezone",
        "start_at",
        "catchup",
        "catchup_limit",
        "overlap",
    }
)


def timing_of(schedule: Schedule) -> Timing:
    """The schedule's tick rule."""
    return Timing(
        kind=schedule.kind,
        start=schedule.start_at,
        cron=schedule.cron,
        interval_seconds=schedule.interval_seconds,
        timezone=schedule.timezone,
    )


def _check_policies(*, catchup: str, catchup_limit: int, overlap: str) -> None:
    if catchup not in CATCHUP_POLICIES:
        raise ValidationFailed(
            f"catchup must be one of {', '.join(CATCHUP_POLICIES)}",
            details={"catchup": ["unknown policy"]},
        )
    if not 1 <= catchup_limit <= MAX_CATCHUP_LIMIT:
        raise ValidationFailed(
            f"catchup_limit must be between 1 and {MAX_CATCHUP_LIMIT}",
            details={"catchup_limit": ["out of range"]},
        )
    if overlap not in OVERLAP_POLICIES:
        raise ValidationFailed(
            f"overlap must be one of {', '.join(OVERLAP_POLICIES)}",
            details={"overlap": ["unknown policy"]},
        )


def _check_run_request(*, workflow: str, state: Any, priority: int) -> dict[str, Any]:
    """What a run of ``workflow`` with ``state`` would be refused for at creation (the checks
    ``run_create`` applies to a client's request), found now rather than at the first tick."""
    registered = registration.workflows().get(workflow)  # UnknownWorkflow: a 400
    initial = check_json_state(state if state is not None else {}, where="input")
    try:
        check_input(registered.plan, initial)
    except ValidationFailed as exc:
        # The run calls it "state"; here the field is "input".
        raise ValidationFailed(
            exc.message.replace("state", "input", 1),
            details={_as_input(k): v for k, v in exc.details.items()},
        ) from exc
    if not -100 <= priority <= 100:
        raise ValidationFailed(
            "priority must be between -100 and 100",
            details={"priority": ["out of range -100..100"]},
        )
    return initial


def _as_input(key: str) -> str:
    return "input" + key[len("state") :] if key.startswith("state") else key


def _checked(schedule: Schedule, *, now: datetime) -> None:
    """Validate the schedule's definition in place and set its ``next_fire_at`` from ``now``."""
    timing = timing_of(schedule).check()
    schedule.cron = timing.cron
    _check_policies(
        catchup=schedule.catchup, catchup_limit=schedule.catchup_limit, overlap=schedule.overlap
    )
    schedule.input = _check_run_request(
        workflow=schedule.workflow, state=schedule.input, priority=schedule.priority
    )
    schedule.next_fire_at = timing.next_after(now)


def schedule_create(
    *,
    project: Project,
    workflow: str,
    kind: str,
    cron: str = "",
    interval_seconds: int | None = None,
    timezone_name: str = "UTC",
    start_at: datetime | None = None,
    input: dict[str, Any] | None = None,  # noqa: A002 - the API field's name
    user_message: str = "",
    priority: int = 0,
    catchup: str = "skip",
    catchup_limit: int = 10,
    overlap: str = "skip",
    paused: bool = False,
    name: str = "",
    created_by: str = "",
    now: datetime | None = None,
) -> Schedule:
    """Create a schedule; ``ValidationFailed`` naming the field for a bad cron expression, time
    zone, interval, policy, workflow or input. Without ``start_at`` a cron schedule fires from
    now on and an interval schedule one interval from now."""
    now = now or timezone.now()
    if start_at is None:
        start_at = now + timedelta(seconds=interval_seconds or 0) if kind == "interval" else now
    schedule = Schedule(
        tenant_id=project.tenant_id,
        project=project,
        name=name,
        workflow=workflow,
        input=input if input is not None else {},
        user_message=user_message,
        priority=priority,
        kind=kind,
        cron=cron,
        interval_seconds=interval_seconds,
        timezone=timezone_name,
        start_at=start_at,
        catchup=catchup,
        catchup_limit=catchup_limit,
        overlap=overlap,
        paused=paused,
        created_by=created_by,
    )
    _checked(schedule, now=now)
    schedule.save()
    return schedule


def schedule_update(
    *, schedule: Schedule, changes: dict[str, Any], now: datetime | None = None
) -> Schedule:
    """Change the fields in ``changes`` (a subset of :data:`CHANGEABLE`) and revalidate the
    whole definition. The next tick is recomputed from now (a changed rule never fires ticks
    of the old one); queued ticks stay queued."""
    unknown = sorted(set(changes) - CHANGEABLE)
    if unknown:
        raise ValidationFailed(
            f"these fields cannot be changed: {', '.join(unknown)}",
            details={name: ["cannot be changed"] for name in unknown},
        )
    now = now or timezone.now()
    with transaction.atomic():
        locked = Schedule.objects.select_for_update().get(id=schedule.id)
        for name, value in changes.items():
            setattr(locked, name, value)
        if changes.get("kind") == "cron" and "interval_seconds" not in changes:
            locked.interval_seconds = None
        if changes.get("kind") == "interval" and "cron" not in changes:
            locked.cron = ""
        _checked(locked, now=now)
        locked.save()
    return locked


def schedule_pause(*, schedule: Schedule) -> tuple[Schedule, bool]:
    """Pause the schedule: no tick fires until it is resumed. Returns ``(schedule, changed)``
    (pausing a paused schedule changes nothing)."""
    changed = Schedule.objects.filter(id=schedule.id, paused=False).update(
        paused=True, updated_at=timezone.now()
    )
    return Schedule.objects.get(id=schedule.id), bool(changed)


def schedule_resume(*, schedule: Schedule, now: datetime | None = None) -> tuple[Schedule, bool]:
    """Resume a paused schedule from the first tick after now: the ticks that fell while it was
    paused are neither fired nor counted as missed. Returns ``(schedule, changed)``."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = Schedule.objects.select_for_update().get(id=schedule.id)
        if not locked.paused:
            return locked, False
        locked.paused = False
        locked.next_fire_at = timing_of(locked).next_after(now)
        locked.save(update_fields=["paused", "next_fire_at", "updated_at"])
    return locked, True


def schedule_delete(*, schedule: Schedule) -> None:
    """Delete the schedule and its fire log. The runs it started stay (their ``created_by``
    still names it)."""
    Schedule.objects.filter(id=schedule.id).delete()


# -- firing -----------------------------------------------------------------------------------


@dataclass
class Fired:
    """What one :func:`fire_due` pass did."""

    started: int = 0
    queued: int = 0
    skipped: int = 0
    failed: int = 0
    #: Ticks another reconciler had fired already (the unique constraint refused the second).
    duplicates: int = 0
    #: Due ticks let go by a catch-up policy.
    missed: int = 0
    errors: list[str] = field(default_factory=list)


def run_actor(schedule_id: uuid.UUID) -> str:
    """The ``created_by`` of the runs a schedule starts."""
    return f"schedule:{schedule_id}"


def fire_due(*, now: datetime | None = None, limit: int = 100) -> Fired:
    """Fire the due ticks of up to ``limit`` schedules, and start the queued ticks whose
    schedule's previous run has ended. Safe to run anywhere, any number of times, at once:
    each tick starts at most one run."""
    now = now or timezone.now()
    result = Fired()
    waiting = list(
        ScheduleFire.objects.filter(outcome="queued")
        .order_by()
        .values_list("schedule_id", flat=True)
        .distinct()[:limit]
    )
    for schedule_id in waiting:
        _guarded(_release_queued, schedule_id, now, result)
    due = list(
        Schedule.objects.filter(paused=False, next_fire_at__lte=now)
        .order_by("next_fire_at")
        .values_list("id", flat=True)[:limit]
    )
    for schedule_id in due:
        _guarded(_fire_schedule, schedule_id, now, result)
    return result


def _guarded(fn: Any, schedule_id: uuid.UUID, now: datetime, result: Fired) -> None:
    """One schedule's failure (a database error) never stops the others; it is retried on the
    next pass (nothing of it was committed)."""
    try:
        fn(schedule_id, now, result)
    except Exception as exc:
        logger.exception("firing schedule %s failed", schedule_id)
        result.errors.append(f"{schedule_id}: {type(exc).__name__}")


def _fire_schedule(schedule_id: uuid.UUID, now: datetime, result: Fired) -> None:
    """Fire one due schedule's ticks (per its catch-up policy) and advance it, in one
    transaction under its row lock (skipped when another reconciler holds it)."""
    with transaction.atomic():
        schedule = (
            Schedule.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(id=schedule_id, paused=False, next_fire_at__lte=now)
            .select_related("project")
            .first()
        )
        if schedule is None:
            return  # fired by another reconciler meanwhile, paused, or changed
        firing = plan_firing(
            timing_of(schedule),
            due_since=schedule.next_fire_at,
            now=now,
            catchup=schedule.catchup,
            catchup_limit=schedule.catchup_limit,
        )
        for tick in firing.ticks:
            _fire_tick(schedule, tick, now, result)
        result.missed += firing.missed
        changes: dict[str, Any] = {
            "next_fire_at": firing.next_fire_at,
            "missed_ticks": F("missed_ticks") + firing.missed,
        }
        if firing.ticks:
            changes["last_fired_at"] = now
        Schedule.objects.filter(id=schedule.id).update(**changes)


def _active_runs(schedule: Schedule) -> list[Run]:
    """The schedule's runs that have not ended (among its latest :data:`RECENT_RUNS`)."""
    recent = list(
        ScheduleFire.objects.filter(schedule_id=schedule.id, run__isnull=False)
        .order_by("-tick")
        .values_list("run_id", flat=True)[:RECENT_RUNS]
    )
    if not recent:
        return []
    return list(Run.objects.filter(id__in=recent, status__in=ACTIVE).order_by("id"))


def _fire_tick(schedule: Schedule, tick: datetime, now: datetime, result: Fired) -> None:
    """Claim ``tick`` (its unique fire row) and do what the overlap policy says, in a savepoint:
    a tick claimed already starts nothing."""
    active = [] if schedule.overlap == "allow" else _active_runs(schedule)
    outcome = "started"
    detail: dict[str, Any] = {}
    if active and schedule.overlap == "skip":
        outcome, detail = "skipped", {"reason": "overlap", "active_run": str(active[0].id)}
    elif active and schedule.overlap == "queue":
        queued = ScheduleFire.objects.filter(schedule_id=schedule.id, outcome="queued").count()
        if queued >= MAX_QUEUED_FIRES:
            outcome, detail = "skipped", {"reason": "queue_full", "queued": queued}
        else:
            outcome, detail = "queued", {"behind": str(active[0].id)}
    try:
        with transaction.atomic():
            fire = ScheduleFire.objects.create(
                tenant_id=schedule.tenant_id,
                project_id=schedule.project_id,
                schedule=schedule,
                tick=tick,
                fired_at=now,
                outcome=outcome,
                detail=detail,
            )
            if outcome == "started":
                cancelled: list[str] = []
                if active and schedule.overlap == "cancel_previous":
                    for run in active:
                        with contextlib.suppress(Conflict):  # it ended meanwhile
                            run_services.run_cancel(
                                run=run,
                                reason=f"schedule {schedule.id} fired its next tick",
                                actor=run_actor(schedule.id),
                            )
                            cancelled.append(str(run.id))
                if cancelled:
                    detail = {"cancelled": cancelled}
                _start(schedule, fire, now=now, detail=detail)
    except IntegrityError:
        if not ScheduleFire.objects.filter(schedule_id=schedule.id, tick=tick).exists():
            raise  # not the fire row's constraint
        result.duplicates += 1  # another reconciler fired this tick
        return
    except DomainError as exc:
        _record_failure(schedule, tick, now, exc, result)
        return
    if outcome == "started":
        result.started += 1
    elif outcome == "queued":
        result.queued += 1
    else:
        result.skipped += 1


def _start(schedule: Schedule, fire: ScheduleFire, *, now: datetime, detail: dict[str, Any]) -> Run:
    """Start the run of a claimed tick and mark its fire row ``started``."""
    run, _ = run_services.run_create(
        project=schedule.project,
        workflow=registration.workflows().get(schedule.workflow),
        state=schedule.input,
        user_message=schedule.user_message or None,
        priority=schedule.priority,
        created_by=run_actor(schedule.id),
    )
    ScheduleFire.objects.filter(id=fire.id).update(
        outcome="started", run=run, detail=detail, fired_at=now
    )
    return run


def _record_failure(
    schedule: Schedule, tick: datetime, now: datetime, exc: DomainError, result: Fired
) -> None:
    """The run of ``tick`` could not be created (the workflow is gone, its input no longer
    validates, the tenant's queue is full): the tick is spent, its row says why."""
    try:
        with transaction.atomic():
            ScheduleFire.objects.create(
                tenant_id=schedule.tenant_id,
                project_id=schedule.project_id,
                schedule=schedule,
                tick=tick,
                fired_at=now,
                outcome="failed",
                detail={"error": {"code": exc.code, "message": exc.message}},
            )
    except IntegrityError:
        result.duplicates += 1
        return
    result.failed += 1


def _release_queued(schedule_id: uuid.UUID, now: datetime, result: Fired) -> None:
    """Start the oldest queued tick of a schedule whose runs have all ended."""
    with transaction.atomic():
        schedule = (
            Schedule.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(id=schedule_id, paused=False)
            .select_related("project")
            .first()
        )
        if schedule is None or _active_runs(schedule):
            return
        fire = (
            ScheduleFire.objects.select_for_update()
            .filter(schedule_id=schedule_id, outcome="queued")
            .order_by("tick")
            .first()
        )
        if fire is None:
            return
        try:
            with transaction.atomic():
                _start(schedule, fire, now=now, detail={**fire.detail, "released_at": str(now)})
        except DomainError as exc:
            ScheduleFire.objects.filter(id=fire.id).update(
                outcome="failed", detail={"error": {"code": exc.code, "message": exc.message}}
            )
            result.failed += 1
            return
    result.started += 1
