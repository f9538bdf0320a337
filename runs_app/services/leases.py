"""Leases: a worker's claim on a run, its heartbeat, and the error when the lease is gone.

A claim moves one queued run to ``running`` with a new fencing token and takes its working
session's writer in the same transaction (PostgreSQL: one composed statement with ``FOR UPDATE
SKIP LOCKED``); every later write of that worker is fenced by the token (:class:`Claim`), and a
worker whose lease expired or whose run was cancelled commits nothing (:class:`StaleLease`).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Q
from django.utils import timezone
from psycopg.types.numeric import Int8

from openrath_project.errors import Conflict
from openrath_project.tenancy.models import Project
from runs_app.models import Run, RunEvent
from runs_app.services import composed
from runs_app.services.eventlog import add_event, publish_event
from runs_app.transitions import check_transition
from sessions_app import append_sql as session_sql
from sessions_app import services as session_services
from sessions_app.models import Session

_RUN = Run._meta.db_table
_EVENT = RunEvent._meta.db_table
_PROJECT = Project._meta.db_table
_SESSION = Session._meta.db_table
_M = TypeVar("_M", bound=models.Model)


class StaleLease(Conflict):
    """The worker's lease is gone (expired and taken over, or the run was cancelled)."""

    code = "stale_lease"


def default_lease_seconds() -> int:
    """The lease length of a claim that asks for none (``OPENRATH_LEASE_SECONDS``)."""
    return int(settings.OPENRATH_LEASE_SECONDS)


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
    #: The run as the claim left it (its project loaded) and its working session, when the
    #: claim read them (PostgreSQL: the claim statement returns their rows), so the executor
    #: need not read them again; ``None``: read them.
    run: Run | None = field(default=None, compare=False, repr=False)
    session: Session | None = field(default=None, compare=False, repr=False)


# The claim: the run row (fencing token + 1, lease), its working session's writer and the
# ``run.claimed`` event, in one statement.
_CLAIM_SQL = f"""
WITH picked AS (
    SELECT id FROM {_RUN}
    WHERE status = 'queued' AND (wake_at IS NULL OR wake_at <= now())
          {{only}} {{skip}} {{workflows}} {{opaque}}
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
    RETURNING run.*
), w AS ({session_sql.claim_writer_cte("r")}
), e AS (
    INSERT INTO {_EVENT} (run_id, seq, type, step, data, created_at)
    SELECT r.id, r.event_seq, 'run.claimed', '',
           jsonb_build_object('worker', %(worker)s::text, 'token', r.fencing_token,
                              'attempt', r.attempt),
           now()
    FROM r
)
SELECT r.id, r.fencing_token, r.event_seq, (SELECT length FROM w), {{rows}}
FROM r JOIN {_PROJECT} AS project ON project.id = r.project_id
LEFT JOIN {_SESSION} AS session ON session.id = r.session_id
"""  # noqa: S608 - table names from model metadata, values are parameters


def _selected(alias: str, model: type[models.Model]) -> list[str]:
    quote = connection.ops.quote_name
    return [f"{alias}.{quote(str(column.column))}" for column in model._meta.concrete_fields]


@functools.cache
def _claimed_rows_sql() -> str:
    """The claim's row of the run (after the claim), of its project and of its session (as
    before the claim: the writer columns are set from the claim), in model field order."""
    return ", ".join(
        [*_selected("r", Run), *_selected("project", Project), *_selected("session", Session)]
    )


def _instance(model: type[_M], values: Sequence[Any]) -> _M:
    """A model instance from its row as the ORM would load it (each field's database
    converters applied: JSON text parsed)."""
    fields = model._meta.concrete_fields
    converted = []
    for column, value in zip(fields, values, strict=True):
        for converter in column.get_db_converters(connection):
            value = converter(value, column, connection)
        converted.append(value)
    return model.from_db(connection.alias, [column.attname for column in fields], converted)


def _claimed(row: Sequence[Any], token: int, length: int | None) -> tuple[Run, Session | None]:
    """The claimed run (its project loaded) and its session from the claim's row."""
    run_columns = len(Run._meta.concrete_fields)
    project_columns = len(Project._meta.concrete_fields)
    run = _instance(Run, row[4 : 4 + run_columns])
    project = _instance(Project, row[4 + run_columns : 4 + run_columns + project_columns])
    Run.project.field.set_cached_value(run, project)
    session_row = row[4 + run_columns + project_columns :]
    if session_row[0] is None:
        return run, None
    session = _instance(Session, session_row)
    if length is not None:  # the claim made the run its writer
        session.writer_run_id, session.writer_token = run.id, token
    return run, session


