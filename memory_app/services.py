"""Memory writes (remember, commit, forget) and the recall agents call.

Every change of memory goes through here: the API, agents, admin actions and commands.

De-duplication is insert-once against the unique constraints on the fact's fingerprint: a
remember inserts and, on a conflict, returns the row that won; it never reads first and then
writes, so concurrent writers of one fact store it exactly once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Q

from memory_app import bm25, facts
from memory_app.models import (
    MAX_AGENT_CHARS,
    MAX_TEXT_CHARS,
    SCOPES,
    MemoryEntry,
    MemoryStats,
    MemoryTerm,
    place_of,
)
from memory_app.selectors import MAX_RECALL_K, RecallHit, recall
from openrath_project.errors import PayloadTooLarge, ValidationFailed
from openrath_project.jsonlimits import json_problem, string_problem
from openrath_project.tenancy.models import Project
from sessions_app import context
from sessions_app.chunk_rules import MAX_SEQ, TRUST_LABELS
from sessions_app.models import Chunk, Session
from sessions_app.providers.base import Provider
from sessions_app.selectors import chunk_all

__all__ = [
    "MAX_METADATA_BYTES",
    "MAX_RECALL_K",
    "RecallHit",
    "memory_commit",
    "memory_forget",
    "memory_recall",
    "memory_remember",
]

#: Largest ``metadata`` of one entry, serialised as JSON.
MAX_METADATA_BYTES = 16 * 1024
#: Most facts one commit may store.
MAX_COMMIT_FACTS = 100
#: A commit shows the model at most this much of the session (the most recent part).
MAX_TRANSCRIPT_CHARS = 100_000
#: Each chunk contributes at most this much to the transcript.
MAX_CHUNK_CHARS = 4000


def _invalid(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"{field}: {message}", details={field: [message]})


def _check_text(text: object) -> str:
    if not isinstance(text, str):
        raise _invalid("text", "must be a string")
    cleaned = text.strip()
    if not cleaned:
        raise _invalid("text", "must not be empty")
    if "\x00" in cleaned:  # PostgreSQL text cannot hold NUL
        raise _invalid("text", "must not contain NUL characters")
    if (problem := string_problem(cleaned)) is not None:  # an unpaired surrogate
        raise _invalid("text", problem)
    if len(cleaned) > MAX_TEXT_CHARS:
        raise PayloadTooLarge(
            f"text has {len(cleaned)} characters; the limit is {MAX_TEXT_CHARS}",
            details={"text": [f"at most {MAX_TEXT_CHARS} characters"]},
        )
    return cleaned


def _check_metadata(metadata: object) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise _invalid("metadata", "must be a JSON object")
    # Depth, 64-bit integers, finite numbers, no NUL (PostgreSQL jsonb cannot hold it) and no
    # unpaired surrogate: walked without recursion, before anything encodes the value.
    problem = json_problem(metadata, root="metadata")
    if problem is not None:
        raise _invalid("metadata", problem.text())
    try:
        serialised = json.dumps(metadata, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise _invalid("metadata", "must be JSON-serialisable") from exc
    size = len(serialised.encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise PayloadTooLarge(
            f"metadata has {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}",
            details={"metadata": [f"at most {MAX_METADATA_BYTES} bytes as JSON"]},
        )
    return metadata


def _check_place(*, project: Project, scope: str, agent: str, session: Session | None) -> None:
    """The scope's owner: an agent name for agent scope, a session of the project for session
    scope, neither for project scope."""
    if scope not in SCOPES:
        raise _invalid("scope", f"must be one of {', '.join(SCOPES)}")
    if not isinstance(agent, str) or len(agent) > MAX_AGENT_CHARS:
        raise _invalid("agent", f"must be a string of at most {MAX_AGENT_CHARS} characters")
    if scope == "agent" and not agent.strip():
        raise _invalid("agent", "required for scope agent")
    if scope != "agent" and agent:
        raise _invalid("agent", "only allowed with scope agent")
    if scope == "session" and session is None:
        raise _invalid("session", "required for scope session")
    if scope != "session" and session is not None:
        raise _invalid("session", "only allowed with scope session")
    if session is not None and session.project_id != project.id:
        raise _invalid("session", "belongs to another project")


def memory_remember(
    *,
    project: Project,
    text: str,
    scope: str = "project",
    agent: str = "",
    session: Session | None = None,
    metadata: dict[str, Any] | None = None,
    trust: str = "untrusted",
    source_session: Session | None = None,
    source_seq: int | None = None,
    created_by: str = "",
) -> tuple[MemoryEntry, bool]:
    """Store a fact once per place; ``(entry, created)``. A duplicate (same normalised text in
    the same scope, agent and session) returns the stored entry unchanged with ``False``.

    Runs its own short transaction (a savepoint when the caller has one open).
    """
    cleaned = _check_text(text)
    _check_place(project=project, scope=scope, agent=agent, session=session)
    if trust not in TRUST_LABELS:
        raise _invalid("trust", f"must be one of {', '.join(TRUST_LABELS)}")
    meta = _check_metadata(metadata)
    if source_session is not None and source_session.project_id != project.id:
        raise _invalid("source_session", "belongs to another project")
    if source_seq is not None:
        if source_session is None:
            raise _invalid("source_seq", "needs source_session")
        if isinstance(source_seq, bool) or not isinstance(source_seq, int) or source_seq < 0:
            raise _invalid("source_seq", "must be a non-negative integer")
        if source_seq > MAX_SEQ:  # a chunk position: what the integer column holds
            raise _invalid("source_seq", f"must be at most {MAX_SEQ}")
    frequencies, term_count = bm25.term_frequencies(cleaned)
    entry = MemoryEntry(
        tenant_id=project.tenant_id,
        project=project,
        scope=scope,
        agent=agent,
        session=session,
        source_session=source_session,
        source_seq=source_seq,
        text=cleaned,
        metadata=meta,
        trust=trust,
        fingerprint=facts.fingerprint(cleaned),
        term_count=term_count,
        created_by=(created_by or context.current().actor)[:200],
    )
    with transaction.atomic():
        try:
            with transaction.atomic():
                entry.save(force_insert=True)
        except IntegrityError:
            existing = _stored_duplicate(entry)
            if existing is None:  # another constraint failed: not a duplicate
                raise
            return existing, False
        place = place_of(scope=scope, agent=agent, session_id=entry.session_id)
        MemoryTerm.objects.bulk_create(
            MemoryTerm(
                entry=entry,
                project_id=project.id,
                term=term,
                place=place,
                tf=tf,
                length=term_count,
            )
            for term, tf in frequencies.items()
        )
        _count(project_id=project.id, place=place, entries=1, terms=term_count)
    return entry, True


def _count(*, project_id: uuid.UUID, place: str, entries: int, terms: int) -> None:
    """Add to a place's counters: one ``F()`` update; the first entry of a place inserts the
    counter row once (a concurrent first insert is absorbed by the unique constraint).

    Takes the counter row's lock until the caller's transaction ends."""
    counters = MemoryStats.objects.filter(project_id=project_id, place=place)
    change = {"entries": F("entries") + entries, "terms": F("terms") + terms}
    if counters.update(**change):
        return
    MemoryStats.objects.bulk_create(
        [MemoryStats(project_id=project_id, place=place)], ignore_conflicts=True
    )
    counters.update(**change)


def _stored_duplicate(entry: MemoryEntry) -> MemoryEntry | None:
    """The committed row that holds ``entry``'s place and fingerprint, if any."""
    same_session = (
        Q(session__isnull=True) if entry.session_id is None else Q(session_id=entry.session_id)
    )
    return (
        MemoryEntry.objects.filter(
            tenant_id=entry.tenant_id,
            project_id=entry.project_id,
            scope=entry.scope,
            agent=entry.agent,
            fingerprint=entry.fingerprint,
        )
        .filter(same_session)
        .first()
    )


