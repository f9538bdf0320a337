"""Retention policies (one per project) and the log of the passes that applied them."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from openrath_project.ids import uuid7
from openrath_project.tenancy.models import Project, Tenant
from openrath_project.tenancy.scoping import ScopedManager

#: The object kinds a policy limits by age and count, in the order a pass applies them.
LIMITED_KINDS = ("runs", "sessions", "events", "checkpoints")
PASS_TRIGGERS = ("reconciler", "command", "api", "console")


def _age(kind: str) -> models.PositiveIntegerField:
    return models.PositiveIntegerField(
        null=True, blank=True, help_text=f"Remove {kind} older than this many seconds."
    )


def _count(kind: str) -> models.PositiveIntegerField:
    return models.PositiveIntegerField(
        null=True, blank=True, help_text=f"Keep only the newest this many {kind}."
    )


class RetentionPolicy(models.Model):
    """How long a project keeps its sessions, runs, events, checkpoints and artifacts.

    Invariant: at most one policy per project; a limit left empty keeps everything of its
    kind. ``next_pass_at`` is when the reconciler applies it next (its due index)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    enabled = models.BooleanField(default=True)
    runs_max_age_seconds = _age("terminal runs (with their events, checkpoints, effects)")
    runs_keep_last = _count("top-level runs")
    sessions_max_age_seconds = _age("sessions (by their last change)")
    sessions_keep_last = _count("sessions")
    events_max_age_seconds = _age("events of kept terminal runs")
    events_keep_last = _count("events of each kept terminal run")
    checkpoints_max_age_seconds = _age("checkpoints of kept terminal runs")
    checkpoints_keep_last = _count("checkpoints of each kept terminal run")
    #: Unreferenced artifacts older than this are deleted; null: artifacts are never swept.
    artifacts_grace_seconds = models.PositiveIntegerField(null=True, blank=True)
    #: Seconds between two passes of the reconciler (a pass with work left comes sooner).
    interval_seconds = models.PositiveIntegerField(default=3600)
    next_pass_at = models.DateTimeField()
    last_pass_at = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ScopedManager()

    class Meta:
        ordering = ("-created_at",)
        constraints = [
            models.UniqueConstraint(fields=("project",), name="retention_one_policy_per_project"),
            models.CheckConstraint(
                condition=Q(interval_seconds__gte=60), name="retention_interval_at_least_a_minute"
            ),
            models.CheckConstraint(
                condition=Q(artifacts_grace_seconds__isnull=True)
                | Q(artifacts_grace_seconds__gte=3600),
                name="retention_artifact_grace_at_least_an_hour",
            ),
        ]
        indexes = [
            models.Index(fields=("next_pass_at",), condition=Q(enabled=True), name="retention_due"),
        ]

    def __str__(self) -> str:
        return f"retention of {self.project_id}"


class RetentionPass(models.Model):
    """One applied pass over a project: what it removed and compacted, and whether work is
    left (a dry run changes nothing and writes no row)."""

    TRIGGER_CHOICES = [(t, t) for t in PASS_TRIGGERS]

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    policy = models.ForeignKey(RetentionPolicy, on_delete=models.CASCADE, related_name="passes")
    trigger = models.CharField(max_length=16, choices=TRIGGER_CHOICES)
    actor = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    #: Rows (and artifact objects) removed, by kind; ``compacted``: checkpoints made keyframes.
    removed = models.JSONField(default=dict)
    #: Bytes removed, by kind (``pg_column_size`` of the rows on PostgreSQL).
    removed_bytes = models.JSONField(default=dict)
    #: Objects the limits expired but the lineage rules kept, by reason.
    protected = models.JSONField(default=dict)
    #: False when the pass stopped at its budget with work left.
    complete = models.BooleanField(default=True)
    error = models.CharField(max_length=500, blank=True, default="")

    objects = ScopedManager()

    class Meta:
        ordering = ("-id",)
        constraints = [
            models.CheckConstraint(
                condition=Q(trigger__in=PASS_TRIGGERS), name="retention_pass_trigger_valid"
            ),
        ]
        indexes = [models.Index(fields=("policy", "-id"), name="retention_pass_recent")]

    def __str__(self) -> str:
        return f"retention pass {self.id} of {self.project_id}"