@dataclass(frozen=True)
class _ClaimRequest:
    worker: str
    run_id: uuid.UUID | None
    skip_tenants: tuple[str, ...]
    workflows: tuple[str, ...] | None
    lease_seconds: int | None
    opaque: bool = False

    def claim(
        self,
        run_id: uuid.UUID,
        token: int,
        length: int | None,
        run: Run | None = None,
        session: Session | None = None,
    ) -> Claim:
        return Claim(
            run_id=run_id,
            token=token,
            worker=self.worker,
            session_length=length,
            lease_seconds=self.lease_seconds,
            run=run,
            session=session,
        )


def lease_claim(
    *,
    worker: str,
    run_id: uuid.UUID | None = None,
    skip_tenants: tuple[str, ...] = (),
    workflows: tuple[str, ...] | None = None,
    lease_seconds: int | None = None,
    opaque: bool = False,
) -> Claim | None:
    """Take the next claimable run (or that one): queued, timer due; priority then age.

    ``skip_tenants`` (tenant slugs) are left to other workers: the embedded workers of a server
    leave the library tenant's runs to the scripts that own them (``runs_app.worker``).
    The fencing token goes up by one, so anything the previous holder tries later is refused,
    and the claim takes the working session's writer in the same transaction (PostgreSQL: one
    statement with ``FOR UPDATE SKIP LOCKED``). ``workflows`` (names) limits the claim to runs
    of those workflows (an in-process ``LocalRuntime`` claims only what it has registered);
    ``lease_seconds`` overrides ``OPENRATH_LEASE_SECONDS`` for this claim. Runs of an opaque
    plan (``workflow = ''``, ``services.run_create_opaque``) have nothing a worker can execute:
    only a claim with ``opaque=True`` (a run store's, held by its caller) takes them.
    """
    if workflows is not None and not workflows:
        return None
    check_transition("queued", "running")
    request = _ClaimRequest(worker[:200], run_id, skip_tenants, workflows, lease_seconds, opaque)
    return _sql_claim(request) if composed.composed_sql() else _orm_claim(request)


def _sql_claim(request: _ClaimRequest) -> Claim | None:
    sql = _CLAIM_SQL.format(
        only="AND id = %(run)s" if request.run_id is not None else "",
        skip=(
            "AND tenant_id NOT IN (SELECT id FROM tenancy_tenant WHERE slug = ANY(%(skip)s))"
            if request.skip_tenants
            else ""
        ),
        workflows="AND workflow = ANY(%(workflows)s)" if request.workflows is not None else "",
        opaque="" if request.opaque else "AND workflow <> ''",
        rows=_claimed_rows_sql(),
    )
    rows = composed.execute_composed(
        sql,
        {
            "worker": request.worker,
            "lease": Int8(request.lease_seconds or default_lease_seconds()),
            "run": request.run_id,
            "skip": list(request.skip_tenants),
            "workflows": list(request.workflows or ()),
        },
    )
    if not rows:
        return None
    claimed_id, token, event_seq, length = rows[0][:4]
    publish_event(claimed_id, int(event_seq))
    length = int(length) if length is not None else None
    run, session = _claimed(rows[0], int(token), length)
    return request.claim(claimed_id, int(token), length, run, session)


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
        if not request.opaque:
            queryset = queryset.exclude(workflow="")
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
        run.lease_expires_at = now + timedelta(
            seconds=request.lease_seconds or default_lease_seconds()
        )
        run.started_at = run.started_at or now
        run.wake_at = None
        add_event(
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
            length = session_length(run.session_id)
    return request.claim(run.id, run.fencing_token, length)


def lease_heartbeat(*, claim: Claim) -> bool:
    """Extend the lease; False when it is no longer this worker's (stop working at once)."""
    expires = timezone.now() + timedelta(seconds=claim.lease_seconds or default_lease_seconds())
    updated = Run.objects.filter(
        id=claim.run_id, fencing_token=claim.token, status="running"
    ).update(lease_expires_at=expires)
    return bool(updated)


def session_length(session_id: uuid.UUID | None) -> int:
    """The stored length of a session (0 for none), read after a write under its writer."""
    if session_id is None:
        return 0
    row = Session.objects.filter(id=session_id).values("base_len", "own_len").first()
    return int(row["base_len"] + row["own_len"]) if row else 0
