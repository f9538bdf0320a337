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
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from openrath_project import large_values, metrics
from openrath_project.errors import Conflict, RateLimited, ValidationFailed
from openrath_project.ids import uuid7
from openrath_project.jsontext import digest
from openrath_project.prepared import PreparedQuery
from openrath_project.tenancy.models import Project
from runs_app import dispatch, tracing
from runs_app.models import INPUT_POLICIES, Run, RunEvent, WorkflowPlan
from runs_app.plan import Plan, check_input
from runs_app.registry import RegisteredWorkflow
from runs_app.services import composed, start_sql
from runs_app.services.eventlog import publish_event, save_with_event
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
from sessions_app.models import LineageEdge, Session

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


def _plan_in_store(plan: Plan) -> str:
    """The hash of ``plan``, stored first if it is not: an existence check by primary key
    rather than :func:`plan_store`'s read of the row, whose definition and graph are the
    largest JSON a start would otherwise decode (timed inside run POSTs on a busy machine:
    1.5 ms for the read, 1.2 ms for the check)."""
    if WorkflowPlan.objects.filter(hash=plan.hash).exists():
        return plan.hash
    return plan_store(plan).hash


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
    input_policy: str | None = None,
) -> tuple[Run, bool]:
    """Queue a run of ``workflow``. Returns ``(run, created)``.

    With a ``session`` that has an active run, ``input_policy`` (default: the workflow's,
    else ``reject``) says what happens: ``reject`` (:class:`SessionBusy`, a 409), ``enqueue``,
    ``interrupt`` or ``rollback`` (docs/concurrent-input.md). ``ValidationFailed`` for
    another value.

    With an ``idempotency_key``: the same key and request digest return the first run
    (``created`` False); the same key with another digest is a 409 (:class:`Conflict`).
    The HTTP API passes the digest of the request body; an in-process caller passes none and
    the digest is taken over the arguments that define the run (workflow and plan, state,
    session, user message, priority, budgets; not the deadline), as OpenRath does.
    ``ValidationFailed`` when ``state`` breaks the workflow's ``input_schema``.
    """
    policy = check_policy(workflow.input_policy if input_policy is None else input_policy)
    if digest_of_request is None:
        digest_of_request = _arguments_digest(
            workflow=workflow,
            state=state,
            session=session,
            user_message=user_message,
            priority=priority,
            token_budget=token_budget,
            cost_budget_usd=cost_budget_usd,
            input_policy=input_policy,
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
        input_policy=policy if session is not None else None,
    )


def check_policy(value: object) -> str:
    """``value`` if it names a concurrent-input policy (``ValidationFailed`` otherwise)."""
    if not isinstance(value, str) or value not in INPUT_POLICIES:
        raise ValidationFailed(
            f"input_policy must be one of {', '.join(INPUT_POLICIES)}",
            details={"input_policy": [f"not one of {', '.join(INPUT_POLICIES)}"]},
        )
    return value


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
        input_policy=None,  # a hand-claimed run: each works on its own fork, as before
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
    input_policy: str | None,
) -> tuple[Run, bool]:
    """Insert the queued run, its working session and its ``run.created`` event, in one
    transaction with the queue-cap check (``RateLimited`` when the tenant is at its cap) and,
    with an ``input_policy``, the concurrent-input admission on ``session`` (:func:`_admit`).

    On PostgreSQL a run with a new, empty working session (no session to fork, no user
    message) is one composed statement after the tenant's queue lock (:mod:`.start_sql`); a
    run with a working session to write first is that session (a fork: one statement with the
    lock; a first message: the session, then the lock), then one composed statement for the
    run and its event (:func:`_queue_orm`);
    elsewhere the ORM writes the same rows. The plan is known stored from this process's
    memory on PostgreSQL (the composed statements check it; a miss stores it and starts
    again), else by an existence check."""
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
        for _attempt in range(2):
            if isinstance(plan_row, WorkflowPlan):
                plan_hash = plan_row.hash
            elif composed.composed_sql():  # the insert checks that the plan is stored
                plan_hash = _stored_plan_hash(plan_row)
            else:
                plan_hash = _plan_in_store(plan_row)
            try:
                run = _queue_orm(
                    project=project,
                    plan_hash=plan_hash,
                    session=session,
                    user_message=user_message,
                    input_policy=input_policy,
                    **fields,
                )
            except _PlanNotStored:  # rolled back; e.g. a test's rolled-back transaction stored it
                _forget_plan(plan_hash)
                continue
            return run, True
        raise RuntimeError(f"the plan {plan_hash} could not be stored")
    except IntegrityError:
        if not idempotency_key:
            raise
        existing = Run.objects.get(tenant_id=project.tenant_id, idempotency_key=idempotency_key)
        return _idempotent_replay(existing, digest_of_request, project), False


