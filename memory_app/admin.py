"""Memory admin: facts are read-only here (written by the API, agents and commits); deleting
one goes through ``memory_forget`` so the recall index and counters stay exact."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from memory_app import services
from memory_app.models import MemoryEntry, MemoryStats
from openrath_project.console.admin_scope import EngineAdmin, TenantScopedAdmin


@admin.register(MemoryEntry)
class MemoryEntryAdmin(TenantScopedAdmin):
    list_display = ("id", "project__slug", "scope", "agent", "trust", "short_text", "created_at")
    list_filter = ("scope", "trust", "tenant")
    search_fields = ("text", "agent", "created_by")
    list_select_related = ("project",)
    readonly_fields = (
        "id",
        "tenant",
        "project",
        "scope",
        "agent",
        "session",
        "source_session",
        "source_seq",
        "text",
        "metadata",
        "trust",
        "fingerprint",
        "term_count",
        "created_by",
        "created_at",
        "updated_at",
    )
    raw_id_fields = ("session", "source_session")

    @admin.display(description="text")
    def short_text(self, obj: MemoryEntry) -> str:
        return obj.text if len(obj.text) <= 80 else obj.text[:77] + "..."

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # facts are remembered through the API or by agents

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # immutable: forget and remember again

    def delete_model(self, request: HttpRequest, obj: MemoryEntry) -> None:
        services.memory_forget(entry=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[MemoryEntry]) -> None:
        for entry in queryset.order_by("id"):
            services.memory_forget(entry=entry)


# MemoryTerm (the recall index's postings) has a composite primary key, which the Django admin
# cannot register; it is derived data, written and deleted with its entry.
@admin.register(MemoryStats)
class MemoryStatsAdmin(EngineAdmin):
    """The BM25 corpus counters: exact, kept by ``F()`` updates, never edited."""

    tenant_path = "project__tenant"
    list_display = ("id", "project__slug", "place", "entries", "terms")
    search_fields = ("place",)
    list_select_related = ("project",)
