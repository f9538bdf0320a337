"""The composed PostgreSQL statements: whether they run, and how one is executed.

A claim (:mod:`.leases`) and a step commit (:mod:`.checkpoints`) are each one composed
statement on PostgreSQL and one short ORM transaction elsewhere; :func:`composed_sql` is the one
switch between the two paths, looked up at call time (a test forces the portable path by
patching it here).
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from django.db import IntegrityError, connection, transaction

from sessions_app import services as session_services
from sessions_app.models import USAGE_CONSTRAINT


def composed_sql() -> bool:
    """Whether claims and step commits run as the composed PostgreSQL statements. The database
    vendor alone decides: inside a transaction or not, a test or a worker, the same code runs.
    Every other database takes the portable ORM path, which writes the same rows
    (tests/runs_app/test_step_commit_paths.py runs one workflow down both and compares them)."""
    return connection.vendor == "postgresql"


def execute_composed(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Run one composed statement as a prepared statement: one round trip, committed on its own
    outside a transaction; inside one (a caller's ``atomic``) under a savepoint, so a refusal
    leaves the caller's transaction usable, as the ORM path's does."""
    connection.ensure_connection()
    scope = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    try:
        # Django's error wrapper, as for any ORM query: a lost connection is Django's
        # OperationalError (a 503 ``database_unavailable`` in a request) and the connection is
        # marked unusable, so the next request or worker loop opens a fresh one.
        with (
            scope,
            connection.wrap_database_errors,
            psycopg.Cursor(connection.connection) as cursor,
        ):
            cursor.execute(sql, params, prepare=True)
            # Whether rows came back, asked of the result itself: ``cursor.description`` would
            # build a column object per column each time (a claim returns about 90).
            result = cursor.pgresult
            return cursor.fetchall() if result is not None and result.nfields else []
    except IntegrityError as exc:  # the session's usage totals would overflow their domain
        if USAGE_CONSTRAINT not in str(exc):
            raise
        raise session_services.usage_full() from exc
