"""The interrupt and effect ledgers' one write path: a status change of an interrupt or an
effect row, with the run's own transition, in one transaction that locks the run first.

The rows' tables belong to ``runs_app.interrupts`` and ``effects_app``; their transition tables
to :mod:`runs_app.transitions`. Both apps call :func:`ledger_transition` for every status
change of those rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from runs_app.models import Run
from runs_app.services.runs import RunChanges, run_transition
from runs_app.transitions import Changes, StateMachine


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
    locked_run: Run | None = None,
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

    ``locked_run``: the run, read and locked FOR UPDATE by the caller in the transaction it has
    open (``interrupt_resolve``): it is not read or locked again, and no savepoint is taken, so
    an error here rolls back the caller's whole transaction (which it does not catch).
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
    if locked_run is not None and locked_run.id != run_id:
        raise ValueError("locked_run is not the run the row belongs to")
    with transaction.atomic(savepoint=locked_run is None):
        if locked_run is not None:
            if token is not None and (
                locked_run.fencing_token != token or locked_run.status != "running"
            ):
                return False
        else:
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
                locked=locked_run,
            )
    return True
