"""Leases: a worker's claim on a run, its heartbeat, and the error when the lease is gone.

A claim moves one queued run to ``running`` with a new fencing token and takes its working
session's writer in the same transaction (PostgreSQL: one composed statement with ``FOR UPDATE
SKIP LOCKED``); every later write of that worker is fenced by the token (:class:`Claim`), and a
worker whose lease expired or whose run was cancelled commits nothing (:class:`StaleLease`).

Which run a claim takes is fair across tenants, then across a tenant's projects
(docs/operations.md, "Fair queues and limits"). Each project with queued runs offers its next
run (highest priority, then oldest: one probe of the ``run_tenant_claimable`` index), and the
offers are ordered by

1. the tenant's running runs, fewest first (max-min fair shares of the workers);
2. when the tenant was last served (``Tenant.last_claimed_at``), longest ago first (round robin
   among tenants with as many running, e.g. a single worker's, where every count is 0);
3. the offer's priority, highest first (priority orders a tenant's own runs, never one tenant's
   runs before another's);
4. the project's running runs, fewest first, then its ``last_claimed_at``, longest ago first;
5. age, oldest first.

A tenant or project at its ``max_running_runs`` offers nothing. The limit holds under
concurrency: a claim under a limit rewrites the tenant's (project's) ``last_claimed_at`` only if
it is still the value it read with its count, so two claims cannot both count the same free
place (the second waits for the first's row lock, sees the value changed and claims again with
a fresh count; see :data:`_CLAIM_SQL`).
"""

from __future__ import annotations

import functools
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Count, Q
from django.utils import timezone
from psycopg.types.numeric import Int8

from openrath_project.errors import Conflict, ValidationFailed
from openrath_project.tenancy.models import Project, Tenant
from runs_app.models import Run, RunEvent
from runs_app.services import composed
from runs_app.services.eventlog import publish_event, save_with_event
from runs_app.transitions import check_transition
from sessions_app import append_sql as session_sql
from sessions_app import services as session_services
from sessions_app.models import Session

_RUN = Run._meta.db_table
_EVENT = RunEvent._meta.db_table
_PROJECT = Project._meta.db_table
_TENANT = Tenant._meta.db_table
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


#: How many times a claim under a limit retries after another claim took a place of the same
#: tenant or project first (each retry is a new statement with a fresh count).
_CLAIM_RETRIES = 5

