"""Retention admin: policies and passes are read-only; applying and deleting a policy are
actions that call the same services as the API and the console, each row audited
(``run_action``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from openrath_project.console.admin_scope import EngineAdmin, run_action
from openrath_project.tenancy.principal import Principal
from retention_app import services
from retention_app.models import RetentionPass, RetentionPolicy

#: Seconds one admin "apply" may spend per policy (the reconciler does the rest).
ADMIN_APPLY_SECONDS = 10.0


@admin.register(RetentionPolicy)
class RetentionPolicyAdmin(EngineAdmin):
    list_display = (
        "id",
        "project__slug",
        "enabled",
        "runs_max_age_seconds",
        "runs_keep_last",
        "sessions_max_age_seconds",
        "sessions_keep_last",
        "checkpoints_keep_last",
        "artifacts_grace_seconds",
        "next_pass_at",
        "last_pass_at",
    )
    list_filter = ("enabled", "tenant", "project")
    list_select_related = ("project",)
    ordering = ("-created_at", "-id")
    actions = ("apply_policies", "delete_policies")

    def _apply(
        self, request: HttpRequest, queryset: QuerySet[RetentionPolicy], *, action: str, fn: Any
    ) -> None:
        def apply(policy: RetentionPolicy, principal: Principal) -> dict[str, Any]:
            return fn(policy, principal) or {}

        run_action(
            self,
            request,
            queryset.select_related("project__tenant").order_by("id"),
            action=action,
            object_type="retention_policy",
            grant="projects:write",
            apply=apply,
        )

    @admin.action(description="Apply the selected policies now (bounded; the rest follows)")
    def apply_policies(self, request: HttpRequest, queryset: QuerySet[RetentionPolicy]) -> None:
        def one(policy: RetentionPolicy, principal: Principal) -> dict[str, Any]:
            report = services.retention_apply(
                policy=policy,
                trigger="console",
                actor=principal.actor,
                budget_seconds=ADMIN_APPLY_SECONDS,
            )
            return {"removed": {k: v["count"] for k, v in report.removed.items() if v["count"]}}

        self._apply(request, queryset, action="retention.apply", fn=one)

    @admin.action(description="Delete the selected policies (what they removed stays removed)")
    def delete_policies(self, request: HttpRequest, queryset: QuerySet[RetentionPolicy]) -> None:
        self._apply(
            request,
            queryset,
            action="retention.delete",
            fn=lambda p, _principal: services.policy_delete(policy=p),
        )


@admin.register(RetentionPass)
class RetentionPassAdmin(EngineAdmin):
    list_display = ("id", "policy_id", "trigger", "actor", "finished_at", "complete")
    list_filter = ("trigger", "complete", "tenant", "project")
    search_fields = ("actor",)
    json_fields = ("removed", "protected")
    ordering = ("-id",)
