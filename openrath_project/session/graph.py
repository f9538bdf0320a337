"""OpenRath's ``rath.session.graph`` (and its session primitives) for scripts.

The traversals read ``parent_session_ids`` of the session values given, as OpenRath's do. The
journal notes the sessions made while it is attached; its export resolves each id through the
registry, then the database (ours are stored, so an id is unknown only if it is not in this
database). Lineage itself is always recorded, by the services, when a session is made.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openrath_project.compat import OpenRathNameUnsupported, missing_name
from openrath_project.library import ensure_ready
from sessions_app.lineage_graph import (
    FrozenLineageView,
    LineageConsistencyError,
    LineageJournal,
    LineageKind,
    ancestors_bfs,
    descendants_dfs_preorder,
    edge_pairs,
    export_jsonl_string,
    lineage_journal_optional,
    lineage_journal_tracking,
    lineage_view_dataclass,
    resolve_journal,
    session_to_jsonl_row,
    validate_acyclic,
    write_jsonl,
)

if TYPE_CHECKING:
    from sessions_app.value import Session

__all__ = [
    "FrozenLineageView",
    "LineageConsistencyError",
    "LineageJournal",
    "LineageKind",
    "ancestors_bfs",
    "create_system_session",
    "create_user_session",
    "descendants_dfs_preorder",
    "detach_session",
    "edge_pairs",
    "export_journal_jsonl",
    "export_jsonl",
    "export_jsonl_string",
    "fork_session",
    "lineage_journal_optional",
    "lineage_journal_tracking",
    "lineage_view_dataclass",
    "load_session",
    "session_graph_mode",
    "session_graph_mode_override",
    "session_to_jsonl_row",
    "validate_acyclic",
]


def _session_class() -> type[Session]:
    ensure_ready()
    from sessions_app.value import Session

    return Session


def export_jsonl(sessions: Iterable[Any], path: str | Path) -> None:
    """One OpenRath lineage row per session (structure, no content), written to ``path``."""
    write_jsonl(sessions, path)


def _load_or_none(session_id: uuid.UUID) -> Any | None:
    from openrath_project.errors import NotFound

    try:
        return _session_class().load(session_id)
    except NotFound:
        return None


def export_journal_jsonl(
    journal: LineageJournal, path: str | Path, *, skip_unknown: bool = True
) -> None:
    """The journal's sessions as lineage rows, in the order they were made."""
    write_jsonl(resolve_journal(journal, load=_load_or_none, skip_unknown=skip_unknown), path)


def session_graph_mode() -> bool:
    """Always true: every session is stored with its lineage."""
    return True


@contextmanager
def session_graph_mode_override(enabled: bool) -> Iterator[None]:
    """Accepted for ``True`` only: lineage cannot be switched off (it is the audit record)."""
    if not enabled:
        raise OpenRathNameUnsupported(
            "openrath_project.session.graph",
            "session_graph_mode_override(False)",
            "lineage is always recorded: every session is stored with the edges it came from",
            "leave it on; read session.parent_session_ids / session.lineage()",
        )
    yield None


def create_user_session(message: str, *, project: Any = None) -> Session:
    return _session_class().create("user", message, project=project)


def create_system_session(prompt: str, *, project: Any = None) -> Session:
    return _session_class().create("system", prompt, project=project)


def fork_session(from_session: Session) -> Session:
    return from_session.fork()


def detach_session(from_session: Session) -> Session:
    return from_session.detach()


def load_session(session_id: uuid.UUID | str) -> Session:
    """The stored session (OpenRath reads its JSONL file; ours is in the database)."""
    return _session_class().load(session_id)


def __getattr__(name: str) -> Any:
    raise missing_name(__name__, name)
