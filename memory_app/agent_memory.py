"""OpenRath's agent memory calls (``remember_memory``, ``recall_memory``, ``commit_memory``)
over this app's services.

``flow.Agent(memory="local")`` binds an agent to its project's memory. OpenRath names a memory
by a URI ``memory://{scope}/memories/{category}/{id}`` with scopes ``user``, ``agent`` and
``session``; here they are the places of ``memory_app``: ``user`` is the project's memory,
``agent`` the agent's own, ``session`` a session's own. The category is kept in the entry's
metadata. Results have OpenRath's shapes (``.uri``, ``.bytes_written``; ``.hits`` with
``.uri``, ``.score``, ``.snippet``; ``.extracted_count``).

Every write goes through ``memory_app.services`` (de-duplication, trust labels, limits), so
memory written this way is the same memory the API, the admin and the agent loop read.

:class:`ProjectMemory` is this app's implementation of the agent's memory port
(``sessions_app.agent_memory.AgentMemory``); the shell installs it when Django starts.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memory_app.services import memory_commit, memory_recall, memory_remember
from openrath_project.errors import ValidationFailed
from openrath_project.tenancy.models import Project
from sessions_app.models import Session as SessionRow
from sessions_app.providers.base import Provider

__all__ = [
    "OPENRATH_SCOPES",
    "MemoryCommitResult",
    "MemoryFindResult",
    "MemoryHit",
    "MemoryWriteResult",
    "ProjectMemory",
    "agent_commit",
    "agent_recall",
    "agent_remember",
    "memory_uri",
]

#: OpenRath's memory scopes and the ``memory_app`` scope each one is stored in.
OPENRATH_SCOPES = {"user": "project", "agent": "agent", "session": "session"}
_OPENRATH_NAME = {ours: theirs for theirs, ours in OPENRATH_SCOPES.items()}
DEFAULT_CATEGORY = "preferences"


@dataclass(frozen=True)
class MemoryWriteResult:
    """What ``remember_memory`` stored. ``created`` is False when the fact was already there."""

    uri: str
    bytes_written: int
    id: uuid.UUID
    created: bool


@dataclass(frozen=True)
class MemoryHit:
    """One recalled memory, best first."""

    uri: str
    score: float
    snippet: str
    id: uuid.UUID
    trust: str
    level: str | None = None


@dataclass(frozen=True)
class MemoryFindResult:
    """What ``recall_memory`` found."""

    hits: tuple[MemoryHit, ...] = ()


@dataclass(frozen=True)
class MemoryCommitResult:
    """What ``commit_memory`` extracted (synchronously: there is no task to wait for)."""

    extracted_count: int
    uris: tuple[str, ...] = field(default_factory=tuple)
    task_id: str | None = None
    archived_uri: str | None = None


def memory_uri(*, scope: str, category: str, entry_id: uuid.UUID) -> str:
    """``memory://{OpenRath scope}/memories/{category}/{entry id}`` of a stored entry."""
    return f"memory://{_OPENRATH_NAME.get(scope, scope)}/memories/{category}/{entry_id.hex}"


def _our_scope(scope: str) -> str:
    if scope not in OPENRATH_SCOPES:
        raise ValidationFailed(
            f"memory scope {scope!r} is not one of {', '.join(OPENRATH_SCOPES)}",
            details={"field": "scope"},
        )
    return OPENRATH_SCOPES[scope]


def _parse_target(target_uri: str) -> tuple[str, str | None]:
    """(our scope, category or None) of ``memory://{scope}[/memories[/{category}]]``."""
    prefix = "memory://"
    if not isinstance(target_uri, str) or not target_uri.startswith(prefix):
        raise ValidationFailed(
            f"target_uri must look like memory://user/memories/<category>; got {target_uri!r}",
            details={"field": "target_uri"},
        )
    parts = [part for part in target_uri[len(prefix) :].split("/") if part]
    scope = _our_scope(parts[0] if parts else "")
    category = parts[2] if len(parts) >= 3 and parts[1] == "memories" else None
    return scope, category


