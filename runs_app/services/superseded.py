"""The audit rows of the runs a new run's submission stopped (concurrent input,
docs/concurrent-input.md): one per run it interrupted, rolled back or cancelled, next to the
submission's own ``run.create`` row. The API and the console write them alike."""

from __future__ import annotations

from typing import Any

from openrath_project.tenancy.models import Project
from openrath_project.tenancy.services import audit_record
from runs_app.models import Run, RunEvent

#: The event a superseded run got -> the audit action of what was done to it.
_ACTIONS = {
    "run.rolled_back": "run.rollback",
    "run.interrupt_requested": "run.interrupt",
    "run.cancelled": "run.supersede",
}


def audit_superseded(
    *,
    run: Run,
    project: Project,
    actor: str,
    request_id: str,
    status_code: int,
    via: str | None = None,
) -> int:
    """Record what ``run``'s submission (policy ``interrupt`` or ``rollback``) did to each
    active run it found; how many rows were written. ``via`` (e.g. ``"console"``) is added to
    the details, as the submission's own row has it."""
    if run.input_policy not in ("interrupt", "rollback"):
        return 0
    events = RunEvent.objects.filter(
        run__superseded_by=run, type__in=list(_ACTIONS), data__by_run=str(run.id)
    ).order_by("run_id", "seq")
    written = 0
    for event in events:
        details: dict[str, Any] = {"by_run": str(run.id), "input_policy": run.input_policy}
        if via:
            details["via"] = via
        audit_record(
            actor=actor,
            action=_ACTIONS[event.type],
            outcome="success",
            tenant=project.tenant,
            project=project,
            object_type="run",
            object_id=str(event.run_id),
            status_code=status_code,
            request_id=request_id,
            details=details,
        )
        written += 1
    return written