def memory_recall(
    *,
    project: Project,
    query: str,
    k: int = 5,
    scope: str = "project",
    agent: str = "",
    session_id: uuid.UUID | str | None = None,
) -> list[RecallHit]:
    """The ``k`` facts of ``project`` that best match ``query`` (BM25), best first.

    ``scope="project"`` searches the project-scope entries; ``"agent"`` adds ``agent``'s own
    entries; ``"session"`` adds the entries of session ``session_id``. An ``agent`` or
    ``session_id`` the scope does not use is ignored (agents pass both). Only the first
    ``bm25.MAX_QUERY_TERMS`` distinct terms of a long query count. Never reads another project's
    memory; callers acting for a principal resolve the project through it first.
    """
    if not isinstance(query, str):
        raise _invalid("query", "must be a string")
    return recall(
        tenant_id=project.tenant_id,
        project_id=project.id,
        query=query,
        k=k,
        scope=scope,
        agent=agent,
        session_id=session_id,
    )


# --- Commit ------------------------------------------------------------------------------------


def _chunk_body(chunk: Chunk) -> str | None:
    """What a chunk says, as text (``None``: nothing a fact could come from)."""
    content = chunk.content if isinstance(chunk.content, dict) else {}
    if chunk.kind in ("message", "summary"):
        body = str(content.get("text", ""))
    elif chunk.kind == "tool_call":
        arguments = json.dumps(content.get("arguments"), ensure_ascii=False, default=str)
        body = f"called tool {content.get('name')} with {arguments}"
    elif chunk.kind == "tool_result":
        output = content.get("error") or content.get("output")
        shown = output if isinstance(output, str) else json.dumps(output, default=str)
        body = f"tool {content.get('name')} returned {shown}"
    else:
        return None
    body = body.strip()
    if not body:
        return None
    if len(body) > MAX_CHUNK_CHARS:
        body = body[:MAX_CHUNK_CHARS] + " [...]"
    return body


