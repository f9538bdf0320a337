"""Starting a run on PostgreSQL in one transaction: the queue cap under a lock, then one statement.

``run_create`` (:mod:`.runs`) builds the working session, the run and its ``run.created`` event
as model instances, exactly as the ORM would insert them, and :func:`insert_start` writes the
three rows with one composed statement that also checks, in the same snapshot, that the tenant
is under its queue cap (a count bounded by the cap: it reads at most ``cap`` index entries) and
that the run's plan is stored (a primary-key lookup); :func:`insert_run` does the same for a run
whose working session the transaction wrote already (a fork, a session with a first message).
:func:`lock_tenant_queue` comes just before either statement: a per-tenant advisory lock, so
concurrent submissions of one tenant count one after the other and the cap holds under
concurrency (the composed statement's snapshot is taken after the lock is granted, so it sees
every submission committed before it). Submissions of different tenants do not wait for each
other (the lock's key is the tenant's).
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

import psycopg
from django.db import connection, models
from psycopg.types.numeric import Int8

from runs_app.models import Run, RunEvent, WorkflowPlan
from sessions_app.models import LineageEdge, Session

#: The first key of the two-key advisory lock that serialises a tenant's submissions.
QUEUE_LOCK_NAMESPACE = 20_005


def lock_tenant_queue(tenant_id: uuid.UUID) -> None:
    """Take the tenant's queue lock until the current transaction ends (PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [QUEUE_LOCK_NAMESPACE, str(tenant_id)]
        )


@functools.cache
def _fork_and_lock_sql() -> str:
    first_edge = 1 + len(_columns(Session))
    after = first_edge + len(_columns(LineageEdge))
    sessions = connection.ops.quote_name(Session._meta.db_table)
    return f"""
WITH s AS (
    {_insert(Session, "(VALUES (1)) AS one", 1)}
), e AS (
    {_insert(LineageEdge, "(VALUES (1)) AS one", first_edge)}
), k AS (
    SELECT id FROM {sessions} WHERE id IN (${after}, ${after + 1}) FOR KEY SHARE
)
SELECT pg_advisory_xact_lock(${after + 2}, hashtext(${after + 3}))
FROM (SELECT count(*) FROM k) AS referenced_rows_locked
"""  # noqa: S608 - names from model metadata, values are parameters


def insert_fork_and_lock(*, session: Session, edge: LineageEdge, tenant_id: uuid.UUID) -> None:
    """Insert a run's working session forked from another and its lineage edge
    (``sessions_app.services.session_fork_rows``), then take the tenant's queue lock
    (:func:`lock_tenant_queue`): one round trip for what were three, in the same lock order
    (the sessions the two rows refer to, the forked one and the branch's storage base, are
    share-locked before the queue lock is asked for, as the foreign-key checks of separate
    inserts did). Call inside a transaction."""
    params = [*_values(session), *_values(edge), edge.parent_id, session.base_id or edge.parent_id]
    params += [QUEUE_LOCK_NAMESPACE, str(tenant_id)]
    with connection.wrap_database_errors, psycopg.RawCursor(connection.connection) as cursor:
        cursor.execute(_fork_and_lock_sql(), params, prepare=True)
    for obj in (session, edge):
        obj._state.adding = False
        obj._state.db = connection.alias


def _columns(model: type[models.Model]) -> list[models.Field]:
    """The columns an ORM insert of ``model`` writes: every concrete one but an auto id."""
    return [
        field
        for field in model._meta.concrete_fields
        if not isinstance(field, models.AutoField | models.BigAutoField)
    ]


def _insert(model: type[models.Model], source: str, first: int) -> str:
    """``INSERT INTO <table> (<columns>) SELECT $first, ... FROM <source>``. Each value is cast
    to its column's type without length or precision: the assignment to the column applies
    them, refusing a too-long value as the ORM's INSERT does (a cast to ``varchar(n)`` would
    truncate it)."""
    quote = connection.ops.quote_name
    fields = _columns(model)
    columns = ", ".join(quote(str(field.column)) for field in fields)
    values = ", ".join(
        f"${first + index}::{str(field.db_type(connection)).split('(')[0]}"
        for index, field in enumerate(fields)
    )
    table = quote(model._meta.db_table)
    return f"INSERT INTO {table} ({columns}) SELECT {values} FROM {source}"  # noqa: S608


