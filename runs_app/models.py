"""Durable runs: stored plans, runs with their lease, the append-only event log and checkpoints."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models
from django.db.models import Q

from openrath_project.ids import uuid7
from openrath_project.tenancy.models import Project, Tenant
from openrath_project.tenancy.scoping import ScopedManager
from runs_app.transitions import ACTIVE, STATUSES


class WorkflowPlan(models.Model):
    """A compiled plan, stored once per hash and never updated; runs pin it."""

    hash = models.CharField(max_length=64, primary_key=True)
    name = models.CharField(max_length=200)
    version = models.CharField(max_length=50, default="1")
    #: ``Plan.to_dict()``: the canonical definition the hash is computed from.
    definition = models.JSONField()
    #: ``Plan.graph()``: nodes and edges for the API and the console.
    graph = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("name", "-created_at")
        indexes = [models.Index(fields=("name", "-created_at"), name="plan_name_recent")]

    def __str__(self) -> str:
        return f"{self.name}@{self.hash[:12]}"


RUN_KINDS = ("run", "replay")
#: What a run submitted on a session does when another run is active there
#: (docs/concurrent-input.md): refuse it, wait for it, stop it at a step boundary, or cancel it
#: and start from before it.
INPUT_POLICIES = ("reject", "enqueue", "interrupt", "rollback")
#: Statuses of a run that is "active on its session" (as listed in transitions.ACTIVE).
ACTIVE_STATUSES = tuple(sorted(ACTIVE))


class Run(models.Model):
    """One execution of a workflow. ``status`` is the lifecycle, ``state`` the workflow's data.

    Invariants: a running run holds a lease; only the holder of the current ``fencing_token``
    may commit; ``event_seq`` / ``checkpoint_seq`` count the run's events and checkpoints.
    """

    STATUS_CHOICES: ClassVar[list[tuple[str, str]]] = [(s, s) for s in STATUSES]
    KIND_CHOICES: ClassVar[list[tuple[str, str]]] = [(k, k) for k in RUN_KINDS]

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # No index of its own (issue 20: bytes a run): every read by tenant, and the foreign-key
    # check of deleting one, is served by the indexes below whose first column is the tenant.
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="runs")
    workflow = models.CharField(max_length=200)
    #: Indexed by ``run_plan`` below: a field index on a text key would add a second,
    #: ``LIKE``-pattern index (64-character keys, an entry a run), and nothing matches plans by
    #: pattern.
    plan = models.ForeignKey(
        WorkflowPlan, on_delete=models.PROTECT, related_name="runs", db_index=False
    )
    status = models.CharField(max_length=16, choices=STATUS_CHOICES, default="queued")
    input = models.JSONField(default=dict, blank=True)
    #: The state as of checkpoint ``state_seq`` (refreshed whenever the run stops executing);
    #: while a run executes, the current state is that plus the checkpoints' deltas.
    state = models.JSONField(default=dict, blank=True)
    state_seq = models.PositiveIntegerField(default=0)
    output = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    #: The working session: where the run's steps append. Forked when a step attempt is retried
    #: after a crash, so the abandoned attempt's chunks never enter the run's view.
    session = models.ForeignKey(
        "sessions_app.Session", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="children",
        db_index=False,  # the partial index run_parent_set below
    )
    #: For a branch of a fan-out: the branch's first node, and the join node it stops before.
    branch = models.CharField(max_length=200, blank=True, default="")
    join_step = models.CharField(max_length=200, blank=True, default="")
    # NULL (not "") when absent: the unique constraint below ignores NULLs.
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    request_digest = models.CharField(max_length=64, blank=True, default="")
    priority = models.SmallIntegerField(default=0)
    deadline = models.DateTimeField(null=True, blank=True)
    next_nodes = models.JSONField(default=list, blank=True)
    #: Attempt number of the next node to run (1 on the first try).
    attempt = models.PositiveIntegerField(default=1)
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fencing_token = models.BigIntegerField(default=0)
    #: A durable timer: a queued run is not claimable before this (retry backoff).
    wake_at = models.DateTimeField(null=True, blank=True)
    checkpoint_seq = models.PositiveIntegerField(default=0)
    event_seq = models.PositiveIntegerField(default=0)
    review_reason = models.CharField(max_length=300, blank=True, default="")
    #: Length of the working session as of the last checkpoint: the run's view of it.
    session_len = models.PositiveIntegerField(default=0)
    #: The fan-out in progress: ``{"router", "join", "branches", "children"}``.
    fanout = models.JSONField(null=True, blank=True)
    #: Budgets (tokens, USD) checked at step boundaries; null = no budget.
    token_budget = models.BigIntegerField(null=True, blank=True)
    cost_budget_usd = models.DecimalField(max_digits=20, decimal_places=8, null=True, blank=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    #: The W3C trace context (``traceparent``) of the run's root span: every worker that claims
    #: the run continues that trace (``runs_app.tracing``); empty when tracing was off.
    trace_context = models.JSONField(default=dict, blank=True)
    #: ``run`` (executed by workers) or ``replay`` (a regression check of ``replay_of``
    #: against the current code, executed in-process with every model call, tool result,
    #: decision and effect served from the original's record; never claimable).
    kind = models.CharField(max_length=16, choices=KIND_CHOICES, default="run")
    replay_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="replays",
        db_index=False,  # the partial index run_replay_of_set below
    )
    #: The stored session the run was submitted on (null: none, or a new session); its
    #: working session is a fork of it, or of the previous run's, or of an earlier length.
    input_session = models.ForeignKey(
        "sessions_app.Session",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # the partial index run_active_on_input below
    )
    #: The concurrent-input policy it was submitted with ("" without an input session).
    input_policy = models.CharField(max_length=16, blank=True, default="")
    #: Where its working session was forked from: ``(origin_session, origin_len)``; a rollback
    #: of this run starts a new one from there (the conversation before this run began).
    origin_session = models.ForeignKey(
        "sessions_app.Session",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
    )
    origin_len = models.PositiveIntegerField(default=0)
    #: An enqueued (or interrupting) run waits for this run to end; while it waits it is
    #: ``queued`` with no working session and ``wake_at`` at HELD_UNTIL (never claimable).
    after_run = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="followers",
        db_index=False,  # the partial index run_held below
    )
    #: An interrupt was asked for (by run ``superseded_by``): stop at the next step boundary.
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    #: The run whose submission interrupted, rolled back or cancelled this one.
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    created_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ScopedManager()

    class Meta:
        ordering = ("-id",)
        constraints = [
            models.CheckConstraint(condition=Q(status__in=STATUSES), name="run_status_valid"),
            models.CheckConstraint(condition=Q(kind__in=RUN_KINDS), name="run_kind_valid"),
            models.CheckConstraint(
                condition=Q(kind="replay", replay_of__isnull=False)
                | Q(kind="run", replay_of__isnull=True),
                name="run_replay_has_source",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=-100) & Q(priority__lte=100), name="run_priority_range"
            ),
            models.CheckConstraint(
                condition=~Q(status="running") | Q(lease_expires_at__isnull=False),
                name="run_running_has_lease",
            ),
            models.UniqueConstraint(
                fields=("tenant", "idempotency_key"),
                condition=Q(idempotency_key__isnull=False),
                name="run_idempotency_key_unique",
            ),
            models.CheckConstraint(
                condition=Q(input_policy="") | Q(input_policy__in=INPUT_POLICIES),
                name="run_input_policy_valid",
            ),
        ]
        indexes = [
            models.Index(
                fields=("-priority", "created_at"),
                condition=Q(status="queued"),
                name="run_claimable",
            ),
            # The fair claim: a project's next run in priority order (one probe per project).
            models.Index(
                fields=("tenant", "project", "-priority", "created_at"),
                condition=Q(status="queued"),
                name="run_tenant_claimable",
            ),
            models.Index(
                fields=("lease_expires_at",),
                condition=Q(status="running"),
                name="run_lease_expiry",
            ),
            models.Index(fields=("tenant", "project", "-id"), name="run_project_recent"),
            models.Index(fields=("tenant", "status"), name="run_tenant_status"),
            # "The active runs submitted on session S" (concurrent input, under S's lock).
            # Not on ``status`` alone: a statement on one running run (``id = ... AND status =
            # 'running'``, the step commit) would take that smaller index and step over every
            # active run (measured: 80-110 rows read a step with 20 runs queued).
            models.Index(
                fields=("input_session",),
                condition=Q(status__in=ACTIVE_STATUSES, input_session__isnull=False),
                name="run_active_on_input",
            ),
            # "The runs waiting for run R" (released by R's end; repaired by the reconciler).
            models.Index(
                fields=("after_run",),
                condition=Q(status="queued", after_run__isnull=False),
                name="run_held",
            ),
            # The foreign-key checks of deleting a session or a run (retention): without these
            # each deleted row scanned the runs table (most runs have none of these set).
            *(
                models.Index(
                    fields=(column,), condition=Q(**{f"{column}__isnull": False}), name=name
                )
                for column, name in (
                    ("input_session", "run_input_session_set"),
                    ("origin_session", "run_origin_session_set"),
                    ("after_run", "run_after_run_set"),
                    ("superseded_by", "run_superseded_by_set"),
                    # Also the reads of a run's branches and replays (``parent = R``,
                    # ``replay_of = R``); issue 20: a full index held an entry, and on a new
                    # table a first page, for every run, though most runs have neither.
                    ("parent", "run_parent_set"),
                    ("replay_of", "run_replay_of_set"),
                )
            ),
            models.Index(fields=("plan",), name="run_plan"),
            # The reconciler's "asked to stop, not yet stopped" (a handful of rows at most).
            models.Index(
                fields=("stop_requested_at",),
                condition=Q(stop_requested_at__isnull=False, status__in=ACTIVE_STATUSES),
                name="run_stop_requested",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow} {self.id} ({self.status})"


class RunFork(models.Model):
    """A run-to-run lineage edge: ``child`` was forked from ``parent`` at checkpoint
    ``checkpoint_seq`` (its state, its next nodes, and a copy-on-write fork of the working
    session at the length that checkpoint references). Written once, never updated; the
    session-level edge is the ``LineageEdge`` of ``child.session``."""

    append_only_for_runtime: ClassVar[bool] = True

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    parent = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="fork_edges")
    child = models.OneToOneField(Run, on_delete=models.PROTECT, related_name="forked_from")
    #: The parent's checkpoint the child starts from (the branch point).
    checkpoint_seq = models.PositiveIntegerField()
    #: ``pinned`` (the parent's plan) or ``current`` (what the workflow compiles to now).
    plan_mode = models.CharField(max_length=16, default="pinned")
    #: The JSON merge patch applied on top of the checkpoint's state (null: none).
    state_patch = models.JSONField(null=True, blank=True)
    created_by = models.CharField(max_length=200, blank=True, default="")
    reason = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ScopedManager()

    class Meta:
        ordering = ("-id",)
        constraints = [
            models.CheckConstraint(
                condition=Q(plan_mode__in=("pinned", "current")), name="runfork_plan_mode_valid"
            ),
            models.CheckConstraint(condition=~Q(parent=models.F("child")), name="runfork_not_self"),
        ]
        indexes = [models.Index(fields=("parent", "checkpoint_seq"), name="runfork_parent")]

    def __str__(self) -> str:
        return f"{self.parent_id}@{self.checkpoint_seq} -> {self.child_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise TypeError("fork edges are written once")
        super().save(*args, **kwargs)


class RunEvent(models.Model):
    """One fact in a run's history; ``seq`` is contiguous per run. Append-only."""

    append_only_for_runtime: ClassVar[bool] = True

    id = models.BigAutoField(primary_key=True)
    # No database foreign key (issue 20: rows read per step; ``PROTECT`` still holds for the
    # ORM): the check would read the run row again for every row inserted. Events are
    # append-only and inserted only by statements that have just locked or updated their run
    # under its lease (the step statement, the claim, ``run_transition``); runs are deleted only
    # by retention, which deletes their events first.
    # Nor an index of its own (issue 20: bytes a step): every read of a run's events, and
    # retention's deletes, filter by run and are served by ``event_seq_unique`` (run, seq).
    run = models.ForeignKey(
        Run,
        on_delete=models.PROTECT,
        related_name="events",
        db_constraint=False,
        db_index=False,
    )
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=50)
    step = models.CharField(max_length=200, blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("run", "seq")
        constraints = [models.UniqueConstraint(fields=("run", "seq"), name="event_seq_unique")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise TypeError("run events are append-only")
        super().save(*args, **kwargs)


class Checkpoint(models.Model):
    """The run after a step: its state (a delta against the previous checkpoint, or in full
    every few checkpoints), the session reference ``(session, session_len)`` and the next nodes.
    Append-only."""

    append_only_for_runtime: ClassVar[bool] = True

    id = models.BigAutoField(primary_key=True)
    # No database foreign key (issue 20: rows read per step; ``PROTECT`` still holds for the
    # ORM): the check would read the run row again for every row inserted. Checkpoints are
    # append-only and inserted only by statements that have just locked or updated their run
    # under its lease (the step statement, the claim, ``run_transition``); runs are deleted only
    # by retention, which deletes their checkpoints first.
    # Nor an index of its own (issue 20: bytes a step): every read of a run's checkpoints, and
    # retention's deletes, filter by run and are served by ``checkpoint_seq_unique`` (run, seq).
    run = models.ForeignKey(
        Run,
        on_delete=models.PROTECT,
        related_name="checkpoints",
        db_constraint=False,
        db_index=False,
    )
    seq = models.PositiveIntegerField()
    step = models.CharField(max_length=200)
    next_nodes = models.JSONField(default=list)
    #: True: ``state`` is the whole state; False: a delta against checkpoint ``seq - 1``.
    full = models.BooleanField(default=False)
    state = models.JSONField()
    #: SHA-256 of the whole state's canonical JSON, to verify a rebuild.
    state_digest = models.CharField(max_length=64)
    session_id = models.UUIDField(null=True, blank=True)
    session_len = models.PositiveIntegerField(default=0)
    fencing_token = models.BigIntegerField()
    attempt = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("run", "seq")
        constraints = [models.UniqueConstraint(fields=("run", "seq"), name="checkpoint_seq_unique")]

    def __str__(self) -> str:
        return f"{self.run_id}@{self.seq} after {self.step}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise TypeError("checkpoints are append-only")
        super().save(*args, **kwargs)


INTERRUPT_KINDS = ("approval", "input", "review")
INTERRUPT_STATES = ("pending", "resolved", "expired")
#: ``edit`` approves with a changed request (OpenRath's ``ApprovalDecisionKind.EDIT``): its
#: ``response`` is the edited request, which the step reads as ``decision.payload``.
DECISIONS = ("approve", "reject", "respond", "edit")


class Interrupt(models.Model):
    """A run paused for a person: a request, an optional response schema, one decision.

    Identified in its run by ``(checkpoint_seq, step, sequence)``: the ``sequence``-th call of
    ``ctx.interrupt`` in ``step`` after checkpoint ``checkpoint_seq``, so a step that runs
    again after the decision finds it instead of asking twice.
    """

    KIND_CHOICES: ClassVar[list[tuple[str, str]]] = [(k, k) for k in INTERRUPT_KINDS]

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="interrupts")
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="interrupts")
    step = models.CharField(max_length=200)
    checkpoint_seq = models.PositiveIntegerField()
    sequence = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=KIND_CHOICES)
    title = models.CharField(max_length=300, blank=True, default="")
    request = models.JSONField(default=dict)
    request_digest = models.CharField(max_length=64)
    schema = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, default="pending")
    decision = models.CharField(max_length=16, blank=True, default="")
    response = models.JSONField(null=True, blank=True)
    reason = models.CharField(max_length=500, blank=True, default="")
    resolved_by = models.CharField(max_length=200, blank=True, default="")
    resolved_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    #: Applied on expiry: ``{"decision": ..., "response": ...}`` (default: reject).
    default = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ScopedManager()

    class Meta:
        ordering = ("-id",)
        constraints = [
            models.UniqueConstraint(
                fields=("run", "checkpoint_seq", "step", "sequence"), name="interrupt_unique_call"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=INTERRUPT_KINDS), name="interrupt_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(status__in=INTERRUPT_STATES), name="interrupt_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(decision="") | Q(decision__in=DECISIONS),
                name="interrupt_decision_valid",
            ),
        ]
        indexes = [
            models.Index(fields=("tenant", "status"), name="interrupt_tenant_status"),
            models.Index(
                fields=("expires_at",), condition=Q(status="pending"), name="interrupt_expiry"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.status})"
