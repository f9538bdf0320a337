"""Run writes: create, transitions, leases, checkpoints, retries, cancellation, reconciliation.

Every run state change goes through here. One transition table
(:mod:`runs_app.transitions`) and one function, :func:`run_transition`, apply status changes
with a compare-and-set under the row lock and append the run event in the same transaction;
interrupts and effects change status only through :func:`ledger_transition` (their tables are
in the same module). The hot path of a worker (claim, heartbeat, checkpoint) is conditional
UPDATEs fenced by the lease's token: a worker whose lease expired, or whose run was cancelled,
commits nothing.

Locking: run rows are locked one at a time, always before the run's interrupt and effect rows
and before any session row (run -> interrupt | effect -> session); a branch locks its parent
only after it committed its own end (see :func:`branch_finished`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, models, transaction
from django.db.models import Q
from django.utils import timezone

from openrath_project import large_values, metrics
from openrath_project.errors import Conflict, RateLimited, ValidationFailed
from openrath_project.ids import uuid7
from openrath_project.jsontext import canonical, digest
from openrath_project.tenancy.models import Project
from runs_app import dispatch
from runs_app.models import Checkpoint, Run, RunEvent, WorkflowPlan
from runs_app.plan import Plan, check_input
from runs_app.registry import RegisteredWorkflow
from runs_app.state_delta import check_json_state, diff
from runs_app.transitions import (
    ACTIVE,
    TERMINAL,
    UNSET,
    Changes,
    StateMachine,
    Unset,
    check_transition,
)
from sessions_app import append_sql as session_sql
from sessions_app import context as session_context
from sessions_app import services as session_services
from sessions_app import streaming
from sessions_app.chunk_rules import ChunkDraft, make_draft
from sessions_app.models import USAGE_CONSTRAINT, Session

logger = logging.getLogger(__name__)

#: Every this many checkpoints the state is stored whole, so a rebuild reads a bounded tail.
KEYFRAME_EVERY = 32
#: A step may be re-run after its worker died at most this many times (beyond its retries).
MAX_CRASH_ATTEMPTS = 3


class StaleLease(Conflict):
    """The worker's lease is gone (expired and taken over, or the run was cancelled)."""

    code = "stale_lease"


def _lease_seconds() -> int:
    return int(settings.OPENRATH_LEASE_SECONDS)


def _publish_event(run_id: uuid.UUID, seq: int) -> None:
    transaction.on_commit(lambda: streaming.run_event_committed(run_id, seq))


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


# --- Create ------------------------------------------------------------------------------------


def _check_queue_cap(tenant_id: uuid.UUID) -> None:
    cap = int(settings.OPENRATH_MAX_QUEUED_RUNS_PER_TENANT)
    queued = Run.objects.filter(tenant_id=tenant_id, status="queued").count()
    if queued >= cap:
        raise RateLimited(
            f"the tenant has {queued} queued runs; the limit is {cap}",
            retry_after=5,
            details={"queued": queued, "limit": cap},
        )


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
    if idempotency_key:
        existing = Run.objects.filter(
            tenant_id=project.tenant_id, idempotency_key=idempotency_key
        ).first()
        if existing is not None:
            return _idempotent_replay(existing, digest_of_request, project), False
    initial = check_json_state(state or {}, where="state")
    check_input(workflow.plan, initial)
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
    _check_queue_cap(project.tenant_id)
    initial = large_values.offload(project.tenant_id, initial)
    plan_row = plan_store(workflow.plan)
    run_id = uuid7()  # time-ordered: the API lists runs by -id (newest first)
    try:
        with transaction.atomic():
            with session_context.writing(actor=created_by or "api", run_id=run_id):
                if session is not None:
                    working = session_services.session_fork(
                        session=session,
                        title=f"run of {workflow.name}",
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
                        title=(user_message or f"run of {workflow.name}")[:80],
                        chunks=drafts,
                        metadata={"run": str(run_id)},
                        created_by=created_by,
                    )
            run = Run.objects.create(
                id=run_id,
                tenant_id=project.tenant_id,
                project=project,
                workflow=workflow.name,
                plan=plan_row,
                status="queued",
                input=initial,
                state=initial,
                session=working,
                session_len=working.length,
                priority=priority,
                deadline=deadline,
                next_nodes=[workflow.plan.entry],
                idempotency_key=idempotency_key or None,
                request_digest=digest_of_request,
                created_by=created_by,
                token_budget=token_budget,
                cost_budget_usd=cost_budget_usd,
                event_seq=1,
            )
            RunEvent.objects.create(
                run=run,
                seq=1,
                type="run.created",
                data={"workflow": workflow.name, "plan": plan_row.hash, "session": str(working.id)},
            )
            _publish_event(run.id, 1)
            dispatch.on_commit(run.id)
    except IntegrityError:
        if not idempotency_key:
            raise
        existing = Run.objects.get(tenant_id=project.tenant_id, idempotency_key=idempotency_key)
        return _idempotent_replay(existing, digest_of_request, project), False
    return run, True


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


