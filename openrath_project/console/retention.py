"""Console page of retention: each project's policy with its last passes, a dry run (what a
pass would remove now, with counts and bytes), applying a policy now, creating and deleting
one.

Thin callers of ``retention_app``'s selectors and services, like the other console pages.
Reading and dry runs need ``projects:read``; changing and applying, ``projects:write`` (an
admin's): anyone else's POST is a 403 that changes nothing; every action is audited.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from openrath_project.api.audit import audit_note
from openrath_project.console.access import Console, console_page
from openrath_project.console.schema_form import optional_int
from openrath_project.console.views import ActionError, _base, _filtered
from openrath_project.errors import DomainError
from openrath_project.tenancy.selectors import project_get
from retention_app import selectors, services
from retention_app.models import RetentionPass

#: Policies listed on the page, and passes shown per policy.
POLICIES_SHOWN = 200
PASSES_SHOWN = 3
#: Seconds one "apply now" may spend (the reconciler does the rest).
CONSOLE_APPLY_SECONDS = 10.0
_LIMIT_FIELDS = services.LIMIT_FIELDS


def _page(
    request: HttpRequest,
    console: Console,
    *,
    report: services.Report | None = None,
    report_policy: Any = None,
    error: ActionError | None = None,
    form: dict[str, str] | None = None,
    status: int = 200,
) -> HttpResponse:
    policies = list(
        _filtered(selectors.policy_list(principal=console.principal), console)
        .select_related("project")
        .order_by("-created_at", "-id")[:POLICIES_SHOWN]
    )
    passes: dict[object, list[RetentionPass]] = {}
    for policy in policies:
        passes[policy.id] = list(selectors.pass_list(policy=policy)[:PASSES_SHOWN])
    rows = [
        {"policy": p, "passes": [(one, _summary(one.removed)) for one in passes[p.id]]}
        for p in policies
    ]
    removed = (
        sorted((kind, m["count"], m["bytes"]) for kind, m in report.removed.items())
        if report is not None
        else []
    )
    return render(
        request,
        "console/retention.html",
        _base(
            console,
            rows=rows,
            can_change=console.principal.has_grant("projects:write"),
            shown=POLICIES_SHOWN,
            report=report,
            report_policy=report_policy,
            removed=removed,
            limit_fields=_LIMIT_FIELDS,
            error=error,
            form=form or {},
        ),
        status=status,
    )


def _summary(removed: dict[str, int]) -> str:
    """``"3 chunks, 1 runs"``: what a pass removed, by kind in name order."""
    return ", ".join(f"{n} {kind}" for kind, n in sorted(removed.items()) if n) or "nothing"


@require_GET
@console_page(grant="projects:read")
def retention(request: HttpRequest, console: Console) -> HttpResponse:
    return _page(request, console)


@require_GET
@console_page(grant="projects:read")
def retention_preview_view(
    request: HttpRequest, console: Console, policy_id: uuid.UUID
) -> HttpResponse:
    policy = selectors.policy_get(principal=console.principal, policy_id=policy_id)
    report = services.retention_dry_run(policy=policy)
    return _page(request, console, report=report, report_policy=policy)


@require_POST
@console_page(grant="projects:write", action="retention.create", object_type="retention_policy")
def retention_create_view(request: HttpRequest, console: Console) -> HttpResponse:
    form = {name: request.POST.get(name, "").strip() for name in ("project", *_LIMIT_FIELDS)}
    try:
        project = project_get(principal=console.principal, ref=form["project"])
        audit_note(request, project=project)
        values: dict[str, Any] = {name: optional_int(form[name], name) for name in _LIMIT_FIELDS}
        policy = services.policy_create(
            project=project, created_by=console.principal.actor, **values
        )
    except DomainError as exc:
        audit_note(request, details={"error_code": exc.code, "via": "console"})
        return _page(request, console, error=ActionError.of(exc), form=form, status=exc.status_code)
    audit_note(request, object_id=policy.id, details={"via": "console"})
    messages.success(request, f"Created the retention policy of {project.slug}.")
    return redirect("console:retention")


@require_POST
@console_page(grant="projects:write", action="retention.apply", object_type="retention_policy")
def retention_apply_view(
    request: HttpRequest, console: Console, policy_id: uuid.UUID
) -> HttpResponse:
    policy = selectors.policy_get(principal=console.principal, policy_id=policy_id)
    audit_note(request, object_id=policy.id, project=policy.project)
    report = services.retention_apply(
        policy=policy,
        trigger="console",
        actor=console.principal.actor,
        budget_seconds=CONSOLE_APPLY_SECONDS,
    )
    counts = {kind: m["count"] for kind, m in report.removed.items() if m["count"]}
    audit_note(request, details={"removed": counts, "via": "console"})
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "nothing"
    more = "" if report.complete else " (more is left for the next passes)"
    messages.success(
        request, f"Applied the policy of {policy.project.slug}: removed {summary}{more}."
    )
    return redirect("console:retention")


@require_POST
@console_page(grant="projects:write", action="retention.delete", object_type="retention_policy")
def retention_delete_view(
    request: HttpRequest, console: Console, policy_id: uuid.UUID
) -> HttpResponse:
    policy = selectors.policy_get(principal=console.principal, policy_id=policy_id)
    audit_note(request, object_id=policy.id, project=policy.project)
    services.policy_delete(policy=policy)
    audit_note(request, details={"via": "console"})
    messages.success(request, f"Deleted the retention policy of {policy.project.slug}.")
    return redirect("console:retention")
