"""OpenRath's ``rath.session`` for scripts: ``from openrath_project.session import Session``.

Names resolve lazily; the first one configures Django if the process has not
(:func:`openrath_project.library.ensure_ready`). OpenRath names the product does not provide
raise :class:`openrath_project.compat.OpenRathNameUnsupported` saying what to use instead.
See docs/migrating-from-openrath.md.
"""

from __future__ import annotations

from typing import Any

from openrath_project.library import lazy_attribute

_EXPORTS: dict[str, str] = {
    "Session": "sessions_app.value:Session",
    "ChunkKind": "sessions_app.chunk_table:ChunkKind",
    "ChunkRow": "sessions_app.chunk_table:ChunkRow",
    "ChunkTable": "sessions_app.chunk_table:ChunkTable",
    "assistant_turn_chunk": "sessions_app.chunk_table:assistant_turn_chunk",
    "chunk_table_to_messages": "sessions_app.chunk_table:chunk_table_to_messages",
    "format_chunk_row_brief": "sessions_app.chunk_table:format_chunk_row_brief",
    "system_text_chunk": "sessions_app.chunk_table:system_text_chunk",
    "tool_feedback_chunk": "sessions_app.chunk_table:tool_feedback_chunk",
    "user_text_chunk": "sessions_app.chunk_table:user_text_chunk",
    "LineageConsistencyError": "sessions_app.lineage_graph:LineageConsistencyError",
    "LineageJournal": "sessions_app.lineage_graph:LineageJournal",
    "LineageKind": "sessions_app.lineage_graph:LineageKind",
    "ancestors_bfs": "sessions_app.lineage_graph:ancestors_bfs",
    "descendants_dfs_preorder": "sessions_app.lineage_graph:descendants_dfs_preorder",
    "edge_pairs": "sessions_app.lineage_graph:edge_pairs",
    "lineage_journal_optional": "sessions_app.lineage_graph:lineage_journal_optional",
    "lineage_journal_tracking": "sessions_app.lineage_graph:lineage_journal_tracking",
    "lineage_view_dataclass": "sessions_app.lineage_graph:lineage_view_dataclass",
    "validate_acyclic": "sessions_app.lineage_graph:validate_acyclic",
    "session_graph_mode": "openrath_project.session.graph:session_graph_mode",
    "session_graph_mode_override": "openrath_project.session.graph:session_graph_mode_override",
    "SessionRegistry": "sessions_app.lineage_graph:SessionRegistry",
    "session_registry": "sessions_app.lineage_graph:session_registry",
    "create_user_session": "openrath_project.session.graph:create_user_session",
    "create_system_session": "openrath_project.session.graph:create_system_session",
    "fork_session": "openrath_project.session.graph:fork_session",
    "detach_session": "openrath_project.session.graph:detach_session",
    "load_session": "openrath_project.session.graph:load_session",
}


def __getattr__(name: str) -> Any:
    value = lazy_attribute(__name__, _EXPORTS, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted(_EXPORTS)