# The claim, in one statement:
#
# * ``offers``: each (tenant, project) pair's next claimable run, found by a skip scan of the
#   ``run_tenant_claimable`` index (one probe per pair, whatever their backlogs:
#   ``_OFFERS_SCAN``), or the one run asked for;
# * ``candidates``: the offers with their tenant's and project's running runs (a count of the
#   tenant's running runs per offer, by ``run_tenant_status``), limits and last service;
# * ``picked``: the offers in fair order (module docstring), without those at a limit; the
#   first whose project has a run no other claim holds (``FOR UPDATE SKIP LOCKED``, offer by
#   offer in that order, so a claim locks one run): the offer's own run by its key, or when
#   another claim holds it, the project's next one. The probe bounds the pair by two row
#   comparisons, not ``=``: with ``=`` the planner drops the index order as redundant and may
#   take ``run_claimable``, filtering a whole backlog (measured: 337 buffers against 6 for one
#   probe behind 5,000 runs of another tenant). Whether another tenant (another project of
#   the tenant) competes is asked of the picked offer alone (two ``EXISTS`` over the eligible
#   offers: cheaper than windows over all of them, measured 20 us of server CPU a claim);
# * ``tenant_mark`` / ``project_mark``: the last service (``last_claimed_at``), written where
#   it can change an order: when another tenant (another project of the tenant) had an offer
#   too, and always under a limit, where it is the fence. Under a limit the count must still
#   be true at commit: the mark rewrites ``last_claimed_at`` only if it still holds the value
#   read with the count (READ COMMITTED re-checks the condition on the newest row after
#   waiting for a concurrent claim's lock), so of two claims that counted the same free place
#   one claims and the other claims nothing (``fenced`` is empty) and retries
#   (``_CLAIM_RETRIES``). Runs only leave ``running`` without touching the mark, so a count
#   can only be too high, never too low: the limit is never exceeded. The project's mark joins
#   the tenant's, so every claim locks a tenant row before a project row (no deadlock);
# * ``r``: the run row (fencing token + 1, lease), ``w`` its working session's writer, ``e``
#   the ``run.claimed`` event.
#
# The first column says whether an offer was picked: picked but nothing claimed is a lost race.
_CLAIM_SQL = f"""
WITH RECURSIVE offers AS (
    {{offers}}
), candidates AS (
    SELECT offers.tenant_id, offers.project_id, offers.id AS head_id, offers.priority,
           offers.created_at, tenant.max_running_runs AS tenant_max,
           project.max_running_runs AS project_max, tenant.last_claimed_at AS tenant_last,
           project.last_claimed_at AS project_last, busy.tenant_running, busy.project_running
    FROM offers
    CROSS JOIN LATERAL (
        SELECT count(*) AS tenant_running,
               count(*) FILTER (WHERE project_id = offers.project_id) AS project_running
        FROM {_RUN} WHERE tenant_id = offers.tenant_id AND status = 'running'
    ) AS busy
    CROSS JOIN LATERAL (
        SELECT slug, max_running_runs, last_claimed_at FROM {_TENANT}
        WHERE id = offers.tenant_id LIMIT 1
    ) AS tenant
    CROSS JOIN LATERAL (
        SELECT max_running_runs, last_claimed_at FROM {_PROJECT}
        WHERE id = offers.project_id LIMIT 1
    ) AS project
    WHERE TRUE {{skip}}
), eligible AS (
    SELECT * FROM candidates
    WHERE (tenant_max IS NULL OR tenant_running < tenant_max)
          AND (project_max IS NULL OR project_running < project_max)
), picked AS (
    SELECT next_run.id, offer.tenant_id, offer.project_id,
           offer.tenant_max IS NOT NULL AS tenant_limited,
           offer.project_max IS NOT NULL AS project_limited,
           offer.tenant_last, offer.project_last,
           EXISTS (SELECT 1 FROM eligible AS other WHERE other.tenant_id <> offer.tenant_id)
               AS tenants_compete,
           EXISTS (SELECT 1 FROM eligible AS other
                   WHERE other.tenant_id = offer.tenant_id
                         AND other.project_id <> offer.project_id) AS projects_compete
    FROM (
        SELECT * FROM eligible
        ORDER BY tenant_running, tenant_last NULLS FIRST, tenant_id, priority DESC,
                 project_running, project_last NULLS FIRST, created_at, head_id
    ) AS offer
    CROSS JOIN LATERAL (
        SELECT id FROM (
            SELECT id FROM {_RUN}
            WHERE id = offer.head_id AND status = 'queued' {{claimable}}
            FOR UPDATE SKIP LOCKED
        ) AS own
        UNION ALL
        SELECT id FROM (
            SELECT id FROM {_RUN}
            WHERE status = 'queued' {{claimable}}
                  AND (tenant_id, project_id) >= (offer.tenant_id, offer.project_id)
                  AND (tenant_id, project_id) <= (offer.tenant_id, offer.project_id)
            ORDER BY tenant_id, project_id, priority DESC, created_at
            LIMIT 1
            FOR UPDATE SKIP LOCKED
        ) AS next_in_project
        LIMIT 1
    ) AS next_run
    LIMIT 1
), tenant_mark AS (
    UPDATE {_TENANT} AS tenant SET last_claimed_at = clock_timestamp()
    FROM picked
    WHERE tenant.id = picked.tenant_id AND (picked.tenant_limited OR picked.tenants_compete)
          AND (NOT picked.tenant_limited
               OR tenant.last_claimed_at IS NOT DISTINCT FROM picked.tenant_last)
    RETURNING tenant.id
), project_mark AS (
    UPDATE {_PROJECT} AS project SET last_claimed_at = clock_timestamp()
    FROM picked LEFT JOIN tenant_mark ON TRUE
    WHERE project.id = picked.project_id
          AND (picked.project_limited OR picked.projects_compete)
          AND (NOT picked.project_limited
               OR project.last_claimed_at IS NOT DISTINCT FROM picked.project_last)
          AND (NOT picked.tenant_limited OR tenant_mark.id IS NOT NULL)
    RETURNING project.id
), fenced AS (
    SELECT picked.id FROM picked
    WHERE (NOT picked.tenant_limited OR EXISTS (SELECT 1 FROM tenant_mark))
          AND (NOT picked.project_limited OR EXISTS (SELECT 1 FROM project_mark))
), r AS (
    UPDATE {_RUN} AS run
    SET status = 'running', fencing_token = run.fencing_token + 1, lease_owner = %(worker)s,
        lease_expires_at = now() + make_interval(secs => %(lease)s),
        started_at = COALESCE(run.started_at, now()), wake_at = NULL,
        event_seq = run.event_seq + 1, updated_at = now()
    FROM fenced
    WHERE run.id = fenced.id
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
SELECT EXISTS (SELECT 1 FROM picked), r.id, r.fencing_token, r.event_seq,
       (SELECT length FROM w), {{rows}}
FROM (VALUES (1)) AS one (x)
LEFT JOIN (
    r JOIN {_PROJECT} AS project ON project.id = r.project_id
    LEFT JOIN {_SESSION} AS session ON session.id = r.session_id
) ON TRUE
"""  # noqa: S608 - table names from model metadata, values are parameters