def agent_remember(
    *,
    project: Project,
    agent: str,
    content: str,
    scope: str = "user",
    category: str = DEFAULT_CATEGORY,
    session: SessionRow | None = None,
) -> MemoryWriteResult:
    """Store ``content`` in the OpenRath ``scope`` (``user``, ``agent`` or ``session``)."""
    ours = _our_scope(scope)
    if ours == "session" and session is None:
        raise ValidationFailed(
            "scope='session' needs the session: remember_memory(text, scope='session', "
            "session=...)",
            details={"field": "session"},
        )
    if not isinstance(category, str) or not category.strip() or "/" in category:
        raise ValidationFailed(
            "category must be a non-empty name without '/'", details={"field": "category"}
        )
    entry, created = memory_remember(
        project=project,
        text=content,
        scope=ours,
        agent=agent if ours == "agent" else "",
        session=session if ours == "session" else None,
        metadata={"category": category, "source": "remember_memory", "agent": agent},
        trust="trusted",
        created_by=agent,
    )
    stored_category = str((entry.metadata or {}).get("category", category))
    return MemoryWriteResult(
        uri=memory_uri(scope=entry.scope, category=stored_category, entry_id=entry.id),
        bytes_written=len(entry.text.encode("utf-8")),
        id=entry.id,
        created=created,
    )


def agent_recall(
    *,
    project: Project,
    agent: str,
    query: str,
    top_k: int = 4,
    target_uri: str | None = None,
    session_id: Any = None,
) -> MemoryFindResult:
    """The ``top_k`` best memories for ``query``: the project's and the agent's own (and the
    session's, given ``session_id``), or only those under ``target_uri``."""
    category: str | None = None
    if target_uri is None:
        scope = "session" if session_id is not None else "agent"
    else:
        scope, category = _parse_target(target_uri)
    hits = memory_recall(
        project=project,
        query=query,
        k=top_k,
        scope=scope,
        agent=agent,
        session_id=session_id,
    )
    if target_uri is not None:
        # recall() widens agent and session scopes with the project's memory; a target names one.
        hits = [hit for hit in hits if hit.scope == scope]
    if category is not None:
        hits = [hit for hit in hits if (hit.metadata or {}).get("category") == category]
    return MemoryFindResult(
        hits=tuple(
            MemoryHit(
                uri=memory_uri(
                    scope=hit.scope,
                    category=str((hit.metadata or {}).get("category", "facts")),
                    entry_id=hit.id,
                ),
                score=float(hit.score),
                snippet=hit.text,
                id=hit.id,
                trust=hit.trust,
            )
            for hit in hits
        )
    )


def agent_commit(
    *, session: SessionRow, provider: Provider, agent: str, scope: str = "user"
) -> MemoryCommitResult:
    """Extract facts from ``session`` with ``provider`` and store the new ones (in the
    project's memory by default, OpenRath's ``user`` scope)."""
    entries = memory_commit(
        session=session, provider=provider, agent=agent, scope=_our_scope(scope)
    )
    return MemoryCommitResult(
        extracted_count=len(entries),
        uris=tuple(
            memory_uri(
                scope=entry.scope,
                category=str((entry.metadata or {}).get("category", "facts")),
                entry_id=entry.id,
            )
            for entry in entries
        ),
    )


class ProjectMemory:
    """The agent's memory (``sessions_app.agent_memory.AgentMemory``) on this app's services:
    what ``flow.Agent(memory=...)`` recalls, commits and keeps notes in."""

    def recall(
        self,
        *,
        project: Project,
        scope: str,
        agent: str,
        session_id: Any,
        query: str,
        k: int,
    ) -> Sequence[Any]:
        return memory_recall(
            project=project, scope=scope, agent=agent, session_id=session_id, query=query, k=k
        )

    def commit(self, *, session: SessionRow, provider: Provider, agent: str, scope: str) -> Any:
        return memory_commit(session=session, provider=provider, agent=agent, scope=scope)

    def remember_note(
        self,
        *,
        project: Project,
        agent: str,
        content: str,
        scope: str,
        category: str,
        session: SessionRow | None,
    ) -> MemoryWriteResult:
        return agent_remember(
            project=project,
            agent=agent,
            content=content,
            scope=scope,
            category=category,
            session=session,
        )

    def recall_notes(
        self,
        *,
        project: Project,
        agent: str,
        query: str,
        top_k: int,
        target_uri: str | None,
        session_id: Any,
    ) -> MemoryFindResult:
        return agent_recall(
            project=project,
            agent=agent,
            query=query,
            top_k=top_k,
            target_uri=target_uri,
            session_id=session_id,
        )

    def commit_notes(
        self, *, session: SessionRow, provider: Provider, agent: str, scope: str
    ) -> MemoryCommitResult:
        return agent_commit(session=session, provider=provider, agent=agent, scope=scope)
