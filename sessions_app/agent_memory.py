"""The agent's memory port: what ``flow.Agent(memory=...)`` calls to recall, commit and keep notes.

Memory is stored by ``memory_app``, which builds on this app, so the agent cannot import it.
The agent calls the :class:`AgentMemory` installed here instead; ``memory_app.agent_memory``
implements it and the shell installs it when Django starts (``openrath_project.server.apps``).
An agent given ``recall=`` / ``commit=`` functions uses those for its loop instead.

Pure Python: no Django import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["AgentMemory", "MemoryEntry", "install_agent_memory", "installed_agent_memory"]


class MemoryEntry(Protocol):
    """One recalled memory: an id (for traceability) and the text shown to the model."""

    @property
    def id(self) -> Any: ...

    @property
    def text(self) -> str: ...


class AgentMemory(Protocol):
    """The memory an agent reads and writes (``project`` and ``session`` arguments are the
    database rows: a ``Project``, a ``sessions_app.models.Session``)."""

    def recall(
        self, *, project: Any, scope: str, agent: str, session_id: Any, query: str, k: int
    ) -> Sequence[MemoryEntry]:
        """The loop's recall: the ``k`` best entries for ``query`` in ``scope``, best first."""
        ...

    def commit(self, *, session: Any, provider: Any, agent: str, scope: str) -> Any:
        """Extract facts from ``session`` with ``provider`` and store the new ones in ``scope``."""
        ...

    def remember_note(
        self,
        *,
        project: Any,
        agent: str,
        content: str,
        scope: str,
        category: str,
        session: Any,
    ) -> Any:
        """OpenRath's ``remember_memory`` (``scope``: ``user``, ``agent`` or ``session``)."""
        ...

    def recall_notes(
        self,
        *,
        project: Any,
        agent: str,
        query: str,
        top_k: int,
        target_uri: str | None,
        session_id: Any,
    ) -> Any:
        """OpenRath's ``recall_memory``: ``.hits`` with ``.uri``, ``.score``, ``.snippet``."""
        ...

    def commit_notes(self, *, session: Any, provider: Any, agent: str, scope: str) -> Any:
        """OpenRath's ``commit_memory``: ``.extracted_count`` and the stored ``.uris``."""
        ...


_memory: AgentMemory | None = None


def install_agent_memory(memory: AgentMemory) -> None:
    """Make ``memory`` the one every agent with ``memory=`` uses (replaces any)."""
    global _memory
    _memory = memory


def installed_agent_memory() -> AgentMemory:
    """The installed memory; a ``RuntimeError`` saying how to get one when there is none."""
    if _memory is None:
        raise RuntimeError(
            "agent memory is not installed: it is installed when Django starts (the "
            "openrath_project.server app, with memory_app); use agents through "
            "`from openrath_project import flow`, or call django.setup() first"
        )
    return _memory