# Each (tenant, project) pair's offer, its next claimable run, in index order: a skip scan,
# each step one probe of ``run_tenant_claimable`` for the first claimable run after the last
# pair (the sort is the index's order; a pair without a claimable run yields none).
_OFFERS_SCAN = f"""
    (SELECT tenant_id, project_id, id, priority, created_at FROM {_RUN}
     WHERE status = 'queued' {{claimable}}
     ORDER BY tenant_id, project_id, priority DESC, created_at LIMIT 1)
    UNION ALL
    SELECT next_offer.* FROM offers CROSS JOIN LATERAL (
        SELECT tenant_id, project_id, id, priority, created_at FROM {_RUN}
        WHERE status = 'queued' {{claimable}}
              AND (tenant_id, project_id) > (offers.tenant_id, offers.project_id)
        ORDER BY tenant_id, project_id, priority DESC, created_at
        LIMIT 1
    ) AS next_offer"""  # noqa: S608 - table names from model metadata

# The offer of the one run a claim asks for.
_OFFER_ONE = f"""
    SELECT tenant_id, project_id, id, priority, created_at FROM {_RUN}
    WHERE id = %(run)s AND status = 'queued' {{claimable}}"""  # noqa: S608


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


#: The claim statement's first column of the run's row (before it: picked, id, token, event
#: seq, session length).
_ROWS_FROM = 5


def _claimed(row: Sequence[Any], token: int, length: int | None) -> tuple[Run, Session | None]:
    """The claimed run (its project loaded) and its session from the claim's row."""
    first = _ROWS_FROM
    run_columns = len(Run._meta.concrete_fields)
    project_columns = len(Project._meta.concrete_fields)
    run = _instance(Run, row[first : first + run_columns])
    project = _instance(Project, row[first + run_columns : first + run_columns + project_columns])
    Run.project.field.set_cached_value(run, project)
    session_row = row[first + run_columns + project_columns :]
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
    """Take the next claimable run (or that one): queued, timer due, its tenant and project
    under their running limits; in the fair order of the module docstring.

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


@functools.cache
def _claim_sql(*, one: bool, skip: bool, workflows: bool, opaque: bool) -> str:
    """The claim statement for a kind of request (formatted once per kind)."""
    conditions = ["AND (wake_at IS NULL OR wake_at <= now())"]
    if one:
        conditions.append("AND id = %(run)s")
    if workflows:
        conditions.append("AND workflow = ANY(%(workflows)s)")
    if not opaque:
        conditions.append("AND workflow <> ''")
    claimable = " ".join(conditions)
    return _CLAIM_SQL.format(
        offers=(_OFFER_ONE if one else _OFFERS_SCAN).format(claimable=claimable),
        claimable=claimable,
        skip="AND tenant.slug <> ALL(%(skip)s)" if skip else "",
        rows=_claimed_rows_sql(),
    )


def _sql_claim(request: _ClaimRequest) -> Claim | None:
    sql = _claim_sql(
        one=request.run_id is not None,
        skip=bool(request.skip_tenants),
        workflows=request.workflows is not None,
        opaque=request.opaque,
    )
    params = {
        "worker": request.worker,
        "lease": Int8(request.lease_seconds or default_lease_seconds()),
        "run": request.run_id,
        "skip": list(request.skip_tenants),
        "workflows": list(request.workflows or ()),
    }
    for _ in range(_CLAIM_RETRIES + 1):
        rows = composed.execute_composed(sql, params)
        picked, claimed_id, token, event_seq, length = rows[0][:_ROWS_FROM]
        if claimed_id is not None:
            break
        if not picked:
            return None
        # Another claim took a place under the same limit first: count again.
    else:
        return None
    publish_event(claimed_id, int(event_seq))
    length = int(length) if length is not None else None
    run, session = _claimed(rows[0], int(token), length)
    return request.claim(claimed_id, int(token), length, run, session)


@dataclass(frozen=True)
class _Offer:
    """A project's next claimable run and what the fair order sorts it by (``_CLAIM_SQL``)."""

    run_id: uuid.UUID
    tenant_id: uuid.UUID
    project_id: uuid.UUID
    priority: int
    created_at: Any
    tenant_running: int
    tenant_last: Any
    project_running: int
    project_last: Any
    tenant_limited: bool = False
    project_limited: bool = False
    #: Another tenant has an offer too; another project of this tenant has one.
    tenants_compete: bool = False
    projects_compete: bool = False

    def key(self) -> tuple[Any, ...]:
        # NULLS FIRST: never served goes before served longest ago.
        return (
            self.tenant_running,
            self.tenant_last is not None,
            self.tenant_last or 0,
            self.tenant_id,
            -self.priority,
            self.project_running,
            self.project_last is not None,
            self.project_last or 0,
            self.created_at,
            self.run_id,
        )