def _values(obj: models.Model) -> list[Any]:
    """``obj``'s column values prepared as the ORM's insert prepares them (``pre_save`` also
    fills its ``auto_now`` fields)."""
    return [
        field.get_db_prep_save(field.pre_save(obj, add=True), connection)
        for field in _columns(type(obj))
    ]


def _cap_and_plan() -> str:
    """The two first parts of both start statements: the tenant's queued runs, counted up to the
    cap (``$1`` the tenant, ``$2`` the cap), and the plan if it is stored (``$3`` its hash)."""
    quote = connection.ops.quote_name
    runs, plans = quote(Run._meta.db_table), quote(WorkflowPlan._meta.db_table)
    return f"""WITH q AS (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM {runs} WHERE tenant_id = $1 AND status = 'queued' LIMIT $2
    ) AS queued
), p AS (
    SELECT hash FROM {plans} WHERE hash = $3
)"""  # noqa: S608 - names from model metadata, values are parameters


@functools.cache
def _start_sql() -> str:
    first_run = 4 + len(_columns(Session))
    first_event = first_run + len(_columns(Run))
    return f"""
{_cap_and_plan()}, s AS (
    {_insert(Session, "q, p WHERE q.n < $2", 4)}
    RETURNING id
), r AS (
    {_insert(Run, "s", first_run)}
    RETURNING id
), e AS (
    {_insert(RunEvent, "r", first_event)}
)
SELECT (SELECT n FROM q), (SELECT count(*) FROM p), (SELECT count(*) FROM r)
"""  # noqa: S608 - names from model metadata, values are parameters


def insert_start(
    *, session: Session, run: Run, event: RunEvent, cap: int
) -> tuple[int, bool, bool]:
    """Insert ``session``, ``run`` and ``event`` if the tenant has fewer than ``cap`` queued
    runs and the run's plan is stored. Returns ``(queued, plan_stored, inserted)``: the bounded
    count of the tenant's queued runs before this one, whether the plan row exists, whether the
    rows were inserted. Call inside a transaction, after :func:`lock_tenant_queue`."""
    params = [run.tenant_id, Int8(cap), run.plan_id, *_values(session), *_values(run)]
    params += _values(event)
    with connection.wrap_database_errors, psycopg.RawCursor(connection.connection) as cursor:
        cursor.execute(_start_sql(), params, prepare=True)
        queued, plans_found, inserted = cursor.fetchone()  # type: ignore[misc]
    if inserted:
        for obj in (session, run):
            obj._state.adding = False
            obj._state.db = connection.alias
    return int(queued), bool(plans_found), bool(inserted)


@functools.cache
def _run_sql() -> str:
    first_event = 4 + len(_columns(Run))
    return f"""
{_cap_and_plan()}, r AS (
    {_insert(Run, "q, p WHERE q.n < $2", 4)}
    RETURNING id
), e AS (
    {_insert(RunEvent, "r", first_event)}
)
SELECT (SELECT n FROM q), (SELECT count(*) FROM r)
"""  # noqa: S608 - names from model metadata, values are parameters


def insert_run(*, run: Run, event: RunEvent, cap: int) -> tuple[int, bool]:
    """Insert ``run`` and its ``event`` if the tenant has fewer than ``cap`` queued runs and the
    run's plan is stored (the rows it refers to, its working session, are written already in
    this transaction). Returns ``(queued, inserted)``: the bounded count of the tenant's
    queued runs before this one, whether the rows were inserted (not inserted under the cap:
    the plan is not stored). Call inside a transaction, after :func:`lock_tenant_queue`."""
    params = [run.tenant_id, Int8(cap), run.plan_id, *_values(run), *_values(event)]
    with connection.wrap_database_errors, psycopg.RawCursor(connection.connection) as cursor:
        cursor.execute(_run_sql(), params, prepare=True)
        queued, inserted = cursor.fetchone()  # type: ignore[misc]
    if inserted:
        run._state.adding = False
        run._state.db = connection.alias
    return int(queued), bool(inserted)
