"""Reads of memory: scoped lists for the API, and the BM25 recall of one project's memory.

A recall is four queries whatever the corpus size: the document frequencies of the query terms
and then their BM25 sum per entry (both index-only range scans of one project's postings of
those terms; the database adds the numbers, no posting travels to Python), the corpus
statistics of the searched places (one or two counter rows) and the winning entries. Every one
of them filters by the project first, so memory never crosses a project; the entries are also
filtered by the tenant (postings and counters carry no tenant: a project's tenant is fixed at
creation, and an entry of another tenant is never returned even if they disagreed).
``docs/memory.md`` records the measurements behind this design.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db.models import (
    Case,
    Count,
    Expression,
    ExpressionWrapper,
    FloatField,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast

from memory_app import bm25
from memory_app.models import MemoryEntry, MemoryStats, MemoryTerm, place_of
from openrath_project.errors import ValidationFailed
from openrath_project.tenancy.principal import Principal
from openrath_project.tenancy.selectors import parse_uuid

#: Most results one recall returns.
MAX_RECALL_K = 50


@dataclass(frozen=True)
class RecallHit:
    """One recalled fact, best first. ``trust`` says whether its text may be followed."""

    id: uuid.UUID
    text: str
    score: float
    scope: str
    metadata: dict[str, Any] = field(default_factory=dict)
    trust: str = "untrusted"
    agent: str = ""
    session_id: uuid.UUID | None = None
    created_at: dt.datetime | None = None


def memory_list(*, principal: Principal) -> QuerySet[MemoryEntry]:
    """Memory entries in the principal's tenant and projects."""
    return MemoryEntry.objects.for_principal(principal)


def recall_places(*, scope: str, agent: str = "", session_id: object = None) -> list[str]:
    """The places a recall searches: the project's memory, plus the agent's own (agent scope)
    or the session's own (session scope). 400 naming the field when a part is missing."""
    if scope == "project":
        return [place_of(scope="project")]
    if scope == "agent":
        if not isinstance(agent, str) or not agent:
            raise ValidationFailed(
                "agent scope needs an agent name", details={"agent": ["required for scope agent"]}
            )
        return [place_of(scope="project"), place_of(scope="agent", agent=agent)]
    if scope == "session":
        as_uuid = parse_uuid(session_id) if session_id not in (None, "") else None
        if as_uuid is None:
            raise ValidationFailed(
                "session scope needs a session id",
                details={"session": ["required for scope session (a session id)"]},
            )
        return [place_of(scope="project"), place_of(scope="session", session_id=as_uuid)]
    raise ValidationFailed(
        f"scope must be one of project, agent, session (got {scope!r})",
        details={"scope": ["must be one of project, agent, session"]},
    )


def corpus_stats(*, project_id: uuid.UUID, places: list[str]) -> bm25.CorpusStats:
    """Entries and total index terms of the searched places (their counter rows)."""
    totals = MemoryStats.objects.filter(project_id=project_id, place__in=places).aggregate(
        documents=Sum("entries"), total_terms=Sum("terms")
    )
    return bm25.CorpusStats(
        documents=int(totals["documents"] or 0), total_terms=int(totals["total_terms"] or 0)
    )


def document_frequencies(
    *, project_id: uuid.UUID, terms: list[str], places: list[str]
) -> dict[str, int]:
    """How many entries of the searched places hold each query term (index-only)."""
    rows = (
        MemoryTerm.objects.filter(project_id=project_id, term__in=terms, place__in=places)
        .values("term")
        .annotate(df=Count("*"))
        .values_list("term", "df")
    )
    return {term: int(df) for term, df in rows}


def bm25_expression(idfs: dict[str, float], stats: bm25.CorpusStats) -> Expression:
    """One posting's BM25 contribution as a SQL expression (``bm25.term_score``, with each
    term's idf computed in Python): plain arithmetic, the same on PostgreSQL and SQLite."""
    idf = Case(
        *[When(term=term, then=Value(value)) for term, value in sorted(idfs.items())],
        default=Value(0.0),
        output_field=FloatField(),
    )
    tf = Cast("tf", FloatField())
    length = Cast("length", FloatField())
    avgdl = stats.avgdl or 1.0
    norm = Value(bm25.K1) * (Value(1.0 - bm25.B) + Value(bm25.B / avgdl) * length)
    return ExpressionWrapper(
        idf * tf * Value(bm25.K1 + 1.0) / (tf + norm), output_field=FloatField()
    )


def recall(
    *,
    tenant_id: uuid.UUID,
    project_id: uuid.UUID,
    query: str,
    k: int = 5,
    scope: str = "project",
    agent: str = "",
    session_id: object = None,
) -> list[RecallHit]:
    """The ``k`` entries of ``tenant_id``'s project that best match ``query`` by BM25, best
    first (ties: newest first)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_RECALL_K:
        raise ValidationFailed(
            f"k must be an integer between 1 and {MAX_RECALL_K}",
            details={"k": [f"out of range 1..{MAX_RECALL_K}"]},
        )
    places = recall_places(scope=scope, agent=agent, session_id=session_id)
    terms = bm25.query_terms(query)
    if not terms:
        return []
    frequencies = document_frequencies(project_id=project_id, terms=terms, places=places)
    if not frequencies:
        return []
    stats = corpus_stats(project_id=project_id, places=places)
    idfs = {term: bm25.idf(stats.documents, df) for term, df in frequencies.items()}
    best = [
        (row["entry_id"], float(row["score"]))
        for row in MemoryTerm.objects.filter(
            project_id=project_id, term__in=list(idfs), place__in=places
        )
        .values("entry_id")
        .annotate(score=Sum(bm25_expression(idfs, stats)))
        .order_by("-score", "-entry_id")[:k]
    ]
    # scope: the tenant and project the caller resolved (the API resolves them in scope)
    entries = (
        MemoryEntry.objects.unscoped()
        .filter(tenant_id=tenant_id, project_id=project_id, id__in=[e for e, _ in best])
        .in_bulk()
    )
    return [
        RecallHit(
            id=entry.id,
            text=entry.text,
            score=round(score, 6),
            scope=entry.scope,
            metadata=entry.metadata,
            trust=entry.trust,
            agent=entry.agent,
            session_id=entry.session_id,
            created_at=entry.created_at,
        )
        for entry_id, score in best
        if (entry := entries.get(entry_id)) is not None  # forgotten meanwhile: skipped
    ]
