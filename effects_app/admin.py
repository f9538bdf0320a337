"""Effect ledger admin: read-only rows; a ``needs_review`` effect is resolved only through the
actions below, which call ``effect_resolve`` bound to the digest of the request their
confirmation page showed (``runs_app.admin.digest_shown``), audited."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from effects_app.models import EffectRecord
from effects_app.services import effect_resolve
from openrath_project.console.admin_scope import EngineAdmin, reason_action, run_action
from openrath_project.tenancy.principal import Principal
from runs_app.admin import digest_shown


@admin.register(EffectRecord)
class EffectRecordAdmin(EngineAdmin):
    list_display = (
        "id",
        "key",
        "step",
        "run_id",
        "status",
        "effect_class",
        "attempts",
        "resolution",
        "created_at",
    )
    list_filter = ("status", "effect_class", "resolution", "tenant", "project")
    search_fields = ("key", "step", "idempotency_key", "resolved_by")
    json_fields = ("request", "result", "error", "resolution_result")
    actions = ("mark_not_applied", "cancel_runs")

    def _resolve(
        self, request: HttpRequest, queryset: QuerySet[EffectRecord], outcome: str, title: str
    ) -> HttpResponse | None:
        def proceed(reason: str) -> None:
            def apply(effect: EffectRecord, principal: Principal) -> dict[str, Any]:
                # Bound to the request the page showed: changed since, it is a digest_mismatch.
                resolved = effect_resolve(
                    effect=effect,
                    outcome=outcome,
                    request_digest=digest_shown(request, effect),
                    reason=reason,
                    actor=principal.actor,
                )
                return {
                    "outcome": outcome,
                    "reason": reason,
                    "request_digest": resolved.request_digest,
                    "run": str(resolved.run_id),
                }

            run_action(
                self,
                request,
                queryset.order_by("id"),
                action="effect.resolve",
                object_type="effect",
                grant="effects:resolve",
                apply=apply,
            )

        return reason_action(
            self,
            request,
            queryset,
            title=title,
            action_name="mark_not_applied" if outcome == "not_applied" else "cancel_runs",
            required=False,
            proceed=proceed,
            show_request=True,
        )

    @admin.action(description="Mark not applied: the run calls the effect once more")
    def mark_not_applied(
        self, request: HttpRequest, queryset: QuerySet[EffectRecord]
    ) -> HttpResponse | None:
        return self._resolve(request, queryset, "not_applied", "Mark effects not applied")

    @admin.action(description="Cancel the runs of the selected effects")
    def cancel_runs(
        self, request: HttpRequest, queryset: QuerySet[EffectRecord]
    ) -> HttpResponse | None:
        return self._resolve(request, queryset, "cancel_run", "Cancel the effects' runs")