def _add_event(run: Run, type_: str, *, step: str = "", data: dict[str, Any] | None = None) -> int:
    """Append an event to a locked (or just created) run; the caller saves ``event_seq``."""
    run.event_seq += 1
    RunEvent.objects.create(
        run_id=run.id, seq=run.event_seq, type=type_, step=step, data=data or {}
    )
    _publish_event(run.id, run.event_seq)
    return run.event_seq


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
        _add_event(run, event, step=step, data=data)
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


# --- Leases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A worker's hold on a run: commits are valid only with this token."""

    run_id: uuid.UUID
    token: int
    worker: str
    #: The working session's stored length when the claim also took its writer (PostgreSQL).
    session_length: int | None = None
    #: The lease length this claim asked for (``None``: ``OPENRATH_LEASE_SECONDS``); the
    #: heartbeat renews by the same amount.
    lease_seconds: int | None = None


_RUN = Run._meta.db_table
_EVENT = RunEvent._meta.db_table
_CHECKPOINT = Checkpoint._meta.db_table


def _composed_sql() -> bool:
    """Whether claims and step commits run as the composed PostgreSQL statements. The database
    vendor alone decides: inside a transaction or not, a test or a worker, the same code runs.
    Every other database takes the portable ORM path, which writes the same rows
    (tests/runs_app/test_step_commit_paths.py runs one workflow down both and compares them)."""
    return connection.vendor == "postgresql"


