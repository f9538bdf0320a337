"""Sessions: append-only chunk logs with copy-on-write bases, and the lineage graph between them.

A session stores only its *own* chunks. Its logical chunk list is its base's first ``base_len``
chunks (recursively) followed by its own, so a fork writes one session row and one lineage edge
and copies nothing. ``Chunk.seq`` is the position in the logical list.
"""

from __future__ import annotations

from decimal import Decimal
from typing import ClassVar

from django.db import models
from django.db.models import F, Q

from openrath_project.ids import uuid7
from openrath_project.tenancy.models import Project, Tenant
from openrath_project.tenancy.scoping import ScopedManager
from sessions_app.chunk_rules import (
    KINDS,
    MAX_SESSION_COST_USD,
    MAX_SESSION_TOKENS,
    ROLES,
    TRUST_LABELS,
)

SESSION_OPS = ("create", "fork", "merge", "detach", "compress", "import")
EDGE_OPS = ("fork", "merge", "detach", "compress", "import")
#: The constraint that keeps a session's usage totals in their domain.
USAGE_CONSTRAINT = "session_usage_within_domain"


class Session(models.Model):
    """A chunk log. Invariant: logical length = ``base_len + own_len``; a base covers
    ``base_len`` positions, and a session without a base has ``base_len = 0``."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # No index of its own (issue 20: bytes a run): every read by tenant, and the foreign-key
    # check of deleting one, is served by the indexes below whose first column is the tenant.
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="sessions")
    title = models.CharField(max_length=300, blank=True, default="")
    #: The operation that produced this session (``create`` for a new root).
    op = models.CharField(max_length=16, default="create")
    #: Storage only: where this session's first ``base_len`` chunks live. Not lineage.
    base = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # the partial index session_base_set below
    )
    base_len = models.PositiveIntegerField(default=0)
    own_len = models.PositiveIntegerField(default=0)
    #: Sandbox placement: ``{"backend": "local", "spec": "<workspace>"}`` or ``{}``.
    placement = models.JSONField(default=dict, blank=True)
    usage_prompt_tokens = models.BigIntegerField(default=0)
    usage_completion_tokens = models.BigIntegerField(default=0)
    usage_total_tokens = models.BigIntegerField(default=0)
    usage_cost_usd = models.DecimalField(max_digits=20, decimal_places=8, default=Decimal(0))
    metadata = models.JSONField(default=dict, blank=True)
    #: Where imported sessions came from (format, original id, file); empty for native ones.
    provenance = models.JSONField(default=dict, blank=True)
    #: An imported log that ended without its trailer (a crashed writer).
    incomplete = models.BooleanField(default=False)
    created_by = models.CharField(max_length=200, blank=True, default="")
    agent = models.CharField(max_length=200, blank=True, default="")
    #: The workflow path (``outer/inner``) whose code created the session, when one did.
    workflow = models.CharField(max_length=300, blank=True, default="")
    run_id = models.UUIDField(null=True, blank=True)
    step = models.CharField(max_length=200, blank=True, default="")
    #: The run (and its lease's fencing token) allowed to append, when a run owns the session.
    writer_run_id = models.UUIDField(null=True, blank=True)
    writer_token = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ScopedManager()

    class Meta:
        ordering = ("-id",)
        indexes = [
            models.Index(fields=("tenant", "project", "-id"), name="session_project_recent"),
            models.Index(fields=("tenant", "op"), name="session_tenant_op"),
            models.Index(fields=("run_id",), name="session_run"),
            # The foreign-key check of deleting a session (retention) and the reads of what a
            # session is the base of; issue 20: a full index held an entry, and on a new table a
            # first page, for every root session, which has no base.
            models.Index(
                fields=("base",), condition=Q(base__isnull=False), name="session_base_set"
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(op__in=SESSION_OPS), name="session_op_valid"),
            models.CheckConstraint(
                condition=Q(base__isnull=False) | Q(base_len=0), name="session_base_len_needs_base"
            ),
            models.CheckConstraint(condition=~Q(base=F("id")), name="session_base_not_self"),
            models.CheckConstraint(
                condition=Q(usage_prompt_tokens__gte=0)
                & Q(usage_completion_tokens__gte=0)
                & Q(usage_total_tokens__gte=0),
                name="session_usage_non_negative",
            ),
            # Far below what the columns hold, so an append that would pass it fails here
            # (a 400 naming usage) instead of overflowing a column, and every sum of the
            # totals is readable on both engines (docs/api.md, "Numbers and their domains").
            models.CheckConstraint(
                condition=Q(usage_prompt_tokens__lte=MAX_SESSION_TOKENS)
                & Q(usage_completion_tokens__lte=MAX_SESSION_TOKENS)
                & Q(usage_total_tokens__lte=MAX_SESSION_TOKENS)
                & Q(usage_cost_usd__gte=0)
                & Q(usage_cost_usd__lte=MAX_SESSION_COST_USD),
                name=USAGE_CONSTRAINT,
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.op}, {self.length} chunks)"

    @property
    def length(self) -> int:
        return self.base_len + self.own_len

    @property
    def usage(self) -> dict[str, int | float]:
        return {
            "prompt_tokens": self.usage_prompt_tokens,
            "completion_tokens": self.usage_completion_tokens,
            "total_tokens": self.usage_total_tokens,
            "cost_usd": float(self.usage_cost_usd),
        }


class Chunk(models.Model):
    """One entry of a session's log, stored in the session that added it; never changed."""

    ROLE_CHOICES: ClassVar[list[tuple[str, str]]] = [(r, r) for r in ROLES]
    KIND_CHOICES: ClassVar[list[tuple[str, str]]] = [(k, k) for k in KINDS]

    id = models.BigAutoField(primary_key=True)
    # No single-column indexes on these two (issue 20: a chunk's bytes): every read by session
    # is served by ``chunk_seq_unique`` (session, seq), and nothing reads chunks by tenant alone
    # (scoped reads also filter by session or run).
    # Nor database foreign keys (issue 20: rows read per step; ``PROTECT`` still holds for the
    # ORM): each would read the session or tenant row again for every chunk inserted. Chunks are
    # append-only and written only by an append that has just updated the session row in the
    # same statement or transaction (``sessions_app.append_sql`` and ``services.append_now``,
    # under the writer fence) or by a fork, merge or import copying from existing sessions; the
    # tenant is the session's own (the append's ``RETURNING``). Sessions are never deleted while
    # they have chunks (``PROTECT``; retention deletes chunks before their session).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, related_name="+", db_index=False, db_constraint=False
    )
    session = models.ForeignKey(
        Session,
        on_delete=models.PROTECT,
        related_name="own_chunks",
        db_index=False,
        db_constraint=False,
    )
    #: Position in the logical list of ``session`` (and of every session that forks past it).
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=16, choices=ROLE_CHOICES)
    kind = models.CharField(max_length=16, choices=KIND_CHOICES, default="message")
    content = models.JSONField()
    agent = models.CharField(max_length=200, blank=True, default="")
    #: The workflow path (``outer/inner``) whose code wrote the chunk, when one did.
    workflow = models.CharField(max_length=300, blank=True, default="")
    run_id = models.UUIDField(null=True, blank=True)
    step = models.CharField(max_length=200, blank=True, default="")
    tool_call_id = models.CharField(max_length=200, blank=True, default="")
    usage = models.JSONField(null=True, blank=True)
    trust = models.CharField(max_length=10, default="trusted")
    #: For chunks a merge copied from a branch: the branch (parent session) they came from.
    branch = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    #: A chunk is in its session's project (its tenant is its own column).
    scope_project_path: ClassVar[str | None] = "session__project_id"
    objects = ScopedManager()

    class Meta:
        ordering = ("session", "seq")
        constraints = [
            models.UniqueConstraint(fields=("session", "seq"), name="chunk_seq_unique"),
            models.CheckConstraint(condition=Q(role__in=ROLES), name="chunk_role_valid"),
            models.CheckConstraint(condition=Q(kind__in=KINDS), name="chunk_kind_valid"),
            models.CheckConstraint(condition=Q(trust__in=TRUST_LABELS), name="chunk_trust_valid"),
        ]
        indexes = [
            # What a run wrote (budgets, the console's run page); most chunks have no run.
            models.Index(fields=("run_id",), condition=Q(run_id__isnull=False), name="chunk_run"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.role}/{self.kind}"


class LineageEdge(models.Model):
    """``child`` was made from ``parent`` by ``op`` when the parent had ``parent_len`` chunks."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    parent = models.ForeignKey(Session, on_delete=models.PROTECT, related_name="child_edges")
    child = models.ForeignKey(Session, on_delete=models.PROTECT, related_name="parent_edges")
    op = models.CharField(max_length=16)
    parent_len = models.PositiveIntegerField()
    #: Order of the parents of a merge (0 for single-parent ops).
    position = models.PositiveSmallIntegerField(default=0)
    agent = models.CharField(max_length=200, blank=True, default="")
    workflow = models.CharField(max_length=300, blank=True, default="")
    run_id = models.UUIDField(null=True, blank=True)
    step = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    #: An edge never leaves a project (fork, detach and merge stay in it): the child's.
    scope_project_path: ClassVar[str | None] = "child__project_id"
    objects = ScopedManager()

    class Meta:
        ordering = ("child", "position")
        constraints = [
            models.UniqueConstraint(fields=("parent", "child"), name="edge_unique"),
            models.CheckConstraint(condition=~Q(parent=F("child")), name="edge_not_self"),
            models.CheckConstraint(condition=Q(op__in=EDGE_OPS), name="edge_op_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.parent_id} -{self.op}-> {self.child_id}"
