"""Sessions admin: chunk logs and lineage are the runtime's records, read-only here.

Sessions change through the API, agents and runs (append, fork, merge...), never by editing rows:
a chunk is immutable and lineage is history.
"""

from __future__ import annotations

from django.contrib import admin

from openrath_project.console.admin_scope import EngineAdmin
from sessions_app.models import Chunk, LineageEdge, Session


@admin.register(Session)
class SessionAdmin(EngineAdmin):
    list_display = (
        "id",
        "title",
        "project__slug",
        "op",
        "length",
        "agent",
        "created_by",
        "created_at",
    )
    list_filter = ("op", "incomplete", "tenant", "project")
    search_fields = ("title", "agent", "workflow", "created_by")
    list_select_related = ("project",)
    json_fields = ("placement", "metadata", "provenance")
    date_hierarchy = "created_at"


@admin.register(Chunk)
class ChunkAdmin(EngineAdmin):
    list_display = ("id", "session_id", "seq", "role", "kind", "agent", "trust", "created_at")
    list_filter = ("role", "kind", "trust", "tenant")
    search_fields = ("agent", "step", "tool_call_id")
    json_fields = ("content", "usage")
    ordering = ("-id",)
    show_full_result_count = False  # chunks are the biggest table: no COUNT(*) per page


@admin.register(LineageEdge)
class LineageEdgeAdmin(EngineAdmin):
    list_display = (
        "id",
        "parent_id",
        "op",
        "child_id",
        "parent_len",
        "agent",
        "step",
        "created_at",
    )
    list_filter = ("op", "tenant")
    search_fields = ("agent", "workflow", "step")
    ordering = ("-id",)
