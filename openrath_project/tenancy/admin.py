"""Tenancy admin: tokens are read-only here (minted by the CLI), the audit log is immutable.

A row's tenant is shown, never edited, once it exists (it is fixed at creation, also in the
database). A token's grants, projects, expiry and revocation change only through the services:
here only its name may be edited, and it is revoked by the ``revoke`` action (one-way).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from openrath_project.console.admin_scope import TenantScopedAdmin, run_action
from openrath_project.tenancy.models import ApiToken, AuditEvent, Membership, Project, Tenant
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.services import token_revoke


def _tenants_administered(request: HttpRequest) -> frozenset[Any]:
    """Tenants where the admin user holds the admin role (where it may manage memberships)."""
    user: Any = request.user
    return frozenset(
        Membership.objects.filter(user_id=user.pk, role="admin").values_list("tenant_id", flat=True)
    )


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    tenant_path = ""
    #: ``max_running_runs`` (blank: no limit) is edited in the form, audited like any change.
    list_display = ("slug", "name", "max_running_runs", "last_claimed_at", "created_at")
    search_fields = ("slug", "name")

    def has_add_permission(self, request: HttpRequest) -> bool:
        user: Any = request.user
        return bool(user.is_superuser)  # a new tenant has no members yet: superusers only


@admin.register(Project)
class ProjectAdmin(TenantScopedAdmin):
    list_display = ("slug", "name", "tenant", "max_running_runs", "last_claimed_at", "created_at")
    list_filter = ("tenant",)
    search_fields = ("slug", "name")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fixed = ["tenant"] if obj is not None else []  # chosen when added, then fixed
        return [*super().get_readonly_fields(request, obj), *fixed]


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("tenant", "role")
    raw_id_fields = ("user",)  # no select listing every user of every tenant

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # A membership is a user's place in one tenant: only its role changes.
        fixed = ["user", "tenant"] if obj is not None else []
        return [*super().get_readonly_fields(request, obj), *fixed]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user: Any = request.user
        if not super().has_change_permission(request, obj):
            return False
        return user.is_superuser or obj is None or obj.tenant_id in _tenants_administered(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user: Any = request.user
        if not super().has_delete_permission(request, obj):
            return False
        return user.is_superuser or obj is None or obj.tenant_id in _tenants_administered(request)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        user: Any = request.user
        if db_field.name == "tenant" and not user.is_superuser:
            kwargs["queryset"] = Tenant.objects.filter(id__in=_tenants_administered(request))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(ApiToken)
class ApiTokenAdmin(TenantScopedAdmin):
    list_display = ("prefix", "name", "tenant", "expires_at", "revoked_at", "last_used_at")
    list_filter = ("tenant",)
    #: Everything but the name: grants, scope and revocation change through the services.
    readonly_fields = (
        "prefix",
        "tenant",
        "grants",
        "projects",
        "created_by",
        "created_at",
        "expires_at",
        "revoked_at",
        "last_used_at",
    )
    exclude = ("secret_hash",)

    actions = ("revoke",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # the secret is shown once: tokens are minted by create_token or the API

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        def apply(token: ApiToken, principal: Principal) -> dict[str, Any]:
            revoked = token_revoke(prefix=token.prefix)
            return {"prefix": revoked.prefix, "revoked_at": str(revoked.revoked_at)}

        run_action(
            self,
            request,
            queryset.select_related("tenant").order_by("created_at"),
            action="token.revoke",
            object_type="token",
            grant="tokens:manage",
            apply=apply,
            project_of=lambda token: None,
            label=lambda token: f"token {token.prefix}",
        )


@admin.register(AuditEvent)
class AuditEventAdmin(TenantScopedAdmin):
    list_display = ("id", "created_at", "tenant", "actor", "action", "outcome", "status_code")
    list_filter = ("outcome", "tenant")
    search_fields = ("action", "actor", "request_id", "object_id")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
