"""Runs: create, transition, stop (fail, retry, review, cancel, resume), and a branch's end.

:func:`run_transition` is the one function that changes a run's status: a compare-and-set under
the row lock (:mod:`runs_app.transitions` says which moves are legal) that appends the run's
event in the same transaction. A branch that ends moves its parent (:func:`branch_finished`,
called by the transition and by a finishing step commit), which is itself a transition: the two
live in this module.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from openrath_project import large_values, metrics
from openrath_project.errors import Conflict, RateLimited, ValidationFailed
from openrath_project.ids import uuid7
from openrath_project.jsontext import digest
from openrath_project.tenancy.models import Project
from runs_app import dispatch, tracing
from runs_app.models import Run, RunEvent, WorkflowPlan
from runs_app.plan import Plan, check_input
from runs_app.registry import RegisteredWorkflow
from runs_app.services import composed, start_sql
from runs_app.services.eventlog import add_event, publish_event
from runs_app.services.leases import Claim, StaleLease
from runs_app.state_delta import check_json_state
from runs_app.transitions import (
    ACTIVE,
    TERMINAL,
    UNSET,
    Changes,
    Unset,
    check_transition,
)
from sessions_app import context as session_context
from sessions_app import services as session_services
from sessions_app.chunk_rules import make_draft
from sessions_app.models import Session

# --- Plans -----------------------------------------------------------------------------------


def plan_store(plan: Plan) -> WorkflowPlan:
    """The stored row of ``plan`` (inserted the first time its hash is seen, never updated)."""
    stored = WorkflowPlan.objects.filter(hash=plan.hash).first()
    if stored is not None:
        return stored
    try:
        with transaction.atomic():
            return WorkflowPlan.objects.create(
                hash=plan.hash,
                name=plan.name,
                version=plan.version,
                definition=plan.to_dict(),
                graph=plan.graph(),
            )
    except IntegrityError:  # stored concurrently by another process
        return WorkflowPlan.objects.get(hash=plan.hash)


#: The ``format`` of an opaque plan's stored definition (no nodes the product can execute).
OPAQUE_PLAN_FORMAT = "openrath.opaque-plan/1"


def opaque_plan_store(*, plan_id: str, revision_id: str | None) -> WorkflowPlan:
    """The stored row of a plan no registered workflow compiles to: OpenRath's bare
    ``create_run`` names a plan (and a revision) by id only. Its hash covers those ids; it has
    no nodes, so no worker ever executes a run of it (the run's ``workflow`` is ``""``, which
    no registered name can be, and claims skip such runs unless asked for them)."""
    definition = {"format": OPAQUE_PLAN_FORMAT, "plan_id": plan_id, "revision_id": revision_id}
    plan_hash = digest(definition)
    stored = WorkflowPlan.objects.filter(hash=plan_hash).first()
    if stored is not None:
        return stored
    try:
        with transaction.atomic():
            return WorkflowPlan.objects.create(
                hash=plan_hash,
                name="",
                version="1",
                definition=definition,
                graph={"nodes": [], "edges": []},
            )
    except IntegrityError:
        return WorkflowPlan.objects.get(hash=plan_hash)


# --- Create ------------------------------------------------------------------------------------


def _queue_cap() -> int:
    return int(settings.OPENRATH_MAX_QUEUED_RUNS_PER_TENANT)


def _queue_full(queued: int, cap: int) -> RateLimited:
    return RateLimited(
        f"the tenant has {queued} queued runs; the limit is {cap}",
        retry_after=5,
        details={"queued": queued, "limit": cap},
    )


def _check_queue_cap(tenant_id: uuid.UUID) -> None:
    """The portable check, inside the transaction that inserts the run: a count bounded by the
    cap (on PostgreSQL after the tenant's queue lock, so concurrent submissions count one after
    the other; SQLite has one writer at a time)."""
    cap = _queue_cap()
    if connection.vendor == "postgresql":
        start_sql.lock_tenant_queue(tenant_id)
    queued = Run.objects.filter(tenant_id=tenant_id, status="queued")[:cap].count()
    if queued >= cap:
        raise _queue_full(queued, cap)


#: Hashes of plans known to be stored in this process's database: plans are immutable and never
#: deleted, so a submission need not read its plan row again (the composed insert still checks
#: that it exists, by primary key, and a miss forgets the hash and stores the plan).
_stored_plans: dict[str, str] = {}
_STORED_PLANS_LIMIT = 4096


def _stored_plan_hash(plan: Plan) -> str:
    """The hash of ``plan``, stored first if this process has not seen it stored."""
    key = f"{connection.alias}:{plan.hash}"
    if key not in _stored_plans:
        stored = plan_store(plan).hash
        if len(_stored_plans) >= _STORED_PLANS_LIMIT:
            _stored_plans.clear()
        _stored_plans[key] = stored
    return _stored_plans[key]


def _forget_plan(plan_hash: str) -> None:
    _stored_plans.pop(f"{connection.alias}:{plan_hash}", None)


def run_create(
    *,
    project: Project,
    workflow: RegisteredWorkflow,
    state: dict[str, Any] | None = None,
    session: Session | None = None,
    user_message: str | None = None,
    priority: int = 0,
    deadline: datetime | None = None,
    idempotency_key: str | None = None,
    digest_of_request: str | None = None,
    created_by: str = "",
    token_budget: int | None = None,
    cost_budget_usd: Decimal | None = None,
) -> tuple[Run, bool]:
    """Queue a run of ``workflow``. Returns ``(run, created)``.

    With an ``idempotency_key``: the same key and request digest return the first run
    (``created`` False); the same key with another digest is a 409 (:class:`Conflict`).
    The HTTP API passes the digest of the request body; an in-process caller passes none and
    the digest is taken over the arguments that define the run (workflow and plan, state,
    session, user message, priority, budgets; not the deadline), as OpenRath does.
    ``ValidationFailed`` when ``state`` breaks the workflow's ``input_schema``.
    """
    if digest_of_request is None:
        digest_of_request = _arguments_digest(
            workflow=workflow,
            state=state,
            session=session,
            user_message=user_message,
            priority=priority,
            token_budget=token_budget,
            cost_budget_usd=cost_budget_usd,
        )
    replayed = _replayed(project, idempotency_key, digest_of_request)
    if replayed is not None:
        return replayed, False
    initial = _checked_request(
        project=project,
        state=state,
        plan=workflow.plan,
        session=session,
        priority=priority,
        deadline=deadline,
    )
    return _queue(
        project=project,
        name=workflow.name,
        plan_row=workflow.plan,
        next_nodes=[workflow.plan.entry],
        initial=initial,
        session=session,
        user_message=user_message,
        priority=priority,
        deadline=deadline,
        idempotency_key=idempotency_key,
        digest_of_request=digest_of_request,
        created_by=created_by,
        token_budget=token_budget,
        cost_budget_usd=cost_budget_usd,
    )


def run_create_opaque(
    *,
    project: Project,
    plan_id: str,
    revision_id: str | None = None,
    state: dict[str, Any] | None = None,
    session: Session | None = None,
    next_nodes: Sequence[str] = (),
    priority: int = 0,
    idempotency_key: str | None = None,
    created_by: str = "",
) -> tuple[Run, bool]:
    """Queue a run of an opaque plan (:func:`opaque_plan_store`): the same row, working
    session, event and checks as :func:`run_create`, for a caller that holds the run itself
    (a store's ``claim_next`` / hand claim) and records its effects by hand. Returns
    ``(run, created)``; the idempotency key behaves as in :func:`run_create`."""
    plan_row = opaque_plan_store(plan_id=plan_id, revision_id=revision_id)
    nodes = [str(node) for node in next_nodes]
    digest_of_request = digest(
        {
            "plan": plan_row.hash,
            "state": check_json_state(state or {}, where="state"),
            "session": str(session.id) if session is not None else None,
            "next_nodes": nodes,
            "priority": priority,
        }
    )
    replayed = _replayed(project, idempotency_key, digest_of_request)
    if replayed is not None:
        return replayed, False
    initial = _checked_request(
        project=project, state=state, plan=None, session=session, priority=priority, deadline=None
    )
    return _queue(
        project=project,
        name="",
        plan_row=plan_row,
        next_nodes=nodes,
        initial=initial,
        session=session,
        user_message=None,
        priority=priority,
        deadline=None,
        idempotency_key=idempotency_key,
        digest_of_request=digest_of_request,
        created_by=created_by,
        token_budget=None,
        cost_budget_usd=None,
    )


def _checked_request(
    *,
    project: Project,
    state: dict[str, Any] | None,
    plan: Plan | None,
    session: Session | None,
    priority: int,
    deadline: datetime | None,
) -> dict[str, Any]:
    """The validated initial state of a new run (``ValidationFailed`` otherwise), large values
    offloaded. The queue cap is checked in the transaction that inserts the run."""
    initial = check_json_state(state or {}, where="state")
    if plan is not None:
        check_input(plan, initial)
    if not -100 <= priority <= 100:
        raise ValidationFailed(
            "priority must be between -100 and 100",
            details={"priority": ["out of range -100..100"]},
        )
    if deadline is not None and deadline <= timezone.now():
        raise ValidationFailed("deadline must be in the future", details={"deadline": ["past"]})
    if session is not None and session.project_id != project.id:
        raise ValidationFailed(
            "the session belongs to another project", details={"session": ["another project"]}
        )
    return large_values.offload(project.tenant_id, initial)


class _PlanNotStored(Exception):
    """The composed insert found no row for a plan this process believed stored."""


def _queue(
    *,
    project: Project,
    name: str,
    plan_row: WorkflowPlan | Plan,
    next_nodes: list[str],
    initial: dict[str, Any],
    session: Session | None,
    user_message: str | None,
    priority: int,
    deadline: datetime | None,
    idempotency_key: str | None,
    digest_of_request: str,
    created_by: str,
    token_budget: int | None,
    cost_budget_usd: Decimal | None,
) -> tuple[Run, bool]:
    """Insert the queued run, its working session and its ``run.created`` event, in one
    transaction with the queue-cap check (``RateLimited`` when the tenant is at its cap).

    On PostgreSQL a run with a new, empty working session (no session to fork, no user
    message) is one composed statement after the tenant's queue lock (:mod:`.start_sql`);
    otherwise the ORM writes the same rows."""
    fields = {
        "name": name,
        "next_nodes": next_nodes,
        "initial": initial,
        "priority": priority,
        "deadline": deadline,
        "idempotency_key": idempotency_key or None,
        "digest_of_request": digest_of_request,
        "created_by": created_by,
        "token_budget": token_budget,
        "cost_budget_usd": cost_budget_usd,
    }
    try:
        if composed.composed_sql() and session is None and not user_message:
            return _queue_composed(project=project, plan_row=plan_row, **fields), True
        stored = plan_row if isinstance(plan_row, WorkflowPlan) else plan_store(plan_row)
        return (
            _queue_orm(
                project=project,
                plan_hash=stored.hash,
                session=session,
                user_message=user_message,
                **fields,
            ),
            True,
        )
    except IntegrityError:
        if not idempotency_key:
            raise
        existing = Run.objects.get(tenant_id=project.tenant_id, idempotency_key=idempotency_key)
        return _idempotent_replay(existing, digest_of_request, project), False


def _new_run(
    *, run_id: uuid.UUID, project: Project, plan_hash: str, working: Session, **fields: Any
) -> Run:
    name = fields["name"]
    return Run(
        id=run_id,
        tenant_id=project.tenant_id,
        project=project,
        workflow=name,
        plan_id=plan_hash,
        status="queued",
        input=fields["initial"],
        state=fields["initial"],
        session=working,
        session_len=working.length,
        priority=fields["priority"],
        deadline=fields["deadline"],
        next_nodes=fields["next_nodes"],
        idempotency_key=fields["idempotency_key"],
        request_digest=fields["digest_of_request"],
        created_by=fields["created_by"],
        token_budget=fields["token_budget"],
        cost_budget_usd=fields["cost_budget_usd"],
        event_seq=1,
        trace_context=tracing.run_root(
            run_id=run_id,
            workflow=name,
            tenant_id=project.tenant_id,
            project_id=project.id,
            origin_carrier=tracing.origin_of(fields.get("session")),
        ),
    )


def _created_event(run: Run, plan_hash: str, working: Session) -> RunEvent:
    return RunEvent(
        run=run,
        seq=1,
        type="run.created",
        data={"workflow": run.workflow, "plan": plan_hash, "session": str(working.id)},
    )


def _title(name: str) -> str:
    return f"run of {name or 'an opaque plan'}"


def _queue_composed(*, project: Project, plan_row: WorkflowPlan | Plan, **fields: Any) -> Run:
    """The PostgreSQL start: the tenant's queue lock, then session, run and event in one
    statement that also checks the cap and the plan (:func:`start_sql.insert_start`)."""
    cap = _queue_cap()
    for _attempt in range(2):
        if isinstance(plan_row, WorkflowPlan):
            plan_hash = plan_row.hash
        else:
            plan_hash = _stored_plan_hash(plan_row)
        run_id = uuid7()  # time-ordered: the API lists runs by -id (newest first)
        created_by = fields["created_by"]
        with session_context.writing(actor=created_by or "api", run_id=run_id):
            ctx = session_context.current()
            # The row session_create writes for a new session without chunks.
            working = Session(
                tenant_id=project.tenant_id,
                project=project,
                title=_title(fields["name"])[:80],
                op="create",
                own_len=0,
                placement={},
                metadata={"run": str(run_id)},
                provenance={},
                incomplete=False,
                created_by=created_by or ctx.actor,
                usage_prompt_tokens=0,
                usage_completion_tokens=0,
                usage_total_tokens=0,
                usage_cost_usd=Decimal(0),
                agent=ctx.agent,
                workflow=ctx.workflow,
                run_id=ctx.run_id,
                step=ctx.step,
            )
        run = _new_run(
            run_id=run_id, project=project, plan_hash=plan_hash, working=working, **fields
        )
        try:
            with transaction.atomic():
                start_sql.lock_tenant_queue(project.tenant_id)
                queued, plan_stored, inserted = start_sql.insert_start(
                    session=working,
                    run=run,
                    event=_created_event(run, plan_hash, working),
                    cap=cap,
                )
                if not inserted:
                    if queued >= cap:
                        raise _queue_full(queued, cap)
                    assert not plan_stored
                    raise _PlanNotStored(plan_hash)
                publish_event(run.id, 1)
                dispatch.on_commit(run.id)
        except _PlanNotStored:  # e.g. a test's rolled-back transaction stored it
            _forget_plan(plan_hash)
            continue
        return run
    raise RuntimeError(f"the plan {plan_hash} could not be stored")


def _queue_orm(
    *,
    project: Project,
    plan_hash: str,
    session: Session | None,
    user_message: str | None,
    **fields: Any,
) -> Run:
    """The portable start: the same rows through the ORM, in one transaction."""
    run_id = uuid7()
    name, created_by = fields["name"], fields["created_by"]
    title = _title(name)
    with transaction.atomic():
        _check_queue_cap(project.tenant_id)
        with session_context.writing(actor=created_by or "api", run_id=run_id):
            if session is not None:
                working = session_services.session_fork(
                    session=session,
                    title=title,
                    metadata={"run": str(run_id)},
                    created_by=created_by,
                )
            else:
                drafts = (
                    [make_draft(role="user", content={"text": user_message})]
                    if user_message
                    else []
                )
                working = session_services.session_create(
                    project=project,
                    title=(user_message or title)[:80],
                    chunks=drafts,
                    metadata={"run": str(run_id)},
                    created_by=created_by,
                )
        run = _new_run(
            run_id=run_id,
            project=project,
            plan_hash=plan_hash,
            working=working,
            session=session,
            **fields,
        )
        run.save(force_insert=True)
        _created_event(run, plan_hash, working).save(force_insert=True)
        publish_event(run.id, 1)
        dispatch.on_commit(run.id)
    return run


def _arguments_digest(
    *,
    workflow: RegisteredWorkflow,
    state: dict[str, Any] | None,
    session: Session | None,
    user_message: str | None,
    priority: int,
    token_budget: int | None,
    cost_budget_usd: Decimal | None,
) -> str:
    """The request digest of an in-process submission (see :func:`run_create`)."""
    return digest(
        {
            "workflow": workflow.name,
            "plan": workflow.plan.hash,
            "state": check_json_state(state or {}, where="state"),
            "session": str(session.id) if session is not None else None,
            "user_message": user_message,
            "priority": priority,
            "token_budget": token_budget,
            "cost_budget_usd": None if cost_budget_usd is None else str(cost_budget_usd),
        }
    )


def _replayed(project: Project, idempotency_key: str | None, digest_of_request: str) -> Run | None:
    """The first run of this idempotency key in the project's tenant (or a 409), if there is
    one."""
    if not idempotency_key:
        return None
    existing = Run.objects.filter(tenant_id=project.tenant_id, idempotency_key=idempotency_key)
    first = existing.first()
    return None if first is None else _idempotent_replay(first, digest_of_request, project)


def _idempotent_replay(existing: Run, digest_of_request: str, project: Project) -> Run:
    """The first run of a key, or a 409. Keys are unique per tenant, but a caller sees only
    ``project`` (resolved through its principal): a run of another project is never returned
    nor named, since the caller may be limited to ``project``."""
    same_project = existing.project_id == project.id
    if existing.request_digest != digest_of_request or not same_project:
        raise Conflict(
            "this Idempotency-Key was used for a different request",
            code="idempotency_conflict",
            details={"run": str(existing.id)} if same_project else {},
        )
    return existing


# --- Transitions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunChanges(Changes):
    """The columns a run transition writes besides its status (and, as the status implies, the
    lease, ``finished_at``, ``wake_at``, ``event_seq``, ``updated_at``). Unset fields are left
    alone: the UPDATE names only the columns set."""

    error: dict[str, Any] | None | Unset = UNSET
    output: dict[str, Any] | None | Unset = UNSET
    state: dict[str, Any] | Unset = UNSET
    state_seq: int | Unset = UNSET
    next_nodes: list[str] | Unset = UNSET
    attempt: int | Unset = UNSET
    wake_at: datetime | None | Unset = UNSET
    review_reason: str | Unset = UNSET
    plan: WorkflowPlan | Unset = UNSET
    fanout: dict[str, Any] | None | Unset = UNSET


def run_transition(
    *,
    run_id: uuid.UUID,
    to: str,
    event: str,
    step: str = "",
    data: dict[str, Any] | None = None,
    expect: Sequence[str] | None = None,
    token: int | None = None,
    changes: RunChanges | None = None,
    lease_expired_before: datetime | None = None,
) -> Run:
    """Move a run to status ``to`` (compare-and-set under the row lock) and append its event.

    ``expect``: the statuses it may be in (a 409 otherwise); ``token``: the lease that must
    still be current (:class:`StaleLease` otherwise). Releasing statuses clear the lease.
    Saves only the columns that change (``changes`` and what the status implies).
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(id=run_id)
        if token is not None and (run.fencing_token != token or run.status != "running"):
            raise StaleLease(
                "the run's lease is no longer this worker's",
                details={"run": str(run_id), "token": token},
            )
        if lease_expired_before is not None and (
            run.lease_expires_at is None or run.lease_expires_at >= lease_expired_before
        ):
            raise StaleLease("the lease was renewed", details={"run": str(run_id)})
        if expect is not None and run.status not in expect:
            raise Conflict(
                f"the run is {run.status}; this needs it to be {' or '.join(expect)}",
                code="illegal_transition",
                details={"status": run.status},
            )
        check_transition(run.status, to)
        now = timezone.now()
        run.status = to
        columns = changes.columns() if changes is not None else {}
        for name, value in columns.items():
            setattr(run, name, value)
        written = ["status", *columns]
        if to != "running":
            run.lease_owner, run.lease_expires_at = "", None
            written += ["lease_owner", "lease_expires_at"]
        if to in TERMINAL:
            run.finished_at = now
            run.wake_at = None
            written += ["finished_at", "wake_at"]
        add_event(run, event, step=step, data=data)
        run.save(update_fields=list(dict.fromkeys([*written, "event_seq", "updated_at"])))
    if to in TERMINAL | {"waiting", "needs_review"}:
        _release_session(run)
    if to in TERMINAL and run.parent_id is not None:
        branch_finished(run)
    if to == "queued":
        dispatch.on_commit(run.id)
    return run


def _release_session(run: Run) -> None:
    if run.session_id is not None:
        session_services.session_release_writer(session_id=run.session_id, run_id=run.id)


# --- Stopping points ------------------------------------------------------------------------


def run_fail(
    *,
    claim: Claim,
    step: str,
    error: dict[str, Any],
    status: str = "failed",
    state: dict[str, Any] | None = None,
) -> Run:
    """The run ends in ``failed`` (or ``timed_out``) with ``error``."""
    return run_transition(
        run_id=claim.run_id,
        to=status,
        event=f"run.{status}",
        step=step,
        data=error,
        token=claim.token,
        changes=RunChanges(error=error, state=UNSET if state is None else state),
    )


def run_schedule_retry(
    *, claim: Claim, step: str, attempt: int, delay: float, error: dict[str, Any]
) -> Run:
    """A failed attempt with attempts left: back to the queue with a durable timer; the lease
    is released while waiting (no worker sleeps holding it)."""
    wake_at = timezone.now() + timedelta(seconds=delay)
    retried = run_transition(
        run_id=claim.run_id,
        to="queued",
        event="step.retry_scheduled",
        step=step,
        data={
            **error,
            "attempt": attempt,
            "next_attempt": attempt + 1,
            "wake_at": wake_at.isoformat(),
        },
        token=claim.token,
        changes=RunChanges(attempt=attempt + 1, wake_at=wake_at),
    )
    metrics.retry_scheduled(workflow=retried.workflow)
    return retried


def run_needs_review(
    *, run_id: uuid.UUID, reason: str, data: dict[str, Any], token: int | None = None
) -> Run:
    return run_transition(
        run_id=run_id,
        to="needs_review",
        event="run.needs_review",
        data={"reason": reason, **data},
        token=token,
        changes=RunChanges(review_reason=reason[:300]),
    )


def run_cancel(*, run: Run, reason: str = "", actor: str = "") -> Run:
    """Cancel a run that has not ended, and every branch below it. A worker still executing it
    loses its lease: its next heartbeat or checkpoint is refused."""
    if run.status in TERMINAL:
        raise Conflict(
            f"the run already ended ({run.status})",
            code="illegal_transition",
            details={"status": run.status},
        )
    cancelled = run_transition(
        run_id=run.id,
        to="cancelled",
        event="run.cancelled",
        data={"reason": reason, "by": actor},
        expect=sorted(ACTIVE),
    )
    for child in Run.objects.filter(parent=run).exclude(status__in=TERMINAL):
        with contextlib.suppress(Conflict):  # ended meanwhile
            run_cancel(run=child, reason=f"parent {run.id} cancelled", actor=actor)
    return cancelled


def run_resume(
    *,
    run: Run,
    reason: str,
    actor: str = "",
    accept_plan: str | None = None,
    registered: RegisteredWorkflow | None = None,
) -> Run:
    """An operator sends a ``needs_review`` run back to the queue (audited by the caller).

    After plan drift, ``accept_plan`` (the new plan's hash) re-pins the run to the code as it
    is now; without it the run would stop again at once.
    """
    if not reason.strip():
        raise ValidationFailed(
            "a reason is required to resume a run", details={"reason": ["required"]}
        )
    changes = RunChanges(review_reason="", wake_at=None)
    data: dict[str, Any] = {"reason": reason, "by": actor}
    if accept_plan:
        if registered is None or registered.plan.hash != accept_plan:
            raise ValidationFailed(
                "accept_plan must be the hash of the workflow's current plan",
                details={"accept_plan": ["not the current plan"]},
            )
        changes = replace(changes, plan=plan_store(registered.plan))
        data["plan"] = {"from": run.plan_id, "to": accept_plan}
    return run_transition(
        run_id=run.id,
        to="queued",
        event="run.resumed",
        data=data,
        expect=["needs_review"],
        changes=changes,
    )


# --- A branch's end ---------------------------------------------------------------------------


def branch_finished(child: Run) -> None:
    """A branch ended: when every branch of its fan-out has, wake the parent (all succeeded)
    or fail it, cancelling the branches still going (one failed)."""
    with transaction.atomic():
        assert child.parent_id is not None
        parent = Run.objects.select_for_update().get(pk=child.parent_id)
        fanout = parent.fanout or {}
        if parent.status != "waiting" or str(child.id) not in fanout.get("children", []):
            return
        siblings = list(Run.objects.filter(id__in=fanout["children"]))
        failed = [s for s in siblings if s.status in TERMINAL and s.status != "succeeded"]
        pending = [s for s in siblings if s.status not in TERMINAL]
    if failed:
        first = failed[0]
        for sibling in pending:
            with contextlib.suppress(Conflict):
                run_cancel(run=sibling, reason=f"branch {first.branch} {first.status}")
        with contextlib.suppress(Conflict):  # another branch got there first
            run_transition(
                run_id=parent.id,
                to="failed",
                event="run.failed",
                step=fanout["join"],
                expect=["waiting"],
                data={
                    "reason": f"branch {first.branch!r} {first.status}",
                    "branch_run": str(first.id),
                },
                changes=RunChanges(
                    error={
                        "type": "BranchFailed",
                        "message": f"branch {first.branch!r} {first.status}",
                        "step": first.branch,
                        "branch_error": first.error,
                    }
                ),
            )
        return
    if pending:
        return
    with contextlib.suppress(Conflict):
        run_transition(
            run_id=parent.id,
            to="queued",
            event="branches.joined",
            step=fanout["join"],
            expect=["waiting"],
            data={"children": fanout["children"]},
        )
