"""Scoped reads of runs, their events and checkpoints."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet

from openrath_project import large_values
from openrath_project.errors import NotFound
from openrath_project.prepared import PreparedQuery
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import parse_uuid
from runs_app.models import Checkpoint, Interrupt, Run, RunEvent
from runs_app.services import run_state_at
from runs_app.state_delta import apply


def run_list(*, principal: Principal) -> QuerySet[Run]:
    """Runs in the principal's tenant and projects."""
    return Run.objects.for_principal(principal)


def run_get(*, principal: Principal, run_id: object, related: tuple[str, ...] = ()) -> Run:
    """A run in scope, or 404 (another tenant's run is indistinguishable from a missing one).
    ``related``: relations read in the same query (``select_related``)."""
    as_uuid = parse_uuid(run_id)
    runs = run_list(principal=principal)
    if related:
        runs = runs.select_related(*related)
    run = runs.filter(id=as_uuid).first() if as_uuid else None
    if run is None:
        raise NotFound("run not found", details={"run": str(run_id)})
    return run


#: The run endpoints' lookup (``GET /api/v1/runs/{id}/`` and its actions), compiled once
#: (openrath_project/prepared.py): with its project, which the view audits, and its fork edge
#: (``forked_from``, a reverse one-to-one), which ``RunOut`` shows: one query, not three.
_RUN_FOR_VIEW: PreparedQuery[Run] = PreparedQuery(
    Run,
    lambda principal, run_id: (
        run_list(principal=principal).select_related("project", "forked_from").filter(id=run_id)
    ),
    principal=Principal,
    run_id=uuid.UUID,
)


def run_for_view(*, principal: Principal, run_id: object) -> Run:
    """:func:`run_get` with the run's project and fork edge read in the same query (compiled
    once per process), or 404."""
    as_uuid = parse_uuid(run_id)
    run = _RUN_FOR_VIEW.first(principal=principal, run_id=as_uuid) if as_uuid else None
    if run is None:
        raise NotFound("run not found", details={"run": str(run_id)})
    return run


def event_page(run: Run, *, after: int = 0, limit: int = 100) -> list[RunEvent]:
    return list(RunEvent.objects.filter(run=run, seq__gt=after).order_by("seq")[:limit])


def checkpoint_steps(run: Run) -> set[str]:
    """The steps the run has checkpointed (the plan view marks them visited)."""
    return set(
        Checkpoint.objects.filter(run=run).order_by().values_list("step", flat=True).distinct()
    )


def checkpoint_page(run: Run, *, after: int = 0, limit: int = 50) -> list[dict[str, Any]]:
    """Checkpoints with their whole state rebuilt (from the nearest full checkpoint)."""
    rows = list(Checkpoint.objects.filter(run=run, seq__gt=after).order_by("seq")[:limit])
    if not rows:
        return []
    if rows[0].full:  # e.g. a fork's first row: its branch point, stored whole
        state: dict[str, Any] = {}
    elif rows[0].seq > 1:
        state = run_state_at(run, rows[0].seq - 1)
    else:
        state = dict(run.input)
    out = []
    for row in rows:
        state = dict(row.state) if row.full else apply(state, row.state)
        out.append({"checkpoint": row, "state": state})
    return out


def interrupt_list(*, principal: Principal) -> QuerySet[Interrupt]:
    """Interrupts in the principal's tenant and projects."""
    return Interrupt.objects.for_principal(principal)


#: ``interrupt_get``'s lookup, compiled once (openrath_project/prepared.py): every resolve.
_INTERRUPT_BY_ID: PreparedQuery[Interrupt] = PreparedQuery(
    Interrupt,
    # its project with it: the view audits it
    lambda principal, interrupt_id: (
        interrupt_list(principal=principal).select_related("project").filter(id=interrupt_id)
    ),
    principal=Principal,
    interrupt_id=uuid.UUID,
)


#: A resolve's lookup: the interrupt and its project, and its run locked FOR UPDATE (the lock
#: order's first row), in one statement. The interrupt's row is not locked: its columns are as
#: the statement's snapshot saw them, stale at most in their status (``interrupt_resolve``).
_INTERRUPT_LOCKING_RUN: PreparedQuery[Interrupt] = PreparedQuery(
    Interrupt,
    lambda principal, interrupt_id: (
        interrupt_list(principal=principal)
        .select_related("project", "run")
        .select_for_update(of=("run",))
        .filter(id=interrupt_id)
    ),
    principal=Principal,
    interrupt_id=uuid.UUID,
)


def interrupt_get(
    *, principal: Principal, interrupt_id: object, lock_run: bool = False
) -> Interrupt:
    """The interrupt (with its project), or a 404. ``lock_run``: its run too, read and locked
    FOR UPDATE in the same statement (``interrupt.run``), for a resolve in the caller's
    transaction."""
    as_uuid = parse_uuid(interrupt_id)
    query = _INTERRUPT_LOCKING_RUN if lock_run else _INTERRUPT_BY_ID
    found = query.first(principal=principal, interrupt_id=as_uuid) if as_uuid else None
    if found is None:
        raise NotFound("interrupt not found", details={"interrupt": str(interrupt_id)})
    return found


def run_refers_to(run: Run, digest: str) -> bool:
    """Whether the run's input, state, output or any checkpoint holds a reference to the
    artifact ``digest`` (what lets a reader of the run read the artifact)."""
    for value in (run.input, run.state, run.output):
        if large_values.mentions(value, digest):
            return True
    states = Checkpoint.objects.filter(run_id=run.id).values_list("state", flat=True)
    return any(large_values.mentions(state, digest) for state in states.iterator())
