"""Schedules and their fires: what starts runs on a clock, and each tick it fired (once)."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import Q

from openrath_project.ids import uuid7
from openrath_project.tenancy.models import Project, Tenant
from openrath_project.tenancy.scoping import ScopedManager
from schedules_app.timing import CATCHUP_POLICIES, KINDS, MIN_INTERVAL_SECONDS, OVERLAP_POLICIES

FIRE_OUTCOMES = ("started", "queued", "skipped", "failed")


class Schedule(models.Model):
    """A cron or interval schedule starting runs of ``workflow`` with ``input`` in a project.

    Invariant: a cron schedule has an expression and no interval, an interval schedule the
    reverse; ``next_fire_at`` is the first tick neither fired nor let go (the reconciler's
    due index reads it for unpaused rows).
    """

    KIND_CHOICES: ClassVar[list[tuple[str, str]]] = [(k, k) for k in KINDS]
    CATCHUP_CHOICES: ClassVar[list[tuple[str, str]]] = [(c, c) for c in CATCHUP_POLICIES]
    OVERLAP_CHOICES: ClassVar[list[tuple[str, str]]] = [(o, o) for o in OVERLAP_POLICIES]

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="schedules")
    name = models.CharField(max_length=200, blank=True, default="")
    workflow = models.CharField(max_length=200)
    #: The run's initial state, validated against the workflow's input schema when set.
    input = models.JSONField(default=dict, blank=True)
    user_message = models.TextField(blank=True, default="")
    priority = models.SmallIntegerField(default=0)
    kind = models.CharField(max_length=8, choices=KIND_CHOICES)
    cron = models.CharField(max_length=200, blank=True, default="")
    interval_seconds = models.PositiveIntegerField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    #: No tick before this instant; an interval schedule's ticks are start_at + k * interval.
    start_at = models.DateTimeField()
    catchup = models.CharField(max_length=8, choices=CATCHUP_CHOICES, default="skip")
    catchup_limit = models.PositiveSmallIntegerField(default=10)
    overlap = models.CharField(max_length=16, choices=OVERLAP_CHOICES, default="skip")
    paused = models.BooleanField(default=False)
    next_fire_at = models.DateTimeField()
    last_fired_at = models.DateTimeField(null=True, blank=True)
    #: Due ticks let go by the catch-up policy (counted, not stored one by one).
    missed_ticks = models.PositiveIntegerField(default=0)
    created_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ScopedManager()

    class Meta:
        ordering = ("-created_at",)
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.CheckConstraint(
                condition=(
                    Q(kind="cron", interval_seconds__isnull=True) & ~Q(cron="")
                    | Q(kind="interval", cron="", interval_seconds__gte=MIN_INTERVAL_SECONDS)
                ),
                name="schedule_timing_by_kind",
            ),
            models.CheckConstraint(
                condition=Q(catchup_limit__gte=1, catchup_limit__lte=100),
                name="schedule_catchup_limit_range",
            ),
        ]
        indexes: ClassVar[list[models.Index]] = [
            models.Index(fields=("next_fire_at",), condition=Q(paused=False), name="schedule_due"),
            models.Index(fields=("project", "-created_at"), name="schedule_project_recent"),
        ]

    def __str__(self) -> str:
        return self.name or f"{self.workflow} ({self.cron or f'every {self.interval_seconds}s'})"


class ScheduleFire(models.Model):
    """One tick of a schedule, written once: the unique (schedule, tick) row is the at-most-once
    guarantee, inserted in the same transaction as the run it started (``started``), or saying
    why it started none (``queued`` behind the previous run, ``skipped``, ``failed``)."""

    OUTCOME_CHOICES: ClassVar[list[tuple[str, str]]] = [(o, o) for o in FIRE_OUTCOMES]

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="fires")
    tick = models.DateTimeField()
    fired_at = models.DateTimeField()
    #: The run it started (NULL for the other outcomes, and once retention deleted the run).
    run = models.ForeignKey(
        "runs_app.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    outcome = models.CharField(max_length=8, choices=OUTCOME_CHOICES)
    #: Why: the error of a failed start, the cancelled previous run, the overlap that skipped.
    detail = models.JSONField(default=dict, blank=True)

    objects = ScopedManager()

    class Meta:
        ordering = ("-tick",)
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(fields=("schedule", "tick"), name="schedule_fire_once"),
        ]
        indexes: ClassVar[list[models.Index]] = [
            models.Index(
                fields=("schedule", "tick"), condition=Q(outcome="queued"), name="schedule_queued"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id}@{self.tick.isoformat()} {self.outcome}"
