"""The console's "start a run on this session" form (the session page).

What ``POST /api/v1/runs/`` with a ``session`` does, from the browser: a registered workflow,
an optional user message, the initial state and the concurrent-input policy for when the session
already has an active run (docs/concurrent-input.md: ``reject``, ``enqueue``, ``interrupt``,
``rollback``; empty: the workflow's default). Needs ``runs:write``; audited as the API's
``run.create`` with ``via: console``, and each run the submission interrupted, rolled back or
cancelled gets its own row, as from the API. A refusal (``409 session_busy`` under ``reject``,
an unknown workflow, bad JSON, a state the workflow's input schema refuses) is shown on the
session page with what was typed, and changes nothing.
"""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from openrath_project.api.audit import audit_note
from openrath_project.console import display
from openrath_project.console.access import Console, console_page
from openrath_project.console.schema_form import parse_json
from openrath_project.console.views import ActionError, session_page
from openrath_project.errors import DomainError, ValidationFailed
from runs_app import registration, services
from runs_app.models import Run
from runs_app.services.superseded import audit_superseded
from sessions_app import selectors as session_selectors

#: The form's fields, kept as typed when the start is refused.
_FIELDS = ("workflow", "user_message", "state", "input_policy")


@require_POST
@console_page(grant="runs:write", action="run.create", object_type="run")
def session_start_run_view(
    request: HttpRequest, console: Console, session_id: uuid.UUID
) -> HttpResponse:
    session = session_selectors.session_get(principal=console.principal, session_id=session_id)
    project = session.project
    audit_note(request, project=project)
    form = {name: request.POST.get(name, "") for name in _FIELDS}
    try:
        registered = registration.workflows().get(form["workflow"].strip())
        raw_state = form["state"].strip()
        state = parse_json(raw_state, field="state") if raw_state else {}
        if not isinstance(state, dict):
            raise ValidationFailed(
                "state must be a JSON object", details={"state": ["not an object"]}
            )
        run, _ = services.run_create(
            project=project,
            workflow=registered,
            state=state,
            session=session,
            user_message=form["user_message"] or None,
            created_by=console.principal.actor,
            input_policy=form["input_policy"].strip() or None,
        )
    except DomainError as exc:
        audit_note(request, details={"error_code": exc.code, "via": "console"})
        return session_page(
            request,
            console,
            session,
            start_error=ActionError.of(exc, session.id),
            start_form=form,
            status=exc.status_code,
        )
    details: dict[str, object] = {"workflow": registered.name, "via": "console"}
    if run.input_policy:
        details["input_policy"] = run.input_policy
        if run.after_run_id is not None:
            details["after_run"] = str(run.after_run_id)
    audit_note(request, object_id=run.id, details=details)
    audit_superseded(
        run=run,
        project=project,
        actor=console.principal.actor,
        request_id=getattr(request, "request_id", ""),
        status_code=302,
        via="console",
    )
    messages.success(request, _started(run))
    return redirect("console:run", run_id=run.id)


def _started(run: Run) -> str:
    """What the start did, in a sentence for the run page."""
    short = display.short_id(run.id)
    if run.after_run_id is not None:
        return f"Queued run {short}: it starts when run {display.short_id(run.after_run_id)} ends."
    if run.input_policy == "interrupt":
        return f"Started run {short}: the active run stops at its next step and this one goes on."
    if run.input_policy == "rollback":
        return f"Started run {short} from the session as it was before the active run began."
    return f"Started run {short}."
