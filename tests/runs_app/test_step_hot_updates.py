"""A step's updates of the run row and of its session row stay HOT (issue 20, W3 table bytes).

The step statement updates both rows at every step. PostgreSQL can write such an update as a
heap-only tuple (no new entry in any index, and the old version pruned in place) only when no
column the update changes is used by an index of the table: as a key, in an expression or in a
partial index's condition. One indexed column changed per step (``lease_expires_at``, the
session's ``updated_at``) makes every step insert into every index of both tables and leaves
their old versions to vacuum. This reads the columns from the statement itself and the indexes
from the catalogue, so a new index or a new per-step column that would break it fails here.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection

from runs_app.models import Run
from runs_app.services import checkpoints
from sessions_app.models import Session
from tests.support import require_postgres

pytestmark = pytest.mark.django_db


def _set_columns(sql: str, table: str) -> set[str]:
    """The columns assigned by the ``UPDATE <table> SET ...`` of ``sql`` (up to its ``FROM`` or
    ``WHERE`` line: a subquery inside an assignment stays on the assignment's line)."""
    match = re.search(rf"UPDATE {table}\s+SET(.*?)\n\s*(?:FROM|WHERE)\s", sql, re.S)
    assert match is not None, f"no UPDATE of {table} in the step statement"
    return set(re.findall(r"(?:^|,)\s*(\w+)\s*=\s", match.group(1), re.M))


def _indexed_columns(table: str) -> set[str]:
    """Every column of ``table`` an index uses (keys, expressions, partial conditions)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
            "AND NOT attisdropped",
            [table],
        )
        columns = {name for (name,) in cursor.fetchall()}
        cursor.execute(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = %s::regclass",
            [table],
        )
        definitions = [definition for (definition,) in cursor.fetchall()]
    # An index's definition names its table before the column list: only what follows counts.
    used = {
        token
        for definition in definitions
        for token in re.findall(r"\w+", definition.split(" USING ", 1)[1])
    }
    return columns & used


def test_the_step_changes_no_indexed_column_of_the_run_or_the_session() -> None:
    require_postgres()
    step = checkpoints._step_commit_sql(finishing=False)
    run_table, session_table = Run._meta.db_table, Session._meta.db_table

    run_columns = _set_columns(step, run_table)
    session_columns = _set_columns(step, session_table)
    # What the parse must find (the statement's own per-step columns), so that a parse that
    # found nothing cannot pass.
    assert {"checkpoint_seq", "event_seq", "session_len", "updated_at"} <= run_columns
    assert {"own_len", "usage_total_tokens", "updated_at"} <= session_columns

    assert run_columns & _indexed_columns(run_table) == set()
    assert session_columns & _indexed_columns(session_table) == set()
