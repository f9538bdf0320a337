"""Webhooks admin: the rows are read-only (the secret's ciphertext is never shown); enable,
disable and redeliver are actions that call the same services as the API, each row audited
(``run_action``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from openrath_project.console.admin_scope import EngineAdmin, run_action
from openrath_project.tenancy.principal import Principal
from webhooks_app import services
from webhooks_app.models import WebhookAttempt, WebhookDelivery, WebhookSubscription


def _apply(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    action: str,
    fn: Any,
) -> None:
    def apply(row: Any, principal: Principal) -> dict[str, Any]:
        return fn(row) or {}

    run_action(
        modeladmin,
        request,
        queryset.order_by("id"),
        action=action,
        object_type="webhook",
        grant="projects:write",
        apply=apply,
    )


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(EngineAdmin):
    list_display = (
        "id",
        "url",
        "project__slug",
        "enabled",
        "disabled_reason",
        "consecutive_failures",
        "last_success_at",
        "created_at",
    )
    list_filter = ("enabled", "tenant", "project")
    search_fields = ("url", "description", "created_by")
    list_select_related = ("project",)
    json_fields = ("event_types",)
    deferred_fields = ("secret_ciphertext",)
    ordering = ("-created_at", "-id")
    actions = ("enable_webhooks", "disable_webhooks")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        # The secret's ciphertext stays off the page (the hint tells secrets apart).
        return [f for f in super().get_fields(request, obj) if f != "secret_ciphertext"]

    @admin.action(description="Enable the selected webhooks (their waiting deliveries go now)")
    def enable_webhooks(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _apply(
            self,
            request,
            queryset,
            action="webhook.enable",
            fn=lambda s: services.webhook_enable(subscription=s) and None,
        )

    @admin.action(description="Disable the selected webhooks")
    def disable_webhooks(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _apply(
            self,
            request,
            queryset,
            action="webhook.disable",
            fn=lambda s: (
                services.webhook_disable(subscription=s, reason="disabled in the admin") and None
            ),
        )


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(EngineAdmin):
    list_display = (
        "webhook_id",
        "event_type",
        "status",
        "attempts",
        "next_attempt_at",
        "last_status_code",
        "subscription_id",
        "created_at",
    )
    list_filter = ("status", "event_type", "tenant", "project")
    search_fields = ("webhook_id", "source_key")
    json_fields = ("payload",)
    ordering = ("-created_at", "-id")
    actions = ("redeliver",)

    @admin.action(description="Send the selected deliveries again (same webhook-id)")
    def redeliver(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _apply(
            self,
            request,
            queryset,
            action="webhook.redeliver",
            fn=lambda d: services.delivery_redeliver(delivery=d) and None,
        )


@admin.register(WebhookAttempt)
class WebhookAttemptAdmin(EngineAdmin):
    list_display = (
        "delivery_id",
        "number",
        "started_at",
        "succeeded",
        "status_code",
        "latency_ms",
        "error",
    )
    list_filter = ("succeeded", "tenant")
    ordering = ("-started_at", "-id")
