"""A run's event log: the next event of a locked run, and its publication after commit.

Every write of a run row that records an event goes through :func:`save_with_event` (the event
and the run's row in one statement on PostgreSQL), :func:`add_event` (the caller saves the row)
or, in a composed statement, writes the event itself and calls :func:`publish_event`; the
WebSocket and SSE streams hear of an event only once its transaction committed.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import sql
from django.db.transaction import TransactionManagementError

from runs_app.models import Run, RunEvent
from runs_app.services import composed
from sessions_app import streaming
from webhooks_app import outbox as webhook_outbox


def publish_event(run_id: uuid.UUID, seq: int) -> None:
    """Tell the streams about event ``seq`` of the run once the transaction commits."""
    transaction.on_commit(lambda: streaming.run_event_committed(run_id, seq))


def add_event(run: Run, type_: str, *, step: str = "", data: dict[str, Any] | None = None) -> int:
    """Append an event to a locked (or just created) run; the caller saves ``event_seq``."""
    event = _next_event(run, type_, step=step, data=data)
    event.save(force_insert=True)
    return event.seq


def save_with_event(
    run: Run,
    type_: str,
    *,
    fields: Sequence[str],
    step: str = "",
    data: dict[str, Any] | None = None,
) -> int:
    """Append an event to a locked run and save the run's ``fields`` (with ``event_seq`` and
    ``updated_at``), as :func:`add_event` then ``run.save(update_fields=...)`` would.

    On PostgreSQL (:func:`~runs_app.services.composed.composed_sql`) it is one statement, the
    event's ``INSERT`` a CTE of the run's ``UPDATE``, both compiled by the ORM from the same
    values (one round trip fewer for every transition); elsewhere the two statements. Called
    in the transaction that locked the run; an ``UPDATE`` that misses raises, as ``save`` does,
    and the caller's transaction rolls the event back.
    """
    if not connection.in_atomic_block:
        # A miss raises after the event's INSERT ran: only the caller's transaction (in which
        # the run is locked) undoes it.
        raise TransactionManagementError(
            "save_with_event runs in the transaction that locked the run"
        )
    event = _next_event(run, type_, step=step, data=data)
    update_fields = list(dict.fromkeys([*fields, "event_seq", "updated_at"]))
    if not composed.composed_sql():
        event.save(force_insert=True)
        run.save(update_fields=update_fields)
        return event.seq
    meta = RunEvent._meta
    insert = sql.InsertQuery(RunEvent)
    columns = [field for field in meta.local_concrete_fields if field is not meta.auto_field]
    insert.insert_values(columns, [event])
    ((insert_sql, insert_params),) = insert.get_compiler(connection=connection).as_sql()
    written = [f for f in Run._meta.concrete_fields if {f.name, f.attname} & set(update_fields)]
    if len(written) != len(update_fields):
        raise ValueError(f"not all of {update_fields} are the run's concrete fields")
    update = sql.UpdateQuery(Run)  # no filter: the primary key's WHERE is added below, as the
    # ORM's would read, without building a lookup for it on every call
    update.add_update_fields([(field, None, field.pre_save(run, False)) for field in written])
    update_sql, update_params = update.get_compiler(connection=connection).as_sql()
    pk, quote = Run._meta.pk, connection.ops.quote_name
    assert pk is not None
    where = f"WHERE {quote(Run._meta.db_table)}.{quote(str(pk.column))} = %s"
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH new_event AS ({insert_sql}) {update_sql} {where}",
            (*insert_params, *update_params, pk.get_db_prep_value(run.pk, connection)),
        )
        if cursor.rowcount != 1:
            raise DatabaseError("Save with update_fields did not affect any rows.")
    return event.seq


def _next_event(run: Run, type_: str, *, step: str, data: dict[str, Any] | None) -> RunEvent:
    """The run's next event, not yet written: ``event_seq`` counts it, the webhook outbox
    records it and the streams hear of it once the transaction commits."""
    run.event_seq += 1
    webhook_outbox.record_run_event(run, type_, run.event_seq, step=step, data=data)
    publish_event(run.id, run.event_seq)
    return RunEvent(run_id=run.id, seq=run.event_seq, type=type_, step=step, data=data or {})
