"""Tenancy admin: tokens are read-only here (minted by the CLI), the audit log is immutable."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from openrath_project.tenancy.models import ApiToken, AuditEvent, Membership, Project, Tenant


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "tenant", "created_at")
    list_filter = ("tenant",)
    search_fields = ("slug", "name")


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("tenant", "role")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "name", "tenant", "expires_at", "revoked_at", "last_used_at")
    list_filter = ("tenant",)
    readonly_fields = ("prefix", "secret_hash", "grants", "created_at", "last_used_at")
    exclude = ("secret_hash",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # the secret is shown once: tokens are minted by create_token or the API


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("id", "created_at", "tenant", "actor", "action", "outcome", "status_code")
    list_filter = ("outcome", "tenant")
    search_fields = ("action", "actor", "request_id", "object_id")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
