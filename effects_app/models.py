"""The effect ledger: every side effect of a run, recorded so it happens at most once."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import Q

from openrath_project.ids import uuid7
from openrath_project.tenancy.models import Project, Tenant
from openrath_project.tenancy.scoping import ScopedManager
from runs_app.transitions import EFFECT

#: The lifecycle's statuses, from its transition table (``runs_app.transitions.EFFECT``).
EFFECT_STATES = EFFECT.statuses
EFFECT_CLASSES = ("idempotent", "non_idempotent", "decision")
#: ``perform_again`` / ``reuse_ancestor`` answer an ``effect_in_ancestor`` review (a forked
#: run reached an effect its ancestor already committed in another timeline).
RESOLUTIONS = ("applied", "not_applied", "cancel_run", "perform_again", "reuse_ancestor")


class EffectRecord(models.Model):
    """One effect of one step of one run, unique per ``(run, step, key)``.

    ``started`` is committed *before* the effect is called, so a crash leaves evidence: an
    idempotent effect is then retried with the same idempotency key; a non-idempotent one
    waits in ``needs_review`` for an operator (applied / not applied / cancel the run).
    """

    STATE_CHOICES: ClassVar[list[tuple[str, str]]] = [(s, s) for s in EFFECT_STATES]

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="effects")
    run = models.ForeignKey("runs_app.Run", on_delete=models.PROTECT, related_name="effects")
    step = models.CharField(max_length=200)
    #: The run's checkpoint the step started after (null on rows older than this field): an
    #: ancestor's effect with ``checkpoint_seq >= `` a fork's branch point was committed in
    #: another timeline (``runs_app/services/forks.py``).
    checkpoint_seq = models.PositiveIntegerField(null=True, blank=True)
    key = models.CharField(max_length=200)
    #: The ancestor run's record this one matched (an ``effect_in_ancestor`` review).
    ancestor = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    #: Derived from (run, step, key): what the effect's target sees to deduplicate retries.
    idempotency_key = models.CharField(max_length=64, unique=True)
    effect_class = models.CharField(max_length=16, default="non_idempotent")
    #: The call as the reviewer sees it: ``{"fn", "args", "kwargs"}``.
    request = models.JSONField(default=dict)
    #: SHA-256 of the request's canonical JSON; a resolution must quote it.
    request_digest = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=STATE_CHOICES, default="prepared")
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    fencing_token = models.BigIntegerField(default=0)
    resolution = models.CharField(max_length=16, blank=True, default="")
    resolution_result = models.JSONField(null=True, blank=True)
    resolved_by = models.CharField(max_length=200, blank=True, default="")
    resolved_at = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ScopedManager()

    class Meta:
        ordering = ("-id",)
        constraints = [
            models.UniqueConstraint(fields=("run", "step", "key"), name="effect_unique_key"),
            models.CheckConstraint(
                condition=Q(status__in=EFFECT_STATES), name="effect_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(effect_class__in=EFFECT_CLASSES), name="effect_class_valid"
            ),
            models.CheckConstraint(
                condition=Q(resolution="") | Q(resolution__in=RESOLUTIONS),
                name="effect_resolution_valid",
            ),
        ]
        indexes = [
            models.Index(fields=("tenant", "status"), name="effect_tenant_status"),
            models.Index(fields=("tenant", "project", "-id"), name="effect_project_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.step}/{self.key} ({self.status})"
