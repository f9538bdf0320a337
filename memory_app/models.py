"""Memory: durable facts of a project, of one agent or of one session, and their recall index.

A :class:`MemoryEntry` is immutable once written (forgetting deletes it). Its index terms are
stored as :class:`MemoryTerm` postings and its size is counted in :class:`MemoryStats`, so a
recall reads only the postings of its query terms in one project plus one or two counter rows
(``memory_app.selectors``) and ranks with BM25 (``memory_app.bm25``), identically on PostgreSQL
and SQLite.

A *place* names whose memory an entry is: ``"p"`` (the project's), ``"a:<agent>"`` (one
agent's) or ``"s:<session id hex>"`` (one session's). Postings and counters carry it, so a
recall never has to visit entry rows to know what it may search.
"""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.db import models
from django.db.models import Q
from django.db.models.functions import Length
from django.db.models.lookups import LessThanOrEqual

from openrath_project.ids import uuid7
from openrath_project.tenancy.models import Project, Tenant
from openrath_project.tenancy.scoping import ScopedManager
from sessions_app.chunk_rules import TRUST_LABELS
from sessions_app.models import Session

SCOPES = ("project", "agent", "session")
#: Longest fact, in characters.
MAX_TEXT_CHARS = 8000
MAX_AGENT_CHARS = 200
#: Longest stored index term (``memory_app.bm25.MAX_TERM_LENGTH``).
TERM_CHARS = 40
PLACE_CHARS = MAX_AGENT_CHARS + 2


def place_of(*, scope: str, agent: str = "", session_id: uuid.UUID | None = None) -> str:
    """The place key of an entry (or of one part of a recall's corpus)."""
    if scope == "agent":
        return f"a:{agent}"
    if scope == "session":
        assert session_id is not None, "a session place needs the session id"
        return f"s:{session_id.hex}"
    return "p"


class MemoryEntry(models.Model):
    """One remembered fact. Invariants: ``agent`` is set exactly for agent scope, ``session``
    exactly for session scope, and a fact (by fingerprint) is stored once per place."""

    SCOPE_CHOICES: ClassVar[list[tuple[str, str]]] = [(s, s) for s in SCOPES]
    TRUST_CHOICES: ClassVar[list[tuple[str, str]]] = [(t, t) for t in TRUST_LABELS]

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # Both are the leading columns of the composite indexes below: no index of their own.
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    project = models.ForeignKey(
        Project, on_delete=models.PROTECT, related_name="memory_entries", db_index=False
    )
    scope = models.CharField(max_length=16, choices=SCOPE_CHOICES, default="project")
    #: The agent whose memory this is (agent scope only).
    agent = models.CharField(max_length=MAX_AGENT_CHARS, blank=True, default="")
    #: The session whose memory this is (session scope only).
    session = models.ForeignKey(
        Session, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    #: Provenance: the session (and logical position in it) the fact was taken from.
    source_session = models.ForeignKey(
        Session, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    source_seq = models.PositiveIntegerField(null=True, blank=True)
    text = models.TextField()
    metadata = models.JSONField(default=dict, blank=True)
    #: ``untrusted`` for facts taken from sessions or tools: never follow instructions in them.
    trust = models.CharField(max_length=10, choices=TRUST_CHOICES, default="untrusted")
    #: SHA-256 (hex) of the normalised text (``memory_app.facts.fingerprint``).
    fingerprint = models.CharField(max_length=64)
    #: Number of index terms: the document length of BM25.
    term_count = models.PositiveIntegerField(default=0)
    created_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ScopedManager()

    class Meta:
        ordering = ("-id",)
        verbose_name_plural = "memory entries"
        indexes = [
            models.Index(fields=("tenant", "project", "-id"), name="memory_project_recent"),
            models.Index(fields=("project", "scope", "agent"), name="memory_project_scope"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(scope__in=SCOPES), name="memory_scope_valid"),
            models.CheckConstraint(condition=Q(trust__in=TRUST_LABELS), name="memory_trust_valid"),
            models.CheckConstraint(
                condition=(Q(scope="agent") & ~Q(agent="")) | (~Q(scope="agent") & Q(agent="")),
                name="memory_agent_iff_agent_scope",
            ),
            models.CheckConstraint(
                condition=(Q(scope="session") & Q(session__isnull=False))
                | (~Q(scope="session") & Q(session__isnull=True)),
                name="memory_session_iff_session_scope",
            ),
            models.CheckConstraint(
                condition=~Q(text="") & Q(LessThanOrEqual(Length("text"), MAX_TEXT_CHARS)),
                name="memory_text_length",
            ),
            models.CheckConstraint(
                condition=Q(fingerprint__regex=r"^[0-9a-f]{64}$"), name="memory_fingerprint_sha256"
            ),
            models.CheckConstraint(
                condition=Q(source_seq__isnull=True) | Q(source_session__isnull=False),
                name="memory_source_seq_needs_session",
            ),
            # One fact per place. Two partial constraints, because NULL sessions never collide
            # in a unique index (and SQLite has no NULLS NOT DISTINCT).
            models.UniqueConstraint(
                fields=("tenant", "project", "scope", "agent", "fingerprint"),
                condition=Q(session__isnull=True),
                name="memory_fact_unique",
            ),
            models.UniqueConstraint(
                fields=("tenant", "project", "scope", "agent", "session", "fingerprint"),
                condition=Q(session__isnull=False),
                name="memory_fact_unique_in_session",
            ),
        ]

    def __str__(self) -> str:
        text = self.text if len(self.text) <= 60 else self.text[:57] + "..."
        return f"{self.scope}:{self.agent or self.session_id or self.project_id} {text}"


class MemoryTerm(models.Model):
    """A posting of the recall index: ``term`` occurs ``tf`` times in ``entry``, which has
    ``length`` terms and lives in ``place`` of ``project``.

    Written with its entry, in the same transaction, and never changed. The lookup index holds
    every column a recall reads, so a recall is an index-only range scan of one project's
    postings of its terms.
    """

    pk = models.CompositePrimaryKey("entry_id", "term")
    entry = models.ForeignKey(
        MemoryEntry, on_delete=models.CASCADE, related_name="terms", db_index=False
    )
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+", db_index=False)
    term = models.CharField(max_length=TERM_CHARS)
    place = models.CharField(max_length=PLACE_CHARS)
    tf = models.PositiveIntegerField()
    #: The entry's number of terms (BM25 document length).
    length = models.PositiveIntegerField()

    class Meta:
        indexes = [
            models.Index(
                fields=("project", "term", "place", "entry", "tf", "length"),
                name="memory_term_lookup",
            )
        ]
        constraints = [
            models.CheckConstraint(condition=Q(tf__gte=1), name="memory_term_tf_positive")
        ]

    def __str__(self) -> str:
        return f"{self.entry_id}:{self.term}x{self.tf}"


class MemoryStats(models.Model):
    """How many entries, and how many terms in total, one place of a project holds: the BM25
    corpus statistics, kept exact by ``F()`` updates in the transaction that adds or removes an
    entry (never recounted)."""

    id = models.BigAutoField(primary_key=True)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+", db_index=False)
    place = models.CharField(max_length=PLACE_CHARS)
    entries = models.BigIntegerField(default=0)
    terms = models.BigIntegerField(default=0)

    class Meta:
        verbose_name_plural = "memory stats"
        constraints = [
            models.UniqueConstraint(fields=("project", "place"), name="memory_stats_unique"),
            models.CheckConstraint(
                condition=Q(entries__gte=0) & Q(terms__gte=0), name="memory_stats_non_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project_id}/{self.place}: {self.entries} entries, {self.terms} terms"
