"""OpenRath's ``rath.session.manager``: the process-wide registry of live session values.

Ours are stored, so the registry is only a convenience (OpenRath's journal export resolves ids
through it; ours falls back to the database). Pure Python.
"""

from __future__ import annotations

from sessions_app.lineage_graph import SessionRegistry, session_registry

__all__ = ["SessionRegistry", "session_registry"]
