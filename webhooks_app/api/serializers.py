"""Input and output shapes of the webhooks API."""

from __future__ import annotations

from rest_framework import serializers

from openrath_project.api.serializers import (
    OutputModelSerializer,
    ProjectRefField,
    StrictInputSerializer,
)
from webhooks_app.models import (
    DELIVERY_STATUSES,
    EVENT_TYPES,
    WebhookAttempt,
    WebhookDelivery,
    WebhookSubscription,
)


class WebhookOut(OutputModelSerializer):
    """A subscription. The signing secret is never shown again after creation; ``secret_hint``
    is its last four characters."""

    project = serializers.UUIDField(source="project_id")
    event_types = serializers.ListField(child=serializers.ChoiceField(choices=EVENT_TYPES))
    consecutive_failures = serializers.IntegerField(min_value=0)

    class Meta:
        model = WebhookSubscription
        fields: tuple[str, ...] = (
            "id",
            "project",
            "url",
            "description",
            "event_types",
            "secret_hint",
            "enabled",
            "disabled_reason",
            "disabled_at",
            "consecutive_failures",
            "failing_since",
            "last_success_at",
            "created_by",
            "created_at",
            "updated_at",
        )


class WebhookCreatedOut(WebhookOut):
    """The new subscription with its signing secret (``whsec_<base64>``): shown this once."""

    secret = serializers.CharField()

    class Meta(WebhookOut.Meta):
        fields = (*WebhookOut.Meta.fields, "secret")


class _WebhookFields(StrictInputSerializer):
    url = serializers.CharField(
        max_length=2000,
        help_text="http(s) URL; its host must resolve to public addresses (docs/operations.md).",
    )
    event_types = serializers.ListField(
        child=serializers.ChoiceField(choices=EVENT_TYPES), min_length=1, max_length=20
    )
    description = serializers.CharField(required=False, max_length=300, allow_blank=True)


class WebhookCreateIn(_WebhookFields):
    project = ProjectRefField()


class WebhookUpdateIn(_WebhookFields):
    """The fields to change (read with ``partial=True``); the project and the secret stay."""


class WebhookDisableIn(StrictInputSerializer):
    reason = serializers.CharField(max_length=300, required=False, default="disabled by a user")


class DeliveryQuery(serializers.Serializer):
    status = serializers.ChoiceField(choices=DELIVERY_STATUSES, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=200, default=50)


class DeliveryOut(OutputModelSerializer):
    """One event for the subscription: ``webhook_id`` is the ``webhook-id`` header (the same on
    every attempt), ``next_attempt_at`` when it is tried next (open deliveries)."""

    status = serializers.ChoiceField(choices=DELIVERY_STATUSES)
    payload = serializers.JSONField()
    attempts = serializers.IntegerField(min_value=0)
    last_status_code = serializers.IntegerField(allow_null=True)
    last_latency_ms = serializers.IntegerField(allow_null=True)

    class Meta:
        model = WebhookDelivery
        fields: tuple[str, ...] = (
            "id",
            "webhook_id",
            "event_type",
            "status",
            "attempts",
            "next_attempt_at",
            "last_status_code",
            "last_latency_ms",
            "last_error",
            "last_response",
            "delivered_at",
            "created_at",
            "payload",
        )


class AttemptOut(OutputModelSerializer):
    """One POST: its status code (none when it got no response), latency and response excerpt."""

    number = serializers.IntegerField(min_value=1)
    status_code = serializers.IntegerField(allow_null=True)
    latency_ms = serializers.IntegerField(min_value=0)

    class Meta:
        model = WebhookAttempt
        fields = (
            "number",
            "started_at",
            "succeeded",
            "status_code",
            "latency_ms",
            "error",
            "response_excerpt",
        )


class DeliveryDetailOut(DeliveryOut):
    """A delivery with its attempt log."""

    attempt_log = AttemptOut(many=True, source="attempt_log_rows")

    class Meta(DeliveryOut.Meta):
        fields = (*DeliveryOut.Meta.fields, "attempt_log")
