"""A run's event log: the next event of a locked run, and its publication after commit.

Every write of a run row that records an event goes through :func:`add_event` (or, in a
composed statement, writes the event itself and calls :func:`publish_event`); the WebSocket and
SSE streams hear of an event only once its transaction committed.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from runs_app.models import Run, RunEvent
from sessions_app import streaming
from webhooks_app import outbox as webhook_outbox


def publish_event(run_id: uuid.UUID, seq: int) -> None:
    """Tell the streams about event ``seq`` of the run once the transaction commits."""
    transaction.on_commit(lambda: streaming.run_event_committed(run_id, seq))


def add_event(run: Run, type_: str, *, step: str = "", data: dict[str, Any] | None = None) -> int:
    """Append an event to a locked (or just created) run; the caller saves ``event_seq``."""
    run.event_seq += 1
    RunEvent.objects.create(
        run_id=run.id, seq=run.event_seq, type=type_, step=step, data=data or {}
    )
    webhook_outbox.record_run_event(run, type_, run.event_seq, step=step, data=data)
    publish_event(run.id, run.event_seq)
    return run.event_seq
