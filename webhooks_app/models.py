"""Webhook subscriptions, their outbox of deliveries and the log of each delivery attempt."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import Q

from openrath_project.ids import uuid7
from openrath_project.tenancy.models import Project, Tenant
from openrath_project.tenancy.scoping import ScopedManager

#: The event types a subscription may ask for.
EVENT_TYPES = (
    "run.succeeded",
    "run.failed",
    "run.cancelled",
    "run.timed_out",
    "run.waiting",
    "run.needs_review",
    "interrupt.created",
    "effect.needs_review",
)
DELIVERY_STATUSES = ("pending", "failed", "succeeded", "dead")
#: The statuses the delivery loop picks up (once ``next_attempt_at`` is due).
OPEN_STATUSES = ("pending", "failed")


class WebhookSubscription(models.Model):
    """A project's HTTP endpoint for some event types; its signing secret is stored encrypted
    (``webhooks_app.secrets``) and shown once, at creation.

    Invariant: a disabled subscription says why (``disabled_reason``); deliveries of a disabled
    subscription wait (they are not claimed) until it is enabled again.
    """

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="webhooks")
    url = models.CharField(max_length=2000)
    description = models.CharField(max_length=300, blank=True, default="")
    event_types = models.JSONField(default=list)
    #: The ``whsec_`` secret, encrypted with a key derived from ``WEBHOOK_SECRET_KEY``.
    secret_ciphertext = models.TextField()
    #: The secret's last four characters, to tell secrets apart without revealing them.
    secret_hint = models.CharField(max_length=8)
    enabled = models.BooleanField(default=True)
    disabled_reason = models.CharField(max_length=300, blank=True, default="")
    disabled_at = models.DateTimeField(null=True, blank=True)
    #: Failed attempts in a row (reset by a success) and when that streak began.
    consecutive_failures = models.PositiveIntegerField(default=0)
    failing_since = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ScopedManager()

    class Meta:
        ordering = ("-created_at",)
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.CheckConstraint(
                condition=Q(enabled=True) | ~Q(disabled_reason=""),
                name="webhook_disabled_has_reason",
            ),
        ]
        indexes: ClassVar[list[models.Index]] = [
            models.Index(
                fields=("project",), condition=Q(enabled=True), name="webhook_project_enabled"
            ),
        ]

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    """One event for one subscription: the outbox row, written in the transaction of the event.

    ``webhook_id`` is the Standard Webhooks ``webhook-id`` (the same on every attempt and on a
    manual redelivery, so receivers deduplicate by it); ``source_key`` names the event it came
    from, unique per subscription (an event is enqueued once). ``next_attempt_at`` is the
    durable timer of an open delivery (``pending`` or ``failed``); a claimed delivery's timer is
    pushed past the attempt's time limit, so a worker that dies mid-attempt is retried later.
    """

    STATUS_CHOICES: ClassVar[list[tuple[str, str]]] = [(s, s) for s in DELIVERY_STATUSES]

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    subscription = models.ForeignKey(
        WebhookSubscription, on_delete=models.CASCADE, related_name="deliveries"
    )
    webhook_id = models.CharField(max_length=64, unique=True)
    source_key = models.CharField(max_length=120)
    event_type = models.CharField(max_length=40)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=STATUS_CHOICES, default="pending")
    attempts = models.PositiveIntegerField(default=0)
    #: Attempts since it was enqueued or last redelivered: ``WEBHOOK_MAX_ATTEMPTS`` of them and
    #: it is given up (``dead``).
    round_attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_latency_ms = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True, default="")
    last_response = models.CharField(max_length=500, blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ScopedManager()

    class Meta:
        ordering = ("-created_at",)
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(
                fields=("subscription", "source_key"), name="webhook_delivery_once"
            ),
            models.CheckConstraint(
                condition=Q(status__in=OPEN_STATUSES, next_attempt_at__isnull=False)
                | Q(status__in=("succeeded", "dead"), next_attempt_at__isnull=True),
                name="webhook_delivery_timer_when_open",
            ),
        ]
        indexes: ClassVar[list[models.Index]] = [
            models.Index(
                fields=("next_attempt_at",),
                condition=Q(status__in=OPEN_STATUSES),
                name="webhook_delivery_due",
            ),
            models.Index(fields=("subscription", "-created_at"), name="webhook_delivery_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.webhook_id} {self.event_type} {self.status}"


class WebhookAttempt(models.Model):
    """One POST of a delivery: its outcome, status code, latency and response excerpt."""

    scope_project_path = "delivery__project_id"

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    delivery = models.ForeignKey(
        WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log"
    )
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    succeeded = models.BooleanField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField()
    #: Why it failed without a response (refused target, connection error, timeout).
    error = models.CharField(max_length=300, blank=True, default="")
    response_excerpt = models.CharField(max_length=500, blank=True, default="")

    objects = ScopedManager()

    class Meta:
        ordering = ("delivery", "number")
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(fields=("delivery", "number"), name="webhook_attempt_once"),
        ]

    def __str__(self) -> str:
        return f"{self.delivery_id}#{self.number}"
