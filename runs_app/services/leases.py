"""Leases: a worker's claim on a run, its heartbeat, and the error when the lease is gone.

A claim moves one queued run to ``running`` with a new fencing token and takes its working
session's writer in the same transaction (PostgreSQL: one composed statement with ``FOR UPDATE
SKIP LOCKED``); every later write of that worker is fenced by the token (:class:`Claim`), and a
worker whose lease expired or whose run was cancelled commits nothing (:class:`StaleLease`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from psycopg.types.numeric import Int8

from openrath_project.errors import Conflict
from runs_app.models import Run, RunEvent
from runs_app.services import composed
from runs_app.services.eventlog import add_event, publish_event
from runs_app.transitions import check_transition
from sessions_app import append_sql as session_sql
from sessions_app import services as session_services
from sessions_app.models import Session

_RUN = Run._meta.db_table
_EVENT = RunEvent._meta.db_table


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
    opaque: bool = False

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
    claimed_id, token, event_seq, length = rows[0]
    publish_event(claimed_id, int(event_seq))
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