def _chunk_line(chunk: Chunk) -> str | None:
    body = _chunk_body(chunk)
    return None if body is None else f"[{chunk.seq}] {chunk.role}: {body}"


def _transcript(chunks: Sequence[Chunk]) -> str:
    """The session as numbered lines, keeping the most recent ones within the size bound."""
    lines: list[str] = []
    size = 0
    for chunk in reversed(chunks):
        line = _chunk_line(chunk)
        if line is None:
            continue
        size += len(line) + 1
        if size > MAX_TRANSCRIPT_CHARS and lines:
            break
        lines.append(line)
    return "\n".join(reversed(lines))


def _source_seq(fact: str, chunks: Sequence[Chunk]) -> int:
    """The position of the chunk a fact most likely came from: its best BM25 match among the
    session's chunks; the last position when no chunk shares a word with it."""
    documents = {chunk.seq: body for chunk in chunks if (body := _chunk_body(chunk)) is not None}
    best = bm25.rank(fact, documents, k=1)
    return best[0][0] if best else chunks[-1].seq


def memory_commit(
    *,
    session: Session,
    provider: Provider,
    agent: str = "",
    scope: str = "project",
    max_facts: int = 10,
) -> list[MemoryEntry]:
    """Extract durable facts from a session with the provider and remember the new ones.

    ``scope`` says where they are stored: the project's memory, ``agent``'s own (``"agent"``)
    or this session's own (``"session"``). ``agent`` (the committing agent, recorded in the
    metadata) is required for agent scope.

    The model is asked for a JSON list of short standalone facts (list-item lines are accepted
    too). Facts are de-duplicated within the answer and against stored memory (fingerprint), so
    committing a session twice stores each fact once. Each fact is stored ``untrusted`` with the
    session and the best-matching chunk's position as its source. Returns the newly stored
    entries, in the model's order. The model call happens outside any transaction.
    """
    if isinstance(max_facts, bool) or not isinstance(max_facts, int):
        raise _invalid("max_facts", "must be an integer")
    if not 1 <= max_facts <= MAX_COMMIT_FACTS:
        raise _invalid("max_facts", f"must be between 1 and {MAX_COMMIT_FACTS}")
    project = session.project
    place = session if scope == "session" else None
    owner = agent if scope == "agent" else ""  # agents pass their name whatever the scope
    _check_place(project=project, scope=scope, agent=owner, session=place)
    chunks = chunk_all(session.id)
    transcript = _transcript(chunks)
    if not transcript:
        return []
    messages = [
        {"role": "system", "content": facts.COMMIT_INSTRUCTION.format(max_facts=max_facts)},
        {"role": "user", "content": f"Conversation:\n{transcript}"},
    ]
    turn = provider.complete(messages, tools=None)
    found = facts.parse_fact_list(turn.text, limit=max_facts, max_chars=MAX_TEXT_CHARS)
    metadata: dict[str, Any] = {"source": "commit", "provider": turn.provider, "model": turn.model}
    if agent:
        metadata["agent"] = agent
    created: list[MemoryEntry] = []
    for fact in found:
        entry, is_new = memory_remember(
            project=project,
            text=fact,
            scope=scope,
            agent=owner,
            session=place,
            metadata=metadata,
            trust="untrusted",
            source_session=session,
            source_seq=_source_seq(fact, chunks),
        )
        if is_new:
            created.append(entry)
    return created


def memory_forget(*, entry: MemoryEntry) -> None:
    """Delete a fact and its index terms (the admin's delete calls this)."""
    place = place_of(scope=entry.scope, agent=entry.agent, session_id=entry.session_id)
    with transaction.atomic():
        MemoryTerm.objects.filter(entry_id=entry.id).delete()
        if MemoryEntry.objects.filter(id=entry.id).delete()[0]:
            _count(project_id=entry.project_id, place=place, entries=-1, terms=-entry.term_count)