def _orm_offers(request: _ClaimRequest, now: Any) -> tuple[list[_Offer], models.QuerySet[Run]]:
    """The offers of ``_CLAIM_SQL`` in its fair order, without those at a limit (one query per
    (tenant, project) pair with queued runs, found in index order as the skip scan does), and
    the claimable runs."""
    queued = Run.objects.filter(status="queued")
    claimable = queued.filter(Q(wake_at__isnull=True) | Q(wake_at__lte=now))
    if request.run_id is not None:
        claimable = claimable.filter(id=request.run_id)
    if request.workflows is not None:
        claimable = claimable.filter(workflow__in=request.workflows)
    if not request.opaque:
        claimable = claimable.exclude(workflow="")
    if request.run_id is not None:
        pairs = list(queued.filter(id=request.run_id).values_list("tenant_id", "project_id"))
    else:
        pairs = []
        step = queued.order_by("tenant_id", "project_id").values_list("tenant_id", "project_id")
        pair = step.first()
        while pair is not None:
            pairs.append(pair)
            tenant_id, project_id = pair
            pair = step.filter(
                Q(tenant_id__gt=tenant_id) | Q(tenant_id=tenant_id, project_id__gt=project_id)
            ).first()
    if not pairs:
        return [], claimable
    tenants = {
        row["id"]: row
        for row in Tenant.objects.filter(id__in={t for t, _ in pairs})
        .exclude(slug__in=request.skip_tenants)
        .values("id", "max_running_runs", "last_claimed_at")
    }
    projects = {
        row["id"]: row
        for row in Project.objects.unscoped()
        .filter(id__in={p for _, p in pairs})
        .values("id", "max_running_runs", "last_claimed_at")
    }
    tenant_running: dict[Any, int] = {}
    project_running: dict[Any, int] = {}
    for row in (
        Run.objects.filter(status="running")
        .values("tenant_id", "project_id")
        .annotate(n=Count("id"))
        .order_by()
    ):
        tenant_running[row["tenant_id"]] = tenant_running.get(row["tenant_id"], 0) + row["n"]
        project_running[row["project_id"]] = row["n"]
    offers = []
    for tenant_id, project_id in pairs:
        tenant, project = tenants.get(tenant_id), projects[project_id]
        if tenant is None:  # a skipped tenant
            continue
        running_t, running_p = tenant_running.get(tenant_id, 0), project_running.get(project_id, 0)
        if _at_limit(tenant["max_running_runs"], running_t) or _at_limit(
            project["max_running_runs"], running_p
        ):
            continue
        head = (
            claimable.filter(tenant_id=tenant_id, project_id=project_id)
            .order_by("-priority", "created_at")
            .values("id", "priority", "created_at")
            .first()
        )
        if head is None:
            continue
        offers.append(
            _Offer(
                run_id=head["id"],
                tenant_id=tenant_id,
                project_id=project_id,
                priority=head["priority"],
                created_at=head["created_at"],
                tenant_running=running_t,
                tenant_last=tenant["last_claimed_at"],
                project_running=running_p,
                project_last=project["last_claimed_at"],
                tenant_limited=tenant["max_running_runs"] is not None,
                project_limited=project["max_running_runs"] is not None,
            )
        )
    per_tenant = Counter(offer.tenant_id for offer in offers)
    offers = [
        replace(
            offer,
            tenants_compete=len(offers) > per_tenant[offer.tenant_id],
            projects_compete=per_tenant[offer.tenant_id] > 1,
        )
        for offer in offers
    ]
    return sorted(offers, key=_Offer.key), claimable


