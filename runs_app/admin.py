"""Runs admin: plans, runs, events, checkpoints and interrupts are the engine's state.

Everything is read-only; state changes only through the actions below, which call the same
services as the API and the console (``run_cancel``, ``run_resume``, ``interrupt_resolve``) and
write one audit event per row. A decision on an interrupt is bound to the request its
confirmation page showed (:func:`digest_shown`), as in the console and the API.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse

from openrath_project.console.admin_scope import EngineAdmin, reason_action, run_action
from openrath_project.errors import ValidationFailed
from openrath_project.tenancy.principal import Principal
from runs_app.interrupts import interrupt_resolve
from runs_app.models import Checkpoint, Interrupt, Run, RunEvent, WorkflowPlan
from runs_app.services import run_cancel, run_resume


@admin.register(WorkflowPlan)
class WorkflowPlanAdmin(EngineAdmin):
    """Plans are code: staff who are not superusers see the plans their tenants' runs pinned."""

    tenant_path = "runs__tenant"
    list_display = ("hash", "name", "version", "created_at")
    search_fields = ("name", "hash")
    json_fields = ("definition", "graph")


@admin.register(Run)
class RunAdmin(EngineAdmin):
    list_display = (
        "id",
        "workflow",
        "project__slug",
        "status",
        "attempt",
        "priority",
        "created_at",
        "finished_at",
    )
    list_filter = ("status", "tenant", "project")
    search_fields = ("workflow", "created_by", "review_reason", "branch")
    list_select_related = ("project",)
    json_fields = ("input", "state", "output", "error", "next_nodes", "fanout")
    date_hierarchy = "created_at"
    # Newest first. Run ids are uuid7 (time-ordered to the millisecond, openrath_project.ids), but
    # older runs may carry uuid4 ids (run_create used to mint those), so the time column leads
    # and the id only breaks ties.
    ordering = ("-created_at", "-id")
    actions = ("cancel_runs", "resume_runs")

    @admin.action(description="Cancel the selected runs (and their branches)")
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> HttpResponse | None:
        def proceed(reason: str) -> None:
            def apply(run: Run, principal: Principal) -> dict[str, Any]:
                run_cancel(run=run, reason=reason, actor=principal.actor)
                return {"reason": reason}

            run_action(
                self,
                request,
                queryset.order_by("id"),
                action="run.cancel",
                object_type="run",
                grant="runs:cancel",
                apply=apply,
            )

        return reason_action(
            self,
            request,
            queryset,
            title="Cancel runs",
            action_name="cancel_runs",
            required=False,
            proceed=proceed,
        )

    @admin.action(description="Resume the selected runs that need review (with a reason)")
    def resume_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> HttpResponse | None:
        def proceed(reason: str) -> None:
            def apply(run: Run, principal: Principal) -> dict[str, Any]:
                run_resume(run=run, reason=reason, actor=principal.actor)
                return {"reason": reason}

            run_action(
                self,
                request,
                queryset.order_by("id"),
                action="run.resume",
                object_type="run",
                grant="runs:write",
                apply=apply,
            )

        return reason_action(
            self,
            request,
            queryset,
            title="Resume runs",
            action_name="resume_runs",
            required=True,
            proceed=proceed,
        )


@admin.register(RunEvent)
class RunEventAdmin(EngineAdmin):
    tenant_path = "run__tenant"
    list_display = ("id", "run_id", "seq", "type", "step", "created_at")
    list_filter = ("type",)
    search_fields = ("type", "step")
    json_fields = ("data",)
    ordering = ("-id",)
    show_full_result_count = False


@admin.register(Checkpoint)
class CheckpointAdmin(EngineAdmin):
    tenant_path = "run__tenant"
    list_display = ("id", "run_id", "seq", "step", "full", "session_len", "attempt", "created_at")
    list_filter = ("full",)
    search_fields = ("step",)
    json_fields = ("state", "next_nodes")
    ordering = ("-id",)
    show_full_result_count = False


#: The confirmation page (templates/admin/openrath/action_reason.html) posts, for each row it
#: listed, the digest of the request it showed under this name followed by the row's key.
SHOWN_DIGEST_FIELD = "request_digest:"


def digest_shown(request: HttpRequest, row: Model) -> str:
    """The digest of ``row``'s request as the confirmation page showed it to the person now
    deciding; a row the page did not list (a forged or stale form) is refused, so no admin
    decision is bound to a request nobody saw."""
    shown = request.POST.get(f"{SHOWN_DIGEST_FIELD}{row.pk}", "")
    if not shown:
        raise ValidationFailed(
            "this row's request was not shown on the confirmation page: choose the action again",
            details={"request_digest": ["This field is required."]},
        )
    return shown


def _approvable_without_response(interrupt: Interrupt) -> None:
    schema = interrupt.schema if isinstance(interrupt.schema, dict) else {}
    required = schema.get("required") or []
    if required:
        raise ValidationFailed(
            "this approval needs a response (required: "
            f"{', '.join(map(str, required))}): answer it in the console's approvals queue",
            details={"response": ["required by the schema"]},
        )


@admin.register(Interrupt)
class InterruptAdmin(EngineAdmin):
    list_display = (
        "id",
        "title",
        "kind",
        "status",
        "run_id",
        "step",
        "decision",
        "resolved_by",
        "created_at",
    )
    list_filter = ("status", "kind", "decision", "tenant", "project")
    search_fields = ("title", "step", "resolved_by", "reason")
    json_fields = ("request", "schema", "response", "default")
    actions = ("approve", "reject")

    def _resolve(
        self, request: HttpRequest, queryset: QuerySet[Interrupt], decision: str
    ) -> HttpResponse | None:
        def proceed(reason: str) -> None:
            def apply(interrupt: Interrupt, principal: Principal) -> dict[str, Any]:
                shown = digest_shown(request, interrupt)
                if decision == "approve":
                    _approvable_without_response(interrupt)
                # Bound to the request the page showed: changed since, it is a digest_mismatch.
                resolved = interrupt_resolve(
                    interrupt=interrupt,
                    decision=decision,
                    reason=reason,
                    request_digest=shown,
                    actor=principal.actor,
                )
                return {
                    "decision": decision,
                    "reason": reason,
                    "request_digest": resolved.request_digest,
                    "run": str(resolved.run_id),
                }

            run_action(
                self,
                request,
                queryset.order_by("id"),
                action="interrupt.resolve",
                object_type="interrupt",
                grant="interrupts:resolve",
                apply=apply,
            )

        return reason_action(
            self,
            request,
            queryset,
            title=f"{decision.capitalize()} interrupts",
            action_name=decision,
            required=False,
            proceed=proceed,
            show_request=True,
        )

    @admin.action(description="Approve the selected interrupts (no response)")
    def approve(self, request: HttpRequest, queryset: QuerySet[Interrupt]) -> HttpResponse | None:
        return self._resolve(request, queryset, "approve")

    @admin.action(description="Reject the selected interrupts")
    def reject(self, request: HttpRequest, queryset: QuerySet[Interrupt]) -> HttpResponse | None:
        return self._resolve(request, queryset, "reject")