def _execute_composed(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Run one composed statement as a prepared statement: one round trip, committed on its own
    outside a transaction; inside one (a caller's ``atomic``) under a savepoint, so a refusal
    leaves the caller's transaction usable, as the ORM path's does."""
    import psycopg

    connection.ensure_connection()
    scope = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    try:
        with scope, psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(sql, params, prepare=True)
            return cursor.fetchall() if cursor.description else []
    except psycopg.errors.CheckViolation as exc:  # the session's usage totals would overflow
        if USAGE_CONSTRAINT not in str(exc):
            raise
        raise session_services.usage_full() from exc


def _stale(claim: Claim) -> StaleLease:
    return StaleLease(
        "the run's lease is no longer this worker's", details={"run": str(claim.run_id)}
    )


# The claim: the run row (fencing token + 1, lease), its working session's writer and the
# ``run.claimed`` event, in one statement.
_CLAIM_SQL = f"""
WITH picked AS (
    SELECT id FROM {_RUN}
    WHERE status = 'queued' AND (wake_at IS NULL OR wake_at <= now())
          {{only}} {{skip}} {{workflows}}
    ORDER BY priority DESC, created_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), r AS (
    UPDATE {_RUN} AS run
    SET status = 'running', fencing_token = run.fencing_token + 1, lease_owner = %(worker)s,
        lease_expires_at = now() + make_interval(secs => %(lease)s),
        started_at = COALESCE(run.started_at, now()), wake_at = NULL,
        event_seq = run.event_seq + 1, updated_at = now()
    FROM picked
    WHERE run.id = picked.id
    RETURNING run.id, run.fencing_token, run.event_seq, run.attempt, run.session_id
), w AS ({session_sql.claim_writer_cte("r")}
), e AS (
    INSERT INTO {_EVENT} (run_id, seq, type, step, data, created_at)
    SELECT r.id, r.event_seq, 'run.claimed', '',
           jsonb_build_object('worker', %(worker)s::text, 'token', r.fencing_token,
                              'attempt', r.attempt),
           now()
    FROM r
)
SELECT r.id, r.fencing_token, r.event_seq, (SELECT length FROM w) FROM r
"""  # noqa: S608 - table names from model metadata, values are parameters


@dataclass(frozen=True)
class _ClaimRequest:
    worker: str
    run_id: uuid.UUID | None
    skip_tenants: tuple[str, ...]
    workflows: tuple[str, ...] | None
    lease_seconds: int | None

    def claim(self, run_id: uuid.UUID, token: int, length: int | None) -> Claim:
        return Claim(
            run_id=run_id,
            token=token,
            worker=self.worker,
            session_length=length,
            lease_seconds=self.lease_seconds,
        )


def lease_claim(
    *,
    worker: str,
    run_id: uuid.UUID | None = None,
    skip_tenants: tuple[str, ...] = (),
    workflows: tuple[str, ...] | None = None,
    lease_seconds: int | None = None,
) -> Claim | None:
    """Take the next claimable run (or that one): queued, timer due; priority then age.

    ``skip_tenants`` (tenant slugs) are left to other workers: the embedded workers of a server
    leave the library tenant's runs to the scripts that own them (``runs_app.worker``).
    The fencing token goes up by one, so anything the previous holder tries later is refused,
    and the claim takes the working session's writer in the same transaction (PostgreSQL: one
    statement with ``FOR UPDATE SKIP LOCKED``). ``workflows`` (names) limits the claim to runs
    of those workflows (an in-process ``LocalRuntime`` claims only what it has registered);
    ``lease_seconds`` overrides ``OPENRATH_LEASE_SECONDS`` for this claim.
    """
    if workflows is not None and not workflows:
        return None
    check_transition("queued", "running")
    request = _ClaimRequest(worker[:200], run_id, skip_tenants, workflows, lease_seconds)
    return _sql_claim(request) if _composed_sql() else _orm_claim(request)


def _sql_claim(request: _ClaimRequest) -> Claim | None:
    from psycopg.types.numeric import Int8

    sql = _CLAIM_SQL.format(
        only="AND id = %(run)s" if request.run_id is not None else "",
        skip=(
            "AND tenant_id NOT IN (SELECT id FROM tenancy_tenant WHERE slug = ANY(%(skip)s))"
            if request.skip_tenants
            else ""
        ),
        workflows="AND workflow = ANY(%(workflows)s)" if request.workflows is not None else "",
    )
    rows = _execute_composed(
        sql,
        {
            "worker": request.worker,
            "lease": Int8(request.lease_seconds or _lease_seconds()),
            "run": request.run_id,
            "skip": list(request.skip_tenants),
            "workflows": list(request.workflows or ()),
        },
    )
    if not rows:
        return None
    claimed_id, token, event_seq, length = rows[0]
    _publish_event(claimed_id, int(event_seq))
    return request.claim(claimed_id, int(token), int(length) if length is not None else None)


def _orm_claim(request: _ClaimRequest) -> Claim | None:
    """The portable claim: the same rows as ``_CLAIM_SQL``, in one short transaction."""
    now = timezone.now()
    with transaction.atomic():
        queryset = Run.objects.filter(status="queued").filter(
            Q(wake_at__isnull=True) | Q(wake_at__lte=now)
        )
        if request.run_id is not None:
            queryset = queryset.filter(id=request.run_id)
        if request.skip_tenants:
            queryset = queryset.exclude(tenant__slug__in=request.skip_tenants)
        if request.workflows is not None:
            queryset = queryset.filter(workflow__in=request.workflows)
        picked = (
            queryset.order_by("-priority", "created_at")
            .select_for_update(skip_locked=True)
            .values_list("id", flat=True)
            .first()
        )
        if picked is None:
            return None
        run = Run.objects.select_for_update().get(id=picked)
        if run.status != "queued":  # SQLite has no row locks: the IMMEDIATE lock guards this
            return None
        run.status = "running"
        run.fencing_token += 1
        run.lease_owner = request.worker
        run.lease_expires_at = now + timedelta(seconds=request.lease_seconds or _lease_seconds())
        run.started_at = run.started_at or now
        run.wake_at = None
        _add_event(
            run,
            "run.claimed",
            data={"worker": request.worker, "token": run.fencing_token, "attempt": run.attempt},
        )
        run.save(
            update_fields=[
                "status",
                "fencing_token",
                "lease_owner",
                "lease_expires_at",
                "started_at",
                "wake_at",
                "event_seq",
                "updated_at",
            ]
        )
        length = None
        if run.session_id is not None and session_services.session_claim_writer(
            session=Session(id=run.session_id), run_id=run.id, token=run.fencing_token
        ):
            length = _session_length(run.session_id)
    return request.claim(run.id, run.fencing_token, length)


def lease_heartbeat(*, claim: Claim) -> bool:
    """Extend the lease; False when it is no longer this worker's (stop working at once)."""
    expires = timezone.now() + timedelta(seconds=claim.lease_seconds or _lease_seconds())
    updated = Run.objects.filter(
        id=claim.run_id, fencing_token=claim.token, status="running"
    ).update(lease_expires_at=expires)
    return bool(updated)


# --- Checkpoints -----------------------------------------------------------------------------


@dataclass
class StepCommit:
    """What a step (or router) attempt produced, to be committed atomically."""

    step: str
    state: dict[str, Any]
    previous_state: dict[str, Any]
    next_nodes: list[str]
    attempt: int
    event: str = "step.completed"
    event_data: dict[str, Any] | None = None
    #: A final status to move to in the same transaction (``succeeded``), with the output.
    finish: str | None = None
    #: The chunks the step held for the working session, written with the checkpoint.
    chunks: list[ChunkDraft] = field(default_factory=list)


def _step_commit_sql(*, finishing: bool) -> str:
    """The step commit as one statement: the run row (fenced by the lease and, with chunks, by
    the session's writer), the session's append (the session app's pieces), the checkpoint and
    the step's event; ``finishing`` also ends the run (``succeeded``, output, writer released,
    ``run.succeeded``). A commit that does not finish renews the lease, as the ORM path does."""
    if finishing:
        ending = """status = 'succeeded',
        state = %(whole_state)s::jsonb,
        output = %(whole_state)s::jsonb,
        state_seq = checkpoint_seq + 1,
        fanout = NULL,
        lease_owner = '',
        lease_expires_at = NULL,
        finished_at = now(),"""
        succeeded = """
UNION ALL
SELECT r.id, r.event_seq, 'run.succeeded', '', jsonb_build_object('checkpoint', c.seq), now()
FROM r, c"""
    else:
        ending = "lease_expires_at = now() + make_interval(secs => %(lease)s),"
        succeeded = ""
    events = 2 if finishing else 1
    return f"""
WITH r AS (
    UPDATE {_RUN}
    SET checkpoint_seq = checkpoint_seq + 1,
        event_seq = event_seq + {events},
        next_nodes = %(next_nodes)s::jsonb,
        attempt = 1,
        session_len = {session_sql.current_length(_RUN)} + %(n)s,
        {ending}
        updated_at = now()
    WHERE id = %(run)s AND fencing_token = %(token)s AND status = 'running'
      AND {session_sql.writer_holds(_RUN)}
    RETURNING id, checkpoint_seq, event_seq, session_id, session_len, parent_id
), {session_sql.append_ctes("r", release=finishing)}, c AS (
    INSERT INTO {_CHECKPOINT}
        (run_id, seq, step, next_nodes, "full", state, state_digest, session_id, session_len,
         fencing_token, attempt, created_at)
    SELECT r.id, r.checkpoint_seq, %(step)s, %(next_nodes)s::jsonb, %(full)s, %(state)s::jsonb,
           %(digest)s, r.session_id, r.session_len, %(token)s, %(attempt)s, now()
    FROM r
    RETURNING seq
)
INSERT INTO {_EVENT} (run_id, seq, type, step, data, created_at)
SELECT r.id, r.event_seq - {events - 1}, %(event)s, %(step)s,
       (%(event_data)s::jsonb || jsonb_build_object('checkpoint', c.seq,
                                                    'chunks', (SELECT count(*) FROM ch))),
       now()
FROM r, c{succeeded}
RETURNING seq, (SELECT session_id FROM r), (SELECT session_len FROM r),
          (SELECT parent_id FROM r), (SELECT checkpoint_seq FROM r)
"""  # noqa: S608 - table names from model metadata, values are parameters


_COMMIT_SQL = _step_commit_sql(finishing=False)
_FINISH_SQL = _step_commit_sql(finishing=True)


def checkpoint_commit(*, claim: Claim, commit: StepCommit, checkpoint_seq: int) -> int:
    """Commit a step: its held chunks, its checkpoint (state delta, session reference, next
    nodes) and its event, fenced by the lease; with ``commit.finish`` also the run's end.
    Returns the new checkpoint's sequence; :class:`StaleLease` when the lease is gone (nothing
    is written). ``checkpoint_seq`` is the last one this worker wrote.

    On PostgreSQL this is one prepared statement (one round trip); elsewhere one short
    transaction writing the same rows.
    """
    state = commit.state
    state_json = canonical(state)
    seq = checkpoint_seq + 1
    full = seq % KEYFRAME_EVERY == 1 or checkpoint_seq == 0
    stored_state: Any = state
    if not full:
        stored_state = diff(commit.previous_state, state)
        if len(canonical(stored_state)) >= len(state_json):
            stored_state, full = state, True
    state_digest = digest(state)
    event_data = dict(commit.event_data or {})
    event_data.setdefault("attempt", commit.attempt)
    event_data.setdefault("next", commit.next_nodes)
    if commit.finish is not None:
        check_transition("running", commit.finish)
    if _composed_sql() and commit.finish in (None, "succeeded"):
        return _sql_commit(claim, commit, stored_state, full, state_digest, event_data)
    return _orm_commit(claim, commit, stored_state, full, state_digest, event_data)


def _sql_commit(
    claim: Claim,
    commit: StepCommit,
    stored_state: Any,
    full: bool,
    state_digest: str,
    event_data: dict[str, Any],
) -> int:
    from psycopg.types.numeric import Int8

    drafts = commit.chunks
    finishing = commit.finish == "succeeded"
    params = {
        "run": claim.run_id,
        "token": Int8(claim.token),
        "lease": Int8(claim.lease_seconds or _lease_seconds()),
        "next_nodes": json.dumps([] if finishing else commit.next_nodes),
        "step": commit.step,
        "full": full,
        "state": json.dumps(stored_state),
        "digest": state_digest,
        "attempt": Int8(commit.attempt),
        "event": commit.event,
        "event_data": json.dumps(event_data),
        **session_sql.append_params(drafts),
    }
    if finishing:
        params["whole_state"] = canonical(commit.state)
        del params["lease"]
    rows = _execute_composed(_FINISH_SQL if finishing else _COMMIT_SQL, params)
    if not rows:
        raise _stale(claim)
    session_id, session_len, parent_id = rows[0][1], int(rows[0][2]), rows[0][3]
    for row in rows:
        _publish_event(claim.run_id, int(row[0]))
    if drafts:
        span = (session_len - len(drafts), session_len - 1)
        transaction.on_commit(lambda: streaming.chunks_committed(session_id, span))
    if finishing and parent_id is not None:
        branch_finished(Run(id=claim.run_id, parent_id=parent_id))
    return int(rows[0][4])


def _orm_commit(
    claim: Claim,
    commit: StepCommit,
    stored_state: Any,
    full: bool,
    state_digest: str,
    event_data: dict[str, Any],
) -> int:
    """The portable step commit: the same rows as the composed statement, in one transaction
    that locks the run row first (the one lock order: run, then what belongs to it)."""
    finish = commit.finish
    with transaction.atomic():
        run = Run.objects.select_for_update().get(id=claim.run_id)
        if run.fencing_token != claim.token or run.status != "running":
            raise _stale(claim)
        if commit.chunks:
            try:
                _write_held_chunks(run, claim, commit.chunks)
            except (session_services.StaleFence, session_services.SessionBusy) as exc:
                raise _stale(claim) from exc  # the session is not this lease's: as the SQL
        now = timezone.now()
        run.checkpoint_seq += 1
        run.session_len = _session_length(run.session_id)
        run.next_nodes = [] if finish is not None else list(commit.next_nodes)
        run.attempt = 1
        Checkpoint.objects.create(
            run_id=run.id,
            seq=run.checkpoint_seq,
            step=commit.step,
            next_nodes=run.next_nodes,
            full=full,
            state=stored_state,
            state_digest=state_digest,
            session_id=run.session_id,
            session_len=run.session_len,
            fencing_token=claim.token,
            attempt=commit.attempt,
        )
        event_data["checkpoint"] = run.checkpoint_seq
        event_data["chunks"] = len(commit.chunks)
        _add_event(run, commit.event, step=commit.step, data=event_data)
        fields = ["checkpoint_seq", "session_len", "next_nodes", "attempt", "event_seq"]
        if finish is not None:
            run.status = finish
            run.state, run.state_seq = commit.state, run.checkpoint_seq
            run.output = commit.state
            run.fanout = None
            run.lease_owner, run.lease_expires_at = "", None
            run.finished_at = now
            _add_event(run, f"run.{finish}", data={"checkpoint": run.checkpoint_seq})
            fields += ["status", "state", "state_seq", "output", "fanout", "lease_owner"]
            fields += ["finished_at"]
            if run.session_id is not None:
                session_services.session_release_writer(session_id=run.session_id, run_id=run.id)
        else:
            run.lease_expires_at = now + timedelta(seconds=claim.lease_seconds or _lease_seconds())
        run.save(update_fields=[*fields, "lease_expires_at", "updated_at"])
    if finish is not None and run.parent_id is not None:
        branch_finished(run)
    return int(run.checkpoint_seq)


def _write_held_chunks(run: Run, claim: Claim, drafts: list[ChunkDraft]) -> None:
    """Inside the commit's transaction: the chunks the step held, under the lease's fence."""
    if run.session_id is None:
        raise StaleLease("the run has no working session", details={"run": str(run.id)})
    session = Session(id=run.session_id, tenant_id=run.tenant_id)
    session_services.append_now(session, drafts, session_context.Fence(claim.run_id, claim.token))


def _session_length(session_id: uuid.UUID | None) -> int:
    if session_id is None:
        return 0
    row = Session.objects.filter(id=session_id).values("base_len", "own_len").first()
    return int(row["base_len"] + row["own_len"]) if row else 0


def run_state_at(run: Run, seq: int | None = None) -> dict[str, Any]:
    """The state after checkpoint ``seq`` (default: the latest), rebuilt from the last full
    checkpoint and the deltas after it (one query), verified against the stored digest."""
    from runs_app.state_delta import apply

    target = run.checkpoint_seq if seq is None else seq
    if target == 0:
        return dict(run.input)
    if target == run.state_seq:
        return dict(run.state)
    base = (
        Checkpoint.objects.filter(run=run, seq__lte=target, full=True)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    if base is None:
        raise Conflict(f"checkpoint {target} of run {run.id} cannot be rebuilt")
    rows = list(
        Checkpoint.objects.filter(run=run, seq__gte=base, seq__lte=target)
        .order_by("seq")
        .values("seq", "full", "state", "state_digest")
    )
    state: dict[str, Any] = {}
    for row in rows:
        state = dict(row["state"]) if row["full"] else apply(state, row["state"])
    if digest(state) != rows[-1]["state_digest"]:
        raise Conflict(f"checkpoint {target} of run {run.id} does not match its digest")
    return state


def run_repoint_session(*, claim: Claim, session: Session, abandoned: Session | None) -> None:
    """Make ``session`` the run's working session (a fork at the checkpoint after a crashed
    attempt, or the merge of a join), fenced by the lease."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(id=claim.run_id)
        if run.fencing_token != claim.token or run.status != "running":
            raise StaleLease(
                "the run's lease is no longer this worker's", details={"run": str(claim.run_id)}
            )
        previous = run.session_id
        run.session = session
        run.session_len = session.length
        _add_event(
            run,
            "session.switched",
            data={
                "from": str(previous) if previous else None,
                "to": str(session.id),
                "length": session.length,
                "abandoned": str(abandoned.id) if abandoned else None,
            },
        )
        run.save(update_fields=["session", "session_len", "event_seq", "updated_at"])


def branch_complete(*, claim: Claim, state: dict[str, Any], checkpoint_seq: int) -> Run:
    """A branch reached its join step: it ends here, its state is its result."""
    return run_transition(
        run_id=claim.run_id,
        to="succeeded",
        event="run.succeeded",
        token=claim.token,
        data={"checkpoint": checkpoint_seq, "branch_done": True},
        changes=RunChanges(output=state, state=state, state_seq=checkpoint_seq, next_nodes=[]),
    )


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


# --- Branches (fan-out / join) -----------------------------------------------------------------


def fanout_start(
    *,
    claim: Claim,
    run: Run,
    router: str,
    branches: Sequence[str],
    join: str,
    state: dict[str, Any],
    checkpoint_seq: int,
    previous_state: dict[str, Any],
    attempt: int,
    chunks: list[ChunkDraft] | None = None,
) -> list[Run]:
    """Run the branches in parallel: one child run per branch, each on a fork of the working
    session; the parent waits (lease released) until they all end."""
    seq = checkpoint_commit(
        claim=claim,
        commit=StepCommit(
            step=router,
            state=state,
            previous_state=previous_state,
            next_nodes=[join],
            attempt=attempt,
            event="router.decided",
            event_data={"choice": list(branches), "fanout": True},
            chunks=chunks or [],
        ),
        checkpoint_seq=checkpoint_seq,
    )
    children: list[Run] = []
    with transaction.atomic():
        parent = Run.objects.select_for_update().get(id=run.id)
        if parent.fencing_token != claim.token or parent.status != "running":
            raise StaleLease("the run's lease is no longer this worker's")
        if parent.session is None:
            raise Conflict("the run has no working session to branch from")
        for name in branches:
            child_id = uuid7()
            with session_context.writing(actor=f"run:{run.id}", run_id=child_id, step=name):
                branch_session = session_services.session_fork(
                    session=parent.session,
                    title=f"branch {name}",
                    metadata={"run": str(child_id), "branch": name},
                )
            child = Run.objects.create(
                id=child_id,
                tenant_id=parent.tenant_id,
                project_id=parent.project_id,
                workflow=parent.workflow,
                plan_id=parent.plan_id,
                status="queued",
                input=state,
                state=state,
                session=branch_session,
                session_len=branch_session.length,
                parent=parent,
                branch=name,
                join_step=join,
                priority=parent.priority,
                deadline=parent.deadline,
                next_nodes=[name],
                created_by=f"run:{run.id}",
                event_seq=1,
            )
            RunEvent.objects.create(
                run=child,
                seq=1,
                type="run.created",
                data={"parent": str(parent.id), "branch": name},
            )
            dispatch.on_commit(child.id)
            children.append(child)
        child_ids = [str(c.id) for c in children]
        # In the same transaction as the children: no branch exists without its waiting parent.
        run_transition(
            run_id=parent.id,
            to="waiting",
            event="branches.started",
            step=router,
            token=claim.token,
            data={"branches": list(branches), "join": join, "children": child_ids},
            changes=RunChanges(
                state=state,
                state_seq=seq,
                fanout={
                    "router": router,
                    "join": join,
                    "branches": list(branches),
                    "children": child_ids,
                },
            ),
        )
    return children


def fanout_clear(*, claim: Claim) -> None:
    """The join step committed: the fan-out is over."""
    Run.objects.filter(id=claim.run_id, fencing_token=claim.token, status="running").update(
        fanout=None
    )


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


# --- Reconciler ---------------------------------------------------------------------------------


@dataclass
class Reconciled:
    expired_leases: int = 0
    expired_interrupts: int = 0
    timed_out: int = 0
    dispatched: int = 0
    failed_crashes: int = 0


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
    from runs_app.interrupts import interrupts_expire

    result.expired_interrupts = interrupts_expire(now=now)
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
    return result


def _max_attempts(run: Run) -> int:
    plan = WorkflowPlan.objects.filter(hash=run.plan_id).values_list("definition", flat=True)
    definition = plan.first() or {}
    nodes = {n["id"]: n for n in definition.get("nodes", [])}
    node = nodes.get(run.next_nodes[0]) if run.next_nodes else None
    return int(node["retry"]["max_attempts"]) if node else 1


# --- Interrupt and effect transitions -----------------------------------------------------------


@dataclass(frozen=True)
class RunMove:
    """The run's own transition that goes with an interrupt's or an effect's; applied by
    :func:`run_transition` (which writes its event) in the same transaction."""

    to: str
    event: str
    step: str = ""
    data: dict[str, Any] | None = None
    expect: Sequence[str] | None = None
    changes: RunChanges | None = None


def ledger_transition(
    *,
    machine: StateMachine,
    model: type[models.Model],
    pk: uuid.UUID,
    run_id: uuid.UUID,
    to: str,
    changes: Changes,
    sources: Collection[str] | None = None,
    token: int | None = None,
    run_move: RunMove | None = None,
) -> bool:
    """Move an interrupt or an effect (a ``model`` row of run ``run_id``) to ``to`` with one
    compare-and-set; the one write path of every status change of those rows.

    In one transaction: lock the run row (the lock order everywhere: the run, then its
    interrupts and effects), then ``UPDATE <model> SET status = to, <changes> WHERE id = pk
    AND status IN <sources>``, then ``run_move`` (the run's transition and its event), if any.
    ``sources`` defaults to every status ``machine`` lets reach ``to``; a narrower list is
    checked against the table (a source it does not allow is an ``IllegalTransition``: the
    caller's bug). ``token``: the run must still be ``running`` under this lease (the effect
    ledger's fence). Returns ``False``, having changed nothing, when the fence or the
    compare-and-set fails (the caller reads the row again to say why).
    """
    allowed = machine.sources(to) if sources is None else frozenset(sources)
    for source in allowed:
        machine.check(source, to)
    columns = changes.columns()
    if "status" in columns:
        raise TypeError("the status is ledger_transition's `to`, not one of its changes")
    if "updated_at" not in columns and any(
        f.name == "updated_at" for f in model._meta.concrete_fields
    ):
        columns["updated_at"] = timezone.now()
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(id=run_id)
        if token is not None:
            run = run.filter(fencing_token=token, status="running")
        if not run.exists():
            return False
        updated = model._default_manager.filter(
            pk=pk, run_id=run_id, status__in=sorted(allowed)
        ).update(status=to, **columns)
        if not updated:
            return False
        if run_move is not None:
            run_transition(
                run_id=run_id,
                to=run_move.to,
                event=run_move.event,
                step=run_move.step,
                data=run_move.data,
                expect=run_move.expect,
                changes=run_move.changes,
            )
    return True