def _new_run(
    *, run_id: uuid.UUID, project: Project, plan_hash: str, working: Session | None, **fields: Any
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
        session_len=working.length if working is not None else 0,
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


def _created_event(run: Run, plan_hash: str, working: Session | None) -> RunEvent:
    return RunEvent(
        run=run,
        seq=1,
        type="run.created",
        data={
            "workflow": run.workflow,
            "plan": plan_hash,
            "session": str(working.id) if working is not None else None,
        },
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
    input_policy: str | None = None,
    **fields: Any,
) -> Run:
    """The start with a working session to fork or a first message: the same rows in one
    transaction.

    On PostgreSQL the tenant's queue lock is taken last (a fork's session and edge are inserted
    by the statement that takes it: :func:`start_sql.insert_fork_and_lock`), just before one
    statement that counts the tenant's queued runs and inserts the run and its event
    (:func:`start_sql.insert_run`,
    which also checks that the plan is stored: :class:`_PlanNotStored` when it is not, the
    transaction rolled back): the lock that serialises all of a tenant's submissions is held
    for that statement and the commit only, not for the admission and the fork before it (the
    lock order: the session's input lock, then the tenant's). Elsewhere the ORM writes the
    same rows after the count, at the same point (SQLite: one writer at a time), so a busy
    session is a 409 before a full queue is a 429 on both."""
    run_id = uuid7()
    name, created_by = fields["name"], fields["created_by"]
    title = _title(name)
    composed_insert = composed.composed_sql()
    with transaction.atomic():
        admission = None
        if session is not None and input_policy is not None:
            admission = _admit(session, input_policy)
        working: Session | None = None
        fork_edge: LineageEdge | None = None
        with session_context.writing(actor=created_by or "api", run_id=run_id):
            if admission is not None and admission.after is not None:
                pass  # held: its working session is forked when the run it waits for ends
            elif session is not None:
                base, at = admission.origin if admission is not None else (session, None)
                fork = {
                    "session": base,
                    "at": at,
                    "title": title,
                    "metadata": {"run": str(run_id)},
                    "created_by": created_by,
                }
                if composed_insert:  # inserted with the queue lock, below
                    working, fork_edge = session_services.session_fork_rows(**fork)
                else:
                    working = session_services.session_fork(**fork)
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
        if session is not None:
            run.input_session = session
            run.input_policy = input_policy or ""
            if working is not None:
                origin, at = admission.origin if admission is not None else (session, None)
                run.origin_session = origin
                # The fork's length is the origin's length it sees (the whole of it if at=None).
                run.origin_len = working.length if at is None else at
        elif working is not None and user_message:  # its new session starts with the message
            # (a new empty session, as the composed start's, has no origin: it began empty)
            run.origin_session, run.origin_len = working, working.length
        if admission is not None and admission.after is not None:
            run.after_run = admission.after
            run.wake_at = HELD_UNTIL
        created = _created_event(run, plan_hash, working)
        if composed_insert:
            if fork_edge is not None and working is not None:
                start_sql.insert_fork_and_lock(
                    session=working, edge=fork_edge, tenant_id=project.tenant_id
                )
            else:
                start_sql.lock_tenant_queue(project.tenant_id)
            cap = _queue_cap()
            queued, inserted = start_sql.insert_run(run=run, event=created, cap=cap)
            if not inserted:
                if queued >= cap:
                    raise _queue_full(queued, cap)
                raise _PlanNotStored(plan_hash)
        else:  # the same order: the session decided first, then the tenant's cap
            _check_queue_cap(project.tenant_id)
            run.save(force_insert=True)
            created.save(force_insert=True)
        publish_event(run.id, 1)
        if admission is not None:
            _apply_admission(run, admission)
        if run.after_run_id is None:
            dispatch.on_commit(run.id)
    return run


# --- Concurrent input on one session (docs/concurrent-input.md) --------------------------------

#: ``wake_at`` of a run waiting for another to end: the claim never picks it (it is released by
#: that run's end: :func:`_release_followers`), with no status of its own.
HELD_UNTIL = datetime(9999, 12, 31, tzinfo=UTC)
#: The first key of the advisory lock that serialises submissions on one session.
SESSION_INPUT_LOCK_NAMESPACE = 20_023


@dataclass
class _Admission:
    """What a submission on a session with active runs does (decided under the session's lock).

    ``active``: those runs, oldest first, row-locked; ``after``: the run the new one waits for
    (enqueue, interrupt), ``None`` when it starts now from ``origin`` (a session and the length
    to fork it at; ``None``: all of it)."""

    policy: str
    active: list[Run]
    after: Run | None
    origin: tuple[Session, int | None]


def _is_held(run: Run) -> bool:
    """A run waiting for another to end (see :data:`HELD_UNTIL`)."""
    return run.status == "queued" and run.after_run_id is not None and run.session_id is None


def _lock_session_input(session_id: uuid.UUID) -> None:
    """Serialise submissions on one session until the transaction ends. PostgreSQL: an
    advisory lock keyed by the session (no row lock, so a finishing run's step commit, which
    updates the session row, never waits for it); SQLite: the IMMEDIATE write lock already
    does."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
            [SESSION_INPUT_LOCK_NAMESPACE, str(session_id)],
        )


def active_runs_on(session_id: uuid.UUID, *, lock: bool = False) -> list[Run]:
    """The runs active on a session, oldest first: submitted on it (the run waiting or
    working on its behalf) or working on it, not yet ended. ``lock``: row-locked (FOR
    UPDATE), so none ends until the caller's transaction does."""
    return (_ACTIVE_RUNS_LOCKED if lock else _ACTIVE_RUNS).fetch(session_id=session_id)


def _active_runs(session_id: uuid.UUID) -> QuerySet[Run]:
    return Run.objects.filter(
        Q(input_session_id=session_id) | Q(session_id=session_id),
        status__in=sorted(ACTIVE),
        parent__isnull=True,
        kind="run",
    ).order_by("id")


#: Every submission on a session reads them (compiled once: openrath_project/prepared.py).
_ACTIVE_RUNS: PreparedQuery[Run] = PreparedQuery(Run, _active_runs, session_id=uuid.UUID)
_ACTIVE_RUNS_LOCKED: PreparedQuery[Run] = PreparedQuery(
    Run, lambda session_id: _active_runs(session_id).select_for_update(), session_id=uuid.UUID
)


def _admit(session: Session, policy: str) -> _Admission | None:
    """Decide a submission on ``session`` under its lock: ``None`` when no run is active there
    (the run forks it as usual), else the admission (:class:`SessionBusy` for ``reject``)."""
    _lock_session_input(session.id)
    active = active_runs_on(session.id, lock=True)
    if not active:
        return None
    if policy == "reject":
        head = active[0]
        raise session_services.SessionBusy(
            f"the session has an active run ({head.status}); submit with input_policy "
            "enqueue, interrupt or rollback to run after it, stop it or replace it",
            details={
                "session": str(session.id),
                "run": str(head.id),
                "status": head.status,
                "active_runs": [str(r.id) for r in active],
            },
        )
    live = [r for r in active if not _is_held(r)]
    if policy == "enqueue":
        return _Admission(policy, active, active[-1], (session, None))
    if policy == "interrupt":
        if live:
            return _Admission(policy, active, live[-1], (session, None))
        return _Admission(policy, active, None, _end_of(active[0]) or (session, None))
    return _Admission(policy, active, None, _origin_of(active[0]) or (session, None))


def _origin_of(run: Run) -> tuple[Session, int | None] | None:
    """The conversation as it was before ``run`` began: where its working session was forked
    from. A run without a recorded origin (the composed start's new, empty session, or a row
    older than the field) began on its working session's fork edge, else on it empty."""
    if run.origin_session_id is not None:
        return Session.objects.get(pk=run.origin_session_id), run.origin_len
    if run.session_id is None:
        return _end_of(run)
    edge = LineageEdge.objects.filter(child_id=run.session_id, op="fork").first()
    if edge is not None:
        return Session.objects.get(pk=edge.parent_id), edge.parent_len
    return Session.objects.get(pk=run.session_id), 0


def _end_of(run: Run) -> tuple[Session, int | None] | None:
    """The conversation as ``run`` left it: its working session at its view's length; for a
    run that never started (held), the end of the run it waited for, and so on."""
    seen = 0
    current: Run | None = run
    while current is not None and seen < 10_000:
        if current.session_id is not None:
            return Session.objects.get(pk=current.session_id), current.session_len
        if current.after_run_id is None:
            if current.input_session_id is not None:
                return Session.objects.get(pk=current.input_session_id), None
            return None
        current = Run.objects.filter(pk=current.after_run_id).first()
        seen += 1
    return None


def _apply_admission(run: Run, admission: _Admission) -> None:
    """Inside the submission's transaction, after ``run`` is inserted: its events and what its
    policy does to the active runs (all row-locked by :func:`_admit`)."""
    by = {"by_run": str(run.id), "by": run.created_by}
    if admission.after is not None:
        save_with_event(
            run,
            "run.enqueued",
            fields=[],
            data={
                "after_run": str(admission.after.id),
                "policy": admission.policy,
                "position": len(admission.active),
            },
        )
    if admission.policy == "enqueue":
        return
    held = [r for r in admission.active if _is_held(r)]
    live = [r for r in admission.active if not _is_held(r)]
    # The waiting runs go first, newest first, so ending a run never releases one of them.
    for waiting in reversed(held):
        _stop_now(
            waiting,
            event="run.cancelled",
            data={"reason": f"superseded by run {run.id}", **by},
            superseded_by=run,
        )
    if admission.policy == "rollback":
        origin, at = admission.origin
        for active in reversed(live):
            _stop_now(
                active,
                event="run.rolled_back",
                data={"reason": f"rolled back by run {run.id}", **by},
                superseded_by=run,
            )
        save_with_event(
            run,
            "run.rollback",
            fields=[],
            data={
                "rolled_back": [str(r.id) for r in admission.active],
                "from": {"session": str(origin.id), "length": run.origin_len},
            },
        )
        return
    for active in live:  # interrupt
        _request_stop(active, by_run=run)


def _request_stop(run: Run, *, by_run: Run) -> None:
    """Ask ``run`` to stop at its next step boundary (at once when it is not executing)."""
    locked = Run.objects.select_for_update().get(pk=run.pk)
    locked.stop_requested_at = timezone.now()
    locked.superseded_by = by_run
    save_with_event(
        locked,
        "run.interrupt_requested",
        fields=["stop_requested_at", "superseded_by"],
        data={"by_run": str(by_run.id)},
    )
    if locked.status != "running":
        _interrupt_now(locked)


def _interrupt_data(run: Run, checkpoint: int) -> dict[str, Any]:
    by_run = str(run.superseded_by_id) if run.superseded_by_id else None
    return {"reason": f"interrupted by run {by_run}", "by_run": by_run, "checkpoint": checkpoint}


def _interrupt_now(run: Run) -> None:
    """End a run whose stop was asked for and that is not executing (queued, waiting,
    needs_review): ``cancelled`` with ``run.interrupted``; its branches are cancelled."""
    current = Run.objects.get(pk=run.pk)
    with contextlib.suppress(Conflict):  # claimed meanwhile (its executor stops it) or ended
        _stop_now(
            current,
            event="run.interrupted",
            data=_interrupt_data(current, current.checkpoint_seq),
            expect=["queued", "waiting", "needs_review"],
        )


def _stop_now(
    run: Run,
    *,
    event: str,
    data: dict[str, Any],
    superseded_by: Run | None = None,
    expect: Sequence[str] | None = None,
) -> Run:
    """Cancel ``run`` with ``event`` (and every branch below it)."""
    changes = RunChanges() if superseded_by is None else RunChanges(superseded_by=superseded_by)
    stopped = run_transition(
        run_id=run.id,
        to="cancelled",
        event=event,
        data=data,
        expect=sorted(ACTIVE) if expect is None else expect,
        changes=changes,
    )
    for child in Run.objects.filter(parent=run).exclude(status__in=TERMINAL):
        with contextlib.suppress(Conflict):
            run_cancel(run=child, reason=f"parent {run.id} cancelled", actor=data.get("by", ""))
    return stopped


def run_interrupted(*, claim: Claim, step: str, state: dict[str, Any], checkpoint: int) -> Run:
    """The executor stops a run whose interrupt was asked for, at a step boundary: it ends
    ``cancelled`` with ``run.interrupted``, its committed checkpoints kept."""
    row = Run.objects.only("id", "superseded_by_id").get(pk=claim.run_id)
    return run_transition(
        run_id=claim.run_id,
        to="cancelled",
        event="run.interrupted",
        step=step,
        data=_interrupt_data(row, checkpoint),
        token=claim.token,
        changes=RunChanges(state=state, state_seq=checkpoint),
    )


def _release_followers(run: Run) -> int:
    """Inside the transaction that ended ``run`` (row-locked): start the runs waiting for it,
    each on a fork of the conversation as it left it. Returns how many."""
    followers = list(
        Run.objects.select_for_update()
        .filter(after_run_id=run.id, status="queued", session__isnull=True)
        .order_by("id")
    )
    for follower in followers:
        end = _end_of(run)
        if end is None:  # no conversation to continue: the session it was submitted on
            assert follower.input_session_id is not None
            end = (Session.objects.get(pk=follower.input_session_id), None)
        base, at = end
        with session_context.writing(actor=follower.created_by or "api", run_id=follower.id):
            working = session_services.session_fork(
                session=base,
                at=at,
                title=_title(follower.workflow),
                metadata={"run": str(follower.id)},
                created_by=follower.created_by,
            )
        follower.session = working
        follower.session_len = working.length
        follower.origin_session = base
        follower.origin_len = working.length if at is None else at
        follower.wake_at = None
        save_with_event(
            follower,
            "run.released",
            fields=["session", "session_len", "origin_session", "origin_len", "wake_at"],
            data={
                "after_run": str(run.id),
                "after_status": run.status,
                "session": str(working.id),
                "from": {"session": str(base.id), "length": follower.origin_len},
            },
        )
        dispatch.on_commit(follower.id)
    return len(followers)


def run_release_followers(*, run_id: uuid.UUID) -> int:
    """Start the runs waiting for ``run_id`` if it has ended (its own transaction, or the
    caller's). The step commit that finishes a run calls it in the same transaction; the
    reconciler calls it for a release that was missed. Safe to call twice."""
    if _QUEUED_FOLLOWER.first(run_id=run_id) is None:
        return 0
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status not in TERMINAL:
            return 0
        return _release_followers(run)


#: Every run with an input session reads it as it finishes (compiled once: a Celery worker spent
#: about 1 ms of CPU per run building and compiling it as a queryset).
_QUEUED_FOLLOWER: PreparedQuery[Run] = PreparedQuery(
    Run,
    lambda run_id: Run.objects.filter(after_run_id=run_id, status="queued").only("id"),
    run_id=uuid.UUID,
)


def concurrent_input_repair(*, limit: int = 200) -> int:
    """The reconciler's part: release runs whose predecessor ended without releasing them,
    and end runs asked to stop that are no longer executing. Returns how many it changed."""
    repaired = 0
    missed = (
        Run.objects.filter(
            status="queued",
            after_run__isnull=False,
            session__isnull=True,
            after_run__status__in=sorted(TERMINAL),
        )
        .values_list("after_run_id", flat=True)
        .distinct()[:limit]
    )
    for predecessor in list(missed):
        repaired += run_release_followers(run_id=predecessor)
    stopping = Run.objects.filter(
        stop_requested_at__isnull=False, status__in=["queued", "waiting", "needs_review"]
    ).only("id")[:limit]
    for run in list(stopping):
        _interrupt_now(run)
        if Run.objects.filter(pk=run.pk, status="cancelled").exists():
            repaired += 1
    return repaired


def _arguments_digest(
    *,
    workflow: RegisteredWorkflow,
    state: dict[str, Any] | None,
    session: Session | None,
    user_message: str | None,
    priority: int,
    token_budget: int | None,
    cost_budget_usd: Decimal | None,
    input_policy: str | None = None,
) -> str:
    """The request digest of an in-process submission (see :func:`run_create`); an explicit
    ``input_policy`` is part of it (none given: the digest is the one it always was)."""
    arguments: dict[str, Any] = {
        "workflow": workflow.name,
        "plan": workflow.plan.hash,
        "state": check_json_state(state or {}, where="state"),
        "session": str(session.id) if session is not None else None,
        "user_message": user_message,
        "priority": priority,
        "token_budget": token_budget,
        "cost_budget_usd": None if cost_budget_usd is None else str(cost_budget_usd),
    }
    if input_policy is not None:
        arguments["input_policy"] = input_policy
    return digest(arguments)


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
    superseded_by: Run | None | Unset = UNSET


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
    locked: Run | None = None,
) -> Run:
    """Move a run to status ``to`` (compare-and-set under the row lock) and append its event.

    ``expect``: the statuses it may be in (a 409 otherwise); ``token``: the lease that must
    still be current (:class:`StaleLease` otherwise). Releasing statuses clear the lease.
    Saves only the columns that change (``changes`` and what the status implies).
    ``locked``: the run as the caller read it FOR UPDATE in the transaction it has open (it
    is moved in place, not read again, and no savepoint is taken: an error rolls back the
    caller's transaction).
    """
    if locked is not None and locked.id != run_id:
        raise ValueError("locked is not the run to move")
    with transaction.atomic(savepoint=locked is None):
        run = locked if locked is not None else Run.objects.select_for_update().get(id=run_id)
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
        save_with_event(run, event, fields=written, step=step, data=data)
        if to in TERMINAL:
            _release_followers(run)  # the runs waiting for it: same transaction
    if to in TERMINAL | {"waiting", "needs_review"}:
        _release_session(run)
    if run.stop_requested_at is not None and to in {"queued", "waiting", "needs_review"}:
        _interrupt_now(run)  # asked to stop and no longer executing: that is its boundary
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
