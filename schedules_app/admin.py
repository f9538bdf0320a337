"""Schedules admin: the rows are read-only; pause, resume and delete are actions that call the
same services as the API and the console, each row audited (``run_action``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from openrath_project.console.admin_scope import EngineAdmin, run_action
from openrath_project.tenancy.principal import Principal
from schedules_app import services
from schedules_app.models import Schedule, ScheduleFire


@admin.register(Schedule)
class ScheduleAdmin(EngineAdmin):
    list_display = (
        "id",
        "name",
        "workflow",
        "project__slug",
        "kind",
        "cron",
        "interval_seconds",
        "timezone",
        "paused",
        "next_fire_at",
        "last_fired_at",
    )
    list_filter = ("paused", "kind", "overlap", "catchup", "tenant", "project")
    search_fields = ("name", "workflow", "cron", "created_by")
    list_select_related = ("project",)
    json_fields = ("input",)
    ordering = ("-created_at", "-id")
    actions = ("pause_schedules", "resume_schedules", "delete_schedules")

    def _apply(
        self, request: HttpRequest, queryset: QuerySet[Schedule], *, action: str, fn: Any
    ) -> None:
        def apply(schedule: Schedule, principal: Principal) -> dict[str, Any]:
            return fn(schedule) or {}

        run_action(
            self,
            request,
            queryset.order_by("id"),
            action=action,
            object_type="schedule",
            grant="runs:write",
            apply=apply,
        )

    @admin.action(description="Pause the selected schedules")
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._apply(
            request,
            queryset,
            action="schedule.pause",
            fn=lambda s: {"changed": services.schedule_pause(schedule=s)[1]},
        )

    @admin.action(description="Resume the selected schedules (from their next tick after now)")
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._apply(
            request,
            queryset,
            action="schedule.resume",
            fn=lambda s: {"changed": services.schedule_resume(schedule=s)[1]},
        )

    @admin.action(description="Delete the selected schedules (the runs they started stay)")
    def delete_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._apply(
            request,
            queryset,
            action="schedule.delete",
            fn=lambda s: services.schedule_delete(schedule=s),
        )


@admin.register(ScheduleFire)
class ScheduleFireAdmin(EngineAdmin):
    list_display = ("id", "schedule_id", "tick", "outcome", "run_id", "fired_at")
    list_filter = ("outcome", "tenant", "project")
    search_fields = ("schedule__name", "schedule__workflow")
    json_fields = ("detail",)
    ordering = ("-tick",)
