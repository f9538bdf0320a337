"""Effect shapes (DESIGN section 10)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from effects_app.models import EFFECT_STATES, RESOLUTIONS, EffectRecord
from effects_app.services import committed_result
from openrath_project.api.serializers import OutputModelSerializer, StrictInputSerializer
from openrath_project.jsondiff import json_diff


class AncestorEffectOut(serializers.Serializer):
    """The ancestor run's record an ``effect_in_ancestor`` review (or a reuse) matched."""

    effect = serializers.UUIDField()
    run = serializers.UUIDField()
    checkpoint = serializers.IntegerField(allow_null=True)
    request = serializers.JSONField()
    request_digest = serializers.CharField()
    result = serializers.JSONField(allow_null=True)
    diff = serializers.ListField(
        child=serializers.DictField(),
        help_text="The changes from the ancestor's request to this one ({op, path, old?, new?}).",
    )


class EffectOut(OutputModelSerializer):
    run = serializers.UUIDField(source="run_id")
    project = serializers.UUIDField(source="project_id")
    request = serializers.JSONField()
    result = serializers.JSONField(allow_null=True)
    error = serializers.JSONField(allow_null=True)
    resolution_result = serializers.JSONField(allow_null=True)
    checkpoint = serializers.IntegerField(
        source="checkpoint_seq",
        allow_null=True,
        help_text="The run's checkpoint the step started after (null on older rows).",
    )
    ancestor = serializers.SerializerMethodField(
        help_text="For a forked run: the ancestor's record of the same effect it matched."
    )

    @extend_schema_field(AncestorEffectOut(allow_null=True))
    def get_ancestor(self, obj: EffectRecord) -> dict[str, Any] | None:
        if obj.ancestor_id is None:
            return None
        ancestor = obj.ancestor
        assert ancestor is not None
        return {
            "effect": str(ancestor.id),
            "run": str(ancestor.run_id),
            "checkpoint": ancestor.checkpoint_seq,
            "request": ancestor.request,
            "request_digest": ancestor.request_digest,
            "result": committed_result(ancestor),
            "diff": json_diff(ancestor.request, obj.request),
        }

    class Meta:
        model = EffectRecord
        fields = (
            "id",
            "run",
            "project",
            "step",
            "checkpoint",
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
            "ancestor",
        )


class EffectResolveIn(StrictInputSerializer):
    outcome = serializers.ChoiceField(choices=RESOLUTIONS)
    result = serializers.JSONField(required=False, allow_null=True)
    reason = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)
    request_digest = serializers.RegexField(
        r"^[0-9a-f]{64}$",
        help_text="The digest of the request the reviewer saw (409 when it differs).",
    )
    ancestor_digest = serializers.RegexField(
        r"^[0-9a-f]{64}$",
        required=False,
        help_text="For an effect_in_ancestor review: the digest of the ancestor's request the "
        "reviewer saw (required there; 409 when it differs).",
    )


STATE_CHOICES = [(s, s) for s in EFFECT_STATES]
