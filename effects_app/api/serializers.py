"""Effect shapes (DESIGN section 10)."""

from __future__ import annotations

from rest_framework import serializers

from effects_app.models import EFFECT_STATES, RESOLUTIONS, EffectRecord
from openrath_project.api.serializers import StrictInputSerializer


class EffectOut(serializers.ModelSerializer):
    run = serializers.UUIDField(source="run_id")
    project = serializers.UUIDField(source="project_id")
    request = serializers.JSONField()
    result = serializers.JSONField(allow_null=True)
    error = serializers.JSONField(allow_null=True)
    resolution_result = serializers.JSONField(allow_null=True)

    class Meta:
        model = EffectRecord
        fields = (
            "id",
            "run",
            "project",
            "step",
            "key",
            "idempotency_key",
            "effect_class",
            "status",
            "request",
            "request_digest",
            "result",
            "error",
            "attempts",
            "resolution",
            "resolution_result",
            "resolved_by",
            "resolved_at",
            "reason",
            "created_at",
            "started_at",
            "finished_at",
        )


class EffectResolveIn(StrictInputSerializer):
    outcome = serializers.ChoiceField(choices=RESOLUTIONS)
    result = serializers.JSONField(required=False, allow_null=True)
    reason = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)
    request_digest = serializers.RegexField(
        r"^[0-9a-f]{64}$",
        help_text="The digest of the request the reviewer saw (409 when it differs).",
    )


STATE_CHOICES = [(s, s) for s in EFFECT_STATES]