def _at_limit(limit: int | None, running: int) -> bool:
    return limit is not None and running >= limit


def _under_limits_locked(offer: _Offer) -> bool:
    """Whether the offer's tenant and project are still under their limits, counted after
    locking their rows (tenant first, then project): on a database with row locks, a
    concurrent claim of the same tenant waits here, and counts after this one commits."""
    tenant = Tenant.objects.select_for_update().only("max_running_runs").get(id=offer.tenant_id)
    project = (
        Project.objects.unscoped()
        .select_for_update()
        .only("max_running_runs")
        .get(id=offer.project_id)
    )
    running = Run.objects.filter(status="running")
    if tenant.max_running_runs is not None and _at_limit(
        tenant.max_running_runs, running.filter(tenant_id=offer.tenant_id).count()
    ):
        return False
    return not (
        project.max_running_runs is not None
        and _at_limit(project.max_running_runs, running.filter(project_id=offer.project_id).count())
    )


def _orm_claim(request: _ClaimRequest) -> Claim | None:
    """The portable claim: the same run as ``_CLAIM_SQL`` would take, the same rows written,
    in one short transaction (several queries: SQLite's IMMEDIATE transaction holds the
    database's write lock from its start, so nothing claims meanwhile)."""
    now = timezone.now()
    with transaction.atomic():
        offers, claimable = _orm_offers(request, now)
        run: Run | None = None
        for offer in offers:
            # The project's next run no other claim holds (the offer's, without contention).
            run = (
                claimable.filter(tenant_id=offer.tenant_id, project_id=offer.project_id)
                .order_by("-priority", "created_at")
                .select_for_update(skip_locked=True)
                .first()
            )
            if run is not None and _under_limits_locked(offer):
                break
            run = None
        if run is None:
            return None
        run.status = "running"
        run.fencing_token += 1
        run.lease_owner = request.worker
        run.lease_expires_at = now + timedelta(
            seconds=request.lease_seconds or default_lease_seconds()
        )
        run.started_at = run.started_at or now
        run.wake_at = None
        save_with_event(
            run,
            "run.claimed",
            fields=[
                "status",
                "fencing_token",
                "lease_owner",
                "lease_expires_at",
                "started_at",
                "wake_at",
            ],
            data={"worker": request.worker, "token": run.fencing_token, "attempt": run.attempt},
        )
        # The last service, written as ``_CLAIM_SQL`` writes it: under a limit, or when
        # others competed for the claim.
        served = timezone.now()
        if offer.tenant_limited or offer.tenants_compete:
            Tenant.objects.filter(id=run.tenant_id).update(last_claimed_at=served)
        if offer.project_limited or offer.projects_compete:
            Project.objects.unscoped().filter(id=run.project_id).update(last_claimed_at=served)
        length = None
        if run.session_id is not None and session_services.session_claim_writer(
            session=Session(id=run.session_id), run_id=run.id, token=run.fencing_token
        ):
            length = session_length(run.session_id)
    return request.claim(run.id, run.fencing_token, length)


#: The largest running limit (the column is a PostgreSQL ``integer``).
MAX_RUNNING_LIMIT = 2_147_483_647


@dataclass(frozen=True)
class QueueLimitChange:
    """A running limit before and after :func:`queue_limit_set` (``None``: no limit)."""

    before: int | None
    after: int | None


def queue_limit_set(
    *, tenant: Tenant, project: Project | None = None, limit: int | None
) -> QueueLimitChange:
    """Set (``limit``, 0 pauses) or clear (``None``) the running limit of ``tenant``, or of
    ``project`` (one of the tenant's). The claim reads it at its next statement; runs already
    running keep running. Locks the row it changes (short: one transaction, no I/O)."""
    if limit is not None and not 0 <= limit <= MAX_RUNNING_LIMIT:
        raise ValidationFailed(
            f"a running limit is between 0 and {MAX_RUNNING_LIMIT}",
            details={"max_running_runs": limit},
        )
    if project is not None and project.tenant_id != tenant.id:
        raise ValidationFailed("the project is not the tenant's", details={"project": project.slug})
    with transaction.atomic():
        row: Tenant | Project
        if project is None:
            row = Tenant.objects.select_for_update().get(id=tenant.id)
        else:
            row = Project.objects.unscoped().select_for_update().get(id=project.id)
        before = row.max_running_runs
        row.max_running_runs = limit
        row.save(update_fields=["max_running_runs"])
    return QueueLimitChange(before=before, after=limit)


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
